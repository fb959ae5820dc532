"""Hostile files: each costs the agent one file at most.

Every case writes the attacker's input, runs the stage in a subprocess
under ``RLIMIT_AS`` (so a regression fails instead of swapping), and
checks that the stage ends normally, the other files are read, and the
hostile one is reported with its reason.
"""

from __future__ import annotations

import json
import unittest
from unittest import mock

from bastion_agent.core.budget import WorkerPool
from bastion_agent.core.layout import Layout
from bastion_agent.extracting import extract
from bastion_agent.extracting.formats.base import REASON_OUTPUT
from bastion_agent.testing.hostile_files import eml_header_bomb, xlsx_shared_string_bomb
from bastion_agent.testing.limited_sweep import LimitedSweepCase
from bastion_agent.testing.testsupport import clean_env


class HostileFileTests(LimitedSweepCase):
    def test_xlsx_shared_string_bomb_is_capped_as_it_is_produced(self):
        (self.docs / "bomb.xlsx").write_bytes(xlsx_shared_string_bomb())
        self.assertLess((self.docs / "bomb.xlsx").stat().st_size, 4000)
        summary = self.sweep("extract", "sanitize")
        rows = self.listing()
        self.assertEqual((rows["bomb.xlsx"]["status"], rows["bomb.xlsx"]["reason"]), ("skipped", REASON_OUTPUT))
        self.assertEqual(summary["skipped_by_reason"], {REASON_OUTPUT: 1})
        self.assertEqual(rows["notes.txt"]["status"], "extracted")
        sanitized = json.loads((self.out / "sanitize.summary.json").read_text())
        self.assertEqual(sanitized["documents"], 1)

    def test_a_costly_file_is_not_read_again_until_it_changes(self):
        bomb = self.docs / "bomb.xlsx"
        bomb.write_bytes(xlsx_shared_string_bomb())
        self.sweep("extract")
        manifest = __import__("bastion_agent.config.manifest", fromlist=["load"]).load(self.manifest)
        sent = []
        original = WorkerPool.ordered

        def counting(pool, items):
            return original(pool, ((payload, sent.append(call) or call) for payload, call in items))

        with mock.patch.object(WorkerPool, "ordered", counting), clean_env():
            summary = extract.run(manifest, Layout(self.out))
        self.assertEqual([call for call in sent if call is not None], [])  # neither the bomb nor the reused notes
        self.assertEqual(summary["skipped_by_reason"], {REASON_OUTPUT: 1})
        bomb.write_bytes(b"not a zip any more")
        with clean_env():
            summary = extract.run(manifest, Layout(self.out))
        self.assertEqual(summary["skipped_by_reason"], {"damaged": 1})  # changed bytes: read again

    def test_eml_subject_bomb_and_long_to_are_read_in_linear_time_and_memory(self):
        (self.docs / "bomb.eml").write_bytes(eml_header_bomb())
        self.assertLess((self.docs / "bomb.eml").stat().st_size, 1_000_000)
        summary = self.sweep("extract")
        rows = self.listing()
        self.assertEqual(rows["bomb.eml"]["status"], "extracted", rows["bomb.eml"])
        self.assertEqual(summary["extracted"], 2)
        text = (self.out / "extract" / f"{rows['bomb.eml']['key']}.txt").read_text()
        self.assertTrue(text.startswith("Subject: 0123456789012"))  # encoded words joined, as RFC 2047 says
        self.assertIn("u1999@example.org", text)

    def test_unclosed_html_markup_is_read_in_linear_time(self):
        (self.docs / "ends.html").write_bytes(b"<p>kept</p>" + b"</" * 1_000_000)
        (self.docs / "decls.html").write_bytes(b"<p>kept</p>" + b"<!" * 1_000_000)
        # A budget far above what linear parsing needs and far below the old quadratic minutes.
        self.manifest.write_text(self.manifest.read_text().replace('root = "docs"', 'root = "docs"\nbudget_seconds = 60'))
        summary = self.sweep("extract")
        rows = self.listing()
        for name in ("ends.html", "decls.html"):
            self.assertEqual(rows[name]["status"], "extracted", rows[name])
        self.assertEqual(summary["extracted"], 3)


if __name__ == "__main__":
    unittest.main()
