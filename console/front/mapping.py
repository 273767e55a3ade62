"""OpenAI request bodies -> a :class:`Job`: the prompt or the chat messages, the controls, the switches.

Each field is checked once, before anything is sent: a control by its row of the controls schema
(``backend_model.contract.controls``, named by the field), the switches by their type. Fields a Triton LLM has no
control for are taken at their no-op value only (penalties 0, no ``logit_bias``), a few that change nothing
here are accepted and ignored, and any other field is refused, as OpenAI's API does. A completions ``prompt`` is one or
more texts or token-id lists; ``n`` (with ``best_of`` equal to it) asks for that many answers to each.
``logprobs``/``top_logprobs`` become the ``logprobs`` control, ``response_format`` and vLLM's ``guided_*`` and
``structured_outputs`` the ``structured_outputs`` control (vLLM's names: ``{"json": schema}``, ``{"regex": ...}``).
Which controls a given model lacks is the model's interface's to say (:func:`check_model`); those two need the
model's own input of that name (and a ``logprobs`` output), not one that only carries them. A chat's ``tools``
are :mod:`.tools`' to check; a ``tool_choice`` that forces a call sets the ``structured_outputs`` control.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backend_model.contract.controls import BY_NAME
from backend_model.contract.errors import BadRequest
from console.clients import GenerationParams, Interface
from console.clients import params as offered

from . import tools as tool_fields
from .errors import APIError, bad_request
from .media import ImageRef
from .protocol import CONTROL_FIELDS, MAX_LOGPROBS, NO_OP, ChatCompletionRequest, CompletionRequest, validated

Body = CompletionRequest | ChatCompletionRequest

# vLLM's fields -> the control's key ("": the whole of it); their types are the protocol's
GUIDED = {"guided_json": "json", "guided_regex": "regex", "guided_choice": "choice", "structured_outputs": ""}
FORMATS = ("text", "json_object", "json_schema")
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
COMPLETIONS_MAX_TOKENS = 16  # the API's default for /v1/completions (chat: the model's own)
MAX_SEQUENCES = 256  # prompts x n in one request (the bundled backend's most prompts a request)


@dataclass
class Job:
    """What one request asks for."""

    model: str
    chat: bool
    prompt: str = ""
    prompts: list[str | list[int]] = field(default_factory=list)  # completions: texts or token ids
    n: int = 1  # answers per prompt
    messages: list[dict[str, Any]] = field(default_factory=list)
    controls: dict[str, Any] = field(default_factory=dict)  # checked, the set ones
    fields: dict[str, str] = field(default_factory=dict)  # control -> the field that gave it
    stream: bool = False
    include_usage: bool = False
    echo: bool = False
    logprobs: int | None = None  # alternatives per token; None: no logprobs asked
    structured: str = ""  # the field that asked for structured output, "" for none
    tools: tool_fields.Tools | None = None  # the tools offered (chat), None for none
    images: list[ImageRef] = field(default_factory=list)  # the image parts, in order (each an image part in messages)
    media_param: str = "messages"  # the field the images came in (the Responses API's: input)


def _control(job: Job, name: str, value: Any, control: str) -> None:
    if control in job.fields and job.fields[control] != name:
        raise bad_request(f"give {job.fields[control]} or {name}, not both", name)
    try:
        checked = BY_NAME[control].check(value, name)
    except BadRequest as exc:
        raise bad_request(str(exc), name) from None
    job.fields[control] = name  # given, even as the model's default (max_tokens 0)
    if checked is not None:
        job.controls[control] = checked


def _ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value)


def token_ids(value: Any, vocab: int, name: str) -> list[int]:
    """A list of token ids of a ``vocab``-token vocabulary; APIError 400 naming ``name``."""
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise bad_request(f"{name} must be a list of token ids (integers)", name)
    bad = next((t for t in value if not 0 <= t < vocab), None)
    if bad is not None:
        raise bad_request(f"{name} has token id {bad}, outside the vocabulary (0 to {vocab - 1})", name)
    return value


def texts_or_ids(value: Any, name: str) -> list[str | list[int]]:
    """A prompt-like field (``prompt``, ``input``): a string, a list of strings, a list of token ids or a list of lists
    of token ids; APIError 400 naming ``name``."""
    items = [value] if isinstance(value, str) or _ids(value) else value
    what = "a non-empty string, a list of them, a list of token ids or a list of such lists"
    if not isinstance(items, list) or not items:
        raise bad_request(f"{name} must be {what}", name)
    for i, one in enumerate(items):
        if not (isinstance(one, str) and one) and not _ids(one):
            raise bad_request(f"{name} {i + 1} of {len(items)} is neither a non-empty string nor a non-empty list "
                              f"of token ids ({name} must be {what})", name)
    return items


def _n(request: Body, job: Job) -> None:
    n, best = request.n, getattr(request, "best_of", None)
    job.n = 1 if n is None else n
    if job.n < 1:
        raise bad_request(f"n must be an integer from 1, got {job.n}", "n")
    if best is not None and best != job.n:
        raise bad_request(f"best_of must equal n ({job.n}) here: the served models rank no candidates", "best_of")
    if job.chat and job.n != 1:
        raise bad_request("n must be 1 on /v1/chat/completions here (/v1/completions takes more)", "n")
    if job.n * max(len(job.prompts), 1) > MAX_SEQUENCES:
        raise bad_request(f"{len(job.prompts)} prompts x n {job.n} is over the {MAX_SEQUENCES} answers one request "
                          "may ask for", "n")


def _content(message: dict[str, Any], where: str, images: list[ImageRef]) -> str | list[dict[str, Any]]:
    """A message's content: its text, or, when it has image parts, its parts (``{"type": "image"}`` for each, its URL
    added to ``images``)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"{where}: content must be a string or a list of text and image_url parts", "messages")
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "image_url" and message.get("role") == "user":
            given = part.get("image_url")
            url = given.get("url") if isinstance(given, dict) else None
            if not isinstance(url, str) or not url:
                raise bad_request(f"{where}: an image_url part needs image_url.url (a data URL or an http(s) URL)",
                                  "messages")
            images.append(ImageRef(url, f"{where}, image {len(images) + 1}"))
            parts.append({"type": "image"})
        else:
            raise bad_request(f"{where}: content parts must be text (or image_url in a user message), got "
                              f"{str(kind)[:40]!r}", "messages")
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _messages(body: dict[str, Any], images: list[ImageRef]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages must be a non-empty list", "messages")
    out = []
    for i, message in enumerate(messages):
        where = f"message {i + 1} of {len(messages)}"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise bad_request(f"{where}: role must be one of {', '.join(ROLES)}", "messages")
        role = ROLES[message["role"]]
        calls_only = role == "assistant" and message.get("content") is None and message.get("tool_calls")
        content = "" if calls_only else _content(message, where, images)
        out.append({"role": role, "content": content, **tool_fields.history_fields({**message, "role": role}, where)})
    return out


def _logprobs(request: Body, job: Job) -> None:
    if isinstance(request, ChatCompletionRequest):
        top = request.top_logprobs
        if top is not None and not request.logprobs:
            raise bad_request("top_logprobs needs logprobs: true", "top_logprobs")
        job.logprobs = (top or 0) if request.logprobs else None
    else:
        job.logprobs = request.logprobs
    if job.logprobs is not None and not 0 <= job.logprobs <= MAX_LOGPROBS:
        name = "top_logprobs" if job.chat else "logprobs"
        raise bad_request(f"{name} must be an integer from 0 to {MAX_LOGPROBS}, got {job.logprobs}", name)


def _structured(request: Body) -> tuple[str, dict[str, Any] | None]:
    """The structured-output field a body sets and its ``structured_outputs`` control (vLLM's names), or ("", None).
    The backend compiles it; only its shape is checked here."""
    asked: dict[str, dict[str, Any]] = {}
    form = request.response_format
    if form is not None:
        kind = form.get("type")
        if kind not in FORMATS:
            raise bad_request(f"response_format type must be one of {', '.join(FORMATS)}", "response_format")
        schema = (form.get("json_schema") or {}).get("schema") if kind == "json_schema" else None
        if kind == "json_schema" and not isinstance(schema, dict):
            raise bad_request("response_format json_schema needs json_schema.schema (an object)", "response_format")
        if kind != "text":
            asked["response_format"] = {"json": schema} if schema is not None else {"json_object": True}
    for name, key in GUIDED.items():
        value = getattr(request, name)
        if value:
            asked[name] = {key: value} if key else value
    if len(asked) > 1:
        raise bad_request(f"give one of {', '.join(asked)}", list(asked)[1])
    return next(iter(asked.items()), ("", None))


def parse(body: Any, chat: bool) -> Job:
    """The job of a ``/v1/chat/completions`` (``chat``) or ``/v1/completions`` body; APIError 400 when it is not
    one, naming the field."""
    request: Body = validated(ChatCompletionRequest, body) if chat else validated(CompletionRequest, body)
    for name, no_op in NO_OP.items():
        value = request.taken(name)
        if value is not None and value != no_op:
            raise bad_request(f"{name} is not supported here (only {no_op!r}): the served models have no such "
                              "control", name)
    job = Job(request.model or "", chat)  # none: the one model served (served.only)
    job.stream = bool(request.stream)
    if request.stream_options is not None and not job.stream:
        raise bad_request("stream_options is only allowed when stream is true", "stream_options")
    usage = (request.stream_options or {}).get("include_usage")
    if usage is not None and not isinstance(usage, bool):
        raise bad_request("include_usage must be true or false", "include_usage")
    job.include_usage = bool(usage)
    if isinstance(request, ChatCompletionRequest):
        job.messages = _messages(body, job.images)
        job.tools = tool_fields.parse(body)
        if job.images and job.tools is not None:
            raise bad_request("tools cannot go with images here: the model's server renders a conversation with "
                              "images, without tools", "tools")
    else:
        job.prompts = texts_or_ids(request.taken("prompt"), "prompt")
        job.echo = bool(request.echo)
    _n(request, job)
    _logprobs(request, job)
    if job.logprobs is not None:
        top = isinstance(request, ChatCompletionRequest) and request.top_logprobs is not None
        _control(job, "top_logprobs" if top else "logprobs", job.logprobs, "logprobs")
    job.structured, spec = _structured(request)
    forced = job.tools.grammar() if job.tools is not None else None
    if forced is not None and spec is not None:
        raise bad_request(f"give {job.structured} or a tool_choice that forces a call, not both", job.structured)
    if forced is not None:
        job.structured, spec = "tool_choice", forced
    if spec is not None:
        _control(job, job.structured, spec, "structured_outputs")
    for name, control in {**CONTROL_FIELDS, "max_completion_tokens": "max_tokens"}.items():
        if request.taken(name) is not None:
            _control(job, name, request.taken(name), control)
    if request.ignore_eos:  # fixed lengths, as the consoles ask for them
        if "max_tokens" not in job.controls:
            raise bad_request("ignore_eos needs max_tokens (it generates exactly that many)", "ignore_eos")
        if job.controls.setdefault("min_tokens", job.controls["max_tokens"]) != job.controls["max_tokens"]:
            raise bad_request("ignore_eos generates max_tokens: give no other min_tokens", "ignore_eos")
        job.fields.setdefault("min_tokens", "ignore_eos")
    return job


def _own_input(interface: Interface, control: str) -> bool:
    """The model declares an input of this name (not another that carries it: vLLM's ``sampling_parameters``)."""
    declared = interface.wire_input(BY_NAME[control])
    return declared is not None and declared.name == control


def blame(job: Job, error: APIError) -> APIError:
    """``error`` naming the field whose control the model's message is about (the backend's start with its name)."""
    if error.status == 400 and error.param is None:
        error.param = next((f for c, f in job.fields.items() if str(error).startswith(c)), None)
    return error


def check_model(job: Job, interface: Interface, adapter: str = "") -> GenerationParams:
    """The controls to send to the model ``interface`` speaks to (``adapter``: the LoRA adapter the request's
    ``model`` named); APIError 400 naming those it has no input for."""
    controls = dict(job.controls)
    if adapter:
        controls["lora_name"], job.fields["lora_name"] = adapter, "model"
    if not job.chat and "max_tokens" not in job.fields and interface.wire_input(offered.BY_NAME["max_tokens"]):
        controls["max_tokens"] = COMPLETIONS_MAX_TOKENS
    name = f"model {interface.info.name} ({interface.name} interface)"
    if job.logprobs is not None and not (_own_input(interface, "logprobs") and interface.info.output(
            interface.extra_outputs.get("logprobs", ""))):
        raise bad_request(f"{name} returns no logprobs here", job.fields["logprobs"])
    if job.structured and not _own_input(interface, "structured_outputs"):
        raise bad_request(f"{name} has no structured-output input for {job.structured}", job.structured)
    params = GenerationParams.from_checked(controls)
    lacking = interface.ignored(params)
    if lacking:
        fields = [job.fields.get(n, n) for n in lacking]
        raise bad_request(f"{name} has no input for {', '.join(fields)}", fields[0])
    return params
