"""Hostile output folders: shared 1777 folders, folders another user made, a project folder, stale temporary files."""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
import unittest
from pathlib import Path

from bastion_agent.core.layout import OUT_MARKER
from bastion_agent.testing.limited_sweep import run_limited
from bastion_agent.testing.testsupport import write_manifest


class OutFolderTests(unittest.TestCase):
    def setUp(self):
        holder = tempfile.TemporaryDirectory()
        self.addCleanup(holder.cleanup)
        self.tmp = Path(holder.name)
        self.manifest = write_manifest(self.tmp)
        (self.tmp / "docs" / "a.txt").write_text("some text to index", encoding="utf-8")

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return run_limited(*args)

    def test_a_shared_1777_folder_keeps_its_mode(self):
        shared = self.tmp / "shared"
        shared.mkdir()
        shared.chmod(0o1777)
        result = self.cli("extract", str(self.manifest), "--out", str(shared))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(stat.S_IMODE(shared.stat().st_mode), 0o1777)
        self.assertEqual(stat.S_IMODE((shared / "extract").stat().st_mode), 0o700)
        self.assertTrue((shared / OUT_MARKER).is_file())

    @unittest.skipUnless(os.geteuid() == 0, "making a folder that another user owns takes root")
    def test_folders_another_user_made_are_refused_and_get_nothing(self):
        shared = self.tmp / "shared"  # a 1777 folder, where anyone may make extract/ before the first run
        shared.mkdir()
        shared.chmod(0o1777)
        planted = shared / "extract"
        foreign = self.tmp / "foreign"  # an --out that is someone else's
        for folder in (planted, foreign):
            folder.mkdir()
            folder.chmod(0o777)
            os.chown(folder, 65534, 65534)
        for out, watched in ((shared, planted), (foreign, foreign)):
            with self.subTest(out=out.name):
                result = self.cli("extract", str(self.manifest), "--out", str(out))
                self.assertEqual(result.returncode, 4, result.stderr)
                self.assertEqual(result.stderr.count("\n"), 1, result.stderr)
                self.assertIn("belongs to another user (uid 65534)", result.stderr)
                self.assertEqual(os.listdir(watched), [])

    def test_out_dot_in_a_project_folder_is_refused_and_untouched(self):
        project = self.tmp / "project"
        project.mkdir()
        (project / "main.c").write_text("int main(void) { return 0; }\n")
        project.chmod(0o755)
        result = run_limited("extract", str(self.manifest), "--out", str(project))
        self.assertNotEqual(result.returncode, 0)
        self.assertEqual(result.stderr.count("\n"), 1, result.stderr)
        self.assertIn("not a bastion output folder", result.stderr)
        self.assertEqual(sorted(os.listdir(project)), ["main.c"])
        self.assertEqual(stat.S_IMODE(project.stat().st_mode), 0o755)

    def test_an_output_folder_of_an_earlier_version_is_recognised(self):
        old = self.tmp / "old"
        (old / "extract").mkdir(parents=True)
        (old / "extract.summary.json").write_text("{}")
        result = self.cli("extract", str(self.manifest), "--out", str(old))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue((old / OUT_MARKER).is_file())

    def test_stale_temp_files_of_a_killed_sanitize_are_removed(self):
        out = self.tmp / "out"
        for stage in ("extract", "sanitize"):
            self.assertEqual(self.cli(stage, str(self.manifest), "--out", str(out)).returncode, 0)
        leftovers = [out / "sanitized" / ".0123.txt.k2j3h4.tmp", out / ".sanitize.summary.json.x1y2.tmp"]
        for path in leftovers:
            path.write_text("half-written")
        self.assertEqual(self.cli("sanitize", str(self.manifest), "--out", str(out)).returncode, 0)
        for path in leftovers:
            self.assertFalse(path.exists(), path)


if __name__ == "__main__":
    unittest.main()
