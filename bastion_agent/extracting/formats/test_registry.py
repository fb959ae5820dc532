"""The format registry: every format states how the byte-level scan covers it, and the tables agree."""

from __future__ import annotations

import codecs
import dataclasses
import unittest
from unittest import mock

from bastion_agent.extracting import readers, reading
from bastion_agent.extracting.formats import registry
from bastion_agent.extracting.formats.base import plain_decoding


def utf16(text: str) -> bytes:
    return codecs.BOM_UTF16_LE + text.encode("utf-16-le")


# One document per format that decodes text, whose decoded reading differs
# from the plain one the scan makes: a format added without one fails below.
SAMPLES = {
    "text": utf16("Caf\u00e9 MARKER notes"),
    "markdown": utf16("# Caf\u00e9\n\nMARKER notes"),
    "csv": utf16("name,place\nMARKER,caf\u00e9\n"),
    "json": utf16('{"note": "MARKER caf\u00e9"}'),
    "xml": utf16("<note>MARKER caf\u00e9</note>"),
    "html": b'<html><head><meta charset="windows-1251"></head><body><main><p>MARKER \xc0\xc1\xc2 notes</p>'
            b"</main></body></html>",
    "eml": b"From: a@example.org\nSubject: notes\nContent-Type: text/plain; charset=windows-1251\n\n"
           b"MARKER \xc0\xc1\xc2 notes\n",
    "rtf": rb"{\rtf1\ansi\ansicpg1251 MARKER \'c0\'c1 notes}",
    "troff": utf16(".TH NOTES 1\n.SH NAME\nMARKER caf\u00e9 notes\n"),
}


class RegistryTests(unittest.TestCase):
    def test_every_format_says_how_the_byte_level_scan_covers_it(self):
        for fmt in registry.FORMATS:
            with self.subTest(fmt.kind):
                if fmt.reader is None:
                    continue  # never opened, so never decoded
                self.assertNotEqual(fmt.decodes_text, bool(fmt.not_text_because),
                                    "decodes text (and is scanned) or says why its bytes are not text")
                if fmt.whole_view is not None:
                    self.assertTrue(fmt.decodes_text, "only a decoded text has a whole view to scan")

    def test_every_format_that_decodes_text_has_a_sample_here(self):
        self.assertEqual(set(SAMPLES), {fmt.kind for fmt in registry.FORMATS if fmt.decodes_text})

    def test_a_reader_of_text_reads_again_under_plain_decoding(self):
        # The scan's second reading must show the bytes as they are: a reader that decoded
        # on its own (json.loads on the bytes, say) would give the scan the same text twice.
        for kind, data in SAMPLES.items():
            with self.subTest(kind):
                decoded = readers.read(kind, data).text
                with plain_decoding():
                    plain = readers.read(kind, data).text
                self.assertIn("MARKER", decoded)
                self.assertIn("MARKER", plain)
                self.assertNotEqual(decoded, plain)

    def test_the_scan_reads_exactly_the_formats_that_decode_text(self):
        self.assertEqual(reading.QUARANTINE_KINDS, set(SAMPLES))
        self.assertEqual(reading.hidden_findings(b"PK\x03\x04 123-45-6789", "", None, "docx"), [])

    def test_kinds_and_suffixes_are_each_registered_once(self):
        kinds = [fmt.kind for fmt in registry.FORMATS]
        self.assertEqual(len(kinds), len(set(kinds)))
        suffixes = [suffix for fmt in registry.FORMATS for suffix in fmt.suffixes]
        self.assertEqual(len(suffixes), len(set(suffixes)), "a suffix names one format")
        for suffix in suffixes:
            self.assertRegex(suffix, r"^\.[a-z0-9]+$")

    def test_tables_come_from_the_records(self):
        self.assertEqual(readers.kind_for("notes.MD", b""), "markdown")
        self.assertEqual(readers.kind_for("scan.tiff", b""), "tiff")
        self.assertEqual(readers.kind_for("song.mp3", b""), "binary")
        self.assertEqual(readers.kind_for("ls.1", b""), "troff")
        self.assertEqual(readers.kind_for("report.txt", b"%PDF-1.7"), "pdf")
        self.assertEqual(readers.kind_for("NEWS.md.gz", b""), "markdown.gz")
        self.assertIn("html.xz", readers.KINDS)
        self.assertNotIn("binary", readers.KINDS)

    def test_bumping_one_formats_version_rereads_that_format_only(self):
        before = {kind: readers.version(kind) for kind in readers.KINDS}
        html = dataclasses.replace(registry.READABLE["html"], version="main2")
        with mock.patch.dict(registry.READABLE, {"html": html}):
            after = {kind: readers.version(kind) for kind in readers.KINDS}
        changed = sorted(kind for kind in before if before[kind] != after[kind])
        self.assertEqual(changed, ["html", "html.bz2", "html.gz", "html.xz"])
        self.assertEqual(after["html.gz"], after["html"] + "+gz-" + readers.COMPRESSED_VERSION)

    def test_a_format_without_a_revision_has_the_shared_decoding_version(self):
        self.assertEqual(readers.version("csv"), registry.DECODING_VERSION)
        self.assertEqual(readers.version("troff"), registry.DECODING_VERSION + "+troff1")
        self.assertIsNone(readers.version("binary"))


if __name__ == "__main__":
    unittest.main()
