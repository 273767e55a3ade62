"""Raw tritonclient calls to the bundled backend's models: gRPC streams, HTTP infer and the generate endpoints."""

from __future__ import annotations

import json
import queue
import urllib.request

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import np_to_triton_dtype


def tensor(module, name: str, values, dtype=None):
    arr = np.array(values, dtype=dtype or (object if isinstance(values[0], (str, bytes)) else None))
    if arr.dtype == object:
        arr = np.array([v.encode() if isinstance(v, str) else v for v in values], dtype=object)
    inp = module.InferInput(name, list(arr.shape), np_to_triton_dtype(arr.dtype))
    inp.set_data_from_numpy(arr)
    return inp


def inputs(module, prompts, **controls):
    """``prompts`` (None: none, e.g. with ``messages``) and each control; a list value (``messages``, ``images``)
    is an input of several elements."""
    out = [tensor(module, "prompt", prompts)] if prompts is not None else []
    kinds = {"max_tokens": np.int64, "temperature": np.float32, "top_k": np.int64, "seed": np.int64,
             "repetition_penalty": np.float32,
             "exclude_input_in_output": bool}
    for name, value in controls.items():
        out.append(tensor(module, name, value if isinstance(value, list) else [value], kinds.get(name)))
    return out


def http_infer(server, model, prompts, **controls):
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=300)
    try:
        result = client.infer(model, inputs(httpclient, prompts, **controls))
        return {n: result.as_numpy(n) for n in ("text_output", "finish_reason", "output_tokens")}
    finally:
        client.close()


def generate(server, model, body, stream=False):
    path = "generate_stream" if stream else "generate"
    req = urllib.request.Request(f"http://{server.http_url}/v2/models/{model}/{path}", data=json.dumps(body).encode())
    with urllib.request.urlopen(req, timeout=300) as resp:
        raw = resp.read().decode()
    if not stream:
        return json.loads(raw)
    return [json.loads(line[5:]) for line in raw.splitlines() if line.startswith("data:")]


class Stream:
    """One gRPC stream; collects every response (and error) per request id."""

    def __init__(self, server):
        self.client = grpcclient.InferenceServerClient(server.grpc_url)
        self.events: queue.Queue = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.events.put((result, error)))

    def send(self, model, prompts, request_id, **controls):
        self.client.async_stream_infer(model, inputs(grpcclient, prompts, **controls), request_id=request_id,
                                       enable_empty_final_response=True)

    def collect(self, count=1, timeout=300):
        """Until ``count`` final responses: {request id: [(texts, final, error)]}."""
        got: dict[str, list] = {}
        finals = 0
        while finals < count:
            result, error = self.events.get(timeout=timeout)
            if error is not None:
                got.setdefault("error", []).append((None, True, str(error)))
                finals += 1
                continue
            response = result.get_response()
            final = response.parameters["triton_final_response"].bool_param
            texts = result.as_numpy("text_output")
            item = ([t.decode() for t in texts] if texts is not None else None, final, None)
            got.setdefault(response.id, []).append(item)
            finals += final
        return got

    def close(self, cancel=False):
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


def joined(responses):
    texts = [r[0] for r in responses if r[0] is not None]
    return ["".join(t[i] for t in texts) for i in range(len(texts[0]))]
