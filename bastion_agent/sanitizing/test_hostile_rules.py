"""A hostile custom rule: a pattern that backtracks without end costs the sweep one document, named by rule."""

from __future__ import annotations

import json
import unittest

from bastion_agent.core.budget import REASON_TIME
from bastion_agent.testing.fresh_values import credential
from bastion_agent.testing.limited_sweep import LimitedSweepCase


BUDGET_SECONDS = 15


class BacktrackingRuleTests(LimitedSweepCase):
    def test_custom_rule_that_backtracks_fails_its_document_closed_by_rule_id(self):
        (self.docs / "aaa.txt").write_text("a" * 40 + "b", encoding="utf-8")
        # The pattern never ends on this text (2^40 ways to split the a's), so any budget stops it; one this
        # wide (the honest note takes milliseconds) keeps a loaded machine's slow worker start from failing the note.
        text = self.manifest.read_text().replace('root = "docs"', f'root = "docs"\nbudget_seconds = {BUDGET_SECONDS}')
        self.manifest.write_text(text + "\n[[sanitize.rules]]\nid = \"slow\"\npattern = '(a+)+$'\n")
        self.sweep("extract", "sanitize")
        sanitized = json.loads((self.out / "sanitize.summary.json").read_text())
        self.assertEqual(sanitized["skipped_by_reason"], {f"{REASON_TIME} (rule slow)": 1})
        self.assertEqual(sanitized["documents"], 1)  # the notes; the hostile text is not indexed
        listing = (self.out / "sanitized" / "listing.jsonl").read_text()
        self.assertNotIn("aaa.txt", listing)


class BlankRunTests(LimitedSweepCase):
    def test_a_megabyte_of_blanks_after_a_label_is_read_within_the_budget(self):
        # A space-aligned table's cell pattern once backtracked over every blank of a run (100,000 blanks
        # took minutes); read once, a megabyte of them takes milliseconds, far inside this budget.
        secret = credential()
        (self.docs / "blank.txt").write_text("x:" + " " * 1_000_000 + f"\npassword: {secret}\n", encoding="utf-8")
        text = self.manifest.read_text().replace('root = "docs"', f'root = "docs"\nbudget_seconds = {BUDGET_SECONDS}')
        self.manifest.write_text(text)
        self.sweep("extract", "sanitize")
        sanitized = json.loads((self.out / "sanitize.summary.json").read_text())
        self.assertEqual(sanitized["skipped_by_reason"], {})
        self.assertEqual(sanitized["documents"], 2)
        self.assertIn("blank.txt", (self.out / "sanitized" / "listing.jsonl").read_text())
        for path in (self.out / "sanitized").rglob("*"):
            if path.is_file():
                self.assertNotIn(secret, path.read_text(encoding="utf-8", errors="replace"))


if __name__ == "__main__":
    unittest.main()
