"""The models' tokenizers on the front's side: chat templates applied here (as vLLM does) and, for a model that
sends no token counts, the counts of ``usage``.

A model's tokenizer is the folder given for it (``--tokenizer MODEL=FOLDER``), the one given for every model
(``--tokenizer FOLDER``), or its own (the embedded model's; a local ``hf_model_name`` folder), loaded once by
:func:`console.core.template.chat_tokenizer`, in a worker thread so that the event loop keeps serving.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from console.clients import ClientError, ModelInfo
from console.core.template import chat_tokenizer

from . import tools as tool_fields
from .errors import bad_request
from .toolcalls import Parser, parser_for


class Tokenizers:
    """``given``: ``FOLDER`` (every model) or ``MODEL=FOLDER`` entries."""

    def __init__(self, given: Sequence[str] = ()) -> None:
        self.every = ""
        self.by_model: dict[str, str] = {}
        for entry in given:
            model, sep, folder = entry.rpartition("=")
            if sep and model:
                self.by_model[model] = folder
            else:
                self.every = folder

    def folder(self, info: ModelInfo) -> str | None:
        return self.by_model.get(info.name) or self.every or None

    async def load(self, info: ModelInfo) -> Any:
        """The model's tokenizer; ClientError when it has none here."""
        return await asyncio.to_thread(chat_tokenizer, self.folder(info), info)

    async def chat_prompt(self, info: ModelInfo, messages: list[dict[str, Any]],
                          tools: tool_fields.Tools | None = None) -> str:
        """The conversation (and its tools) as the model's chat template renders it, ready for the assistant's
        answer."""
        try:
            tokenizer = await self.load(info)
        except ClientError as exc:
            raise bad_request(f"{exc} (qaic-console openai --tokenizer {info.name}=FOLDER); /v1/completions takes "
                              "raw prompts", "messages") from None

        def render() -> str:
            return tool_fields.render(tokenizer, messages, tools)

        try:
            return await asyncio.to_thread(render)
        except Exception as exc:  # the template's own refusal (e.g. roles that do not alternate)
            raise bad_request(f"the chat template of {info.name} refused the messages: {exc}", "messages") from None

    async def tool_parser(self, info: ModelInfo, given: str | None) -> Parser:
        """The parser of the model's tool calls: ``given`` (``--tool-call-parser``), else its template's format."""
        if given:
            return parser_for("", given)
        try:
            template = (await self.load(info)).chat_template
        except ClientError:
            template = ""
        return parser_for(template if isinstance(template, str) else "")

    async def count(self, info: ModelInfo, text: str) -> int | None:
        """``text``'s tokens by the model's tokenizer; None when the front has none for it."""
        try:
            tokenizer = await self.load(info)
        except ClientError:
            return None
        return len(await asyncio.to_thread(lambda: tokenizer(text, add_special_tokens=False)["input_ids"]))
