"""The page map: made from the sanitized text, bounded, and kept in step by sanitize (no OCR needed)."""

from __future__ import annotations

import io
import unittest

from bastion_agent.core.layout import Layout, read_jsonl
from bastion_agent.sanitizing import pages
from bastion_agent.sanitizing.pages import PAGE_BREAK, page_map, where
from bastion_agent.sanitizing.scanner import Finding, Sanitizer, replace_findings
from bastion_agent.sanitizing.settings import SanitizeSettings, parse_settings
from bastion_agent.testing.testsupport import TempFolder, run_cli, write_manifest

try:
    import pypdf
except ImportError:
    pypdf = None


class PageMapTests(unittest.TestCase):
    def test_each_page_starts_after_its_form_feed_and_says_whether_ocr_read_it(self):
        text = PAGE_BREAK.join(["typed first page", "scanned second page", "typed third"])
        entries = page_map(text, [2])
        self.assertEqual([entry[1:] for entry in entries], [[1, False], [2, True], [3, False]])
        for start, number, _ in entries:
            self.assertEqual(text[start:].split("\f")[0].strip(), text.split("\f")[number - 1].strip())

    def test_blank_pages_keep_their_number_but_get_no_entry(self):
        text = PAGE_BREAK.join(["one", "", "  \n ", "four"])
        self.assertEqual([entry[1] for entry in page_map(text, [])], [1, 4])

    def test_where_gives_the_page_of_a_position_and_nothing_without_a_map(self):
        text = PAGE_BREAK.join(["alpha words", "beta words"])
        entries = page_map(text, [2])
        self.assertEqual(where(entries, 0), pages.Where(False, 1))
        self.assertEqual(where(entries, text.index("beta")), pages.Where(True, 2))
        self.assertEqual(where(entries, len(text)), pages.Where(True, 2))
        self.assertEqual(where(None, 5), pages.Where(False, None))
        self.assertEqual(where([], 5), pages.Where(False, None))
        for forged in ({"a": 1}, [[0, 1]], [["x", 1, True], [0, 2, True]], [None], "[[0, 1, true]]"):
            self.assertEqual(where(forged, 5), pages.Where(False, None), forged)

    def test_a_window_starting_before_the_first_page_with_text_is_on_that_page(self):
        text = PAGE_BREAK.join(["", "", "third page is the first with words"])
        self.assertEqual(where(page_map(text, [3]), 0), pages.Where(True, 3))

    def test_garbage_in_the_flags_is_ignored(self):
        self.assertEqual(page_map("one" + PAGE_BREAK + "two", [True, "2", None, 2.0, 1])[0][2], True)
        self.assertEqual([entry[2] for entry in page_map("one" + PAGE_BREAK + "two", [True, "2"])], [False, False])


class HostilePageMapTests(unittest.TestCase):
    def test_thousands_of_blank_pages_give_a_short_map(self):
        text = PAGE_BREAK * 4_000 + "the only words, on the last page"
        entries = page_map(text, [4_001])
        self.assertEqual(entries, [[text.rindex("\f") + 1, 4_001, True]])

    def test_more_page_breaks_than_any_document_has_give_one_entry_without_numbers(self):
        text = "x\f" * (pages.MAX_PAGES + 10)
        self.assertEqual(page_map(text, list(range(1, 3))), [[0, None, True]])
        self.assertEqual(where(page_map(text, []), 9), pages.Where(False, None))

    def test_offsets_are_in_the_sanitized_text_not_the_raw_one(self):
        raw = PAGE_BREAK.join(["Card 4111 1111 1111 1111 paid the rent", "second page words"])
        sanitizer = Sanitizer(SanitizeSettings())
        clean, counts = sanitizer.redact(raw)
        self.assertTrue(counts, "the card number was not found")
        (second,) = [entry for entry in page_map(clean, []) if entry[1] == 2]
        self.assertEqual(clean[second[0]:].lstrip(), "second page words")
        self.assertNotEqual(second[0], raw.index("\f") + 1)  # the raw offset would tell the redacted length


class SanitizeKeepsPageBreaksTests(unittest.TestCase):
    def test_a_finding_across_a_page_break_keeps_the_break(self):
        text = "before SECRET-ONE\n\f\nSECRET-TWO after"
        start, end = text.index("SECRET-ONE"), text.index(" after")
        clean, _ = replace_findings(text, [Finding(start, end, 0, "test")])
        self.assertEqual(clean.count("\f"), 1)
        self.assertEqual(clean, "before [REDACTED:test]\f after")

    def test_a_custom_rule_that_spans_pages_removes_the_words_but_not_the_pages(self):
        settings = parse_settings({"rules": [{"id": "ticket", "pattern": r"TICKET\s+\w+\s+\w+"}]})
        text = PAGE_BREAK.join(["page one ends with TICKET", "alpha bravo on page two", "page three"])
        clean, counts = Sanitizer(settings).redact(text)
        self.assertEqual(counts["ticket"], 1)
        self.assertNotIn("alpha", clean)
        self.assertEqual(clean.count("\f"), 2)
        self.assertEqual([entry[1] for entry in page_map(clean, [])], [1, 2, 3])


@unittest.skipUnless(pypdf is not None, "pip install 'bastion-agent[pdf]' to run the PDF page tests")
class StagePageMapTests(TempFolder, unittest.TestCase):
    """Extract then sanitize through the CLI, OCR off (these pages have text layers or none)."""

    def sanitize(self, pdf: bytes) -> tuple[dict, str, str]:
        tmp = self.make_tmp()
        manifest = write_manifest(tmp, extra="")
        text = manifest.read_text().replace('root = "docs"', 'root = "docs"\nocr = false')
        manifest.write_text(text)
        (tmp / "docs" / "file.pdf").write_bytes(pdf)
        for stage in ("extract", "sanitize"):
            code, _, err = run_cli(stage, manifest, "--out", tmp / "out", "--quiet")
            self.assertEqual(code, 0, err)
        layout = Layout(tmp / "out")
        (row,) = read_jsonl(layout.sanitized_listing)
        (raw_path,) = [path for path in layout.extract_dir.glob("*.txt")]
        clean = layout.doc_text_path(layout.sanitized_dir, row["doc"]).read_text(encoding="utf-8")
        return row, clean, raw_path.read_text(encoding="utf-8")

    def test_the_map_of_a_pdf_holds_offsets_of_the_sanitized_text_never_raw_ones(self):
        from bastion_agent.testing.pdf_files import build_pdf

        row, clean, raw = self.sanitize(build_pdf(["Mail margaret.hollis@northbarn-farm.co.uk today", "second page words"]))
        self.assertEqual([entry[1:] for entry in row["pages"]], [[1, False], [2, False]])
        start = row["pages"][1][0]
        self.assertEqual(clean[start:].lstrip(), "second page words")
        self.assertNotEqual(start, raw.index("\f") + 1)
        self.assertNotIn("northbarn", clean)

    def test_a_pdf_of_thousands_of_blank_pages_has_a_map_of_one_entry(self):
        writer = pypdf.PdfWriter()
        for _ in range(2_999):
            writer.add_blank_page(612, 792)
        from bastion_agent.testing.pdf_files import build_pdf

        writer.append(pypdf.PdfReader(io.BytesIO(build_pdf(["the last page has words"]))))
        buffer = io.BytesIO()
        writer.write(buffer)
        row, clean, _ = self.sanitize(buffer.getvalue())
        self.assertEqual(row["pages"], [[clean.rindex("\f") + 1, 3_000, False]])


class ForgedListingTests(TempFolder, unittest.TestCase):
    def test_embed_keeps_only_well_formed_bounded_maps_of_this_sweeps_documents(self):
        from bastion_agent.core.layout import write_jsonl
        from bastion_agent.embedding.embed_stage import current_pages
        from bastion_agent.testing.testsupport import write_sanitized_store

        layout = Layout(self.make_tmp() / "out")
        texts = {f"document number {n}": [f"d{n}.pdf"] for n in range(6)}
        ids = write_sanitized_store(layout, texts)
        docs = [ids[text] for text in texts]
        forged = {docs[0]: [[0, 1, True]], docs[1]: [[0, 1, False]] * (pages.MAX_PAGES + 1),
                  docs[2]: [[0, "1", True]], docs[3]: "[[0, 1, true]]", docs[4]: [[0, 1, 1]], docs[5]: [[0, None, True]]}
        rows = [{"doc": doc, "paths": [], "kind": "pdf", "pages": forged[doc]} for doc in docs]
        write_jsonl(layout.sanitized_listing, rows)
        kept = dict(current_pages(layout, set(docs) - {docs[5]}))
        self.assertEqual(kept, {docs[0]: "[[0,1,true]]"})  # too long, wrong types, a string, not this sweep's: out


if __name__ == "__main__":
    unittest.main()
