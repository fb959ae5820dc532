"""OCR of scans (extra ``ocr`` and Debian's ``tesseract-ocr``), with the real Tesseract.

Every scan is made here: text drawn with DejaVu Sans by Pillow, saved as a
PNG, a JPEG with EXIF and XMP, a two-page TIFF, an image-only PDF; the
hostile files (a 10,000 x 10,000 PNG, a decompression-bomb TIFF, a PDF of
2,000 scanned pages, a PDF page whose image is 1.6 GB decoded) are written
byte by byte, small on disk.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import struct
import unittest
import zlib
from pathlib import Path
from unittest import mock

from bastion_agent.core.budget import REASON_PIXELS
from bastion_agent.core.layout import Layout
from bastion_agent.extracting.formats import ocr
from bastion_agent.testing.folders import TempCase, bytes_outside_extract
from bastion_agent.testing.scans import FONT, IBAN, IBAN_DIGITS, Image, encoded, page
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import clean_env, pdf_file, run_cli, write_manifest

try:
    import pypdf
    import pypdfium2
except ImportError:
    pypdf = pypdfium2 = None

needs_tesseract = unittest.skipUnless(shutil.which("tesseract"), "tesseract not installed")
needs_pillow = unittest.skipUnless(Image is not None and os.path.exists(FONT),
                                   "pip install 'bastion-agent[ocr]' and fonts-dejavu-core to run the OCR tests")
needs_pdf = unittest.skipUnless(pypdf is not None and pypdfium2 is not None,
                                "pip install 'bastion-agent[pdf,ocr]' to run the scanned-PDF tests")

def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def huge_png(width: int, height: int) -> bytes:
    """A PNG whose header says ``width`` x ``height``: a few hundred bytes that would decode to gigabytes."""
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(b"\x00" * 4096))
            + _chunk(b"IEND", b""))


def bomb_tiff(width: int, height: int) -> bytes:
    """A little-endian TIFF of one deflated strip claiming ``width`` x ``height`` grey pixels."""
    strip = zlib.compress(b"\xff" * 65536, 9)
    entries = [(256, 4, 1, width), (257, 4, 1, height), (258, 3, 1, 8), (259, 3, 1, 8), (262, 3, 1, 1),
               (273, 4, 1, 0), (277, 3, 1, 1), (278, 4, 1, height), (279, 4, 1, len(strip))]
    ifd_size = 2 + 12 * len(entries) + 4
    strip_at = 8 + ifd_size
    body = struct.pack("<H", len(entries))
    for tag, kind, count, value in entries:
        value = strip_at if tag == 273 else value
        body += struct.pack("<HHI", tag, kind, count) + (struct.pack("<HH", value, 0) if kind == 3 else struct.pack("<I", value))
    return b"II*\x00" + struct.pack("<I", 8) + body + struct.pack("<I", 0) + strip


def pdf_of_image(width: int, height: int) -> bytes:
    """A one-page PDF that draws one grey image of ``width`` x ``height`` (a few bytes of Flate)."""
    pixels = zlib.compress(b"\x80" * 1024)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /XObject << /Im1 5 0 R >> >> "
        b"/Contents 4 0 R >>",
        b"<< /Length 31 >>\nstream\nq 612 0 0 792 0 0 cm /Im1 Do Q\nendstream",
        b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceGray /BitsPerComponent 8 "
        b"/Filter /FlateDecode /Length %d >>\nstream\n%s\nendstream" % (width, height, len(pixels), pixels),
    ]
    return pdf_file(objects)


def blank_pdf(pages: int) -> bytes:
    writer = pypdf.PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(612, 792)
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


@needs_tesseract
@needs_pillow
class ScanReadingTests(TempCase):
    def test_a_scanned_page_is_read_and_its_text_stored_raw_in_extract(self):
        self.put("payslip.png", encoded(page("The quarterly payroll was approved.", f"IBAN {IBAN}"), "PNG"))
        summary = self.run_stage()
        self.assertEqual(summary["extracted"], 1)
        text = self.text_of("payslip.png")
        self.assertIn("quarterly payroll", text)
        self.assertIn(IBAN_DIGITS, text.replace(" ", ""))  # raw, in the extract store only
        self.assertEqual(self.listing()["payslip.png"]["kind"], "png")

    def test_a_tiff_of_two_pages_gives_both(self):
        first, second = page("First page speaks of apples."), page("Second page speaks of lemons.")
        self.put("two.tiff", encoded(first, "TIFF", save_all=True, append_images=[second], compression="tiff_deflate"))
        self.run_stage()
        text = self.text_of("two.tiff")
        self.assertIn("apples", text)
        self.assertIn("lemons", text)
        self.assertLess(text.index("apples"), text.index("lemons"))

    def test_image_metadata_is_never_read(self):
        image = page("A receipt for garden tools.")
        exif = Image.Exif()
        exif[0x013B] = "Zebulon Quickfinch"  # Artist
        exif[0x0131] = "Xylophonic Scanner 9"  # Software
        exif.get_ifd(0x8769)[0xA430] = "Zebulon Quickfinch"  # CameraOwnerName
        exif.get_ifd(0x8825).update({1: "N", 2: (47.0, 13.0, 29.87), 3: "E", 4: (8.0, 31.0, 44.61)})  # GPS
        xmp = (b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
               b'<rdf:Description xmlns:dc="http://purl.org/dc/elements/1.1/" dc:creator="Quentin Vexmoor"/>'
               b'</rdf:RDF></x:xmpmeta>')
        data = encoded(image, "JPEG", exif=exif.tobytes(), xmp=xmp, quality=92)
        self.assertIn(b"Zebulon", data)
        self.put("photo.jpg", data)
        self.run_stage()
        text = self.text_of("photo.jpg")
        self.assertIn("garden tools", text)
        for planted in ("Zebulon", "Quickfinch", "Xylophonic", "Vexmoor", "29.87", "44.61", "47/1"):
            self.assertNotIn(planted, text)

    @needs_pdf
    def test_an_image_only_pdf_of_three_pages_is_read_page_by_page(self):
        pages = [page(f"Chapter {word} begins here.") for word in ("alpha", "bravo", "charlie")]
        self.put("scan.pdf", encoded(pages[0], "PDF", save_all=True, append_images=pages[1:], resolution=200))
        self.run_stage()
        text = self.text_of("scan.pdf")
        for word in ("alpha", "bravo", "charlie"):
            self.assertIn(word, text)
        self.assertEqual([part.strip().split()[1] for part in text.split("\f")], ["alpha", "bravo", "charlie"])
        self.assertEqual(self.listing()["scan.pdf"]["ocr_pages"], [1, 2, 3])

    @needs_pdf
    def test_a_page_with_a_text_layer_keeps_it_and_only_the_scanned_page_is_recognised(self):
        from bastion_agent.testing.pdf_files import build_pdf

        writer = pypdf.PdfWriter()
        writer.append(pypdf.PdfReader(io.BytesIO(build_pdf(["Typed text layer Qwxzy"]))))
        writer.append(pypdf.PdfReader(io.BytesIO(encoded(page("Scanned annex about pensions."), "PDF", resolution=200))))
        buffer = io.BytesIO()
        writer.write(buffer)
        self.put("mixed.pdf", buffer.getvalue())
        self.run_stage()
        text = self.text_of("mixed.pdf")
        self.assertTrue(text.startswith("Typed text layer Qwxzy"), text)  # the layer's exact text, not OCR's
        self.assertIn("pensions", text)

    def test_a_second_sweep_of_an_unchanged_scan_does_no_ocr(self):
        self.put("scan.png", encoded(page("Nothing changes in this letter."), "PNG"))
        self.run_stage()
        real = ocr.recognise
        with mock.patch.object(ocr, "recognise", side_effect=AssertionError("OCR ran again")):
            summary = self.run_stage()  # the worker is another process: its call would show as damaged
        self.assertIs(ocr.recognise, real)
        self.assertEqual((self.figures()["reused"], summary["extracted"], summary["skipped"]), (1, 1, 0))
        self.assertEqual(self.listing()["scan.png"]["ocr_pages"], [1])  # a reused text still says OCR read it

    def test_ocr_off_and_a_language_choice_come_from_the_manifest(self):
        self.put("scan.png", encoded(page("Die Kündigung wurde am Montag zugestellt."), "PNG"))
        self.put("note.txt", "plain text\n")
        summary = self.run_stage(ocr=False)
        self.assertEqual(self.listing()["scan.png"]["reason"], ocr.REASON_OFF)
        self.assertEqual(summary["unread_for_ocr"], 0)  # a choice, not a missing tool
        self.run_stage(ocr_languages=("deu",))
        self.assertIn("Kündigung", self.text_of("scan.png"))
        self.assertIn("+deu+", self.run_stage(ocr_languages=("deu",))["readers"]["png"] + "+")


@needs_tesseract
@needs_pillow
class HostileScanTests(TempCase):
    """Each costs its file (``too_costly``) and the rest of the sweep is read."""

    def test_hostile_scans_cost_their_file_only(self):
        self.put("huge.png", huge_png(10_000, 10_000))
        self.put("bomb.tiff", bomb_tiff(60_000, 60_000))
        self.put("fine.png", encoded(page("The ordinary letter survives."), "PNG"))
        self.put("note.txt", "an ordinary note\n")
        if pypdf is not None and pypdfium2 is not None:
            self.put("thousands.pdf", blank_pdf(2_000))
            self.put("gigabyte.pdf", pdf_of_image(40_000, 40_000))
        summary = self.run_stage()
        listing = self.listing()
        hostile = ["huge.png", "bomb.tiff"] + (["thousands.pdf", "gigabyte.pdf"] if pypdf is not None else [])
        for name in hostile:
            self.assertTrue(listing[name]["reason"].startswith("too_costly"), listing[name])
        self.assertEqual(listing["huge.png"]["reason"], REASON_PIXELS)
        self.assertIn("ordinary letter", self.text_of("fine.png"))
        self.assertEqual(self.text_of("note.txt"), "an ordinary note\n")
        self.assertEqual(summary["extracted"], 2)


@needs_pillow
class WithoutTesseractTests(TempCase):
    def test_scans_are_counted_as_unread_for_want_of_ocr(self):
        self.put("scan.png", encoded(page("Unread without Tesseract."), "PNG"))
        self.put("note.txt", "still read\n")
        empty = self.base / "bin"
        empty.mkdir()
        self.addCleanup(ocr.tesseract.cache_clear)
        self.addCleanup(ocr.installed_languages.cache_clear)
        ocr.tesseract.cache_clear()
        ocr.installed_languages.cache_clear()
        with mock.patch.dict(os.environ, {"PATH": str(empty)}):
            summary = self.run_stage()
        reason = self.listing()["scan.png"]["reason"]
        self.assertEqual(reason, "needs OCR: Tesseract is not installed "
                                 "(Debian: apt-get install tesseract-ocr tesseract-ocr-eng)")
        self.assertNotIn("pip install", reason, "Pillow is installed: the extra is not what is missing")
        self.assertEqual(summary["unread_for_ocr"], 1)
        self.assertEqual(self.text_of("note.txt"), "still read\n")

    def test_the_hint_names_only_the_part_that_is_missing(self):
        real_optional = ocr.optional
        without_pillow = lambda name: None if name in ("PIL", "pypdfium2") else real_optional(name)  # noqa: E731
        self.addCleanup(ocr.tesseract.cache_clear)
        self.addCleanup(ocr.installed_languages.cache_clear)
        with mock.patch.object(ocr, "tesseract", return_value="/usr/bin/tesseract"), \
                mock.patch.object(ocr, "installed_languages", return_value=("eng",)), \
                mock.patch.object(ocr, "optional", without_pillow):
            only_extra = ocr.not_installed(pdf=True)
        with mock.patch.object(ocr, "tesseract", return_value="/usr/bin/tesseract"), \
                mock.patch.object(ocr, "installed_languages", return_value=()):
            no_language = ocr.not_installed()
        self.assertEqual(only_extra, "needs OCR: Pillow and pypdfium2 missing (pip install 'bastion-agent[ocr]')")
        self.assertEqual(no_language, "needs OCR: Tesseract has no language pack (Debian: apt-get install tesseract-ocr-eng)")


@needs_tesseract
@needs_pillow
class ScanSweepTests(unittest.TestCase):
    def test_a_scanned_iban_is_searchable_by_its_words_and_in_no_byte_outside_extract(self):
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp)
            manifest = write_manifest(base, size=32, overlap=4)
            (base / "docs" / "payslip.png").write_bytes(
                encoded(page("Payslip for November: overtime was paid.", f"IBAN {IBAN}"), "PNG"))
            with StubServer(dim=64) as stub, clean_env(EMBED_URL=stub.url):
                code, _, err = run_cli("sweep", manifest, "--quiet")
                self.assertEqual(code, 0, err)
                code, out, err = run_cli("search", manifest, "overtime payslip", "--json", "--mode", "keyword")
            self.assertEqual(code, 0, err)
            hits = json.loads(out)
            self.assertTrue(hits and "overtime" in hits[0]["text"], hits)
            self.assertEqual(hits[0]["paths"], ["payslip.png"])
            self.assertNotIn(IBAN_DIGITS, hits[0]["text"].replace(" ", ""))
            outside = bytes_outside_extract(base / ".bastion")
            for needle in (IBAN_DIGITS, IBAN, "0532 0130", "05320130"):
                self.assertNotIn(needle.encode(), outside)
            for request in stub.requests:
                self.assertNotIn(IBAN_DIGITS, json.dumps(request).replace(" ", ""))


class ManifestTests(unittest.TestCase):
    def test_bad_ocr_keys_are_refused_by_name(self):
        import tempfile

        from bastion_agent.config.manifest import load as load_manifest
        from bastion_agent.core.errors import ManifestError

        for extra, key in (('ocr = "yes"', "ocr"), ("ocr_languages = []", "ocr_languages"),
                           ('ocr_languages = ["eng; rm"]', "ocr_languages")):
            with tempfile.TemporaryDirectory() as tmp, self.subTest(extra):
                path = write_manifest(Path(tmp))
                text = path.read_text().replace('root = "docs"', f'root = "docs"\n{extra}')
                path.write_text(text)
                with self.assertRaises(ManifestError) as caught:
                    load_manifest(path)
                self.assertIn(key, str(caught.exception))


if __name__ == "__main__":
    unittest.main()
