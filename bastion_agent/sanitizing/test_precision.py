"""Precision on real documents: the labelled findings of /usr/share files.

``testdata/real_findings.tsv`` holds findings of the sanitizer on files of
``/usr/share/doc`` and ``/usr/share/common-licenses``, labelled by hand (tp:
the value is what the rule says; fp: harmless public text). Only paths and
values are stored, never the files; rows whose file is absent on this
machine are skipped. The test reads each file again, sanitizes it and
checks that the findings among the labelled values are at least 95 %
true, and that the true ones are still found.
"""

from __future__ import annotations

import gzip
import unittest
from pathlib import Path

from bastion_agent.sanitizing.scanner import Sanitizer, merge

LABELS = Path(__file__).with_name("testdata") / "real_findings.tsv"
SHARE = Path("/usr/share")
MINIMUM_ROWS = 50
TEST_MAX_CHARS = 400_000  # the unit test leaves the few big files (nodejs' all.json) to bench/sanitize/sanitize.py


def unescape(value: str) -> str:
    out, index = [], 0
    while index < len(value):
        ch = value[index]
        if ch == "\\" and index + 1 < len(value):
            out.append({"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}.get(value[index + 1], value[index + 1]))
            index += 2
        else:
            out.append(ch)
            index += 1
    return "".join(out)


def labelled_rows() -> list[tuple[str, str, str, str]]:
    rows = []
    for line in LABELS.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            path, rule, value, label = line.split("\t")[:4]
            rows.append((path, rule, unescape(value), label))
    return rows


def read_text(path: Path) -> str | None:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


def precision_on_real_files(sanitizer: Sanitizer, max_chars: int | None = None) -> dict:
    """Labelled values found again: true and false ones, and true ones no longer found."""
    by_path: dict[str, list] = {}
    for row in labelled_rows():
        by_path.setdefault(row[0], []).append(row)
    found_tp = found_fp = lost_tp = rows = 0
    for rel, entries in sorted(by_path.items()):
        path = SHARE / rel
        if not path.is_file():
            continue
        text = read_text(path)
        if max_chars is not None and len(text) > max_chars:
            continue
        values = {text[f.start:f.end] for f in merge(sanitizer.findings(text))}
        for _, _, value, label in entries:
            rows += 1
            if value in values:
                found_tp += label == "tp"
                found_fp += label == "fp"
            elif label == "tp":
                lost_tp += 1
    found = found_tp + found_fp
    return {"rows": rows, "found": found, "true": found_tp, "false": found_fp, "true_lost": lost_tp,
            "precision": round(found_tp / found, 4) if found else None}


class RealDocumentPrecisionTests(unittest.TestCase):
    def test_precision_and_recall_on_labelled_real_findings(self):
        result = precision_on_real_files(Sanitizer(), TEST_MAX_CHARS)
        if result["rows"] < MINIMUM_ROWS:
            self.skipTest(f"only {result['rows']} labelled rows have their file under /usr/share here")
        self.assertGreaterEqual(result["precision"], 0.95, result)
        self.assertLessEqual(result["true_lost"], 0.01 * (result["true"] + result["true_lost"]), result)


if __name__ == "__main__":
    unittest.main()
