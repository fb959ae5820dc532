"""The parallel test runner (the README's test command) counts what unittest ran and fails on any failure."""

from __future__ import annotations

import contextlib
import io
import unittest
from unittest import mock

from bastion_agent.testing import parallel

PASSED = "test_a (m.T.test_a) ... ok\n\n----------------------------------------------------------------------\nRan 3 tests in 0.1s\n\nOK (skipped=1)\n"
FAILED = "Ran 4 tests in 0.2s\n\nFAILED (failures=1, errors=2, skipped=1)\n"
CRASHED = "Traceback (most recent call last):\n  ...\nImportError: no module\n"


class RunnerTests(unittest.TestCase):
    def test_counts_come_from_unittests_closing_lines(self):
        self.assertEqual(parallel.Outcome("m", 0, PASSED, 1.0).counts(), (2, 0, 1))
        self.assertEqual(parallel.Outcome("m", 1, FAILED, 1.0).counts(), (0, 3, 1))
        self.assertEqual(parallel.Outcome("m", 1, CRASHED, 1.0).counts(), (0, 1, 0), "a module that never ran fails")

    def test_one_failing_module_fails_the_run_and_is_named(self):
        outcomes = {"pkg.test_good": parallel.Outcome("pkg.test_good", 0, PASSED, 2.0),
                    "pkg.test_bad": parallel.Outcome("pkg.test_bad", 1, FAILED, 1.0)}
        out = io.StringIO()
        with mock.patch.object(parallel, "run_module", side_effect=lambda name: outcomes[name]), \
                mock.patch.object(parallel, "_remember"), contextlib.redirect_stdout(out):
            code = parallel.main(["-j", "2", "pkg.test_good", "pkg.test_bad"])
        lines = out.getvalue().splitlines()
        self.assertEqual(code, 1)
        self.assertIn("FAILED: pkg.test_bad", lines)
        self.assertEqual(lines[-1], "2 passed, 3 failed, 2 skipped")
        self.assertIn("Ran 3 tests in 0.1s", lines, "each module's own output is printed whole")

    def test_every_test_module_of_the_package_is_found(self):
        found = parallel.test_modules()
        self.assertIn("bastion_agent.test_runner", found)
        self.assertIn("bastion_agent.test_embed", found)
        self.assertTrue(all(name.split(".")[-1].startswith("test_") for name in found))


if __name__ == "__main__":
    unittest.main()
