"""vLLM's tokenizer routes on the front, with vLLM's request and response shapes: ``POST /tokenize`` (a prompt, or chat
messages through the model's template), ``POST /detokenize`` and ``GET /tokenizer_info`` (what lm-evaluation-harness's
remote tokenizer reads: the special tokens and the chat template); and each model's ``max_model_len``.

A model's tokenizer is the front's (:mod:`.tokenizers`). ``model`` may be left out, as lm-eval leaves it out, when the
served models share one tokenizer. ``max_model_len`` is the bundled backend's ``qaic_ctx_len`` gauge on Triton's
metrics page (the compile's ctx_len), read once per model; None where the page or the gauge is absent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Request

from console.clients import ClientError, ModelInfo

from . import mapping
from .errors import APIError, bad_request
from .metrics_route import gauge_by_model, triton_page
from .wire import read_body

TOKENIZE_FIELDS = {"model", "prompt", "messages", "add_special_tokens", "add_generation_prompt", "return_token_strs"}
DETOKENIZE_FIELDS = {"model", "tokens"}
SPECIAL = ("bos_token", "eos_token", "pad_token", "unk_token")
REREAD_S = 10.0


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


async def model_and_tokenizer(front: Any, model: Any, param: str = "model") -> tuple[ModelInfo, Any]:
    """The model named (or, unnamed, the one tokenizer every served model shares) and its tokenizer; APIError."""
    if model is not None and not isinstance(model, str):
        raise bad_request("model must be a model name (GET /v1/models lists them)", "model")
    infos = [await front.upstream.info(model)] if model else await front.upstream.models()
    if not infos:
        raise APIError(404, "no model is served here", "model", "model_not_found")
    loaded = []
    for info in infos:
        try:
            loaded.append((info, await front.tokenizers.load(info)))
        except ClientError as exc:
            if model:
                raise bad_request(f"{exc} (qaic-console openai --tokenizer {info.name}=FOLDER)", param) from None
    if not loaded or len({id(tokenizer) for _, tokenizer in loaded}) > 1:
        names = ", ".join(info.name for info in infos)
        raise bad_request(f"model is required: the served models ({names}) do not share one tokenizer", "model")
    return loaded[0]


def _known(body: Any, fields: set[str]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    for name in body:
        if name not in fields:
            raise bad_request(f"unrecognized request argument supplied: {name[:60]}", name[:60])
    return body


def _flag(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise bad_request(f"{name} must be true or false", name)
    return value


def token_ids(value: Any, vocab: int, name: str) -> list[int]:
    """A list of token ids of a ``vocab``-token vocabulary; APIError 400 naming ``name``."""
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise bad_request(f"{name} must be a list of token ids (integers)", name)
    bad = next((t for t in value if not 0 <= t < vocab), None)
    if bad is not None:
        raise bad_request(f"{name} has token id {bad}, outside the vocabulary (0 to {vocab - 1})", name)
    return value


def tokenizer_info(tokenizer: Any) -> dict[str, Any]:
    """vLLM's ``/tokenizer_info``: the tokenizer's settings that are plain JSON, its class, special tokens and chat
    template (file paths left out)."""
    info: dict[str, Any] = {k: v for k, v in (getattr(tokenizer, "init_kwargs", None) or {}).items()
            if isinstance(v, str | int | float | bool) and not k.endswith("_file") and k != "name_or_path"}
    info.update({name: getattr(tokenizer, name, None) for name in SPECIAL})
    info["tokenizer_class"] = type(tokenizer).__name__
    info["chat_template"] = getattr(tokenizer, "chat_template", None)
    return info


def tokenize_router(front: Any, dependencies: Sequence[Any]) -> APIRouter:
    """The routes, answering for ``front`` (``dependencies``: the API key's check)."""
    router = APIRouter(dependencies=list(dependencies))

    @router.post("/tokenize")
    async def tokenize(request: Request) -> dict[str, Any]:
        body = _known(await read_body(request), TOKENIZE_FIELDS)
        info, tokenizer = await model_and_tokenizer(front, body.get("model"))
        strs = _flag(body, "return_token_strs", False)
        if "messages" in body:
            if "prompt" in body:
                raise bad_request("give prompt or messages, not both", "messages")
            messages = mapping._messages(body)
            special = _flag(body, "add_special_tokens", False)
            generation = _flag(body, "add_generation_prompt", True)

            def encode() -> list[int]:
                text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)
                return tokenizer(text, add_special_tokens=special)["input_ids"]
        else:
            prompt = body.get("prompt")
            if not isinstance(prompt, str):
                raise bad_request("prompt must be a string (or give messages)", "prompt")
            special = _flag(body, "add_special_tokens", True)

            def encode() -> list[int]:
                return tokenizer(prompt, add_special_tokens=special)["input_ids"]

        try:
            tokens = await asyncio.to_thread(encode)
        except Exception as exc:  # the chat template's own refusal
            raise bad_request(f"the chat template of {info.name} refused the messages: {exc}", "messages") from None
        return {"count": len(tokens), "max_model_len": await front.lengths.of(info.name), "tokens": tokens,
                "token_strs": tokenizer.convert_ids_to_tokens(tokens) if strs else None}

    @router.post("/detokenize")
    async def detokenize(request: Request) -> dict[str, Any]:
        body = _known(await read_body(request), DETOKENIZE_FIELDS)
        _, tokenizer = await model_and_tokenizer(front, body.get("model"))
        tokens = token_ids(body.get("tokens"), len(tokenizer), "tokens")
        return {"prompt": await asyncio.to_thread(tokenizer.decode, tokens)}

    @router.get("/tokenizer_info")
    async def info(model: str | None = None) -> dict[str, Any]:
        return tokenizer_info((await model_and_tokenizer(front, model))[1])

    return router
