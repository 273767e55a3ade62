"""Triton glue: ``TritonPythonModel`` serving the engine in batch or decoupled mode.

``execute`` validates and queues every request, then returns None; one worker thread runs the
engine and answers through each request's response sender: per decode step in decoupled mode,
once at the end in batch mode, and always with exactly one final response (errors and
cancellations included). Concurrent requests share the engine's slots.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import triton_python_backend_utils as pb_utils

from .build import BackendSettings, build_engine
from .engine import Engine, Sequence, Update
from .sampling import BadRequest, SamplingParams

MAX_PROMPTS = 256
CONTROLS = ("max_tokens", "temperature", "top_p", "top_k", "seed", "repetition_penalty")
FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _log(level: str, message: str) -> None:
    logger = pb_utils.Logger
    getattr(logger, f"log_{level}")(message)


def _strings(request, name: str) -> list[str] | None:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    out = []
    for i, item in enumerate(tensor.as_numpy().reshape(-1)):
        if isinstance(item, bytes):
            try:
                item = item.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BadRequest(f"{name}[{i}] is not valid UTF-8 (byte {exc.start})") from None
        out.append(str(item))
    return out


def _scalar(request, name: str):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    values = tensor.as_numpy().reshape(-1)
    if values.size != 1:
        raise BadRequest(f"{name} takes one value, got {values.size}")
    return values[0].item()


@dataclass
class Request:
    """One Triton request: its prompts' sequences and where to answer."""

    sender: object
    request_id: str
    prompts: list[str]
    input_tokens: list[int]
    include_prompt: bool
    seqs: list[Sequence] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)


def parse(request, engine: Engine, decoupled: bool) -> tuple[Request, list[list[int]], SamplingParams]:
    """Validate a request's inputs; raise BadRequest with a message for the client."""
    prompts = _strings(request, "prompt")
    if not prompts:
        raise BadRequest("no prompt given")
    if len(prompts) > MAX_PROMPTS:
        raise BadRequest(f"at most {MAX_PROMPTS} prompts per request, got {len(prompts)}")
    encoded = []
    for i, prompt in enumerate(prompts):
        if not prompt.strip():
            raise BadRequest(f"prompt {i} is empty")
        ids = engine.encode(prompt)
        try:
            engine.check_prompt(ids)
        except BadRequest as exc:
            raise BadRequest(f"prompt {i}: {exc}") from None
        encoded.append(ids)
    given = {name: _scalar(request, name) for name in CONTROLS}
    if given["max_tokens"] == 0:  # 0 asks for the default: until EOS or ctx_len
        given["max_tokens"] = None
    params = SamplingParams(
        **{name: value for name, value in given.items() if value is not None},
        stop=tuple(_strings(request, "stop") or ()),
    )
    exclude = _scalar(request, "exclude_input_in_output")
    ids = _strings(request, "id")
    req = Request(
        sender=request.get_response_sender(),
        request_id=(ids[0] if ids else "") or request.request_id() or "-",
        prompts=prompts,
        input_tokens=[len(i) for i in encoded],
        include_prompt=not decoupled and not exclude,
    )
    return req, encoded, params


def _response(**outputs) -> pb_utils.InferenceResponse:
    tensors = []
    for name, values in outputs.items():
        dtype = np.object_ if name in ("text_output", "finish_reason") else np.int32
        tensors.append(pb_utils.Tensor(name, np.array(values, dtype=dtype)))
    return pb_utils.InferenceResponse(output_tensors=tensors)


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        self.name = args["model_name"]
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        settings = BackendSettings.from_model_dir(args["model_repository"], params)
        self.engine, description = build_engine(settings, progress=lambda m: _log("info", f"{self.name}: {m}"))
        _log("info", f"{self.name}: {description} decoupled={self.decoupled}")
        self.requests: dict[int, Request] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._loop, name=f"{self.name}-engine", daemon=True)
        self._worker.start()

    def execute(self, requests):
        for request in requests:
            try:
                req, encoded, params = parse(request, self.engine, self.decoupled)
            except BadRequest as exc:
                _log("warn", f"{self.name}: rejected request: {exc}")
                error = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
                request.get_response_sender().send(error, flags=FINAL)
                continue
            req.seqs = [self.engine.prepare(ids, params, tag=(req, i)) for i, ids in enumerate(encoded)]
            with self._lock:
                self.requests[id(req)] = req
            self.engine.enqueue(req.seqs)
        return None

    def finalize(self) -> None:
        self._stop.set()
        self.engine.wake()
        self._worker.join(timeout=30)

    # -- the worker ---------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self.engine.wait_for_work(timeout=0.2):
                continue
            try:
                self._check_cancelled()
                self._dispatch(self.engine.step())
            except Exception as exc:  # never let one bad step stop the server
                _log("error", f"{self.name}: engine step failed: {type(exc).__name__}: {exc}")

    def _check_cancelled(self) -> None:
        with self._lock:
            live = list(self.requests.values())
        for req in live:
            if req.sender.is_cancelled():
                for seq in req.seqs:
                    if not seq.finished:
                        self.engine.cancel(seq)

    def _dispatch(self, updates: list[Update]) -> None:
        by_request: dict[int, dict[int, str]] = {}
        for up in updates:
            req, index = up.seq.tag
            by_request.setdefault(id(req), {})[index] = up.text
        for key, texts in by_request.items():
            req = self.requests.get(key)
            if req is None:  # already answered
                continue
            finished = all(s.finished for s in req.seqs)
            if self.decoupled and not finished and any(texts.values()):
                self._send(req, _response(text_output=[texts.get(i, "") for i in range(len(req.seqs))]))
            if finished:
                self._finish(req, texts)

    def _finish(self, req: Request, last: dict[int, str]) -> None:
        with self._lock:
            self.requests.pop(id(req), None)
        errors = [s.error for s in req.seqs if s.finish_reason == "error"]
        reasons = [s.finish_reason for s in req.seqs]
        out_tokens = [len(s.tokens) for s in req.seqs]
        elapsed = time.perf_counter() - req.started
        _log(
            "info",
            f"{self.name}: request {req.request_id} prompts={len(req.seqs)} input_tokens={sum(req.input_tokens)} "
            f"output_tokens={sum(out_tokens)} finish={','.join(reasons)} time={elapsed:.3f}s",
        )
        if errors:
            response = pb_utils.InferenceResponse(error=pb_utils.TritonError(f"generation failed: {errors[0]}"))
        else:
            if self.decoupled:
                texts = [last.get(i, "") for i in range(len(req.seqs))]
            else:
                texts = [(p if req.include_prompt else "") + s.text for p, s in zip(req.prompts, req.seqs)]
            response = _response(
                text_output=texts, finish_reason=reasons, input_tokens=req.input_tokens, output_tokens=out_tokens
            )
        self._send(req, response, FINAL)

    def _send(self, req: Request, response, flags: int = 0) -> None:
        try:
            req.sender.send(response, flags=flags)
        except Exception as exc:  # the client went away; the request is over for us
            _log("verbose", f"{self.name}: request {req.request_id}: response not delivered: {exc}")
