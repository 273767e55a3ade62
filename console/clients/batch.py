"""One-response requests: Triton inference over HTTP (or gRPC) and the HTTP generate endpoint.

Every call runs in a helper thread and is awaited with the network timeout, so a caller (a UI's
stop key) can :meth:`Call.cancel` it from any thread. gRPC calls are cancelled on the server too; an HTTP
call's connection is closed at once, but Triton cannot cancel an HTTP request: the server finishes it. A decoupled
model with a ``stream`` switch (vLLM, TensorRT-LLM) is asked not to stream: over HTTP through the
generate endpoint (Triton's HTTP inference refuses decoupled models), over gRPC on a stream.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import replace
from typing import Any

from .abortable import Abortable
from .call import Arrived, Broke, Call, Probe
from .errors import BadRequest, ClientError
from .events import Event, Failure, ModelInfo, Reply, Timeouts
from .failures import status_class, wire_error
from .interfaces import Outputs
from .params import GenerationParams
from .stats import reply_stats
from .wire import PROTOCOLS, generate_answer, is_final

HTTP_CANCEL_NOTE = "Triton cannot cancel HTTP requests: the server finishes this one (gRPC can cancel)"


def _nothing() -> None:
    pass


class BatchCall(Call):
    """One inference request answered once (batch models): over HTTP, gRPC, or the generate endpoint."""

    def __init__(self, url: str, model: str | ModelInfo, prompts: Sequence[str], params: GenerationParams,
                 timeouts: Timeouts, protocol: str = "http", generate: bool = False,
                 probe: Probe | None = None) -> None:
        if protocol not in PROTOCOLS:
            raise BadRequest(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
        super().__init__(url, model, prompts, params, replace(timeouts, idle=None), probe)  # one response: no idle
        self.protocol = "http" if generate else protocol
        self.generate = generate
        if self.protocol == "http":
            self.cancel_note = HTTP_CANCEL_NOTE

    def _request(self) -> Iterator[Event]:
        t0 = time.perf_counter()
        try:
            self.model_info().check_batch("stream it instead")
            canceller, closer = self._start()
        except ClientError as exc:
            yield Failure.of(exc, time.perf_counter() - t0)
            return
        finished = False
        try:
            got = self._next(t0, t0)
            if isinstance(got, Failure):  # timeout, cancel(), or a backend that died or was reloaded
                yield got
                return
            finished = True
            elapsed = got.at - t0
            if isinstance(got, Broke):
                yield Failure.of(wire_error(got.error, self.url, self.protocol), elapsed)
            else:
                assert isinstance(got, Arrived)
                yield from self._replies(got.data, elapsed)
        finally:
            if not finished:
                canceller()
            closer()

    def _replies(self, outputs: Outputs, elapsed: float) -> Iterator[Reply]:
        texts = outputs.get("text_output") or [""] * len(self.prompts)
        for i, prompt in enumerate(self.prompts):
            def pick(name: str, default: Any = None, i: int = i) -> Any:
                values = outputs.get(name)
                return values[i] if values is not None else default

            stats = reply_stats((), elapsed, pick("output_tokens"), pick("input_tokens"), streamed=False)
            yield Reply(i, prompt, self.interface().finish(prompt, texts[i]), pick("finish_reason", ""), stats,
                        pick("logprobs"))

    def _start(self) -> tuple[Callable[[], None], Callable[[], None]]:
        """Send the request; its outcome lands in the queue. Returns (server-side canceller, closer)."""
        backstop = self.timeouts.backstop()
        decoupled = self.model_info().decoupled  # answers once only when told not to stream
        if self.protocol == "grpc":
            return self._start_grpc_stream(backstop) if decoupled else self._start_grpc(backstop)
        ask = self._generate if self.generate or decoupled else self._infer
        running = Abortable()  # a cancel or a timeout closes the HTTP connection at once
        threading.Thread(target=self._work, args=(running, ask, backstop), name="qc-batch", daemon=True).start()
        return running.abort, _nothing

    def _work(self, running: Abortable, ask: Callable[[float], Coroutine[Any, Any, Outputs]], timeout: float) -> None:
        """The helper thread: the HTTP request on an event loop of its own (aiohttp). Not tritonclient's gevent
        client: a call the caller gave up on left that daemon thread waiting, and gevent's libev loop, woken by the
        answer as the process exited, called into the finalized interpreter and crashed it (exit 139)."""
        import aiohttp

        try:
            self._arrive(Arrived(running.run(ask(timeout))))
        except asyncio.CancelledError:
            pass  # given up on: the caller has said why already
        except aiohttp.ServerDisconnectedError:  # not an OSError: the server went away mid-request
            gone = ConnectionResetError("the server closed the connection")
            self._arrive(Broke(wire_error(gone, self.url, self.protocol, lost=True)))
        except Exception as exc:
            self._arrive(Broke(exc))

    async def _infer(self, timeout: float) -> Outputs:
        """Triton HTTP inference (tritonclient's aiohttp client)."""
        import tritonclient.http.aio as aioclient

        async with aioclient.InferenceServerClient(self.url, conn_timeout=timeout) as client:  # closed after
            inputs = self.interface().inputs(aioclient, self.prompts, self.params, streaming=False)
            result = await client.infer(self.model, inputs, request_id=self.request_id)
        return self.interface().outputs(result, len(self.prompts))

    async def _generate(self, timeout: float) -> Outputs:
        """``POST /v2/models/<model>/generate`` (a decoupled model with a ``stream`` switch answers once there)."""
        import aiohttp

        interface = self.interface()
        body = interface.generate_body(self.prompts, self.params, self.request_id)
        url = f"http://{self.url}/v2/models/{self.model}/generate"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session, \
                session.post(url, json=body) as resp:
            status, reason, data = resp.status, resp.reason or "", generate_answer(await resp.read())
        if status != 200:
            raise status_class(status)(f"HTTP {status}: {data.get('error', reason)}")
        return interface.parse_generate(data, len(self.prompts))

    def _start_grpc(self, timeout: float) -> tuple[Callable[[], None], Callable[[], None]]:
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(self.url)
        interface, n = self.interface(), len(self.prompts)

        def done(result: Any = None, error: Any = None) -> None:
            try:
                self._arrive(Broke(error) if error is not None else Arrived(interface.outputs(result, n)))
            except Exception as exc:
                self._arrive(Broke(exc))

        try:
            inputs = interface.inputs(grpcclient, self.prompts, self.params, streaming=False)
            context = client.async_infer(
                self.model, inputs, callback=done, request_id=self.request_id, client_timeout=timeout
            )
        except Exception as exc:
            self._arrive(Broke(exc))
            return _nothing, client.close
        return context.cancel, client.close

    def _start_grpc_stream(self, timeout: float) -> tuple[Callable[[], None], Callable[[], None]]:
        """A decoupled model's one answer on a gRPC stream (``stream`` false); its last text is the answer."""
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(self.url)
        interface, n = self.interface(), len(self.prompts)
        answer: list[Outputs] = []

        def done(result: Any = None, error: Any = None) -> None:
            try:
                if error is not None:
                    self._arrive(Broke(error))
                    return
                outputs = interface.outputs(result, n)
                if outputs["text_output"] is not None:
                    answer[:] = [outputs]
                if is_final(result):
                    self._arrive(Arrived(answer[0] if answer else {"text_output": None}))
            except Exception as exc:
                self._arrive(Broke(exc))

        def stop() -> None:
            client.stop_stream(cancel_requests=True)
            client.close()

        try:
            client.start_stream(callback=done, stream_timeout=timeout)
            client.async_stream_infer(self.model, interface.inputs(grpcclient, self.prompts, self.params,
                                                                   streaming=False),
                                      request_id=self.request_id, enable_empty_final_response=True)
        except Exception as exc:
            self._arrive(Broke(exc))
        return _nothing, stop

def infer(url: str, model: str | ModelInfo, prompts: Sequence[str], params: GenerationParams | None = None,
          timeouts: Timeouts | None = None, protocol: str = "http", probe: Probe | None = None) -> BatchCall:
    """A batch inference call (one response at the end); iterate it for Reply events or a Failure.

    ``protocol="grpc"`` makes timeouts and :meth:`Call.cancel` cancel the request on the server; ``probe``
    checks a call that went quiet (see :data:`~.call.Probe`).
    """
    return BatchCall(url, model, prompts, params or GenerationParams(), timeouts or Timeouts(), protocol=protocol,
                     probe=probe)


def generate(url: str, model: str | ModelInfo, prompts: Sequence[str], params: GenerationParams | None = None,
             timeouts: Timeouts | None = None, probe: Probe | None = None) -> BatchCall:
    """A call to ``POST /v2/models/<model>/generate`` (HTTP; batch models only)."""
    return BatchCall(url, model, prompts, params or GenerationParams(), timeouts or Timeouts(), generate=True,
                     probe=probe)
