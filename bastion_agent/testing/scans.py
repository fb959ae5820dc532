"""Scans drawn for the OCR tests: text in DejaVu Sans on a white page, saved in any format Pillow writes.

Pillow is the optional ``ocr`` extra: without it ``Image`` is None and the
tests that need a scan skip with the reason.
"""

from __future__ import annotations

import io

try:
    from PIL import Image, ImageDraw, ImageFont
except ImportError:
    Image = None

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"

IBAN = "DE89 3704 0044 0532 0130 00"
IBAN_DIGITS = "370400440532013000"


def page(*lines: str, size=(1700, 700)):
    """A white page with ``lines`` in black, 44 px DejaVu Sans (about 12 pt at 260 dpi)."""
    image = Image.new("L", size, 255)
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype(FONT, 44)
    for number, line in enumerate(lines):
        draw.text((80, 80 + 110 * number), line, font=font, fill=0)
    return image


def encoded(image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()
