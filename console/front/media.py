"""Images in requests: the rules the front holds them to (:class:`MediaRules`) and their bytes, from a data URL or
fetched (:class:`Fetcher`).

A data URL is decoded here; an ``http(s)`` URL is fetched only when ``--allowed-media-domains`` names its host, and
only from a public address: the host is resolved here, every address it resolves to must be global (no loopback,
link-local, private or reserved one), and the request goes to the address that was checked (the host name in the
``Host`` header and as TLS's server name), so a second resolution cannot point it elsewhere. A redirect is followed
only to a URL that passes the same checks. The body is read within the byte limit and the whole fetch within the
time limit. Every image must open with PIL within the pixel limit. Each refusal is a 400 naming the field the image
came in.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import ipaddress
import socket
import warnings
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import httpx

from .errors import APIError, bad_request

Resolve = Callable[[str, int], Awaitable[list[str]]]
MB = 1024 * 1024


@dataclass(frozen=True)
class MediaRules:
    """What images a request may bring: the hosts images may be fetched from (none: data URLs only), at most
    ``max_images`` images, each at most ``max_bytes`` encoded and ``max_pixels`` decoded, fetched within
    ``fetch_timeout`` seconds and ``max_redirects`` redirects."""

    allowed_domains: tuple[str, ...] = ()
    max_images: int = 8
    max_bytes: int = 5 * MB
    max_pixels: int = 4096 * 4096
    fetch_timeout: float = 10.0
    max_redirects: int = 3


@dataclass(frozen=True)
class ImageRef:
    """One image part of a request: its URL and where it stands (``message 1 of 2, image 1``)."""

    url: str
    where: str


async def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to."""
    found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(entry[4][0]) for entry in found})


def public(address: str) -> bool:
    """A global unicast address (an IPv4-mapped IPv6 address judged as its IPv4 one)."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def data_url(url: str, rules: MediaRules, where: str, param: str) -> bytes:
    """The bytes of a base64 ``data:image/...`` URL."""
    head, comma, payload = url.partition(",")
    kind = head[5:].split(";")[0]
    if not comma or not head.endswith(";base64") or (kind and not kind.startswith("image/")):
        raise bad_request(f"{where}: a data URL must be data:image/<type>;base64,<data>", param)
    if len(payload) * 3 // 4 > rules.max_bytes + 2:
        raise bad_request(f"{where}: the image is over the {rules.max_bytes} bytes this server takes", param)
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise bad_request(f"{where}: the data URL's data is not base64", param) from None


def check_image(data: bytes, rules: MediaRules, where: str, param: str) -> None:
    """Refuse an image over the byte or pixel limit, or one PIL cannot decode."""
    from PIL import Image

    if len(data) > rules.max_bytes:
        raise bad_request(f"{where}: the image is {len(data)} bytes, over the {rules.max_bytes} this server takes",
                          param)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
                if width * height > rules.max_pixels:
                    raise bad_request(f"{where}: the image is {width}x{height} pixels, over the {rules.max_pixels} "
                                      "this server takes", param)
                image.load()
    except APIError:
        raise
    except Exception as exc:  # PIL's refusals: OSError, SyntaxError, ValueError, DecompressionBomb*
        raise bad_request(f"{where}: the image cannot be decoded ({type(exc).__name__}: {str(exc)[:80]})",
                          param) from None


class Fetcher:
    """Fetches allowed ``http(s)`` images from public addresses. ``resolve`` and ``transport`` are the seams a test
    replaces (the resolver's answers, and a transport that serves the checked addresses)."""

    def __init__(self, resolver: Resolve = resolve, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.resolver, self.transport = resolver, transport

    async def address(self, url: httpx.URL, rules: MediaRules, where: str, param: str) -> str:
        """The checked address to fetch ``url`` from."""
        host = (url.host or "").lower()
        if url.scheme not in ("http", "https") or not host:
            raise bad_request(f"{where}: an image URL must be a data URL or an http(s) URL", param)
        if host not in rules.allowed_domains:
            allowed = ", ".join(rules.allowed_domains) or "none: data URLs only"
            raise bad_request(f"{where}: images are not fetched from {host} (--allowed-media-domains: {allowed})",
                              param)
        try:
            addresses = await self.resolver(host, url.port or (443 if url.scheme == "https" else 80))
        except OSError as exc:
            raise bad_request(f"{where}: {host} does not resolve ({exc})", param) from None
        private = [a for a in addresses if not public(a)]
        if not addresses or private:
            raise bad_request(f"{where}: {host} resolves to {', '.join(private) or 'no address'}, not a public "
                              "address: images are fetched from public addresses only", param)
        return addresses[0]

    async def fetch(self, url: str, rules: MediaRules, where: str, param: str) -> bytes:
        """The image at ``url``, within the rules; a 400 naming ``param`` when it cannot be had."""
        try:
            return await asyncio.wait_for(self._fetch(httpx.URL(url), rules, where, param), rules.fetch_timeout)
        except TimeoutError:
            raise bad_request(f"{where}: the image was not fetched within {rules.fetch_timeout:g} s", param) from None
        except httpx.InvalidURL:
            raise bad_request(f"{where}: the image URL is not a valid URL", param) from None
        except httpx.HTTPError as exc:
            raise bad_request(f"{where}: the image could not be fetched ({type(exc).__name__})", param) from None

    async def _fetch(self, url: httpx.URL, rules: MediaRules, where: str, param: str) -> bytes:
        async with httpx.AsyncClient(transport=self.transport, follow_redirects=False, trust_env=False,
                                     timeout=rules.fetch_timeout) as client:
            for _ in range(rules.max_redirects + 1):
                address = await self.address(url, rules, where, param)
                request = client.build_request(
                    "GET", url.copy_with(host=address), headers={"Host": url.netloc.decode("ascii")},
                    extensions={"sni_hostname": url.host})
                response = await client.send(request, stream=True)
                try:
                    if response.is_redirect:
                        url = url.join(response.headers["location"])
                        continue
                    if response.status_code != 200:
                        raise bad_request(f"{where}: fetching the image got HTTP {response.status_code}", param)
                    return await self._body(response, rules, where, param)
                finally:
                    await response.aclose()
        raise bad_request(f"{where}: the image URL redirects more than {rules.max_redirects} times", param)

    @staticmethod
    async def _body(response: httpx.Response, rules: MediaRules, where: str, param: str) -> bytes:
        over = bad_request(f"{where}: the image is over the {rules.max_bytes} bytes this server takes", param)
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > rules.max_bytes:
            raise over
        data = bytearray()
        async for chunk in response.aiter_bytes():
            data += chunk
            if len(data) > rules.max_bytes:
                raise over
        return bytes(data)


async def load(refs: Sequence[ImageRef], rules: MediaRules, fetcher: Fetcher, param: str) -> list[bytes]:
    """Each image's bytes, checked; a 400 naming ``param`` for the first that breaks a rule."""
    if len(refs) > rules.max_images:
        raise bad_request(f"{len(refs)} images, over the {rules.max_images} one request may bring", param)
    images = []
    for ref in refs:
        if ref.url.startswith("data:"):
            data = data_url(ref.url, rules, ref.where, param)
        else:
            data = await fetcher.fetch(ref.url, rules, ref.where, param)
        await asyncio.to_thread(check_image, data, rules, ref.where, param)
        images.append(data)
    return images
