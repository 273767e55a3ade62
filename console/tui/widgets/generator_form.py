"""The repo generator as a form (what ``qaic-console repo gen`` asks), writing into the Server pane's repository."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.suggester import SuggestFromList
from textual.widgets import Button, Checkbox, Select

from backend_model.contract.compile_config import CompileConfigError
from backend_model.contract.parameters import ENGINES
from backend_model.sessions.protocol import SessionError
from repo_gen.samples import SAMPLES
from repo_gen.spec import generate
from repo_gen.writer import MODEL_TYPES, PRECISIONS, FolderExists, RepoError

from ..messages import Generated, Notice
from .fields import Field, row, value

AUTO = "auto"
REPLACE = "Replace an existing model folder"  # the form's --force
ERRORS = (RepoError, CompileConfigError, SessionError, OSError)


def _choice(id: str, values: tuple[str, ...]) -> Select[str]:
    options = [(v, v) for v in dict.fromkeys((AUTO, *values))]
    return Select(options, value=AUTO, allow_blank=False, id=id, compact=True)


def _path(text: str) -> Path | None:
    return Path(text).expanduser() if text else None


class GeneratorForm(Vertical):
    """Model name (a sample's name takes its defaults), QPC, HF model, compile config, device groups, type, mode,
    engine.

    ``repository`` gives the folder to write into (the Server pane's Repository field).
    """

    def __init__(self, repository: Callable[[], Path], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.repository = repository

    def compose(self) -> ComposeResult:
        yield row("Model name", Field(id="gen-name", placeholder="e.g. smollm2_decoupled (a sample)", compact=True,
                                      suggester=SuggestFromList(list(SAMPLES), case_sensitive=False)))
        yield row("QPC dir", Field(id="gen-qpc", placeholder="compiled QPC folder (optional)", compact=True))
        yield row("HF model", Field(id="gen-hf", placeholder="org/model (tokenizer / compile)", compact=True))
        yield row("Compile cfg", Field(id="gen-compile", placeholder="compile_config.json (optional)", compact=True))
        yield row("Backend dir", Field(id="gen-backend", placeholder="bundled backend", compact=True))
        yield row("Device groups", Field(id="gen-groups", placeholder="e.g. 0,1;2,3: one instance per group of SoCs",
                                         compact=True))
        yield row("Model type", _choice("gen-type", MODEL_TYPES))
        yield row("Decoupled", _choice("gen-decoupled", ("yes", "no")))
        yield row("Engine", _choice("gen-engine", ENGINES))
        yield row("Precision", _choice("gen-precision", PRECISIONS))
        yield Checkbox(REPLACE, id="gen-force", compact=True)
        yield Button("Generate", id="generate", compact=True)

    def _pick(self, selector: str) -> str | None:
        chosen = self.query_one(selector, Select).value
        return None if chosen == AUTO else str(chosen)

    def request(self) -> dict[str, Any]:
        """The form as :func:`repo_gen.spec.generate` keywords (read on the UI thread)."""
        decoupled = self._pick("#gen-decoupled")
        return {
            "model_name": value(self, "#gen-name"),
            "python_backend_dir": _path(value(self, "#gen-backend")),
            "force": self.query_one("#gen-force", Checkbox).value,
            "aic_binary_dir": _path(value(self, "#gen-qpc")),
            "compile_config_path": _path(value(self, "#gen-compile")),
            "hf_model_name": value(self, "#gen-hf") or None,
            "model_type": self._pick("#gen-type"),
            "decoupled": None if decoupled is None else decoupled == "yes",
            "engine": self._pick("#gen-engine"),
            "precision": self._pick("#gen-precision"),
            "device_groups": value(self, "#gen-groups") or None,
        }

    @on(Button.Pressed, "#generate")
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        request = self.request()
        if not request["model_name"]:
            self.post_message(Notice("type a model name (a sample's name, e.g. smollm2_decoupled, takes its "
                                     "defaults)", "warning"))
            return
        self._generate(request, self.repository())

    @work(thread=True, group="generate", exclusive=True)
    def _generate(self, request: dict[str, Any], repository: Path) -> None:
        """Worker: a QPC's model type may take minutes to read."""
        def note(text: str) -> None:
            self.post_message(Notice(text))

        try:
            spec, path = generate(output_dir=repository, note=note, **request)
        except FolderExists as exc:
            self.post_message(Notice(f'{exc.path} already exists: tick "{REPLACE}" to replace it', "error"))
            return
        except ERRORS as exc:
            self.post_message(Notice(" ".join(str(exc).split()), "error"))
            return
        mode = "decoupled" if spec.decoupled else "batch"
        self.post_message(Notice(f"wrote {path} ({spec.model_type}, {mode})"))
        self.post_message(Generated(path))
