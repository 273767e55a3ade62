"""What one ``bench`` run was asked: its command's options as one frozen value (the controls as request params)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from console.clients import GenerationParams
from console.core.controls import params_from_options


@dataclass(frozen=True)
class BenchOptions:
    """The ``bench`` options (their defaults are the command's); ``params``: the controls given."""

    url: tuple[str, ...] = ()
    api: str = "auto"
    metrics_url: tuple[str, ...] = ()
    prometheus: str | None = None
    compare_url: tuple[str, ...] = ()
    compare_model: str | None = None
    model: str | None = None
    endpoint: str = "generate"  # generate (the chat bench) or embeddings
    batch_size: int = 1  # embeddings: texts a request
    adapters: str | None = None  # "a,b": the LoRA adapters (or the model itself) requests go to in turn
    mode: str = "stream"
    protocol: str = "http"
    concurrency: str | None = None
    request_rate: str | None = None
    request_distribution: str = "constant"
    requests: int | None = None
    duration: float | None = None
    warmup: int = 2
    input_file: str | None = None
    images: str | None = None  # a folder of image files: each request takes the next; the same prompts also as text
    input_tokens_mean: float = 64
    input_tokens_stddev: float = 0
    output_tokens_mean: int = 64
    output_tokens_stddev: float = 0
    tokenizer: str | None = None
    shared_prefix_tokens: int = 0
    turns: int = 1
    slo: str | None = None
    seed: int = 0
    timeout: float | None = None
    idle_timeout: float | None = 120
    output_dir: Path | None = None
    plots: str = "png,html"
    json_: bool = False
    quiet: bool = False
    params: GenerationParams = field(default_factory=GenerationParams)

    @classmethod
    def from_command(cls, options: Mapping[str, Any]) -> BenchOptions:
        """The command's keyword arguments (click's): its options by name, its controls as ``params``."""
        names = {f.name for f in fields(cls)} - {"params"}
        given: dict[str, Any] = {name: tuple(value) if isinstance(value, list) else value
                 for name, value in options.items() if name in names}
        return cls(**given, params=params_from_options(options))
