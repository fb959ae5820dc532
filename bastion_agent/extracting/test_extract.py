"""Tests of the extract stage: formats, encodings, links, globs, limits, the stores and the report."""

from __future__ import annotations

import codecs
import dataclasses
import hashlib
import io
import json
import os
import stat
import unittest
import zipfile
from unittest import mock

from bastion_agent.core.errors import StoreError
from bastion_agent.core.layout import Layout, figures_path, write_private
from bastion_agent.extracting import extract, readers
from bastion_agent.extracting.formats import registry
from bastion_agent.extracting.formats import office
from bastion_agent.testing.folders import TempCase
from bastion_agent.testing.office_files import docx, para, zipped
from bastion_agent.testing.testsupport import run_cli, write_manifest


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class EncodingTests(unittest.TestCase):
    def read(self, data: bytes, kind: str = "text") -> readers.Reading:
        return readers.read(kind, data)

    def test_each_encoding_decodes_to_the_same_text(self):
        text = "Grüße, naïve café — “quoted” €5\nsecond line\n"
        cases = {
            "utf-8": text.encode("utf-8"),
            "utf-8 with BOM": codecs.BOM_UTF8 + text.encode("utf-8"),
            "utf-16-le with BOM": codecs.BOM_UTF16_LE + text.encode("utf-16-le"),
            "utf-16-be with BOM": codecs.BOM_UTF16_BE + text.encode("utf-16-be"),
            "utf-32-le with BOM": codecs.BOM_UTF32_LE + text.encode("utf-32-le"),
            "utf-32-be with BOM": codecs.BOM_UTF32_BE + text.encode("utf-32-be"),
            "utf-16-le without BOM": text.encode("utf-16-le"),
            "cp1252": text.encode("cp1252"),
        }
        for name, data in cases.items():
            with self.subTest(name):
                self.assertEqual(self.read(data).text, text)

    def test_latin1_bytes_that_cp1252_leaves_undefined(self):
        data = b"caf\xe9 cr\xe8me " * 10 + b"\x81"
        self.assertEqual(self.read(data).text, data.decode("latin-1"))

    def test_newlines_are_normalised(self):
        self.assertEqual(self.read(b"a\r\nb\rc\n").text, "a\nb\nc\n")
        self.assertEqual(self.read(codecs.BOM_UTF16_LE + "x\r\ny".encode("utf-16-le")).text, "x\ny")

    def test_binary_is_refused(self):
        self.assertEqual(self.read(bytes(range(256)) * 4).reason, "binary")
        self.assertEqual(self.read(b"text with a \x00 NUL byte").reason, "binary")
        self.assertEqual(self.read(bytes([1, 2, 3, 4, 5, 6, 7, 8]) * 50 + b"some words").reason, "binary")

    def test_a_few_escape_codes_do_not_make_a_log_binary(self):
        log = b"\x1b[32mINFO\x1b[0m started\n" * 20
        self.assertIsNotNone(self.read(log).text)

    def test_whitespace_only_is_empty(self):
        self.assertEqual(self.read(b" \n\t\n").reason, "empty")


class HtmlTests(unittest.TestCase):
    def test_text_only_without_script_and_style(self):
        page = (b"<!doctype html><html><head><title>Quarterly</title><style>p{color:red}</style>"
                b"<script>var token='abc';</script></head><body><h1>Results</h1><p>Revenue &amp; costs"
                b" &lt;up&gt; &#233;t&eacute;</p><ul><li>one</li><li>two</li></ul>"
                b"<table><tr><td>a</td><td>b</td></tr></table><noscript>enable js</noscript></body></html>")
        text = readers.read("html", page).text
        self.assertEqual(text, "Quarterly\n\nResults\n\nRevenue & costs <up> été\n\none\ntwo\n\na\tb")
        self.assertNotIn("token", text)
        self.assertNotIn("color", text)

    def test_meta_charset_is_honoured(self):
        page = '<html><head><meta charset="windows-1252"></head><body><p>caf\u00e9 \u2013 ok</p></body></html>'
        self.assertEqual(readers.read("html", page.encode("cp1252")).text, "caf\u00e9 \u2013 ok")

    def test_latin1_label_is_read_as_cp1252_like_browsers(self):
        page = '<meta http-equiv="Content-Type" content="text/html; charset=iso-8859-1"><p>\u201cquoted\u201d caf\u00e9</p>'
        self.assertEqual(readers.read("html", page.encode("cp1252")).text, "\u201cquoted\u201d caf\u00e9")

    def test_pre_keeps_its_lines(self):
        self.assertEqual(readers.read("html", b"<pre>a = 1\n  b = 2</pre>").text, "a = 1\n  b = 2")


class OfficeTests(unittest.TestCase):
    def test_docx_paragraphs_tables_and_headers(self):
        body = (para("Hello ", "world") + '<w:p><w:r><w:t>a</w:t><w:tab/><w:t>b</w:t></w:r></w:p>'
                + '<w:p><w:del><w:r><w:delText>deleted words</w:delText></w:r></w:del><w:r><w:t>kept</w:t></w:r></w:p>'
                + "<w:tbl><w:tr><w:tc>" + para("c1") + para("more") + "</w:tc><w:tc>" + para("c2") + "</w:tc></w:tr></w:tbl>")
        header = '<w:hdr xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">' + para("Confidential") + "</w:hdr>"
        text = readers.read("docx", docx(body, {"word/header1.xml": header})).text
        self.assertEqual(text, "Hello world\na\tb\nkept\n\nc1 more\tc2\n\nConfidential")
        self.assertNotIn("deleted", text)

    def test_docx_that_is_not_a_zip_is_damaged(self):
        self.assertEqual(readers.read("docx", b"PK\x03\x04 not really").reason, "damaged")
        self.assertEqual(readers.read("docx", zipped({"other.xml": "<a/>"})).reason, "damaged")

    def test_password_protected_office_file_is_encrypted(self):
        self.assertEqual(readers.read("docx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(512)).reason, "encrypted")

    def test_doctype_is_refused(self):
        bomb = ('<?xml version="1.0"?><!DOCTYPE d [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;">]>'
                '<w:document xmlns:w="x"><w:body><w:p><w:r><w:t>&b;</w:t></w:r></w:p></w:body></w:document>')
        self.assertEqual(readers.read("docx", zipped({"word/document.xml": bomb})).reason, "damaged")

    def test_zip_bomb_limits(self):
        data = docx(para("x" * 5000))
        with mock.patch.object(office, "ZIP_MAX_UNPACKED_BYTES", 1000):
            self.assertEqual(readers.read("docx", data).reason, "too large unpacked")
        many = zipped({f"word/f{i}.xml": "" for i in range(20)} | {"word/document.xml": "<d/>"})
        with mock.patch.object(office, "ZIP_MAX_MEMBERS", 10):
            self.assertEqual(readers.read("docx", many).reason, "too large unpacked")

    def test_a_member_that_lies_about_its_size_is_still_capped(self):
        data = bytearray(docx(para("y" * 50_000)))
        # Rewrite the declared uncompressed size of document.xml to 10 bytes in both headers.
        archive = zipfile.ZipFile(io.BytesIO(bytes(data)))
        info = archive.getinfo("word/document.xml")
        real = info.file_size.to_bytes(4, "little")
        data = bytes(data).replace(real, (10).to_bytes(4, "little"))
        with mock.patch.object(office, "ZIP_MAX_UNPACKED_BYTES", 20_000):
            self.assertIn(readers.read("docx", data).reason, ("too large unpacked", "damaged"))

    def test_odt(self):
        content = ('<office:document-content xmlns:office="o" xmlns:text="t"><office:body><office:text>'
                   '<text:h>Title</text:h><text:p>one<text:s text:c="2"/>two<text:tab/>three</text:p>'
                   '<text:p><text:span>spanned</text:span> text</text:p></office:text></office:body></office:document-content>')
        self.assertEqual(readers.read("odt", zipped({"mimetype": "x", "content.xml": content})).text,
                         "Title\none  two\tthree\nspanned text")

    def test_ods_rows_and_cells(self):
        content = ('<office:document-content xmlns:office="o" xmlns:table="tb" xmlns:text="t"><office:body>'
                   '<office:spreadsheet><table:table><table:table-row><table:table-cell><text:p>name</text:p></table:table-cell>'
                   '<table:table-cell><text:p>two</text:p><text:p>lines</text:p></table:table-cell></table:table-row>'
                   '<table:table-row><table:table-cell><text:p>x</text:p></table:table-cell></table:table-row>'
                   '</table:table></office:spreadsheet></office:body></office:document-content>')
        self.assertEqual(readers.read("ods", zipped({"content.xml": content})).text, "name\ttwo lines\nx")

    def test_pptx_slides_in_numeric_order(self):
        def slide(text):
            return f'<p:sld xmlns:p="p" xmlns:a="a"><a:p><a:r><a:t>{text}</a:t></a:r></a:p></p:sld>'
        data = zipped({"ppt/slides/slide10.xml": slide("ten"), "ppt/slides/slide2.xml": slide("two"),
                       "ppt/slides/slide1.xml": slide("one")})
        self.assertEqual(readers.read("pptx", data).text, "one\n\ntwo\n\nten")

    def test_xlsx_shared_inline_and_numbers(self):
        shared = '<sst xmlns="s"><si><t>Name</t></si><si><r><t>Al</t></r><r><t>ice</t></r></si></sst>'
        sheet = ('<worksheet xmlns="s"><sheetData><row><c t="s"><v>0</v></c><c><v>42</v></c></row>'
                 '<row><c t="s"><v>1</v></c><c t="inlineStr"><is><t>inline</t></is></c><c t="b"><v>1</v></c>'
                 '<c><f>SUM(A1)</f><v>7</v></c></row></sheetData></worksheet>')
        data = zipped({"xl/sharedStrings.xml": shared, "xl/worksheets/sheet1.xml": sheet})
        self.assertEqual(readers.read("xlsx", data).text, "Sheet 1\nName\t42\nAlice\tinline\tTRUE\t7")


class EmailAndRtfTests(unittest.TestCase):
    def test_eml_headers_plain_part_and_attachment(self):
        message = (b"From: Ann <ann@example.org>\r\nTo: bob@example.org\r\nSubject: =?utf-8?q?Caf=C3=A9?= plans\r\n"
                   b"Date: Mon, 1 Jan 2024 10:00:00 +0000\r\nMIME-Version: 1.0\r\n"
                   b'Content-Type: multipart/mixed; boundary="B"\r\n\r\n'
                   b'--B\r\nContent-Type: multipart/alternative; boundary="A"\r\n\r\n'
                   b"--A\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nPlain body\r\n"
                   b"--A\r\nContent-Type: text/html\r\n\r\n<p>HTML body</p>\r\n--A--\r\n"
                   b'--B\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment; filename="q3.pdf"\r\n'
                   b"Content-Transfer-Encoding: base64\r\n\r\nJVBERg==\r\n--B--\r\n")
        text = readers.read("eml", message).text
        self.assertEqual(text, "Subject: Café plans\nFrom: Ann <ann@example.org>\nTo: bob@example.org\n"
                               "Date: Mon, 01 Jan 2024 10:00:00 +0000\n\nPlain body\n\n[attachment: q3.pdf]")
        self.assertNotIn("HTML body", text)

    def test_eml_html_only_is_converted(self):
        message = (b"Subject: s\r\nContent-Type: text/html; charset=latin-1\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n"
                   b"<html><body><p>caf=E9</p><script>x()</script></body></html>\r\n")
        self.assertEqual(readers.read("eml", message).text, "Subject: s\n\ncafé")

    def test_rtf(self):
        rtf = (rb"{\rtf1\ansi\ansicpg1252{\fonttbl{\f0 Arial;}}{\*\generator w;}\f0 Hello \b bold\b0  caf\'e9\par "
               rb"Snowman \u9731?\tab end}")
        self.assertEqual(readers.read("rtf", rtf).text, "Hello bold café\nSnowman \u2603\tend")


class GlobTests(unittest.TestCase):
    def test_patterns(self):
        cases = [
            ("**", "a/b/c.txt", True),
            ("*.pdf", "deep/down/x.pdf", True),
            ("*.pdf", "x.pdf.txt", False),
            ("reports/*.pdf", "reports/q.pdf", True),
            ("reports/*.pdf", "reports/2024/q.pdf", False),
            ("reports/**/*.pdf", "reports/2024/q.pdf", True),
            ("reports/**/*.pdf", "reports/q.pdf", True),
            ("**/.DS_Store", ".DS_Store", True),
            ("**/.DS_Store", "a/b/.DS_Store", True),
            (".git/**", ".git", True),
            (".git/**", ".git/objects/ab", True),
            (".git/**", "x/.git/config", False),
            ("/top.txt", "top.txt", True),
            ("/top.txt", "a/top.txt", False),
            ("build/", "build/out.o", True),
            ("build/", "src/build/out.o", True),
            ("build/", "build.txt", False),
            ("/build/", "src/build/out.o", False),
            ("file?.md", "file1.md", True),
            ("file[0-9].md", "file7.md", True),
            ("file[!0-9].md", "file7.md", False),
            ("*.MD", "a.md", False),
            ("notes[", "notes[", True),
            ("**", "top.txt", True),
            ("a/**/b/", "a/x/b/c.txt", True),
        ]
        for pattern, path, expected in cases:
            with self.subTest(pattern=pattern, path=path):
                self.assertEqual(extract.GlobSet([pattern]).matches(path), expected)


class StageTests(TempCase):
    def test_mixed_folder_rows_summary_and_store(self):
        self.put("a.txt", "alpha\r\n")
        self.put("sub/b.md", "# beta\n")
        self.put("sub/page.html", "<p>gamma</p><script>secret()</script>")
        self.put("sub/report.docx", docx(para("delta")))
        self.put("blob.bin", bytes(range(256)))
        self.put("noext", bytes(range(1, 32)) * 10)
        self.put("empty.txt", b"")
        summary = self.run_stage()
        rows = self.listing()
        self.assertEqual(list(rows), sorted(rows))
        self.assertEqual(self.text_of("a.txt"), "alpha\n")
        self.assertEqual(self.text_of("sub/b.md"), "# beta\n")
        self.assertEqual(self.text_of("sub/page.html"), "gamma")
        self.assertEqual(self.text_of("sub/report.docx"), "delta")
        self.assertEqual(rows["blob.bin"]["reason"], "binary")
        self.assertEqual((rows["noext"]["kind"], rows["noext"]["reason"]), ("binary", "binary"))
        self.assertEqual(rows["empty.txt"]["reason"], "empty")
        self.assertEqual(rows["a.txt"]["key"], extract.extract_key(("a.txt",), b"alpha\r\n"))
        self.assertEqual(set(rows["a.txt"]), {"path", "key", "size", "kind", "status", "reason", "modified"})
        self.assertEqual((summary["files"], summary["extracted"], summary["skipped"]), (7, 4, 3))
        self.assertEqual(summary["skipped_by_reason"], {"binary": 2, "empty": 1})
        self.assertEqual(summary["by_kind"]["docx"], {"files": 1, "extracted": 1, "skipped": 0})
        figures = self.figures()
        self.assertEqual(figures["bytes_read"], sum(row["size"] for row in rows.values()))
        self.assertEqual(figures["texts"], 4)
        self.assertEqual(stat.S_IMODE(figures_path(self.layout, "extract").stat().st_mode), 0o600)
        stored = sorted(p.name for p in self.layout.extract_dir.glob("*.txt"))
        self.assertEqual(stored, sorted(f"{rows[p]['key']}.txt" for p in ("a.txt", "sub/b.md", "sub/page.html", "sub/report.docx")))

    def test_the_summary_holds_no_figure_measured_from_raw_bytes(self):
        # A byte total beside the sanitized text gives back the length of a redacted value;
        # a count of distinct contents says whether two raw files are equal.
        self.put("a.txt", "same words")
        self.put("b.txt", "same words")
        summary = self.run_stage()
        for name in ("bytes_read", "documents", "reused", "removed"):
            self.assertNotIn(name, summary)
        for tally in summary["by_kind"].values():
            self.assertNotIn("bytes", tally)

    def test_equal_bytes_at_two_paths_are_two_texts(self):
        # Equal raw bytes are never one text: what extract does with a file (and how long it takes)
        # must not depend on whether another file holds the same bytes (a planted copy would test it).
        self.put("one.txt", "same words")
        self.put("deep/two.txt", "same words")
        summary = self.run_stage()
        rows = self.listing()
        self.assertNotEqual(rows["one.txt"]["key"], rows["deep/two.txt"]["key"])
        self.assertEqual((summary["extracted"], self.figures()["texts"]), (2, 2))
        self.assertEqual(len(list(self.layout.extract_dir.glob("*.txt"))), 2)

    def test_file_modes(self):
        self.put("a.txt", "alpha")
        self.run_stage()
        self.assertEqual(stat.S_IMODE(os.stat(self.layout.extract_dir).st_mode), 0o700)
        for path in [*self.layout.extract_dir.iterdir(), self.layout.summary_path("extract")]:
            with self.subTest(path.name):
                self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)

    def test_link_outside_the_root_is_not_followed(self):
        outside = self.base / "outside.txt"
        outside.write_text("password=hunter2 outside")
        (self.root / "escape.txt").symlink_to(outside)
        (self.root / "escape-dir").symlink_to(self.base)
        self.put("real.txt", "inside")
        (self.root / "alias.txt").symlink_to(self.root / "real.txt")
        (self.root / "folder-alias").symlink_to(self.root)
        (self.root / "dangling.txt").symlink_to(self.root / "gone.txt")
        summary = self.run_stage()
        rows = self.listing()
        self.assertEqual((rows["escape.txt"]["reason"], rows["escape.txt"]["key"]), ("link outside root", None))
        self.assertEqual(rows["escape-dir"]["reason"], "link outside root")
        self.assertEqual(rows["folder-alias"]["reason"], "folder link")
        self.assertEqual(rows["dangling.txt"]["reason"], "broken link")
        self.assertEqual(self.text_of("alias.txt"), self.text_of("real.txt"))
        self.assertEqual(summary["skipped_by_reason"]["link outside root"], 2)
        for path in self.layout.root.rglob("*"):
            if path.is_file():
                self.assertNotIn("hunter2", path.read_text(errors="replace"), path)

    def test_a_link_cannot_reach_an_excluded_file(self):
        self.put(".git/config", "token=abc")
        (self.root / "config.txt").symlink_to(self.root / ".git" / "config")
        self.run_stage()
        self.assertEqual(self.listing()["config.txt"]["reason"], "link to excluded file")

    def test_special_files_are_skipped(self):
        os.mkfifo(self.root / "pipe")
        summary = self.run_stage()  # would block forever if the fifo were opened for reading
        self.assertEqual(self.listing()["pipe"], {"path": "pipe", "key": None, "size": 0, "kind": "special",
                                                  "status": "skipped", "reason": "special file"})
        self.assertEqual(summary["skipped_by_reason"], {"special file": 1})

    @unittest.skipIf(os.geteuid() == 0, "root reads files whatever their mode")
    def test_unreadable_file_is_counted(self):
        path = self.put("locked.txt", "x")
        path.chmod(0)
        self.addCleanup(path.chmod, 0o600)
        self.assertEqual(self.run_stage()["skipped_by_reason"], {"unreadable": 1})

    def test_include_and_exclude_globs(self):
        for rel in ("keep/a.md", "keep/b.txt", "keep/deep/c.md", "drop/d.md", ".git/HEAD", "top.md"):
            self.put(rel, f"text of {rel}")
        summary = self.run_stage(include=("*.md",), exclude=("drop/", ".git/**"))
        self.assertEqual(sorted(self.listing()), ["keep/a.md", "keep/deep/c.md", "top.md"])
        self.assertEqual(summary["excluded"], 1)  # keep/b.txt; drop/ and .git/ are not entered

    def test_size_limit(self):
        self.put("big.txt", "x" * 3000)
        self.put("small.txt", "y" * 10)
        summary = self.run_stage(max_file_mb=2000 / (1024 * 1024))
        rows = self.listing()
        self.assertEqual((rows["big.txt"]["reason"], rows["big.txt"]["key"], rows["big.txt"]["size"]), ("too large", None, 3000))
        self.assertEqual(rows["small.txt"]["status"], "extracted")
        self.assertEqual(summary["skipped_by_reason"], {"too large": 1})

    def test_deleted_file_leaves_the_extract_store_and_only_it(self):
        self.put("keep.txt", "kept")
        gone = self.put("gone.txt", "removed later")
        self.run_stage()
        gone_key, keep_key = self.listing()["gone.txt"]["key"], self.listing()["keep.txt"]["key"]
        sanitized = self.layout.doc_text_path(self.layout.sanitized_dir, "a" * 64)
        write_private(sanitized, "sanitized text")  # the sanitize stage's own: it removes its stale documents
        gone.unlink()
        self.run_stage()
        self.assertEqual(self.figures()["removed"], 1)
        self.assertFalse(Layout.doc_text_path(self.layout.extract_dir, gone_key).exists())
        self.assertTrue(Layout.doc_text_path(self.layout.extract_dir, keep_key).exists())
        self.assertTrue(sanitized.exists())
        self.assertNotIn("gone.txt", self.listing())

    def test_changed_file_replaces_its_document(self):
        path = self.put("a.txt", "first version")
        self.run_stage()
        old = self.listing()["a.txt"]["key"]
        path.write_text("second version")
        self.run_stage()
        self.assertNotEqual(self.listing()["a.txt"]["key"], old)
        self.assertEqual((self.figures()["removed"], self.figures()["texts"]), (1, 1))
        self.assertEqual(self.text_of("a.txt"), "second version")

    def test_deterministic_and_reuse_gives_the_same_result(self):
        self.put("a.txt", "alpha")
        self.put("b.html", "<p>beta</p>")
        self.put("c.docx", docx(para("gamma")))
        self.run_stage()
        first = self.figures()
        again = self.run_stage()
        self.assertEqual((first["reused"], self.figures()["reused"]), (0, 3))
        other = Layout(self.base / "other")
        fresh = self.run_stage(other)
        for key in ("files", "extracted", "by_kind", "skipped_by_reason"):
            self.assertEqual(again[key], fresh[key], key)
        self.assertEqual(self.layout.extract_listing.read_bytes(), other.extract_listing.read_bytes())
        texts = {p.name: p.read_bytes() for p in self.layout.extract_dir.glob("*.txt")}
        self.assertEqual(texts, {p.name: p.read_bytes() for p in other.extract_dir.glob("*.txt")})

    def test_a_changed_reader_version_extracts_again(self):
        self.put("a.txt", "alpha")
        self.run_stage()
        text_path = Layout.doc_text_path(self.layout.extract_dir, extract.extract_key(("a.txt",), b"alpha"))
        text_path.write_text("stale text from an older reader")
        text = registry.READABLE["text"]
        with mock.patch.dict(registry.READABLE, {"text": dataclasses.replace(text, version="older-or-newer")}):
            self.run_stage()
        self.assertEqual(self.figures()["reused"], 0)
        self.assertEqual(text_path.read_text(), "alpha")

    def test_output_folder_inside_the_root_is_not_read(self):
        self.put("a.txt", "alpha")
        inside = Layout(self.root / "store")
        self.run_stage(inside)
        summary = self.run_stage(inside)
        self.assertEqual(list(self.listing(inside)), ["a.txt"])
        self.assertEqual(summary["files"], 1)

    def test_copies_of_the_private_store_files_are_not_read(self):
        # Each holds keys computed from raw bytes, raw paths or raw byte totals.
        self.put("a.txt", "alpha")
        self.run_stage()
        self.put("copies/listing-copy.jsonl", self.layout.extract_listing.read_bytes())
        self.put("copies/figures.json", figures_path(self.layout, "extract").read_bytes())
        self.put("copies/costly.json", json.dumps({"a" * 64: {"reason": "too_costly: time", "budget": "x"}}))
        self.put("copies/ordinary.json", '{"stage": "deploy", "hosts": 3}')
        self.run_stage()
        rows = self.listing()
        for name in ("listing-copy.jsonl", "figures.json", "costly.json"):
            self.assertEqual(rows[f"copies/{name}"]["reason"], "file of the output folder", name)
        self.assertEqual(rows["copies/ordinary.json"]["status"], "extracted")

    def test_non_utf8_file_name(self):
        name = os.fsencode(self.root) + b"/caf\xe9.txt"
        with open(name, "wb") as handle:
            handle.write(b"latin name")
        self.run_stage()
        self.assertEqual(list(self.listing()), ["café.txt"])  # UTF-8, else Latin-1: decoded before sanitize sees it
        self.assertEqual(self.text_of("café.txt"), "latin name")

    def test_a_reader_crash_is_counted_not_raised(self):
        # Readers run in worker processes; the in-process call is what each worker makes.
        crashing = dataclasses.replace(registry.READABLE["docx"], reader=mock.Mock(side_effect=IndexError("a reader bug")))
        with mock.patch.dict(registry.READABLE, {"docx": crashing}):
            reading = readers.read("docx", docx(para("x")))
        self.assertEqual((reading.text, reading.reason), (None, "damaged"))


class ReportTests(TempCase):
    def test_report_by_kind_reason_and_folder(self):
        self.put("a/one.txt", "one")
        self.put("a/blob.bin", bytes(range(256)))
        self.put("b/two.html", "<p>two</p>")
        self.run_stage()
        out = io.StringIO()
        extract.print_report(self.layout, out)
        report = out.getvalue()
        self.assertIn("3 files seen, 2 extracted, 1 skipped", report)
        self.assertNotIn("MB", report)
        lines = report.splitlines()
        self.assertTrue(any(line.split()[:4] == ["html", "1", "1", "0"] for line in lines), report)
        self.assertTrue(any(line.split() == ["binary", "1"] for line in lines), report)
        self.assertTrue(any(line.split() == ["a/", "2", "1", "1", "binary", "1"] for line in lines), report)
        self.assertTrue(any(line.split() == ["b/", "1", "1", "0", "-"] for line in lines), report)

    def test_report_without_a_run(self):
        with self.assertRaises(StoreError):
            extract.print_report(self.layout, io.StringIO())


class CliTests(TempCase):
    def test_manifest_driven_run_and_report(self):
        manifest = write_manifest(self.base, model="m", dim=8, size=16, overlap=4)
        self.put("note.txt", "hello from the cli")
        code, out, err = run_cli("extract", str(manifest), "--out", str(self.layout.root), "--report")
        self.assertEqual(code, 0, err)
        self.assertTrue(err.startswith("extract: 1 of 1 files read"), err)
        self.assertIn("By kind", out)
        self.assertEqual(self.text_of("note.txt"), "hello from the cli")
        self.assertEqual(json.loads(self.layout.summary_path("extract").read_text())["extracted"], 1)


if __name__ == "__main__":
    unittest.main()
