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


class RunScalingTests(LimitedSweepCase):
    """Runs of one character that a pattern or loop once read again from each of its characters.

    Each input is far beyond what the old paths finish within the budget (quadratic ones: hours), and the
    linear paths read it in about a second, so a wide budget separates them with no timing threshold.
    """

    def assert_read_within_budget(self, name: str, run: str):
        secret = credential()
        (self.docs / name).write_text(run + f"\npassword: {secret}\n", encoding="utf-8")
        text = self.manifest.read_text().replace('root = "docs"', f'root = "docs"\nbudget_seconds = {BUDGET_SECONDS}')
        self.manifest.write_text(text)
        self.sweep("extract", "sanitize")
        sanitized = json.loads((self.out / "sanitize.summary.json").read_text())
        self.assertEqual(sanitized["skipped_by_reason"], {})
        self.assertEqual(sanitized["documents"], 2)
        self.assertIn(name, (self.out / "sanitized" / "listing.jsonl").read_text())
        for path in (self.out / "sanitized").rglob("*"):
            if path.is_file():
                self.assertNotIn(secret, path.read_text(encoding="utf-8", errors="replace"))

    def test_a_megabyte_of_blanks_after_a_label_is_read_within_the_budget(self):
        # A space-aligned table's cell pattern backtracked over every blank of a run after its lead
        # (100,000 blanks after ``x:``: minutes).
        self.assert_read_within_budget("blank.txt", "x:" + " " * 1_000_000)

    def test_a_megabyte_of_tabs_on_a_line_is_read_within_the_budget(self):
        # A tab leads a cell (columns) and a name marker (names) and is also their padding: a pass failing
        # at each tab of the run read the rest of it again (32,000 tabs: half a minute).
        self.assert_read_within_budget("tabs.tsv", "x\n" + "\t" * 1_000_000)

    def test_a_megabyte_of_blanks_after_a_key_is_read_within_the_budget(self):
        # The block-value rule split the blanks after ``token:`` between two quantifiers every way before
        # failing at the line's end (32,000 blanks: five seconds).
        self.assert_read_within_budget("blanks.yaml", "token:" + " " * 1_000_000)

    def test_two_megabytes_of_percent_escapes_after_a_key_are_read_within_the_budget(self):
        # Each decoded escape walked up to a kilobyte either side to the nearest blank (two megabytes: over
        # a minute); each character is now walked once.
        self.assert_read_within_budget("escaped.txt", "token=" + "%2F" * 700_000)

    def test_many_keys_each_before_a_line_of_blanks_are_read_within_the_budget(self):
        # The assignment rule split the blanks after each key between two quantifiers every way (its window is
        # bounded, so a fifth of a second per key); five hundred such keys took about two minutes.
        self.assert_read_within_budget("keys.txt", ("password" + " " * 4000 + "\n") * 500)

    def test_a_macro_before_a_run_of_blanks_is_read_within_the_budget(self):
        # The macro rule repeated a run of blanks inside a repeated group: exponential, 25 blanks after
        # ``#define`` took seconds and a thousand never finish; one step per blank reads them at once.
        self.assert_read_within_budget("macro.h", "#define" + " " * 1000)


if __name__ == "__main__":
    unittest.main()
