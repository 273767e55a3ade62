"""The front's protocol: what the routes call (:class:`Upstream`, the served models behind the front) and the shapes
of the requests and answers they read and write (pydantic models, as vLLM's ``protocol.py`` has them).

A request model forbids fields it does not name and takes each field's JSON type as it is (strict: no ``"1"`` for 1);
:func:`validated` turns a refusal into the OpenAI error the front gives everywhere: 400, ``param`` the field, the
message ``"<field> must be <what>"`` with each field's ``description`` as the what.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from console.clients import GenerationParams, ModelInfo
from console.clients.interfaces import Outputs

from .errors import bad_request

if TYPE_CHECKING:
    from .upstream import Generation

M = TypeVar("M", bound="Request")
MODEL_NAME = "a model name (GET /v1/models lists them)"
SWITCH = "true or false"


class Upstream(Protocol):
    """The models behind the front (:class:`~.upstream.TritonUpstream`; a test's fake). Its refusals are
    :class:`~.errors.APIError`; a model's error on a stream is :class:`~.errors.ModelError`."""

    url: str

    async def close(self) -> None: ...

    async def live(self) -> bool: ...

    async def ready(self) -> list[str]:
        """The READY models' names (APIError 503 when the server does not answer)."""

    async def models(self) -> list[ModelInfo]:
        """The ready models the front can speak to."""

    async def info(self, model: str) -> ModelInfo:
        """A served model's config; 404 when it is not served."""

    async def context_length(self, model: str) -> int | None:
        """The model's context length, None when not known."""

    async def metrics_page(self) -> str | None:
        """The server's Prometheus page, None when there is none to read."""

    def generate(self, info: ModelInfo, prompts: str | Sequence[str], params: GenerationParams,
                 timeout: float | None) -> Generation:
        """One request's :class:`~.upstream.Generation` (nothing is sent before it is iterated)."""

    def responses(self, info: ModelInfo, prompts: list[str], params: GenerationParams,
                  timeout: float | None) -> AsyncGenerator[Outputs, None]:
        """Each response's outputs of one streamed request (what a Generation reads)."""


class Request(BaseModel):
    """A request body: unknown fields refused, each field's JSON type taken as it is."""

    model_config = ConfigDict(extra="forbid", strict=True)


def validated(kind: type[M], body: Any) -> M:
    """``body`` read as ``kind``; APIError 400 naming the first field that is unknown or of the wrong type."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    for name in body:
        if name not in kind.model_fields:
            raise bad_request(f"unrecognized request argument supplied: {name[:60]}", name[:60])
    try:
        return kind.model_validate(body)
    except ValidationError as exc:
        name = str(exc.errors()[0]["loc"][0])
        raise bad_request(f"{name} must be {kind.model_fields[name].description}", name) from None


class TokenizeRequest(Request):
    """vLLM's ``POST /tokenize``: a prompt, or chat messages through the model's template."""

    model: str | None = Field(None, description=MODEL_NAME)
    prompt: str | None = Field(None, description="a string (or give messages)")
    messages: list[Any] | None = Field(None, description="a non-empty list")
    add_special_tokens: bool | None = Field(None, description=SWITCH)
    add_generation_prompt: bool = Field(True, description=SWITCH)
    return_token_strs: bool = Field(False, description=SWITCH)


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int | None
    tokens: list[int]
    token_strs: list[str] | None


class DetokenizeRequest(Request):
    """vLLM's ``POST /detokenize``."""

    model: str | None = Field(None, description=MODEL_NAME)
    tokens: list[Any] = Field(description="a list of token ids (integers)")


class DetokenizeResponse(BaseModel):
    prompt: str


class ModelCard(BaseModel):
    """A model as ``/v1/models`` lists it, with its context length (vLLM's ``max_model_len``; None: not known) and
    the controls it takes (the request fields of the same names)."""

    id: str
    object: str = "model"
    created: int = 0
    owned_by: str
    max_model_len: int | None = None
    controls: list[str] = []


class ModelList(BaseModel):
    object: str = "list"
    data: list[ModelCard]


class Version(BaseModel):
    server: str
    version: str
    api: str = "openai"
