"""``token add | list | revoke``: the token once on stdout, only its hash in a 0600 file, one-line errors."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import unittest
from concurrent.futures import ThreadPoolExecutor

from bastion_agent.commands import token_cli
from bastion_agent.serving import tokens
from bastion_agent.testing.testsupport import TempFolder, clean_env, run_cli


class TokenCommandTests(TempFolder, unittest.TestCase):
    def setUp(self):
        self.tmp = self.make_tmp()
        self.path = self.tmp / "conf" / "tokens.json"

    def token(self, *argv):
        with clean_env(BASTION_SERVE_TOKENS=str(self.path)):
            return run_cli("token", *argv)

    def assert_refused(self, result, *fragments):
        code, out, err = result
        self.assertNotEqual(code, 0)
        self.assertEqual(out, "")
        self.assertTrue(err.startswith("bastion_agent token: "), err)
        self.assertEqual(err.count("\n"), 1, err)
        for fragment in fragments:
            self.assertIn(fragment, err)

    def test_add_prints_the_token_alone_and_the_file_holds_only_its_hash(self):
        code, out, err = self.token("add", "hr-portal", "--groups", "staff,hr", "--reader", "reader_hr")
        self.assertEqual(code, 0)
        token = out.strip()
        self.assertEqual(out, token + "\n")
        self.assertRegex(token, r"^bst_[A-Za-z0-9_-]{43}$")
        self.assertNotIn(token, err)
        raw = self.path.read_text(encoding="utf-8")
        self.assertNotIn(token, raw)
        self.assertNotIn(token[4:], raw)
        self.assertIn("sha256:" + hashlib.sha256(token.encode()).hexdigest(), raw)
        self.assertEqual(stat.S_IMODE(self.path.stat().st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(self.path.parent.stat().st_mode), 0o700)
        (row,) = json.loads(raw)["tokens"]
        self.assertEqual((row["name"], row["groups"], row["reader"]), ("hr-portal", ["hr", "staff"], "reader_hr"))
        self.assertEqual(tokens.TokenBook(self.path).caller(f"Bearer {token}").groups, frozenset({"hr", "staff"}))

    def test_list_shows_names_groups_reader_and_time_never_a_hash(self):
        first = self.token("add", "hr-portal", "--groups", "hr")[1].strip()
        self.token("add", "eng", "--groups", "eng", "--reader", "reader_eng")
        for argv in (("list",), ("list", "--json")):
            code, out, err = self.token(*argv)
            self.assertEqual((code, err), (0, ""))
            self.assertIn("hr-portal", out)
            self.assertIn("reader_eng", out)
            self.assertNotIn("sha256", out)
            self.assertNotIn(first, out)
        rows = json.loads(self.token("list", "--json")[1])
        self.assertEqual([(row["name"], row["groups"]) for row in rows], [("hr-portal", ["hr"]), ("eng", ["eng"])])

    def test_revoke_removes_the_token_for_the_next_request(self):
        token = self.token("add", "hr-portal", "--groups", "hr")[1].strip()
        book = tokens.TokenBook(self.path)
        self.assertIsNotNone(book.caller(f"Bearer {token}"))
        self.assertEqual(self.token("revoke", "hr-portal")[0], 0)
        self.assertIsNone(book.caller(f"Bearer {token}"))
        self.assertEqual(self.token("list")[1], "no tokens\n")

    def test_mistakes_are_one_line_and_change_nothing(self):
        self.token("add", "hr-portal", "--groups", "hr")
        before = self.path.read_bytes()
        self.assert_refused(self.token("add", "hr-portal", "--groups", "eng"), "exists already")
        self.assert_refused(self.token("revoke", "nobody"), "no token named 'nobody'")
        self.assert_refused(self.token("add", "x", "--groups", "HR"), "not a group name")
        self.assert_refused(self.token("add", "x", "--groups", "hr,../etc"), "not a group name")
        self.assert_refused(self.token("add", "x", "--groups", ","), "at least one group")
        self.assert_refused(self.token("add", "Local:root", "--groups", "hr"), "token name")
        self.assert_refused(self.token("add", "serve-token", "--groups", "hr"), "BASTION_SERVE_TOKEN")
        self.assert_refused(self.token("add", "x", "--groups", "hr", "--reader", "a b"), "not a role name")
        self.assertEqual(self.path.read_bytes(), before)
        with clean_env():
            self.assert_refused(run_cli("token", "list"), "set BASTION_SERVE_TOKENS")
        os.chmod(self.path, 0o644)
        self.assert_refused(self.token("add", "y", "--groups", "hr"), "0644")
        self.assertEqual(self.path.read_bytes(), before)

    def test_adds_at_once_lose_none(self):
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda n: token_cli.add_token(self.path, f"t{n}", ("g",)), range(16)))
        self.assertEqual(len(tokens.read_tokens(self.path)), 16)


if __name__ == "__main__":
    unittest.main()
