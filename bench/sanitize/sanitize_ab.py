#!/usr/bin/env python3
"""Sanitize throughput of this checkout beside another one's (main's), in the same run.

Each measure runs in its own process (two ``bastion_agent`` packages cannot
share one), the two checkouts alternating ``--repeat`` times so that both
see the same load on a shared machine; the best time of each is kept. The
corpora: prose (the scifact abstracts of ``../shared/data/ir``, or
``BASTION_PROSE_DATA``) and source code (this package's own Python, dense in
token/key/password), read in place. Prints JSON: MB/s of each and the ratio
this / baseline (the target: >= 0.8), of wall time and, less moved by
the other jobs on a shared machine, of the process's CPU time (best of each).

Usage: python3 bench/sanitize/sanitize_ab.py --baseline DIR [--mb 2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # bench/, beside the package
PROSE = Path(os.environ.get("BASTION_PROSE_DATA", HERE.parent.parent / "shared" / "data" / "ir" / "scifact" / "docs"))
if not PROSE.is_dir():
    PROSE = Path("/work/shared/data/ir/scifact/docs")

TIMER = r"""
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bastion_agent.sanitizing.scanner import Sanitizer
files = sorted(Path(sys.argv[2]).glob(sys.argv[3]))
limit = int(float(sys.argv[4]) * 1e6)
texts, size = [], 0
for path in files:
    if size >= limit:
        break
    text = path.read_text(encoding="utf-8", errors="replace")
    texts.append(text)
    size += len(text.encode())
sanitizer = Sanitizer()
sanitizer.redact("warm up: password = x1y2z3w4")
start, cpu = time.perf_counter(), time.process_time()
for text in texts:
    sanitizer.redact_found(text) if hasattr(sanitizer, "redact_found") else sanitizer.redact(text)
print(size, time.perf_counter() - start, time.process_time() - cpu)
"""


def measure(code: Path, folder: Path, pattern: str, megabytes: float) -> tuple[int, float, float]:
    """(bytes, wall seconds, CPU seconds of the process) of one sanitize pass over the corpus."""
    out = subprocess.run([sys.executable, "-c", TIMER, str(code), str(folder), pattern, str(megabytes)],
                         check=True, capture_output=True, text=True).stdout.split()
    return int(out[0]), float(out[1]), float(out[2])


def compare(baseline: Path, megabytes: float = 2.0, repeat: int = 3) -> dict:
    """MB/s of this checkout and of ``baseline`` on prose and on source code, and their ratio (this / baseline)."""
    report = {"baseline": str(baseline), "target_ratio": 0.8}
    for name, folder, pattern, size_mb in (("prose", PROSE, "*.txt", megabytes),
                                           ("code", HERE.parent / "bastion_agent", "**/*.py", megabytes / 2)):
        best = {"this": None, "baseline": None}
        cpu = {"this": None, "baseline": None}
        size = 0
        for _ in range(max(1, repeat)):
            for which, code in (("baseline", baseline), ("this", HERE.parent)):
                size, seconds, cpu_seconds = measure(code, folder, pattern, size_mb)
                best[which] = seconds if best[which] is None else min(best[which], seconds)
                cpu[which] = cpu_seconds if cpu[which] is None else min(cpu[which], cpu_seconds)
        report[name] = {"megabytes": round(size / 1e6, 2),
                        "this_mb_s": round(size / 1e6 / best["this"], 2),
                        "baseline_mb_s": round(size / 1e6 / best["baseline"], 2),
                        "ratio": round(best["baseline"] / best["this"], 3),
                        # CPU time of the process: less moved by the other jobs' scheduling than wall time
                        "cpu_ratio": round(cpu["baseline"] / cpu["this"], 3)}
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="root of the checkout to compare with (holds bastion_agent/)")
    parser.add_argument("--mb", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    print(json.dumps(compare(Path(args.baseline), args.mb, args.repeat), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
