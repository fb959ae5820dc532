"""Redacted paths remembered while a watcher runs: the same answers, never another settings' answer, bounded."""

from __future__ import annotations

import secrets
import unittest
from unittest import mock

from bastion_agent.sanitizing import path_memo
from bastion_agent.sanitizing.scanner import Sanitizer
from bastion_agent.sanitizing.settings import SanitizeSettings


def secret_path() -> str:
    """A file name holding a password, fresh each call."""
    return f"ops/password={secrets.choice('ABCDEFGH')}{secrets.token_hex(6)}Pw9.txt"


class HostilePathMemoTests(unittest.TestCase):
    def test_a_path_redacted_under_one_settings_is_never_the_answer_under_others(self):
        path = secret_path()
        strict, lax = Sanitizer(), Sanitizer(SanitizeSettings(disable=("secret",)))
        with path_memo.remembered():
            kept = strict.redact_path(path)
            self.assertNotIn(path.split("=")[1][:-4], kept)
            self.assertEqual(lax.redact_path(path), Sanitizer(SanitizeSettings(disable=("secret",)))._redact_path(path))
            self.assertNotEqual(lax.redact_path(path), kept)
            self.assertEqual(strict.redact_path(path), kept)

    def test_memory_stays_bounded(self):
        sanitizer = Sanitizer()
        with mock.patch.object(path_memo, "MAX_PATHS", 50), path_memo.remembered():
            for number in range(500):
                sanitizer.redact_path(f"notes/file{number}.txt")
                self.assertLessEqual(len(path_memo._paths), 50)


class PathMemoTests(unittest.TestCase):
    def test_answers_are_the_scanners_and_are_forgotten_when_the_watcher_ends(self):
        sanitizer = Sanitizer()
        paths = [secret_path(), "plain/notes.txt", "n/+41 44 668 18 11 call log.txt"]
        with path_memo.remembered():
            first = [sanitizer.redact_path(path) for path in paths]
            self.assertEqual(len(path_memo._paths), len(paths))
            self.assertEqual([sanitizer.redact_path(path) for path in paths], first)
        self.assertEqual(first, [sanitizer._redact_path(path) for path in paths])
        self.assertEqual(path_memo._paths, {})

    def test_nothing_is_remembered_outside_a_watcher(self):
        Sanitizer().redact_path(secret_path())
        self.assertEqual(path_memo._paths, {})


if __name__ == "__main__":
    unittest.main()
