"""Access labels at sanitize: rules first, the default, the file system's groups, and only names leave."""

from __future__ import annotations

import grp
import json
import os
import unittest

from bastion_agent.core.access import AccessRule, AccessSettings, is_group_name
from bastion_agent.core.confine import SourceRoot
from bastion_agent.core.layout import Layout, read_jsonl
from bastion_agent.sanitizing.labels import Labeller
from bastion_agent.testing.testsupport import TempFolder, clean_env, run_cli, write_manifest

RULES = """
[access]
default = ["staff"]

[[access.rules]]
paths = ["hr/**"]
groups = ["hr"]

[[access.rules]]
paths = ["hr/public/**", "board/"]
groups = ["board"]
"""


class LabelStageTests(TempFolder, unittest.TestCase):
    def setUp(self):
        self.tmp = self.make_tmp()
        self.docs = self.tmp / "docs"
        self.out = self.tmp / "out"

    def write(self, path: str, text: str, mode: int = 0o644) -> None:
        target = self.docs / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        os.chmod(target, mode)

    def sanitize(self, extra: str = "", source: str = "") -> dict[str, list[str]]:
        """Run extract and sanitize; the listing's groups by the (first) path of each document."""
        manifest = write_manifest(self.tmp, extra=extra)
        if source:
            manifest.write_text(manifest.read_text(encoding="utf-8").replace('root = "docs"\n', f'root = "docs"\n{source}\n'),
                                encoding="utf-8")
        for stage in ("extract", "sanitize"):
            with clean_env():
                code, _, err = run_cli(stage, manifest, "--out", self.out)
            self.assertEqual(code, 0, err)
        rows = read_jsonl(Layout(self.out).sanitized_listing)
        return {path: row["groups"] for row in rows for path in row["paths"]}

    def summary(self) -> dict:
        return json.loads((self.out / "sanitize.summary.json").read_text(encoding="utf-8"))

    def test_first_matching_rule_wins_and_the_rest_get_the_default(self):
        self.write("hr/pay.txt", "Salary review for the quarter.")
        self.write("hr/public/holidays.txt", "Office closed on the first Monday.")
        self.write("board/minutes.txt", "The board met on Tuesday.")
        self.write("eng/design.txt", "The parser reads tokens.")
        groups = self.sanitize(RULES)
        self.assertEqual(groups["hr/pay.txt"], ["hr"])
        self.assertEqual(groups["hr/public/holidays.txt"], ["hr"])  # "hr/**" comes first
        self.assertEqual(groups["board/minutes.txt"], ["board"])
        self.assertEqual(groups["eng/design.txt"], ["staff"])

    def test_a_document_at_several_paths_gets_the_union(self):
        self.write("hr/copy.txt", "The same memo, word for word.")
        self.write("eng/copy.txt", "The same memo, word for word.")
        groups = self.sanitize(RULES)
        self.assertEqual(groups["hr/copy.txt"], ["hr", "staff"])
        self.assertEqual(groups["eng/copy.txt"], ["hr", "staff"])

    def test_without_access_every_document_has_no_group(self):
        self.write("a.txt", "Plain words here.")
        self.assertEqual(self.sanitize(), {"a.txt": []})
        self.assertEqual(self.summary()["documents_without_group"], 1)

    def test_labels_follow_the_manifest_without_a_change_to_the_text(self):
        self.write("hr/pay.txt", "Salary review for the quarter.")
        self.assertEqual(self.sanitize(RULES)["hr/pay.txt"], ["hr"])
        self.assertEqual(self.sanitize(RULES.replace('groups = ["hr"]', 'groups = ["people"]'))["hr/pay.txt"], ["people"])

    def test_groups_from_permissions_group_readable_versus_world_readable(self):
        gid = os.getegid()
        try:
            name = grp.getgrgid(gid).gr_name
        except KeyError:
            self.skipTest("this process's group has no name in the group database")
        if not is_group_name(name):
            self.skipTest(f"this process's group name {name!r} is not a valid group name")
        self.write("team/plan.txt", "The plan for the team.", 0o640)
        self.write("open/notes.txt", "Notes anyone may read.", 0o644)
        self.write("own/diary.txt", "Only the owner reads this.", 0o600)
        self.write("hr/pay.txt", "Salary review for the quarter.", 0o640)
        os.chown(self.docs / "team/plan.txt", -1, gid)
        groups = self.sanitize(RULES, "groups_from_permissions = true")
        self.assertEqual(groups["team/plan.txt"], [name])
        self.assertEqual(groups["open/notes.txt"], ["staff"])
        self.assertEqual(groups["own/diary.txt"], [])  # owner only: fail closed
        self.assertEqual(groups["hr/pay.txt"], ["hr"])  # a rule still wins


class LabellerTests(TempFolder, unittest.TestCase):
    """The labeller on its own: a file-system group name that may not leave is dropped and counted."""

    def setUp(self):
        self.root = self.make_tmp()
        (self.root / "team.txt").write_text("x", encoding="utf-8")
        os.chmod(self.root / "team.txt", 0o640)

    def labeller(self, clean_name) -> Labeller:
        return Labeller(AccessSettings(default=("staff",), from_permissions=True), self.root, clean_name)

    def test_a_group_name_the_sanitizer_would_change_is_never_written(self):
        labeller = self.labeller(lambda name: "[PERSON]")
        with SourceRoot(self.root) as source:
            self.assertEqual(labeller.document_groups(["team.txt"], source), [])
        self.assertEqual((labeller.counts.groups_dropped, labeller.counts.without_group), (1, 1))

    def test_a_file_gone_since_extract_gets_no_group(self):
        labeller = self.labeller(lambda name: name)
        with SourceRoot(self.root) as source:
            self.assertEqual(labeller.document_groups(["gone.txt"], source), [])

    def test_rules_are_matched_before_permissions(self):
        settings = AccessSettings(rules=(AccessRule(("*.txt",), ("docs",)),), from_permissions=True)
        with SourceRoot(self.root) as source:
            self.assertEqual(Labeller(settings, self.root, lambda n: n).document_groups(["team.txt"], source), ["docs"])


if __name__ == "__main__":
    unittest.main()
