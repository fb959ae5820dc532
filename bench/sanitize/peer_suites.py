#!/usr/bin/env python3
"""The peers' own test suites as files: bastion, CredSweeper and detect-secrets on the same sample files.

``bench/sanitize/peers.py`` scores single test strings; this scores the peers' sample
*files*, whole, as a user's folder would hold them, with every tool run on
the same files in one run and the same scoring for all:

- **labels**: each secret the peer's own suite expects, with the file and
  line it sits on.

  - CredSweeper: ``tests/data/output.json`` of a checkout (the findings its
    tests expect from ``tests/samples/``, ML filter on); each candidate is
    one labelled secret, its pieces the ``line_data_list`` values.
  - detect-secrets: the lines of ``test_data/`` that its tests assert a
    finding on (``LABELLED_LINES`` below names the test of each), plus the
    body of ``test_data/files/private_key``. Only the files its tests make
    a claim about are scored, so an unclaimed line is a harmless one.

  A label's value is read from the file at run time, never stored here.
- **removed or kept**, per labelled secret: bastion by the span rule (no run
  of min(8, len) characters of any piece survives) and by the line rule
  (the sanitizer changed the piece's line); a peer by the line rule (it
  reports a finding on every piece's line), the only rule a report without
  redaction allows.
- **lines changed that hold no labelled secret**, per file: the sanitizer's
  changed lines, or the lines a peer reports, that carry no piece; summed,
  per 1,000 text lines, and the share of files with any.

Suites are read in place from a path (``--credsweeper DIR`` or
``BASTION_CREDSWEEPER_SUITE``, the root of a CredSweeper checkout;
``--detect-secrets DIR`` or ``BASTION_DETECT_SECRETS_SUITE``, the root of a
detect-secrets checkout); nothing of theirs is copied into this repository.
Binary samples (a NUL byte in the first 8 KiB) are left out: the sanitizer
sees text that ``extract`` produced, and the peers' archive readers are not
what this compares. The peers run from the bench-only venv of
``bench/sanitize/creddata.py`` (``--peer-venv``, default ``/work/bench-venv``).

Prints JSON on stdout and a table on stderr, with ratios ours / peer.

Usage: python3 bench/sanitize/peer_suites.py [--credsweeper DIR] [--detect-secrets DIR] [--peer-venv DIR]
       [--no-peers] [--code DIR] [--misses N]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # bench/, beside the package
sys.path.insert(0, str(Path(__file__).resolve().parent))
import creddata  # noqa: E402  (puts the measured bastion_agent on the path, honouring --code)

PEER_VENV = Path(os.environ.get("BASTION_PEER_VENV", "/work/bench-venv"))

# detect-secrets' test_data lines that its own tests assert a finding on: (file, line, the test).
LABELLED_LINES = (
    *(("config.ini", n, "tests/core/secrets_collection_test.py::test_file_based_success_config")
      for n in (2, 10, 21, 22, 32)),
    *(("config.yaml", n, "tests/core/secrets_collection_test.py::test_file_based_success_yaml") for n in (3, 5, 13)),
    *(("each_secret.py", n, "tests/core/secrets_collection_test.py (5 secrets with the default plugins)")
      for n in (4, 5, 6, 8, 9)),
    ("config.env", 1, "tests/audit/audit_test.py"),
    ("config.md", 10, "tests/core/secrets_collection_test.py::test_file_based_success_unexpected_config_file"),
    ("files/file_with_secrets.py", 3, "tests/core/baseline_test.py::test_basic_usage"),
    ("files/tmp/file_with_secrets.py", 3, "tests/core/baseline_test.py::test_basic_usage (two values)"),
    ("files/private_key", 2, "the key body inside PEM armour (PrivateKeyDetector)"),
)
# The other files its tests claim something of: no secret at all.
CLEAN_FILES = ("files/file_with_no_secrets.py", "files/tmp/file_with_no_secrets.py", "only_comments.yaml")
URL_PASSWORD = re.compile(r"://[^\s:/@]+:([^\s@]+)@")
QUOTED = re.compile(r"""(['"])(.+?)\1""")


@dataclass
class Label:
    """One secret the peer's suite expects: its pieces as (file, 1-based line, value)."""
    ref: str
    pieces: list[tuple[str, int, str]] = field(default_factory=list)


@dataclass
class Suite:
    name: str
    root: Path
    files: list[str]
    labels: list[Label]
    unlocated: int = 0


def is_text(path: Path) -> bool:
    with open(path, "rb") as handle:
        return b"\0" not in handle.read(8192)


def locate(text: str, line: int, value: str) -> int | None:
    """The 1-based line that holds ``value``: the labelled one if it does, else the first that does."""
    lines = text.split("\n")
    if 0 < line <= len(lines) and value in lines[line - 1]:
        return line
    at = text.find(value)
    return None if at < 0 else text.count("\n", 0, at) + 1


def credsweeper_suite(root: Path) -> Suite:
    samples = root / "tests" / "samples"
    expected = json.loads((root / "tests" / "data" / "output.json").read_text(encoding="utf-8"))
    files = sorted(p.relative_to(samples).as_posix() for p in samples.rglob("*") if p.is_file() and is_text(p))
    texts = {name: creddata.read_text(samples / name) for name in files}
    suite = Suite("credsweeper", samples, files, [])
    for candidate in expected:
        label = Label(candidate["rule"])
        for item in candidate["line_data_list"]:
            name = item["path"].split("tests/samples/", 1)[-1]
            value = item["value"] or ""
            line = locate(texts[name], item["line_num"], value) if name in texts and value else None
            if line is not None:
                label.pieces.append((name, line, value))
        if label.pieces:
            suite.labels.append(label)
        else:
            suite.unlocated += 1
    return suite


def line_value(line: str) -> list[str]:
    """The secret(s) a labelled detect-secrets line holds, by its syntax: a URL's password, the
    quoted strings or last word after the first ``=``/``:``, or the bare line (a continuation)."""
    url = URL_PASSWORD.search(line)
    if url:
        return [url.group(1)]
    parts = re.split(r"[=:]", line, maxsplit=1)
    rhs = parts[1] if len(parts) == 2 else parts[0]
    rhs = re.sub(r"\s#.*$", "", rhs).strip()
    quoted = [m.group(2) for m in QUOTED.finditer(rhs)]
    return quoted or ([rhs.split()[-1]] if rhs else [])


def detect_secrets_suite(root: Path) -> Suite:
    data = root / "test_data"
    by_file: dict[str, list[tuple[int, str]]] = {}
    for name, line, ref in LABELLED_LINES:
        by_file.setdefault(name, []).append((line, ref))
    files = sorted([*by_file, *CLEAN_FILES])
    suite = Suite("detect_secrets", data, files, [])
    for name, entries in by_file.items():
        lines = creddata.read_text(data / name).split("\n")
        for line, ref in entries:
            values = line_value(lines[line - 1]) if line <= len(lines) else []
            if values:
                suite.labels.append(Label(ref, [(name, line, value) for value in values]))
            else:
                suite.unlocated += 1
    return suite


def piece_positions(text: str, starts: list[int], line: int, value: str) -> list[int]:
    begin = starts[line - 1]
    at = text.find(value, begin)
    return list(range(at, at + len(value)))


def bastion_changes(suite: Suite) -> tuple[dict[str, bytearray], dict[str, set[int]], dict[str, str], dict]:
    rows = {name: [] for name in suite.files}
    masks = creddata.bastion_masks(rows, suite.root)[0]  # (all rules, rules outside BY_DESIGN, seconds)
    texts = {name: creddata.read_text(suite.root / name) for name in suite.files}
    starts = {name: creddata.line_starts(text) for name, text in texts.items()}
    changed = {name: creddata.lines_of_mask(texts[name], masks[name], starts[name]) for name in suite.files}
    return masks, changed, texts, starts


def score(suite: Suite, removed, changed: dict[str, set[int]]) -> dict:
    """``removed(label) -> bool``; ``changed``: file -> the lines the tool changed or reported."""
    kept = [label for label in suite.labels if not removed(label)]
    held = {}
    for label in suite.labels:
        for name, line, _ in label.pieces:
            held.setdefault(name, set()).add(line)
    text_lines = sum(creddata.read_text(suite.root / name).count("\n") + 1 for name in suite.files)
    extra = {name: lines - held.get(name, set()) for name, lines in changed.items() if name in suite.files}
    extra_lines = sum(len(lines) for lines in extra.values())
    return {"labels": len(suite.labels), "removed": len(suite.labels) - len(kept),
            "recall": round((len(suite.labels) - len(kept)) / len(suite.labels), 4) if suite.labels else None,
            "unlabelled_lines_changed": extra_lines, "per_1000_lines": round(1000 * extra_lines / text_lines, 2),
            "files_with_unlabelled_change": f"{sum(1 for v in extra.values() if v)}/{len(suite.files)}",
            "kept": kept, "extra": extra}


def line_rule(changed: dict[str, set[int]]):
    return lambda label: all(line in changed.get(name, ()) for name, line, _ in label.pieces)


def bastion_report(suite: Suite) -> dict:
    masks, changed, texts, starts = bastion_changes(suite)

    def span_removed(label: Label) -> bool:
        return not any(creddata.survives(piece_positions(texts[name], starts[name], line, value), masks[name])
                       for name, line, value in label.pieces)

    return {"span_rule": score(suite, span_removed, changed), "line_rule": score(suite, line_rule(changed), changed)}


def peer_reports(suite: Suite, venv: Path) -> dict:
    out = {}
    runs = (("detect_secrets", lambda: creddata.run_detect_secrets(venv, suite.root, suite.files)),
            ("credsweeper", lambda: creddata.run_credsweeper(venv, suite.root)))
    for tool, run in runs:
        try:
            changed = {name: set(lines) for name, lines in run().items()}
        except (OSError, subprocess.CalledProcessError, ValueError, KeyError) as error:
            out[tool] = {"error": f"{type(error).__name__}: {str(error)[:200]}"}
            continue
        out[tool] = {"line_rule": score(suite, line_rule(changed), changed)}
    return out


def public(figures: dict, misses: int, texts_of) -> dict:
    """The JSON-safe figures, with up to ``misses`` kept labels and unlabelled changed lines listed."""
    shown = {k: v for k, v in figures.items() if k not in ("kept", "extra")}
    if misses:
        shown["kept_examples"] = [f"{label.ref}: {name}:{line}: {texts_of(name, line)[:160]}"
                                  for label in figures["kept"][:misses] for name, line, _ in label.pieces[:1]]
        shown["unlabelled_examples"] = [f"{name}:{line}: {texts_of(name, line)[:160]}"
                                        for name, lines in sorted(figures["extra"].items())
                                        for line in sorted(lines)][:misses]
    return shown


def suite_report(suite: Suite, venv: Path, peers: bool, misses: int) -> dict:
    cache: dict[str, list[str]] = {}

    def text_of(name: str, line: int) -> str:
        lines = cache.setdefault(name, creddata.read_text(suite.root / name).split("\n"))
        return lines[line - 1].strip() if 0 < line <= len(lines) else ""

    tools = {"bastion": bastion_report(suite)}
    if peers:
        tools.update(peer_reports(suite, venv))
    report = {"files": len(suite.files), "labels": len(suite.labels), "unlocated_labels": suite.unlocated}
    for tool, rules in tools.items():
        report[tool] = {rule: public(figures, misses, text_of) if isinstance(figures, dict) and "kept" in figures
                        else figures for rule, figures in rules.items()}
    report["ratios"] = ratios(report)
    return report


def ratios(report: dict) -> dict:
    """Ours (span rule) / each peer: recall and unlabelled changed lines."""
    ours = report["bastion"]["span_rule"]
    out = {}
    for peer in ("credsweeper", "detect_secrets"):
        theirs = report.get(peer, {}).get("line_rule")
        if not theirs:
            continue
        out[peer] = {"recall": round(ours["recall"] / theirs["recall"], 3) if theirs["recall"] else None,
                     "unlabelled_lines": round(ours["unlabelled_lines_changed"] / theirs["unlabelled_lines_changed"], 3)
                     if theirs["unlabelled_lines_changed"] else None}
    return out


def table(reports: dict) -> str:
    rows = ["| suite | tool (rule) | removed | recall | unlabelled lines changed | per 1,000 lines | files |",
            "|---|---|---|---|---|---|---|"]
    for name, report in reports.items():
        for tool in ("bastion", "credsweeper", "detect_secrets"):
            for rule, fig in report.get(tool, {}).items():
                if isinstance(fig, dict) and "recall" in fig:
                    rows.append(f"| {name} | {tool} ({rule.replace('_rule', '')}) | {fig['removed']}/{fig['labels']} | "
                                f"{fig['recall']} | {fig['unlabelled_lines_changed']} | {fig['per_1000_lines']} | "
                                f"{fig['files_with_unlabelled_change']} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--credsweeper", default=os.environ.get("BASTION_CREDSWEEPER_SUITE"),
                        help="root of a CredSweeper checkout (tests/samples, tests/data/output.json)")
    parser.add_argument("--detect-secrets", default=os.environ.get("BASTION_DETECT_SECRETS_SUITE"),
                        help="root of a detect-secrets checkout (test_data/)")
    parser.add_argument("--peer-venv", default=str(PEER_VENV))
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--code", help="a checkout whose bastion_agent to measure (read by bench/sanitize/creddata.py)")
    parser.add_argument("--misses", type=int, default=0, help="list N kept labels and unlabelled changes per tool")
    args = parser.parse_args(argv)
    loaders = (("credsweeper", args.credsweeper, credsweeper_suite, "tests/data/output.json"),
               ("detect_secrets", args.detect_secrets, detect_secrets_suite, "test_data"))
    if not any(root for _, root, _, _ in loaders):
        print("peer_suites: give --credsweeper DIR and/or --detect-secrets DIR (or BASTION_CREDSWEEPER_SUITE, "
              "BASTION_DETECT_SECRETS_SUITE)", file=sys.stderr)
        return 2
    reports = {}
    for name, root, load, needs in loaders:
        if not root:
            continue
        if not (Path(root) / needs).exists():
            print(f"peer_suites: no {needs} under {root}", file=sys.stderr)
            return 2
        reports[name] = suite_report(load(Path(root)), Path(args.peer_venv), not args.no_peers, args.misses)
    print(json.dumps({"code": str(Path(creddata.scanner.__file__).resolve().parents[2]), "suites": reports}, indent=2))
    print(table(reports), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
