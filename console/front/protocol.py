"""The front's protocol: what the routes call (:class:`Upstream`, the served models behind the front) and the shapes
of the requests and answers they read and write (pydantic models, as vLLM's ``protocol.py`` has them).

A request model refuses fields it does not name and takes each typed field's JSON type as it is (strict: no ``"1"``
for 1); :func:`validated` turns a refusal into the OpenAI error the front gives everywhere: 400, ``param`` the field,
the message ``"<field> must be <what>"`` with each field's ``description`` as the what.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, ClassVar, Literal, Protocol, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from console.clients import GenerationParams, ModelInfo
from console.clients.interfaces import Outputs

from .errors import bad_request

M = TypeVar("M", bound="Request")
MODEL_NAME = "a model name (GET /v1/models lists them)"
SWITCH = "true or false"
MAX_LOGPROBS = 20
TOP = f"an integer from 0 to {MAX_LOGPROBS}"
CONTROL_FIELDS = {"max_tokens": "max_tokens", "temperature": "temperature", "top_p": "top_p", "top_k": "top_k",
                  "seed": "seed", "stop": "stop", "repetition_penalty": "repetition_penalty",
                  "min_tokens": "min_tokens"}  # field -> control (top_k and after: vLLM's extensions)
NO_OP = {"presence_penalty": 0, "frequency_penalty": 0, "logit_bias": {}, "suffix": "",
         "functions": []}  # fields accepted at this value only
IGNORED = ("user", "metadata", "store", "service_tier", "function_call", "prompt_cache_key", "safety_identifier")
STORED = ("previous_response_id", "conversation", "prompt", "background")  # Responses fields for stored responses


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

    def responses(self, info: ModelInfo, prompts: list[str], params: GenerationParams,
                  timeout: float | None) -> AsyncGenerator[Outputs, None]:
        """Each response's outputs of one streamed request (what a :class:`~.upstream.Generation` reads)."""

    async def embed(self, info: ModelInfo, items: list[str | list[int]],
                    timeout: float | None) -> tuple[np.ndarray, list[int] | None]:
        """An embedding model's vectors for ``items`` (all texts or all token ids; one float32 row each) and each
        item's token count (None: the model sent none)."""

    async def set_adapters(self, model: str, adapters: dict[str, str]) -> None:
        """Serve ``adapters`` ({name: folder}, in order) on ``model`` from now on, the requests it holds finished as
        they began; APIError saying why not (the model then serves what it did)."""


class Request(BaseModel):
    """A request body: each typed field's JSON type taken as it is; the fields named in :attr:`TAKEN` are taken
    whatever they hold (others check them: :meth:`taken`); any other field is refused."""

    model_config = ConfigDict(extra="allow", strict=True)
    TAKEN: ClassVar[tuple[str, ...]] = ()

    def taken(self, name: str) -> Any:
        """The value of a field of :attr:`TAKEN` (None: not given)."""
        return (self.model_extra or {}).get(name)


def validated(kind: type[M], body: Any) -> M:
    """``body`` read as ``kind``; APIError 400 naming the first field that is unknown or of the wrong type."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    for name in body:
        if name not in kind.model_fields and name not in kind.TAKEN:
            raise bad_request(f"unrecognized request argument supplied: {name[:60]}", name[:60])
    try:
        return kind.model_validate(body)
    except ValidationError as exc:
        name = str(exc.errors()[0]["loc"][0])
        raise bad_request(f"{name} must be {kind.model_fields[name].description}", name) from None


class Sampling(Request):
    """The fields ``/v1/completions`` and ``/v1/chat/completions`` share. The controls are checked by their rows of the
    controls schema (``backend_model.controls``), the no-op fields against their value (:mod:`.mapping`)."""

    TAKEN = (*CONTROL_FIELDS, "max_completion_tokens", *NO_OP, *IGNORED)
    model: str | None = Field(None, description=MODEL_NAME)
    stream: bool | None = Field(None, description=SWITCH)
    stream_options: dict[str, Any] | None = Field(None, description="an object")
    n: int | None = Field(None, description="an integer from 1")
    ignore_eos: bool | None = Field(None, description=SWITCH)
    response_format: dict[str, Any] | None = Field(None, description="an object with a type")
    guided_json: dict[str, Any] | str | None = Field(None, description="a JSON schema")
    guided_regex: str | None = Field(None, description="a regular expression")
    guided_choice: list[Any] | None = Field(None, description="a list of strings")
    structured_outputs: dict[str, Any] | None = Field(None, description="an object")


class CompletionRequest(Sampling):
    """``POST /v1/completions``; ``prompt`` is one or more texts or token-id lists (:func:`~.mapping.parse`)."""

    TAKEN = (*Sampling.TAKEN, "prompt")
    echo: bool | None = Field(None, description=SWITCH)
    best_of: int | None = Field(None, description="an integer equal to n")
    logprobs: int | None = Field(None, description=TOP)


class ChatCompletionRequest(Sampling):
    """``POST /v1/chat/completions``; ``messages`` and the tool fields are checked by :mod:`.mapping` and
    :mod:`.tools`."""

    TAKEN = (*Sampling.TAKEN, "messages", "tools", "tool_choice", "parallel_tool_calls")
    logprobs: bool | None = Field(None, description=SWITCH)
    top_logprobs: int | None = Field(None, description=TOP)


class ResponsesRequest(Request):
    """``POST /v1/responses``, read as the chat it asks for (:func:`~.responses.chat_body` checks the fields it takes
    as they are); those that need stored responses (:data:`STORED`) are named only to be refused."""

    TAKEN = ("model", "input", "max_output_tokens", "temperature", "top_p", "tool_choice", "parallel_tool_calls",
             "stream", "text", "include", "truncation", "reasoning", *IGNORED, *STORED)
    instructions: str | None = Field(None, description="a string")
    tools: list[Any] | None = Field(None, description="a list of functions")


class EmbeddingRequest(Request):
    """``POST /v1/embeddings``; ``input`` is one or more texts or token-id lists (checked by the route)."""

    TAKEN = ("input", "user")
    model: str | None = Field(None, description=MODEL_NAME)
    encoding_format: Literal["float", "base64"] = Field("float", description="float or base64")
    dimensions: int | None = Field(None, gt=0, description="a positive integer")


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


class LoadLoRAAdapterRequest(Request):
    """vLLM's ``POST /v1/load_lora_adapter``; ``base_model_name`` names the model that gets it where several could."""

    lora_name: str = Field("", description="an adapter name")
    lora_path: str = Field("", description="the adapter's folder")
    load_inplace: bool = Field(False, description=SWITCH)
    base_model_name: str | None = Field(None, description=MODEL_NAME)


class UnloadLoRAAdapterRequest(Request):
    """vLLM's ``POST /v1/unload_lora_adapter``."""

    lora_name: str = Field("", description="an adapter name")


class ModelCard(BaseModel):
    """A model as ``/v1/models`` lists it (vLLM's card: ``root`` what it serves, ``parent`` the base model of a LoRA
    adapter, None for a model), with its context length (vLLM's ``max_model_len``; None: not known) and the controls
    it takes (the request fields of the same names)."""

    id: str
    object: str = "model"
    created: int = 0
    owned_by: str
    root: str | None = None
    parent: str | None = None
    max_model_len: int | None = None
    controls: list[str] = []


class ModelList(BaseModel):
    object: str = "list"
    data: list[ModelCard]


class Version(BaseModel):
    server: str
    version: str
    api: str = "openai"


class Reply(BaseModel):
    """An answer's shape as it goes on the wire (:meth:`wire`): a field with a default is left out unless it was set,
    every other field is required and always sent (None as null: OpenAI's clients read ``logprobs: null``)."""

    def wire(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)


class UsageInfo(Reply):
    prompt_tokens: int | None
    completion_tokens: int | None
    total_tokens: int | None


class CompletionLogProbs(Reply):
    """The completions shape of log-probabilities: parallel lists, one entry per token."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class ChatLogProb(Reply):
    token: str
    logprob: float | None
    bytes: list[int]


class ChatLogProbsEntry(ChatLogProb):
    top_logprobs: list[ChatLogProb]


class ChatLogProbs(Reply):
    """The chat shape of log-probabilities: one entry per token."""

    content: list[ChatLogProbsEntry]
    refusal: None


class CompletionChoice(Reply):
    index: int
    text: str
    logprobs: CompletionLogProbs | None
    finish_reason: str | None


class ChatMessage(Reply):
    role: str
    content: str | None
    tool_calls: list[dict[str, Any]] | None = None


class ChatChoice(Reply):
    index: int
    message: ChatMessage
    logprobs: ChatLogProbs | None
    finish_reason: str


class DeltaMessage(Reply):
    role: str | None = None
    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class ChatStreamChoice(Reply):
    index: int
    delta: DeltaMessage
    logprobs: ChatLogProbs | None
    finish_reason: str | None


class Head(Reply):
    id: str
    object: str
    created: int
    model: str


class CompletionResponse(Head):
    choices: list[CompletionChoice]
    usage: UsageInfo


class ChatCompletionResponse(Head):
    choices: list[ChatChoice]
    usage: UsageInfo


class CompletionStreamResponse(Head):
    """A stream's chunk (``usage``: set, null or the counts, only when the client asked for it)."""

    choices: list[CompletionChoice]
    usage: UsageInfo | None = None


class ChatCompletionStreamResponse(Head):
    choices: list[ChatStreamChoice]
    usage: UsageInfo | None = None


class EmbeddingUsage(Reply):
    prompt_tokens: int | None
    total_tokens: int | None


class Embedding(Reply):
    """One input's vector: floats, or base64 of its little-endian float32 bytes."""

    object: str
    index: int
    embedding: list[float] | str


class EmbeddingResponse(Reply):
    object: str
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


class ResponseUsage(Reply):
    input_tokens: int | None
    input_tokens_details: dict[str, int]
    output_tokens: int | None
    output_tokens_details: dict[str, int]
    total_tokens: int | None


class OutputText(Reply):
    """A Responses message's text part (``logprobs`` only where it is set: the empty part a stream opens has none)."""

    type: str
    text: str
    annotations: list[Any]
    logprobs: list[Any] = []


class OutputMessage(Reply):
    """A Responses output item: the assistant's message (its content: none while it is in progress)."""

    type: str
    id: str
    status: str
    role: str
    content: list[OutputText]


class FunctionCallItem(Reply):
    """A Responses output item: one tool call (its ``arguments`` grow while it streams)."""

    type: str
    id: str
    call_id: str
    name: str
    arguments: str
    status: str


OutputItem = OutputMessage | FunctionCallItem


class ResponsesResponse(Reply):
    """The Responses API's ``response`` object (its output items made by :mod:`.responses`)."""

    id: str
    object: str
    created_at: int
    status: str
    error: None
    incomplete_details: dict[str, str] | None
    model: str
    output: list[OutputItem]
    parallel_tool_calls: bool
    tool_choice: Any
    tools: list[dict[str, Any]]
    temperature: int | float | None
    top_p: int | float | None
    max_output_tokens: int | None
    truncation: str
    text: dict[str, Any]
    metadata: dict[str, Any]
    store: bool
    previous_response_id: None
    reasoning: None
    usage: ResponseUsage | None
