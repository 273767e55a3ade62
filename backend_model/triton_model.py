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
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np
import triton_python_backend_utils as pb_utils

from .build import BackendSettings, build_engine
from .engine import Engine, Sequence, Update
from .inputs import Inputs, encode, read_inputs
from .sampling import BadRequest, SamplingParams

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _log(level: str, message: str) -> None:
    logger = pb_utils.Logger
    getattr(logger, f"log_{level}")(message)


def _array(request, name: str):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


@dataclass
class Request:
    """One Triton request: its prompts' sequences and where to answer."""

    sender: object
    request_id: str
    prompts: list[str]
    input_tokens: list[int]
    include_prompt: bool
    streaming: bool  # one response per decode step (decoupled, unless the request asked stream=false)
    seqs: list[Sequence] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)


def parse(request, inputs: Inputs, engine: Engine, decoupled: bool) -> tuple[Request, list[list[int]], SamplingParams]:
    """A checked request; BadRequest with a message for the client."""
    encoded = encode(engine, inputs.prompts)
    params = inputs.params()
    if params.max_tokens is None and engine.default_max_tokens:
        params = replace(params, max_tokens=engine.default_max_tokens)
    streaming = decoupled and inputs.stream is not False
    req = Request(
        sender=request.get_response_sender(),
        request_id=inputs.request_id or request.request_id() or "-",
        prompts=inputs.prompts,
        input_tokens=[len(i) for i in encoded],
        include_prompt=not streaming and not inputs.exclude_input,  # one answer echoes the prompt (vllm's way)
        streaming=streaming,
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
        self.running: dict[str, Request] = {}  # Triton request id -> its request (for status_of)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._loop, name=f"{self.name}-engine", daemon=True)
        self._worker.start()

    def execute(self, requests):
        for request in requests:
            try:
                inputs = read_inputs(partial(_array, request))
                if inputs.status_of is not None:
                    self._status(request, inputs.status_of)
                    continue
                req, encoded, params = parse(request, inputs, self.engine, self.decoupled)
            except BadRequest as exc:
                _log("warn", f"{self.name}: rejected request: {exc}")
                error = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
                request.get_response_sender().send(error, flags=FINAL)
                continue
            req.seqs = [self.engine.prepare(ids, params, tag=(req, i)) for i, ids in enumerate(encoded)]
            with self._lock:
                self.requests[id(req)] = req
                self.running[request.request_id()] = req
            self.engine.enqueue(req.seqs)
        return None

    def _status(self, request, request_id: str) -> None:
        """Answer ``status_of``: whether the request with that Triton id runs here (a client whose stream
        went quiet asks; after the model was reloaded, the new instance does not know it)."""
        with self._lock:
            req = self.running.get(request_id)
        state = "unknown" if req is None else "running"
        tokens = sum(len(s.tokens) for s in req.seqs) if req is not None else 0
        response = _response(text_output=[state], finish_reason=["status"], input_tokens=[0], output_tokens=[tokens])
        request.get_response_sender().send(response, flags=FINAL)

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
            if req.streaming and not finished and any(texts.values()):
                self._send(req, _response(text_output=[texts.get(i, "") for i in range(len(req.seqs))]))
            if finished:
                self._finish(req, texts)

    def _finish(self, req: Request, last: dict[int, str]) -> None:
        with self._lock:
            self.requests.pop(id(req), None)
            for key in [k for k, r in self.running.items() if r is req]:
                del self.running[key]
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
            if req.streaming:
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
