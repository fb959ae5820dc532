"""Hostile folders and special files: links swapped in mid-sweep, folders nested without end, FIFOs."""

from __future__ import annotations

import json
import os
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from bastion_agent.core.layout import Layout
from bastion_agent.extracting import extract
from bastion_agent.testing.limited_sweep import run_limited
from bastion_agent.testing.testsupport import clean_env, write_manifest


class ConfinementTests(unittest.TestCase):
    def setUp(self):
        holder = tempfile.TemporaryDirectory()
        self.addCleanup(holder.cleanup)
        self.tmp = Path(holder.name)
        self.manifest = write_manifest(self.tmp)
        (self.tmp / "docs" / "sub").mkdir()
        (self.tmp / "docs" / "sub" / "a.txt").write_text("inside text", encoding="utf-8")
        (self.tmp / "docs" / "b.txt").write_text("another inside text", encoding="utf-8")
        self.outside = self.tmp / "outside"
        self.outside.mkdir()
        secret = self.outside / "a.txt"
        secret.write_text("OUTSIDE-SECRET-4471", encoding="utf-8")
        secret.chmod(0o600)

    def test_a_folder_swapped_for_a_link_between_walk_and_read_is_not_followed(self):
        real_walk = extract.walk

        def walk_then_swap(root, selection):
            found = real_walk(root, selection)
            (self.tmp / "docs" / "sub").rename(self.tmp / "docs-sub-moved")
            (self.tmp / "docs" / "sub").symlink_to(self.outside, target_is_directory=True)
            return found

        from bastion_agent.config import manifest as manifest_module

        layout = Layout(self.tmp / "out")
        with mock.patch.object(extract, "walk", walk_then_swap), clean_env():
            summary = extract.run(manifest_module.load(self.manifest), layout)
        rows = {row["path"]: row for row in map(json.loads, layout.extract_listing.read_text().splitlines())}
        self.assertEqual((rows["sub/a.txt"]["status"], rows["sub/a.txt"]["reason"]), ("skipped", "unreadable"))
        self.assertEqual(rows["b.txt"]["status"], "extracted")
        self.assertEqual(summary["extracted"], 1)
        for path in layout.root.rglob("*"):
            if path.is_file():
                self.assertNotIn(b"OUTSIDE-SECRET-4471", path.read_bytes(), path)

    def test_a_folder_nested_without_end_is_not_walked_to_the_bottom(self):
        # A chain of nested folders, a file in each: every path, listing row and
        # open from the root grew with the depth, so 20,000 levels (seconds to
        # make) cost the sweep the square of that in time and memory.
        depth = 300
        fd = os.open(self.tmp / "docs", os.O_RDONLY | os.O_DIRECTORY)
        try:
            for level in range(depth):
                os.mkdir("d", dir_fd=fd)
                child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = child
                file_fd = os.open("note.txt", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
                os.write(file_fd, f"level {level + 1}".encode())
                os.close(file_fd)
        finally:
            os.close(fd)
        layout = Layout(self.tmp / "out")
        from bastion_agent.config import manifest as manifest_module

        with clean_env():
            summary = extract.run(manifest_module.load(self.manifest), layout)
        rows = [json.loads(line) for line in layout.extract_listing.read_text().splitlines()]
        read = [row["path"].count("/") for row in rows if row["status"] == "extracted" and row["path"].startswith("d/")]
        deep = [row for row in rows if row["reason"] == "too deep"]
        self.assertEqual(len(deep), 1, [row["path"][-40:] for row in deep])
        self.assertEqual(deep[0]["kind"], "folder")
        self.assertLess(max(read), depth)
        self.assertEqual(len(read), deep[0]["path"].count("/"))  # every file above the cut is read
        self.assertEqual(summary["skipped_by_reason"].get("too deep"), 1)
        self.assertEqual({row["path"] for row in rows if row["status"] == "extracted"} & {"b.txt", "sub/a.txt"},
                         {"b.txt", "sub/a.txt"})

    def test_signature_fifo_does_not_hang_any_command(self):
        os.mkfifo(str(self.manifest) + ".sig")
        result = run_limited("extract", str(self.manifest), "--out", str(self.tmp / "out"), timeout=60)
        self.assertNotEqual(result.returncode, 0)
        self.assertEqual(result.stderr.count("\n"), 1, result.stderr)
        self.assertIn("not a regular file", result.stderr)

    def test_manifest_fifo_does_not_hang(self):
        fifo = self.tmp / "fifo.toml"
        os.mkfifo(fifo)
        result = run_limited("extract", str(fifo), "--out", str(self.tmp / "out"), timeout=60)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("not a regular file", result.stderr)


if __name__ == "__main__":
    unittest.main()
