"""How the controls go to a model of an OpenAI-compatible server: the API's own request fields, the extensions
the server is known to take, and what "up to the context" (``max_tokens`` 0) is on it.

Which server it is comes from its model listing (``owned_by``, see :data:`SERVERS`): vLLM and llama.cpp take
``top_k``, ``min_tokens`` and a repetition penalty beside the API's fields (llama.cpp names it
``repeat_penalty``); qaic-console's own front takes every control, and lists the ones each model has
(``controls``); another server gets the API's fields and ``top_k``, the servers' common extension.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .events import ModelInfo, Tensor
from .interfaces import Interface
from .openai_api import FRONT, OPENAI
from .params import Control, GenerationParams

API_FIELDS = ("max_tokens", "temperature", "top_p", "seed", "stop")
TYPES = {"max_tokens": "INT32", "temperature": "FP32", "top_p": "FP32", "top_k": "INT32", "seed": "INT64",
         "stop": "BYTES", "min_tokens": "INT32", "repetition_penalty": "FP32"}


@dataclass(frozen=True)
class Server:
    """What one kind of OpenAI-compatible server takes beyond the API's fields."""

    name: str
    extensions: dict[str, str] = field(default_factory=lambda: {"top_k": "top_k"})  # control -> body field
    whole_context: str = ""  # how max_tokens 0 goes: "max_model_len" (its listing says it), "0", or "" (cannot)
    stops_when_left: bool = False  # it stops an unstreamed request whose client went away


SERVERS = {  # /v1/models owned_by -> the server
    "vllm": Server("vLLM", {"top_k": "top_k", "min_tokens": "min_tokens", "repetition_penalty": "repetition_penalty"},
                   "max_model_len", stops_when_left=True),
    "llamacpp": Server("llama.cpp", {"top_k": "top_k", "min_tokens": "min_tokens",
                                     "repetition_penalty": "repeat_penalty"}, "0"),  # llama-server
    "me": Server("llama.cpp", {"top_k": "top_k", "min_tokens": "min_tokens",
                               "repetition_penalty": "repeat_penalty"}, "0"),  # llama-cpp-python's server
}
SERVERS[FRONT] = Server("qaic-console's front", {"top_k": "top_k", "min_tokens": "min_tokens",
                                                "repetition_penalty": "repetition_penalty"}, "0")
GENERIC = Server("an OpenAI-compatible server")


def server_of(info: ModelInfo) -> Server:
    """The kind of server ``info``'s model comes from (its listing's ``owned_by``)."""
    return SERVERS.get(info.parameters.get("owned_by", ""), GENERIC)


class OpenAIInterface(Interface):
    """A model of an OpenAI-compatible server: the controls go as request fields, the extensions in the body."""

    name = OPENAI
    batches_prompts = False
    samples_by_default = True  # the API's temperature defaults to 1 (llama.cpp's server: 0.8)
    default_note = "the server's default applies (OpenAI's API: 16 tokens on /v1/completions)"
    extra_outputs: dict[str, str] = {}

    @classmethod
    def matches(cls, info: ModelInfo) -> bool:
        return info.backend == OPENAI

    @property
    def server(self) -> Server:
        return server_of(self.info)

    @property
    def label(self) -> str:
        return "OpenAI-compatible API" + ("" if self.server is GENERIC else f" ({self.server.name})")

    @property
    def takes_images(self) -> bool:
        """Chat requests carry ``image_url`` parts (a model without vision is the server's to refuse)."""
        return True

    def wire_input(self, control: Control) -> Tensor | None:
        listed = self.info.parameters.get("controls")  # the front says which controls the model has
        if listed is not None and control.name not in listed.split(","):
            return None
        name = control.name if control.name in API_FIELDS else self.server.extensions.get(control.name)
        return None if name is None else Tensor(name, TYPES[control.name], (-1,) if control.multiple else (1,), True)

    def whole_context(self) -> int | None:
        how = self.server.whole_context
        if how == "max_model_len":
            length = self.info.parameters.get("max_model_len", "")
            return int(length) if length.isdigit() else None
        return int(how) if how else None

    def body(self, params: GenerationParams) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the API's fields, the extensions) of the set controls."""
        fields = {w.name: list(w.values) if w.many else w.values[0] for w in self.controls(params)}
        extra = {name: fields.pop(name) for name in self.server.extensions.values() if name in fields}
        return fields, extra

