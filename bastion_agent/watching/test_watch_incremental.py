"""A watch cycle reads what changed, and still makes exactly what a clean sweep makes.

Each test runs a ``Watcher`` (polling, short intervals) in a thread against
the loopback stub, changes files between cycles, and compares the watched
store with a clean ``sweep`` of the same folder into another output folder:
extract's listing, the private map, the sanitized listing and texts,
``chunks.jsonl`` and vectors.db's windows and documents. The work count is
extract's ``files_read`` (its private figures): how many files a cycle
opened. Nothing here asserts a duration.
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import sqlite3
import string
import unittest
from pathlib import Path

from bastion_agent.config import manifest as manifests
from bastion_agent.core.layout import Layout, figures_path, read_jsonl
from bastion_agent.testing.labelled_docs import HR_PUBLIC_ACCESS
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import TempFolder, clean_env, run_cli, write_manifest
from bastion_agent.testing.watch_thread import WAIT, run_watcher
from bastion_agent.watching.watcher import Watcher

ACCESS = HR_PUBLIC_ACCESS + '\n[[access.rules]]\npaths = ["both/**"]\ngroups = ["hr", "public"]\n'


def password() -> str:
    """Letters, digits and a symbol, fresh each call: what the context rules find after ``DB_PASSWORD=``."""
    body = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(10))
    return secrets.choice(string.ascii_uppercase) + body + "!" + secrets.choice(string.digits)


def store_view(out: Path) -> dict:
    """What a sweep leaves that later stages and search read, in a form two folders can be compared in."""
    layout = Layout(out)
    sanitized = {path.name: path.read_text(encoding="utf-8") for path in sorted(layout.sanitized_dir.glob("*.txt"))}
    with sqlite3.connect(out / "vectors.db") as db:
        windows = sorted(db.execute("SELECT chunk_id, doc, idx, text FROM chunks"))
        documents = sorted(db.execute("SELECT * FROM documents"))
        unembedded = db.execute("SELECT COUNT(*) FROM chunks WHERE chunk_id NOT IN (SELECT chunk_id FROM vectors)"
                                ).fetchone()[0]
    return {
        "extract listing": read_jsonl(layout.extract_listing),
        "private map": read_jsonl(layout.extract_dir / "sanitized.jsonl"),
        "sanitized listing": read_jsonl(layout.sanitized_listing),
        "sanitized texts": sanitized,
        "chunks": layout.chunks_path.read_text(encoding="utf-8"),
        "windows": windows,
        "documents": documents,
        "windows without a vector": unembedded,
    }


class IncrementalCase(TempFolder, unittest.TestCase):
    def setUp(self):
        self.tmp = self.make_tmp()
        self.manifest = write_manifest(self.tmp, extra=ACCESS + "\n[watch]\npoll_seconds = 0.05\ndebounce_seconds = 0.05\n")
        self.docs = self.tmp / "docs"
        self.out = self.tmp / "out"
        self.lines: queue.Queue = queue.Queue()
        self.errors: list[BaseException] = []

    def put(self, rel: str, text: str) -> Path:
        path = self.docs / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def start(self, url: str) -> Watcher:
        env = clean_env(EMBED_URL=url)
        env.__enter__()
        self.addCleanup(env.__exit__, None, None, None)
        watcher = Watcher(load=lambda: manifests.load(self.manifest), layout=Layout(self.out), say=self.lines.put,
                          polling=True)
        run_watcher(self, watcher, self.lines, self.errors)
        return watcher

    def next_cycle(self) -> str:
        while True:
            line = self.lines.get(timeout=WAIT)
            if line is None:
                raise AssertionError(f"the watcher ended: {self.errors}")
            if line.startswith("watch: cycle"):
                return line

    def files_read(self) -> int:
        return json.loads(figures_path(Layout(self.out), "extract").read_text(encoding="utf-8"))["files_read"]

    def assert_as_a_clean_sweep(self, url: str) -> None:
        clean = self.tmp / f"clean{secrets.token_hex(3)}"
        with clean_env(EMBED_URL=url):
            code, _, err = run_cli("sweep", self.manifest, "--out", clean, "--quiet")
        self.assertEqual(code, 0, err)
        watched, swept = store_view(self.out), store_view(clean)
        for part in swept:
            self.assertEqual(watched[part], swept[part], part)


class HostileChangeTests(IncrementalCase):
    def test_a_file_rewritten_with_its_size_and_times_put_back_is_read_again(self):
        """Its modification time forged back, a file still changes its inode's change time, which no program sets."""
        secret = password()
        cover = "x" * (len("DB_PASSWORD=") + len(secret))
        path = self.put("public/notes.txt", f"the lamp is on the desk {cover}\n")
        self.put("public/other.txt", "the kettle sings on the stove\n")
        with StubServer() as stub:
            self.start(stub.url)
            self.next_cycle()
            before = os.stat(path)
            path.write_text(f"the lamp is on the desk DB_PASSWORD={secret}\n", encoding="utf-8")
            os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
            self.assertEqual(os.stat(path).st_size, before.st_size)
            line = self.next_cycle()
            self.assertIn("1 changed", line)
            self.assertEqual(self.files_read(), 1)
            for found in self.out.rglob("*"):
                if found.is_file() and self.out / "extract" not in found.parents:
                    self.assertNotIn(secret.encode(), found.read_bytes(), found)
            self.assert_as_a_clean_sweep(stub.url)


class ChangeTests(IncrementalCase):
    def test_a_cycle_of_one_changed_file_reads_that_file_only_and_equals_a_clean_sweep(self):
        shared = password()
        for number in range(6):
            self.put(f"public/page{number}.txt", f"page {number} of the handbook, about the harbour and its lamps\n")
        self.put("public/howto.txt", f"log in with {shared} then run the nightly job\n")  # a bare copy: no rule finds it
        self.put("hr/notes.txt", "the review meeting moved to Thursday\n")
        self.put("hr/old.txt", "an old memo about parking\n")
        files = 9
        with StubServer() as stub:
            self.start(stub.url)
            self.assertIn(f"{files} added", self.next_cycle())
            self.assertEqual(self.files_read(), files)
            # One new file whose value has a copy in an unchanged file of narrower readers: that copy goes.
            self.put("both/handbook.txt", f"DB_PASSWORD={shared}\n")
            self.assertIn("1 added", self.next_cycle())
            self.assertEqual(self.files_read(), 1)
            self.assertNotIn(shared, (self.out / "chunks.jsonl").read_text() + self._sanitized_texts())
            self.assert_as_a_clean_sweep(stub.url)
            # A rename and a removal: the renamed file is read at its new path (its key holds the path), nothing else.
            os.rename(self.docs / "hr/notes.txt", self.docs / "hr/notes-2.txt")
            (self.docs / "public/page3.txt").unlink()
            line = self.next_cycle()
            self.assertIn("0 added, 0 changed, 1 renamed, 1 removed", line)
            self.assertEqual(self.files_read(), 1)
            self.assert_as_a_clean_sweep(stub.url)
            # The value's only finding leaves: the unchanged copy is itself again, as a clean sweep makes it.
            (self.docs / "both/handbook.txt").unlink()
            self.next_cycle()
            self.assertEqual(self.files_read(), 0)
            self.assert_as_a_clean_sweep(stub.url)

    def test_a_manifest_loaded_again_reads_every_file(self):
        for number in range(3):
            self.put(f"public/page{number}.txt", f"page {number} about the orchard\n")
        with StubServer() as stub:
            self.start(stub.url)
            self.next_cycle()
            self.put("public/page0.txt", "page 0 rewritten about the meadow\n")
            self.next_cycle()
            self.assertEqual(self.files_read(), 1)
            self.manifest.write_text(self.manifest.read_text().replace('groups = ["public"]', 'groups = ["public", "all"]'))
            self.next_cycle()
            self.assertEqual(self.files_read(), 3)  # other globs or settings may read each file otherwise
            self.assert_as_a_clean_sweep(stub.url)

    def _sanitized_texts(self) -> str:
        return "".join(path.read_text(encoding="utf-8") for path in (self.out / "sanitized").glob("*.txt"))


if __name__ == "__main__":
    unittest.main()
