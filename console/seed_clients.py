"""``qaic-console client stream|batch|generate``: the seed's sample clients, with the seed's flags and defaults.

The seed's own scripts (``client_example_{kv,causal}.py`` under ``assets/llm-models/tests/``) are
standalone; these commands do the same through the console's pipeline (prompt echoed, speed on stderr).
"""

from __future__ import annotations

import sys

import click

from console.clients import GenerationParams, default_timeout
from console.core.request import MODES, Endpoint, Settings

from . import headless

SEED_DEFAULTS = {  # (mode, kind) -> (default model, default URL)
    ("stream", "kv"): ("mistral_decoupled", "localhost:8001"),
    ("stream", "causal"): ("starcoder_decoupled", "localhost:8001"),
    ("batch", "kv"): ("mistral_7b", "localhost:8000"),
    ("batch", "causal"): ("starcoder_15b", "localhost:8000"),
    ("generate", "kv"): ("mistral_7b", "localhost:8000"),
    ("generate", "causal"): ("starcoder_15b", "localhost:8000"),
}
HELP = {
    "stream": "Stream a reply from a decoupled model over gRPC (the seed's stream-response client).",
    "batch": "Ask a batch model over HTTP, one response at the end (the seed's batch-response client).",
    "generate": "POST /v2/models/<model>/generate over HTTP (the seed's curl example).",
}


def seed_client(mode: str, kind: str, prompt: str, url: str | None, model_name: str | None,
                timeout: float | None, max_tokens: int | None, quiet: bool = False) -> int:
    """One call against a running server, as the seed's ``client_example_{kv,causal}.py`` makes it."""
    model, default_url = SEED_DEFAULTS[(mode, kind)]
    url = url or default_url
    timeout = default_timeout(kind == "kv") if timeout is None else timeout
    settings = Settings(model_name or model, mode, timeout=timeout, idle_timeout=None,
                        params=GenerationParams(max_tokens=max_tokens), echo=True)
    endpoint = Endpoint(http_url=url, grpc_url=url)
    return headless.run(settings, prompt, endpoint, headless.Output(echo=True, quiet=quiet))


def seed_command(mode: str, kind: str | None = None) -> click.Command:
    """The click command of one seed client (``kind`` kv or causal; None: ``--causal`` picks)."""
    models = " / ".join(SEED_DEFAULTS[(mode, k)][0] for k in ((kind,) if kind else ("kv", "causal")))
    url = SEED_DEFAULTS[(mode, "kv")][1]
    protocol = "gRPC" if mode == "stream" else "HTTP"

    @click.command(name=mode, help=HELP[mode], context_settings={"help_option_names": ["-h", "--help"]})
    @click.option("--prompt", required=True, help="Prompt; 'a|b' sends two prompts in one request.")
    @click.option("--url", default=None, help=f"{protocol} host:port of tritonserver [default: {url}].")
    @click.option("--model_name", "--model-name", "model_name", default=None, help=f"Model name [default: {models}].")
    @click.option("--timeout", type=click.FloatRange(min=0), default=None,
                  help="Network timeout in s [default: 600 / 6000 (--causal)].")
    @click.option("--max_tokens", "--max-tokens", "max_tokens", type=click.IntRange(min=0), default=None,
                  help="Tokens to generate per prompt [default: up to the model's context length].")
    @click.option("--causal", is_flag=True, help="Causal model defaults (starcoder samples, 6000 s timeout).")
    @click.option("-q", "--quiet", is_flag=True, help="No speed lines on stderr.")
    def command(prompt: str, url: str | None, model_name: str | None, timeout: float | None,
                max_tokens: int | None, quiet: bool, causal: bool = False) -> None:
        chosen = kind or ("causal" if causal else "kv")
        sys.exit(seed_client(mode, chosen, prompt, url, model_name, timeout, max_tokens, quiet))

    if kind is not None:
        command.params = [p for p in command.params if p.name != "causal"]
    return command


@click.group(name="client", context_settings={"help_option_names": ["-h", "--help"]})
def client() -> None:
    """The seed's sample clients against a running tritonserver (stream, batch, generate)."""


for _mode in MODES:
    client.add_command(seed_command(_mode))
