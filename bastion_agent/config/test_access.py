"""The manifest's ``[access]`` table and ``[source] groups_from_permissions``: valid labels load, bad ones are one line."""

from __future__ import annotations

import unittest

from bastion_agent.config import manifest as manifest_module
from bastion_agent.core import access
from bastion_agent.core.errors import ManifestError
from bastion_agent.testing.testsupport import TempFolder, clean_env, run_cli, write_manifest

ACCESS = """
[access]
default = ["staff"]
local_groups = ["staff", "eng"]

[[access.rules]]
paths = ["hr/**"]
groups = ["hr"]

[[access.rules]]
paths = ["*.board.md", "exec/"]
groups = ["board", "hr"]
"""

# (name, extra manifest text, words the one-line error must contain)
INVALID = [
    ("unknown access key", '[access]\ndefaults = ["x"]\n', ["unknown key 'defaults'", "[access]"]),
    ("default not a list", '[access]\ndefault = "staff"\n', ["[access] default", "list of group names"]),
    ("upper-case group", '[access]\ndefault = ["Staff"]\n', ["[access] default", "lowercase", "'Staff'"]),
    ("group with a slash", '[access]\ndefault = ["hr/x"]\n', ["[access] default", "'hr/x'"]),
    ("group too long", f'[access]\ndefault = ["{"a" * 64}"]\n', ["[access] default", "at most 63"]),
    ("empty group", '[access]\ndefault = [""]\n', ["[access] default", "''"]),
    ("group a number", "[access]\ndefault = [7]\n", ["[access] default", "7"]),
    ("local groups bad", '[access]\nlocal_groups = ["-x"]\n', ["[access] local_groups", "'-x'"]),
    ("local groups a string", '[access]\nlocal_groups = "hr"\n', ["[access] local_groups", "list"]),
    ("rules not a list", '[access]\nrules = "hr/**"\n', ["[access] rules", "list of tables"]),
    ("rule without groups", '[[access.rules]]\npaths = ["hr/**"]\n', ["[access.rules[0]] groups", "missing"]),
    ("rule without paths", '[[access.rules]]\ngroups = ["hr"]\n', ["[access.rules[0]] paths", "missing"]),
    ("rule paths empty", '[[access.rules]]\npaths = []\ngroups = ["hr"]\n', ["[access.rules[0]] paths", "non-empty"]),
    ("rule glob only a slash", '[[access.rules]]\npaths = ["/"]\ngroups = ["hr"]\n', ["[access.rules[0]] paths", "empty"]),
    ("rule bad group", '[[access.rules]]\npaths = ["a"]\ngroups = ["HR"]\n', ["[access.rules[0]] groups", "'HR'"]),
    ("rule unknown key", '[[access.rules]]\npaths = ["a"]\ngroups = ["hr"]\ngroup = ["x"]\n',
     ["[access.rules[0]] group", "allowed: groups, paths"]),
    ("second rule bad", '[[access.rules]]\npaths = ["a"]\ngroups = ["hr"]\n[[access.rules]]\npaths = ["b"]\ngroups = "hr"\n',
     ["[access.rules[1]] groups", "list"]),
    ("rules of numbers", "[access]\nrules = [1]\n", ["[access] rules", "list of tables"]),
]


class AccessManifestTests(TempFolder, unittest.TestCase):
    def setUp(self):
        self.tmp = self.make_tmp()

    def load(self, extra: str = "", source: str = ""):
        path = write_manifest(self.tmp, extra=extra)
        if source:
            path.write_text(path.read_text(encoding="utf-8").replace('root = "docs"\n', f'root = "docs"\n{source}\n'),
                            encoding="utf-8")
        with clean_env():
            return manifest_module.load(path)

    def test_rules_default_and_local_groups_are_read(self):
        settings = self.load(ACCESS).access
        self.assertEqual(settings.default, ("staff",))
        self.assertEqual(settings.local_groups, frozenset({"staff", "eng"}))
        self.assertEqual([rule.groups for rule in settings.rules], [("hr",), ("board", "hr")])
        self.assertTrue(settings.rules[0].globs.matches("hr/pay/2026.xlsx"))
        self.assertTrue(settings.rules[1].globs.matches("notes/q3.board.md"))
        self.assertTrue(settings.rules[1].globs.matches("exec/plan.txt"))
        self.assertFalse(settings.rules[0].globs.matches("eng/hr.txt"))
        self.assertFalse(settings.from_permissions)

    def test_without_access_no_document_has_a_group_and_the_local_user_sees_everything(self):
        settings = self.load().access
        self.assertEqual((settings.default, settings.rules, settings.local_groups), ((), (), None))

    def test_groups_are_sorted_without_repeats(self):
        settings = self.load('[access]\ndefault = ["staff", "eng", "staff"]\n').access
        self.assertEqual(settings.default, ("eng", "staff"))

    def test_an_empty_local_groups_sees_nothing_rather_than_everything(self):
        self.assertEqual(self.load("[access]\nlocal_groups = []\n").access.local_groups, frozenset())

    def test_groups_from_permissions_is_a_switch(self):
        self.assertTrue(self.load(source="groups_from_permissions = true").access.from_permissions)
        with self.assertRaises(ManifestError) as caught:
            self.load(source='groups_from_permissions = "yes"')
        self.assertIn("[source] groups_from_permissions must be true or false", str(caught.exception))

    def test_invalid_access_values_are_one_line_naming_the_key(self):
        for name, extra, words in INVALID:
            with self.subTest(name):
                with self.assertRaises(ManifestError) as caught:
                    self.load(extra)
                message = str(caught.exception)
                self.assertNotIn("\n", message)
                for word in words:
                    self.assertIn(word, message)

    def test_a_bad_access_table_stops_a_stage_with_one_line_and_nothing_written(self):
        path = write_manifest(self.tmp, extra='[access]\ndefault = ["Bad Name"]\n')
        with clean_env():
            code, out, err = run_cli("extract", path, "--out", self.tmp / "out")
        self.assertNotEqual(code, 0)
        self.assertEqual(out, "")
        self.assertEqual(len(err.strip().splitlines()), 1)
        self.assertIn("[access] default", err)
        self.assertFalse((self.tmp / "out").exists())


class GroupNameTests(unittest.TestCase):
    def test_the_shared_rule(self):
        for name in ("hr", "eng-staff", "a", "0day", "x_y", "a" * 63):
            self.assertTrue(access.is_group_name(name), name)
        for name in ("", "HR", "-hr", "_hr", "hr staff", "hr/x", "a" * 64, "hr\n", "é", None, 7):
            self.assertFalse(access.is_group_name(name), repr(name))

    def test_a_command_lines_list(self):
        self.assertEqual(access.parse_group_list("staff,hr"), frozenset({"hr", "staff"}))
        with self.assertRaises(ValueError):
            access.parse_group_list("hr,,staff")

    def test_a_caller_sees_a_document_iff_they_share_a_group(self):
        self.assertTrue(access.can_see(None, ()))
        self.assertTrue(access.can_see(frozenset({"hr"}), ("hr", "staff")))
        self.assertFalse(access.can_see(frozenset({"eng"}), ("hr",)))
        self.assertFalse(access.can_see(frozenset({"eng"}), ()))  # no group: only every group sees it
        self.assertFalse(access.can_see(frozenset(), ("hr",)))


if __name__ == "__main__":
    unittest.main()
