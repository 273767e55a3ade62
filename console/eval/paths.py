"""The paths an eval compares: a served model (any server kind, through its adapter and the request pipeline), an
in-process engine (the CPU engine at a precision, the card's ONNX twin), or a recorded golden run.

A spec names one: ``MODEL@URL`` (served: a tritonserver's HTTP or gRPC address, or an OpenAI-compatible ``.../v1``
URL), ``MODEL@HTTP,GRPC`` (a tritonserver whose gRPC port is not the HTTP port + 1),
``cpu:PRECISION`` (the CPU engine on ``--model``), ``twin`` or ``twin:GRAPH`` (the ONNX twin of ``--model``;
without a graph one is exported for the run, once for every twin path). Either engine also takes the card's MX
formats, as a compile config's ``mxfp6_matmul`` / ``mxint8_kv_cache`` ask: ``+mxfp6``, ``+mxint8kv`` (``cpu:mxfp6``,
``cpu:bf16+mxfp6``, ``twin:mxfp6+mxint8kv``, ``twin:GRAPH+mxfp6``). Every path answers greedily; in-process
paths and the bundled backend (its ``logprobs`` output) also give tokens; in-process paths can score a
continuation (:mod:`console.eval.likelihood`). Prompts with images go to served paths as a chat each, and to the
CPU engine of a vision-language model (``--model``) as the backend reads that chat.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend_model.build import BackendSettings, build_engine
from backend_model.contract import compile_config
from backend_model.contract.parameters import IMAGE_TEXT_TO_TEXT, PRECISIONS
from backend_model.engine.loop import Engine
from backend_model.engine.sampling import SamplingParams
from backend_model.models import EMBEDDED, EMBEDDED_VISION
from backend_model.mx_formats import NO_MX, TERMS, Mx
from console.clients import Failure, GenerationParams, ModelInfo, Reply
from console.clients.images import placed
from console.core.adapters import Adapter, adapter_for
from console.core.request import Settings, prepare, read_info
from console.core.template import chat_messages

DIMS = {"prefill_seq_len": 32, "ctx_len": 512, "full_batch_size": 8}  # the embedded KV samples' (repo_gen.samples)
REQUEST_PROMPTS = 8  # prompts per served request (the samples' full_batch_size)
SPEC_HELP = ("MODEL@URL (served: a tritonserver's HTTP or gRPC address, both as HTTP,GRPC, or an OpenAI-compatible "
             ".../v1 URL), cpu:PRECISION "
             f"({'/'.join(PRECISIONS)}, the CPU engine on --model), twin or twin:GRAPH (the ONNX twin of --model; "
             f"exported for the run without a graph); either with the card's MX formats ({', '.join(TERMS)}: "
             "cpu:mxfp6, twin:mxfp6+mxint8kv)")
Progress = Callable[[str], None]
Advance = Callable[[int], None]  # prompts done
NO_IMAGES = "the twin paths take no images yet: compare served paths (MODEL@URL), cpu: paths or a recording"
MAX_IMAGES = 8  # images an in-process vision-language model takes with a prompt


class SpecError(ValueError):
    """A path spec that names nothing runnable."""


@dataclass(frozen=True)
class Answer:
    """One prompt's greedy answer: its new text and, where the path gives them, its token ids."""

    text: str
    tokens: list[int] | None = None
    finish: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "tokens": self.tokens, "finish": self.finish}

    @classmethod
    def of(cls, data: dict[str, Any]) -> Answer:
        return cls(str(data["text"]), data.get("tokens"), str(data.get("finish", "")))


@dataclass(frozen=True)
class InProcess:
    """What an in-process spec names: the CPU engine's precision, the card's MX formats, the twin's graph."""

    precision: str = "fp32"
    mx: Mx = NO_MX
    graph: str | None = None  # the twin's graph (None: exported for the run)

    @property
    def label(self) -> str:
        """``fp32``, ``bf16+mxfp6``, ``fp32+mxfp6+mxint8kv`` ..."""
        return "+".join(t for t in (self.precision, self.mx.label) if t)


@dataclass
class EvalPath:
    """A path: its name, how it answers, and (in-process) its engine."""

    name: str
    spec: str
    engine: Engine | None = None  # in-process paths: generation and scoring
    server: Adapter | None = None  # served paths
    model: str = ""
    answers: list[Answer] | None = None  # a recorded run's answers (no generation)
    recorded: dict[str, Any] = field(default_factory=dict)  # a recorded run's figures
    info: ModelInfo | None = None  # a served model's, once read

    @property
    def kind(self) -> str:
        return "in-process" if self.engine is not None else "served" if self.server is not None else "recorded"

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer if self.engine is not None else None

    def generate(self, prompts: Sequence[str], max_tokens: int, advance: Advance,
                 images: Sequence[tuple[bytes, ...]] = ()) -> list[Answer]:
        """Greedy answers to every prompt (``images``: each one's), at most ``max_tokens`` each; ``advance(n)`` as
        prompts finish."""
        if self.answers is not None:
            if len(self.answers) != len(prompts):
                raise SpecError(f"{self.name} recorded {len(self.answers)} answers for {len(prompts)} prompts")
            advance(len(prompts))
            return self.answers
        if self.engine is not None:
            return self._in_process(self.engine, prompts, max_tokens, advance, images)
        return self._served(prompts, max_tokens, advance, images)

    def _in_process(self, engine: Engine, prompts: Sequence[str], max_tokens: int, advance: Advance,
                    images: Sequence[tuple[bytes, ...]] = ()) -> list[Answer]:
        params = SamplingParams(max_tokens=max_tokens)
        seqs = [_with_images(engine, prompt, images[i], params) if images else
                engine.prepare(engine.encode(prompt), params) for i, prompt in enumerate(prompts)]
        engine.enqueue(seqs)
        done = 0
        while not all(s.finished for s in seqs):
            for update in engine.step():
                if update.finished:
                    done += 1
                    advance(1)
        advance(len(prompts) - done)
        return [Answer(s.text, list(s.tokens), s.finish_reason or "") for s in seqs]

    def _served(self, prompts: Sequence[str], max_tokens: int, advance: Advance,
                images: Sequence[tuple[bytes, ...]] = ()) -> list[Answer]:
        params = GenerationParams(max_tokens=max_tokens, temperature=0.0, logprobs=0)
        return [Answer(r.text, _ids(r), r.finish_reason) for r in self._ask(prompts, params, advance, images)]

    @property
    def scores(self) -> bool:
        """It can score a continuation: in-process, or a served model with a ``continuation`` input."""
        if self.engine is not None:
            return True
        return self.server is not None and self.served_info().input("continuation") is not None

    def served_nll(self, prompts: Sequence[str], continuations: Sequence[list[int] | str]) -> list[list[float]]:
        """Each continuation's per-token negative log-likelihood after its prompt, scored by the server."""
        params = GenerationParams(logprobs=0, continuations=tuple(continuations))
        return [[-float(e["logprob"]) for e in r.logprobs or ()] for r in self._ask(prompts, params, lambda n: None)]

    def _ask(self, prompts: Sequence[str], params: GenerationParams, advance: Advance,
             images: Sequence[tuple[bytes, ...]] = ()) -> list[Reply]:
        """Every prompt's reply, :data:`REQUEST_PROMPTS` a request (a continuation each, when ``params`` has them);
        raw prompts, streamed where the model streams, else one response. With ``images`` (each prompt's), a
        request a prompt, as a chat's user message where the model has a chat template (an OpenAI-compatible server
        takes images in chat requests only)."""
        info = self.served_info()
        assert self.server is not None, "a served path"
        mode = "stream" if "stream" in info.modes and "stream" in self.server.modes else "batch"
        replies: list[Reply] = []
        size = 1 if images else REQUEST_PROMPTS
        for start in range(0, len(prompts), size):
            group = list(prompts[start:start + size])
            part = params if params.continuations is None else \
                params.replace(continuations=params.continuations[start:start + len(group)])
            settings = Settings(self.model, mode=mode, params=part, chat=None if images else False,
                                images=images[start] if images else ())
            got: dict[int, Reply] = {}
            with contextlib.closing(iter(prepare(self.server, settings, group, info=info).call)) as events:
                for event in events:
                    if isinstance(event, Reply):
                        got[event.index] = event
                        advance(1)
                    elif isinstance(event, Failure):
                        raise event.error(f"{self.name}: {event.message}")
            replies += [got[i] for i in range(len(group))]
        return replies

    def served_info(self) -> ModelInfo:
        """The served model's info (read once, over the protocol its sends use)."""
        if self.info is None:
            assert self.server is not None, "a served path"
            mode = "stream" if "stream" in self.server.modes else "batch"
            info = self.server.model_info(self.model, mode)
            if mode == "stream" and "stream" not in info.modes:
                info = read_info(self.server, Settings(self.model, mode="batch"))
            self.info = info
        return self.info


def _with_images(engine: Engine, prompt: str, images: tuple[bytes, ...], params: SamplingParams) -> Any:
    """The sequence of a prompt with its images, as a served model gets a chat with them: the user's message, the
    image parts before its text, rendered and encoded by the backend's own processor and vision encoder."""
    if engine.images is None:
        raise SpecError("the in-process model reads text only: give --model a vision-language model's folder "
                        f"(or {EMBEDDED_VISION}, the vision sample's)")
    chat = placed(chat_messages([prompt])[0], [{"type": "image"}] * len(images))
    _, ids, media = engine.images.prepare(None, chat, list(images))
    return engine.prepare(ids, params, media=media)


def _ids(reply: Reply) -> list[int] | None:
    """The reply's token ids, from its log-probability entries (the bundled backend's); None without them."""
    entries = reply.logprobs
    if entries is None or not all(isinstance(e, dict) and isinstance(e.get("id"), int) for e in entries):
        return None
    return [e["id"] for e in entries]


def in_process(precision: str, source: str, progress: Progress, graph: str | Path | None = None,
               mx: Mx = NO_MX, images: bool = False) -> Engine:
    """The CPU engine at ``precision`` (or, with ``graph``, the ONNX twin) on the samples' dimensions, computing the
    card's MX formats ``mx`` as the compile config's keys ask; ``images``: ``source`` as a vision-language model (the
    embedded one: the vision sample's)."""
    formats = {"mxfp6_matmul": mx.mxfp6_matmul, "mxint8_kv_cache": mx.mxint8_kv_cache}
    dims = compile_config.validate({**DIMS, **formats, **({"onnx_path": str(graph)} if graph else {})}, "eval")
    if images:
        source = EMBEDDED_VISION if source == EMBEDDED else source
    settings = BackendSettings(engine="onnx" if graph else "cpu", hf_model_name=source, precision=precision,
                               compile=dims, task=IMAGE_TEXT_TO_TEXT if images else "", max_images=MAX_IMAGES)
    engine, described = build_engine(settings, progress)
    progress(described)
    return engine


@contextlib.contextmanager
def opened(specs: Sequence[str], source: str, progress: Progress, images: bool = False) -> Iterator[list[EvalPath]]:
    """The paths ``specs`` name, in order: every spec parsed and every served model's config read before any engine
    loads (``images``: the prompts bring images, which only served paths take); temporary graphs are removed on
    exit."""
    parsed = [parse(spec) for spec in specs]
    if images and any(kind == "twin" for kind, _ in parsed):
        raise SpecError(NO_IMAGES)
    names: set[str] = set()
    labels = [unique(spec if kind == "served" else f"cpu-{arg.label}" if kind == "cpu"
                     else "twin" + (f"-{arg.mx.label}" if arg.mx else ""), names)
              for spec, (kind, arg) in zip(specs, parsed)]
    served: dict[int, EvalPath] = {}
    for i, (kind, arg) in enumerate(parsed):
        if kind == "served":
            model, url = arg
            http, _, grpc = url.partition(",")
            served[i] = EvalPath(labels[i], specs[i], server=adapter_for(http, grpc_url=grpc or None), model=model)
            served[i].served_info()  # ClientError now when the model is not served there
    with tempfile.TemporaryDirectory(prefix="qaic-eval-") as scratch:
        paths, exported = [], None
        for i, (kind, arg) in enumerate(parsed):
            if kind == "served":
                paths.append(served[i])
            elif kind == "cpu":
                engine = in_process(arg.precision, source, progress, mx=arg.mx, images=images)
                paths.append(EvalPath(labels[i], specs[i], engine=engine))
            else:
                if arg.graph is None and exported is None:
                    exported = _export(source, scratch, progress)
                engine = in_process("fp32", source, progress, arg.graph or exported, arg.mx)
                paths.append(EvalPath(labels[i], specs[i], engine=engine))
        yield paths


def parse(spec: str) -> tuple[str, Any]:
    """(kind, argument) of a spec: ("served", (model, url)), ("cpu", InProcess) or ("twin", InProcess)."""
    spec = spec.strip()
    if spec.startswith("cpu:"):
        terms = spec[4:].split("+")
        precision = terms[0] if terms[0] in PRECISIONS else "fp32"
        return "cpu", InProcess(precision, _formats(spec, terms[1:] if terms[0] in PRECISIONS else terms))
    if spec == "twin" or spec.startswith("twin:"):
        terms = spec[5:].split("+") if spec[5:] else []
        at = len(terms)
        while at and terms[at - 1] in TERMS:  # trailing MX formats; the rest names a graph
            at -= 1
        graph = "+".join(terms[:at]) or None
        if graph is not None and not Path(graph).expanduser().exists():
            raise SpecError(f"{spec!r}: no graph at {graph}")
        return "twin", InProcess(mx=_formats(spec, terms[at:]), graph=graph)
    model, at_sign, url = spec.partition("@")
    if not at_sign or not model or not url:
        raise SpecError(f"{spec!r} names no path: use {SPEC_HELP}")
    return "served", (model, url)


def _formats(spec: str, terms: list[str]) -> Mx:
    """The MX formats a spec's terms name (none: NO_MX); a SpecError names what is neither."""
    if not terms:
        return NO_MX
    try:
        return Mx.parse("+".join(terms))
    except ValueError as exc:
        raise SpecError(f"{spec!r}: the CPU engine's precision is one of {', '.join(PRECISIONS)}; {exc}") from None


def unique(name: str, taken: set[str]) -> str:
    """``name``, numbered when already taken."""
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}#{n}", n + 1
    taken.add(candidate)
    return candidate


def _export(source: str, scratch: str, progress: Progress) -> Path:
    from repo_gen.onnx_export import export

    return export(source, scratch, ctx_len=DIMS["ctx_len"], prefill_seq_len=DIMS["prefill_seq_len"],
                  full_batch_size=DIMS["full_batch_size"], progress=progress).graph
