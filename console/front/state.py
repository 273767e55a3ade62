"""What the front serves (:class:`Front`): its upstream, key, tokenizers and counters, shared by every route."""

from __future__ import annotations

from dataclasses import dataclass, field

from .media import Fetcher, MediaRules
from .metrics_route import FrontMetrics
from .protocol import Upstream
from .served import Served
from .tokenizers import Tokenizers


@dataclass
class Front:
    """The models behind the front (a :class:`~.upstream.TritonUpstream`; a test's fake), the API key clients bring
    (None: none asked), the tokenizers, the format of every model's tool calls (``--tool-call-parser``; None: each
    template's), the names it serves (models and their adapters), the rules of the images requests bring and their
    fetcher, whether adapters are loaded and unloaded at run time, and the front's own counters."""

    upstream: Upstream
    api_key: str | None = None
    tokenizers: Tokenizers = field(default_factory=Tokenizers)
    tool_parser: str | None = None
    media: MediaRules = field(default_factory=MediaRules)
    fetcher: Fetcher = field(default_factory=Fetcher)
    runtime_lora: bool = False  # vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter are served
    metrics: FrontMetrics = field(init=False, default_factory=FrontMetrics)
    served: Served = field(init=False)

    def __post_init__(self) -> None:
        self.served = Served(self.upstream)
