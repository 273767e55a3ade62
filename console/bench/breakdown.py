"""One decode step of the demo samples' engine, kernel by kernel, beside llama.cpp's token on the same GGUF.

``qaic-console bench breakdown`` times, on the embedded model at the demo precision (int4) and the threads a served
CPU model gets, a decode step with 1 and with 8 rows decoding: the whole step as the loop runs it
(``engine.step``), the session's forward pass within it, and apart, on the same weights and shapes, the step's
matmuls (every ``Linear.rowwise``), its attention (each row over its own keys, every layer) and its sampling
(the argmax over the step's logits). What the forward pass spends beyond matmuls and attention (norms, rope,
cache writes, casts, Python) and what the step spends beyond the forward pass and sampling (the loop's
bookkeeping, detokenising) are the differences. Each figure is the fastest of ``steps`` runs, each part timed right
after its step (on a shared machine a neighbour only ever slows a run down, and hits every part alike).

Beside it, llama.cpp (llama-cpp-python, the same GGUF and threads), timed between our steps: as many tokens of one
sequence in one ``eval`` call as the step has rows (one row: a token; 8 rows: the same matmuls as 8 sequences'
one token each).
"""

from __future__ import annotations

import importlib.util
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from backend_model.build import BackendSettings, build_engine
from backend_model.contract import compile_config
from backend_model.engine.sampling import SamplingParams
from backend_model.models import embedded_gguf
from backend_model.sessions.threads import choose_threads
from repo_gen.samples import EMBEDDED_KV

from .engine import BENCH_PROMPTS

PRECISION = "int4"  # the demo samples' (repo_gen.samples)


@dataclass
class StepParts:
    """Milliseconds of one decode step at ``rows`` rows."""

    rows: int
    position: int  # the rows' mean position (attention's length)
    step: float  # engine.step(): the forward pass, sampling and the loop
    forward: float  # session.run
    matmuls: float
    attention: float
    sampling: float
    llama_cpp: float | None = None  # llama.cpp: ``rows`` tokens of one sequence in one call (None: not timed)

    @property
    def other_forward(self) -> float:
        """Norms, rope, cache writes, casts and Python in the forward pass."""
        return self.forward - self.matmuls - self.attention

    @property
    def loop(self) -> float:
        """The engine's own work: bookkeeping, detokenising, stop rules."""
        return self.step - self.forward - self.sampling

    def as_dict(self) -> dict[str, Any]:
        parts = ("step", "forward", "matmuls", "attention", "other_forward", "sampling", "loop")
        out = {"rows": self.rows, "position": self.position,
               **{f"{name}_ms": round(getattr(self, name), 3) for name in parts},
               "tokens_per_s": round(1000 * self.rows / self.step, 1)}
        if self.llama_cpp is not None:
            out.update(llama_cpp_ms=round(self.llama_cpp, 3),
                       llama_cpp_tokens_per_s=round(1000 * self.rows / self.llama_cpp, 1))
        return out


def _ms(run: Callable[..., object], *args: Any) -> float:
    start = time.perf_counter()
    run(*args)
    return 1000 * (time.perf_counter() - start)


class _TimedSession:
    """The session with the wall time of its last ``run``."""

    def __init__(self, session) -> None:
        self.session, self.dims, self.last = session, session.dims, 0.0

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        start = time.perf_counter()
        out = self.session.run(inputs)
        self.last = 1000 * (time.perf_counter() - start)
        return out


def _parts(session, rows: int, vocab: int) -> dict[str, Callable[[int], object]]:
    """The step's matmuls, attention (at a position) and sampling, alone on the session's weights and shapes."""
    import torch  # torch (the serve extra) loads when a measurement runs

    inputs = [(linear, torch.randn(rows, linear.inputs)) for linear in session.products()]
    q = torch.randn(1, session.n_heads, 1, session.head_dim, dtype=session.dtype)
    logits = np.random.default_rng(0).standard_normal((session.dims.slots, vocab), dtype=np.float32)
    batched = 2 * rows >= len(logits)  # as Engine._advance chooses

    def attention(position: int) -> None:
        keys = slice(0, position + 1)
        for kc, vc in zip(session.k_cache, session.v_cache):
            torch.cat([session._attend(q, kc[s : s + 1, :, keys], vc[s : s + 1, :, keys], None) for s in range(rows)])

    def sampling(position: int) -> object:
        return logits.argmax(axis=1) if batched else [logits[r].argmax() for r in range(rows)]

    return {"matmuls": lambda position: [linear.rowwise(x) for linear, x in inputs], "attention": attention,
            "sampling": sampling}


def decode_parts(engine, rows: int, steps: int = 32, peer: Callable[[int], object] | None = None) -> StepParts:
    """Time ``steps`` decode steps of ``engine`` (a CPU KV session's) with ``rows`` sequences decoding and, after
    each, the step's matmuls, attention and sampling apart, and ``peer(rows)`` (llama.cpp's call), so a
    neighbour's load hits every part alike."""
    import torch  # torch (the serve extra) loads when a measurement runs


    session = engine.session
    timed = _TimedSession(session)
    times: dict[str, list[float]] = {"step": [], "forward": [], "matmuls": [], "attention": [], "sampling": []}
    positions = []
    engine.session = timed
    try:
        params = SamplingParams(max_tokens=steps + 2, ignore_eos=True)
        seqs = [engine.submit(engine.encode(p), params) for p in (BENCH_PROMPTS * rows)[:rows]]
        while engine.queue or engine.prefilling is not None or any(not s.tokens for s in seqs):
            engine.step()
        with torch.inference_mode():
            parts = _parts(session, rows, engine.dims.vocab)
            if peer is not None:
                parts["llama_cpp"] = lambda position: peer(rows)
                times["llama_cpp"] = []
            for _ in range(steps):
                times["step"].append(_ms(engine.step))
                times["forward"].append(timed.last)
                positions.append(round(statistics.mean(s.position for s in seqs)))
                for name, part in parts.items():
                    times[name].append(_ms(part, positions[-1]))
        while not all(s.finished for s in seqs):  # the slots free for the next measurement
            engine.step()
    finally:
        engine.session = session
    return StepParts(rows, round(statistics.mean(positions)), **{k: min(v) for k, v in times.items()})


def llama_cpp_installed() -> bool:
    """Whether llama-cpp-python (the llama extra) is here to time llama.cpp beside the engine."""
    return importlib.util.find_spec("llama_cpp") is not None


class LlamaCpp:
    """llama.cpp on the embedded GGUF (llama-cpp-python): ``tokens(n)`` evaluates n tokens of one sequence in one
    call, at the same place of the same prompt each time."""

    def __init__(self, threads: int) -> None:
        import llama_cpp  # llama-cpp-python (the llama extra) is optional


        self.llm = llama_cpp.Llama(model_path=str(embedded_gguf()), n_threads=threads, n_threads_batch=threads,
                                   n_ctx=512, n_batch=32, verbose=False)
        self.prompt = self.llm.tokenize(BENCH_PROMPTS[3].encode())
        self.llm.eval(self.prompt)

    def tokens(self, n: int) -> None:
        self.llm.n_tokens = len(self.prompt)  # the cache past the prompt is dropped by the next eval
        self.llm.eval(self.prompt[-1:] * n)

    def close(self) -> None:
        self.llm.close()


def breakdown(rows: tuple[int, ...] = (1, 8), steps: int = 32, threads: int = 0, llama: bool = True,
              progress: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    """The demo precision's decode step at each row count, and llama.cpp's token, on ``threads`` (0: a served CPU
    model's automatic count)."""
    import torch  # torch (the serve extra) loads when a measurement runs


    threads = choose_threads(threads)[0]
    settings = BackendSettings(precision=PRECISION, cpu_threads=threads, prefix_caching=False,
                               compile=compile_config.validate(EMBEDDED_KV))
    progress(f"loading the embedded model at {PRECISION} on {threads} thread(s) ...")
    engine, _ = build_engine(settings, progress=lambda m: None)
    out: dict[str, Any] = {"precision": PRECISION, "threads": torch.get_num_threads(), "steps": steps}
    peer = LlamaCpp(threads) if llama and llama_cpp_installed() else None
    if llama:
        out["llama_cpp"] = peer is not None
    try:
        for n in rows:
            progress(f"timing {steps} decode steps at {n} row(s)" + (", llama.cpp between them" if peer else ""))
            out[f"rows_{n}"] = decode_parts(engine, n, steps, peer.tokens if peer else None).as_dict()
    finally:
        if peer is not None:
            peer.close()
    return out


def format_breakdown(result: dict[str, Any]) -> str:
    """A table: one column per row count, one line per part."""
    cols = [v for k, v in result.items() if k.startswith("rows_")]
    names = [("step_ms", "decode step (engine.step)"), ("forward_ms", "  forward pass (session.run)"),
             ("matmuls_ms", "    matmuls"), ("attention_ms", "    attention"),
             ("other_forward_ms", "    norms, rope, cache, casts"), ("sampling_ms", "  sampling (argmax)"),
             ("loop_ms", "  loop (bookkeeping, detok)"), ("tokens_per_s", "tokens/s")]
    lines = [f"{result['precision']} decode step, {result['threads']} thread(s), fastest of {result['steps']}",
             f"{'ms':32s}" + "".join(f"{str(c['rows']) + ' row' + 's' * (c['rows'] > 1):>12s}" for c in cols)]
    lines += [f"{label:32s}" + "".join(f"{c[key]:12.3f}" for c in cols) for key, label in names]
    if result.get("llama_cpp"):
        lines += [f"{'llama.cpp, as many tokens a call':32s}" + "".join(f"{c['llama_cpp_ms']:12.3f}" for c in cols),
                  f"{'llama.cpp tokens/s':32s}" + "".join(f"{c['llama_cpp_tokens_per_s']:12.3f}" for c in cols)]
    elif "llama_cpp" in result:
        lines.append("llama.cpp: not installed (pip install llama-cpp-python)")
    return "\n".join(lines)
