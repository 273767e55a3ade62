"""The only code that speaks tritonclient: streaming, batch and generate calls as event streams.

Typical use (any UI)::

    call = stream(grpc_url, "smollm2_decoupled", split_prompts("My name is|Maroon bells"),
                  GenerationParams(max_tokens=64), Timeouts(network=600, idle=120))
    for event in call:          # call.cancel() from another thread stops it, on the server too
        match event:
            case TextDelta(index=i, text=t): ...
            case Reply(index=i, text=t, finish_reason=r, stats=s): ...
            case Failure(message=m, kind=k): ...
"""

from .batch import BatchCall, Call, generate, infer, model_info, normalize_url, ready_models
from .events import (
    BAD_REQUEST,
    CANCELLED,
    CAUSAL_TIMEOUT,
    CONNECTION,
    IDLE_TIMEOUT,
    KV_TIMEOUT,
    SERVER,
    TIMEOUT,
    ClientError,
    Event,
    Failure,
    GenerationParams,
    ModelInfo,
    Reply,
    ReplyStats,
    TextDelta,
    Timeouts,
    default_timeout,
    split_prompts,
)
from .stats import aggregate, format_stats, reply_stats
from .stream import StreamCall, stream

__all__ = [
    "BAD_REQUEST",
    "CANCELLED",
    "CAUSAL_TIMEOUT",
    "CONNECTION",
    "IDLE_TIMEOUT",
    "KV_TIMEOUT",
    "SERVER",
    "TIMEOUT",
    "BatchCall",
    "Call",
    "ClientError",
    "Event",
    "Failure",
    "GenerationParams",
    "ModelInfo",
    "Reply",
    "ReplyStats",
    "StreamCall",
    "TextDelta",
    "Timeouts",
    "aggregate",
    "default_timeout",
    "format_stats",
    "generate",
    "infer",
    "model_info",
    "normalize_url",
    "ready_models",
    "reply_stats",
    "split_prompts",
    "stream",
]
