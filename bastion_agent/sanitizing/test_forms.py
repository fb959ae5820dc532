"""Disguised forms, OCR and PDF layouts, columns, vertical records, marked names, and the tables that must stay.

Every case is drawn fresh each run (``testing/disguised_forms.py``; the seed
is in the failure message), and each class has look-alikes that must come
out byte for byte unchanged.
"""

from __future__ import annotations

import unittest

from bastion_agent.core.layout import Layout, read_jsonl, write_jsonl
from bastion_agent.sanitizing import disguises
from bastion_agent.sanitizing.scanner import Sanitizer
from bastion_agent.testing.disguised_forms import Draw, all_cases, grouped, survives
from bastion_agent.testing.testsupport import TempFolder, run_cli, write_manifest

try:
    import pypdf
except ImportError:
    pypdf = None


def _redacted(sanitizer: Sanitizer, case) -> str:
    return sanitizer.redact(case.text, ocr_pages=[1] if case.ocr else None)[0]


class HostileDisguiseTests(unittest.TestCase):
    """Input built to make the disguise views slow or large: their work stays bounded by the text."""

    def test_views_do_bounded_work_on_hostile_text(self):
        hostile = {
            "letter-spaced": "a " * 100_000,
            "concatenations": '"a" + ' * 30_000,
            "base64": ("QUJD" * 1500 + " ") * 20,
            "at-words": "x (at) y (dot) " * 20_000,
            "cell digits": "1\t" * 100_000,
            "piece lines": "abc1\n" * 50_000,
            "notebook": ' "  a  b\\n",\n' * 20_000,
        }
        for name, text in hostile.items():
            with self.subTest(name):
                calls = []

                def scan(window, tables):
                    calls.append(len(window))
                    return []

                disguises.findings(text, scan)
                # Each view is read in windows that never overlap: at most the view's length in all.
                self.assertLessEqual(sum(calls), len(disguises.KINDS) * 2 * len(text))

    def test_wide_tables_and_long_runs_are_read_once(self):
        """A header of thousands of sensitive columns over many rows, a long run with an "=" inside: every cell is
        looked at once (the row's cells meet the header's through one ordered walk), and the output is whole."""
        from bastion_agent.sanitizing import columns

        header = "  user  password  " * 4000 + "\n"
        rows = "0  kim  x\n" * 4000
        spans = columns.column_findings(header + rows, {"password-column": 0})
        self.assertLessEqual(len(spans), 4000)  # one finding per row at most: a cell goes once
        clean = Sanitizer().redact(("x" * 50_000 + "=d ") * 3)[0]
        self.assertEqual(clean, ("x" * 50_000 + "=d ") * 3)

    def test_nothing_of_a_planted_value_survives_the_views_of_a_long_text(self):
        draw = Draw()
        key = draw.aws()
        text = "filler text. " * 5_000 + f'K = "{key[:6]}" + "{key[6:14]}" + "{key[14:]}"\n' + "more text. " * 5_000
        clean = Sanitizer().redact(text)[0]
        self.assertNotIn(key[6:14], clean, f"seed {draw.seed}")
        self.assertEqual(len(clean.split("filler text.")), 5_001)


class FormTests(unittest.TestCase):
    def test_every_planted_form_goes_and_every_look_alike_stays(self):
        draw = Draw()
        sanitizer = Sanitizer()
        for case in all_cases(draw):
            with self.subTest(f"{case.cls}/{case.name} (seed {draw.seed})"):
                output = _redacted(sanitizer, case)
                if case.keep:
                    self.assertEqual(output, case.text)
                else:
                    self.assertFalse(survives(case, output), output)

    def test_typed_text_keeps_its_strict_checks(self):
        """An IBAN whose checksum fails and a key with a stray dot stay in typed text; OCR pages lose them."""
        draw = Draw()
        sanitizer = Sanitizer()
        bad = draw.bad_iban()
        key = draw.aws()
        text = f"IBAN {bad}\naccess key {key[:11]}.{key[11:]}\n"
        self.assertEqual(sanitizer.redact(text)[0], text, f"seed {draw.seed}")
        clean = sanitizer.redact(text, ocr_pages=[1])[0]
        self.assertNotIn(bad[4:12], clean, f"seed {draw.seed}")
        self.assertNotIn(key[4:11], clean, f"seed {draw.seed}")

    def test_ocr_tolerance_stays_on_its_pages(self):
        draw = Draw()
        typed, scanned = draw.bad_iban(), draw.bad_iban()
        text = f"page one: IBAN {typed}\n\n\f\npage two: IBAN {scanned}\n"
        clean = Sanitizer().redact(text, ocr_pages=[2])[0]
        self.assertNotIn(scanned, clean, f"seed {draw.seed}")
        self.assertTrue(clean.startswith(f"page one: IBAN {typed}\n"), f"seed {draw.seed}")


@unittest.skipUnless(pypdf is not None, "pip install 'bastion-agent[pdf]' to run the PDF stage tests")
class StageOcrTests(TempFolder, unittest.TestCase):
    """The stage hands the pages extract recognised by OCR (its listing's ocr_pages) to the scanner."""

    def sweep(self, ocr_pages) -> str:
        from bastion_agent.testing.pdf_files import build_pdf

        tmp = self.make_tmp()
        manifest = write_manifest(tmp, extra="")
        manifest.write_text(manifest.read_text().replace('root = "docs"', 'root = "docs"\nocr = false'))
        (tmp / "docs" / "scan.pdf").write_bytes(build_pdf(["Statement of account", f"IBAN {grouped(self.bad)}"]))
        code, _, err = run_cli("extract", manifest, "--out", tmp / "out", "--quiet")
        self.assertEqual(code, 0, err)
        layout = Layout(tmp / "out")
        rows = read_jsonl(layout.extract_listing)
        for row in rows:
            row["ocr_pages"] = ocr_pages  # as extract writes it for a scan it recognised
        write_jsonl(layout.extract_listing, rows)
        code, _, err = run_cli("sanitize", manifest, "--out", tmp / "out", "--quiet")
        self.assertEqual(code, 0, err)
        (row,) = read_jsonl(layout.sanitized_listing)
        return layout.doc_text_path(layout.sanitized_dir, row["doc"]).read_text(encoding="utf-8")

    def test_an_ocr_page_loses_an_iban_whose_checksum_fails_and_a_typed_page_keeps_it(self):
        draw = Draw()
        self.bad = draw.bad_iban()
        self.assertNotIn(grouped(self.bad)[5:14], self.sweep([2]), f"seed {draw.seed}")
        self.assertIn(grouped(self.bad)[5:14], self.sweep(None), f"seed {draw.seed}")


if __name__ == "__main__":
    unittest.main()
