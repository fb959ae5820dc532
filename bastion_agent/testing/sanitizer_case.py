"""A test case that asks the sanitizer whether a value is gone and a look-alike kept, in one wording."""

from __future__ import annotations

import unittest

from bastion_agent.sanitizing.scanner import Sanitizer


class SanitizerCase(unittest.TestCase):
    def setUp(self):
        self.sanitizer = Sanitizer()

    def assert_gone(self, text: str, value: str):
        """No six characters of ``value`` survive (checked every third), and something was counted."""
        out, counts = self.sanitizer.redact(text)
        for piece in (value[i:i + 6] for i in range(0, max(1, len(value) - 5), 3)):
            self.assertNotIn(piece, out, f"a piece of {value!r} survived in {out!r}")
        self.assertGreater(sum(counts.values()), 0)

    def assert_kept(self, text: str):
        out, _ = self.sanitizer.redact(text)
        self.assertEqual(out, text, f"changed: {out!r}")
