"""The generated embedded samples as the session's tritonserver serves them."""

from __future__ import annotations

import json
import urllib.request

import pytest
import tritonclient.http as httpclient

from repo_gen.samples import EMBEDDED_SAMPLES, SAMPLES


@pytest.mark.server
def test_embedded_models_config_in_server(embedded_server) -> None:
    client = httpclient.InferenceServerClient(embedded_server.http_url)
    try:
        for name in EMBEDDED_SAMPLES:
            sample = SAMPLES[name]
            config = client.get_model_config(name)
            assert config.get("model_transaction_policy", {}).get("decoupled", False) is sample.decoupled
            prompt = next(i for i in config["input"] if i["name"] == "prompt")
            assert (prompt["data_type"], prompt["dims"]) == ("TYPE_STRING", [-1])
            kv = config["parameters"]["use_kv_cache"]["string_value"]
            assert kv == ("true" if sample.model_type == "kv_cache" else "false")
            assert config["parameters"]["hf_model_name"]["string_value"] == "embedded"
    finally:
        client.close()


@pytest.mark.server
def test_generate_on_smollm2_kv(embedded_server) -> None:
    body = json.dumps({"prompt": "My name is", "id": "42", "max_tokens": 8}).encode()
    request = urllib.request.Request(
        f"http://{embedded_server.http_url}/v2/models/smollm2_kv/generate",
        data=body, headers={"Content-Type": "application/json"}, method="POST",
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        reply = json.loads(response.read())
    text = reply["text_output"]
    text = text[0] if isinstance(text, list) else text
    assert isinstance(text, str) and text.strip()
