"""What the page shows, as pure functions of the core's state (no Gradio here).

Every text that comes from a user, a model or a server goes through :func:`esc` (chat messages,
HTML) or :func:`md` (Markdown panels), so no markup in it is ever live. Times are in ms wherever
the page shows a table or a plot.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pandas as pd

from console.clients import ClientError, Control, Interface, ModelInfo, format_stats, interface_of
from console.clients.params import parse
from console.core.adapters import SERVER
from console.core.controller import Snapshot
from console.core.embeddings import Embeddings
from console.core.transcript import summary
from console.core.turns import Turn, ending_mark
from console.server import logparse
from console.server.embedded import EMBEDDED_DEFAULTS
from console.server.logparse import NOISE_NOTE

MODES = {"stream": "Stream · gRPC, token by token", "batch": "Batch · HTTP, one response"}
PHASE_ICONS = {"ready": "●", "connected": "●", "starting": "◐", "stopping": "◐", "failed": "✖", "unreachable": "✖"}
RESTART = {
    "failed": "to restart it: Server tab → Start tritonserver (or connect to a running one by URL)",
    "stopped": "Server tab → Start tritonserver, or connect to a running one by URL",
    "unreachable": "still polling; Server tab → Connect to reach another server",
}
MODEL_COLUMNS = ["model", "state", "interface", "kind", "reason"]
REPO_COLUMNS = ["model", "type", "modes", "source", "valid"]
# the figures first, so a narrow page shows them without scrolling; the prompt, which may be long, last
SPEED_COLUMNS = ["reply", "mode", "TTFT ms", "ITL ms", "latency ms", "tokens/s", "output tokens", "finish",
                 "prepare ms", "model", "prompt"]
PLOTS = {  # the Speed tab's plots: key -> (y column, title, the label while it has nothing to draw)
    "ttft": ("TTFT ms", "Stream · time to first token (ms)", "no stream replies yet"),
    "latency": ("latency ms", "Batch · request latency (ms)", "no batch replies yet"),
    "tps": ("tokens/s", "Output tokens/s", "no replies yet"),
}
HUGE = 2**31 - 1  # a bound this large is the wire type's, not a rule worth a hint
SUMMARY_LABELS = {  # transcript.summary() key -> label (times in ms, as everywhere on the page)
    "time_to_first_token_ms": "TTFT ms",
    "inter_token_latency_ms": "ITL ms",
    "request_latency_ms": "latency ms",
    "output_token_throughput": "tokens/s",
    "output_tokens": "output tokens",
}
SUMMARY_NOTES = {
    "stream": "time to first token and inter-token latency from the streamed tokens",
    "batch": "one response per request: request latency only (no time to first token)",
}
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")


def esc(text: str) -> str:
    """Text as HTML that shows it literally."""
    return html.escape(text, quote=True)


def md(text: str) -> str:
    """Text for a Markdown panel that shows it literally (neither Markdown nor HTML is interpreted; a URL is
    no autolink, whose escapes would show)."""
    return html.escape(_MD_SPECIAL.sub(r"\\\1", text), quote=False).replace("://", "&#58;//")


def _label(index: int, count: int) -> str:
    return f"[{index + 1}/{count}] " if count > 1 else ""


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


# --------------------------------------------------------------------------- server


def status_markdown(snap: Snapshot) -> str:
    """The header: the server's phase and message, its addresses while it serves, how to go on."""
    text = f"{PHASE_ICONS.get(snap.phase, '○')} **{md(snap.phase)}** · {md(snap.message)}"
    if snap.server is not None:
        text += f"  \n{md(snap.server.title())}"
        if snap.server.template_side() == SERVER:
            text += " · chat messages go to the server's chat template"
    if snap.phase in RESTART:
        text += f"  \n{md(RESTART[snap.phase])}"
    return text


def no_server(snap: Snapshot) -> str:
    """Why nothing can be sent now, and how to go on."""
    return f"no server to send to: {snap.message}" + (f" ({RESTART[snap.phase]})" if snap.phase in RESTART else "")


def _interface(info: ModelInfo) -> Interface | None:
    """The interface the model speaks, or None when the console speaks none of its."""
    try:
        return interface_of(info)
    except ClientError:
        return None


def interface_name(info: ModelInfo) -> str:
    """The Triton LLM interface the model speaks, or ``unsupported``."""
    interface = _interface(info)
    return interface.name if interface else "unsupported"


def _interface_label(info: ModelInfo) -> str:
    interface = _interface(info)
    return interface.label if interface else "interface unsupported"


KINDS = {"kv_cache": "KV cache", "causal": "causal (slow on a CPU)"}


def model_kind(info: ModelInfo) -> str:
    """``stream, KV cache`` / ``batch, causal (slow on a CPU)`` / ``stream/batch`` when the server does not say."""
    how = "/".join(info.modes)
    kind = KINDS.get(info.model_type)
    return f"{how}, {kind}" if kind else how


def model_table(snap: Snapshot) -> pd.DataFrame:
    """The models table (MODEL_COLUMNS): state, interface and kind of each model the server reports; the reason
    column says why a model failed, or a model's instances with their SoCs when it is served on device groups."""
    rows = []
    for row in snap.models:
        interface = interface_name(row.info) if row.info else ""
        kind = model_kind(row.info) if row.info and interface != "unsupported" else ""
        rows.append([row.name, row.state or "not loaded", interface, kind,
                     row.reason or (row.info.instances if row.info else "")])
    return pd.DataFrame(rows, columns=MODEL_COLUMNS)


def model_choices(infos: Mapping[str, ModelInfo], mode: str) -> list[tuple[str, str]]:
    """(label, name) of the ready models a ``mode`` can use (``ModelInfo.modes``: how each one answers), each
    model's LoRA adapters under it."""
    out = []
    for name, info in sorted(infos.items(), key=lambda item: (item[1].name, bool(item[1].adapter), item[0])):
        if mode in info.modes and interface_name(info) != "unsupported":
            label = name if info.use_kv_cache is not False else f"{name} · causal, slow on a CPU"
            out.append((f"{name} · LoRA adapter of {info.name}" if info.adapter else label, name))
    return out


def pick_model(choices: Sequence[tuple[str, str]], mode: str, current: str | None) -> str | None:
    """Keep ``current`` when it is still offered, else the mode's embedded default, else the first."""
    names = [name for _, name in choices]
    if current in names:
        return current
    default = EMBEDDED_DEFAULTS.get(mode)
    return default if default in names else (names[0] if names else None)


def model_note(info: ModelInfo | None, template: str | None) -> str:
    """The line under the model selector: kind, interface and the chat template's state."""
    if info is None:
        return "no model ready yet: start a server or connect to one (Server tab)"
    parts = [model_kind(info), _interface_label(info)]
    if template:
        parts.append(f"chat template {template}")
    return md(" · ".join(parts))


def control_info(control: Control) -> str:
    """A control field's hint: what it does and its rule, without the wire type's limits (``<= 2147483647``)."""
    shown = replace(control, maximum=None) if control.maximum is not None and control.maximum >= HUGE else control
    return f"{control.help} ({shown.rule()})"


def control_field(control: Control, text: str) -> dict[str, Any]:
    """A control field as typed: marked, with what is wrong in place of its hint, when its value breaks the rule."""
    try:
        parse(control, text or "")
    except ClientError as exc:
        return {"elem_classes": ["qc-invalid"], "info": f"✖ {exc}"}
    return {"elem_classes": [], "info": control_info(control)}


def log_text(lines: Iterable[str], raw: bool = False, last: int = 80) -> str:
    """The log box: the server's ``last`` lines to show, condensed unless ``raw`` (the note on hidden GPU noise is
    the box's caption)."""
    shown = [line if raw else logparse.condensed(line) for line in lines if line != NOISE_NOTE]
    return "\n".join([line for line in shown if line is not None][-last:])


def repo_table(models: Iterable[Any]) -> pd.DataFrame:
    """A repository listing (``repo_gen.inspection.ModelFolder`` rows): name, type, mode, source, validity."""
    rows = [[m.name, m.model_type, m.modes, m.source,
             "yes" if m.valid else "no: " + "; ".join(m.problems)] for m in models]
    return pd.DataFrame(rows, columns=REPO_COLUMNS)


# --------------------------------------------------------------------------- chat


def _footer(turn: Turn, index: int) -> str:
    """How the reply ended, in the turn's one look (``— ■ stopped · 33 tokens · ...``), or `` …`` while it comes."""
    status = turn.status(index)
    return f"\n\n— {status}" if status else " …"


def _failure(turn: Turn, last: int) -> str:
    """How the turn failed or was stopped, said once: on the last reply's own ending line when that line already
    bears its mark (``— ■ stopped · 33 tokens · ... · cancelled after 2.1 s``), else on a line of its own."""
    if turn.failure is None:
        return ""
    if turn.status(last).startswith(ending_mark(turn.failure.kind)):
        return f" · {turn.failure.message}"
    return f"\n— {turn.failure_line()}"


def messages(turns: Sequence[Turn]) -> list[dict[str, Any]]:
    """Chatbot messages (escaped): the attached images and the prompts, one answer per prompt with its figures; the
    last one ends with how the turn failed or was stopped and its notes (``Turn.remarks``)."""
    out: list[dict[str, Any]] = []
    for turn in turns:
        n = len(turn.prompts)
        out += [{"role": "user", "content": {"path": path}} for path in turn.images]
        out.append({"role": "user", "content": esc("\n".join(_label(i, n) + p for i, p in enumerate(turn.prompts)))})
        answers = [_label(i, n) + turn.shown(i) + _footer(turn, i) for i in range(n)]
        answers[-1] += _failure(turn, n - 1) + "".join(f"\n— {line}" for line in turn.remarks())
        out += [{"role": "assistant", "content": esc(a)} for a in answers]
    return out


def live_markdown(turn: Turn | None, clock: float, template_loading: bool = False) -> str:
    """The panel under the chat: the running (or last) request, each prompt's live figures.

    ``clock`` is ``time.perf_counter()`` now; ``template_loading`` says the chat template is being loaded.
    """
    if turn is None:
        return ""
    head = f"{md(turn.model)} · request {md(turn.request_id)}"
    if turn.failure is not None and turn.sent_at is None:
        return f"**{md(ending_mark(turn.failure.kind))}** · {head} · {md(turn.failure.message)}"
    if turn.sent_at is None:
        doing = "loading the chat template …" if template_loading else "reading the model config …"
        return f"**preparing** · {head} · {doing}"
    now = clock - turn.sent_at
    head += f" · prepared in {turn.prepare_seconds * 1000:.0f} ms"
    if turn.failure is not None:  # how each reply ended, with its figures, is in the chat above
        return f"**{md(ending_mark(turn.failure.kind))}** · {head}  \n{md(turn.failure.message)}"
    if turn.done:
        return f"**done** · {head} · figures under each reply and in the Speed tab"
    n = len(turn.prompts)
    lines = [_label(i, n) + _live_line(turn, i, now) for i in range(n)]
    return f"**{'streaming' if turn.mode == 'stream' else 'waiting'}** · {head}  \n" + "  \n".join(lines)


def _live_line(turn: Turn, index: int, now: float) -> str:
    if index in turn.replies or turn.failure is not None:
        return md(turn.status(index) or "no answer")
    stats = turn.figures(index, now)
    if stats is not None:
        return "streaming · " + md(format_stats(stats))
    if turn.mode == "stream":
        return f"waiting for the first token · {now:.1f} s"
    return f"waiting for one response · {now:.1f} s"


# --------------------------------------------------------------------------- speed


def speed_rows(turns: Sequence[Turn]) -> list[list[Any]]:
    """One row per answered (or stopped) prompt of the finished turns (SPEED_COLUMNS; times in ms)."""
    rows: list[list[Any]] = []
    for turn in turns:
        if not turn.done:
            continue
        for i, prompt in enumerate(turn.prompts):
            stats = turn.figures(i)
            if stats is None:
                continue
            tps = stats.output_token_throughput
            rows.append([len(rows) + 1, turn.mode, _ms(stats.time_to_first_token), _ms(stats.inter_token_latency),
                         _ms(stats.request_latency), None if tps is None else round(tps, 1), stats.output_tokens,
                         turn.ending(i), _ms(turn.prepare_seconds), turn.model, prompt[:60]])
    return rows


def speed_table(turns: Sequence[Turn]) -> pd.DataFrame:
    return pd.DataFrame(speed_rows(turns), columns=SPEED_COLUMNS)


def plot_data(table: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Plot frames: stream TTFT and batch latency apart, tokens/s of both; ``reply`` is a category ("1", "2" ...)
    so the x axis shows whole reply numbers, in the rows' order, and one reply is one point."""
    frame = table.assign(reply=table["reply"].astype(str))
    stream, batch = frame[frame["mode"] == "stream"], frame[frame["mode"] != "stream"]
    return {
        "ttft": stream.dropna(subset=["TTFT ms"])[["reply", "TTFT ms"]],
        "latency": batch[["reply", "latency ms"]],
        "tps": frame.dropna(subset=["tokens/s"])[["reply", "tokens/s", "mode"]],
    }


def plot_label(key: str, frame: pd.DataFrame) -> dict[str, Any]:
    """A Speed plot's label: why it is empty, hidden once it draws. Only its data and label change after it is
    built: a new title or sort redraws the whole chart, and Gradio's plot can then keep the older drawing when
    that redraw crosses the one of its tab being shown."""
    return {"label": "" if len(frame) else PLOTS[key][2], "show_label": not len(frame)}


def summary_markdown(turns: Sequence[Turn]) -> str:
    """genai-perf statistics per mode (stream and batch measure different things), times in ms."""
    stats = summary([t for t in turns if t.done])
    if not stats:
        return "No replies yet: each reply's figures appear here, stream and batch apart."
    counts = speed_table(turns)["mode"].value_counts()
    parts = []
    for mode, rows in stats.items():
        count = int(counts.get(mode, 0))
        replies = f"{count} reply" if count == 1 else f"{count} replies"
        parts += [f"**{md(MODES.get(mode, mode))}** · {replies} · {md(SUMMARY_NOTES.get(mode, ''))}", "",
                  "| metric | avg | p50 | p90 | p99 | min | max |", "|---|---|---|---|---|---|---|"]
        for key, label in SUMMARY_LABELS.items():
            if key in rows:
                s = rows[key]
                parts.append(f"| {label} | " + " | ".join(f"{s[k]:.1f}" for k in ("avg", "p50", "p90", "p99",
                                                                                    "min", "max")) + " |")
        parts.append("")
    return "\n".join(parts)


# --------------------------------------------------------------------------- the Embeddings tab

EMBED_COLUMNS = ["input", "dimension", "norm", "tokens"]


def embed_rows(found: Embeddings) -> pd.DataFrame:
    """Each input's dimension, norm and tokens."""
    return pd.DataFrame([[label, int(found.vectors.shape[1]), round(norm, 4), found.tokens[i] if found.tokens else None]
                         for i, (label, norm) in enumerate(zip(found.labels(), found.norms))], columns=EMBED_COLUMNS)


def heat_map(found: Embeddings) -> str:
    """The cosine-similarity matrix as an HTML table, each cell shaded by its value (1: full, 0 or less: none)."""
    labels = [esc(label) for label in found.labels()]
    head = "".join(f"<th>{i + 1}</th>" for i in range(len(labels)))
    rows = []
    for label, row in zip(labels, found.similarity):
        cells = "".join(f'<td style="background: rgba(79, 70, 229, {max(float(v), 0.0):.3f}); color: '
                        f'{"#fff" if v > 0.55 else "inherit"}">{v:.4f}</td>' for v in row)
        rows.append(f"<tr><th>{label}</th>{cells}</tr>")
    return (f'<table class="qc-heat"><caption>cosine similarity · {esc(found.model)}</caption>'
            f"<tr><th></th>{head}</tr>{''.join(rows)}</table>")


def embed_status(found: Embeddings) -> str:
    return md(f"{len(found.texts)} vectors from {found.model} in {found.seconds:.3f} s")
