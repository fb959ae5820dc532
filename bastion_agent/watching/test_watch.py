"""The watch loop on real folders: hostile names and loops first, then what changes, fails and stops.

Each test runs a ``Watcher`` (polling, short intervals) in a thread against
the loopback stub model server, and waits for its cycle lines; nothing here
asserts a duration. The subprocess tests (SIGTERM, ``kill -9``) are in
``test_watch_process.py``.
"""

from __future__ import annotations

import errno
import json
import os
import queue
import re
import secrets
import shutil
import sqlite3
import subprocess
import threading
import unittest
from pathlib import Path

from bastion_agent.config import manifest as manifests
from bastion_agent.config import signing
from bastion_agent.core.errors import ManifestError, SignatureError, StoreError
from bastion_agent.core.layout import Layout
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import TempFolder, clean_env, closed_port_url, run_cli, write_manifest
from bastion_agent.testing.watch_thread import WAIT, run_watcher
from bastion_agent.watching import lock
from bastion_agent.watching.state import load_state
from bastion_agent.watching.watcher import Watcher, sweep_cycle

PLANTED_KEY = "AKIA" + "".join(secrets.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") for _ in range(16))


class Ticking:
    """A monotonic clock that jumps a minute each reading: every retry is due at the next look."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 60.0
        return self.now


class WatchCase(TempFolder, unittest.TestCase):
    def setUp(self):
        self.tmp = self.make_tmp()
        self.manifest = write_manifest(self.tmp, extra="\n[watch]\npoll_seconds = 0.05\ndebounce_seconds = 0.05\n")
        self.docs = self.tmp / "docs"
        self.out = self.tmp / "out"
        self.lines: queue.Queue = queue.Queue()
        self.word = "quill" + secrets.token_hex(4)

    def start(self, url: str, signed: bool = False, environ: dict | None = None, **options) -> tuple[Watcher, threading.Thread]:
        env = clean_env(EMBED_URL=url, **(environ or {}))
        env.__enter__()
        self.addCleanup(env.__exit__, None, None, None)
        watcher = Watcher(load=lambda: manifests.load(self.manifest, require_signed=signed), layout=Layout(self.out),
                          say=self.lines.put, polling=True, **options)
        self.errors: list[BaseException] = []
        return watcher, run_watcher(self, watcher, self.lines, self.errors)

    def next_cycle(self) -> str:
        """The next cycle line (other lines go to ``self.said``)."""
        while True:
            line = self.lines.get(timeout=WAIT)
            if line is None:
                raise AssertionError(f"the watcher ended: {self.errors}")
            self.said.append(line)
            if line.startswith("watch: cycle"):
                return line

    said: list = []

    def put(self, rel: str, text: str) -> Path:
        path = self.docs / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def hits(self, query: str) -> list[dict]:
        code, out, err = run_cli("search", self.manifest, query, "--json", "--out", self.out, "--mode", "keyword")
        self.assertEqual(code, 0, err)
        return json.loads(out)

    def stored_ids(self) -> set[str]:
        with sqlite3.connect(self.out / "vectors.db") as db:
            return {row[0] for row in db.execute("SELECT chunk_id FROM vectors")}


class HostileFolderTests(WatchCase):
    def setUp(self):
        super().setUp()
        self.said = []

    def test_hostile_names_loops_and_unreadable_files_cost_their_file_and_leak_nothing(self):
        self.put("notes.txt", f"the {self.word} lies on the desk")
        self.put(f"keys/{PLANTED_KEY}.txt", "a" * 40 + "b")
        os.symlink(".", self.docs / "loop")  # a folder link to itself
        os.symlink("missing.txt", self.docs / "broken.txt")
        with StubServer() as stub:
            watcher, _ = self.start(stub.url, max_cycles=1)
            line = self.next_cycle()
        self.assertNotIn(PLANTED_KEY, line)
        self.assertIn("2 skipped: broken.txt (broken link), loop (folder link);", line)
        state = (self.out / "watch.state.json").read_text()
        self.assertNotIn(PLANTED_KEY, state)
        self.assertNotIn(self.word, state)  # counts and sanitized paths only, no text
        self.assertEqual([hit["paths"] for hit in self.hits(self.word)], [["notes.txt"]])

    @unittest.skipIf(os.geteuid() == 0, "root reads files whatever their mode")
    def test_a_file_that_cannot_be_read_is_named_and_the_rest_goes_on(self):
        self.put("notes.txt", f"the {self.word} lies on the desk")
        self.put("locked.txt", "private").chmod(0)
        with StubServer() as stub:
            self.start(stub.url, max_cycles=1)
            line = self.next_cycle()
        self.assertIn("locked.txt (unreadable)", line)
        self.assertEqual(len(self.hits(self.word)), 1)


class ChangeTests(WatchCase):
    def setUp(self):
        super().setUp()
        self.said = []

    def test_added_renamed_and_removed_files_each_take_one_cycle(self):
        self.put("a.txt", f"the {self.word} lies on the desk beside the lamp")
        with StubServer() as stub:
            watcher, _ = self.start(stub.url)
            self.assertIn("1 added", self.next_cycle())
            embedded = len(stub.inputs())
            ids = self.stored_ids()
            os.rename(self.docs / "a.txt", self.docs / "b.txt")
            line = self.next_cycle()
            self.assertIn("0 added, 0 changed, 1 renamed, 0 removed", line)
            self.assertIn("; 0 windows embedded", line)
            self.assertEqual(len(stub.inputs()), embedded)  # same text, same ids: nothing sent again
            self.assertEqual(self.stored_ids(), ids)
            self.assertEqual([hit["paths"] for hit in self.hits(self.word)], [["b.txt"]])
            (self.docs / "b.txt").unlink()
            self.assertIn("1 removed", self.next_cycle())
            self.assertEqual(self.hits(self.word), [])  # gone from search in the cycle that saw it gone
        self.assertEqual(load_state(self.out).cycles, 3)

    def test_a_file_that_changes_while_read_is_read_again_until_it_is_quiet(self):
        path = self.put("log.txt", "first line\n")
        last = f"last line {self.word}\n"
        with StubServer() as stub:
            watcher, _ = self.start(stub.url)
            self.next_cycle()
            for number in range(20):  # written in pieces, as a slow copy does
                with open(path, "a", encoding="utf-8") as handle:
                    handle.write(f"line {number} of a long copy\n")
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(last)
            while not self.hits(self.word):
                self.next_cycle()
        self.assertTrue(self.hits(self.word))

    def test_a_folder_deleted_and_made_again_keeps_the_index_then_catches_up(self):
        self.put("a.txt", f"the {self.word} lies on the desk")
        with StubServer() as stub:
            watcher, _ = self.start(stub.url)
            self.next_cycle()
            shutil.rmtree(self.docs)
            while not any("source folder is gone" in line for line in self.said):
                self.said.append(self.lines.get(timeout=WAIT))
            self.assertEqual(len(self.stored_ids()), 1)  # an unmounted share does not wipe the index
            self.put("b.txt", f"the {self.word} came back in another file")
            line = self.next_cycle()
        self.assertIn("1 added", line)
        self.assertIn("1 removed", line)
        self.assertEqual([hit["paths"] for hit in self.hits(self.word)], [["b.txt"]])

    def test_thousands_of_files_at_once_are_each_counted_once(self):
        with StubServer() as stub:
            watcher, _ = self.start(stub.url)
            self.next_cycle()
            for number in range(1500):
                self.put(f"batch/{number // 100}/f{number}.txt", f"file {number} of the {self.word} batch")
            added = 0
            while added < 1500:  # the copy may straddle two cycles; the counts add up
                added += int(re.search(r"(\d+) added", self.next_cycle()).group(1))
            self.assertEqual(added, 1500)
        self.assertEqual(json.loads((self.out / "chunk.summary.json").read_text())["documents"], 1500)


class FailureTests(WatchCase):
    def setUp(self):
        super().setUp()
        self.said = []

    def test_model_server_gone_keyword_search_works_and_watch_retries_until_it_is_back(self):
        self.put("a.txt", f"the {self.word} lies on the desk")
        with StubServer() as stub:
            url = closed_port_url()
            watcher, _ = self.start(url, monotonic=Ticking())
            line = self.next_cycle()
            self.assertIn("embed failed, will retry", line)
            state = load_state(self.out)
            self.assertIsNotNone(state.failing_since)
            os.environ["EMBED_URL"] = stub.url  # the server comes back
            line = self.next_cycle()
            while "will retry" in line:
                line = self.next_cycle()
        self.assertIn("1 windows embedded", line)
        self.assertIsNone(load_state(self.out).failing_since)

    def test_a_full_disk_stops_the_watcher_with_one_line(self):
        self.put("a.txt", "some text")

        def full(manifest, layout, on_stage):
            raise OSError(errno.ENOSPC, "No space left on device", str(layout.root / "vectors.db"))

        with StubServer() as stub:
            watcher, thread = self.start(stub.url, cycle=full)
            thread.join(WAIT)
        self.assertEqual(len(self.errors), 1)
        self.assertIsInstance(self.errors[0], StoreError)
        self.assertIn("the disk is full", str(self.errors[0]))
        self.assertIsNone(lock.holder(self.out))  # the lock is released: a restart may start

    def test_a_manifest_made_invalid_while_watching_stops_it_and_a_valid_edit_is_loaded(self):
        self.put("a.txt", "some text")
        with StubServer() as stub:
            watcher, thread = self.start(stub.url)
            self.next_cycle()
            self.manifest.write_text(self.manifest.read_text().replace("debounce_seconds = 0.05", "debounce_seconds = 0.06"))
            self.next_cycle()
            self.assertIn("watch: the manifest changed: loaded again", self.said)
            self.manifest.write_text(self.manifest.read_text() + "\n[watch.nonsense]\n")
            thread.join(WAIT)
        self.assertEqual(len(self.errors), 1)
        self.assertIsInstance(self.errors[0], ManifestError)
        self.assertIn("changed while watching and is refused", str(self.errors[0]))

    def test_two_watchers_on_one_output_folder_are_refused(self):
        self.put("a.txt", "some text")
        with StubServer() as stub:
            watcher, _ = self.start(stub.url)
            self.next_cycle()
            second = Watcher(load=lambda: manifests.load(self.manifest), layout=Layout(self.out), say=lambda _: None,
                             polling=True, cycle=sweep_cycle)
            with self.assertRaises(StoreError) as refused:
                second.run()
            self.assertIn(f"another watcher (pid {os.getpid()})", str(refused.exception))
            self.assertEqual(lock.holder(self.out), os.getpid())


SSH_KEYGEN = signing.ssh_keygen_path()


@unittest.skipUnless(SSH_KEYGEN, "ssh-keygen (openssh-client) is not installed")
class SignedManifestTests(WatchCase):
    """Under --require-signed, an edit is loaded only once signed again; an unsigned edit stops the watcher."""

    def setUp(self):
        super().setUp()
        self.said = []
        self.key = self.tmp / "operator"
        subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(self.key)], check=True, timeout=30)
        public = " ".join((self.tmp / "operator.pub").read_text().split()[:2])
        self.allowed = self.tmp / "allowed_signers"
        self.allowed.write_text(f'ops@example.com namespaces="{signing.NAMESPACE}" {public}\n')
        self.sign()

    def sign(self):
        signed = subprocess.run([SSH_KEYGEN, "-Y", "sign", "-f", str(self.key), "-n", signing.NAMESPACE],
                                input=self.manifest.read_bytes(), capture_output=True, check=True, timeout=30)
        signing.signature_path(self.manifest).write_bytes(signed.stdout)

    def test_a_signed_edit_is_loaded_and_an_unsigned_one_stops_the_watcher(self):
        self.put("a.txt", "some text")
        with StubServer() as stub:
            watcher, thread = self.start(stub.url, signed=True, environ={"BASTION_ALLOWED_SIGNERS": str(self.allowed)})
            self.next_cycle()
            self.manifest.write_text(self.manifest.read_text().replace("debounce_seconds = 0.05", "debounce_seconds = 0.06"))
            self.sign()
            self.next_cycle()
            self.assertIn("watch: the manifest changed: loaded again", self.said)
            self.manifest.write_text(self.manifest.read_text().replace("debounce_seconds = 0.06", "debounce_seconds = 0.07"))
            thread.join(WAIT)
        self.assertEqual(len(self.errors), 1)
        self.assertIsInstance(self.errors[0], SignatureError)
        self.assertIn("changed while watching and is refused", str(self.errors[0]))


if __name__ == "__main__":
    unittest.main()
