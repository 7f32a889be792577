"""``tt_models.server.images`` alone: what decodes (the bytes decide the format, not the URL's media type), and the
limits at their edges. The routes' refusals are in ``test_image_errors.py``."""

from __future__ import annotations

import asyncio
import io
from urllib.parse import quote_from_bytes

import pytest
from PIL import Image

from tests.server.image_cases import JPEG, PNG, data_url
from tt_models.server.images import MAX_IMAGE_PIXELS, decode_image, load_image


def test_data_urls_decode_by_their_bytes():
    png = asyncio.run(load_image(data_url(PNG)))
    assert png.mode == "RGB" and png.tobytes() == Image.open(io.BytesIO(PNG)).convert("RGB").tobytes()
    mislabelled = asyncio.run(load_image(data_url(JPEG, "image/png")))  # JPEG bytes said to be PNG
    assert mislabelled.tobytes() == Image.open(io.BytesIO(JPEG)).convert("RGB").tobytes()
    percent_encoded = asyncio.run(load_image(f"data:image/png,{quote_from_bytes(PNG)}"))  # RFC 2397 without base64
    assert percent_encoded.tobytes() == png.tobytes()


def test_palette_and_alpha_images_come_out_rgb():
    for mode in ("P", "RGBA", "L"):
        buffer = io.BytesIO()
        Image.new(mode, (3, 2)).save(buffer, format="PNG")
        image = decode_image(buffer.getvalue(), "a test")
        assert image.mode == "RGB" and image.size == (3, 2)


def test_the_pixel_limit_is_inclusive():
    buffer = io.BytesIO()
    Image.new("1", (4096, MAX_IMAGE_PIXELS // 4096)).save(buffer, format="PNG")
    assert decode_image(buffer.getvalue(), "a test").size == (4096, 4096)


def test_pils_own_bomb_check_reads_as_the_pixel_limit(monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # PIL refuses over twice this at open
    with pytest.raises(ValueError, match=f"has more than {MAX_IMAGE_PIXELS} pixels"):
        decode_image(PNG, "a test")
