"""The types UIs see: timeouts, model info, the event stream and reply stats.

One call (stream, batch or generate) yields :class:`TextDelta` events (streaming only), then either
one :class:`Reply` per prompt, in prompt order, or a single :class:`Failure`; nothing follows.
Times are seconds since the request was sent (``time.perf_counter`` based).
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from backend_model.contract.adapters import MAX_PARAMETER, PARAMETER, AdapterError, parse_adapters, parse_max_loras

from .errors import BadRequest, Cancelled, ClientError, IdleTimeout, Timeout

KV_TIMEOUT = 600.0  # the seed's client_example_kv.py network timeout
CAUSAL_TIMEOUT = 6000.0  # the seed's client_example_causal.py network timeout
BACKSTOP = 5.0  # s a transport's own timeout waits past ours (ours fires first and says which one it was)
NO_LIMIT = 10.0**7  # "no timeout" for transports that need a number


def split_prompts(text: str) -> list[str]:
    """``"a|b"`` -> ``["a", "b"]`` (one request, the model's batch); ``\\|`` is a literal ``|``."""
    parts = [p.replace("\0", "|") for p in text.replace("\\|", "\0").split("|")]
    for i, part in enumerate(parts):
        if not part.strip():
            where = f"prompt {i + 1} of {len(parts)}" if len(parts) > 1 else "the prompt"
            raise BadRequest(f"{where} is empty")
    return parts


def new_request_id() -> str:
    return f"qc-{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class Timeouts:
    """``network``: seconds for the whole call; ``idle``: streaming, seconds between responses.

    None disables a timeout. :func:`default_timeout` gives the seed's network defaults. Every call waits
    through :meth:`nearest` and words a timeout with :meth:`message`; a transport's own timeout is
    :meth:`backstop`.
    """

    network: float | None = KV_TIMEOUT
    idle: float | None = None

    def nearest(self, t0: float, last: float) -> tuple[float, type[Timeout]] | None:
        """(deadline, Timeout or IdleTimeout) of the timeout that fires first for a call sent at ``t0`` whose latest
        response came at ``last`` (``perf_counter`` times); None when neither applies."""
        limits: list[tuple[float, type[Timeout]]] = []
        if self.network is not None:
            limits.append((t0 + self.network, Timeout))
        if self.idle is not None:
            limits.append((last + self.idle, IdleTimeout))
        return min(limits, key=lambda limit: limit[0]) if limits else None

    def message(self, error: type[Timeout], model: str) -> str:
        """Which timeout fired, in words."""
        if issubclass(error, IdleTimeout):
            return f"stream idle timeout: no response from {model} for {self.idle:g} s"
        return f"network timeout: {model} did not finish within {self.network:g} s"

    def backstop(self) -> float:
        """The timeout to give a transport (tritonclient, the openai client): past the network timeout, so the
        call's own timeout fires first."""
        return (self.network or NO_LIMIT) + BACKSTOP


def default_timeout(use_kv_cache: bool) -> float:
    """600 s for KV-cache models, 6000 s for causal ones (the seed's client defaults)."""
    return KV_TIMEOUT if use_kv_cache else CAUSAL_TIMEOUT


@dataclass(frozen=True)
class Tensor:
    """A declared model input or output: Triton datatype and dims (without the batch dimension)."""

    name: str
    datatype: str  # e.g. BYTES, INT32, FP32, BOOL
    dims: tuple[int, ...] = (-1,)
    optional: bool = False


@dataclass(frozen=True)
class ModelInfo:
    """What a client needs to know about a served model: a Triton model's config, or what an OpenAI-compatible
    server lists (no config: ``use_kv_cache`` unknown, ``answers`` both modes)."""

    name: str
    decoupled: bool
    use_kv_cache: bool | None  # None: not known (the KV-cache default timeout applies)
    hf_model_name: str = ""
    parameters: dict[str, str] = field(default_factory=dict)
    inputs: tuple[Tensor, ...] = ()
    outputs: tuple[Tensor, ...] = ()
    max_batch_size: int = 0
    backend: str = ""
    answers: tuple[str, ...] = ()  # the modes the server says the model answers (else read from the config)
    adapter: str = ""  # the LoRA adapter (one of :attr:`adapters`) a send to it asks for; "": the model's own weights

    @property
    def default_timeout(self) -> float:
        return default_timeout(self.use_kv_cache is not False)

    @property
    def model_type(self) -> str:
        """``kv_cache``, ``causal``, or ``-`` when the server does not say."""
        return {True: "kv_cache", False: "causal", None: "-"}[self.use_kv_cache]

    @property
    def instances(self) -> str:
        """A model served on device groups: each instance with its SoCs (``instance 0: QIDs 0,1 · instance 1: QIDs
        2,3``; every instance loads or the model fails, so they share its state); '' for any other model."""
        groups = [g.strip() for g in self.parameters.get("device_groups", "").split(";") if g.strip()]
        return " · ".join(f"instance {i}: QIDs {group}" for i, group in enumerate(groups))

    @property
    def adapters(self) -> dict[str, str]:
        """The LoRA adapters the model serves: each name's folder, relative to the model's (its ``lora_adapters``
        parameter, read as the backend reads it); none when it has none, or none the backend would serve."""
        try:
            return parse_adapters(self.parameters.get(PARAMETER, ""))
        except AdapterError:
            return {}

    @property
    def choice(self) -> str:
        """The name a console picks it by: its adapter's, else the model's."""
        return self.adapter or self.name

    def choices(self) -> list[ModelInfo]:
        """The model, then each of its adapters, as a console's model picker lists them."""
        return [self, *(replace(self, adapter=name) for name in self.adapters)]

    @property
    def max_loras(self) -> int:
        """The adapters one batch of the model mixes (its ``max_loras`` parameter; all of them when it is not said)."""
        try:
            return parse_max_loras(self.parameters.get(MAX_PARAMETER, ""), len(self.adapters))
        except AdapterError:
            return len(self.adapters)

    @property
    def embedded(self) -> bool:
        """Serves the embedded SmolLM2 (its tokenizer is local)."""
        return self.hf_model_name == "embedded"

    def input(self, name: str) -> Tensor | None:
        return next((t for t in self.inputs if t.name == name), None)

    def output(self, name: str) -> Tensor | None:
        return next((t for t in self.outputs if t.name == name), None)

    def network_timeout(self, timeout: float | None) -> float | None:
        """The call's network timeout: None takes the model's default (600 s KV, 6000 s causal), 0 none."""
        return self.default_timeout if timeout is None else (timeout or None)

    @property
    def stream_switch(self) -> bool:
        """The model declares a BOOL ``stream`` input (vLLM, TensorRT-LLM): a request may ask for one answer."""
        switch = self.input("stream")
        return switch is not None and switch.datatype == "BOOL"

    @property
    def modes(self) -> tuple[str, ...]:
        """How the model answers: ``stream`` (decoupled), ``batch`` (once), or both (decoupled with a switch)."""
        if self.answers:
            return self.answers
        if not self.decoupled:
            return ("batch",)
        return ("stream", "batch") if self.stream_switch else ("stream",)

    def check_batch(self, how_to_stream: str) -> None:
        """A decoupled model without a ``stream`` switch only streams: refuse a batch call, saying ``how_to_stream``."""
        if "batch" not in self.modes:
            raise BadRequest(f"model {self.name} is decoupled (streams its answers): {how_to_stream}")


@dataclass(frozen=True)
class ReplyStats:
    """Speed figures of one reply in seconds, named as genai-perf names them.

    Each prompt's figures end at its own last text (in an ``a|b`` request one prompt may finish
    early). Batch replies arrive whole: they have a request latency, no time to first token and no
    inter-token latency.
    """

    time_to_first_token: float | None
    inter_token_latency: float | None  # mean, (latency - ttft) / (output_tokens - 1)
    inter_token_latency_p90: float | None  # over the gaps between text arrivals
    request_latency: float
    output_token_throughput: float | None  # output_tokens / request_latency
    input_tokens: int | None
    output_tokens: int | None
    output_tokens_source: str = ""  # server (its count), usage (an OpenAI server's), chunks (text arrivals)

    @property
    def streamed(self) -> bool:
        return self.time_to_first_token is not None

    def as_dict(self) -> dict[str, float | int | None]:
        """genai-perf names with ``_ms`` for times in milliseconds, rounded."""
        out: dict[str, float | int | None] = {}
        for key, value in asdict(self).items():
            if key.endswith(("latency", "token", "_p90")):
                out[f"{key}_ms"] = None if value is None else round(value * 1000, 3)
            elif isinstance(value, float):
                out[key] = round(value, 3)
            else:
                out[key] = value
        return out


@dataclass(frozen=True)
class TextDelta:
    """New text for prompt ``index`` (streaming); ``first`` marks the reply's first text; ``logprobs``: the
    log-probability entries that came with it, when asked for (the Reply has them all)."""

    index: int
    text: str
    time: float
    first: bool = False
    logprobs: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class Reply:
    """The finished answer to prompt ``index``.

    ``text`` is the reply's new text (the console asks every server for new text only; a front end that shows
    the prompt before it adds it when it renders). ``logprobs``: one entry per generated token when the request
    asked for them and the model has them (the bundled backend's ``logprobs`` output: ``{"id", "token",
    "logprob", "top": [...]}``), else None.
    """

    index: int
    prompt: str
    text: str
    finish_reason: str
    stats: ReplyStats
    logprobs: list[dict[str, Any]] | None = None

    @property
    def ok(self) -> bool:
        return self.finish_reason not in (Cancelled.kind, "error")


@dataclass(frozen=True)
class Failure:
    """The call failed: ``message`` in one line, ``error`` the :class:`ClientError` class that says how (Timeout,
    Cancelled, Unreachable, ServerFault...)."""

    message: str
    error: type[ClientError]
    time: float = 0.0

    @classmethod
    def of(cls, exc: ClientError, time: float = 0.0) -> Failure:
        return cls(str(exc), type(exc), time)

    @property
    def kind(self) -> str:
        """How it failed, as reports name it (``error_kind``: timeout, cancelled, connection, server...)."""
        return self.error.kind

    def exception(self) -> ClientError:
        return self.error(self.message)


Event = TextDelta | Reply | Failure
