"""vLLM's tokenizer routes, with vLLM's request and response shapes: ``POST /tokenize`` (a prompt, or chat messages
through the model's template), ``POST /detokenize`` and ``GET /tokenizer_info`` (what lm-evaluation-harness's remote
tokenizer reads: the special tokens and the chat template).

A model's tokenizer is the front's (:mod:`console.front.tokenizers`). ``model`` may be left out, as lm-eval leaves it
out, when the served models share one tokenizer. A text to tokenize is held to the limit the prompt routes meet at the
bundled backend (:func:`backend_model.engine.detok.max_prompt_bytes`: the bytes over which a text surely has more
tokens than the model's context holds), so an oversized one is refused at once, naming the limit. Where the context
length is not known (no metrics page), only the body's limit holds, as on the prompt routes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request

from backend_model.engine.detok import max_prompt_bytes
from console.clients import ClientError, ModelInfo

from .. import mapping
from ..errors import APIError, bad_request
from ..protocol import DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse, validated
from ..state import Front
from ..wire import read_body

SPECIAL = ("bos_token", "eos_token", "pad_token", "unk_token")


async def model_and_tokenizer(front: Front, model: str | None, param: str = "model") -> tuple[ModelInfo, Any]:
    """The model named (an adapter: its base model's), or, unnamed, the one tokenizer every served model shares, and
    its tokenizer; APIError."""
    infos = [(await front.served.target(model)).info] if model else await front.upstream.models()
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


def tokenizer_info(tokenizer: Any) -> dict[str, Any]:
    """vLLM's ``/tokenizer_info``: the tokenizer's settings that are plain JSON, its class, special tokens and chat
    template (file paths left out)."""
    info: dict[str, Any] = {k: v for k, v in (getattr(tokenizer, "init_kwargs", None) or {}).items()
            if isinstance(v, str | int | float | bool) and not k.endswith("_file") and k != "name_or_path"}
    info.update({name: getattr(tokenizer, name, None) for name in SPECIAL})
    info["tokenizer_class"] = type(tokenizer).__name__
    info["chat_template"] = getattr(tokenizer, "chat_template", None)
    return info


def held(text: str, tokenizer: Any, context: int | None, param: str) -> None:
    """APIError 400 naming ``param`` when ``text`` is longer than the model's ``context`` tokens can hold (None: not
    known, as the prompt routes then leave it to the model too)."""
    limit = max_prompt_bytes(tokenizer, None, context) if context else None
    size = len(text.encode())
    if limit is not None and size > limit:
        raise bad_request(f"{param} is {size} bytes, over the {limit} bytes the model's context (max_model_len "
                          f"{context}) holds at most: shorten it", param)


async def tokenized(front: Front, request: TokenizeRequest) -> TokenizeResponse:
    info, tokenizer = await model_and_tokenizer(front, request.model)
    known = await front.upstream.context_length(info.name)
    if request.messages is not None:
        if request.prompt is not None:
            raise bad_request("give prompt or messages, not both", "messages")
        images: list[Any] = []
        messages, param = mapping._messages({"messages": request.messages}, images), "messages"
        if images:
            raise bad_request("messages with images are not tokenized here: only the model counts an image's "
                              "tokens (the answers' usage has them)", "messages")
        try:
            text = await asyncio.to_thread(tokenizer.apply_chat_template, messages, tokenize=False,
                                           add_generation_prompt=request.add_generation_prompt)
        except Exception as exc:  # the chat template's own refusal
            raise bad_request(f"the chat template of {info.name} refused the messages: {exc}", "messages") from None
        special = bool(request.add_special_tokens)
    elif request.prompt is not None:
        text, param, special = request.prompt, "prompt", request.add_special_tokens is not False
    else:
        raise bad_request("prompt must be a string (or give messages)", "prompt")
    held(text, tokenizer, known, param)
    tokens = (await asyncio.to_thread(tokenizer, text, add_special_tokens=special))["input_ids"]
    return TokenizeResponse(count=len(tokens), max_model_len=known, tokens=tokens,
                            token_strs=tokenizer.convert_ids_to_tokens(tokens) if request.return_token_strs else None)


def router(front: Front) -> APIRouter:
    routes = APIRouter()

    @routes.post("/tokenize")
    async def tokenize(request: Request) -> TokenizeResponse:
        return await tokenized(front, validated(TokenizeRequest, await read_body(request)))

    @routes.post("/detokenize")
    async def detokenize(request: Request) -> DetokenizeResponse:
        body = validated(DetokenizeRequest, await read_body(request))
        _, tokenizer = await model_and_tokenizer(front, body.model)
        tokens = mapping.token_ids(body.tokens, len(tokenizer), "tokens")
        return DetokenizeResponse(prompt=await asyncio.to_thread(tokenizer.decode, tokens))

    @routes.get("/tokenizer_info")
    async def info(model: str | None = None) -> dict[str, Any]:
        return tokenizer_info((await model_and_tokenizer(front, model))[1])

    return routes
