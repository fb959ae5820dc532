"""A folder of old and new notes on one random topic, swept once through the real stages for a test class.

The dates tests and the document view's share it: extract reads each
file's modification time from its inode, and ``[access]`` gives ``hr/**``
to group ``hr`` and everything else to ``staff``.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import unittest
from datetime import datetime, timezone
from pathlib import Path

from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import clean_env, run_cli, write_manifest

OLD = datetime(2019, 3, 4, 5, 6, 7, tzinfo=timezone.utc)
NEW = datetime(2026, 11, 20, 8, 0, 0, tzinfo=timezone.utc)
TOPICS = ("glacier", "harbour", "orchard", "lantern", "meadow", "quarry")


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def write_dated(root: Path, rel: str, text: str, moment: datetime) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    os.utime(path, (moment.timestamp(), moment.timestamp()))


class DatedFolder(unittest.TestCase):
    """A folder of old and new notes on one topic, swept once for the whole class."""

    @classmethod
    def setUpClass(cls):
        holder = tempfile.TemporaryDirectory()
        cls.addClassCleanup(holder.cleanup)
        cls.tmp = Path(holder.name)
        cls.manifest = write_manifest(cls.tmp, size=16, overlap=4, extra='\n[access]\ndefault = ["staff"]\n'
                                      '[[access.rules]]\npaths = ["hr/**"]\ngroups = ["hr"]\n')
        cls.out = cls.tmp / "out"
        cls.topic = random.choice(TOPICS)
        docs = cls.tmp / "docs"
        # The old notes name the topic more often, so an unfiltered search ranks them first.
        for number in range(4):
            write_dated(docs, f"old/note-{number}.txt", f"{cls.topic} {cls.topic} {cls.topic} old note {number}", OLD)
        for number in range(3):
            write_dated(docs, f"new/note-{number}.txt", f"the {cls.topic} report number {number} of this year", NEW)
        write_dated(docs, "hr/secret.txt", f"{cls.topic} {cls.topic} payroll of the board", NEW)
        # One text at two paths: the hit is dated by the later file.
        write_dated(docs, "copy/a.txt", f"shared {cls.topic} checklist for the depot", OLD)
        write_dated(docs, "copy/b.txt", f"shared {cls.topic} checklist for the depot", NEW)
        # Other subjects, so that the topic is a word that tells windows apart (keyword search weighs it).
        for number, subject in enumerate(("budget", "violin", "kerosene", "sourdough", "bicycle", "compiler") * 3):
            write_dated(docs, f"misc/{number}.txt", f"a page about the {subject} and nothing else {number}", NEW)
        cls.extra_files(docs)
        cls.stub = StubServer()
        cls.stub.__enter__()
        cls.addClassCleanup(cls.stub.__exit__, None, None, None)
        with clean_env(EMBED_URL=cls.stub.url):
            code, _, err = run_cli("sweep", cls.manifest, "--out", cls.out, "--quiet")
        assert code == 0, err

    @classmethod
    def extra_files(cls, docs: Path) -> None:
        """More files a test class writes into the folder before the sweep (none here)."""

    def search(self, *extra) -> tuple[int, list | str, str]:
        with clean_env(EMBED_URL=self.stub.url):
            code, out, err = run_cli("search", self.manifest, self.topic, "--out", self.out, "--json", *extra)
        return code, (json.loads(out) if code == 0 else out), err
