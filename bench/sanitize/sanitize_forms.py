#!/usr/bin/env python3
"""Disguised forms, OCR and PDF layouts, columns, vertical records, marked names and must-keep tables.

Plants fresh values (``bastion_agent/testing/disguised_forms.py``, a new draw
each run; ``--seed`` replays one) and prints one JSON object: per class, how
many planted texts had their values removed (or, for ``must-keep``, stayed
byte for byte), out of how many, and the names of the cases that failed.
With ``--baseline DIR`` the same cases also go through another checkout's
sanitizer (e.g. main's) in the same run, under ``"before"``.

Usage: python3 bench/sanitize/sanitize_forms.py [--seed N] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]


def _redact_all(cases: list[dict]) -> list[str]:
    """Each case's text through the sanitizer on this process's path (OCR pages marked when it can)."""
    from bastion_agent.sanitizing.scanner import sanitizer_for

    sanitizer = sanitizer_for(None)
    out = []
    for case in cases:
        if case["ocr"]:
            try:
                out.append(sanitizer.redact(case["text"], ocr_pages=[1])[0])
                continue
            except TypeError:  # a sanitizer that cannot be told which pages OCR read
                pass
        out.append(sanitizer.redact(case["text"])[0])
    return out


def _score(cases, outputs) -> dict:
    from bastion_agent.testing.disguised_forms import survives

    table: dict = {}
    for case, output in zip(cases, outputs):
        row = table.setdefault(case.cls, {"ok": 0, "of": 0, "failed": []})
        row["of"] += 1
        ok = survives(case, output) if case.keep else not survives(case, output)
        row["ok"] += ok
        if not ok:
            row["failed"].append(case.name)
    return table


def _outputs_of(code: str, cases) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(code).resolve()))
    payload = json.dumps([asdict(case) for case in cases])
    done = subprocess.run([sys.executable, __file__, "--child"], input=payload, capture_output=True, text=True,
                          env=env, check=True)
    return json.loads(done.stdout)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int)
    parser.add_argument("--baseline", help="another checkout whose sanitizer is scored beside this one")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_redact_all(json.load(sys.stdin))))
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bastion_agent.testing.disguised_forms import Draw, all_cases

    draw = Draw(args.seed)
    cases = all_cases(draw)
    result = {"seed": draw.seed, "after": _score(cases, _outputs_of(str(HERE), cases))}
    if args.baseline:
        result["before"] = _score(cases, _outputs_of(args.baseline, cases))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
