"""Tests of PDF extraction (the optional ``pdf`` extra) and of the stage with and without it.

Every PDF here is written by the test itself: a minimal text PDF assembled
byte by byte, a two-page one, an image-only one, encrypted ones (by pypdf's
writer) and a truncated one.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import random
import unittest
from unittest import mock

from bastion_agent.core.layout import Layout
from bastion_agent.extracting import extract, pdf, readers
from bastion_agent.testing.folders import TempCase, make_manifest
from bastion_agent.testing.pdf_files import build_pdf

try:
    import pypdf
except ImportError:  # the extra is optional; CI installs it
    pypdf = None

needs_pypdf = unittest.skipUnless(pypdf is not None, "pip install 'bastion-agent[pdf]' to run the PDF tests")


def encrypt(data: bytes, user_password: str, algorithm: str = "RC4-128") -> bytes:
    """``data`` encrypted by pypdf's writer (RC4 needs no other package)."""
    writer = pypdf.PdfWriter(clone_from=io.BytesIO(data))
    writer.encrypt(user_password=user_password, owner_password="owner-secret", algorithm=algorithm)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def has_crypto() -> bool:
    try:
        import cryptography  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def without_pypdf():
    """Behave as if the extra were not installed."""
    with mock.patch.object(pdf, "_pypdf", return_value=None):
        yield


class ReadPdfTests(unittest.TestCase):
    @needs_pypdf
    def test_minimal_text_pdf(self):
        self.assertEqual(pdf.read_pdf(build_pdf(["Quarterly revenue grew"])).text, "Quarterly revenue grew")

    @needs_pypdf
    def test_pages_are_separated_by_a_form_feed_on_a_line_of_its_own(self):
        # a line-based rule sees a blank line between pages; the page map counts the form feeds
        self.assertEqual(pdf.read_pdf(build_pdf(["first page words", "second page words"])).text,
                         "first page words\n\f\nsecond page words")

    @needs_pypdf
    def test_encrypted_with_a_user_password(self):
        self.assertEqual(pdf.read_pdf(encrypt(build_pdf(["hidden"]), "user-secret")).reason, "encrypted")

    @needs_pypdf
    def test_encrypted_with_an_empty_user_password_is_read(self):
        self.assertEqual(pdf.read_pdf(encrypt(build_pdf(["open to all"]), "")).text, "open to all")

    @needs_pypdf
    @unittest.skipUnless(has_crypto(), "AES needs the cryptography package (part of the pdf extra)")
    def test_aes_with_an_empty_user_password_is_read(self):
        self.assertEqual(pdf.read_pdf(encrypt(build_pdf(["aes text"]), "", "AES-256")).text, "aes text")

    @needs_pypdf
    def test_image_only_pdf_has_no_text_layer(self):
        self.assertEqual(pdf.read_pdf(build_pdf([None, None])).reason, "no text layer")

    @needs_pypdf
    def test_a_page_without_text_among_others_keeps_its_place_so_pages_keep_their_numbers(self):
        self.assertEqual(pdf.read_pdf(build_pdf(["one", None, "three"])).text, "one\n\f\n\n\f\nthree")

    @needs_pypdf
    def test_a_form_feed_inside_a_page_is_no_page_break(self):
        reading = pdf.read_pdf(build_pdf(["before\fafter", "next"]))
        self.assertEqual(reading.text.count("\f"), 1, reading.text)

    @needs_pypdf
    def test_truncated_and_garbage_are_damaged(self):
        data = build_pdf(["cut short"])
        for cut in (len(data) // 2, len(data) - 30):
            with self.subTest(cut=cut):
                self.assertEqual(pdf.read_pdf(data[:cut]).reason, "damaged: truncated")
        self.assertEqual(pdf.read_pdf(b"%PDF-1.7\nnothing else").reason, "damaged: truncated")

    def test_a_damage_is_said_in_our_words_never_in_the_files(self):
        planted = "Zq" + "".join(random.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(12))
        quoting = ValueError(f"Invalid Elementary Object starting with b'{planted}'")
        self.assertEqual(pdf.damaged(quoting, 0, 0), "damaged: ValueError")
        self.assertEqual(pdf.damaged(ValueError("Stream has ended unexpectedly"), 3, 7), "damaged: truncated (3 of 7 pages read)")
        self.assertEqual(pdf.damaged(RecursionError(), 0, 2), "damaged: too deeply nested")

    @needs_pypdf
    def test_page_limit(self):
        with mock.patch.object(pdf, "MAX_PAGES", 2):
            self.assertEqual(pdf.read_pdf(build_pdf(["a", "b", "c"])).reason, "too many pages")

    @needs_pypdf
    def test_text_limit(self):
        with mock.patch.object(pdf, "MAX_TEXT_CHARS", 5):
            self.assertEqual(pdf.read_pdf(build_pdf(["more than five"])).reason, "too large unpacked")

    @needs_pypdf
    def test_time_limit_between_pages(self):
        ticks = itertools.count(step=10.0)  # every look at the clock is ten seconds later
        reading = pdf.read_pdf(build_pdf(["a", "b"]), max_seconds=15.0, clock=lambda: next(ticks))
        self.assertEqual(reading.reason, "timed out")

    @needs_pypdf
    def test_deterministic(self):
        data = build_pdf(["same bytes", "same text"])
        self.assertEqual(pdf.read_pdf(data), pdf.read_pdf(data))

    def test_without_the_extra(self):
        with without_pypdf():
            self.assertEqual(pdf.read_pdf(build_pdf(["x"])).reason,
                             "pdf support not installed (pip install 'bastion-agent[pdf]')")
            self.assertIsNone(pdf.version())

    def test_kind_is_found_by_magic_too(self):
        self.assertEqual(readers.kind_for("scan-without-extension", b"%PDF-1.4"), "pdf")
        self.assertEqual(readers.kind_for("a.PDF", b""), "pdf")


class PdfStageTests(TempCase):
    def fill(self) -> None:
        self.put("contracts/lease.pdf", build_pdf(["Lease agreement", "Signed by both parties"]))
        self.put("scans/scan.pdf", build_pdf([None]))
        self.put("broken/cut.pdf", build_pdf(["cut"])[:200])
        self.put("notes.txt", "plain notes")

    def test_same_folder_without_the_extra(self):
        self.fill()
        stderr = io.StringIO()
        with without_pypdf(), contextlib.redirect_stderr(stderr):
            summary = extract.run(make_manifest(self.root), self.layout)
        reason = "pdf support not installed (pip install 'bastion-agent[pdf]')"
        self.assertEqual(summary["skipped_by_reason"], {reason: 3})
        self.assertEqual(summary["by_kind"]["pdf"], {"files": 3, "extracted": 0, "skipped": 3})
        self.assertNotIn("pdf", summary["readers"])
        self.assertEqual(stderr.getvalue().count(reason), 1)  # said once per run, not once per file
        rows = self.listing()
        self.assertIsNotNone(rows["contracts/lease.pdf"]["key"])
        self.assertEqual(rows["notes.txt"]["status"], "extracted")

    @needs_pypdf
    def test_same_folder_with_the_extra(self):
        self.fill()
        summary = self.run_stage()
        self.assertEqual(self.text_of("contracts/lease.pdf"), "Lease agreement\n\f\nSigned by both parties")
        self.assertEqual(summary["skipped_by_reason"], {"damaged: truncated": 1, "no text layer": 1})
        self.assertEqual(summary["by_kind"]["pdf"]["extracted"], 1)
        self.assertIn("pdf", summary["readers"])

    @needs_pypdf
    def test_text_made_with_the_extra_goes_when_the_extra_goes(self):
        self.fill()
        self.run_stage()
        doc = self.listing()["contracts/lease.pdf"]["key"]
        stored = Layout.doc_text_path(self.layout.extract_dir, doc)
        self.assertTrue(stored.exists())
        with without_pypdf():
            self.run_stage()
        self.assertFalse(stored.exists())  # a fresh run without the extra would not have it
        self.assertEqual(self.figures()["removed"], 1)

    @needs_pypdf
    def test_reused_pdf_text_is_identical(self):
        self.fill()
        self.run_stage()
        first = self.text_of("contracts/lease.pdf")
        self.run_stage()
        self.assertEqual(self.figures()["reused"], 2)  # the PDF and notes.txt
        self.assertEqual(self.text_of("contracts/lease.pdf"), first)

    @needs_pypdf
    def test_report_shows_why_pdfs_were_skipped(self):
        self.fill()
        self.run_stage()
        out = io.StringIO()
        extract.print_report(self.layout, out)
        lines = out.getvalue().splitlines()
        self.assertTrue(any(line.split() == ["scans/", "1", "0", "1", "no", "text", "layer", "1"] for line in lines), lines)
        self.assertTrue(any(line.split()[:4] == ["pdf", "3", "1", "2"] for line in lines), lines)


if __name__ == "__main__":
    unittest.main()
