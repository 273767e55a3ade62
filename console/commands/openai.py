"""``qaic-console openai``: the OpenAI-compatible front before a running tritonserver, and what ``serve
--openai-port`` shares with it (the options, the key rule, the front beside the server)."""

from __future__ import annotations

import functools
import ipaddress
import sys
from collections.abc import Callable, Sequence
from typing import Any

import click

from console.clients import ClientError, UsageError
from console.commands.options import server_options
from console.front.http_server import DRAIN, FrontServer, front_server
from console.front.media import MB, MediaRules
from console.front.toolcalls import PARSERS
from console.infra.terminal import CONTEXT_SETTINGS
from console.server.keys import FRONT_KEY_ENV, key_for

KEY_ENV = FRONT_KEY_ENV


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def api_key_for(host: str, api_key: str | None, no_api_key: bool) -> str | None:
    """The key clients must bring: the one given; none on loopback or with ``--no-api-key``; off loopback without
    either, UsageError (the key is on by default there)."""
    if api_key and no_api_key:
        raise UsageError("give --api-key or --no-api-key, not both")
    if api_key or no_api_key or loopback(host):
        return api_key or None
    raise UsageError(f"the OpenAI-compatible API would listen on {host}, off loopback: give --api-key (or "
                      f"${KEY_ENV}), or --no-api-key to serve it to anyone who can reach it")


def front_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The front's options (``openai`` and ``serve --openai-port``)."""
    options = [
        click.option("--api-key", default=None, envvar=KEY_ENV, show_envvar=True,
                     help="Clients must send 'Authorization: Bearer KEY' (required off loopback unless --no-api-key)."),
        click.option("--no-api-key", is_flag=True, help="Serve off loopback without a key."),
        click.option("--tokenizer", "tokenizers", multiple=True, metavar="[MODEL=]FOLDER",
                     help="Local tokenizer folder for the chat template (and token counts) of MODEL, or of every "
                          "model (repeatable; the embedded models have their own)."),
        click.option("--tool-call-parser", "tool_parser", type=click.Choice(sorted(PARSERS)), default=None,
                     help="The format of the models' tool calls (default: the one their chat template names, else "
                          "hermes, the form the front asks for when the template renders no tools)."),
    ]
    for option in reversed(options):
        func = option(func)
    return media_options(func)


def media_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The options of the images requests may bring, given to ``func`` as one ``media`` (:class:`MediaRules`)."""
    rules = MediaRules()

    @functools.wraps(func)
    def command(*args: Any, allowed_media_domains: tuple[str, ...], max_images: int, max_image_mb: float,
                max_image_pixels: int, **kwargs: Any) -> Any:
        domains = tuple(d.strip().lower() for given in allowed_media_domains for d in given.split(",") if d.strip())
        media = MediaRules(domains, max_images, int(max_image_mb * MB), max_image_pixels)
        return func(*args, media=media, **kwargs)

    options = [
        click.option("--allowed-media-domains", multiple=True, metavar="HOST[,HOST]",
                     help="Hosts whose http(s) image URLs the front fetches (repeatable; only from public addresses; "
                          "default: none, images come as data URLs only)."),
        click.option("--max-images", type=click.IntRange(min=0), default=rules.max_images, show_default=True,
                     help="Images one request may bring."),
        click.option("--max-image-mb", type=click.FloatRange(min=0), default=rules.max_bytes / MB,
                     show_default=True, help="Largest image a request may bring (encoded), in MiB."),
        click.option("--max-image-pixels", type=click.IntRange(min=1), default=rules.max_pixels, show_default=True,
                     help="Largest image a request may bring, in pixels (width x height)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


class Beside:
    """``serve --openai-port``: the front beside the tritonserver ``serve`` runs (nothing when no port is given).
    Its options are checked when made (ClientError), before the server starts."""

    def __init__(self, port: int | None, host: str, api_key: str | None, no_api_key: bool,
                 tokenizers: Sequence[str], tool_parser: str | None = None, media: MediaRules | None = None) -> None:
        from console.server.ports import port_in_use

        self.port, self.host, self.tokenizers, self.tool_parser = port, host, tokenizers, tool_parser
        self.media = media
        self.key = api_key_for(host, api_key, no_api_key) if port is not None else None
        if port is not None and port_in_use(port):
            raise UsageError(f"--openai-port {port} is in use: give a free port")
        self.server: FrontServer | None = None

    def start(self, triton_grpc: str, say: Callable[[str], None], metrics_url: str | None = None,
              triton_key: Callable[[], str] = str) -> None:
        if self.port is not None:
            self.server = front_server(triton_grpc, self.host, self.port, self.key, self.tokenizers, metrics_url,
                                       self.tool_parser, media=self.media, triton_key=triton_key)
            self.server.start()
            say(f"  OpenAI  {self.server.base_url}")

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


@click.command("openai", context_settings=CONTEXT_SETTINGS)
@click.option("--url", default=None,
              help="host:port of the running tritonserver (its HTTP or gRPC endpoint; the other is its neighbour).")
@server_options("--grpc-url", "--metrics-url")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address the API listens on (0.0.0.0 exposes it: then an API key is asked for).")
@click.option("--port", type=int, default=9000, show_default=True, help="Port the API listens on.")
@click.option("--drain", type=click.IntRange(min=0), default=DRAIN, show_default=True, metavar="SECONDS",
              help="When stopped (SIGTERM, Ctrl-C): seconds the open requests and streams get to finish; new "
                   "connections are refused at once.")
@front_options
def openai_command(url: str | None, grpc_url: str | None, host: str, port: int, metrics_url: str | None,
                   drain: int, api_key: str | None, no_api_key: bool, tokenizers: tuple[str, ...],
                   tool_parser: str | None, media: MediaRules) -> None:
    """Serve an OpenAI-compatible API (/v1/models, /v1/completions, /v1/chat/completions, /v1/responses, /tokenize,
    /detokenize, /tokenizer_info, /metrics, /health) in front of a running tritonserver's LLM models, e.g.
    `qaic-console openai --url 127.0.0.1:8001 --port 9000`."""
    from console.core.adapters import DEFAULT_KIND, adapter_for  # with the metrics' and the wire's libraries
    from console.server.ports import port_in_use

    try:
        key = api_key_for(host, api_key, no_api_key)
        if port_in_use(port):
            raise UsageError(f"--port {port} is in use: give a free port")
        if not url and not grpc_url:
            raise UsageError("give --url (the tritonserver's address)")
        triton = adapter_for(url or "", DEFAULT_KIND, grpc_url, metrics_url)  # a tritonserver, whatever the URL
        grpc, _ = triton.url("stream")
        page, _ = triton.metrics()
        server = front_server(grpc, host, port, key, tokenizers, page, tool_parser, drain, media,  # its libraries first
                              functools.partial(key_for, triton.http_url or ""))  # a console's server here
        click.echo(triton.connect())
    except ClientError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    server.run(lambda: click.echo(f"OpenAI-compatible API at {server.base_url} (tritonserver gRPC {grpc}); "
                                  "press Ctrl-C to stop"))
    if not server.server.started:
        sys.exit(1)
