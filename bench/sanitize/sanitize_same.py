#!/usr/bin/env python3
"""Does this checkout sanitize real text byte for byte as another checkout does?

A speed change to a detector must not change what it finds. This script
sanitizes the same texts with two checkouts, each in its own process (two
``bastion_agent`` packages cannot share one), and compares the output of
every text: the sanitized text, the placeholder counts and the values found
for the copies pass. The texts, read in place: the Cranfield and SciFact
documents of ``../shared/data/ir``, text files under ``/usr/share/doc``
(gzip decompressed, up to ``--doc-mb``), this checkout's own ``.py``
files, and the contexts of ``../shared/data/secrets`` (``secrets.jsonl``
and ``negatives.jsonl``, each context one text). Prints JSON: texts per
corpus, how many differ, and the first differing ones with the offset of
the first difference.

Usage: python3 bench/sanitize/sanitize_same.py --baseline DIR [--doc-mb 20]
(DIR: e.g. ``git worktree add /tmp/base HEAD`` before the change).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # bench/, beside the package
DATA = Path(os.environ.get("BASTION_SHARED_DATA") or HERE.parent.parent / "shared" / "data")
if not DATA.is_dir():
    DATA = Path("/work/shared/data")
SKIP_SUFFIXES = (".png", ".gif", ".jpg", ".jpeg", ".svg", ".ico", ".pdf", ".woff", ".ttf", ".zip", ".bz2", ".xz")

# Runs in the checkout under test: one JSON line per text, its sanitized
# output (or only its hash, to keep the pipe small) and what was found.
WORKER = r"""
import hashlib, json, sys
sys.path.insert(0, sys.argv[1])
try:
    from bastion_agent.sanitizing.scanner import Sanitizer
except ImportError:  # a checkout from before the scanner had a module of its own
    from bastion_agent.sanitizing.sanitize import Sanitizer
sanitizer = Sanitizer()
full = sys.argv[3] == "full"
with open(sys.argv[2], encoding="utf-8") as texts:
    for line in texts:
        text = json.loads(line)
        clean, counts, found = sanitizer.redact_found(text)
        record = [clean if full else hashlib.sha256(clean.encode("utf-8", "surrogatepass")).hexdigest(),
                  sorted(counts.items()), hashlib.sha256(json.dumps(sorted(found.items())).encode()).hexdigest()]
        print(json.dumps(record))
"""


def _text_files(limit_bytes: int):
    """Text files under /usr/share/doc, in a fixed order, up to ``limit_bytes`` of text."""
    size = 0
    for root, dirs, names in os.walk("/usr/share/doc"):
        dirs.sort()
        for name in sorted(names):
            path = Path(root, name)
            if path.is_symlink() or name.lower().endswith(SKIP_SUFFIXES):
                continue
            try:
                data = gzip.open(path).read() if name.endswith(".gz") else path.read_bytes()
            except (OSError, EOFError):
                continue
            if b"\0" in data[:8192]:
                continue
            size += len(data)
            yield data.decode("utf-8", "replace")
            if size >= limit_bytes:
                return


def _contexts(path: Path):
    """Each record's context: a text, or a JSON object of file name -> text (each one text)."""
    if not path.is_file():
        return
    for line in path.read_text(encoding="utf-8").splitlines():
        context = json.loads(line).get("context", "")
        try:
            files = json.loads(context)
        except ValueError:
            files = None
        if isinstance(files, dict):
            yield from (v for v in files.values() if isinstance(v, str))
        else:
            yield context


def corpora(doc_mb: float) -> dict[str, list[str]]:
    """Corpus name -> its texts, each read once, in a fixed order."""
    read = lambda paths: [p.read_text(encoding="utf-8", errors="replace") for p in paths]  # noqa: E731
    return {
        "cranfield": read(sorted((DATA / "ir" / "cranfield" / "docs").glob("*.txt"))),
        "scifact": read(sorted((DATA / "ir" / "scifact" / "docs").glob("*.txt"))),
        "usr-share-doc": list(_text_files(int(doc_mb * 1e6))),
        "source": read(sorted((HERE.parent / "bastion_agent").glob("**/*.py"))),
        "secrets-contexts": [*_contexts(DATA / "secrets" / "secrets.jsonl"),
                             *_contexts(DATA / "secrets" / "negatives.jsonl")],
    }


def _run(code: Path, texts_file: str, mode: str) -> list:
    out = subprocess.run([sys.executable, "-c", WORKER, str(code), texts_file, mode],
                         check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def _first_difference(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def compare(baseline: Path, doc_mb: float = 20.0, shown: int = 5) -> dict:
    """Per corpus: texts, bytes, and the texts whose output differs between this checkout and ``baseline``."""
    report: dict = {"baseline": str(baseline), "corpora": {}, "differing": 0}
    with tempfile.TemporaryDirectory() as folder:
        for name, texts in corpora(doc_mb).items():
            texts_file = os.path.join(folder, "texts.jsonl")
            with open(texts_file, "w", encoding="utf-8") as out:
                out.writelines(json.dumps(t) + "\n" for t in texts)
            this, base = _run(HERE.parent, texts_file, "hash"), _run(baseline, texts_file, "hash")
            differ = [i for i, (a, b) in enumerate(zip(this, base)) if a != b]
            entry = {"texts": len(texts), "megabytes": round(sum(len(t.encode("utf-8", "replace")) for t in texts) / 1e6, 2),
                     "differing": len(differ)}
            if differ:
                with open(texts_file, "w", encoding="utf-8") as out:
                    out.writelines(json.dumps(texts[i]) + "\n" for i in differ[:shown])
                full_this, full_base = _run(HERE.parent, texts_file, "full"), _run(baseline, texts_file, "full")
                entry["examples"] = [{"text": i, "first_difference": _first_difference(a[0], b[0]),
                                      "this": a[0][max(0, _first_difference(a[0], b[0]) - 60):][:160],
                                      "baseline": b[0][max(0, _first_difference(a[0], b[0]) - 60):][:160],
                                      "counts_this": a[1], "counts_baseline": b[1]}
                                     for i, a, b in zip(differ, full_this, full_base)]
            report["corpora"][name] = entry
            report["differing"] += len(differ)
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="root of the checkout to compare with (holds bastion_agent/)")
    parser.add_argument("--doc-mb", type=float, default=20.0, help="megabytes of /usr/share/doc text to read")
    args = parser.parse_args(argv)
    report = compare(Path(args.baseline), args.doc_mb)
    print(json.dumps(report, indent=2))
    return 1 if report["differing"] else 0


if __name__ == "__main__":
    sys.exit(main())
