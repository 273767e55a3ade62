"""OpenAI-compatible servers (vLLM's, llama.cpp's, ...): a base URL, the listed models, server-side chat templates.

The models are listed when the server is connected; later polls only check that it answers (``GET /health``):
a listing is a request, and llama.cpp's server by default cuts the stream in flight short for a new request
(it also lists nothing mid-generation).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from console.clients import (
    BadRequest,
    Call,
    ClientError,
    GenerationParams,
    ModelInfo,
    NotServed,
    Timeouts,
    openai_call,
)
from console.clients.embeddings import Vectors, openai_embed
from console.clients.openai_api import base_url, is_openai_url, key_note, listing, model_info, openai_info

from ..template import chat_messages
from .base import Adapter, Framed, History, Progress, States, quiet

MODE_LABELS = {"stream": "OpenAI stream (SSE)", "batch": "OpenAI, one response"}


class OpenAIAdapter(Adapter):
    """An OpenAI-compatible server at its base URL ``http://host:port/v1``."""

    kind = "openai"
    label = "OpenAI"
    name = "the OpenAI-compatible server"
    modes = ("stream", "batch")
    server_template = True
    rule = "a URL ending with /v1 is OpenAI-compatible"
    note = ("Connected to an OpenAI-compatible server: the console sends chat messages (the server applies its chat "
            "template) or raw completions; such a server has no log, model states or generate mode here.")

    def __init__(self, base: str) -> None:
        self.http_url = self.base = base
        self.listed: dict[str, dict[str, Any]] = {}  # the models' entries as last listed

    @classmethod
    def claims(cls, url: str) -> bool:
        return is_openai_url(url)

    @classmethod
    def at(cls, url: str, grpc_url: str | None = None) -> OpenAIAdapter:
        return cls(base_url(url))

    def url(self, mode: str, protocol: str = "http") -> tuple[str, str]:
        if mode not in self.modes:
            raise BadRequest(f"{mode} mode is Triton's: an OpenAI-compatible server answers stream or batch mode")
        return self.base, self.kind

    def metrics(self) -> tuple[str | None, str]:
        """``/metrics`` beside ``/v1`` (vLLM's OpenAI server has it; llama.cpp's only when started with --metrics)."""
        if self.metrics_url:
            return self.metrics_url, ""
        root = self.base[: -len("/v1")] if self.base.endswith("/v1") else self.base.rstrip("/")
        return f"{root}/metrics", "guessed at /metrics beside /v1, where vLLM serves them"

    def addresses(self) -> list[tuple[str, str]]:
        return [(self.label, self.base)]

    @classmethod
    def mode_label(cls, mode: str) -> str:
        return MODE_LABELS[mode]

    def describe(self, timeout: float = 5.0) -> str:
        return f"OpenAI-compatible server at {self.base}"

    def connect(self, timeout: float = 3.0) -> str:
        self.listed = listing(self.base, timeout)
        note = key_note(self.base)
        return (f"connected to the OpenAI-compatible server at {self.base} ({len(self.listed)} "
                f"model{'s' if len(self.listed) != 1 else ''})" + (f"; {note}" if note else ""))

    def model_states(self, timeout: float = 2.0) -> States:
        """Every model listed once is ready (the API knows no other state) while the server answers HTTP."""
        if not self.listed:
            try:
                self.listed = listing(self.base, timeout)
            except ClientError as exc:
                raise OSError(str(exc)) from None
        else:
            self.probe(timeout)
        return {name: ("READY", "") for name in self.listed}

    def probe(self, timeout: float = 2.0) -> None:
        """Any HTTP answer to ``GET /health`` (vLLM's; a 404 from others) shows the server is up; OSError if not."""
        parts = urllib.parse.urlsplit(self.base)
        try:
            with urllib.request.urlopen(urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/health", "", "")),
                                        timeout=timeout):
                pass
        except urllib.error.HTTPError as exc:
            exc.close()  # an answer all the same; its connection closed now
        except urllib.error.URLError as exc:
            raise OSError(str(exc.reason)) from None

    def model_info(self, model: str, mode: str = "stream", protocol: str = "http", timeout: float = 10.0) -> ModelInfo:
        """The model ``model`` (empty: the first listed); ClientError naming the served ones when absent."""
        return model_info(self.base, model, timeout)

    def listed_info(self, model: str) -> ModelInfo:
        return openai_info(model, self.listed.get(model))

    def default_model(self, mode: str) -> str:
        return self.model_info("").name

    def frame(self, prompts: Sequence[str], info: ModelInfo, *, chat: bool, system: str, tokenizer: str,
              history: History, progress: Progress = quiet, images: bool = False) -> Framed:
        if not chat:
            return Framed(list(prompts), list(prompts))
        messages = chat_messages(prompts, system=system or None, history=history)
        return Framed(list(prompts), [json.dumps(m, ensure_ascii=False) for m in messages], messages)

    def image_refusal(self, info: ModelInfo, mode: str, chat: bool) -> str:
        return "" if chat else "images go in chat requests (/v1/chat/completions): leave out --raw"

    def call(self, mode: str, protocol: str, info: ModelInfo, framed: Framed, params: GenerationParams,
             timeouts: Timeouts) -> Call:
        return openai_call(self.base, info, framed.prompts, params, timeouts, mode == "stream", framed.messages)

    def embedding_model(self) -> str:
        """The one model listed (a listing does not say which models return vectors); NotServed naming them when
        there are several."""
        served = list(self.listed or listing(self.base))
        if len(served) != 1:
            raise NotServed(f"the OpenAI-compatible server at {self.base} lists {', '.join(served) or 'no model'}: "
                            "name its embedding model with --model")
        return served[0]

    def embed(self, model: str, texts: Sequence[str], timeout: float | None, info: ModelInfo | None = None) -> Vectors:
        return openai_embed(self.base, model, texts, timeout)
