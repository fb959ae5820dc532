"""``status``: what is current, what was skipped and why, what waits, what answers; and nothing it should not say."""

from __future__ import annotations

import json
import os
import secrets
import unittest

from bastion_agent.core.errors import EXIT_DONE_WITH_SKIPPED
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import TempFolder, clean_env, closed_port_url, run_cli, write_manifest
from bastion_agent.watching.lock import WatchLock

PLANTED_KEY = "AKIA" + "".join(secrets.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") for _ in range(16))


class StatusCase(TempFolder, unittest.TestCase):
    def setUp(self):
        self.tmp = self.make_tmp()
        self.manifest = write_manifest(self.tmp, extra="\n[[sanitize.rules]]\nid = \"slow\"\npattern = '(a+)+$'\n")
        self.manifest.write_text(self.manifest.read_text().replace('root = "docs"', 'root = "docs"\nbudget_seconds = 8'))
        self.secret_text = f"the ledger {secrets.token_hex(6)} sits in the safe"
        (self.tmp / "docs" / "notes.txt").write_text(self.secret_text, encoding="utf-8")
        (self.tmp / "docs" / f"{PLANTED_KEY}.txt").write_text("a" * 40 + "b", encoding="utf-8")
        self.out = self.tmp / "out"

    def status(self, url: str, *extra: str):
        with clean_env(EMBED_URL=url):
            return run_cli("status", self.manifest, "--out", self.out, *extra)

    def sweep(self, url: str):
        with clean_env(EMBED_URL=url):
            return run_cli("sweep", self.manifest, "--out", self.out)


class HostileStatusTests(StatusCase):
    def test_a_secret_in_a_skipped_file_name_and_the_texts_never_reach_the_status(self):
        with StubServer() as stub:
            self.assertEqual(self.sweep(stub.url)[0], EXIT_DONE_WITH_SKIPPED)
            for extra in ((), ("--json",)):
                code, out, err = self.status(stub.url, *extra)
                with self.subTest(extra=extra):
                    self.assertEqual(code, 0, err)
                    self.assertNotIn(PLANTED_KEY, out + err)
                    self.assertNotIn(self.secret_text, out + err)
                    self.assertIn("[REDACTED:aws-access-key].txt", out)


class StatusTests(StatusCase):
    def test_skipped_files_pending_windows_services_and_the_watcher(self):
        with StubServer() as stub:
            self.sweep(stub.url)
            code, out, _ = self.status(stub.url, "--json")
            report = json.loads(out)
            self.assertEqual(report["model_server"], "ok")
        self.assertEqual([(row["stage"], row["reason"]) for row in report["skipped_files"]],
                         [("sanitize", "too_costly: time (rule slow)")])
        self.assertEqual(report["windows_pending"], 0)
        self.assertGreater(report["windows"], 0)
        self.assertEqual(report["watcher"], {"running": False, "pid": None})
        self.assertTrue(report["central_database"].startswith("not configured"))
        self.assertIn("embed", report["last_sweep"])
        with WatchLock(self.out):
            code, out, _ = self.status(closed_port_url(), "--json")
        report = json.loads(out)
        self.assertEqual(report["watcher"], {"running": True, "pid": os.getpid()})
        self.assertTrue(report["model_server"].startswith("unreachable: cannot reach the model server"))

    def test_windows_that_wait_for_vectors_and_since_when(self):
        code, _, _ = self.sweep(closed_port_url())
        self.assertNotEqual(code, 0)
        code, out, err = self.status(closed_port_url())
        self.assertEqual(code, 0, err)
        self.assertRegex(out, r"windows: (\d+), \1 waiting for vectors")
        self.assertIn("embed: failing since ", out)
        self.assertIn("watcher: not running", out)


if __name__ == "__main__":
    unittest.main()
