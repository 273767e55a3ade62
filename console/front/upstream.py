"""The Triton side of the front (:class:`TritonUpstream`, the :class:`~.protocol.Upstream` the routes call): one
asyncio gRPC client (``tritonclient.grpc.aio``), the ready models, their context lengths, Triton's metrics page,
and one streamed request per answer (a :class:`Generation`, the same on any upstream).

Every answer is one request on a gRPC stream of its own, built by the model's interface adapter
(:mod:`console.clients.interfaces`: the bundled backend, vLLM's, TensorRT-LLM's ensemble, one-string models)
and read with the same fold the console's stream client uses (:class:`~console.clients.stream.Collected`).
The request stream is closed once sent, so Triton ends the call after the model's last response (a final flag
without data included). Leaving a :class:`Generation` early (the client went away) cancels the gRPC call, and
Triton cancels the request: the bundled backend frees its slot at the next step.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter as Tally
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

import grpc
from tritonclient.grpc import aio
from tritonclient.utils import InferenceServerException

from backend_model.contract.adapters import MAX_PARAMETER, PARAMETER
from console.clients import (
    ClientError,
    GenerationParams,
    ModelInfo,
    NotServed,
    Refused,
    Unreachable,
    info_from_config,
    interface_of,
)
from console.clients.embeddings import EmbeddingModel, Vectors, joined
from console.clients.events import TextDelta
from console.clients.failures import error_class, error_message, status_of
from console.clients.interfaces import Outputs
from console.clients.stream import Collected
from console.clients.wire import MAX_NAME
from console.server.health import GRPC_KEY_HEADER, error_codes_safe

from .errors import APIError, ModelError, from_client_error, upstream_error
from .metrics_route import gauge_by_model, triton_page

GRPC_ERROR_HEADER = "triton_grpc_error"  # asks Triton to end a stream on a model's error with the error's gRPC code
MODEL_STATUSES = ("INVALID_ARGUMENT", "INTERNAL", "UNKNOWN")  # the codes of a model's own errors (a Python model's
# TritonError: INVALID_ARG for a bad request, INTERNAL by default)

if TYPE_CHECKING:
    from .protocol import Upstream

REREAD_S = 10.0  # a model the metrics page lacks is looked for again at most this often
RELOAD_TIMEOUT = 600.0  # s a model's reload with other adapters may take (its base loads again)


class Lengths:
    """Each served model's context length (``max_model_len``), read from Triton's metrics page once per model (a model
    the page lacks is looked for again at most every :data:`REREAD_S` seconds)."""

    def __init__(self, metrics_url: str | None) -> None:
        self.metrics_url = metrics_url
        self.known: dict[str, int] = {}
        self.read_at = -REREAD_S

    async def of(self, model: str) -> int | None:
        if model not in self.known and time.monotonic() - self.read_at >= REREAD_S:
            self.read_at = time.monotonic()
            text = await triton_page(self.metrics_url)
            try:
                found = gauge_by_model(text, "qaic_ctx_len") if text else {}
            except ValueError:
                found = {}
            self.known.update({name: int(value) for name, value in found.items()})
        return self.known.get(model)


def with_adapters(config: dict[str, Any], adapters: dict[str, str]) -> dict[str, Any]:
    """A model's Triton config (JSON) serving ``adapters``: its ``max_loras`` follows their count where it was all
    of them, and is cut to it where it was more."""
    parameters = dict(config.get("parameters") or {})
    before = len(json.loads(parameters.get(PARAMETER, {}).get("string_value") or "{}"))
    limit = str(parameters.get(MAX_PARAMETER, {}).get("string_value", "")).strip()
    parameters[PARAMETER] = {"string_value": json.dumps(adapters)}
    if limit.isdigit():
        mixed = len(adapters) if int(limit) >= before else min(int(limit), len(adapters))
        parameters[MAX_PARAMETER] = {"string_value": str(max(mixed, 1))}
    return {**config, "parameters": parameters}


class TritonUpstream:
    """A tritonserver at its gRPC endpoint ``url`` (``host:port``) and its metrics page (``metrics_url``, None: not
    known); made and used inside one event loop. ``key()``: the key of its repository API ('': none known), which
    changing a model's adapters needs."""

    def __init__(self, url: str, metrics_url: str | None = None, key: Callable[[], str] = str) -> None:
        self.url, self.metrics_url, self.key = url, metrics_url, key
        self.lengths = Lengths(metrics_url)
        self._client: aio.InferenceServerClient | None = None
        self._infos: dict[str, ModelInfo] = {}
        self._restricted = False  # its repository index did not answer when its statistics did: read those since
        self._error_headers: dict[str, str] | None = None  # what a stream asks of it (read once: see error_headers)

    @property
    def client(self) -> aio.InferenceServerClient:
        if self._client is None:  # its channel belongs to the loop it is made in
            self._client = aio.InferenceServerClient(self.url)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def context_length(self, model: str) -> int | None:
        """The model's context length: the bundled backend's ``qaic_ctx_len`` gauge (None: no page or no gauge)."""
        return await self.lengths.of(model)

    async def metrics_page(self) -> str | None:
        """Triton's metrics page (None: no URL, or it does not answer)."""
        return await triton_page(self.metrics_url)

    def _unreachable(self, exc: Exception) -> APIError:
        return APIError(503, error_message(exc, self.url, "gRPC"))

    async def error_headers(self) -> dict[str, str]:
        """The headers of a stream: the ``triton_grpc_error`` mode (a model's error ends the call with its code) on a
        tritonserver whose version has it safe, else none (the error's message comes alone)."""
        if self._error_headers is None:
            try:
                version = (await self.client.get_server_metadata(as_json=True, client_timeout=10))["version"]
            except (InferenceServerException, KeyError):
                return {}  # asked again next time
            self._error_headers = {GRPC_ERROR_HEADER: "true"} if error_codes_safe(version) else {}
        return self._error_headers

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
        """The READY models the front can speak to (an interface fits them, or they return vectors)."""
        infos = []
        for name in await self.ready():
            try:
                info = await self.info(name)
                if EmbeddingModel.of(info) is None:
                    interface_of(info)
            except (APIError, ClientError):
                continue
            infos.append(info)
        return infos

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

    async def set_adapters(self, model: str, adapters: dict[str, str]) -> None:
        """Reload ``model`` with ``adapters`` through the repository API, its config given with the load: Triton
        starts new instances (the base model loads again), serves the old ones until those are ready, and lets the
        old ones finish their requests. APIError 403 without the API's key, 400 with Triton's reason when the
        model cannot load so (Triton keeps the old instances serving)."""
        key = self.key()
        try:
            config = (await self.client.get_model_config(model, as_json=True, client_timeout=30))["config"]
            await self.client.load_model(model, headers={GRPC_KEY_HEADER: key} if key else None,
                                         config=json.dumps(with_adapters(config, adapters)),
                                         client_timeout=RELOAD_TIMEOUT)
        except InferenceServerException as exc:
            if error_class(exc) is Unreachable and "restricted" not in str(exc).lower():
                raise self._unreachable(exc) from None
            if not key or "restricted" in str(exc).lower():
                raise APIError(403, "changing a model's adapters needs the tritonserver's repository API key: run "
                                    "the front with serve --openai-port, or on the machine of the console that "
                                    "started the server") from None
            raise APIError(400, f"{model} cannot serve these adapters: {exc.message()}") from None
        finally:
            self._infos.pop(model, None)

    async def responses(self, info: ModelInfo, prompts: list[str], params: GenerationParams,
                        timeout: float | None) -> AsyncGenerator[Outputs, None]:
        """Each response's outputs of one streamed request; ModelError for an error the model sent, APIError for any
        other failure. Closing it early cancels the gRPC call."""
        interface = interface_of(info)
        try:
            inputs = interface.inputs(aio, prompts, params, streaming=True)
        except ClientError as exc:
            raise from_client_error(exc) from None
        request = {"model_name": info.name, "inputs": inputs, "request_id": params.request_id or ""}

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield request

        headers = await self.error_headers()
        call = self.client.stream_infer(requests(), stream_timeout=timeout, headers=headers or None)
        try:
            async for result, error in call:
                if error is not None:
                    raise ModelError(error.message() or "the model failed")
                yield interface.outputs(result, len(prompts))
        except ClientError as exc:  # outputs the front cannot read (502)
            raise from_client_error(exc) from None
        except grpc.RpcError as exc:
            details = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
            if status_of(exc) in MODEL_STATUSES:  # whose fault: the code's class, as every client reads it
                raise ModelError(details or "the model failed", refused=error_class(exc) is Refused) from None
            raise from_client_error(error_class(exc)(f"tritonserver at {self.url}: {details}")) from None
        finally:
            call.cancel()  # a finished call ignores it; one in flight is cancelled on the server


    async def embed(self, info: ModelInfo, items: list[str | list[int]], timeout: float | None) -> Vectors:
        """An embedding model's vectors for ``items``: one request per :meth:`EmbeddingModel.chunks` (the model's
        batch), sent together; APIError for a refusal (400, the model's message) or any other failure."""
        try:
            model = EmbeddingModel.required(info)
            parts = await asyncio.gather(*(self._embed(model, chunk, timeout) for chunk in model.chunks(items)))
        except ClientError as exc:
            raise from_client_error(exc, "input") from None
        return joined(parts)

    async def _embed(self, model: EmbeddingModel, items: Sequence[str | list[int]], timeout: float | None) -> Vectors:
        try:
            result = await self.client.infer(model.info.name, model.inputs(aio, items), outputs=model.outputs(aio),
                                             client_timeout=timeout)
        except InferenceServerException as exc:
            raise error_class(exc)(exc.message() or str(exc)) from None
        return model.read(result, len(items))


class Generation:
    """One request for one prompt or several (the model's batch) on ``upstream``: iterate :meth:`deltas` for each
    response's new text per prompt, or :meth:`pieces` for the first prompt's (and :meth:`tokens` for the
    log-probability entries that came since), then read the finish reasons and the token counts the model sent."""

    def __init__(self, upstream: Upstream, info: ModelInfo, prompts: str | Sequence[str], params: GenerationParams,
                 timeout: float | None, waiting: Tally[str] | None = None) -> None:
        self.upstream, self.info, self.params, self.timeout = upstream, info, params, timeout
        self.waiting = Tally() if waiting is None else waiting  # requests with no response yet, by LoRA adapter
        # ("": the base model); this one counts there until its first response
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
        """Each response's new text, per prompt; APIError on failure (a model's error: whose, by
        :func:`~.errors.upstream_error`)."""
        once = not self.info.decoupled  # a batch model answers once, with the whole text
        responses = self.upstream.responses(self.info, self.prompts, self.params, self.timeout)
        adapter = self.params.get("lora_name") or ""
        self.waiting[adapter] += 1
        try:
            async for outputs in responses:
                if not self.responses:
                    self.waiting[adapter] -= 1
                self.responses += 1
                yield list(self.collected.add(outputs, 0.0, once))
        except ModelError as exc:
            raise upstream_error(exc, answered=bool(self.text)) from None
        finally:
            if not self.responses:
                self.waiting[adapter] -= 1
            await responses.aclose()
