"""The seed's sample client: send prompts to a model on a running tritonserver and print the answers.

``client_example_kv.py`` and ``client_example_causal.py`` beside this file run it (so does
``qaic-console client``). Standalone: tritonclient and numpy only; Python 3.8 and tritonclient 2.29
(the ``nvcr.io/nvidia/tritonserver:22.12-py3-sdk`` container) or newer.

* stream-response: gRPC streaming, for decoupled models; the text is printed as it is generated.
* batch-response: HTTP, one response at the end.

It sends what the seed's clients send: the ``prompt`` input (``"a|b"``: two prompts in one
request, the model's batch), plus ``max_tokens`` only when ``--max_tokens`` is given. Defaults are
the seed's: its sample model names, ports 8001 (gRPC) and 8000 (HTTP), and network timeouts of
600 s for KV-cache models and 6000 s for causal ones.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
import uuid
from typing import Any, Callable, Sequence

import numpy as np

MODELS = {
    ("stream", "kv"): "mistral_decoupled", ("stream", "causal"): "starcoder_decoupled",
    ("batch", "kv"): "mistral_7b", ("batch", "causal"): "starcoder_15b",
    ("generate", "kv"): "mistral_7b", ("generate", "causal"): "starcoder_15b",
}
URLS = {"stream": "localhost:8001", "batch": "localhost:8000", "generate": "localhost:8000"}
TIMEOUTS = {"kv": 600.0, "causal": 6000.0}
HOW = {
    "stream": "streams the answer over gRPC (decoupled models)",
    "batch": "asks over HTTP and prints the one response (batch models)",
    "generate": "POSTs to the HTTP generate endpoint, as the seed's curl example (batch models)",
}


class ClientFailure(Exception):
    """The request failed; the message is one line for the user."""


def parse_args(mode: str, kind: str, argv: Sequence[str] | None, prog: str | None) -> argparse.Namespace:
    model, timeout = MODELS[(mode, kind)], TIMEOUTS[kind]
    parser = argparse.ArgumentParser(
        prog=prog, description=f"The seed's {kind} client: {HOW[mode]}.",
        epilog='Example: --prompt "My name is|Maroon bells" (two prompts, one request)')
    parser.add_argument("--prompt", required=True, help="Prompt; 'a|b' sends two prompts in one request.")
    parser.add_argument("--url", default=URLS[mode], help=f"tritonserver host:port (default: {URLS[mode]}).")
    parser.add_argument("--model_name", "--model-name", default=model, help=f"Model name (default: {model}).")
    parser.add_argument("--timeout", type=float, default=timeout,
                        help=f"Network timeout in seconds (default: {timeout:g}).")
    parser.add_argument("--max_tokens", "--max-tokens", type=int, default=None,
                        help="Tokens to generate per prompt; sent only when given (default: the model's).")
    parser.add_argument("-q", "--quiet", action="store_true", help="No timing line on stderr.")
    args = parser.parse_args(argv)
    args.prompts = args.prompt.split("|")
    for i, part in enumerate(args.prompts):
        if not part.strip():
            parser.error(f"prompt {i + 1} of {len(args.prompts)} is empty")
    return args


def _inputs(module: Any, prompts: list[str], max_tokens: int | None) -> list[Any]:
    """The ``prompt`` tensor (and ``max_tokens`` when given) for tritonclient.grpc or .http."""
    tensors = [("prompt", "BYTES", np.array([p.encode("utf-8") for p in prompts], dtype=np.object_))]
    if max_tokens is not None:
        tensors.append(("max_tokens", "INT64", np.array([max_tokens], dtype=np.int64)))  # as the config declares
    inputs = []
    for name, datatype, data in tensors:
        item = module.InferInput(name, list(data.shape), datatype)
        item.set_data_from_numpy(data)
        inputs.append(item)
    return inputs


def _texts(values: Any) -> list[str]:
    return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in np.asarray(values).reshape(-1)]


def _message(exc: BaseException) -> str:
    text = exc.message() if hasattr(exc, "message") and callable(exc.message) else str(exc)
    return " ".join((text or type(exc).__name__).split())


def stream(args: argparse.Namespace, say: Callable[[str], None]) -> str:
    """Stream over gRPC; prints the text as it comes (one prompt) or each answer at the end (several)."""
    import tritonclient.grpc as grpcclient

    prompts, live = args.prompts, len(args.prompts) == 1
    texts, errors, arrivals = [""] * len(prompts), [], []
    t0 = time.perf_counter()

    def callback(result: Any = None, error: Any = None) -> None:  # tritonclient passes keywords
        if error is not None:
            errors.append(error)
            return
        values = result.as_numpy("text_output")
        if values is None:
            return
        arrivals.append(time.perf_counter() - t0)
        for i, piece in enumerate(_texts(values)[: len(prompts)]):
            texts[i] += piece
            if live:
                say(piece)

    client = grpcclient.InferenceServerClient(args.url)
    try:
        if live:
            say(prompts[0])
        client.start_stream(callback=callback, stream_timeout=args.timeout)
        client.async_stream_infer(args.model_name, _inputs(grpcclient, prompts, args.max_tokens),
                                  request_id=f"seed-{uuid.uuid4().hex[:8]}")
        client.stop_stream()  # returns once the server has sent the request's last response
    finally:
        client.close()
        if live:
            say("\n")
    if errors:
        error = errors[0]
        if "DEADLINE" in str(getattr(error, "status", lambda: "")() or "") or "Deadline" in _message(error):
            raise ClientFailure(f"network timeout: {args.model_name} did not finish within {args.timeout:g} s")
        raise ClientFailure(_message(error))
    if not live:
        say("\n".join(p + t for p, t in zip(prompts, texts)) + "\n")
    first = f"first text after {arrivals[0]:.2f} s, " if arrivals else ""
    return f"{len(arrivals)} responses, {first}done in {time.perf_counter() - t0:.2f} s"


def batch(args: argparse.Namespace, say: Callable[[str], None]) -> str:
    """One inference over HTTP; prints each answer (batch models echo the prompt first)."""
    import tritonclient.http as httpclient

    t0 = time.perf_counter()
    client = httpclient.InferenceServerClient(args.url, connection_timeout=args.timeout,
                                              network_timeout=args.timeout)
    try:
        result = client.infer(args.model_name, _inputs(httpclient, args.prompts, args.max_tokens),
                              request_id=f"seed-{uuid.uuid4().hex[:8]}")
    finally:
        client.close()
    say("\n".join(_texts(result.as_numpy("text_output"))) + "\n")
    return f"one response after {time.perf_counter() - t0:.2f} s"


def generate(args: argparse.Namespace, say: Callable[[str], None]) -> str:
    """``POST /v2/models/<model>/generate`` with ``{"prompt": ..., "id": ...}``, as the seed's curl."""
    body: dict[str, Any] = {"prompt": args.prompts[0] if len(args.prompts) == 1 else args.prompts, "id": "42"}
    if args.max_tokens is not None:
        body["max_tokens"] = args.max_tokens
    t0 = time.perf_counter()
    request = urllib.request.Request(f"http://{args.url}/v2/models/{args.model_name}/generate",
                                     data=json.dumps(body).encode("utf-8"), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=args.timeout) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise ClientFailure(f"HTTP {exc.code}: {json.loads(exc.read() or b'{}').get('error', exc.reason)}") from None
    text = answer.get("text_output", "")
    say("\n".join(text if isinstance(text, list) else [text]) + "\n")
    return f"one response after {time.perf_counter() - t0:.2f} s"


def main(mode: str, kind: str, argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Run one client (``mode`` stream, batch or generate; ``kind`` kv or causal); the exit code."""
    args = parse_args(mode, kind, argv, prog)

    def say(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    try:
        timing = {"stream": stream, "batch": batch, "generate": generate}[mode](args, say)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except ClientFailure as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # tritonclient, gevent and socket errors: one line, naming the server
        print(f"error: {args.model_name} at {args.url}: {_message(exc)}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"{args.model_name}: {timing}", file=sys.stderr)
    return 0
