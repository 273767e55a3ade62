"""The Embeddings pane: texts (``a|b|c``) sent to an embedding model, each one's dimension and norm, and the
cosine-similarity matrix of them all (:mod:`console.core.embeddings`), asked in a worker thread."""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Input, Select, Static

from console.clients import ClientError, ModelInfo, split_prompts
from console.clients.embeddings import EmbeddingModel
from console.core.adapters import Adapter
from console.core.controller import Snapshot
from console.core.embeddings import Embeddings, embed

HINT = ("Embeddings: texts separated by | (a|b|c) go to an embedding model in one request; each one's dimension and "
        "norm show, and how alike every pair is (cosine similarity). The model: the one chosen, else the server's "
        "first embedding model.")
IDLE = "not connected: F2 for the Server pane"


class EmbedPane(Vertical):
    """Ask the server for vectors and show what they say."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.server: Adapter | None = None
        self.generation = -1
        self.found: Embeddings | None = None  # the last answer
        self.asking = False

    def compose(self) -> ComposeResult:
        yield Static(HINT, classes="hint")
        with Horizontal(classes="embed-ask"):
            yield Select[str]([], prompt="the server's first embedding model", id="embed-model")
            yield Input(placeholder="a|b|c · Enter embeds", id="embed-input")
        yield Static(IDLE, id="embed-status", classes="status")
        yield DataTable(id="embed-inputs", cursor_type="row")
        yield DataTable(id="embed-matrix", cursor_type="cell")

    def serve(self, snapshot: Snapshot) -> None:
        """Follow the server: where vectors are asked, and the models offered (its embedding models; an
        OpenAI-compatible server does not say which its are: all its models)."""
        was, self.server = self.server, snapshot.server if snapshot.serving else None
        if snapshot.generation != self.generation:
            self.generation = snapshot.generation
            self.query_one("#embed-model", Select).set_options((name, name) for name in offered(snapshot.infos))
        if (was is None) != (self.server is None) and not self.asking:  # connected or gone: the last word is stale
            self.status("ready: type texts separated by |" if self.server is not None else IDLE)

    def status(self, text: str) -> None:
        self.query_one("#embed-status", Static).update(text)

    def focus_prompt(self) -> None:
        self.query_one("#embed-input", Input).focus()

    @on(Input.Submitted, "#embed-input")
    def _submitted(self, event: Input.Submitted) -> None:
        if self.server is None or self.asking:
            self.status(IDLE if self.server is None else "still waiting for the last answer")
            return
        try:
            texts = split_prompts(event.value)
        except ClientError as exc:
            self.status(f"error: {exc}")
            return
        chosen = self.query_one("#embed-model", Select).value
        self.asking = True
        self.status(f"embedding {len(texts)} text{'s' if len(texts) != 1 else ''}…")
        self.ask(self.server, chosen if isinstance(chosen, str) else None, texts)

    @work(thread=True, exclusive=True)
    def ask(self, server: Adapter, model: str | None, texts: list[str]) -> None:
        try:
            found = embed(server, model, texts)
        except ClientError as exc:
            self.app.call_from_thread(self.failed, str(exc))
            return
        self.app.call_from_thread(self.show, found)

    def failed(self, message: str) -> None:
        self.asking = False
        self.status(f"error: {message}")

    def show(self, found: Embeddings) -> None:
        """The inputs' table and the similarity matrix of ``found``."""
        self.asking, self.found = False, found
        self.status(f"{len(found.texts)} vectors from {found.model} in {found.seconds:.3f} s")
        rows = self.query_one("#embed-inputs", DataTable)
        rows.clear(columns=True)
        rows.add_columns("input", "dimension", "norm", "tokens")
        for i, (label, norm) in enumerate(zip(found.labels(), found.norms)):
            rows.add_row(label, str(found.vectors.shape[1]), f"{norm:.4f}",
                         str(found.tokens[i]) if found.tokens else "-")
        matrix = self.query_one("#embed-matrix", DataTable)
        matrix.clear(columns=True)
        matrix.add_columns("cosine", *(str(i + 1) for i in range(len(found.texts))))
        for label, row in zip(found.labels(), found.similarity):
            matrix.add_row(label, *(f"{v:.4f}" for v in row))


def offered(infos: dict[str, ModelInfo]) -> list[str]:
    """The embedding models of ``infos``; all of them when none says it is one (an OpenAI-compatible server's)."""
    known = [name for name, info in infos.items() if EmbeddingModel.of(info) is not None]
    return sorted(known or infos)
