"""vLLM's runtime LoRA routes: ``POST /v1/load_lora_adapter`` {"lora_name", "lora_path"} and ``POST
/v1/unload_lora_adapter`` {"lora_name"}, with vLLM's answers (200 and a sentence, 400 for a bad or repeated name, 404
for an adapter not served), served where vLLM serves them: with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` set
(:func:`enabled`), behind the front's key.

An adapter is added to or removed from its base model's ``lora_adapters`` and the model is reloaded with that config
(:meth:`~..protocol.Upstream.set_adapters`): the base model loads again beside the old instances, which serve until
the new ones are ready and finish the requests they hold. The folder is the backend's to check: it must lie inside
the model's folder, where the operator put it (``backend_model.contract.adapters.folder_in``), and hold a LoRA
adapter that fits the base; a folder refused leaves the model serving what it did. One change runs at a time.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

from backend_model.contract.adapters import AdapterError, check_name
from console.clients import ModelInfo

from ..errors import APIError, bad_request
from ..protocol import LoadLoRAAdapterRequest, UnloadLoRAAdapterRequest, validated
from ..served import names
from ..state import Front
from ..wire import read_body

ENABLE_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"  # vLLM's switch of these routes


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the runtime LoRA routes are served (vLLM's rule: the variable is 1 or true)."""
    return environ.get(ENABLE_ENV, "0").strip().lower() in ("1", "true")


def base_of(infos: list[ModelInfo], named: str | None) -> ModelInfo:
    """The model a new adapter goes to: the one named, else the one model that takes adapters (APIError)."""
    takers = [info for info in infos if info.input("lora_name") is not None]
    if named is not None:
        found = next((info for info in takers if info.name == named), None)
        if found is None:
            served = ", ".join(info.name for info in takers) or "none"
            raise APIError(404, f"{named[:60]!r} is not a served model that takes LoRA adapters (those served: "
                                f"{served})", "base_model_name", "model_not_found")
        return found
    if len(takers) != 1:
        served = ", ".join(info.name for info in takers) or "none"
        raise bad_request(f"base_model_name is required unless exactly one served model takes LoRA adapters (those "
                          f"served: {served})", "base_model_name")
    return takers[0]


def router(front: Front) -> APIRouter:
    routes = APIRouter()
    changing = asyncio.Lock()

    @routes.post("/v1/load_lora_adapter")
    async def load_lora_adapter(request: Request) -> PlainTextResponse:
        body = validated(LoadLoRAAdapterRequest, await read_body(request))
        name, path = body.lora_name, body.lora_path
        if not name or not path:
            raise bad_request("Both 'lora_name' and 'lora_path' must be provided.")
        try:
            check_name(name)
        except AdapterError as exc:
            raise bad_request(str(exc), "lora_name") from None
        async with changing:
            infos = await front.upstream.models()
            holder = next((info for info in infos if name in info.adapters), None)
            if name in names(infos) and not (body.load_inplace and holder is not None):
                raise bad_request(f"The lora adapter '{name}' has already been loaded. If you want to load the "
                                  "adapter in place, set 'load_inplace' to True.", "lora_name")
            base = holder or base_of(infos, body.base_model_name)
            await front.upstream.set_adapters(base.name, {**base.adapters, name: path})
        return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")

    @routes.post("/v1/unload_lora_adapter")
    async def unload_lora_adapter(request: Request) -> PlainTextResponse:
        name = validated(UnloadLoRAAdapterRequest, await read_body(request)).lora_name
        if not name:
            raise bad_request("'lora_name' needs to be provided to unload a LoRA adapter.", "lora_name")
        async with changing:
            base = next((info for info in await front.upstream.models() if name in info.adapters), None)
            if base is None:
                raise APIError(404, f"The lora adapter '{name}' cannot be found.", "lora_name", "model_not_found")
            await front.upstream.set_adapters(base.name, {k: v for k, v in base.adapters.items() if k != name})
        return PlainTextResponse(f"Success: LoRA adapter '{name}' removed successfully.")

    return routes
