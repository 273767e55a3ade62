"""Before a compile: how far the card's MX formats will move a model's answers (``qaic-console check --predict``).

A compile config's ``mxfp6_matmul`` and ``mxint8_kv_cache`` choose them; the eval runs the model in fp32 (the
reference) and with the formats the config asks (with both, each alone too: which one moves the answers), on
the CPU engine, or on the card's twin of a given graph (they compute the same: ``tests/fast/test_mx_engines.py``),
and says per choice how many answers stay fp32's, where the others part, and what the formats cost in likelihood;
the memory check (:mod:`repo_gen.memory`) says what they save on a card.
"""

from __future__ import annotations

from pathlib import Path

from backend_model.contract import compile_config
from backend_model.mx_formats import Mx
from repo_gen import memory
from repo_gen.spec import local_config
from repo_gen.writer import ModelSpec

from .run import Evaluation


def choices(config: Path) -> list[Mx]:
    """The MX formats a compile config asks, each alone first where it asks both; empty when it asks none."""
    asked = Mx.of(compile_config.load(config))
    alone = [Mx(mxfp6_matmul=True), Mx(mxint8_kv_cache=True)] if asked.mxfp6_matmul and asked.mxint8_kv_cache else []
    return [*alone, asked] if asked else []


def saving(config: Path, source: str) -> str:
    """The memory check's estimate of the model on a card under this compile config, with what its MX formats
    save; empty when the model's config.json is not here."""
    spec = ModelSpec("predict", hf_model_name=source, engine="qaic", compile=compile_config.read(config))
    found = memory.estimate(spec, local_config(source))
    return f"memory: {found}" if found is not None else ""


def specs(asked: list[Mx], graph: str | None) -> tuple[str, list[str]]:
    """The eval's reference and candidates: fp32 and each choice, on the twin of ``graph`` or the CPU engine."""
    base = f"twin:{graph}" if graph else "cpu:fp32"
    return base, [f"{base}+{mx.label}" for mx in asked]


def verdicts(result: Evaluation) -> list[str]:
    """One line per candidate: how far its answers move from fp32's."""
    lines = []
    reference = result.summary(result.reference)
    for name in result.candidates:
        s = result.summary(name)
        line = f"{name}: {s['exact']} of {s['prompts']} answers stay fp32's over {result.max_tokens} tokens"
        if s["median_first_divergence"] is not None:
            line += f"; the others part at {'/'.join(s['units'])} {s['median_first_divergence']} (median)"
        if s.get("mean_nll") is not None and reference.get("mean_nll") is not None:
            line += f"; NLL of fp32's answers {s['mean_nll'] - reference['mean_nll']:+.4f} nats/token"
        if s.get("perplexity") and reference.get("perplexity"):
            line += f"; perplexity x{s['perplexity'] / reference['perplexity']:.4f}"
        if s.get("mean_kl") is not None:
            line += f"; KL to fp32 {s['mean_kl']:.2e}"
        lines.append(line)
    return lines
