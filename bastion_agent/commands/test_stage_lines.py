"""What a stage says when it ends: one summary line, ``--quiet``, ``--json``; the progress line; the program name."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import unittest
import unittest.mock
from pathlib import Path

from bastion_agent.core import progress
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import (
    TempFolder,
    clean_env,
    closed_port_url,
    run_cli,
    write_manifest,
)

ROOT = Path(__file__).resolve().parents[2]


class Folder(TempFolder, unittest.TestCase):
    def setUp(self):
        self.tmp = self.make_tmp()
        self.manifest = write_manifest(self.tmp, size=16, overlap=4)
        docs = self.tmp / "docs"
        (docs / "roof.txt").write_text("Cedar shingles on the north roof leak after heavy rain.\n", encoding="utf-8")
        (docs / "keys.txt").write_text("aws_access_key_id = AKIAIOSFODNN7EXAMPLE for the billing job\n", encoding="utf-8")
        (docs / "logo.ico").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
        self.out = self.tmp / "out"

    def run_stage(self, stub_url: str, *argv):
        with clean_env(EMBED_URL=stub_url):
            return run_cli(*argv, self.manifest, "--out", self.out)


class SummaryLineTests(Folder):
    def test_each_stage_ends_with_one_line_naming_what_it_did(self):
        with StubServer() as stub:
            code, out, err = self.run_stage(stub.url, "sweep")
        self.assertEqual((code, out), (0, ""))
        lines = err.splitlines()
        self.assertEqual([line.split(":")[0] for line in lines], ["extract", "sanitize", "chunk", "embed", "sweep"])
        extract, sanitize, chunk, embed, sweep = lines
        self.assertRegex(extract, r"^extract: 2 of 3 files read \(text 2\), 1 skipped \(binary 1\): logo\.ico \(binary\) in \d+\.\d s$")
        self.assertRegex(sanitize, r"^sanitize: [1-9]\d* findings redacted in 1 of 2 files \(2 documents\) \(aws-access-key")
        self.assertRegex(chunk, r"^chunk: \d+ windows of up to 16 tokens from 2 documents in ")
        self.assertRegex(embed, r"^embed: (\d+) windows: \1 embedded, 0 reused \(.*stub-model via ollama, 64 dims\) in ")
        self.assertRegex(sweep, r"^sweep: done in \d+\.\d s$")
        self.assertNotIn("AKIA", err)

    def test_a_single_stage_prints_its_own_line(self):
        code, out, err = self.run_stage(closed_port_url(), "extract")
        self.assertEqual(code, 0)
        self.assertEqual(len(err.splitlines()), 1)
        self.assertTrue(err.startswith("extract: 2 of 3 files read"))

    def test_quiet_silences_the_lines(self):
        with StubServer() as stub:
            code, out, err = self.run_stage(stub.url, "sweep", "--quiet")
        self.assertEqual((code, out, err), (0, "", ""))

    def test_json_prints_the_summary_object_on_stdout(self):
        code, out, err = self.run_stage(closed_port_url(), "extract", "--json", "--quiet")
        self.assertEqual((code, err), (0, ""))
        summary = json.loads(out)
        self.assertEqual((summary["stage"], summary["files"], summary["extracted"]), ("extract", 3, 2))
        self.assertIsInstance(summary["seconds"], float)

    def test_sweep_json_is_an_object_of_every_stage(self):
        with StubServer() as stub:
            code, out, err = self.run_stage(stub.url, "sweep", "--json")
        self.assertEqual(code, 0)
        summaries = json.loads(out)
        self.assertEqual(list(summaries), ["extract", "sanitize", "chunk", "embed"])
        self.assertEqual(summaries["embed"]["embedded"], summaries["chunk"]["unique_chunks"])
        self.assertEqual(len(err.splitlines()), 5)  # the lines still go to stderr

    def test_a_sweep_from_a_script_prints_its_lines(self):
        env = {key: value for key, value in os.environ.items() if not key.startswith(("EMBED_", "BASTION_"))}
        with StubServer() as stub:
            result = subprocess.run([sys.executable, "-m", "bastion_agent", "sweep", str(self.manifest), "--out",
                                     str(self.out)], capture_output=True, text=True, cwd=ROOT, stdin=subprocess.DEVNULL,
                                    env={**env, "EMBED_URL": stub.url}, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual([line.split(":")[0] for line in result.stderr.splitlines()],
                         ["extract", "sanitize", "chunk", "embed", "sweep"])

    def test_a_sweep_with_nothing_to_embed_works_while_the_model_server_is_down(self):
        with StubServer() as stub:
            self.assertEqual(self.run_stage(stub.url, "sweep", "--quiet")[0], 0)
        code, out, err = self.run_stage(closed_port_url(), "sweep", "--json")
        self.assertEqual(code, 0, err)
        embed = json.loads(out)["embed"]
        self.assertEqual((embed["embedded"], embed["probed"]), (0, False))
        self.assertIn("nothing to embed: the model server was not probed", err)

    def test_a_sweep_with_new_text_still_needs_the_model_server(self):
        with StubServer() as stub:
            self.assertEqual(self.run_stage(stub.url, "sweep", "--quiet")[0], 0)
        (self.tmp / "docs" / "new.txt").write_text("A new note about the gutter repair.\n", encoding="utf-8")
        code, out, err = self.run_stage(closed_port_url(), "sweep")
        self.assertEqual(code, 5)
        self.assertIn("cannot reach the model server", err.splitlines()[-1])


class ReportTests(Folder):
    def test_report_files_lists_skipped_files_with_sanitized_paths_only(self):
        private = self.tmp / "docs" / "alice.smith@northwind-law.de"
        private.mkdir()
        (private / "scan.ico").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
        (private / "cv.txt").write_text("Curriculum vitae.\n", encoding="utf-8")
        code, out, err = self.run_stage(closed_port_url(), "extract", "--report", "--files")
        self.assertEqual(code, 0, err)
        self.assertNotIn("alice.smith", out + err)
        skipped = out[out.index("Skipped files"):].splitlines()
        self.assertRegex("\n".join(skipped), r"\[REDACTED:email\]/scan\.ico +binary +binary")
        self.assertRegex("\n".join(skipped), r"(?m)^logo\.ico +binary +binary$")
        self.assertNotIn("cv.txt", "\n".join(skipped))  # read, so not listed
        self.assertIn("[REDACTED:email]/", out[out.index("By folder"):out.index("Skipped files")])

    def test_files_without_report_is_refused(self):
        code, out, err = self.run_stage(closed_port_url(), "extract", "--files")
        self.assertEqual(code, 2)
        self.assertIn("--report", err)


class ProgramNameTests(Folder):
    def test_messages_say_the_name_the_program_was_run_as(self):
        from bastion_agent.commands.cli import main, program_name

        self.assertEqual(program_name("/usr/local/bin/bastion-agent"), "bastion-agent")
        self.assertEqual(program_name("/x/bastion_agent/__main__.py"), "bastion_agent")
        err = io.StringIO()
        with clean_env(), unittest.mock.patch("sys.stderr", err):
            code = main(["extract", str(self.tmp / "missing.toml")], prog="bastion-agent")
        self.assertNotEqual(code, 0)
        self.assertTrue(err.getvalue().startswith("bastion-agent extract: "), err.getvalue())

    def test_usage_names_the_console_script(self):
        from bastion_agent.commands.cli import build_parser

        parser = build_parser("sweep", "bastion-agent")
        with unittest.mock.patch("sys.stderr", io.StringIO()) as err, self.assertRaises(SystemExit):
            parser.parse_args(["sweep"])
        self.assertIn("usage: bastion-agent sweep", err.getvalue())


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class ProgressTests(unittest.TestCase):
    def setUp(self):
        progress.set_quiet(False)
        self.addCleanup(progress.set_quiet, False)

    def make(self, **kwargs):
        self.stream, self.clock = FakeTerminal(), Clock()
        return progress.Progress("embed", 100, "windows", stream=self.stream, clock=self.clock, tick_seconds=None,
                                 **kwargs)

    def last_line(self) -> str:
        return self.stream.getvalue().split("\r\x1b[2K")[-1]

    def test_the_line_shows_at_once_with_the_reused_windows(self):
        self.make(note="40 reused")
        self.assertEqual(self.last_line(), "embed: 0/100 windows (40 reused)  0.0 windows/s  0s")

    def test_a_tick_redraws_the_elapsed_time_without_any_progress(self):
        bar = self.make()
        self.clock.now += 27
        bar.tick()
        self.assertEqual(self.last_line(), "embed: 0/100 windows  0.0 windows/s  27s")

    def test_advance_shows_rate_and_eta_and_close_ends_with_a_done_line(self):
        bar = self.make(note="3 reused")
        self.clock.now += 10
        bar.advance(50)
        self.assertEqual(self.last_line(), "embed: 50/100 windows (3 reused)  5.0 windows/s  10s  ETA 9s-11s")
        self.clock.now += 10
        bar.advance(50)
        bar.close()
        self.assertEqual(self.last_line(), "embed: done, 100 windows (3 reused) in 20s\n")
        bar.tick()  # a late tick draws nothing after the done line
        self.assertTrue(self.stream.getvalue().endswith("in 20s\n"))

    def test_an_interrupted_stage_never_says_done(self):
        """Regression: after Ctrl-C the line said "embed: done, 32/168" before "interrupted"."""
        with self.assertRaises(KeyboardInterrupt):
            with self.make() as bar:
                self.clock.now += 4
                bar.advance(32)
                raise KeyboardInterrupt
        self.assertNotIn("done", self.stream.getvalue())
        self.assertEqual(self.last_line(), "embed: 32/100 windows  8.0 windows/s  4s  ETA 8s-9s\n")

    def test_the_rate_and_eta_follow_the_last_minute(self):
        """A sweep that slows down shows it: the ETA comes from a moving rate, not the whole run's mean."""
        bar = self.make()
        self.clock.now += 60
        bar.advance(60)  # 1 window/s for the first minute
        self.clock.now += 60
        bar.advance(6)  # then 0.1 window/s
        self.assertIn("0.1 windows/s", self.last_line())
        # 34 left at 0.1/s (5m40s), the range at its widest (+-30%): the speed changed
        self.assertTrue(self.last_line().endswith("ETA 4m22s-8m06s"), self.last_line())
        self.clock.now += 30  # nothing for 30 s: the rate falls and the ETA grows while waiting
        bar.tick()
        self.assertTrue(self.last_line().endswith("ETA 6m32s-12m09s"), self.last_line())

    def test_the_eta_counts_from_the_first_batch_not_the_warm_up(self):
        """The probe and the model's first load come before any window: the ETA extrapolates the work only."""
        bar = self.make()
        self.clock.now += 30  # warm-up: nothing done
        bar.advance(10)
        self.clock.now += 10
        bar.advance(10)  # 1 window/s since the first batch; 0.5/s counted from the start
        self.assertIn("0.5 windows/s", self.last_line())
        self.assertTrue(self.last_line().endswith("ETA 1m02s-1m54s"), self.last_line())  # 80 left at 1/s, +-30%

    def test_the_timer_redraws_by_itself(self):
        drawn = []

        class Recorder(FakeTerminal):
            def write(self, text):
                drawn.append(text)
                return super().write(text)

        stream = Recorder()
        bar = progress.Progress("embed", 10, "windows", stream=stream, tick_seconds=0.01)
        for _ in range(2000):  # until the timer has drawn a few times (never asserting how fast)
            if len(drawn) > 3:
                break
            time.sleep(0.01)
        bar.close()
        self.assertGreater(len(drawn), 3)
        self.assertEqual(bar.done, 0)  # every one of those redraws came from the timer

    def test_nothing_is_drawn_off_a_terminal_or_when_quiet(self):
        stream = io.StringIO()
        with progress.Progress("extract", 3, "files", stream=stream) as bar:
            bar.advance(3)
        self.assertEqual(stream.getvalue(), "")
        progress.set_quiet(True)
        terminal = FakeTerminal()
        with progress.Progress("extract", 3, "files", stream=terminal) as bar:
            bar.advance(3)
        self.assertEqual(terminal.getvalue(), "")


if __name__ == "__main__":
    unittest.main()
