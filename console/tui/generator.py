"""The repo generator's options as a form (``qaic-console repo gen`` in the Server pane)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.suggester import SuggestFromList
from textual.widgets import Button, Checkbox, Input, Select

from backend_model.build import ENGINES
from repo_gen.cli import resolve_spec
from repo_gen.samples import SAMPLES
from repo_gen.writer import MODEL_TYPES, PRECISIONS, ModelSpec, RepoError, check_backend_dir, write_model

from .fields import row, text

AUTO = "auto"


@dataclass(frozen=True)
class GenRequest:
    """The form's values; None: the sample's (or the generator's) default."""

    name: str
    qpc: str = ""
    hf_model_name: str = ""
    compile_config: str = ""
    backend: str = ""
    model_type: str | None = None
    decoupled: bool | None = None
    engine: str | None = None
    precision: str | None = None
    force: bool = False


def _choice(id: str, values: tuple[str, ...]) -> Select[str]:
    options = [(v, v) for v in dict.fromkeys((AUTO, *values))]
    return Select(options, value=AUTO, allow_blank=False, id=id, compact=True)


class GeneratorForm(Vertical):
    """Model name (a sample's name takes its defaults), QPC, HF model, compile config, type, mode, engine."""

    def compose(self) -> ComposeResult:
        yield row("Model name", Input(id="gen-name", placeholder="e.g. smollm2_decoupled (a sample)", compact=True,
                                      suggester=SuggestFromList(list(SAMPLES), case_sensitive=False)))
        yield row("QPC dir", Input(id="gen-qpc", placeholder="compiled QPC folder (optional)", compact=True))
        yield row("HF model", Input(id="gen-hf", placeholder="org/model (tokenizer / compile)", compact=True))
        yield row("Compile cfg", Input(id="gen-compile", placeholder="compile_config.json (optional)", compact=True))
        yield row("Backend dir", Input(id="gen-backend", placeholder="bundled backend", compact=True))
        yield row("Model type", _choice("gen-type", MODEL_TYPES))
        yield row("Decoupled", _choice("gen-decoupled", ("yes", "no")))
        yield row("Engine", _choice("gen-engine", ENGINES))
        yield row("Precision", _choice("gen-precision", PRECISIONS))
        yield Checkbox("Replace an existing model folder", id="gen-force", compact=True)
        yield Button("Generate", id="generate", compact=True)

    def _pick(self, selector: str) -> str | None:
        value = self.query_one(selector, Select).value
        return None if value == AUTO else str(value)

    def request(self) -> GenRequest:
        """The form's values (read on the UI thread; :func:`generate` does the slow part)."""
        decoupled = self._pick("#gen-decoupled")
        return GenRequest(
            name=text(self, "#gen-name"),
            qpc=text(self, "#gen-qpc"),
            hf_model_name=text(self, "#gen-hf"),
            compile_config=text(self, "#gen-compile"),
            backend=text(self, "#gen-backend"),
            model_type=self._pick("#gen-type"),
            decoupled=None if decoupled is None else decoupled == "yes",
            engine=self._pick("#gen-engine"),
            precision=self._pick("#gen-precision"),
            force=self.query_one("#gen-force", Checkbox).value,
        )


def generate(req: GenRequest, repository: Path) -> tuple[ModelSpec, Path]:
    """Write the model ``req`` describes into ``repository`` (a sample's defaults under the fields).

    RepoError / CompileConfigError / SessionError on bad input; nothing is written then.
    """
    if not req.name:
        raise RepoError("type a model name (a sample's name, e.g. smollm2_decoupled, takes its defaults)")
    if req.backend:
        check_backend_dir(req.backend)
    if (repository / req.name).exists() and not req.force:  # before a QPC load that may take minutes
        raise RepoError(f"{repository / req.name} already exists (tick 'Replace' to overwrite it)")
    spec = resolve_spec(
        req.name,
        aic_binary_dir=Path(req.qpc).expanduser() if req.qpc else None,
        compile_config_path=Path(req.compile_config).expanduser() if req.compile_config else None,
        hf_model_name=req.hf_model_name or None,
        model_type=req.model_type,
        decoupled=req.decoupled,
        engine=req.engine,
        precision=req.precision,
    )
    return spec, write_model(spec, repository, python_backend_dir=req.backend or None, force=req.force)
