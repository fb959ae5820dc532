"""``watch`` as a process: SIGTERM ends it cleanly, and ``kill -9`` at any moment converges on restart.

The kill test changes files while a watcher runs, kills it with SIGKILL
after a random number of its output lines (a fresh seed each run, printed on
failure), restarts it until a cycle completes on the final folder, and
compares the store with a clean sweep of the same folder: the same windows,
each with exactly one vector of the model, and the same keyword hits (a
window of a file changed after it was embedded keeps its vector as a stale
one, as after any sweep: never shown, erased by ``prune``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
import unittest
from pathlib import Path

from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import PROJECT, TempFolder, clean_env, run_cli, write_manifest

WAIT = 120


class WatchProcess:
    """``python -m bastion_agent watch`` in the background, its stderr read line by line."""

    def __init__(self, manifest: Path, out: Path, url: str):
        env = {key: value for key, value in os.environ.items() if not key.startswith(("EMBED_", "BASTION_"))}
        env.update(EMBED_URL=url, PYTHONPATH=str(PROJECT))
        self.process = subprocess.Popen([sys.executable, "-m", "bastion_agent", "watch", str(manifest), "--out", str(out),
                                         "--polling"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                        env=env, cwd=PROJECT)
        self.lines: list[str] = []

    def next_line(self) -> str:
        line = self.process.stderr.readline()
        if not line:
            raise AssertionError(f"watch ended: {self.lines}")
        self.lines.append(line.rstrip("\n"))
        return self.lines[-1]

    def wait_for_cycle(self) -> str:
        while True:
            line = self.next_line()
            if line.startswith("watch: cycle"):
                return line

    def stop(self, sig=signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            code = self.process.wait(WAIT)
        finally:
            rest = self.process.stderr.read()
            self.lines.extend(rest.splitlines())
            self.process.stderr.close()
        return code


class ProcessCase(TempFolder, unittest.TestCase):
    def setUp(self):
        self.tmp = self.make_tmp()
        self.manifest = write_manifest(self.tmp, extra="\n[watch]\npoll_seconds = 0.05\ndebounce_seconds = 0.05\n")
        self.docs = self.tmp / "docs"
        self.out = self.tmp / "out"

    def start(self, url: str) -> WatchProcess:
        watcher = WatchProcess(self.manifest, self.out, url)
        self.addCleanup(lambda: watcher.process.poll() is None and watcher.stop(signal.SIGKILL))
        return watcher

    def put(self, rel: str, text: str) -> None:
        path = self.docs / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


class SignalTests(ProcessCase):
    def test_sigterm_finishes_the_cycle_and_exits_zero(self):
        self.put("a.txt", "the lantern hangs by the door")
        with StubServer() as stub:
            watcher = self.start(stub.url)
            watcher.wait_for_cycle()
            self.put("b.txt", "the kettle sings on the stove")
            code = watcher.stop(signal.SIGTERM)
        self.assertEqual(code, 0, watcher.lines)
        self.assertTrue(watcher.lines[-1].startswith("watch: stopped after"), watcher.lines)
        self.assertFalse(list(self.out.rglob(".*.tmp")))  # nothing half-written


def store(out: Path, model: str = "stub-model") -> tuple[dict, dict]:
    """``{chunk_id: text}`` of the windows and ``{chunk_id: vectors of the model}`` of vectors.db."""
    with sqlite3.connect(out / "vectors.db") as db:
        windows = dict(db.execute("SELECT chunk_id, text FROM chunks"))
        vectors = dict(db.execute("SELECT chunk_id, COUNT(*) FROM vectors WHERE model = ? GROUP BY chunk_id", (model,)))
    return windows, vectors


class KillTests(ProcessCase):
    def test_kill_9_at_random_moments_converges_to_a_clean_sweep(self):
        seed = random.randrange(1 << 30)
        rng = random.Random(seed)
        words = ["harbour", "lantern", "orchard", "granite", "meadow", "copper", "willow", "saddle"]
        with StubServer() as stub:
            for round_number in range(3):
                watcher = self.start(stub.url)
                for step in range(rng.randrange(1, 4)):
                    self.put(f"f{rng.randrange(6)}.txt", " ".join(rng.choice(words) for _ in range(rng.randrange(5, 40))))
                    if rng.random() < 0.3 and list(self.docs.glob("*.txt")):
                        rng.choice(list(self.docs.glob("*.txt"))).unlink()
                for _ in range(rng.randrange(1, 3)):
                    watcher.next_line()
                time.sleep(rng.random() * 0.5)  # a random moment: before, during or after a cycle
                watcher.stop(signal.SIGKILL)
            watcher = self.start(stub.url)  # the restart: its first cycle is a sweep of the final folder
            watcher.wait_for_cycle()
            self.assertEqual(watcher.stop(signal.SIGTERM), 0, watcher.lines)
            clean = self.tmp / "clean"
            with clean_env(EMBED_URL=stub.url):
                code, _, err = run_cli("sweep", self.manifest, "--out", clean)
            self.assertEqual(code, 0, err)
        windows, vectors = store(self.out)
        clean_windows, clean_vectors = store(clean)
        self.assertEqual(windows, clean_windows, f"seed {seed}")
        self.assertLessEqual(set(windows), set(vectors), f"seed {seed}")  # every window has its vector: none lost
        self.assertEqual({vectors[chunk] for chunk in windows}, {1} if windows else set(), f"seed {seed}")  # none twice
        # A window embedded by a killed cycle whose file then changed keeps its vector as a stale one: vectors are
        # only ever added (docs/embedding.md), search never shows it, and `prune` erases it.
        for word in words:
            code, out, _ = run_cli("search", self.manifest, word, "--out", self.out, "--json", "--mode", "keyword")
            code2, out2, _ = run_cli("search", self.manifest, word, "--out", clean, "--json", "--mode", "keyword")
            self.assertEqual([h["chunk_id"] for h in json.loads(out)], [h["chunk_id"] for h in json.loads(out2)],
                             f"seed {seed}")


if __name__ == "__main__":
    unittest.main()
