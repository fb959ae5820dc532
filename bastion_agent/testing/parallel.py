"""Run the unittest suite in parallel processes, one test module at a time per process: the README's test command.

    python3 -m bastion_agent.testing.parallel [-j JOBS] [MODULE ...]

Each test module runs in a fresh ``python -m unittest -v MODULE`` (so a
module's fixtures, environment and signals are its own, exactly as when it
runs alone), ``JOBS`` of them at once (default: the machine's cores, at
least 2: many tests wait on servers and subprocesses rather than compute).
The slowest modules start first, by the times of the last run kept in
``.test-times.json`` beside the package (a cache, ignored by git), so the
last module to finish is a short one.

Each module's output is printed whole when it finishes, never interleaved,
so ``-v``'s lines (``test_x (...) ... skipped 'reason'``) read as unittest
prints them; then every failing module's name, and the closing line
``N passed, N failed, N skipped`` that a reader of the log counts. The exit
status is 0 when every module passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]
TIMES = PACKAGE.parent / ".test-times.json"
RAN = re.compile(r"^Ran (\d+) tests? in ", re.M)
SKIPS = re.compile(r"skipped=(\d+)")
FAILS = re.compile(r"(?:failures|errors)=(\d+)")


@dataclass
class Outcome:
    module: str
    code: int
    output: str
    seconds: float

    def counts(self) -> tuple[int, int, int]:
        """``(passed, failed, skipped)`` from unittest's closing lines; a module that did not close is one failure."""
        ran = RAN.findall(self.output)
        if not ran:
            return 0, 1, 0
        total = int(ran[-1])
        tail = self.output[self.output.rfind("Ran "):]
        failed = sum(int(n) for n in FAILS.findall(tail)) or (1 if self.code else 0)
        skipped = sum(int(n) for n in SKIPS.findall(tail))
        return max(0, total - failed - skipped), failed, skipped


def test_modules() -> list[str]:
    """Every ``test_*.py`` module of the package, as unittest's discovery finds them."""
    found = []
    for path in sorted(PACKAGE.rglob("test_*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found.append(".".join(parts))
    return found


def run_module(module: str) -> Outcome:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "unittest", "-v", module], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                          cwd=PACKAGE.parent)
    return Outcome(module, done.returncode, done.stdout, time.monotonic() - started)


def slowest_first(modules: list[str]) -> list[str]:
    """Modules by their time in the last run, slowest first; a module not timed yet before all of them."""
    known = _known_times()
    return sorted(modules, key=lambda name: -known.get(name, float("inf")))


def _known_times() -> dict[str, float]:
    try:
        known = json.loads(TIMES.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(known, dict):
        return {}
    return {name: float(seconds) for name, seconds in known.items() if isinstance(seconds, (int, float))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bastion_agent.testing.parallel", description=__doc__.split("\n\n")[0])
    parser.add_argument("-j", "--jobs", type=int, default=max(2, os.cpu_count() or 1))
    parser.add_argument("modules", nargs="*", help="test modules (default: every one)")
    args = parser.parse_args(argv)
    modules = slowest_first(args.modules or test_modules())
    started = time.monotonic()
    outcomes = []
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for future in as_completed([pool.submit(run_module, module) for module in modules]):
            outcome = future.result()
            outcomes.append(outcome)
            sys.stdout.write(f"== {outcome.module} ({outcome.seconds:.1f} s)\n{outcome.output}\n")
            sys.stdout.flush()
    _remember(outcomes)
    return _close(outcomes, time.monotonic() - started)


def _remember(outcomes: list[Outcome]) -> None:
    try:
        TIMES.write_text(json.dumps({o.module: round(o.seconds, 2) for o in outcomes}, indent=0), encoding="utf-8")
    except OSError:
        pass  # a read-only checkout: the next run orders by name


def _close(outcomes: list[Outcome], seconds: float) -> int:
    passed = failed = skipped = 0
    for outcome in outcomes:
        counts = outcome.counts()
        passed, failed, skipped = passed + counts[0], failed + counts[1], skipped + counts[2]
    broken = sorted(o.module for o in outcomes if o.code != 0 or o.counts()[1])
    for module in broken:
        print(f"FAILED: {module}")
    print(f"{len(outcomes)} modules in {seconds:.1f} s")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
