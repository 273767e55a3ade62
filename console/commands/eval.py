"""``qaic-console eval``: an accuracy check between servers, precisions and compile settings.

``eval --reference SPEC --candidate SPEC...`` prints the table and writes the report; ``eval record`` keeps a run in
a golden file and ``eval compare`` gates a later run on it. ``eval embeddings`` (and its ``record``, ``compare``) does
the same for embedding paths' vectors. Progress goes to stderr, tables to stdout. Bad input: one
``error: ...`` line, exit code 2; ``compare`` exits 1 when a candidate is past a threshold.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from backend_model.models import ModelSourceError
from backend_model.sessions.protocol import SessionError
from console.clients import ClientError
from console.eval import embeddings as vectors
from console.eval import golden, report
from console.eval.images import PROMPTS as IMAGE_PROMPTS
from console.eval.images import PromptImages, from_folder
from console.eval.paths import SPEC_HELP, EvalPath, opened
from console.eval.run import CORPUS, PROMPTS, Evaluation, evaluate, read_prompts

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}
T = TypeVar("T")
ERRORS = (ClientError, SessionError, ModelSourceError, golden.GoldenError, ValueError, OSError)


def _fail(exc: Exception) -> NoReturn:
    click.echo(f"error: {' '.join(str(exc).split())}", err=True)
    sys.exit(2)


def _shown(work: Callable[[], T], table: Callable[[T], str]) -> T:
    """What ``work`` returns, its ``table`` on stdout; one error line (exit code 2) when it fails."""
    try:
        result = work()
    except ERRORS as exc:
        _fail(exc)
    click.echo(table(result))
    return result


def _reference(reference: str | None, candidates: Sequence[str]) -> str:
    """The reference spec of a run with candidates; click's usage error without them."""
    if not reference or not candidates:
        raise click.UsageError("give --reference and at least one --candidate (or a subcommand)")
    return reference


def record_options(spec_help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A ``record`` command's path and golden file."""
    def add(func: Callable[..., Any]) -> Callable[..., Any]:
        func = click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
                            help="The golden file (JSON) to write.")(func)
        return click.option("--path", "spec", required=True, help=f"The path to record: {spec_help}.")(func)
    return add


def golden_options(spec_help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A ``compare`` command's golden file and the candidates checked against it."""
    def add(func: Callable[..., Any]) -> Callable[..., Any]:
        func = click.option("--candidate", "candidates", multiple=True, required=True,
                            help=f"A path to check against the recording (repeat for several): {spec_help}.")(func)
        return click.argument("golden_file", type=click.Path(dir_okay=False, exists=True, path_type=Path))(func)
    return add


def _written(write: Callable[[], Any]) -> None:
    """Write the report or the golden file (a list of paths: named on stderr); one error line when it fails."""
    try:
        written = write()
    except ERRORS as exc:
        _fail(exc)
    if written:
        click.echo(f"report: {', '.join(str(p) for p in written)}", err=True)


def _gate(verdicts: Sequence[tuple[str, bool, str]]) -> NoReturn:
    """Each candidate's verdict on stdout; exit 1 when any failed."""
    for name, passed, why in verdicts:
        click.echo(f"{'pass' if passed else 'FAIL'} {name}: {why}")
    sys.exit(0 if all(passed for _, passed, _ in verdicts) else 1)


def scoring_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """What every run takes besides its paths."""
    options = [
        click.option("--model", "source", default="embedded", show_default=True,
                     help="The model of the in-process paths (embedded, or a local Hugging Face folder); its "
                          "tokenizer compares served texts."),
        click.option("--likelihood/--no-likelihood", default=True, show_default=True,
                     help="Score the reference's answers on the in-process paths (NLL, KL) and their perplexity."),
        click.option("--corpus", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=CORPUS,
                     show_default="assets/eval/corpus.txt", help="The text perplexity is measured on."),
        click.option("-q", "--quiet", is_flag=True, help="No progress on stderr."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def prompt_options(func: Callable[..., Any]) -> Callable[..., Any]:
    func = click.option("--images", "image_folder", type=click.Path(file_okay=False, exists=True, path_type=Path),
                        default=None,
                        help="A folder of image files: the n-th prompt takes the n-th (in name order, in turn); the "
                             "prompts default to assets/eval/image_prompts.txt. Served paths, recordings and cpu: "
                             "paths (--model a vision-language model; embedded: the vision sample smollm2_vision's)."
                        )(func)
    func = click.option("--max-tokens", type=click.IntRange(min=1), default=32, show_default=True,
                        help="Greedy tokens per prompt (fewer where a path ends first).")(func)
    return click.option("--prompts", "prompt_file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
                        default=None, show_default="assets/eval/prompts.txt",
                        help="One prompt a line (# comments; \\n is a newline).")(func)


def prompts_of(prompt_file: Path | None, image_folder: Path | None) -> tuple[list[str], list[PromptImages]]:
    """The prompts (the default set for text, or for images) and, with ``image_folder``, each one's image."""
    prompts = read_prompts(prompt_file or (IMAGE_PROMPTS if image_folder else PROMPTS))
    return prompts, from_folder(image_folder, len(prompts)) if image_folder else []


def run_eval(reference: str | EvalPath, candidates: Sequence[str], prompts: Sequence[str],
             images: Sequence[PromptImages], max_tokens: int, options: dict[str, Any]) -> Evaluation:
    """Open the paths (a recorded reference as given), run the eval under a progress bar."""
    note = (lambda _: None) if options["quiet"] else (lambda message: click.echo(message, err=True))
    specs = [reference] if isinstance(reference, str) else []
    with opened([*specs, *candidates], options["source"], note, images=bool(images)) as paths:
        if not isinstance(reference, str):
            paths.insert(0, reference)
        scored = options["likelihood"] and not images
        total = len(prompts) * len(paths) + (len(prompts) + sum(p.engine is not None for p in paths) if scored else 0)
        with _bar(total, options["quiet"]) as advance:
            return evaluate(paths[0], paths[1:], prompts, max_tokens, options["source"], options["likelihood"],
                            options["corpus"] if scored else None, advance, note, images)


@contextlib.contextmanager
def _bar(total: int, quiet: bool) -> Iterator[Callable[[int], None]]:
    if quiet:
        yield lambda n: None
        return
    with click.progressbar(length=total, label="eval", file=sys.stderr) as bar:
        yield bar.update


def run_options(spec_help: str, written: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A run's reference, its candidates and where its report goes (``written``: the files)."""
    def add(func: Callable[..., Any]) -> Callable[..., Any]:
        func = click.option("-o", "--output-dir", type=click.Path(file_okay=False, path_type=Path),
                            default=Path("eval-report"), show_default=True, help=f"Where {written} go.")(func)
        func = click.option("--candidate", "candidates", multiple=True,
                            help="A path to compare (repeat for several).")(func)
        return click.option("--reference", default=None,
                            help=f"The path the others are compared with: {spec_help}.")(func)
    return add


@click.group("eval", invoke_without_command=True, context_settings=CONTEXT_SETTINGS)
@run_options(SPEC_HELP, "eval.json, eval_summary.csv, eval_prompts.csv and eval.html")
@prompt_options
@scoring_options
@click.pass_context
def eval_group(ctx: click.Context, reference: str | None, candidates: tuple[str, ...], prompt_file: Path | None,
               max_tokens: int, image_folder: Path | None, output_dir: Path, **options: Any) -> None:
    """Compare a reference and candidates on the same prompts: greedy agreement, likelihood, perplexity.

    Each path is a served model (MODEL@URL, any server kind) or an in-process engine (cpu:fp32, cpu:int8,
    cpu:int4, twin). Example: --reference smollm2_decoupled_fp32@127.0.0.1:8001 --candidate
    smollm2_decoupled@127.0.0.1:8001 --candidate cpu:int8.
    """
    if ctx.invoked_subcommand is not None:
        return
    spec = _reference(reference, candidates)
    result = _shown(lambda: run_eval(spec, candidates, *prompts_of(prompt_file, image_folder), max_tokens,
                                     options), report.table)
    _written(lambda: report.write(result, output_dir))


@eval_group.command("record", context_settings=CONTEXT_SETTINGS)
@record_options(SPEC_HELP)
@prompt_options
@scoring_options
def record(spec: str, prompt_file: Path | None, max_tokens: int, image_folder: Path | None, output: Path,
           **options: Any) -> None:
    """Record one path's greedy answers and figures (its NLL and perplexity where in-process) in a golden file."""
    result = _shown(lambda: run_eval(spec, (), *prompts_of(prompt_file, image_folder), max_tokens,
                                     options), report.table)
    _written(lambda: golden.write(result, output))
    click.echo(f"recorded {len(result.prompts)} answers of {result.reference} in {output}", err=True)


@eval_group.command("compare", context_settings=CONTEXT_SETTINGS)
@golden_options(SPEC_HELP)
@click.option("--min-exact", type=click.FloatRange(0, 1), default=1.0, show_default=True,
              help="Fail below this fraction of answers identical to the recording's.")
@click.option("--max-nll-increase", type=float, default=None,
              help="Fail when a candidate's mean NLL of the recorded answers exceeds the recorded path's own by more "
                   "(in-process candidates; needs a recording with an NLL).")
@scoring_options
@click.option("-o", "--output-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also write the report here.")
def compare(golden_file: Path, candidates: tuple[str, ...], min_exact: float, max_nll_increase: float | None,
            output_dir: Path | None, **options: Any) -> None:
    """Check later runs against a golden file; exit 1 when any candidate is past a threshold (a CI gate)."""
    def run() -> Evaluation:
        recorded = golden.read(golden_file)
        result = run_eval(recorded.path, candidates, recorded.prompts, recorded.images, recorded.max_tokens, options)
        if output_dir is not None:
            report.write(result, output_dir)
        return result

    _gate(golden.verdicts(_shown(run, report.table), min_exact, max_nll_increase))


TEXTS_OPTION = click.option("--texts", "texts_file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
                            default=vectors.TEXTS, show_default="assets/eval/embeddings.json",
                            help='JSON {"texts": [...], "queries": [...], "documents": [...]}: the inputs compared, '
                                 "and a retrieval (each query ranks the documents).")


def embedding_options(texts: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """What every embeddings run takes besides its paths (``texts``: and its set, unless a recording holds it)."""
    options = [
        *([TEXTS_OPTION] if texts else []),
        click.option("--model", "source", default="embedded", show_default=True,
                     help="The model of the cpu path (embedded: all-MiniLM-L6-v2, or a local sentence-transformers "
                          "folder)."),
        click.option("-q", "--quiet", is_flag=True, help="No progress on stderr."),
    ]

    def add(func: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            func = option(func)
        return func
    return add


def run_vectors(reference: str | vectors.VectorPath, candidates: Sequence[str], texts: vectors.TextSet,
                source: str, quiet: bool) -> vectors.VectorEvaluation:
    """Open the paths (a recorded reference as given) and ask each for the set's vectors."""
    note = (lambda _: None) if quiet else (lambda message: click.echo(message, err=True))
    paths = vectors.opened([*([reference] if isinstance(reference, str) else []), *candidates], source, note)
    if not isinstance(reference, str):
        paths.insert(0, reference)
    return vectors.evaluate(paths[0], paths[1:], texts, note)



@eval_group.group("embeddings", invoke_without_command=True, context_settings=CONTEXT_SETTINGS)
@run_options(vectors.SPEC_HELP, "eval_embeddings.json and eval_embeddings.csv")
@embedding_options(texts=True)
@click.pass_context
def embeddings_group(ctx: click.Context, reference: str | None, candidates: tuple[str, ...], texts_file: Path,
                     source: str, quiet: bool, output_dir: Path) -> None:
    """Compare embedding paths' vectors: each input's cosine (mean, min), a retrieval's top-1 and Spearman.

    Each path is a served embedding model (MODEL@URL: a tritonserver, the front, vLLM or any OpenAI-compatible
    server) or cpu (the embedding backend's CPU encoder in this process). Example: --reference
    minilm_embedding@127.0.0.1:8000 --candidate minilm_embedding@http://127.0.0.1:9000/v1 --candidate cpu.
    """
    if ctx.invoked_subcommand is not None:
        return
    spec = _reference(reference, candidates)
    result = _shown(lambda: run_vectors(spec, candidates, vectors.read_texts(texts_file), source, quiet),
                    vectors.table)
    _written(lambda: vectors.write(result, output_dir))


@embeddings_group.command("record", context_settings=CONTEXT_SETTINGS)
@record_options(vectors.SPEC_HELP)
@embedding_options(texts=True)
def record_vectors(spec: str, texts_file: Path, source: str, quiet: bool, output: Path) -> None:
    """Record one path's vectors of the set in a golden file."""
    result = _shown(lambda: run_vectors(spec, (), vectors.read_texts(texts_file), source, quiet), vectors.table)
    _written(lambda: vectors.record(result, output))
    click.echo(f"recorded {len(result.texts.inputs)} vectors of {result.reference} in {output}", err=True)


@embeddings_group.command("compare", context_settings=CONTEXT_SETTINGS)
@golden_options(vectors.SPEC_HELP)
@click.option("--min-cosine", type=click.FloatRange(-1, 1), default=0.999, show_default=True,
              help="Fail when any input's cosine to its recorded vector is below this.")
@click.option("--min-top1", type=click.FloatRange(0, 1), default=1.0, show_default=True,
              help="Fail below this share of queries whose first document is the recording's.")
@embedding_options(texts=False)
@click.option("-o", "--output-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also write the report here.")
def compare_vectors(golden_file: Path, candidates: tuple[str, ...], min_cosine: float, min_top1: float, source: str,
                    quiet: bool, output_dir: Path | None) -> None:
    """Check paths against a golden file; exit 1 when any candidate is past a threshold (a CI gate)."""
    def run() -> vectors.VectorEvaluation:
        texts, reference = vectors.recorded(golden_file)
        result = run_vectors(reference, candidates, texts, source, quiet)
        if output_dir is not None:
            vectors.write(result, output_dir)
        return result

    _gate(vectors.verdicts(_shown(run, vectors.table), min_cosine, min_top1))
