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
            case Failure(message=m, error=e): ...   # e: Timeout, Cancelled, Unreachable...
"""

from .batch import BatchCall, generate, infer
from .call import Call
from .errors import (
    CANCEL_NOTE,
    BadRequest,
    Cancelled,
    ClientError,
    IdleTimeout,
    NotServed,
    Refused,
    ServerFault,
    Timeout,
    Unexpected,
    Unreachable,
    UsageError,
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
from .interface_registry import interface_of
from .interfaces import Interface
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
    "BY_NAME",
    "CANCEL_NOTE",
    "CAUSAL_TIMEOUT",
    "CONTROLS",
    "KV_TIMEOUT",
    "BadRequest",
    "BatchCall",
    "Cancelled",
    "IdleTimeout",
    "NotServed",
    "Refused",
    "ServerFault",
    "Timeout",
    "Unexpected",
    "Unreachable",
    "Call",
    "ClientError",
    "UsageError",
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
