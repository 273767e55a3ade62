"""``POST /v1/embeddings`` on a fake upstream (vectors: :func:`fake_server.fake_vector`), driven by plain HTTP, the
``openai`` SDK and LangChain; :class:`~console.front.upstream.TritonUpstream`'s batching on a fake gRPC client.
(Served: e2e/test_embedding_served.py.)"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import httpx
import numpy as np
import pytest
from fake_server import bundled_info, embedding_info, fake_vector
from fake_upstream import FakeUpstream, call, client, error, post
from tritonclient.grpc import aio
from tritonclient.utils import InferenceServerException

from console.clients import ModelInfo, Refused, Tensor
from console.front.app import create_app
from console.front.errors import from_client_error
from console.front.state import Front
from console.front.upstream import TritonUpstream

PATH = "/v1/embeddings"


def embed(body: dict[str, Any], *models: ModelInfo) -> httpx.Response:
    return post(FakeUpstream(*(models or (embedding_info(),))), PATH, {"model": "minilm", **body})


def vectors(response: httpx.Response) -> list[list[float]]:
    assert response.status_code == 200, response.text
    return [d["embedding"] for d in response.json()["data"]]


def foreign_info() -> ModelInfo:
    """Another server's embedding model: one STRING input, one FP32 output, nothing else known."""
    return ModelInfo("e5", False, None, inputs=(Tensor("INPUT0", "BYTES", (1,)),),
                     outputs=(Tensor("OUTPUT0", "FP32", (-1,)),), max_batch_size=8)


def test_a_string_gets_one_vector_in_openais_shape_with_usage() -> None:
    body = embed({"input": "hello world"}).json()
    assert body["object"] == "list" and body["model"] == "minilm"
    assert [(d["object"], d["index"]) for d in body["data"]] == [("embedding", 0)]
    assert body["data"][0]["embedding"] == pytest.approx(fake_vector("hello world"))
    assert body["usage"] == {"prompt_tokens": 2, "total_tokens": 2}


def test_a_list_of_strings_is_one_upstream_call_answered_in_order() -> None:
    upstream = FakeUpstream(embedding_info())
    texts = ["a b", "cc", "ddd eee fff"]
    got = vectors(post(upstream, PATH, {"model": "minilm", "input": texts}))
    assert upstream.embedded == [texts]
    assert got == [pytest.approx(fake_vector(t)) for t in texts]


@pytest.mark.parametrize("given", [[5, 6, 7], [[5, 6, 7], [1]]])
def test_token_ids_are_sent_as_ids_and_counted(given: list[Any]) -> None:
    upstream = FakeUpstream(embedding_info())
    response = post(upstream, PATH, {"model": "minilm", "input": given})
    items = given if isinstance(given[0], list) else [given]
    assert upstream.embedded == [items] and vectors(response) == [pytest.approx(fake_vector(i)) for i in items]
    assert response.json()["usage"]["prompt_tokens"] == sum(map(len, items))


def test_base64_is_each_vectors_little_endian_float32_bytes() -> None:
    data = embed({"input": ["ab", "cd"], "encoding_format": "base64"}).json()["data"]
    decoded = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4").tolist() for d in data]
    assert decoded == [pytest.approx(fake_vector(t)) for t in ("ab", "cd")]


def test_dimensions_a_model_allows_cuts_and_normalises_again() -> None:
    got = vectors(embed({"input": "hello", "dimensions": 4}))[0]
    part = np.array(fake_vector("hello")[:4])
    assert got == pytest.approx((part / np.linalg.norm(part)).tolist()) and len(got) == 4


def test_dimensions_the_model_does_not_allow_is_a_400_naming_it_before_any_call() -> None:
    upstream = FakeUpstream(embedding_info(sizes="8"))
    response = post(upstream, PATH, {"model": "minilm", "input": "x", "dimensions": 4})
    assert error(response) == (400, "dimensions", None) and "(8)" in response.json()["error"]["message"]
    assert upstream.embedded == []


@pytest.mark.parametrize(("body", "param"), [
    ({"input": []}, "input"), ({"input": ["x"] * 2049}, "input"), ({"input": ["x"] * 10_000}, "input"),
    ({"input": ""}, "input"), ({"input": ["a", [1, 2]]}, "input"), ({"input": [[]]}, "input"),
    ({"input": "x", "encoding_format": "binary"}, "encoding_format"), ({"input": "x", "dimensions": 0}, "dimensions"),
    ({"input": "x", "dimensions": "8"}, "dimensions"), ({"input": "x", "truncate": True}, "truncate"),
    ({"input": [list(range(17))]}, "input")])
def test_bad_input_is_a_400_naming_the_field_and_the_server_keeps_serving(body: dict[str, Any], param: str) -> None:
    upstream = FakeUpstream(embedding_info(max_seq_len=16))

    async def both() -> tuple[httpx.Response, httpx.Response]:
        async with client(upstream) as http:
            bad = await http.post(PATH, json={"model": "minilm", **body})
            return bad, await http.post(PATH, json={"model": "minilm", "input": "still here"})

    bad, good = asyncio.run(both())
    assert error(bad) == (400, param, None)
    assert upstream.embedded == [["still here"]] and vectors(good) == [pytest.approx(fake_vector("still here"))]


def test_the_models_own_refusal_of_a_long_text_is_a_400_naming_input() -> None:
    upstream = FakeUpstream(embedding_info())
    upstream.refusal = from_client_error(Refused("input 1 has 40 tokens, over max_seq_len 16"), "input")
    response = post(upstream, PATH, {"model": "minilm", "input": ["short", "long " * 40]})
    assert error(response) == (400, "input", None) and "input 1 has 40 tokens" in response.json()["error"]["message"]


def test_a_text_model_is_a_400_naming_model() -> None:
    response = post(FakeUpstream(bundled_info("smollm2")), PATH, {"model": "smollm2", "input": "x"})
    assert error(response) == (400, "model", None) and "embedding model" in response.json()["error"]["message"]


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_text_routes_refuse_an_embedding_model_naming_model(path: str) -> None:
    body = {"model": "minilm", "prompt": "x", "messages": [{"role": "user", "content": "x"}]}
    body.pop("messages" if path == "/v1/completions" else "prompt")
    response = post(FakeUpstream(embedding_info()), path, body)
    assert error(response) == (400, "model", None) and "embedding model" in response.json()["error"]["message"]


def test_the_one_served_embedding_model_is_taken_when_none_is_named() -> None:
    assert post(FakeUpstream(embedding_info()), PATH, {"input": "x"}).json()["model"] == "minilm"


def test_a_foreign_embedding_model_is_served_and_listed() -> None:
    upstream = FakeUpstream(foreign_info())
    response = post(upstream, PATH, {"model": "e5", "input": ["a", "b"]})
    assert vectors(response) == [pytest.approx(fake_vector(t)) for t in ("a", "b")]
    assert response.json()["usage"] == {"prompt_tokens": None, "total_tokens": None}  # no counts, no tokenizer
    assert error(post(upstream, PATH, {"model": "e5", "input": [1, 2]})) == (400, "input", None)  # texts only
    assert error(post(upstream, PATH, {"model": "e5", "input": "a", "dimensions": 4})) == (400, "dimensions", None)
    assert [m["id"] for m in call(upstream, "GET", "/v1/models").json()["data"]] == ["e5"]


def test_an_embedding_models_card_has_its_length_and_no_controls() -> None:
    card = call(FakeUpstream(embedding_info(max_seq_len=256)), "GET", "/v1/models/minilm").json()
    assert card["max_model_len"] == 256 and card["controls"] == []


# --------------------------------------------------------------------------- real clients, on the fake upstream


def sdk_app(upstream: FakeUpstream) -> Any:
    return create_app(Front(upstream))


def test_the_openai_sdk_embeddings_create_reads_our_answer() -> None:
    import openai

    texts = [f"text number {i}" for i in range(16)]

    async def run() -> Any:
        app = sdk_app(FakeUpstream(embedding_info()))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://front/v1") as http:
            sdk = openai.AsyncOpenAI(base_url="http://front/v1", api_key="none", http_client=http, max_retries=0)
            default = await sdk.embeddings.create(model="minilm", input=texts)  # the SDK asks for base64
            floats = await sdk.embeddings.create(model="minilm", input="one", encoding_format="float")
            return default, floats

    default, floats = asyncio.run(run())
    assert [d.embedding for d in default.data] == [pytest.approx(fake_vector(t)) for t in texts]
    assert default.usage.prompt_tokens == 48 and floats.data[0].embedding == pytest.approx(fake_vector("one"))


def test_langchains_openai_embeddings_reads_our_answer() -> None:
    from langchain_openai import OpenAIEmbeddings

    async def run() -> tuple[list[list[float]], list[float]]:
        app = sdk_app(FakeUpstream(embedding_info()))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://front/v1") as http:
            lc = OpenAIEmbeddings(model="minilm", base_url="http://front/v1", api_key="none",  # type: ignore[arg-type]
                                  http_async_client=http, check_embedding_ctx_length=False, max_retries=0)
            return await lc.aembed_documents(["alpha", "beta"]), await lc.aembed_query("gamma")

    documents, query = asyncio.run(run())
    assert documents == [pytest.approx(fake_vector(t)) for t in ("alpha", "beta")]
    assert query == pytest.approx(fake_vector("gamma"))


# --------------------------------------------------------------------------- TritonUpstream, on a fake gRPC client


class FakeResult:
    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays

    def as_numpy(self, name: str) -> np.ndarray | None:
        return self.arrays.get(name)


class FakeGrpc:
    """What TritonUpstream calls of ``aio.InferenceServerClient`` for embeddings: each ``infer``'s inputs kept."""

    def __init__(self, refuse: str | None = None) -> None:
        self.requests: list[tuple[str, list[int], list[str]]] = []
        self.refuse = refuse

    async def infer(self, model: str, inputs: list[aio.InferInput], outputs: Any, client_timeout: Any) -> FakeResult:
        (given,) = inputs
        self.requests.append((given.name(), given.shape(), [o.name() for o in outputs]))
        if self.refuse:
            raise InferenceServerException(self.refuse, status="StatusCode.INVALID_ARGUMENT")
        rows = given.shape()[0]
        return FakeResult({"embedding": np.arange(rows * 2, dtype=np.float32).reshape(rows, 2),
                           "input_tokens": np.full((rows, 1), 3, dtype=np.int32)})


def upstream_embed(grpc: FakeGrpc, items: list[Any]) -> Any:
    upstream = TritonUpstream("127.0.0.1:1")
    upstream._client = grpc  # type: ignore[assignment]
    return asyncio.run(upstream.embed(embedding_info(batch=4), items, 10))


def test_triton_upstream_sends_one_request_per_model_batch_and_keeps_order() -> None:
    grpc = FakeGrpc()
    got, counts = upstream_embed(grpc, [f"t{i}" for i in range(10)])
    assert [(name, shape) for name, shape, _ in grpc.requests] == [("text", [4, 1]), ("text", [4, 1]),
                                                                     ("text", [2, 1])]
    assert grpc.requests[0][2] == ["embedding", "input_tokens"]
    assert got.shape == (10, 2) and counts == [3] * 10
    assert upstream_embed(FakeGrpc(), [[1, 2]])[0].shape == (1, 2)


def test_triton_upstream_sends_token_ids_as_json_rows() -> None:
    grpc = FakeGrpc()
    upstream_embed(grpc, [[1, 2], [3]])
    assert grpc.requests[0][:2] == ("token_ids", [2, 1])


def test_triton_upstream_turns_the_models_refusal_into_a_400_naming_input() -> None:
    with pytest.raises(Exception) as caught:
        upstream_embed(FakeGrpc(refuse="input 0 has 600 tokens, over max_seq_len 512"), ["long"])
    assert (caught.value.status, caught.value.param) == (400, "input")  # type: ignore[attr-defined]
    assert "600 tokens" in str(caught.value)
