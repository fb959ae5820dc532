"""Hostile names and texts on the user's terminal: the extract report and search hits show no control characters."""

from __future__ import annotations

import io
import tempfile
import unittest
from pathlib import Path

from bastion_agent.core.layout import Layout
from bastion_agent.extracting import extract
from bastion_agent.testing.testsupport import clean_env, write_manifest


class TerminalOutputTests(unittest.TestCase):
    """A file's name or text printed raw could drive the terminal of whoever reads the report
    or searches: set its title, clear the screen over the lines before, write the clipboard
    (OSC 52), reorder what is shown (bidi controls)."""

    CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e")

    def test_the_report_shows_file_names_without_control_characters(self):
        with tempfile.TemporaryDirectory() as holder:
            tmp = Path(holder)
            manifest = write_manifest(tmp)
            hostile = "x\x1b]0;pwned\x07\x1b[2J\x9b2J\u202eevil.bin"
            (tmp / "docs" / hostile).write_bytes(b"\x00\x01binary")
            (tmp / "docs" / "plain.txt").write_text("plain", encoding="utf-8")
            layout = Layout(tmp / "out")
            from bastion_agent.config import manifest as manifest_module

            with clean_env():
                extract.run(manifest_module.load(manifest), layout)
            out = io.StringIO()
            extract.print_report(layout, out, files=True)
        report = out.getvalue()
        self.assertIn("evil.bin", report)
        for control in self.CONTROLS:
            self.assertNotIn(control, report)

    def test_search_hits_show_text_and_paths_without_control_characters(self):
        from bastion_agent.commands.search_cli import format_hits
        from bastion_agent.core.records import Hit

        hit = Hit(score=0.5, doc="0" * 64, idx=0, chunk_id="c" * 64,
                  text="deploy notes \x1b]52;c;cHduZWQ=\x07 then \x1b[8mhidden\x1b[0m \u202eword",
                  paths=["ops/\x1b[2Jnotes.txt"], start=0, end=10, relevance=50)
        shown = format_hits([hit])
        self.assertIn("deploy notes", shown)
        self.assertIn("notes.txt", shown)
        for control in self.CONTROLS:
            self.assertNotIn(control, shown)


if __name__ == "__main__":
    unittest.main()
