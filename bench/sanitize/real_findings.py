#!/usr/bin/env python3
"""Findings of the sanitizer on real documents, for labelling by hand.

Walks a fixed, sorted sample of ``/usr/share/doc`` (and
``/usr/share/common-licenses``): text files and ``.gz`` files read as the
text they hold, at most ``--files`` of them, and prints one tab-separated
line per finding: the path relative to the root, the rule id, the matched
value (tabs and line breaks escaped). The labelled copy of this output is
``bastion_agent/sanitizing/testdata/real_findings.tsv`` (see its header), used by
``test_precision.py`` and ``bench/sanitize/sanitize.py``.

Usage: python3 bench/sanitize/real_findings.py [--files 400] [--code DIR]
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # bench/, beside the package
if "--code" in sys.argv:  # another checkout's sanitizer (main's, for the "before" counts)
    sys.path.insert(0, str(Path(sys.argv[sys.argv.index("--code") + 1]).resolve()))
else:
    sys.path.insert(0, str(HERE.parent))

from bastion_agent.sanitizing.scanner import Sanitizer, merge  # noqa: E402

ROOTS = (Path("/usr/share/doc"), Path("/usr/share/common-licenses"))
MAX_BYTES = 2_000_000


def sample(files: int) -> list[tuple[Path, str]]:
    """(file, name relative to /usr/share) of every n-th readable file, sorted, so the sample is stable."""
    found = []
    for root in ROOTS:
        if root.is_dir():
            for path in sorted(root.rglob("*")):
                if path.is_file() and not path.is_symlink() and path.stat().st_size <= MAX_BYTES:
                    found.append((path, str(path.relative_to(root.parent))))
    step = max(1, len(found) // files)
    return found[::step][:files]


def read_text(path: Path) -> str | None:
    data = path.read_bytes()
    if path.suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError):
            return None
    if b"\x00" in data[:4096]:
        return None
    return data.decode("utf-8", errors="replace")


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def findings(sanitizer: Sanitizer, text: str) -> list[tuple[str, str]]:
    return [(f.rule, text[f.start:f.end]) for f in merge(sanitizer.findings(text))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=400)
    parser.add_argument("--code", help="root of another checkout whose bastion_agent to run")
    args = parser.parse_args(argv)
    sanitizer = Sanitizer()
    for path, rel in sample(args.files):
        text = read_text(path)
        if text is None:
            continue
        for rule, value in findings(sanitizer, text):
            print(f"{rel}\t{rule}\t{escape(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
