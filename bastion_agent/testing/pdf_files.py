"""PDFs assembled byte by byte: one page per text, or a page that only draws an image (a scan without OCR)."""

from __future__ import annotations

import zlib

from bastion_agent.testing.testsupport import pdf_file


def build_pdf(pages: list[str | None]) -> bytes:
    """A PDF with one page per item: its text, or None for a page that only draws an image."""
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    first_page = 3
    font = first_page + 2 * len(pages)
    image = font + 1
    kids = " ".join(f"{first_page + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    for index, text in enumerate(pages):
        content = (f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET" if text is not None
                   else "q 100 0 0 100 72 600 cm /Im1 Do Q").encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 {font} 0 R >> "
            f"/XObject << /Im1 {image} 0 R >> >> /Contents {first_page + 2 * index + 1} 0 R >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    pixels = zlib.compress(bytes([128]) * 4)
    objects.append(b"<< /Type /XObject /Subtype /Image /Width 2 /Height 2 /ColorSpace /DeviceGray "
                   b"/BitsPerComponent 8 /Filter /FlateDecode /Length %d >>\nstream\n%s\nendstream" % (len(pixels), pixels))
    return pdf_file(objects)
