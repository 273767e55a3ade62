"""The table of docs/mx-formats.md for the tiny architectures: what each MX choice does to their answers.

Each Llama-family tiny model of ``tests/tiny_models.py`` (random weights, the embedded tokenizer) is saved to a
temporary folder and evaluated as ``qaic-console eval --reference cpu:fp32 --candidate cpu:mxfp6 --candidate
cpu:mxint8kv --candidate cpu:mxfp6+mxint8kv`` would, on the first ``--prompts`` of assets/eval/prompts.txt; one
Markdown row per model and choice goes to stdout. Run: ``.venv/bin/python scripts/mx_table.py``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # tiny_models: the test suite's tiny architectures

ARCHITECTURES = ("llama", "mistral_window", "qwen2_window")  # cpu_support.LLAMA_LIKE: where the CPU computes MX
CHOICES = ("mxfp6", "mxint8kv", "mxfp6+mxint8kv")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--prompts", "count", type=click.IntRange(min=1), default=12, show_default=True,
              help="How many of the eval's shipped prompts.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=16, show_default=True)
def main(count: int, max_tokens: int) -> None:
    """Print the tiny architectures' MX table (Markdown)."""
    from tiny_models import save_tiny

    from backend_model.models import load_tokenizer
    from console.commands.eval import run_eval
    from console.eval.run import CORPUS, PROMPTS, read_prompts

    tokenizer = load_tokenizer("embedded", lambda message: None)[0]
    prompts = read_prompts(PROMPTS)[:count]
    click.echo("| model | choice | exact | first divergence (median) | NLL (fp32's) | perplexity | KL |")
    click.echo("| --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory(prefix="mx-table-") as scratch:
        for name in ARCHITECTURES:
            folder = save_tiny(name, Path(scratch) / name, tokenizer)
            options = {"source": str(folder), "likelihood": True, "corpus": CORPUS, "quiet": True}
            result = run_eval("cpu:fp32", [f"cpu:{c}" for c in CHOICES], prompts, max_tokens, options)
            for path in result.paths:
                s = result.summary(path)
                exact = "reference" if path == result.reference else f"{s['exact']}/{s['prompts']}"
                first = s.get("median_first_divergence")
                kl = s.get("mean_kl")
                click.echo(f"| {name} | {path.removeprefix('cpu-')} | {exact} | {'-' if first is None else first} | "
                           f"{s['mean_nll']:.4f} | {s['perplexity']:.1f} | {'-' if not kl else f'{kl:.1e}'} |")


if __name__ == "__main__":
    main()
