"""The images of chat requests: an OpenAI ``image_url`` (a ``data:`` URL, an ``http(s)://`` URL or, where the
server allows it, a ``file://`` URL) to an RGB PIL image, within limits and the server's ``MediaPolicy``.

Every failure is the client's (its URL, its bytes) and raises ValueError naming it, which the routes answer
with 400. The limits hold before the work they bound: a download stops at ``MAX_IMAGE_BYTES`` or
``FETCH_TIMEOUT_S``, and the pixel count is read from the image header before anything is decoded, so a
small file that would decode to gigabytes (a decompression bomb) is refused cheaply. A download connects only to
addresses the policy checked, and follows redirects itself, each hop checked.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
from pathlib import Path
from urllib.parse import unquote_to_bytes, urlsplit

import httpx
from PIL import Image, UnidentifiedImageError
from starlette.concurrency import run_in_threadpool

from tt_models.server.media_policy import MediaPolicy, MediaRefused

MAX_IMAGE_BYTES = 20 * 2**20  # OpenAI's per-image limit
MAX_IMAGE_PIXELS = 4096 * 4096
FETCH_TIMEOUT_S = 10.0  # the whole download, connection included


async def load_image(url: str, policy: MediaPolicy = MediaPolicy()) -> Image.Image:
    """The RGB image ``url`` holds or points to; raises ValueError naming what is wrong with it (MediaRefused for
    a URL ``policy`` refuses)."""
    scheme = urlsplit(url).scheme.lower()
    if scheme == "data":
        return await run_in_threadpool(_decode_data_url, url)
    if scheme in ("http", "https"):
        data = await fetch(url, policy)
        return await run_in_threadpool(decode_image, data, url)
    if scheme == "file":
        path = policy.local_file(url)
        return await run_in_threadpool(_decode_file, path, url)
    raise ValueError(f"image_url must be a data: URL or an http(s):// URL, got one starting {url[:16]!r}")


def _decode_data_url(url: str) -> Image.Image:
    return decode_image(data_url_bytes(url), "the data: URL")


def data_url_bytes(url: str) -> bytes:
    """The payload of ``data:[<media type>][;base64],<data>`` (RFC 2397); the media type is not trusted:
    the bytes decide what the image is."""
    header, comma, payload = url[len("data:"):].partition(",")
    if not comma:
        raise ValueError("The image data: URL has no ',' before its data")
    if header.lower().endswith(";base64"):
        try:
            data = base64.b64decode(payload, validate=True)
        except binascii.Error as error:
            raise ValueError(f"The image data: URL is not valid base64: {error}") from error
    else:
        data = unquote_to_bytes(payload)
    _check_size(len(data), "the data: URL")
    return data


def _decode_file(path: Path, url: str) -> Image.Image:
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_IMAGE_BYTES + 1)
    except OSError as error:
        raise ValueError(f"Could not read the image at {url}: {error.strerror}") from None
    _check_size(len(data), url)
    return decode_image(data, url)


async def fetch(url: str, policy: MediaPolicy = MediaPolicy()) -> bytes:
    """The body of a GET of ``url`` as ``policy`` allows it, refused past ``MAX_IMAGE_BYTES`` or
    ``FETCH_TIMEOUT_S``."""
    try:
        return await asyncio.wait_for(_download(url, policy), FETCH_TIMEOUT_S)
    except asyncio.TimeoutError:
        raise ValueError(f"The image at {url} did not arrive within {FETCH_TIMEOUT_S:g} s") from None
    except (httpx.HTTPError, httpx.InvalidURL) as error:  # (InvalidURL: the URL's or a redirect's)
        raise ValueError(f"Could not fetch the image at {url}: {type(error).__name__}: {error}") from error


async def _download(url: str, policy: MediaPolicy) -> bytes:
    # trust_env=False: a proxy from the environment would make the checked connection the proxy's.
    async with httpx.AsyncClient(follow_redirects=False, trust_env=False, timeout=FETCH_TIMEOUT_S) as client:
        target = httpx.URL(url)
        subject = f"image URL host {target.host}"
        for _ in range(policy.max_redirects + 1):
            response = await _get(client, target, await policy.addresses(target.host, _port(target), subject))
            try:
                if not response.is_redirect:
                    return await _body(response, url)
                location = target.join(response.headers["location"])
            finally:
                await response.aclose()
            if location.scheme not in ("http", "https"):
                raise MediaRefused(f"image URL {url} redirects to {location}, not an http(s):// URL")
            target, subject = location, f"image URL {url} redirects to {location}, whose host {location.host}"
    raise MediaRefused(f"image URL {url} redirects more than {policy.max_redirects} times")


async def _get(client: httpx.AsyncClient, url: httpx.URL, addresses: list[str]) -> httpx.Response:
    """A streamed GET of ``url`` connected to the first of ``addresses`` that answers: the request names the
    address, its Host header and TLS (server name and certificate check) the URL's host."""
    headers = {"host": url.netloc.decode("ascii")}
    extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}

    def request(address: str) -> httpx.Request:
        return client.build_request("GET", url.copy_with(host=address), headers=headers, extensions=extensions)

    for address in addresses[:-1]:
        try:
            return await client.send(request(address), stream=True)
        except httpx.ConnectError:
            continue  # another address of the host may answer
    return await client.send(request(addresses[-1]), stream=True)


async def _body(response: httpx.Response, url: str) -> bytes:
    if response.status_code != 200:
        raise ValueError(f"Fetching the image at {url} gave HTTP {response.status_code}")
    declared = response.headers.get("content-length", "")
    if declared.isdigit():
        _check_size(int(declared), url)
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        _check_size(size, url)  # a server may send more than it declared, or declare nothing
        chunks.append(chunk)
    return b"".join(chunks)


def _port(url: httpx.URL) -> int:
    return url.port or (443 if url.scheme == "https" else 80)


def _check_size(size: int, source: str) -> None:
    if size > MAX_IMAGE_BYTES:
        raise ValueError(f"The image from {source} is over the limit of {MAX_IMAGE_BYTES // 2**20} MiB")


def decode_image(data: bytes, source: str) -> Image.Image:
    """``data`` decoded by PIL (any format it reads; the first frame of animations) as RGB."""
    try:
        image = Image.open(io.BytesIO(data))  # reads the header only
    except Image.DecompressionBombError:  # PIL's own, far higher, limit
        raise ValueError(f"The image from {source} has more than {MAX_IMAGE_PIXELS} pixels") from None
    except UnidentifiedImageError:
        raise ValueError(f"Not an image: PIL cannot read the {len(data)} bytes from {source}") from None
    except Exception as error:  # PIL raises many types for a known format's header it cannot parse
        raise ValueError(f"Not an image: PIL cannot read the {len(data)} bytes from {source} "
                         f"({type(error).__name__}: {error})") from None
    with image:
        width, height = image.size
        if width * height > MAX_IMAGE_PIXELS:
            raise ValueError(f"The image from {source} is {width}x{height}, over the limit of {MAX_IMAGE_PIXELS} "
                             "pixels (4096x4096)")
        try:
            return image.convert("RGB")
        except Exception as error:  # a header that opens over data that does not decode (truncated, corrupt)
            raise ValueError(f"Not an image: PIL cannot decode the {len(data)} bytes from {source} "
                             f"({type(error).__name__}: {error})") from None
