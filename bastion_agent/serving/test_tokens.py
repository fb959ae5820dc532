"""The tokens file as serve reads it: checks before reading, hashes only, reload on change, constant-time match."""

from __future__ import annotations

import json
import os
import unittest
from pathlib import Path

from bastion_agent.core.errors import ConfigError
from bastion_agent.serving import tokens
from bastion_agent.testing.testsupport import TempFolder


def write_file(path: Path, entries: list[dict], mode: int = 0o600) -> None:
    path.write_text(json.dumps({"version": 1, "tokens": entries}), encoding="utf-8")
    os.chmod(path, mode)


def entry(name: str, token: str, groups: list[str], reader: str | None = None) -> dict:
    return {"name": name, "hash": tokens.hash_token(token), "groups": groups, "reader": reader,
            "created": "2026-12-02T00:00:00Z"}


class TokenFileTests(TempFolder, unittest.TestCase):
    def setUp(self):
        self.tmp = self.make_tmp()
        self.path = self.tmp / "tokens.json"
        self.hr, self.eng = tokens.new_token(), tokens.new_token()
        write_file(self.path, [entry("hr-portal", self.hr, ["hr", "staff"], "reader_hr"), entry("eng", self.eng, ["eng"])])

    def refused(self, fragment: str) -> str:
        with self.assertRaises(ConfigError) as caught:
            tokens.read_tokens(self.path)
        message = str(caught.exception)
        self.assertIn(fragment, message)
        self.assertNotIn("\n", message)
        return message

    def test_a_token_is_bst_and_43_url_safe_characters_and_never_the_same(self):
        for token in (self.hr, self.eng):
            self.assertRegex(token, r"^bst_[A-Za-z0-9_-]{43}$")
        self.assertNotEqual(self.hr, self.eng)

    def test_each_token_names_its_caller_and_groups(self):
        book = tokens.TokenBook(self.path)
        self.assertEqual(book.caller(f"Bearer {self.hr}"), tokens.Caller("hr-portal", frozenset({"hr", "staff"}), "reader_hr"))
        self.assertEqual(book.caller(f"bearer  {self.eng} "), tokens.Caller("eng", frozenset({"eng"}), None))
        for header in (None, "", self.hr, f"Basic {self.hr}", f"Bearer {self.hr[:-1]}", "Bearer ",
                       f"Bearer {tokens.hash_token(self.hr)}", "Bearer \udcff"):
            with self.subTest(header=header):
                self.assertIsNone(book.caller(header))

    def test_the_single_token_is_a_caller_with_every_group(self):
        single = "correct-horse-battery-staple-42"
        book = tokens.TokenBook(self.path, single_token=single)
        self.assertEqual(book.caller(f"Bearer {single}"), tokens.Caller(tokens.SINGLE_TOKEN_NAME, None, None))
        self.assertEqual(book.caller(f"Bearer {self.eng}").name, "eng")
        self.assertEqual(tokens.TokenBook(None, single).caller(f"Bearer {single}").groups, None)

    def test_a_file_others_can_read_or_write_is_refused_in_one_line(self):
        for mode in (0o644, 0o640, 0o604, 0o620, 0o660):
            with self.subTest(mode=oct(mode)):
                os.chmod(self.path, mode)
                self.assertIn(f"{mode:04o}", self.refused("chmod 600"))
                with self.assertRaises(ConfigError):
                    tokens.TokenBook(self.path)

    @unittest.skipUnless(os.geteuid() == 0, "needs root to give the file to another user")
    def test_a_file_of_another_user_is_refused(self):
        os.chown(self.path, 65534, 65534)
        self.refused("belongs to another user")

    def test_a_link_a_folder_or_a_missing_file_is_refused(self):
        link = self.tmp / "link.json"
        link.symlink_to(self.path)
        with self.assertRaises(ConfigError) as caught:
            tokens.read_tokens(link)
        self.assertIn("symbolic link", str(caught.exception))
        with self.assertRaises(ConfigError):
            tokens.read_tokens(self.tmp)
        with self.assertRaises(ConfigError) as caught:
            tokens.read_tokens(self.tmp / "nope.json")
        self.assertIn("token add", str(caught.exception))

    def test_a_fifo_is_refused_without_waiting_for_a_writer(self):
        self.path.unlink()
        os.mkfifo(self.path, 0o600)
        self.refused("not a regular file")

    def test_a_huge_file_is_refused_without_being_read(self):
        with open(self.path, "wb") as handle:
            handle.truncate(64 * 1024 * 1024 * 1024)  # sparse: 64 GiB that would fill memory if read
        self.refused("larger than")

    def test_a_binary_or_malformed_file_is_refused(self):
        cases = {
            "binary": b"\x00\xff\xfe" * 100,
            "not an object": b"[1, 2]",
            "no version": json.dumps({"tokens": []}).encode(),
            "another version": json.dumps({"version": 2, "tokens": []}).encode(),
            "deep": b"[" * 100000,
            "extra key": json.dumps({"version": 1, "tokens": [], "x": 1}).encode(),
            "token in clear": json.dumps({"version": 1, "tokens": [{"name": "a", "hash": self.hr, "groups": ["a"]}]}).encode(),
            "bad group": json.dumps({"version": 1, "tokens": [entry("a", self.hr, ["HR"])]}).encode(),
            "path as group": json.dumps({"version": 1, "tokens": [entry("a", self.hr, ["../etc"])]}).encode(),
            "no groups": json.dumps({"version": 1, "tokens": [entry("a", self.hr, [])]}).encode(),
            "twice": json.dumps({"version": 1, "tokens": [entry("a", self.hr, ["a"]), entry("a", self.eng, ["b"])]}).encode(),
            "same token twice": json.dumps({"version": 1, "tokens": [entry("a", self.hr, ["a"]), entry("b", self.hr, ["b"])]}).encode(),
            "serve-token": json.dumps({"version": 1, "tokens": [entry("serve-token", self.hr, ["a"])]}).encode(),
            "bad reader": json.dumps({"version": 1, "tokens": [entry("a", self.hr, ["a"], "x; DROP ROLE y")]}).encode(),
            "colon name": json.dumps({"version": 1, "tokens": [entry("local:root", self.hr, ["a"])]}).encode(),
        }
        for name, data in cases.items():
            with self.subTest(name):
                self.path.write_bytes(data)
                self.refused(str(self.path))

    def test_a_change_is_seen_at_the_next_request_and_a_broken_file_refuses_every_named_token(self):
        book = tokens.TokenBook(self.path, single_token="correct-horse-battery-staple-42", log=lambda line: None)
        self.assertEqual(book.caller(f"Bearer {self.hr}").name, "hr-portal")
        write_file(self.path, [entry("eng", self.eng, ["eng"])])  # hr-portal revoked
        self.assertIsNone(book.caller(f"Bearer {self.hr}"))
        self.assertEqual(book.caller(f"Bearer {self.eng}").name, "eng")
        os.chmod(self.path, 0o644)  # a reload that fails: no stale tokens
        self.assertIsNone(book.caller(f"Bearer {self.eng}"))
        self.assertIn("0644", book.error)
        self.assertEqual(book.caller("Bearer correct-horse-battery-staple-42").name, tokens.SINGLE_TOKEN_NAME)
        os.chmod(self.path, 0o600)
        self.assertEqual(book.caller(f"Bearer {self.eng}").name, "eng")
        self.path.unlink()
        self.assertIsNone(book.caller(f"Bearer {self.eng}"))

    def test_a_check_that_refuses_a_token_fails_the_load_like_a_malformed_file(self):
        def no_reader_hr(entries):
            for item in entries:
                if item.reader == "reader_hr":
                    raise ConfigError(f"token {item.name}: its reader reads too much")

        with self.assertRaises(ConfigError):
            tokens.TokenBook(self.path, check=no_reader_hr)
        write_file(self.path, [entry("eng", self.eng, ["eng"])])
        book = tokens.TokenBook(self.path, check=no_reader_hr)
        self.assertEqual(book.caller(f"Bearer {self.eng}").name, "eng")
        write_file(self.path, [entry("eng", self.eng, ["eng"]), entry("hr-portal", self.hr, ["hr"], "reader_hr")])
        self.assertIsNone(book.caller(f"Bearer {self.eng}"))  # the whole file is refused, not just that token
        self.assertIn("reads too much", book.error)


if __name__ == "__main__":
    unittest.main()
