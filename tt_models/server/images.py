"""The images of chat requests: an OpenAI ``image_url`` (a ``data:`` URL or an ``http(s)://`` URL) to an RGB
PIL image, within limits.

Every failure is the client's (its URL, its bytes) and raises ValueError naming it, which the routes answer
with 400. The limits hold before the work they bound: a download stops at ``MAX_IMAGE_BYTES`` or
``FETCH_TIMEOUT_S``, and the pixel count is read from the image header before anything is decoded, so a
small file that would decode to gigabytes (a decompression bomb) is refused cheaply.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
from urllib.parse import unquote_to_bytes, urlsplit

import httpx
from PIL import Image, UnidentifiedImageError
from starlette.concurrency import run_in_threadpool

MAX_IMAGE_BYTES = 20 * 2**20  # OpenAI's per-image limit
MAX_IMAGE_PIXELS = 4096 * 4096
FETCH_TIMEOUT_S = 10.0  # the whole download, connection included


async def load_image(url: str) -> Image.Image:
    """The RGB image ``url`` holds or points to; raises ValueError naming what is wrong with it."""
    scheme = urlsplit(url).scheme.lower()
    if scheme == "data":
        return await run_in_threadpool(_decode_data_url, url)
    if scheme in ("http", "https"):
        data = await fetch(url)
        return await run_in_threadpool(decode_image, data, url)
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


async def fetch(url: str) -> bytes:
    """The body of a GET of ``url``, refused past ``MAX_IMAGE_BYTES`` or ``FETCH_TIMEOUT_S``."""
    try:
        return await asyncio.wait_for(_download(url), FETCH_TIMEOUT_S)
    except asyncio.TimeoutError:
        raise ValueError(f"The image at {url} did not arrive within {FETCH_TIMEOUT_S:g} s") from None
    except httpx.HTTPError as error:
        raise ValueError(f"Could not fetch the image at {url}: {type(error).__name__}: {error}") from error


async def _download(url: str) -> bytes:
    async with httpx.AsyncClient(follow_redirects=True, timeout=FETCH_TIMEOUT_S) as client:
        async with client.stream("GET", url) as response:
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
