"""``.gz``, ``.bz2``, ``.xz`` are read as the file they contain, within the size and bomb limits."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import textwrap
import unittest
from pathlib import Path

from bastion_agent.core.layout import Layout, read_jsonl
from bastion_agent.extracting import readers
from bastion_agent.extracting.formats import compressed
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import (
    TempFolder,
    clean_env,
    run_cli,
    run_python_limited,
    write_manifest,
)

CHANGELOG = textwrap.dedent("""\
    hello (2.12-1) unstable; urgency=medium

      * New upstream release: the greeting now honours LANGUAGE.
      * Fix a crash when the terminal is narrower than the banner.

     -- Santiago Vila <sanvila@debian.org>  Sun, 04 Aug 2024 10:00:00 +0200
    """)


class ReaderTests(unittest.TestCase):
    def test_each_compression_reads_as_the_inner_file(self):
        for suffix, pack in ((".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress)):
            with self.subTest(suffix):
                kind = readers.kind_for("changelog.Debian" + suffix, b"")
                self.assertEqual(kind, "text" + suffix)
                self.assertEqual(readers.read(kind, pack(CHANGELOG.encode())).text, CHANGELOG)

    def test_the_inner_kind_comes_from_the_rest_of_the_name(self):
        page = gzip.compress(b"<html><body><p>Release notes</p><script>x()</script></body></html>")
        self.assertEqual(readers.kind_for("doc/NEWS.html.gz", b""), "html.gz")
        self.assertEqual(readers.read("html.gz", page).text, "Release notes")
        for name in ("backup.tar.gz", "twice.txt.gz.gz", "pics.zip.xz", "a.tgz"):
            with self.subTest(name):
                self.assertEqual(readers.kind_for(name, b""), "binary")

    def test_a_damaged_file_is_refused_as_damaged(self):
        cut = gzip.compress(CHANGELOG.encode() * 50)[:-40]
        self.assertEqual(readers.read("text.gz", cut).reason, "damaged")
        self.assertEqual(readers.read("text.xz", b"not xz at all").reason, "damaged")

    def test_more_than_max_bytes_unpacked_is_refused(self):
        text = Path("/usr/share/common-licenses/GPL-3").read_bytes() * 40  # real text, ordinary ratio (~3x)
        packed = gzip.compress(text)
        self.assertEqual(readers.read("text.gz", packed, max_bytes=len(text) // 2).reason, "too large unpacked")
        self.assertIsNotNone(readers.read("text.gz", packed, max_bytes=len(text)).text)

    def test_a_ratio_far_beyond_text_is_refused_before_the_size_limit(self):
        bomb = gzip.compress(b"\0" * (compressed.RATIO_FLOOR_BYTES + compressed.PIECE_BYTES * 2), compresslevel=9)
        self.assertEqual(readers.read("text.gz", bomb, max_bytes=1 << 40).reason, "too large unpacked")


def gzip_bomb(unpacked_gib: int) -> bytes:
    """Concatenated gzip members of 64 MiB of zeros each (a valid multi-member gzip file)."""
    member = gzip.compress(b"\0" * (64 << 20), compresslevel=9)
    return member * (unpacked_gib * 16)


class StageTests(TempFolder, unittest.TestCase):
    def setUp(self):
        self.tmp = self.make_tmp()
        self.manifest = write_manifest(self.tmp, size=24, overlap=4)
        self.docs = self.tmp / "docs"
        self.out = self.tmp / "out"

    def test_a_gzipped_changelog_is_found_by_search(self):
        (self.docs / "hello").mkdir()
        (self.docs / "hello" / "changelog.Debian.gz").write_bytes(gzip.compress(CHANGELOG.encode()))
        (self.docs / "hello" / "README").write_text("Hello prints a friendly greeting.\n", encoding="utf-8")
        with StubServer() as stub, clean_env(EMBED_URL=stub.url):
            self.assertEqual(run_cli("sweep", self.manifest, "--out", self.out, "--quiet")[0], 0)
            code, out, err = run_cli("search", self.manifest, "new upstream release", "--out", self.out, "--json")
        self.assertEqual(code, 0, err)
        hits = json.loads(out)
        self.assertEqual(hits[0]["paths"], ["hello/changelog.Debian.gz"])
        self.assertIn("New upstream release", hits[0]["text"])
        self.assertNotIn("sanvila@debian.org", out)  # sanitized like any text

    def test_a_gzip_bomb_is_refused_without_exhausting_memory(self):
        (self.docs / "bomb.log.gz").write_bytes(gzip_bomb(2))  # 2 GiB of zeros in ~4 MB
        (self.docs / "bomb.txt.xz").write_bytes(lzma.compress(b"\0" * (40 << 20), preset=0))
        (self.docs / "bomb.txt.bz2").write_bytes(bz2.compress(b"\0" * (40 << 20), compresslevel=1))
        (self.docs / "changelog.gz").write_bytes(gzip.compress(CHANGELOG.encode()))
        script = textwrap.dedent(f"""
            import sys
            from bastion_agent.commands.cli import main
            sys.exit(main(["extract", {str(self.manifest)!r}, "--out", {str(self.out)!r}, "--quiet"]))
            """)
        result = run_python_limited(script, 400 << 20)  # address space: far less than the bomb unpacks to
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = {row["path"]: row for row in read_jsonl(Layout(self.out).extract_listing)}
        for name in ("bomb.log.gz", "bomb.txt.xz", "bomb.txt.bz2"):
            with self.subTest(name):
                self.assertEqual((rows[name]["status"], rows[name]["reason"]), ("skipped", "too large unpacked"))
        self.assertEqual(rows["changelog.gz"]["status"], "extracted")

    def test_the_report_counts_compressed_kinds(self):
        (self.docs / "changelog.gz").write_bytes(gzip.compress(CHANGELOG.encode()))
        (self.docs / "NEWS.bz2").write_bytes(bz2.compress(CHANGELOG.encode()))
        with clean_env():
            code, out, err = run_cli("extract", self.manifest, "--out", self.out, "--report")
        self.assertEqual(code, 0, err)
        self.assertRegex(out, r"(?m)^text\.gz +1 +1 +0")
        self.assertRegex(out, r"(?m)^text\.bz2 +1 +1 +0")


if __name__ == "__main__":
    unittest.main()
