"""Images into the front: chat ``image_url`` parts and Responses ``input_image`` parts, sent upstream as the bundled
backend's ``images`` input beside the ``messages``; every rule a request's images must keep (a fetch only from an
allowed host at a public address, also after a redirect; bytes, pixels, count, decodable) a 400 naming the field;
and the real ``openai`` SDK and LangChain sending an image (the fake upstream, the fetch served by a mock transport)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from typing import Any

import httpx
import pytest
from fake_upstream import FakeUpstream, answer, client, error, image_info
from PIL import Image

from console.front.media import Fetcher, MediaRules

CHAT, RESPONSES = "/v1/chat/completions", "/v1/responses"
MODEL = "vlm"


def png(width: int = 8, height: int = 8) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


def data_url(image: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(image).decode()


def chat(*urls: str, model: str = MODEL) -> dict[str, Any]:
    parts = [{"type": "text", "text": "What is in the picture?"},
             *({"type": "image_url", "image_url": {"url": u}} for u in urls)]
    return {"model": model, "messages": [{"role": "user", "content": parts}], "max_tokens": 4}


class Web:
    """A resolver and a transport in place of DNS and the Internet: ``names`` host -> addresses, ``pages`` (host,
    path) -> a response; ``asked`` the requests the transport got."""

    def __init__(self, names: dict[str, list[str]], pages: dict[tuple[str, str], httpx.Response]) -> None:
        self.names, self.pages = names, pages
        self.asked: list[httpx.Request] = []

    async def resolve(self, host: str, port: int) -> list[str]:
        if host not in self.names:
            raise OSError("name not known")
        return self.names[host]

    def serve(self, request: httpx.Request) -> httpx.Response:
        self.asked.append(request)
        return self.pages.get((request.headers["host"], request.url.path), httpx.Response(404))

    def fetcher(self) -> Fetcher:
        return Fetcher(self.resolve, httpx.MockTransport(self.serve))


PUBLIC = "93.184.215.14"
ALLOWED = MediaRules(allowed_domains=("images.example", "cdn.example"))


def send(upstream: FakeUpstream, *bodies: tuple[str, dict[str, Any]], web: Web | None = None,
         rules: MediaRules = ALLOWED) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        fetcher = (web or Web({}, {})).fetcher()
        async with client(upstream, media=rules, fetcher=fetcher) as http:
            return [await http.post(path, json=body) for path, body in bodies]

    return asyncio.run(run())


def test_a_data_url_image_goes_upstream_with_the_messages_and_usage_counts_the_models_tokens() -> None:
    upstream = FakeUpstream(image_info(MODEL))
    upstream.enqueue(answer("A red", " square", finish="stop", input_tokens=70))
    image = png()
    [response] = send(upstream, (CHAT, chat(data_url(image))))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["choices"][0]["message"]["content"] == "A red square"
    assert body["usage"] == {"prompt_tokens": 70, "completion_tokens": 2, "total_tokens": 72}
    sent = upstream.sent[0]
    assert sent.params.images == (image,) and sent.params.chats
    assert json.loads(sent.prompts[0]) == [{"role": "user", "content": [
        {"type": "text", "text": "What is in the picture?"}, {"type": "image"}]}]


def test_a_model_that_takes_no_images_is_a_400_before_anything_is_sent() -> None:
    upstream = FakeUpstream()  # smollm2: the bundled text interface
    [response] = send(upstream, (CHAT, chat(data_url(png()), model="smollm2")))
    assert error(response)[:2] == (400, "messages")
    assert "takes no images" in response.json()["error"]["message"]
    assert upstream.sent == []


@pytest.mark.parametrize("image, rules, says", [
    (png() + bytes(200), MediaRules(max_bytes=200), "bytes"),
    (png(64, 64), MediaRules(max_pixels=32 * 32), "64x64 pixels"),
    (b"\x89PNG\r\n\x1a\n not an image", MediaRules(), "cannot be decoded"),
], ids=["oversize", "over-the-pixels", "undecodable"])
def test_an_image_over_a_limit_or_undecodable_is_a_400_and_the_front_serves_on(image: bytes, rules: MediaRules,
                                                                               says: str) -> None:
    upstream = FakeUpstream(image_info(MODEL))
    refused, served = send(upstream, (CHAT, chat(data_url(image))), (CHAT, chat(data_url(png(4, 4)))), rules=rules)
    assert error(refused)[:2] == (400, "messages")
    assert says in refused.json()["error"]["message"]
    assert served.status_code == 200 and len(upstream.sent) == 1


def test_more_images_than_a_request_may_bring_is_a_400() -> None:
    upstream = FakeUpstream(image_info(MODEL))
    [response] = send(upstream, (CHAT, chat(*[data_url(png())] * 3)), rules=MediaRules(max_images=2))
    assert error(response)[:2] == (400, "messages")
    assert "3 images, over the 2" in response.json()["error"]["message"]
    assert upstream.sent == []


def test_an_allowed_public_image_is_fetched_from_the_checked_address() -> None:
    image = png()
    web = Web({"images.example": [PUBLIC]}, {("images.example", "/cat.png"): httpx.Response(200, content=image)})
    upstream = FakeUpstream(image_info(MODEL))
    [response] = send(upstream, (CHAT, chat("https://images.example/cat.png")), web=web)
    assert response.status_code == 200, response.text
    assert upstream.sent[0].params.images == (image,)
    [asked] = web.asked
    assert asked.url.host == PUBLIC and asked.headers["host"] == "images.example"
    assert asked.extensions["sni_hostname"] == "images.example"


def test_a_host_the_allowed_domains_do_not_name_is_not_fetched() -> None:
    web = Web({"elsewhere.example": [PUBLIC]}, {})
    [response] = send(FakeUpstream(image_info(MODEL)), (CHAT, chat("https://elsewhere.example/a.png")), web=web)
    assert error(response)[:2] == (400, "messages")
    assert "--allowed-media-domains" in response.json()["error"]["message"] and web.asked == []


@pytest.mark.parametrize("address", ["10.0.0.5", "127.0.0.1", "169.254.169.254", "::1", "::ffff:192.168.1.4"])
def test_an_allowed_host_at_a_private_address_is_refused(address: str) -> None:
    web = Web({"images.example": [PUBLIC, address]}, {})
    [response] = send(FakeUpstream(image_info(MODEL)), (CHAT, chat("http://images.example/a.png")), web=web)
    assert error(response)[:2] == (400, "messages")
    assert "not a public address" in response.json()["error"]["message"] and web.asked == []


def test_a_redirect_to_a_private_address_is_refused() -> None:
    moved = httpx.Response(302, headers={"location": "http://cdn.example/secret"})
    web = Web({"images.example": [PUBLIC], "cdn.example": ["10.1.2.3"]}, {("images.example", "/a.png"): moved})
    upstream = FakeUpstream(image_info(MODEL))
    [response] = send(upstream, (CHAT, chat("http://images.example/a.png")), web=web)
    assert error(response)[:2] == (400, "messages")
    assert "cdn.example resolves to 10.1.2.3" in response.json()["error"]["message"]
    assert [r.url.path for r in web.asked] == ["/a.png"] and upstream.sent == []


def test_an_image_fetched_over_the_byte_limit_is_refused_while_read() -> None:
    web = Web({"images.example": [PUBLIC]}, {("images.example", "/big.png"): httpx.Response(200, content=png(64, 64))})
    [response] = send(FakeUpstream(image_info(MODEL)), (CHAT, chat("http://images.example/big.png")), web=web,
                      rules=MediaRules(allowed_domains=("images.example",), max_bytes=64))
    assert error(response)[:2] == (400, "messages")


def test_a_responses_input_image_goes_upstream_and_its_refusals_name_input() -> None:
    upstream = FakeUpstream(image_info(MODEL))
    image = png()
    item = {"role": "user", "content": [{"type": "input_text", "text": "Describe it."},
                                        {"type": "input_image", "image_url": data_url(image)}]}
    served, refused = send(upstream, (RESPONSES, {"model": MODEL, "input": [item]}),
                           (RESPONSES, {"model": MODEL, "input": [{**item, "content": [
                               {"type": "input_image", "image_url": "data:image/png;base64,@@"}]}]}))
    assert served.status_code == 200, served.text
    assert served.json()["usage"]["input_tokens"] == 3
    assert upstream.sent[0].params.images == (image,)
    assert error(refused)[:2] == (400, "input")


def test_the_openai_sdk_and_langchain_send_an_image() -> None:
    import openai
    from langchain_core.messages import HumanMessage
    from langchain_openai import ChatOpenAI

    upstream = FakeUpstream(image_info(MODEL))
    image = png()
    parts: list[Any] = [{"type": "text", "text": "What colour?"},
                        {"type": "image_url", "image_url": {"url": data_url(image)}}]

    async def run() -> tuple[str, str]:
        async with client(upstream) as http:
            sdk = openai.AsyncOpenAI(base_url="http://front/v1", api_key="none", http_client=http, max_retries=0)
            done = await sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": parts}])
            llm = ChatOpenAI(model=MODEL, base_url="http://front/v1", api_key="none", http_async_client=http,
                             max_retries=0)
            said = await llm.ainvoke([HumanMessage(content=parts)])
            return done.choices[0].message.content or "", str(said.content)

    assert asyncio.run(run()) == ("Hello world", "Hello world")
    assert [s.params.images for s in upstream.sent] == [(image,), (image,)]
