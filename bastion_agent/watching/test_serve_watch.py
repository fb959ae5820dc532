"""``serve --watch`` as a process: what changes on disk changes what HTTP search answers, and only as access allows.

Every test starts ``python -m bastion_agent serve MANIFEST --watch`` (polling,
short intervals) against the loopback stub, and waits for what it expects
with a generous deadline (never a timing threshold). The hostile test comes
first: a document labelled for HR, written while a public token searches
for its words again and again, never reaches that token, during the cycle
that embeds it (the stub held, so the windows wait for vectors) or after.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import unittest
import urllib.parse
from pathlib import Path

from bastion_agent.commands import token_cli
from bastion_agent.testing.serve_store import request
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import PROJECT, TempFolder, write_manifest

DEADLINE = 120.0  # the longest a test waits for what it expects; a pass never waits for it
ACCESS = '\n[access]\ndefault = ["public"]\n\n[[access.rules]]\npaths = ["hr/**"]\ngroups = ["hr"]\n'


class HeldStub(StubServer):
    """The stub, whose answers for texts holding ``marker`` wait while ``hold`` is clear (a cycle caught mid-embed).

    Only those: the probe that starts the embed stage is answered, so the
    stage writes the cycle's windows and then waits for their vectors.
    """

    def __init__(self, marker: str, **kwargs):
        super().__init__(**kwargs)
        self.marker = marker
        self.hold = threading.Event()
        self.hold.set()

    def record(self, path, body):
        super().record(path, body)
        if any(self.marker in text for text in self.by_path[path].texts(body)):
            self.hold.wait(DEADLINE)


class ServeWatch:
    """``serve MANIFEST --watch --polling --port 0`` in the background; its URL, its stderr lines."""

    def __init__(self, manifest: Path, out: Path, url: str, env: dict | None = None, *extra: str):
        environ = {key: value for key, value in os.environ.items() if not key.startswith(("EMBED_", "BASTION_"))}
        environ.update(EMBED_URL=url, PYTHONPATH=str(PROJECT), **(env or {}))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bastion_agent", "serve", str(manifest), "--out", str(out), "--watch", "--polling",
             "--port", "0", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ, cwd=PROJECT)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        first = self.process.stdout.readline()
        if "serve: http" not in first:
            self.process.wait(DEADLINE)
            self._reader.join(DEADLINE)
            raise AssertionError(f"serve --watch did not start: {first!r} {self.lines}")
        self.url = first.split()[2]

    def _read(self) -> None:
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))

    def cycles(self) -> int:
        return sum(1 for line in list(self.lines) if line.startswith("watch: cycle"))

    def stop(self, sig=signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        code = self.process.wait(DEADLINE)
        self._reader.join(DEADLINE)
        self.process.stdout.close()
        return code


def until(condition, what: str, lines: list[str]) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {DEADLINE:g} s: {what}; serve said {lines[-20:]}")
        time.sleep(0.1)


class ServeWatchCase(TempFolder, unittest.TestCase):
    extra = ""

    def setUp(self):
        self.tmp = self.make_tmp()
        self.manifest = write_manifest(self.tmp, size=16, overlap=4,
                                       extra="\n[watch]\npoll_seconds = 0.1\ndebounce_seconds = 0.1\n" + self.extra)
        self.docs = self.tmp / "docs"
        self.out = self.tmp / "out"

    def put(self, rel: str, text: str) -> None:
        path = self.docs / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    def serve(self, stub, env: dict | None = None) -> ServeWatch:
        server = ServeWatch(self.manifest, self.out, stub.url, env)
        self.addCleanup(lambda: server.process.poll() is None and server.stop(signal.SIGKILL))
        return server

    def texts(self, server: ServeWatch, query: str, mode: str = "keyword", token: str | None = None) -> list[str]:
        headers = {"Authorization": f"Bearer {token}"} if token else None
        status, _, value = request(server.url, path="/search?" + urllib.parse.urlencode({"q": query, "mode": mode}),
                                   headers=headers)
        self.assertEqual(status, 200, value)
        return [hit["text"] for hit in value["hits"]]

    def health(self, server: ServeWatch, token: str) -> dict:
        status, _, value = request(server.url, path="/healthz", headers={"Authorization": f"Bearer {token}"})
        self.assertEqual(status, 200, value)
        return value


class HiddenDocumentTests(ServeWatchCase):
    extra = ACCESS

    def test_a_hidden_document_never_reaches_a_public_token_during_or_after_cycles(self):
        word = f"zq{secrets.token_hex(4)}"  # fresh each run: nothing else holds it
        self.put("open/notice.txt", f"the canteen opens at noon {word} for everyone")
        tokens_file = self.tmp / "conf" / "tokens.json"
        public = token_cli.add_token(tokens_file, "public-portal", ("public",))
        hr = token_cli.add_token(tokens_file, "hr-portal", ("hr",))
        seen_by_public: list[str] = []
        with HeldStub(word) as stub:
            server = self.serve(stub, {"BASTION_SERVE_TOKENS": str(tokens_file)})
            until(lambda: server.cycles() >= 1, "the first cycle", server.lines)
            stub.hold.clear()  # the next cycle's windows wait for vectors: written, searchable, pending
            self.put("hr/salary.txt", f"salary band of the director {word} is confidential")
            self.put("open/menu.txt", f"soup and bread {word} today")

            def during() -> bool:
                seen_by_public.extend(self.texts(server, word, token=public))
                return any("salary" in text for text in self.texts(server, word, token=hr))

            until(during, "the HR document found by keyword while its vectors wait", server.lines)
            self.assertGreaterEqual(self.health(server, hr)["windows_pending"], 1)
            self.assertEqual(self.health(server, public)["windows_pending"], 1)  # its own new window only
            stub.hold.set()
            until(lambda: server.cycles() >= 2, "the second cycle", server.lines)
            until(lambda: self.health(server, hr)["windows_pending"] == 0, "every vector", server.lines)
            for mode in ("keyword", "vector", "hybrid"):
                seen_by_public.extend(self.texts(server, f"salary director confidential {word}", mode, public))
                self.assertTrue(any("salary" in text for text in self.texts(server, f"salary {word}", mode, hr)), mode)
            self.assertTrue(any("soup" in text for text in seen_by_public))  # the public token did search and find
            self.assertEqual(server.stop(), 0, server.lines)
        self.assertFalse([text for text in seen_by_public if "salary" in text or "director" in text])


class ChangeTests(ServeWatchCase):
    def test_a_written_file_becomes_findable_and_a_deleted_one_leaves_search(self):
        first, second = f"zq{secrets.token_hex(4)}", f"zq{secrets.token_hex(4)}"
        self.put("a.txt", f"the lantern hangs by the harbour door {first}")
        with StubServer() as stub:
            server = self.serve(stub)
            until(lambda: self.texts(server, first), "the first file found", server.lines)
            self.put("sub/b.txt", f"the kettle sings on the copper stove {second}")
            until(lambda: self.texts(server, second), "a file written while serving found", server.lines)
            until(lambda: any(second in text for text in self.texts(server, f"kettle copper stove {second}", "vector")),
                  "its window found by vector search", server.lines)
            (self.docs / "a.txt").unlink()
            until(lambda: not self.texts(server, first), "a deleted file gone from search", server.lines)
            for mode in ("vector", "hybrid"):
                self.assertFalse([text for text in self.texts(server, f"lantern harbour door {first}", mode)
                                  if first in text], mode)
            self.assertEqual(server.stop(), 0, server.lines)
        self.assertTrue(any(line.startswith("watch: cycle") and "1 removed" in line for line in server.lines),
                        server.lines)


class CycleWorkTests(ServeWatchCase):
    def test_a_cycle_after_the_first_opens_only_the_file_that_changed(self):
        word = f"zq{secrets.token_hex(4)}"
        for number in range(4):
            self.put(f"n{number}.txt", f"note {number}: the ferry leaves the pier at dawn")
        with StubServer() as stub:
            server = self.serve(stub)
            until(lambda: server.cycles() >= 1, "the first cycle", server.lines)
            self.assertEqual(self.files_read(), 4)  # the first cycle vouches for nothing: every file
            self.put("new.txt", f"the lighthouse keeper logs {word} each night")
            until(lambda: server.cycles() >= 2, "the second cycle", server.lines)
            self.assertEqual(self.files_read(), 1, server.lines)  # as under `watch`: the new file alone
            self.assertTrue(any(word in text for text in self.texts(server, word)))
            self.assertEqual(server.stop(), 0, server.lines)

    def files_read(self) -> int:
        """Extract's private work count of the last cycle: how many files it opened."""
        import json

        from bastion_agent.core.layout import Layout, figures_path

        return json.loads(figures_path(Layout(self.out), "extract").read_text(encoding="utf-8"))["files_read"]


class ReloadWorkTests(ServeWatchCase):
    def test_a_cycle_that_changed_nothing_loads_nothing_and_one_that_did_loads_once_or_twice(self):
        self.put("a.txt", "the lantern hangs by the harbour door")
        with StubServer() as stub:
            server = self.serve(stub)
            until(lambda: server.cycles() >= 1, "the first cycle", server.lines)
            loads = self.loads(server)
            self.assertIn(loads, (1, 2))
            same = self.docs / "a.txt"  # the same bytes and time under a new inode: a cycle that finds nothing new
            stamp = same.stat()
            copy = self.docs / ".a.txt.new"
            copy.write_bytes(same.read_bytes())
            os.utime(copy, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
            os.replace(copy, same)
            until(lambda: server.cycles() >= 2, "the second cycle", server.lines)
            self.assertEqual(self.loads(server), loads, server.lines)
            self.put("b.txt", "the kettle sings on the copper stove")
            until(lambda: server.cycles() >= 3, "the third cycle", server.lines)
            self.assertIn(self.loads(server) - loads, (1, 2), server.lines)
            self.assertEqual(server.stop(), 0, server.lines)

    @staticmethod
    def loads(server: ServeWatch) -> int:
        return sum(1 for line in list(server.lines) if "reloaded the index" in line)


class StopTests(ServeWatchCase):
    def test_sigterm_finishes_the_cycle_and_exits_zero(self):
        self.put("a.txt", "the lantern hangs by the door")
        with StubServer() as stub:
            server = self.serve(stub)
            until(lambda: server.cycles() >= 1, "the first cycle", server.lines)
            self.put("b.txt", "the kettle sings on the stove")
            code = server.stop(signal.SIGTERM)
        self.assertEqual(code, 0, server.lines)
        self.assertTrue(server.lines[-1].startswith("watch: stopped after"), server.lines)
        self.assertFalse(list(self.out.rglob(".*.tmp")))  # nothing half-written
        self.assertFalse([line for line in server.lines if "Traceback" in line], server.lines)


class TwoWatchersTests(ServeWatchCase):
    def run_watch(self, stub) -> subprocess.CompletedProcess:
        environ = {key: value for key, value in os.environ.items() if not key.startswith(("EMBED_", "BASTION_"))}
        environ.update(EMBED_URL=stub.url, PYTHONPATH=str(PROJECT))
        return subprocess.run([sys.executable, "-m", "bastion_agent", "watch", str(self.manifest), "--out", str(self.out),
                               "--polling"], capture_output=True, text=True, env=environ, cwd=PROJECT, timeout=DEADLINE)

    def test_watch_beside_serve_watch_is_refused(self):
        self.put("a.txt", "the lantern hangs by the door")
        with StubServer() as stub:
            server = self.serve(stub)
            until(lambda: server.cycles() >= 1, "the first cycle", server.lines)
            second = self.run_watch(stub)
            self.assertEqual(second.returncode, 4, second.stderr)
            self.assertIn(f"another watcher (pid {server.process.pid})", second.stderr)
            self.assertEqual(server.stop(), 0, server.lines)

    def test_serve_watch_beside_watch_is_refused_before_it_listens(self):
        from bastion_agent.core.layout import claim_out_dir
        from bastion_agent.watching.lock import WatchLock

        self.put("a.txt", "the lantern hangs by the door")
        claim_out_dir(self.out)  # as the running watch did
        environ = {key: value for key, value in os.environ.items() if not key.startswith(("EMBED_", "BASTION_"))}
        with StubServer() as stub, WatchLock(self.out):  # this process holds the folder, as a running watch would
            environ.update(EMBED_URL=stub.url, PYTHONPATH=str(PROJECT))
            refused = subprocess.run([sys.executable, "-m", "bastion_agent", "serve", str(self.manifest), "--out",
                                      str(self.out), "--watch", "--port", "0"], capture_output=True, text=True,
                                     env=environ, cwd=PROJECT, timeout=DEADLINE)
        self.assertEqual(refused.returncode, 4, refused.stderr)
        self.assertEqual(refused.stdout, "")  # never listened
        self.assertEqual(refused.stderr.strip().splitlines(),
                         [f"bastion_agent serve: another watcher (pid {os.getpid()}) already keeps {self.out} current; "
                          "stop it first, or give this one another --out"])
        self.assertFalse((self.out / "vectors.db").exists())  # nothing made for a folder another watcher keeps


if __name__ == "__main__":
    unittest.main()
