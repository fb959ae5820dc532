"""Stages run as ``python -m bastion_agent`` under an address-space limit, on a folder with one honest file.

A hostile input must cost the agent one file at most: run in a subprocess
under ``RLIMIT_AS``, a regression that allocates without end fails the test
instead of swapping the machine. The honest file shows that the rest of
the folder is still read.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import unittest
from pathlib import Path

from bastion_agent.core import catalogue
from bastion_agent.core.layout import Layout
from bastion_agent.testing.testsupport import run_python_limited, write_manifest

STAGE_MEMORY_LIMIT = 1536 << 20  # the whole stage, parent and workers, stays under 1.5 GiB of address space


def run_limited(*args: str, limit: int = STAGE_MEMORY_LIMIT, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m bastion_agent ARGS`` under an address-space limit (inherited by its workers)."""
    code = (
        "import runpy, sys; "
        f"sys.argv = ['bastion_agent'] + {list(args)!r}; "
        "runpy.run_module('bastion_agent', run_name='__main__', alter_sys=True)"
    )
    return run_python_limited(code, limit, timeout)


class LimitedSweepCase(unittest.TestCase):
    """A manifest over ``docs/`` holding ``notes.txt``; ``sweep`` runs stages under the limit."""

    def setUp(self):
        holder = tempfile.TemporaryDirectory()
        self.addCleanup(holder.cleanup)
        self.tmp = Path(holder.name)
        self.manifest = write_manifest(self.tmp, extra="")
        self.docs = self.tmp / "docs"
        (self.docs / "notes.txt").write_text("honest notes about the budget review", encoding="utf-8")
        self.out = self.tmp / "out"

    def sweep(self, *stages: str) -> dict:
        for stage in stages:
            result = run_limited(stage, str(self.manifest), "--out", str(self.out))
            self.assertEqual(result.returncode, 0, result.stderr)
        return json.loads((self.out / "extract.summary.json").read_text())

    def listing(self) -> dict:
        """The extract listing by path, each row as its line on disk (``ListingRow.listed``)."""
        return {row.path: row.listed() for row in catalogue.read_extract_listing(Layout(self.out).extract_listing)}
