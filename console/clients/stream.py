"""Streaming requests: gRPC streaming with tritonclient (decoupled models answer once per step).

One call opens one gRPC stream (``start_stream``), sends one request with
``enable_empty_final_response=True`` and reads responses until the one flagged
``triton_final_response``. Timeouts, :meth:`StreamCall.cancel` and an abandoned iteration all end
with ``stop_stream(cancel_requests=True)``, which cancels the request on the server. A model that is
not decoupled answers the stream once: its replies then carry batch figures (no ttft, no itl).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator, Sequence
from typing import Any

from .call import Arrived, Broke, Call, Probe
from .errors import ClientError
from .events import Event, Failure, ModelInfo, Reply, TextDelta, Timeouts
from .failures import wire_error
from .interfaces import Interface, Outputs
from .params import GenerationParams
from .stats import reply_stats
from .wire import is_final


class Collected:
    """What a stream's responses said so far, per prompt: text, arrival times, last reasons and counts."""

    def __init__(self, interface: Interface, prompts: list[str]) -> None:
        self.interface, self.prompts = interface, prompts
        self.texts = [""] * len(prompts)
        self.logprobs: list[list[dict[str, Any]]] | None = None  # every entry so far, when the model sends them
        self.arrivals: list[list[float]] = [[] for _ in prompts]
        self.last: Outputs = {}
        self.sums = interface.counts_are_deltas(streaming=True)

    def add(self, outputs: Outputs, at: float, once: bool) -> Iterator[TextDelta]:
        """The new text of one response (``once``: the model answers once, the whole text)."""
        entries = outputs.get("logprobs")
        if entries is not None:  # each response carries its own tokens' entries
            self.logprobs = [[*old, *new] for old, new in zip(self.logprobs or [[] for _ in entries], entries)]
        for i, piece in enumerate(outputs["text_output"] or ()):
            prompt = self.prompts[i]
            if once:
                new = self.interface.finish(prompt, piece)
            else:
                new = self.interface.new_text(prompt, self.texts[i], piece)
            if new:
                self.arrivals[i].append(at)
                self.texts[i] += new
                yield TextDelta(i, new, at, len(self.arrivals[i]) == 1, None if entries is None else entries[i])
        for name, values in outputs.items():
            if name in ("text_output", "logprobs") or values is None:
                continue
            earlier = self.last.get(name)
            if self.sums and name == "output_tokens" and earlier is not None:
                values = [a + b for a, b in zip(earlier, values)]
            self.last[name] = values

    def value(self, name: str, i: int) -> Any:
        values = self.last.get(name)
        return values[i] if values else None


class StreamCall(Call):
    """A streaming request: iterate for TextDelta events, then one Reply per prompt (or a Failure)."""

    def _request(self) -> Iterator[Event]:
        import tritonclient.grpc as grpcclient

        n = len(self.prompts)
        client = grpcclient.InferenceServerClient(self.url)
        t0 = last = time.perf_counter()

        def callback(result: Any = None, error: Any = None) -> None:  # tritonclient passes keywords
            self._arrive(Broke(error) if error is not None else Arrived(result))

        try:
            info, interface = self.model_info(), self.interface()
            once = not info.decoupled  # a batch model answers the stream once, with the whole text
            collected = Collected(interface, self.prompts)
            inputs = interface.inputs(grpcclient, self.prompts, self.params, streaming=True)
            client.start_stream(callback=callback, stream_timeout=self.timeouts.backstop())
            t0 = last = time.perf_counter()
            client.async_stream_infer(self.model, inputs, request_id=self.request_id,
                                      enable_empty_final_response=True)
            while True:
                got = self._next(t0, last)
                if isinstance(got, Failure):
                    yield got
                    return
                if isinstance(got, Broke):
                    lost = last > t0  # a response had come: the server went away mid-stream
                    yield Failure.of(wire_error(got.error, self.url, "gRPC", lost), got.at - t0)
                    return
                assert isinstance(got, Arrived)
                last = got.at
                yield from collected.add(interface.outputs(got.data, n), last - t0, once)
                if is_final(got.data):
                    yield from self._replies(info, collected, last - t0)
                    return
        except ClientError as exc:
            yield Failure.of(exc, time.perf_counter() - t0)
        except Exception as exc:  # tritonclient raises on a stream that is no longer valid
            error = self._reported_error() or exc  # the callback got the real reason
            yield Failure.of(wire_error(error, self.url, "gRPC"), time.perf_counter() - t0)
        finally:
            client.stop_stream(cancel_requests=True)  # bounded; a no-op for a finished request
            client.close()

    def _reported_error(self) -> BaseException | None:
        """An error the stream callback already handed over (e.g. the server is unreachable), if any."""
        try:
            client_wait = time.monotonic() + 1.0
            while time.monotonic() < client_wait:
                item = self._queue.get(timeout=max(client_wait - time.monotonic(), 0.0))
                if isinstance(item, Broke):
                    return item.error
        except queue.Empty:
            pass
        return None

    def _replies(self, info: ModelInfo, collected: Collected, latency: float) -> Iterator[Reply]:
        for i, prompt in enumerate(self.prompts):
            stats = reply_stats(collected.arrivals[i], latency, collected.value("output_tokens", i),
                                collected.value("input_tokens", i), streamed=info.decoupled)
            yield Reply(i, prompt, collected.texts[i], collected.value("finish_reason", i) or "", stats,
                        None if collected.logprobs is None else collected.logprobs[i])


def stream(url: str, model: str | ModelInfo, prompts: Sequence[str], params: GenerationParams | None = None,
           timeouts: Timeouts | None = None, probe: Probe | None = None) -> StreamCall:
    """A streaming call over gRPC; iterate it for events, ``cancel()`` from any thread. ``probe`` checks a
    stream that went quiet (see :data:`~.call.Probe`)."""
    return StreamCall(url, model, prompts, params or GenerationParams(), timeouts or Timeouts(), probe)
