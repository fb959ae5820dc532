#!/usr/bin/env python3
"""Real labelled lines: bastion beside detect-secrets and CredSweeper on the CredData development split.

The folder ``../shared/data/creddata-dev`` (``BASTION_CREDDATA``) holds real
files of 36 public repositories and ``labels.jsonl``, one hand-labelled line
per row (``T`` a real-looking credential, ``F`` a harmless line that looks
like one, ``X`` a test value or placeholder). Its README says how a row
counts; this script follows it:

- bastion sanitizes each labelled file whole (read as UTF-8, invalid bytes as
  U+FFFD); the redacted characters are the spans of the findings it replaced;
- **span rule** (bastion only): a T row is detected when no run of
  min(8, len) consecutive characters of its value survives; an F or X row is
  flagged when any character of its span was redacted (a row without a span
  is its whole stripped line; a multi-line PEM row is its base64 body lines);
- **line rule** (all three tools): a row counts when the tool reports a
  finding on, or the sanitizer changes, one of its lines;
- figures: recall of T, recall of T without the rows whose only categories
  are ``UUID`` / ``AWS S3 Bucket``, the false-flag rate on F, the rate on X,
  precision (detected T / (detected T + flagged F)) and F1; ``side_by_side``
  repeats the ones the targets name, one line per tool;
- **by design** (bastion, span rule): an F row changed only by findings of
  the rules that remove a class on purpose (``BY_DESIGN``: e-mail addresses
  are personal data, password hashes allow offline cracking) is counted
  apart, as ``by_design``, and ``false_flags_without_by_design`` is the rate
  on the other F rows. The raw ``false_flags`` counts every changed F row and
  stays the figure the targets name.

The peers run from a bench-only venv, never a project dependency:
``python3 -m venv /work/bench-venv && /work/bench-venv/bin/pip install
detect-secrets credsweeper``; ``--peer-venv`` (or ``BASTION_PEER_VENV``)
names it, ``--no-peers`` leaves them out. Their own public test suites stay
in ``bench/sanitize/peers.py``. ``--code DIR`` measures another checkout's
``bastion_agent`` (main's, for the "before" column); ``--misses N`` lists N
missed T rows and N flagged F rows per category, for development on this
split only; ``--per-repo`` adds each repository's counts and resamples the
repositories (drawn with replacement, a fixed seed) to say how far a split
of other repositories of the same kind may fall from this one.

Usage: python3 bench/sanitize/creddata.py [--code DIR] [--peer-venv DIR] [--no-peers] [--misses N] [--per-repo]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # bench/, beside the package
if "--code" in sys.argv:
    sys.path.insert(0, str(Path(sys.argv[sys.argv.index("--code") + 1]).resolve()))
else:
    sys.path.insert(0, str(HERE.parent))

from bastion_agent.sanitizing import scanner  # noqa: E402

DATA = Path(os.environ.get("BASTION_CREDDATA") or next(
    (p for p in (HERE.parent.parent / "shared" / "data" / "creddata-dev", Path("/work/shared/data/creddata-dev"))
     if p.is_dir()), HERE.parent.parent / "shared" / "data" / "creddata-dev"))
PEER_VENV = Path(os.environ.get("BASTION_PEER_VENV", "/work/bench-venv"))
PIECE = 8
GUID_ONLY = {"UUID", "AWS S3 Bucket"}
# Rules whose removals are a policy, not a misreading: personal data and password hashes.
BY_DESIGN = frozenset({"email", "password-hash"})
# Repositories drawn with replacement to estimate a split of others (``--per-repo``): fixed, so reruns agree.
RESAMPLES = 5000
RESAMPLE_SEED = 39
PEM_HEADER = re.compile(r"^\s*(?:-----|[A-Za-z][\w\-]*:\s)")


def load_rows(data: Path) -> dict[str, list[dict]]:
    """file -> its labelled rows."""
    rows: dict[str, list[dict]] = collections.defaultdict(list)
    with open(data / "labels.jsonl", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                row = json.loads(line)
                rows[row["file"]].append(row)
    return rows


def read_text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")


def line_starts(text: str) -> list[int]:
    starts = [0]
    position = text.find("\n")
    while position != -1:
        starts.append(position + 1)
        position = text.find("\n", position + 1)
    return starts


def value_positions(row: dict, text: str, starts: list[int]) -> list[int]:
    """The offsets in ``text`` of the row's value (README, "Scoring")."""
    first, last = row["line"] - 1, row["line_end"] - 1

    def line(i: int) -> tuple[int, int]:
        end = starts[i + 1] - 1 if i + 1 < len(starts) else len(text)
        return starts[i], end

    if row["value_start"] is None:
        positions = []
        for i in range(first, last + 1):
            s, e = line(i)
            raw = text[s:e]
            lead = len(raw) - len(raw.lstrip())
            positions.extend(range(s + lead, s + len(raw.rstrip())))
        return positions
    if first == last:
        s, e = line(first)
        end = e if row["value_end"] is None else s + row["value_end"]
        return [p for p in range(s + row["value_start"], min(end, e)) if text[p] != "\r"]
    positions = []
    pem = "PEM" in (row["category"] or "")
    for i in range(first, last + 1):
        s, e = line(i)
        if i == first:
            s += row["value_start"]
        if i == last and row["value_end"] is not None:
            e = min(e, starts[i] + row["value_end"])
        if pem and PEM_HEADER.match(text[starts[i]:e]):
            continue
        positions.extend(p for p in range(s, e) if text[p] not in "\r\n")
    return positions


def survives(positions: list[int], redacted: bytearray) -> bool:
    """Does a run of min(8, len) consecutive characters of the value escape redaction?"""
    need = min(PIECE, len(positions))
    if need == 0:
        return False
    run = 0
    for p in positions:
        run = 0 if redacted[p] else run + 1
        if run >= need:
            return True
    return False


def bastion_masks(rows: dict[str, list[dict]], data: Path) -> tuple[dict[str, bytearray], dict[str, bytearray], float]:
    """file -> a mask of the characters the sanitizer replaced; file -> the mask of those replaced by
    a rule outside ``BY_DESIGN``; and the seconds it took."""
    captured: list = []
    original = scanner.replace_findings

    def capture(text, findings):
        captured.append(findings)
        return original(text, findings)

    scanner.replace_findings = capture
    sanitizer = scanner.Sanitizer()
    masks, others, seconds = {}, {}, 0.0
    try:
        for name in rows:
            text = read_text(data / name)
            captured.clear()
            started = time.perf_counter()
            sanitizer.redact_found(text)
            seconds += time.perf_counter() - started
            mask, other = bytearray(len(text)), bytearray(len(text))
            for findings in captured:
                for finding in findings:
                    mask[finding.start:finding.end] = b"\1" * (finding.end - finding.start)
                    if finding.rule not in BY_DESIGN:
                        other[finding.start:finding.end] = b"\1" * (finding.end - finding.start)
            masks[name], others[name] = mask, other
    finally:
        scanner.replace_findings = original
    return masks, others, seconds


def lines_of_mask(text: str, mask: bytearray, starts: list[int]) -> set[int]:
    """1-based numbers of the lines holding a redacted character."""
    changed, index = set(), 0
    position = mask.find(1)
    while position != -1:
        while index + 1 < len(starts) and starts[index + 1] <= position:
            index += 1
        changed.add(index + 1)
        end = starts[index + 1] if index + 1 < len(starts) else len(mask)
        position = mask.find(1, end)
    return changed


def run_detect_secrets(venv: Path, data: Path, files: list[str]) -> dict[str, set[int]]:
    """file -> the lines detect-secrets reports (``scan --all-files``, default plugins)."""
    exe = venv / "bin" / "detect-secrets"
    done = subprocess.run([str(exe), "scan", "--all-files", *files], cwd=data, capture_output=True, text=True,
                          check=True)
    results = json.loads(done.stdout)["results"]
    return {name: {hit["line_number"] for hit in hits} for name, hits in results.items()}


def run_credsweeper(venv: Path, data: Path) -> dict[str, set[int]]:
    """file -> the lines CredSweeper reports (``--path DIR``, its ML filter on)."""
    exe = venv / "bin" / "credsweeper"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        subprocess.run([str(exe), "--path", str(data), "--save-json", str(out)], capture_output=True, text=True,
                       check=True)
        found = json.loads(out.read_text(encoding="utf-8"))
    lines: dict[str, set[int]] = collections.defaultdict(set)
    root = str(data.resolve()) + os.sep
    for candidate in found:
        for item in candidate.get("line_data_list", []):
            path = str(Path(item["path"]).resolve())
            if path.startswith(root):
                lines[path[len(root):]].add(item["line_num"])
    return lines


def score(rows: dict[str, list[dict]], hit) -> dict:
    """The figures of one tool; ``hit(row) -> bool`` says whether a row counts (detected or flagged)."""
    counts = collections.Counter()
    for file_rows in rows.values():
        for row in file_rows:
            truth = row["truth"]
            counted = hit(row)
            counts[truth] += 1
            counts[truth + "+"] += counted
            if truth == "T" and not set((row["category"] or "").split(":")) <= GUID_ONLY:
                counts["T*"] += 1
                counts["T*+"] += counted
    return figures(counts)


def figures(counts: collections.Counter) -> dict:
    def share(part, whole):
        return round(counts[part] / counts[whole], 4) if counts[whole] else None

    detected, flagged = counts["T+"], counts["F+"]
    precision = detected / (detected + flagged) if detected + flagged else 0.0
    recall = detected / counts["T"] if counts["T"] else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"recall": share("T+", "T"), "recall_without_uuid_s3": share("T*+", "T*"),
            "false_flags": share("F+", "F"), "x_flagged": share("X+", "X"),
            "precision": round(precision, 4), "f1": round(f1, 4),
            "counts": {"T": f"{counts['T+']}/{counts['T']}", "T_without_uuid_s3": f"{counts['T*+']}/{counts['T*']}",
                       "F": f"{counts['F+']}/{counts['F']}", "X": f"{counts['X+']}/{counts['X']}"}}


def without_by_design(rows: dict[str, list[dict]], span_hit, by_design) -> dict:
    """The F rows changed only by ``BY_DESIGN`` rules, counted apart, and the false-flag rate on the rest."""
    counts = collections.Counter()
    for file_rows in rows.values():
        for row in file_rows:
            if row["truth"] == "F":
                counts["F"] += 1
                if span_hit(row):
                    counts["by_design" if by_design(row) else "flagged"] += 1
    rest = counts["F"] - counts["by_design"]
    return {"by_design": {"rules": sorted(BY_DESIGN), "F_rows": counts["by_design"]},
            "false_flags_without_by_design": round(counts["flagged"] / rest, 4) if rest else None,
            "F_without_by_design": f"{counts['flagged']}/{rest}"}


def bastion_report(rows: dict[str, list[dict]], data: Path, misses: int, per_repo: bool = False) -> dict:
    masks, others, seconds = bastion_masks(rows, data)
    texts = {name: read_text(data / name) for name in rows}
    starts = {name: line_starts(text) for name, text in texts.items()}
    changed = {name: lines_of_mask(texts[name], masks[name], starts[name]) for name in rows}

    def span_hit(row):
        positions = value_positions(row, texts[row["file"]], starts[row["file"]])
        mask = masks[row["file"]]
        if row["truth"] == "T":
            return not survives(positions, mask)
        return any(mask[p] for p in positions)

    def line_hit(row):
        return any(n in changed[row["file"]] for n in range(row["line"], row["line_end"] + 1))

    def by_design(row):
        positions = value_positions(row, texts[row["file"]], starts[row["file"]])
        return span_hit(row) and not any(others[row["file"]][p] for p in positions)

    span = score(rows, span_hit)
    span.update(without_by_design(rows, span_hit, by_design))
    report = {"span_rule": span, "line_rule": score(rows, line_hit), "seconds": round(seconds, 2)}
    if misses:
        report["misses"] = examples(rows, texts, starts, span_hit, misses)
    if per_repo:
        repos = per_repository(rows, span_hit, by_design)
        report["per_repository"] = {name: {"T_without_uuid_s3": f"{c['T*+']}/{c['T*']}", "F": f"{c['F+']}/{c['F']}",
                                           "F_by_design": c["F~"]} for name, c in sorted(repos.items())}
        report["resampled_repositories"] = resampled(repos)
    return report


def per_repository(rows: dict[str, list[dict]], span_hit, by_design) -> dict[str, collections.Counter]:
    """repository -> its counts (span rule): ``T*``/``T*+`` real rows without UUID/S3 and those found,
    ``F``/``F+`` harmless rows and those flagged, ``F~`` flagged only by a ``BY_DESIGN`` rule."""
    repos: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for name, file_rows in rows.items():
        counts = repos[name.split("/", 1)[0]]
        for row in file_rows:
            if row["truth"] == "T" and not set((row["category"] or "").split(":")) <= GUID_ONLY:
                counts["T*"] += 1
                counts["T*+"] += span_hit(row)
            elif row["truth"] == "F":
                hit = span_hit(row)
                counts["F"] += 1
                counts["F+"] += hit
                counts["F~"] += hit and by_design(row)
    return repos


def resampled(repos: dict[str, collections.Counter], draws: int = RESAMPLES) -> dict:
    """What a split of as many other repositories of the same kind might give: the repositories drawn
    with replacement ``draws`` times (a fixed seed), the 5th, 50th and 95th percentiles of recall
    without UUID/S3 and of the false-flag rate, and how often each target holds."""
    rng = random.Random(RESAMPLE_SEED)
    names, recalls, flags = sorted(repos), [], []
    for _ in range(draws):
        drawn = [repos[rng.choice(names)] for _ in names]
        real, harmless = sum(c["T*"] for c in drawn), sum(c["F"] for c in drawn)
        recalls.append(sum(c["T*+"] for c in drawn) / real if real else 1.0)
        flags.append(sum(c["F+"] for c in drawn) / harmless if harmless else 0.0)
    recalls.sort()
    flags.sort()

    def spread(values):
        return [round(values[int(share * (len(values) - 1))], 4) for share in (0.05, 0.5, 0.95)]

    return {"draws": draws, "recall_without_uuid_s3_p5_p50_p95": spread(recalls),
            "false_flags_p5_p50_p95": spread(flags),
            "recall_target_held": round(sum(r >= 0.90 for r in recalls) / draws, 3),
            "false_flag_target_held": round(sum(f <= 0.03 for f in flags) / draws, 3)}


def examples(rows, texts, starts, span_hit, limit: int) -> dict:
    """Up to ``limit`` missed T rows and flagged F rows per category, each as its line (for development)."""
    out: dict[str, list[str]] = collections.defaultdict(list)
    for name, file_rows in rows.items():
        for row in file_rows:
            if row["truth"] == "X" or span_hit(row) != (row["truth"] == "F"):
                continue
            key = ("missed " if row["truth"] == "T" else "flagged ") + (row["category"] or "")
            if len(out[key]) < limit:
                line = texts[name][starts[name][row["line"] - 1]:].split("\n", 1)[0]
                out[key].append(f"{name}:{row['line']}: {line.strip()[:200]}")
    return dict(out)


def peer_report(rows: dict[str, list[dict]], data: Path, venv: Path) -> dict:
    report = {}
    for tool, run in (("detect_secrets", lambda: run_detect_secrets(venv, data, sorted(rows))),
                      ("credsweeper", lambda: run_credsweeper(venv, data))):
        try:
            lines = run()
        except (OSError, subprocess.CalledProcessError, ValueError, KeyError) as error:
            report[tool] = {"error": f"{type(error).__name__}: {str(error)[:200]}"}
            continue
        report[tool] = {"line_rule": score(rows, lambda row: any(
            n in lines.get(row["file"], ()) for n in range(row["line"], row["line_end"] + 1)))}
    return report


SUMMARY = ("recall_without_uuid_s3", "false_flags", "false_flags_without_by_design", "precision", "f1")


def side_by_side(report: dict) -> dict:
    """One line per tool and rule, the figures the targets name, to read the three tools at a glance."""
    lines = {f"bastion ({rule})": report["bastion"][f"{rule}_rule"] for rule in ("span", "line")}
    for tool in ("credsweeper", "detect_secrets"):
        if "line_rule" in report.get(tool, {}):
            lines[f"{tool} (line)"] = report[tool]["line_rule"]
    return {name: " ".join(f"{key}={figures[key]}" for key in SUMMARY if key in figures)
            for name, figures in lines.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--code", help="a checkout whose bastion_agent to measure (default: this one)")
    parser.add_argument("--peer-venv", default=str(PEER_VENV), help="a bench-only venv with detect-secrets and credsweeper")
    parser.add_argument("--no-peers", action="store_true", help="score bastion only")
    parser.add_argument("--misses", type=int, default=0, help="list N missed/flagged rows per category")
    parser.add_argument("--per-repo", action="store_true",
                        help="add each repository's counts and a resampling of the repositories")
    parser.add_argument("--data", default=str(DATA))
    args = parser.parse_args(argv)
    data = Path(args.data)
    if not (data / "labels.jsonl").is_file():
        print(f"creddata: no labels.jsonl in {data} (set BASTION_CREDDATA)", file=sys.stderr)
        return 2
    rows = load_rows(data)
    report = {"data": str(data), "code": str(Path(scanner.__file__).resolve().parents[2]),
              "bastion": bastion_report(rows, data, args.misses, args.per_repo)}
    if not args.no_peers:
        report.update(peer_report(rows, data, Path(args.peer_venv)))
    report["side_by_side"] = side_by_side(report)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
