"""``qaic-console metrics``: a server's metrics per model as a table, once or ``--watch``ing."""

from __future__ import annotations

import json
import sys
import time

import click

from console.clients import ClientError
from console.commands.options import server_options
from console.core.adapters import URL_HELP, adapter_for
from console.metrics.figures import HEADER, rows
from console.metrics.qaic import card_line, query
from console.metrics.watch import Look, MetricsWatch


def render(look: Look, card: str | None) -> str:
    """Where the metrics are, the per-model table, and the card (None: a fleet's, not read here)."""
    from console.bench.display import table

    lines = [look.note]
    if look.ok:
        lines.append(table(HEADER, rows(look.figures)) if look.figures else "no model reports metrics there")
    if card is not None:
        lines.append(f"card: {card}")
    return "\n".join(lines)


def as_json(look: Look, card: str | None) -> str:
    """One JSON object: the models' figures (a fleet's: in total, per instance, and the servers down)."""
    document: dict[str, object] = {"url": look.url, "note": look.note,
                                   "models": {f.model: f.values for f in look.figures if not f.instance}}
    if card is None:
        instances: dict[str, dict[str, object]] = {}
        for f in look.figures:
            if f.instance:
                instances.setdefault(f.model, {})[f.instance] = f.values
        document.update(instances=instances, down=list(look.down))
    else:
        document["card"] = card
    return json.dumps(document)


def follow_fleet(prometheus: str, window: str, interval: float, watch: bool, json_: bool) -> None:
    """The fleet's table from a Prometheus, once or every ``interval`` until Ctrl-C."""
    from console.fleet.watch import FleetWatch

    follow = FleetWatch(prometheus, window, min_interval=0.0)
    try:
        while True:
            look = follow.look()
            if not look.ok:
                click.echo(f"error: {look.note}", err=True)
                sys.exit(1)
            click.echo(as_json(look, None) if json_ else render(look, None) + ("\n" if watch else ""))
            if not watch:
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return


@click.command("metrics", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", default=None,
              help=URL_HELP + ". Its metrics are guessed at tritonserver's HTTP port + 2, or at /metrics "
                   "beside /v1.")
@server_options("--api", "--metrics-url", "--prometheus")
@click.option("--interval", type=click.FloatRange(min=0.2), default=2.0, show_default=True,
              help="Seconds between the two scrapes the rates are measured over (and between tables with --watch).")
@click.option("--watch", is_flag=True, help="Print a fresh table every --interval until Ctrl-C.")
@click.option("--json", "json_", is_flag=True, help="Print each table as one JSON object (figures per model).")
@click.option("--window", default="1m", show_default=True,
              help="With --prometheus: the range the rates and means are taken over (a PromQL duration).")
def metrics_command(url: str | None, api: str, metrics_url: str | None, interval: float, watch: bool,
                    json_: bool, prometheus: str | None, window: str) -> None:
    """Per model: requests/s, Triton's queue and compute time per request, the backend's slot wait, time to first
    token and decode step, slots in use, requests waiting and tokens/s; and the QAIC card's telemetry. With
    --prometheus, the same for a fleet of servers."""
    if prometheus:
        follow_fleet(prometheus, window, interval, watch, json_)
        return
    if not url and not metrics_url:
        raise click.UsageError("give --url (the server), --metrics-url (its metrics page) or --prometheus (a fleet)")
    try:
        server = adapter_for(url, api) if url else None
    except ClientError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    follow = MetricsWatch(min_interval=0.0)
    look = follow.look(server, metrics_url or "")
    try:
        while look.ok:
            time.sleep(interval)  # the window the rates are measured over
            look = follow.look(server, metrics_url or "")
            devices, note = query()
            if json_:
                click.echo(as_json(look, card_line(devices, note)))
            else:
                click.echo(render(look, card_line(devices, note)) + ("\n" if watch else ""))
            if not watch:
                break
    except KeyboardInterrupt:
        return
    if not look.ok:
        click.echo(f"error: {look.note}", err=True)
        sys.exit(1)
