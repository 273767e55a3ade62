"""Triton glue: ``TritonPythonModel`` serving the engine in batch or decoupled mode.

``execute`` validates and queues every request, then returns None; ``serving.Serving`` runs the
engine on one thread and answers on another through each request's response sender: per decode
step in decoupled mode, once at the end in batch mode, and always with exactly one final response
(errors and cancellations included). Concurrent requests share the engine's slots.
"""

from __future__ import annotations

import json
import traceback
from dataclasses import replace
from functools import partial
from typing import List, Optional, Tuple

import numpy as np
import triton_python_backend_utils as pb_utils

from .build import BackendSettings, build_engine
from .contract.errors import GENERATION_FAILED, READ_FAILED, BadRequest
from .engine.logprobs import TokenLogprob, TokenTexts
from .engine.loop import Engine
from .engine.media import Media
from .engine.metrics import publish
from .engine.sampling import SamplingParams
from .sessions.qaic import qaic_available
from .sessions.threads import served_cpu_models
from .triton import heap
from .triton.inputs import Inputs, encode, encode_continuations, image_prompt, prompts_of, read_inputs
from .triton.serving import Request, Serving

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _log(level: str, message: str) -> None:
    logger = pb_utils.Logger
    getattr(logger, f"log_{level}")(message)


def _array(request, name: str):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


def _unknown(request) -> list[str]:
    """The request's parameters: the generate endpoint makes them of body fields that name no input."""
    text = request.parameters() if hasattr(request, "parameters") else ""  # Triton 23.02 on
    try:
        return list(json.loads(text or "{}"))
    except ValueError:
        return ["parameters"]


def _error(message: str, invalid: bool) -> pb_utils.TritonError:
    """A TritonError; ``invalid``: the client's fault (HTTP 400, gRPC INVALID_ARGUMENT), where Triton has codes."""
    code = getattr(pb_utils.TritonError, "INVALID_ARG", None) if invalid else None  # codes: Triton 23.09 on
    return pb_utils.TritonError(message) if code is None else pb_utils.TritonError(message, code)


# 3.8: typing names at run time
Parsed = Tuple[Request, List[List[int]], SamplingParams, Optional[List[List[int]]], Optional[List[Media]]]


def parse(request, inputs: Inputs, engine: Engine, decoupled: bool) -> Parsed:
    """A checked request (its prompts' tokens, parameters, continuations to score and images); BadRequest with a
    message for the client."""
    with_images = image_prompt(engine, inputs)  # the processor renders, expands and encodes the images
    media = None
    if with_images is not None:
        prompts, encoded, media = with_images
    else:
        prompts = prompts_of(engine, inputs)  # messages: rendered by the model's chat template
        encoded = encode(engine, prompts)
    forced = None if inputs.continuations is None else encode_continuations(engine, encoded, inputs.continuations)
    params = inputs.params()
    if "max_tokens" not in inputs.controls and engine.default_max_tokens:  # unset; 0 asks for the whole context
        params = replace(params, max_tokens=engine.default_max_tokens)
    streaming = decoupled and inputs.stream is not False
    req = Request(
        sender=request.get_response_sender(),
        request_id=inputs.request_id or request.request_id() or "-",
        prompts=prompts,
        input_tokens=[len(i) for i in encoded],
        include_prompt=not streaming and not inputs.exclude_input,  # one answer echoes the prompt (vllm's way)
        streaming=streaming,
        key=request.request_id() or inputs.request_id or "",  # generate sends no Triton id: its "id" input
        status_key=inputs.status_key,
    )
    return req, encoded, params, forced, media


def _response(**outputs) -> pb_utils.InferenceResponse:
    tensors = []
    for name, values in outputs.items():
        dtype = np.object_ if name in ("text_output", "finish_reason", "logprobs") else np.int32
        tensors.append(pb_utils.Tensor(name, np.array(values, dtype=dtype)))
    return pb_utils.InferenceResponse(output_tensors=tensors)


class TritonResponder:
    """Responses through Triton's response senders: new text per step, or everything at the end; the
    ``logprobs`` output (JSON per prompt, :mod:`.engine.logprobs`) beside the text when the request asks for it."""

    def __init__(self, texts: TokenTexts) -> None:
        self.texts = texts

    def _logprobs(self, req: Request, logprobs: list[list[TokenLogprob]]) -> dict[str, list[str]]:
        if not req.seqs or req.seqs[0].params.logprobs is None:
            return {}
        return {"logprobs": [self.texts.json(entries) for entries in logprobs]}

    def send(self, req: Request, texts: list[str], final: bool, logprobs: list[list[TokenLogprob]]) -> None:
        if not final:
            req.sender.send(_response(text_output=texts, **self._logprobs(req, logprobs)))
            return
        errors = [s.error for s in req.seqs if s.finish_reason == "error"]
        if errors:
            response = pb_utils.InferenceResponse(error=_error(f"{GENERATION_FAILED}: {errors[0]}", invalid=False))
        else:
            if not req.streaming:
                texts = [(p if req.include_prompt else "") + s.text for p, s in zip(req.prompts, req.seqs)]
            response = _response(text_output=texts, finish_reason=[s.finish_reason for s in req.seqs],
                                 input_tokens=req.input_tokens, output_tokens=[len(s.tokens) for s in req.seqs],
                                 **self._logprobs(req, logprobs))
        req.sender.send(response, flags=FINAL)


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        with heap.loading():  # the stub loads without collections; what it loaded is never scanned again
            self._initialize(args)

    def _initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        self.name = args["model_name"]
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        instance = args.get("model_instance_name", "")  # NAME_0_<i>: the i-th instance (Triton 2.51, measured)
        settings = BackendSettings.from_model_dir(args["model_repository"], params, instance)
        if not settings.cpu_threads:  # automatic: share the CPUs with the server's other CPU models
            settings.cpu_models = served_cpu_models(args["model_repository"], card=qaic_available())
        self.engine, description = self.build(settings)
        devices = ",".join(map(str, settings.device_ids)) if settings.device_ids is not None else "none"
        _log("info", f"{self.name}: {description} decoupled={self.decoupled} instance={settings.instance} "
                     f"devices={devices}")
        labels = {"model": self.name, "version": str(args.get("model_version", "")),  # as Triton's own metrics
                  "instance": str(settings.instance)}
        self.metrics = publish(pb_utils, self.engine, labels, _log)
        self.serving = Serving(self.engine, TritonResponder(self.engine.token_texts), _log, self.name)
        self.instances = sum(int(g.get("count", 1)) for g in config.get("instance_group", [])) or 1

    def build(self, settings: BackendSettings) -> tuple[Engine, str]:
        """The engine and its one-line description (a subclass may serve another engine)."""
        return build_engine(settings, progress=lambda m: _log("info", f"{self.name}: {m}"))

    def execute(self, requests):
        for request in requests:
            try:
                inputs = read_inputs(partial(_array, request), self.engine.max_prompt_bytes, _unknown(request))
                if inputs.status_of is not None:
                    self._status(request, inputs.status_of, inputs.status_key)
                    continue
                parsed = parse(request, inputs, self.engine, self.decoupled)
                self.serving.submit(*parsed)
                if self.instances > 1:  # Triton hands the next request to an instance that can start it
                    self.serving.wait_admitted(parsed[0])
            except BadRequest as exc:
                self._refuse(request, str(exc), invalid=True)
                continue
            except Exception as exc:  # a bug of ours: the client gets one line, the server log the traceback
                _log("error", f"{self.name}: reading a request failed: {traceback.format_exc()}")
                self._refuse(request, f"{READ_FAILED} to read the request ({type(exc).__name__}); see the "
                             "server log", invalid=False)
                continue
        return None

    def _refuse(self, request, message: str, invalid: bool) -> None:
        _log("warn", f"{self.name}: rejected request: {message}")
        self.engine.meter.rejected()
        error = pb_utils.InferenceResponse(error=_error(message, invalid))
        request.get_response_sender().send(error, flags=FINAL)

    def _status(self, request, asked: str, key: str) -> None:
        """Answer ``status_of``: ``running`` when the request with Triton id ``asked`` runs here and was sent with
        the question's ``status_key`` (``key``), else ``unknown`` (a client whose stream went quiet asks about its own
        request; after the model was reloaded, the new instance does not know it). No token counts."""
        req = self.serving.find(asked)
        running = req is not None and req.status_key == key
        response = _response(text_output=["running" if running else "unknown"], finish_reason=["status"])
        request.get_response_sender().send(response, flags=FINAL)

    def finalize(self) -> None:
        self.serving.stop()
        if self.metrics is not None:
            self.metrics.stop()
