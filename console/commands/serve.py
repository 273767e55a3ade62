"""``qaic-console serve``: tritonserver in the foreground, supervised, with an optional OpenAI-compatible front."""

from __future__ import annotations

import signal
from pathlib import Path

import click

from backend_model.contract import devices
from console.clients import ClientError
from console.commands.openai import Beside, front_options
from console.core.controller import ServerController
from console.core.supervisor import Supervisor
from console.front.media import MediaRules
from console.infra.signals import Terminated, signals_raise
from console.infra.terminal import CONTEXT_SETTINGS, fail
from console.server import logparse
from console.server.embedded import DEFAULT_MODELS, START_TIMEOUT
from console.server.errors import repository_not_found
from console.server.ports import beyond_loopback

SERVE_RISK = (", without a login: whoever reaches its ports can send inference requests and read its metrics "
              "(its repository API stays this console's)")


def _check_groups(repository: Path | None, models: tuple[str, ...]) -> None:
    """The device groups of the models served, checked before anything starts: against qaic-util's SoCs and each
    other (refused: a SoC missing, not Ready, busy or in two models' groups; warned: a group across board serials).
    The embedded samples (no repository given) run on the CPU: they have none."""
    from repo_gen.inspection import device_review, list_models

    if repository is None:
        return
    folders = [m for m in list_models(repository) if not models or m.name in models]
    if not any(m.device_groups for m in folders):
        return
    try:
        for line in device_review(folders, devices.query()):
            click.echo(line, err=True)
    except devices.DeviceError as exc:
        fail(f"device groups: {exc}")


def _print_ready(controller: ServerController) -> None:
    snap, server = controller.poll(), controller.server
    click.echo(snap.message)
    for row in snap.models:
        click.echo(f"  model {row.name}: {row.state or 'not loaded'}{f' ({row.reason})' if row.reason else ''}")
        if row.info is not None and row.info.instances:
            click.echo(f"    {row.info.instances}")
    click.echo(f"  binary  {server.binary if server else '?'}")
    for label, address in snap.server.addresses() if snap.server else ():
        click.echo(f"  {label:<7} {address}")


@click.command("serve", context_settings={**CONTEXT_SETTINGS, "ignore_unknown_options": True})
@click.option("--model-repository", "model_repository", default=None, type=click.Path(path_type=Path),
              help="Triton model repository directory (default: the embedded SmolLM2 samples, as web and headless "
                   "serve them).")
@click.option("--model", "models", multiple=True,
              help="Load only this model (repeatable; default: every model of the repository, or the embedded stream "
                   "and batch samples).")
@click.option("--http-port", type=int, default=None, help="HTTP port (default: a free one).")
@click.option("--grpc-port", type=int, default=None, help="gRPC port (default: a free one).")
@click.option("--metrics-port", type=int, default=None, help="Metrics port (default: a free one).")
@click.option("--tritonserver", "binary", default=None,
              help="tritonserver binary (default: $QAIC_TRITONSERVER, /opt/tritonserver, the nvidia-pytriton wheel).")
@click.option("--timeout", type=float, default=START_TIMEOUT, show_default=True,
              help="Seconds to wait for readiness.")
@click.option("--log-verbose", type=int, default=0, show_default=True, help="tritonserver --log-verbose level.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address tritonserver listens on (0.0.0.0 exposes it to the network).")
@click.option("--stop-stale", is_flag=True,
              help="Stop tritonservers that a console which is gone left on this repository or these ports.")
@click.option("--python-env", type=click.Path(path_type=Path), default=None,
              help="Virtual or conda environment the Python models run in (default: this console's), e.g. one "
                   "with vllm; a model's own EXECUTION_ENV_PATH parameter still wins for that model.")
@click.option("--backend-dir", "backends", multiple=True, type=click.Path(path_type=Path),
              help="Folder of Python-based backends (NAME/model.py; Triton's vLLM backend as vllm/model.py) the "
                   "models' `backend: \"NAME\"` can name (repeatable).")
@click.option("--openai-port", type=int, default=None,
              help="Also serve an OpenAI-compatible API on this port (on --host), in front of the models.")
@front_options
@click.option("--raw-log", is_flag=True,
              help="Print tritonserver's log as it writes it (default: condensed to errors, warnings, model loads, "
                   "the backend's own lines and the services' addresses, without its wide tables).")
@click.argument("extra", nargs=-1, type=click.UNPROCESSED)
def serve(model_repository: Path | None, models: tuple[str, ...], http_port: int | None, grpc_port: int | None,
          metrics_port: int | None, binary: str | None, timeout: float, log_verbose: int, host: str,
          stop_stale: bool, python_env: Path | None, backends: tuple[Path, ...], openai_port: int | None,
          api_key: str | None, no_api_key: bool, tokenizers: tuple[str, ...], tool_parser: str | None,
          media: MediaRules, raw_log: bool, extra: tuple[str, ...]) -> None:
    """Run tritonserver on a model repository in the foreground until Ctrl-C or SIGTERM.

    A model that fails to load is named (FAILED, with the reason) and the others serve; a model whose
    Python backend dies or stops, or that is unloaded, is reported and loaded again; tritonserver itself, should
    it die, stop or hang, is reported and restarted on the same models and ports. Its repository API answers
    this console only; its log is condensed unless --raw-log. Arguments after the options (or after --) go to
    tritonserver as they are, e.g.
    `qaic-console serve --model-repository llm_model_dir -- --log-info=false`.
    """
    if model_repository is not None and not model_repository.is_dir():
        fail(repository_not_found(model_repository))
    if model_repository is None and not models:
        models = DEFAULT_MODELS
    warning = beyond_loopback(host, "tritonserver's HTTP, gRPC and metrics ports", SERVE_RISK)
    if warning:
        click.echo(warning, err=True)
    try:
        beside = Beside(openai_port, host, api_key, no_api_key, tokenizers, tool_parser, media)
    except ClientError as exc:
        fail(str(exc))

    def on_log(line: str) -> None:
        shown = line if raw_log else logparse.condensed(line)
        if shown is not None:
            click.echo(shown)

    _check_groups(model_repository, models)
    controller = ServerController(on_log=on_log)
    supervisor = Supervisor(controller, click.echo)
    try:
        with signals_raise(signal.SIGTERM):
            snap = supervisor.start(model_repository, models, timeout, http_port=http_port, grpc_port=grpc_port,
                                    metrics_port=metrics_port, binary=binary, log_verbose=log_verbose,
                                    extra_args=extra, host=host, stop_stale=stop_stale, exclusive=True,
                                    python_env=python_env, backends=backends)
            if snap.phase == "failed":
                fail(snap.message)
            _print_ready(controller)
            server = controller.server
            assert server is not None  # it started: the snapshot says so
            beside.start(server.grpc_url, click.echo, server.handle.metrics_url,
                         lambda: controller.server.handle.key if controller.server else "")  # a restart's too
            click.echo("press Ctrl-C to stop")  # last: what comes after it is the log
            fail(supervisor.run())
    except ClientError as exc:  # the OpenAI-compatible API cannot listen
        fail(str(exc))
    except (KeyboardInterrupt, Terminated):
        click.echo("stopping tritonserver ...")
    finally:
        beside.stop()
        _stop(controller)
    click.echo("stopped")


def _stop(controller: ServerController) -> None:
    """Stop gracefully; a second Ctrl-C / SIGTERM meanwhile kills it at once."""
    server = controller.server
    try:
        with signals_raise(signal.SIGINT, signal.SIGTERM):
            controller.stop()
    except Terminated:
        if server is not None:
            server.stop(grace=0)
