"""The embedded SmolLM2 samples: their repository in the cache and a server on it for one run."""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from backend_model.models import cache_root

from . import logparse
from .process import START_TIMEOUT, TritonServer

EMBEDDED_DEFAULTS = {"stream": "smollm2_decoupled", "batch": "smollm2_kv", "generate": "smollm2_kv"}
DEFAULT_MODELS = tuple(dict.fromkeys(EMBEDDED_DEFAULTS.values()))  # what the consoles load by default
# `qaic-console` without a terminal (`make run` piped): a chat demo on the embedded stream sample. Prompts this tiny
# model answers right and briefly, at int4 (the demo samples) and fp32 alike, alone and together: kept from some sixty
# tried on the served model (chat template, greedy); "the capital of France" came back as "L'Étoile".
DEMO_PROMPTS = "What is the capital of Japan?|Name three primary colors."
DEMO_NOTE = ("demo: the embedded SmolLM2-135M-Instruct (135M parameters, 4-bit on this CPU: quick, right on simple "
             "questions) answers two prompts through a real tritonserver; on a terminal qaic-console opens the console")
# A send or a bench without --url waits for a server of its own each time: how to wait once
SERVE_TIP = ("tip: without --url every run starts and stops a tritonserver of its own; start one once with "
             "`qaic-console serve` and pass the address it prints with --url")

Progress = Callable[[str], None]


def _fingerprint() -> str:
    """Changes when the backend or the sample definitions change (the cached repo is then rewritten)."""
    from repo_gen import samples
    from repo_gen.writer import TEMPLATES, bundled_backend_package

    digest = hashlib.sha256()
    backend = bundled_backend_package()
    named = [(str(p.relative_to(backend)), p) for p in sorted(backend.rglob("*.py"))]  # each room's files
    named += [(p.name, p) for p in sorted(TEMPLATES.iterdir()) if p.is_file()]
    for name, path in [*named, ("samples.py", Path(samples.__file__))]:
        digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def embedded_repo(progress: Progress, vision: bool = False) -> Path:
    """``<cache>/llm_model_dir`` with the embedded samples (``vision``: ``<cache>/llm_model_dir_vision`` with the
    vision sample, apart so the consoles' repository stays text), (re)written when missing or stale."""
    from repo_gen.samples import EMBEDDED_ALL, VISION_SAMPLES, write_samples

    names = VISION_SAMPLES if vision else EMBEDDED_ALL
    repo = cache_root() / ("llm_model_dir_vision" if vision else "llm_model_dir")
    stamp = repo.with_name(f"{repo.name}.stamp")
    fingerprint = _fingerprint()
    fresh = stamp.is_file() and stamp.read_text().strip() == fingerprint
    if fresh and all((repo / name / "config.pbtxt").is_file() for name in names):
        return repo
    progress(f"writing the embedded model repository {repo} ...")
    write_samples(names, repo, force=True)
    stamp.write_text(fingerprint + "\n")
    return repo


def check_embedded(model: str) -> None:
    """ValueError unless ``model`` is one of the embedded samples (or the vision sample)."""
    from repo_gen.samples import EMBEDDED_SAMPLES, VISION_SAMPLES

    if model not in EMBEDDED_SAMPLES + VISION_SAMPLES:
        raise ValueError(f"model {model!r} is not an embedded sample ({', '.join(EMBEDDED_SAMPLES + VISION_SAMPLES)}): "
                         "pass --url to use a running tritonserver")


@contextlib.contextmanager
def embedded_server(model: str, progress: Progress) -> Iterator[TritonServer]:
    """A tritonserver on the cached embedded repository, loading only ``model``; stopped on exit."""
    from repo_gen.samples import VISION_SAMPLES

    check_embedded(model)
    progress(SERVE_TIP)
    repo = embedded_repo(progress, vision=model in VISION_SAMPLES)
    server = TritonServer(repo, models=(model,))
    starting = [True]

    def on_log(line: str) -> None:
        shown = logparse.startup_line(line) if starting[0] else None
        if shown:
            progress(f"  {shown}")

    t0 = time.perf_counter()
    progress(f"starting tritonserver on {repo} (model {model}) ...")
    try:
        server.start(timeout=START_TIMEOUT, on_log=on_log)
        starting[0] = False
        states = ", ".join(f"{n} {s}" for n, (s, _) in sorted(server.handle.model_states().items()) if s)
        progress(f"tritonserver ready in {time.perf_counter() - t0:.1f} s: {states} "
                 f"(HTTP {server.http_url}, gRPC {server.grpc_url})")
        yield server
    finally:
        starting[0] = False
        if server.running:
            progress("stopping tritonserver ...")
        server.stop()
