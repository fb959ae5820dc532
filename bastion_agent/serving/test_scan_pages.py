"""A hit says where it comes from: its page, and whether OCR read it (real Tesseract, real stages).

One folder is swept once for the whole class: a PDF whose page 1 has a text
layer, page 2 is blank and page 3 is a scan; a TIFF of two scanned pages; a
plain text file. Every front end (``search --json``, serve's ``/search``,
MCP's search and fetch) must say ``ocr: true`` and the page for windows
that start on a scanned page, ``ocr: false`` and the page on a typed page,
and no page at all for a text file.
"""

from __future__ import annotations

import io
import json
import shutil
import tempfile
import unittest
from pathlib import Path

from bastion_agent.config import manifest as manifest_module
from bastion_agent.core.layout import Layout, read_jsonl
from bastion_agent.embedding.endpoint import EndpointConfig
from bastion_agent.sanitizing.sanitized_store import read_sanitized_text
from bastion_agent.serving import serve, serve_settings
from bastion_agent.testing.folders import bytes_outside_extract
from bastion_agent.testing.mcp_session import NEEDS_SDK, SweptFolder
from bastion_agent.testing.scans import FONT, IBAN, IBAN_DIGITS, Image, encoded, page
from bastion_agent.testing.serve_store import request
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import clean_env, run_cli, write_manifest

try:
    import pypdf
    import pypdfium2  # noqa: F401  (renders the scanned page)
except ImportError:
    pypdf = None

# 18 words: with windows of 8 tokens advancing by 6, the window after the third starts on the next page.
TYPED = "harbour lighthouse keeper logs every passing ship in the ledger kept beside the lamp room door each night"
SIZE, OVERLAP = 8, 2


def mixed_pdf() -> bytes:
    """Page 1 typed (a text layer), page 2 blank, page 3 a scan holding a sentence and an IBAN."""
    from bastion_agent.testing.pdf_files import build_pdf

    writer = pypdf.PdfWriter()
    writer.append(pypdf.PdfReader(io.BytesIO(build_pdf([TYPED]))))
    writer.add_blank_page(612, 792)
    scan = page("Scanned annex about pensions.", f"IBAN {IBAN}")
    writer.append(pypdf.PdfReader(io.BytesIO(encoded(scan, "PDF", resolution=200))))
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


@unittest.skipUnless(shutil.which("tesseract"), "tesseract not installed")
@unittest.skipUnless(Image is not None and Path(FONT).exists(), "pip install 'bastion-agent[ocr]' and fonts-dejavu-core")
@unittest.skipUnless(pypdf is not None, "pip install 'bastion-agent[pdf,ocr]' to run the scanned-PDF tests")
class ScanPagesTests(SweptFolder, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.holder = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls.holder.name)
        cls.stub = StubServer(dim=64).__enter__()
        cls.manifest = write_manifest(cls.tmp, size=SIZE, overlap=OVERLAP)
        cls.out = cls.tmp / "out"
        cls.layout = Layout(cls.out)
        docs = cls.tmp / "docs"
        (docs / "mixed.pdf").write_bytes(mixed_pdf())
        first, second = page("First page speaks of apples."), page("Second page speaks of lemons.")
        (docs / "two.tiff").write_bytes(encoded(first, "TIFF", save_all=True, append_images=[second],
                                                compression="tiff_deflate"))
        (docs / "note.txt").write_text("A plain note about the orchard and its quince trees.\n", encoding="utf-8")
        with clean_env(EMBED_URL=cls.stub.url):
            code, _, err = run_cli("sweep", cls.manifest, "--out", cls.out, "--quiet")
        if code != 0:
            raise AssertionError(err)

    @classmethod
    def tearDownClass(cls):
        cls.stub.__exit__(None, None, None)
        cls.holder.cleanup()

    def search(self, query: str) -> list[dict]:
        return self.cli_search(query, 10, "keyword")

    def by_path(self, hits: list[dict], path: str) -> list[dict]:
        return [hit for hit in hits if hit["paths"] == [path]]

    def expected_page(self, hit: dict) -> int:
        """The page a hit must say, from the sanitized text: the one its first visible character is on."""
        text = read_sanitized_text(self.layout, hit["doc"])
        first = hit["start"] + len(hit["text"]) - len(hit["text"].lstrip())
        return text.count("\f", 0, first) + 1

    def assert_where(self, hit: dict, ocr: bool, number: int | None) -> None:
        self.assertEqual((hit["ocr"], hit["page"]), (ocr, number), hit)

    # --- search --json ------------------------------------------------------------------

    def test_a_window_starting_on_the_scanned_page_says_ocr_and_page_3(self):
        hits = self.by_path(self.search("pensions annex"), "mixed.pdf")
        self.assertTrue(hits, "the scanned page was not found")
        on_scan = [hit for hit in hits if self.expected_page(hit) == 3]
        self.assertTrue(on_scan, hits)  # the typed page is 18 tokens: a window starts on the scan
        for hit in on_scan:
            self.assert_where(hit, True, 3)
            self.assertNotIn(IBAN_DIGITS, hit["text"].replace(" ", ""))

    def test_a_window_on_the_typed_page_says_no_ocr_and_page_1(self):
        hits = self.by_path(self.search("lighthouse keeper ledger"), "mixed.pdf")
        self.assertTrue(hits)
        for hit in hits:
            self.assert_where(hit, False, 1)

    def test_a_tiff_counts_its_pages_from_1_and_each_is_ocr(self):
        hits = self.by_path(self.search("apples lemons"), "two.tiff")
        self.assertTrue(hits)
        for hit in hits:
            self.assert_where(hit, True, self.expected_page(hit))
            self.assertIn(hit["page"], (1, 2))

    def test_a_text_file_has_no_page(self):
        hits = self.by_path(self.search("orchard quince"), "note.txt")
        self.assertTrue(hits)
        for hit in hits:
            self.assert_where(hit, False, None)

    def test_every_hit_says_the_page_its_sanitized_text_puts_it_on(self):
        for query in ("pensions", "lighthouse ship", "apples", "lemons", "ledger lamp room", "IBAN annex"):
            for hit in self.search(query):
                if hit["paths"] != ["note.txt"]:
                    with self.subTest(query=query, idx=hit["idx"]):
                        self.assertEqual(hit["page"], self.expected_page(hit))

    def test_the_page_map_holds_sanitized_offsets_and_the_iban_stays_in_extract(self):
        listing = {row["paths"][0]: row for row in read_jsonl(self.layout.sanitized_listing)}
        pdf = listing["mixed.pdf"]
        text = read_sanitized_text(self.layout, pdf["doc"])
        self.assertEqual([entry[1:] for entry in pdf["pages"]], [[1, False], [3, True]])  # the blank page 2: no entry
        self.assertEqual(pdf["pages"][1][0], text.rindex("\f") + 1)  # an offset in the sanitized text
        self.assertIn("[REDACTED:", text[pdf["pages"][1][0]:])
        self.assertNotIn("pages", listing["note.txt"])
        self.assertEqual([entry[1:] for entry in listing["two.tiff"]["pages"]], [[1, True], [2, True]])
        outside = bytes_outside_extract(self.out)
        for needle in (IBAN_DIGITS, IBAN, "0532 0130"):
            self.assertNotIn(needle.encode(), outside)

    def test_the_cli_list_says_a_hit_is_on_a_scanned_page(self):
        with clean_env(EMBED_URL=self.stub.url):
            code, out, err = run_cli("search", self.manifest, "pensions annex", "--out", self.out, "-k", "10",
                                     "--mode", "keyword")
        self.assertEqual((code, err), (0, ""))
        self.assertIn("page 3] (scanned: OCR text, may hold errors)", out)
        self.assertNotIn("\f", out)

    # --- serve -------------------------------------------------------------------------

    def test_serve_answers_the_same_fields_and_its_page_marks_scans(self):
        with clean_env():
            manifest = manifest_module.load(self.manifest)
        server = serve.build_server(manifest, self.layout, serve_settings.ServeSettings(port=0, reload_check_seconds=3600.0),
                                    io.StringIO(), endpoint=EndpointConfig(url=self.stub.url))
        with serve.RunningServer(server) as running:
            status, _, answer = request(running.url, "GET", "/search?q=pensions+annex&mode=keyword&k=10")
            _, _, page_html = request(running.url, "GET", "/")
            _, _, openapi = request(running.url, "GET", "/openapi.json")
        self.assertEqual(status, 200)
        self.assertEqual(answer["hits"], self.search("pensions annex"))
        self.assertTrue(any(hit["ocr"] and hit["page"] == 3 for hit in answer["hits"]), answer["hits"])
        self.assertIn(b"text recognised by OCR, may hold errors", page_html)
        schema = openapi["components"]["schemas"]["Hit"]["properties"]
        self.assertEqual((schema["ocr"]["type"], schema["page"]["type"]), ("boolean", ["integer", "null"]))

    # --- MCP ---------------------------------------------------------------------------

    @NEEDS_SDK
    def test_mcp_search_and_fetch_say_ocr_and_page(self):
        async def body(session):
            self.found = await session.call_tool("search", {"query": "pensions annex", "k": 10, "mode": "keyword"})
            self.typed = await session.call_tool("search", {"query": "lighthouse keeper", "k": 10, "mode": "keyword"})
            tools = (await session.list_tools()).tools
            self.schemas = {tool.name: tool.output_schema for tool in tools}
            hits = self.found.structured_content["hits"]
            scanned = next(hit for hit in hits if hit["ocr"])
            self.fetched = await session.call_tool("fetch", {"chunk_id": scanned["chunk_id"], "neighbours": 0})

        self.serve(body)
        hits = self.found.structured_content["hits"]
        cli = self.search("pensions annex")
        self.assertEqual([(hit["ocr"], hit["page"]) for hit in hits], [(hit["ocr"], hit["page"]) for hit in cli])
        self.assertTrue(any(hit["ocr"] and hit["page"] == 3 for hit in hits), hits)
        typed = [hit for hit in self.typed.structured_content["hits"] if hit["paths"] == ["mixed.pdf"]]
        self.assertTrue(typed and all((hit["ocr"], hit["page"]) == (False, 1) for hit in typed), typed)
        fetched = self.fetched.structured_content
        self.assertEqual((fetched["ocr"], fetched["page"]), (True, 3))
        for name in ("search", "fetch"):
            properties = self.schemas[name]["properties"]
            properties = properties["hits"]["items"]["properties"] if name == "search" else properties
            self.assertEqual(properties["ocr"]["type"], "boolean")
            self.assertEqual(properties["page"]["type"], ["integer", "null"])
        self.assertNotIn(IBAN_DIGITS, self.found.model_dump_json().replace(" ", ""))


if __name__ == "__main__":
    unittest.main()
