"""The troff reader against ``man`` itself on this machine's pages.

For a sample of pages of sections 1-8 (``/usr/share/man/manN``, read in
place), the text the reader makes is compared with what ``man -l`` renders
(groff, the baseline), word by word: *precision* is the share of the
reader's words that man shows too (what is left of the source: requests,
escapes, comments), *recall* the share of man's words the reader keeps
(what it loses). The plain-text reading used before is measured the same
way in the same run. Pages that are only a ``.so`` alias are skipped (the
reader never follows them). Also: every page of ``/usr/share/man`` read
once, with the time and the slowest page.

    python3 bench/extract/troff_pages.py [--sample N]
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bastion_agent.extracting import readers  # noqa: E402

WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_'.-]*[A-Za-z0-9]|[A-Za-z0-9]")
ROOT = Path("/usr/share/man")


def rendered(raw: bytes) -> str:
    env = dict(os.environ, MANWIDTH="2000", LANG="C.UTF-8")
    out = subprocess.run(["man", "--no-hyphenation", "--no-justification", "-l", "-"], input=raw,
                         capture_output=True, env=env, cwd=ROOT, timeout=60).stdout.decode("utf-8", "replace")
    return re.sub(".\x08", "", out)


def overlap(mine: str, reference: str) -> tuple[float, float]:
    a, b = collections.Counter(WORD.findall(mine)), collections.Counter(WORD.findall(reference))
    shared = sum((a & b).values())
    return shared / max(1, sum(a.values())), shared / max(1, sum(b.values()))


def sample(count: int) -> list[Path]:
    rng = random.Random(27)
    paths = []
    for section in "12345678":
        folder = ROOT / f"man{section}"
        if folder.is_dir():
            names = sorted(p for p in folder.iterdir() if p.is_file() and not p.is_symlink())
            paths += rng.sample(names, min(count, len(names)))
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sample", type=int, default=40, help="pages per section compared with man (default 40)")
    args = parser.parse_args()
    if not ROOT.is_dir() or not shutil.which("man"):
        print(json.dumps({"skipped": "no man pages or no man(1) on this machine"}))
        return
    scores = {"troff reader": [], "plain text (before)": []}
    for number, path in enumerate(sample(args.sample)):
        print(number, path, file=sys.stderr, flush=True)
        data = path.read_bytes()
        raw = gzip.decompress(data) if path.name.endswith(".gz") else data
        if raw.lstrip().startswith(b".so "):
            continue
        reference = rendered(raw)
        if not reference.strip():
            continue
        kind = readers.kind_for(path.name, data[:8])
        scores["troff reader"].append(overlap(readers.read(kind, data).text or "", reference))
        plain_kind = "text.gz" if path.name.endswith(".gz") else "text"
        scores["plain text (before)"].append(overlap(readers.read(plain_kind, data).text or "", reference))
    result = {name: {"pages": len(pairs), "precision": round(statistics.mean(p for p, _ in pairs), 3),
                     "recall": round(statistics.mean(r for _, r in pairs), 3)} for name, pairs in scores.items()}
    started, slowest, count, refused = time.perf_counter(), (0.0, ""), 0, collections.Counter()
    raw_bytes = text_chars = 0
    for folder, _, names in os.walk(ROOT):
        for name in names:
            path = Path(folder) / name
            if path.is_symlink() or not path.is_file():
                continue
            data = path.read_bytes()
            one = time.perf_counter()
            reading = readers.read(readers.kind_for(name, data[:8]), data)
            slowest = max(slowest, (time.perf_counter() - one, str(path)))
            count += 1
            refused[reading.reason] += reading.text is None
            text_chars += len(reading.text or "")
            raw_bytes += len(gzip.decompress(data)) if name.endswith(".gz") else len(data)
    result["all pages"] = {"pages": count, "seconds": round(time.perf_counter() - started, 1),
                           "slowest_page_seconds": round(slowest[0], 3), "slowest_page": slowest[1],
                           "skipped": {reason: n for reason, n in refused.items() if n},
                           "text_chars_per_source_byte": round(text_chars / max(1, raw_bytes), 3)}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
