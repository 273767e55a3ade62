"""The wire: requests to Triton (tritonclient: streaming, batch and generate calls) and to OpenAI-compatible
servers (the ``openai`` client: streamed or one answer), all as event streams, and the interfaces of the
models they serve. Which kind of server a URL names, and what a front end may ask of it, is decided by
:mod:`console.core.adapters`; the HTTP API a console uses to run a tritonserver is in :mod:`console.server.health`.

Typical use (any UI)::

    call = stream(grpc_url, "smollm2_decoupled", split_prompts("My name is|Maroon bells"),
                  GenerationParams(max_tokens=64), Timeouts(network=600, idle=120))
    for event in call:          # call.cancel() from another thread stops it, on the server too
        match event:
            case TextDelta(index=i, text=t): ...
            case Reply(index=i, text=t, finish_reason=r, stats=s): ...
            case Failure(message=m, kind=k): ...
"""

from . import triton_peers  # noqa: F401 (registers vLLM's, TensorRT-LLM's and text models' interfaces)
from .batch import BatchCall, generate, infer
from .call import Call
from .errors import (
    BAD_REQUEST,
    CANCEL_NOTE,
    CANCELLED,
    CONNECTION,
    IDLE_TIMEOUT,
    SERVER,
    TIMEOUT,
    ClientError,
)
from .events import (
    CAUSAL_TIMEOUT,
    KV_TIMEOUT,
    Event,
    Failure,
    ModelInfo,
    Reply,
    ReplyStats,
    Tensor,
    TextDelta,
    Timeouts,
    default_timeout,
    new_request_id,
    split_prompts,
)
from .interfaces import Interface, interface_of
from .openai_api import OPENAI, base_url, is_openai_url, openai_info
from .openai_call import OpenAICall, openai_call
from .openai_interface import OpenAIInterface
from .params import BY_NAME, CONTROLS, Control, GenerationParams
from .stats import aggregate, format_stats, live_stats, reply_stats
from .stream import StreamCall, stream
from .wire import info_from_config, model_info, normalize_url

__all__ = [
    "OPENAI",
    "OpenAICall",
    "OpenAIInterface",
    "base_url",
    "is_openai_url",
    "openai_call",
    "openai_info",
    "BAD_REQUEST",
    "BY_NAME",
    "CANCELLED",
    "CANCEL_NOTE",
    "CAUSAL_TIMEOUT",
    "CONNECTION",
    "CONTROLS",
    "IDLE_TIMEOUT",
    "KV_TIMEOUT",
    "SERVER",
    "TIMEOUT",
    "BatchCall",
    "Call",
    "ClientError",
    "Control",
    "Event",
    "Failure",
    "GenerationParams",
    "Interface",
    "ModelInfo",
    "Reply",
    "ReplyStats",
    "StreamCall",
    "Tensor",
    "TextDelta",
    "Timeouts",
    "aggregate",
    "default_timeout",
    "format_stats",
    "generate",
    "infer",
    "info_from_config",
    "interface_of",
    "live_stats",
    "model_info",
    "new_request_id",
    "normalize_url",
    "reply_stats",
    "split_prompts",
    "stream",
]
