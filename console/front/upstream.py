"""The Triton side of the front: one asyncio gRPC client (``tritonclient.grpc.aio``), the ready models, and one
streamed request per answer.

Every answer is one request on a gRPC stream of its own, built by the model's interface adapter
(:mod:`console.clients.interfaces`: the bundled backend, vLLM's, TensorRT-LLM's ensemble, one-string models)
and read with the same fold the console's stream client uses (:class:`~console.clients.stream.Collected`).
The request stream is closed once sent, so Triton ends the call after the model's last response (a final flag
without data included). Leaving a :class:`Generation` early (the client went away) cancels the gRPC call, and
Triton cancels the request: the bundled backend frees its slot at the next step.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

import grpc
from tritonclient.grpc import aio
from tritonclient.utils import InferenceServerException

from console.clients import (
    ClientError,
    GenerationParams,
    ModelInfo,
    NotServed,
    Unreachable,
    info_from_config,
    interface_of,
)
from console.clients.events import TextDelta
from console.clients.failures import error_class, error_message
from console.clients.stream import Collected
from console.clients.wire import MAX_NAME

from .errors import APIError, from_client_error, upstream_error


class Upstream:
    """A tritonserver at its gRPC endpoint ``url`` (``host:port``); made and used inside one event loop."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._client: aio.InferenceServerClient | None = None
        self._infos: dict[str, ModelInfo] = {}
        self._restricted = False  # its repository index did not answer when its statistics did: read those since

    @property
    def client(self) -> aio.InferenceServerClient:
        if self._client is None:  # its channel belongs to the loop it is made in
            self._client = aio.InferenceServerClient(self.url)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    def _unreachable(self, exc: Exception) -> APIError:
        return APIError(503, error_message(exc, self.url, "gRPC"))

    async def live(self) -> bool:
        try:
            return bool(await self.client.is_server_live(client_timeout=5))
        except (InferenceServerException, grpc.RpcError):
            return False

    async def ready(self) -> list[str]:
        """The READY models' names (503 when Triton does not answer)."""
        ready = await self._loaded() if self._restricted else await self._indexed()
        if ready is None:  # a console's tritonserver keeps its repository API to itself
            ready = await self._loaded()
            self._restricted = True
        for name in set(self._infos) - set(ready):  # gone or reloading: its config is read again when back
            del self._infos[name]
        return ready

    async def _indexed(self) -> list[str] | None:
        """The READY models' names from the repository index; None when it does not answer (restricted: Triton
        says UNAVAILABLE then, as for a server that is down, which :meth:`_loaded` tells apart)."""
        try:
            index = await self.client.get_model_repository_index(as_json=True, client_timeout=10)
        except InferenceServerException:
            return None
        return sorted({m["name"] for m in index.get("models", []) if m.get("state") == "READY"})

    async def _loaded(self) -> list[str]:
        """The loaded models' names from their statistics (open where the repository API is restricted)."""
        try:
            stats = await self.client.get_inference_statistics(as_json=True, client_timeout=10)
        except InferenceServerException as exc:
            raise self._unreachable(exc) from None
        return sorted({m["name"] for m in stats.get("model_stats", [])})

    async def models(self) -> list[ModelInfo]:
        """The READY models the front can speak to (an interface fits them)."""
        infos = []
        for name in await self.ready():
            try:
                info = await self.info(name)
                interface_of(info)
            except (APIError, ClientError):
                continue
            infos.append(info)
        return infos

    async def named(self, model: str) -> ModelInfo:
        """The model a request names; none named: the one model served, else 400 naming the served ones."""
        if model:
            return await self.info(model)
        served = await self.models()
        if len(served) != 1:
            names = ", ".join(info.name for info in served) or "none"
            raise APIError(400, f"model is required unless exactly one model is served (served: {names})", "model")
        return served[0]

    async def info(self, model: str) -> ModelInfo:
        """A served model's config (read once while it stays ready); 404 naming the served ones when absent."""
        if model in self._infos:
            return self._infos[model]
        if not model or len(model.encode()) > MAX_NAME:
            raise from_client_error(NotServed(f"model {model[:60]!r} is not served here"))
        try:
            config = (await self.client.get_model_config(model, as_json=True, client_timeout=10))["config"]
        except InferenceServerException as exc:
            if error_class(exc) is Unreachable:
                raise self._unreachable(exc) from None
            served = ", ".join(await self.ready()) or "no ready model"
            raise from_client_error(NotServed(f"model {model[:60]!r} is not served here (served: {served})")) \
                from None
        info = self._infos[model] = info_from_config(model, config)
        return info

    def generate(self, info: ModelInfo, prompts: str | Sequence[str], params: GenerationParams,
                 timeout: float | None) -> Generation:
        return Generation(self, info, prompts, params, timeout)


class Generation:
    """One request for one prompt or several (the model's batch): iterate :meth:`deltas` for each response's new text
    per prompt, or :meth:`pieces` for the first prompt's (and :meth:`tokens` for the log-probability entries that came
    since), then read the finish reasons and the token counts the model sent."""

    def __init__(self, upstream: Upstream, info: ModelInfo, prompts: str | Sequence[str], params: GenerationParams,
                 timeout: float | None) -> None:
        self.upstream, self.info, self.params, self.timeout = upstream, info, params, timeout
        self.prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        self.interface = interface_of(info)
        self.collected = Collected(self.interface, self.prompts)
        self.responses = 0
        self.taken = [0] * len(self.prompts)  # log-probability entries :meth:`tokens` gave, per prompt

    @property
    def prompt(self) -> str:
        return self.prompts[0]

    @property
    def text(self) -> str:
        return self.collected.texts[0]

    def value(self, name: str, i: int = 0) -> Any:
        return self.collected.value(name, i)

    def tokens(self, i: int = 0) -> list[dict[str, Any]] | None:
        """Prompt ``i``'s ``logprobs`` entries that came since the last call (None: the model sent none)."""
        if self.collected.logprobs is None:
            return None
        new = self.collected.logprobs[i][self.taken[i]:]
        self.taken[i] += len(new)
        return new

    async def pieces(self) -> AsyncGenerator[str, None]:
        """The first prompt's new text of each response (empty when a step decoded no whole character); APIError on
        failure."""
        deltas = self.deltas()
        try:
            async for new in deltas:
                yield "".join(d.text for d in new if d.index == 0)
        finally:
            await deltas.aclose()

    async def deltas(self) -> AsyncGenerator[list[TextDelta], None]:
        """Each response's new text, per prompt; APIError on failure."""
        try:
            inputs = self.interface.inputs(aio, self.prompts, self.params, streaming=True)
        except ClientError as exc:
            raise from_client_error(exc) from None
        request = {"model_name": self.info.name, "inputs": inputs, "request_id": self.params.request_id or ""}

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield request

        call = self.upstream.client.stream_infer(requests(), stream_timeout=self.timeout)
        once = not self.info.decoupled  # a batch model answers once, with the whole text
        try:
            async for result, error in call:
                if error is not None:
                    raise upstream_error(error.message() or "the model failed", answered=bool(self.text))
                self.responses += 1
                outputs = self.interface.outputs(result, len(self.prompts))
                yield list(self.collected.add(outputs, 0.0, once))
        except ClientError as exc:  # outputs the front cannot read (502)
            raise from_client_error(exc) from None
        except grpc.RpcError as exc:
            details = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
            error = error_class(exc)(f"tritonserver at {self.upstream.url}: {details}")
            raise from_client_error(error) from None
        finally:
            call.cancel()  # a finished call ignores it; one in flight is cancelled on the server
