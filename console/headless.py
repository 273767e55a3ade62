"""Headless mode: ``qaic-console --prompt "My name is|Maroon bells"`` answers and exits.

Without ``--url`` the embedded SmolLM2 repository is generated once into the cache, tritonserver is
started on the one model needed (progress on stderr), the prompts are answered and the server is
stopped. Replies go to stdout (streamed as they arrive on a terminal, whole when piped, or one JSON
object per prompt with ``--json``); speed figures and errors go to stderr. Exit code 1 when any
prompt failed. Also here: the seed's sample clients (``client_example_kv.py`` ...).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import click

from console.chat import chat_prompts
from console.clients import (
    Call,
    ClientError,
    Failure,
    GenerationParams,
    Reply,
    TextDelta,
    Timeouts,
    format_stats,
    generate,
    infer,
    model_info,
    split_prompts,
    stream,
)

MODES = ("stream", "batch", "generate")
EMBEDDED_DEFAULTS = {"stream": "smollm2_decoupled", "batch": "smollm2_kv", "generate": "smollm2_kv"}
DEFAULT_MAX_TOKENS = 128
DEFAULT_IDLE_TIMEOUT = 300.0
START_TIMEOUT = 600.0
_LOG_LINE = re.compile(r'^(?P<level>[IWE])\d{4} [\d:.]+\s+\d+ (?P<file>[^:\s]+):\d+\] "(?P<msg>.*)"\s*$')

Progress = Callable[[str], None]


@dataclass
class HeadlessOptions:
    """Everything headless mode needs; the CLI options map one to one."""

    prompt: str
    mode: str = "stream"
    model: str | None = None
    url: str | None = None
    http_url: str | None = None
    grpc_url: str | None = None
    protocol: str = "http"  # batch mode: "grpc" makes timeouts cancel on the server
    timeout: float | None = None  # None: 600 s (KV) / 6000 s (causal) from the model config
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT
    max_tokens: int | None = DEFAULT_MAX_TOKENS  # None or 0: up to the model's context
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    repetition_penalty: float | None = None
    stop: tuple[str, ...] = ()
    system: str | None = None
    chat: bool = False
    tokenizer: str | None = None
    json: bool = False
    echo: bool = False
    quiet: bool = False


# --------------------------------------------------------------------------- embedded server


def _fingerprint() -> str:
    """Changes when the backend or the sample definitions change (the cached repo is then rewritten)."""
    from repo_gen import samples
    from repo_gen.writer import ASSETS, BACKEND_SRC

    digest = hashlib.sha256()
    files = [*sorted(BACKEND_SRC.glob("*.py")), ASSETS / "model.py", ASSETS / "config.pbtxt.tmpl",
             Path(samples.__file__)]
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def embedded_repo(progress: Progress) -> Path:
    """``<cache>/llm_model_dir`` with the embedded samples, (re)written when missing or stale."""
    from backend_model.models import cache_root
    from repo_gen.samples import EMBEDDED_SAMPLES, write_samples

    repo = cache_root() / "llm_model_dir"
    stamp = cache_root() / "llm_model_dir.stamp"
    fingerprint = _fingerprint()
    fresh = stamp.is_file() and stamp.read_text().strip() == fingerprint
    if fresh and all((repo / name / "config.pbtxt").is_file() for name in EMBEDDED_SAMPLES):
        return repo
    progress(f"writing the embedded model repository {repo} ...")
    write_samples(EMBEDDED_SAMPLES, repo, force=True)
    stamp.write_text(fingerprint + "\n")
    return repo


def _startup_line(line: str) -> str | None:
    """The server log lines worth showing while models load, shortened."""
    match = _LOG_LINE.match(line)
    if not match:
        return None
    from console.server import HARMLESS

    level, source, msg = match["level"], match["file"], match["msg"]
    if any(noise in msg for noise in HARMLESS):
        return None
    if level == "E" or source == "triton_model.py":
        return msg
    if msg.startswith("loading: ") or msg.startswith("successfully loaded"):
        return msg
    return None


@contextlib.contextmanager
def embedded_server(model: str, progress: Progress) -> Iterator[Any]:
    """A tritonserver on the cached embedded repository, loading only ``model``; stopped on exit."""
    from console.server import TritonServer
    from repo_gen.samples import EMBEDDED_SAMPLES

    if model not in EMBEDDED_SAMPLES:
        raise ClientError(
            f"model {model!r} is not an embedded sample ({', '.join(EMBEDDED_SAMPLES)}): "
            "pass --url to use a running tritonserver"
        )
    repo = embedded_repo(progress)
    server = TritonServer(repo, model_control_mode="explicit", extra_args=(f"--load-model={model}",))
    starting = [True]

    def on_log(line: str) -> None:
        shown = _startup_line(line) if starting[0] else None
        if shown:
            progress(f"  {shown}")

    t0 = time.perf_counter()
    progress(f"starting tritonserver on {repo} (model {model}) ...")
    try:
        server.start(timeout=START_TIMEOUT, on_log=on_log)
        starting[0] = False
        states = ", ".join(f"{n} {s}" for n, (s, _) in sorted(server.model_states().items()) if s)
        progress(f"tritonserver ready in {time.perf_counter() - t0:.1f} s: {states} "
                 f"(HTTP {server.http_url}, gRPC {server.grpc_url})")
        yield server
    finally:
        starting[0] = False
        if server.running:
            progress("stopping tritonserver ...")
        server.stop()


# --------------------------------------------------------------------------- prompts


# --------------------------------------------------------------------------- output


class Printer:
    """Renders a call's events: stdout for replies, stderr for figures and errors."""

    def __init__(self, prompts: list[str], opts: HeadlessOptions, model: str, out: TextIO, err: TextIO,
                 tty: bool) -> None:
        self.prompts = prompts  # as the user typed them (before any chat template)
        self.opts = opts
        self.model = model
        self.out, self.err = out, err
        self.live = tty and not opts.json  # stream text as it arrives
        self.multi = len(prompts) > 1
        self.live_open = False  # prompt 0's text is being printed live
        self.replies: dict[int, Reply] = {}
        self.failure: Failure | None = None

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def _header(self, i: int) -> str:
        """``[i/n] prompt`` above each reply when there are several (``[i/n]`` when echoing)."""
        if not self.multi:
            return ""
        return f"[{i + 1}/{len(self.prompts)}]" + ("" if self.opts.echo else f" {self.prompts[i]}") + "\n"

    def event(self, event: TextDelta | Reply | Failure) -> None:
        if isinstance(event, TextDelta):
            if self.live and event.index == 0:
                if not self.live_open:
                    echo = self.prompts[0] if self.opts.echo else ""
                    self._write(self._header(0) + echo)
                    self.live_open = True
                self._write(event.text)
        elif isinstance(event, Reply):
            self.replies[event.index] = event
        else:
            self.failure = event

    def interrupted(self) -> None:
        """End a half-printed line before the error goes to stderr."""
        if self.live_open:
            self._write("\n")

    def _text(self, reply: Reply) -> str:
        if self.opts.echo and not reply.includes_prompt:
            return self.prompts[reply.index] + reply.text
        return reply.text

    def finish(self) -> int:
        """Print what is left; the exit code."""
        if self.live_open and 0 not in self.replies:
            self._write("\n")
        for i in range(len(self.prompts)):
            reply = self.replies.get(i)
            if reply is None:
                if self.opts.json:
                    self._write(json.dumps(self._json_failed(i)) + "\n")
                continue
            if self.opts.json:
                self._write(json.dumps(self._json(reply), ensure_ascii=False) + "\n")
                continue
            if i == 0 and self.live_open:
                self._write("\n")
            else:
                if self.multi and i > 0:
                    self._write("\n")
                self._write(self._header(i) + self._text(reply) + "\n")
            if not self.opts.quiet:
                where = f"[{i + 1}/{len(self.prompts)}] " if self.multi else ""
                self.err.write(f"{where}{reply.finish_reason or '?'} · {format_stats(reply.stats)}\n")
        bad = [r for r in self.replies.values() if not r.ok]
        if self.failure is not None:
            self.err.write(f"error: {self.failure.message}\n")
        elif bad:
            self.err.write(f"error: {len(bad)} of {len(self.prompts)} prompts finished with "
                           f"{', '.join(sorted({r.finish_reason for r in bad}))}\n")
        self.err.flush()
        return 1 if self.failure is not None or bad or len(self.replies) < len(self.prompts) else 0

    def _json(self, reply: Reply) -> dict[str, Any]:
        return {
            "index": reply.index,
            "prompt": self.prompts[reply.index],
            "text": self._text(reply),
            "finish_reason": reply.finish_reason,
            "model": self.model,
            "mode": self.opts.mode,
            **reply.stats.as_dict(),
        }

    def _json_failed(self, i: int) -> dict[str, Any]:
        failure = self.failure
        return {
            "index": i,
            "prompt": self.prompts[i],
            "text": None,
            "finish_reason": None,
            "model": self.model,
            "mode": self.opts.mode,
            "error": failure.message if failure else "no reply",
            "error_kind": failure.kind if failure else None,
        }


# --------------------------------------------------------------------------- running


def _endpoint(opts: HeadlessOptions, http_url: str | None, grpc_url: str | None) -> tuple[str, str]:
    """(url, protocol) the mode needs."""
    if opts.mode == "stream" or (opts.mode == "batch" and opts.protocol == "grpc"):
        url, protocol, flag = grpc_url, "grpc", "--grpc-url"
    else:
        url, protocol, flag = http_url, "http", "--http-url"
    if not url:
        raise ClientError(f"--mode {opts.mode} needs the server's {protocol.upper()} endpoint: pass --url or {flag}")
    return url, protocol


def _params(opts: HeadlessOptions) -> GenerationParams:
    return GenerationParams(
        max_tokens=opts.max_tokens or None,
        temperature=opts.temperature,
        top_p=opts.top_p,
        top_k=opts.top_k,
        seed=opts.seed,
        repetition_penalty=opts.repetition_penalty,
        stop=tuple(opts.stop),
        exclude_input_in_output=None if opts.mode == "stream" else not opts.echo,
    )


def _check(opts: HeadlessOptions) -> None:
    if opts.mode not in MODES:
        raise ClientError(f"--mode must be one of {', '.join(MODES)}")
    for name in ("timeout", "idle_timeout"):
        value = getattr(opts, name)
        if value is not None and value < 0:
            raise ClientError(f"--{name.replace('_', '-')} must be >= 0 (0 disables), got {value:g}")
    if opts.max_tokens is not None and opts.max_tokens < 0:
        raise ClientError(f"--max-tokens must be >= 0, got {opts.max_tokens}")


def answer(opts: HeadlessOptions, http_url: str | None, grpc_url: str | None, out: TextIO, err: TextIO,
           tty: bool, progress: Progress) -> int:
    """Send the prompts to a running server and print the answers; the exit code."""
    prompts = split_prompts(opts.prompt)
    model = opts.model or EMBEDDED_DEFAULTS[opts.mode]
    url, protocol = _endpoint(opts, http_url, grpc_url)
    info = model_info(url, model, protocol)
    if opts.mode != "stream":
        info.check_batch("use --mode stream")
    sent = prompts
    if opts.chat or opts.system:
        sent = chat_prompts(prompts, info, system=opts.system, tokenizer=opts.tokenizer, progress=progress)
    timeouts = Timeouts(network=info.network_timeout(opts.timeout), idle=opts.idle_timeout or None)
    params = _params(opts)
    call: Call
    if opts.mode == "stream":
        call = stream(url, model, sent, params, timeouts)
    elif opts.mode == "batch":
        call = infer(url, model, sent, params, replace(timeouts, idle=None), protocol=protocol)
    else:
        call = generate(url, model, sent, params, replace(timeouts, idle=None))
    printer = Printer(prompts, opts, model, out, err, tty)
    try:
        with contextlib.closing(iter(call)) as events:  # closing an unfinished call cancels it
            for event in events:
                printer.event(event)
    except BaseException:
        printer.interrupted()
        raise
    return printer.finish()


def run(opts: HeadlessOptions, out: TextIO | None = None, err: TextIO | None = None,
        tty: bool | None = None) -> int:
    """Headless mode end to end: the exit code (0 ok, 1 failed, 130 interrupted)."""
    from console.server import ServerError

    out = out or sys.stdout
    err = err or sys.stderr
    tty = out.isatty() if tty is None else tty

    def progress(message: str) -> None:
        if not opts.quiet:
            err.write(message + "\n")
            err.flush()

    try:
        _check(opts)
        split_prompts(opts.prompt)  # bad input fails before any server starts
        http_url = opts.http_url or opts.url
        grpc_url = opts.grpc_url or opts.url
        if http_url or grpc_url:
            return answer(opts, http_url, grpc_url, out, err, tty, progress)
        model = opts.model or EMBEDDED_DEFAULTS.get(opts.mode, "")
        with embedded_server(model, progress) as server:
            return answer(opts, server.http_url, server.grpc_url, out, err, tty, progress)
    except ServerError as exc:
        err.write(f"error: {exc}\n")
        for line in exc.log_tail[-15:]:
            err.write(f"  | {line}\n")
    except ClientError as exc:
        err.write(f"error: {exc}\n")
    except (OSError, ValueError) as exc:  # e.g. the cache is not writable, a bad repository
        err.write(f"error: {' '.join(str(exc).split())}\n")
    except KeyboardInterrupt:
        err.write("error: interrupted\n")
        return 130
    return 1


# --------------------------------------------------------------------------- click glue


def headless_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The headless options, for the ``qaic-console`` group."""
    options = [
        click.option("--prompt", default=None,
                     help="Answer this prompt headless and exit; 'a|b' sends two prompts in one request "
                          "(\\| is a literal |)."),
        click.option("--mode", type=click.Choice(MODES), default="stream", show_default=True,
                     help="stream: gRPC decoupled; batch: one inference response; generate: the HTTP "
                          "generate endpoint."),
        click.option("--model", default=None,
                     help="Model name (default: smollm2_decoupled for stream, smollm2_kv otherwise)."),
        click.option("--url", default=None,
                     help="host:port of a running server (HTTP or gRPC as the mode needs); without it the "
                          "embedded model is served for the run."),
        click.option("--http-url", default=None, help="host:port of the server's HTTP endpoint."),
        click.option("--grpc-url", default=None, help="host:port of the server's gRPC endpoint."),
        click.option("--protocol", type=click.Choice(("http", "grpc")), default="http", show_default=True,
                     help="Batch mode transport; over gRPC a timeout also cancels the request on the server."),
        click.option("--timeout", type=float, default=None,
                     help="Network timeout in s for the whole call (default: 600 for KV-cache models, "
                          "6000 for causal ones; 0 disables)."),
        click.option("--idle-timeout", type=float, default=DEFAULT_IDLE_TIMEOUT, show_default=True,
                     help="Stream mode: seconds without a response before giving up (0 disables)."),
        click.option("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, show_default=True,
                     help="Tokens to generate per prompt (0: up to the model's context length)."),
        click.option("--temperature", type=float, default=None, help="Sampling temperature (0: greedy, default)."),
        click.option("--top-p", type=float, default=None, help="Nucleus sampling probability."),
        click.option("--top-k", type=int, default=None, help="Sample from the k most likely tokens."),
        click.option("--seed", type=int, default=None, help="Sampling seed."),
        click.option("--repetition-penalty", type=float, default=None, help="Repetition penalty (1: none)."),
        click.option("--stop", multiple=True, help="Stop string (repeatable)."),
        click.option("--system", default=None, help="System message (implies --chat)."),
        click.option("--chat", is_flag=True,
                     help="Apply the model's chat template (embedded models: their own tokenizer; others "
                          "need --tokenizer)."),
        click.option("--tokenizer", default=None, type=click.Path(file_okay=False),
                     help="Local tokenizer folder for --chat."),
        click.option("--json", "json_", is_flag=True,
                     help="One JSON object per prompt: text, finish_reason and genai-perf figures."),
        click.option("--echo", is_flag=True, help="Print each prompt before its reply."),
        click.option("-q", "--quiet", is_flag=True, help="No progress or speed lines on stderr."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def options_from_cli(values: dict[str, Any]) -> HeadlessOptions:
    """HeadlessOptions from the group's parameters (``json_`` -> ``json``, ``stop`` tuple)."""
    values = dict(values)
    values["json"] = values.pop("json_", False)
    values["stop"] = tuple(values.get("stop") or ())
    known = set(HeadlessOptions.__dataclass_fields__)
    return HeadlessOptions(**{k: v for k, v in values.items() if k in known})


# --------------------------------------------------------------------------- the seed's sample clients

SEED_DEFAULTS = {  # (mode, kind) -> (default model, default URL)
    ("stream", "kv"): ("mistral_decoupled", "localhost:8001"),
    ("stream", "causal"): ("starcoder_decoupled", "localhost:8001"),
    ("batch", "kv"): ("mistral_7b", "localhost:8000"),
    ("batch", "causal"): ("starcoder_15b", "localhost:8000"),
    ("generate", "kv"): ("mistral_7b", "localhost:8000"),
    ("generate", "causal"): ("starcoder_15b", "localhost:8000"),
}


def seed_client(mode: str, kind: str, prompt: str, url: str | None, model_name: str | None,
                timeout: float | None, max_tokens: int | None, quiet: bool = False) -> int:
    """The seed's ``client_example_{kv,causal}.py``: one call against a running server, prompt echoed."""
    from console.clients import default_timeout

    model, default_url = SEED_DEFAULTS[(mode, kind)]
    opts = HeadlessOptions(
        prompt=prompt,
        mode=mode,
        model=model_name or model,
        url=url or default_url,
        timeout=default_timeout(kind == "kv") if timeout is None else timeout,
        idle_timeout=None,
        max_tokens=max_tokens,
        echo=True,
        quiet=quiet,
    )
    return run(opts)


def seed_command(mode: str, kind: str | None = None, name: str | None = None) -> click.Command:
    """A click command for the seed client; ``kind=None`` adds ``--causal`` to pick the causal defaults."""
    kinds = ("kv", "causal") if kind is None else (kind,)
    models = " / ".join(SEED_DEFAULTS[(mode, k)][0] for k in kinds)
    url = SEED_DEFAULTS[(mode, kinds[0])][1]
    timeouts = " / ".join(f"{'600' if k == 'kv' else '6000'}" for k in kinds)
    protocol = "gRPC" if mode == "stream" else "HTTP"

    @click.command(name=name or mode, context_settings={"help_option_names": ["-h", "--help"]})
    @click.option("--prompt", required=True, help="Prompt; 'a|b' sends two prompts in one request.")
    @click.option("--url", default=None, help=f"{protocol} host:port of tritonserver [default: {url}].")
    @click.option("--model_name", "--model-name", "model_name", default=None,
                  help=f"Model name [default: {models}].")
    @click.option("--timeout", type=float, default=None, help=f"Network timeout in s [default: {timeouts}].")
    @click.option("--max_tokens", "--max-tokens", "max_tokens", type=int, default=None,
                  help="Tokens to generate per prompt [default: up to the model's context length].")
    @click.option("-q", "--quiet", is_flag=True, help="No speed lines on stderr.")
    def command(prompt: str, url: str | None, model_name: str | None, timeout: float | None,
                max_tokens: int | None, quiet: bool, causal: bool = False) -> None:
        chosen = kind or ("causal" if causal else "kv")
        sys.exit(seed_client(mode, chosen, prompt, url, model_name, timeout, max_tokens, quiet))

    if kind is None:
        command = click.option(
            "--causal", is_flag=True, help="Causal model defaults (starcoder samples, 6000 s timeout)."
        )(command)
    command.help = {
        "stream": "Stream a reply from a decoupled model over gRPC (the seed's stream-response client).",
        "batch": "Ask a batch model over HTTP, one response at the end (the seed's batch-response client).",
        "generate": "POST /v2/models/<model>/generate over HTTP (the seed's curl example).",
    }[mode]
    return command


@click.group(name="client", context_settings={"help_option_names": ["-h", "--help"]})
def client() -> None:
    """The seed's sample clients against a running tritonserver (stream, batch, generate)."""


for _mode in MODES:
    client.add_command(seed_command(_mode))
