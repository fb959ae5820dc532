"""End to end through ``cli.main``: sweep a folder, search it, and the CLI's promises."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import unittest
from pathlib import Path

from bastion_agent.core.errors import ModelServerError
from bastion_agent.core.layout import Layout
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import (
    TempFolder,
    clean_env,
    closed_port_url,
    run_cli,
    write_manifest,
)

PLANTED_KEY = "AKIAQ3EGRZ7PLX4WTN5B"
PLANTED_PASSWORD = "Tr0ub4dor&3-horse-battery"

FILES = {
    "notes/roof.txt": "The roof of the north barn leaks when the wind blows from the west.\n"
    "A carpenter will replace the cedar shingles before the autumn rains.\n",
    "recipes/bread.md": "# Sourdough\n\nMix flour, water and salt with a lively starter; "
    "let the dough rise overnight and bake it in a hot iron pot.\n",
    "web/violin.html": "<html><head><style>body{color:red}</style><script>var x = 'ignored';</script></head>"
    "<body><h1>Violin</h1><p>The violin has four strings tuned in fifths and is played with a bow.</p></body></html>",
    "ops/deploy.txt": f"Deploy notes for the billing service.\naws_access_key_id = {PLANTED_KEY}\n"
    f"password = \"{PLANTED_PASSWORD}\"\nRestart the workers after the migration.\n",
    "copies/roof-copy.txt": "The roof of the north barn leaks when the wind blows from the west.\n"
    "A carpenter will replace the cedar shingles before the autumn rains.\n",
}


class SweepAndSearchTests(TempFolder, unittest.TestCase):
    def setUp(self):
        self.tmp = self.make_tmp()
        self.manifest = write_manifest(self.tmp, size=24, overlap=6)
        for rel, text in FILES.items():
            path = self.tmp / "docs" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        self.out = self.tmp / "out"

    def sweep(self, stub):
        with clean_env(EMBED_URL=stub.url):
            return run_cli("sweep", self.manifest, "--out", self.out)

    def search(self, stub, query, *extra):
        with clean_env(EMBED_URL=stub.url):
            return run_cli("search", self.manifest, query, "--out", self.out, *extra)

    def test_sweep_then_search_finds_the_right_file(self):
        with StubServer() as stub:
            code, out, err = self.sweep(stub)
            self.assertEqual((code, out), (0, ""))
            code, out, err = self.search(stub, "cedar shingles roof leaks", "--json", "-k", "3")
        self.assertEqual((code, err), (0, ""))
        hits = json.loads(out)
        self.assertEqual(sorted(hits[0]["paths"]), ["copies/roof-copy.txt", "notes/roof.txt"])
        self.assertIn("cedar shingles", hits[0]["text"])

    def test_every_stage_writes_its_summary(self):
        with StubServer() as stub:
            self.assertEqual(self.sweep(stub)[0], 0)
        layout = Layout(self.out)
        for stage in ("extract", "sanitize", "chunk", "embed"):
            summary = json.loads(layout.summary_path(stage).read_text())
            self.assertFalse(summary["manifest_signed"])
        embed_summary = json.loads(layout.summary_path("embed").read_text())
        self.assertEqual(embed_summary["documents"], 4)  # five files, one duplicate

    def test_no_planted_secret_leaves_the_extract_store_nor_reaches_the_model_server(self):
        with StubServer() as stub:
            self.assertEqual(self.sweep(stub)[0], 0)
            code, out, _ = self.search(stub, "billing service deploy notes", "--json")
            sent = "\n".join(stub.inputs())
        self.assertIn("billing service", sent)
        for secret in (PLANTED_KEY, PLANTED_PASSWORD):
            self.assertNotIn(secret, sent)
            self.assertNotIn(secret, out)
            for path in self.out.rglob("*"):
                if path.is_file() and Layout(self.out).extract_dir not in path.parents:
                    self.assertNotIn(secret.encode(), path.read_bytes(), path)
        self.assertTrue(any(secret_free in out for secret_free in ("[REDACTED:",)))

    def test_html_script_and_style_never_reach_the_index(self):
        with StubServer() as stub:
            self.sweep(stub)
            sent = "\n".join(stub.inputs())
        self.assertIn("four strings tuned in fifths", sent)
        self.assertNotIn("ignored", sent)
        self.assertNotIn("color:red", sent)

    def test_files_and_folders_are_private(self):
        with StubServer() as stub:
            self.sweep(stub)
        for path in [self.out, *self.out.rglob("*")]:
            mode = stat.S_IMODE(path.stat().st_mode)
            with self.subTest(path=str(path.relative_to(self.tmp))):
                self.assertEqual(mode & 0o077, 0, oct(mode))

    def test_sweep_stops_at_the_first_failing_stage(self):
        with clean_env(EMBED_URL=closed_port_url()):
            code, out, err = run_cli("sweep", self.manifest, "--out", self.out)
        self.assertEqual(code, ModelServerError.exit_code)
        lines = err.splitlines()  # the summary line of each stage that ran, then the one error line
        self.assertEqual([line.split(":")[0] for line in lines[:-1]], ["extract", "sanitize", "chunk"])
        self.assertTrue(lines[-1].startswith("bastion_agent sweep: cannot reach the model server"), lines[-1])
        layout = Layout(self.out)
        self.assertTrue(layout.chunks_path.exists())  # the stages before embed ran
        self.assertFalse(layout.summary_path("embed").exists())
        code, out, err = run_cli("search", self.manifest, "barn roof", "--out", self.out, "--json", "--mode", "keyword")
        self.assertEqual(code, 0, err)  # the windows are stored: keyword search finds them while vectors wait
        self.assertIn("notes/roof.txt", json.loads(out)[0]["paths"])
        self.assertIn("still wait for vectors", err)
        self.assertIn("embed has not finished since", err)

    def test_a_deleted_file_leaves_the_index_on_the_next_sweep(self):
        with StubServer() as stub:
            self.sweep(stub)
            (self.tmp / "docs" / "web" / "violin.html").unlink()
            self.sweep(stub)
            code, out, _ = self.search(stub, "violin four strings fifths bow", "--json", "-k", "10")
        self.assertNotIn("web/violin.html", [p for hit in json.loads(out) for p in hit["paths"]])

    def test_a_k_too_large_for_sqlite_is_one_line(self):
        """-k past SQLite's integers raised OverflowError from the store (a traceback); now argparse refuses it."""
        with StubServer() as stub:
            self.sweep(stub)
            result = subprocess.run([sys.executable, "-m", "bastion_agent", "search", str(self.manifest), "sourdough",
                                     "--out", str(self.out), "-k", "1" + "0" * 30],
                                    env={**os.environ, "EMBED_URL": stub.url}, capture_output=True, text=True, timeout=60)
        self.assertEqual((result.returncode, result.stdout), (2, ""))
        self.assertIn("-k: must be a whole number from 1 to", result.stderr)
        self.assertNotIn("Traceback", result.stderr)

    def test_text_output_names_the_paths(self):
        with StubServer() as stub:
            self.sweep(stub)
            code, out, err = self.search(stub, "sourdough flour starter")
        self.assertEqual(code, 0)
        self.assertIn("recipes/bread.md", out.splitlines()[0])


class HelpTests(unittest.TestCase):
    def test_help_explains_every_stage(self):
        for command in ("extract", "sanitize", "chunk", "embed", "sweep", "search"):
            with self.subTest(command):
                result = subprocess.run([sys.executable, "-m", "bastion_agent", command, "--help"],
                                        capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
                self.assertEqual(result.returncode, 0)
                self.assertIn("--require-signed", result.stdout)
                self.assertIn("--out", result.stdout)

    def test_usage_errors_exit_non_zero_without_a_traceback(self):
        code = subprocess.run([sys.executable, "-m", "bastion_agent", "search"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parents[2])
        self.assertNotEqual(code.returncode, 0)
        self.assertNotIn("Traceback", code.stderr)


if __name__ == "__main__":
    unittest.main()


class OutputFolderPerManifestTests(unittest.TestCase):
    """Regression: two manifests in one folder shared .bastion/, so the second sweep replaced the first's windows."""

    def setUp(self):
        import tempfile

        holder = tempfile.TemporaryDirectory()
        self.addCleanup(holder.cleanup)
        self.tmp = Path(holder.name)

    def test_each_manifest_sweeps_into_its_own_folder_and_searches_its_own_documents(self):
        from bastion_agent.testing.testsupport import clean_env, run_cli, write_manifest

        write_manifest(self.tmp, root="letters", name="bastion.toml")
        write_manifest(self.tmp, root="reports", name="reports.toml")
        (self.tmp / "letters" / "a.txt").write_text("Dear aunt, the orchard pears are ripe.\n", encoding="utf-8")
        (self.tmp / "reports" / "b.txt").write_text("Quarterly report: the ferry schedule changed.\n", encoding="utf-8")
        with StubServer() as stub, clean_env(EMBED_URL=stub.url):
            for name in ("bastion.toml", "reports.toml"):
                self.assertEqual(run_cli("sweep", self.tmp / name, "--quiet")[0], 0)
            pears = json.loads(run_cli("search", self.tmp / "bastion.toml", "orchard pears", "--json")[1])
            ferry = json.loads(run_cli("search", self.tmp / "reports.toml", "ferry schedule", "--json")[1])
        self.assertEqual(pears[0]["paths"], ["a.txt"])
        self.assertEqual(ferry[0]["paths"], ["b.txt"])
        self.assertTrue((self.tmp / ".bastion" / "vectors.db").is_file())
        self.assertTrue((self.tmp / ".bastion-reports" / "vectors.db").is_file())

    def test_an_older_agents_bastion_folder_keeps_working_for_its_manifest(self):
        (self.tmp / ".bastion").mkdir()
        (self.tmp / ".bastion" / "vectors.db").write_bytes(b"")
        self.assertEqual(Layout.for_manifest(self.tmp / "notes.toml", None).root, self.tmp / ".bastion")
        (self.tmp / "bastion.toml").write_text("", encoding="utf-8")  # now .bastion/ is bastion.toml's
        self.assertEqual(Layout.for_manifest(self.tmp / "notes.toml", None).root, self.tmp / ".bastion-notes")
        self.assertEqual(Layout.for_manifest(self.tmp / "bastion.toml", None).root, self.tmp / ".bastion")
