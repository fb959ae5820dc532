#!/usr/bin/env python3
"""What the remediation purge costs on a store of about 10,000 windows of real text.

Sweeps a test collection in ``../shared/data/ir`` (SciFact by default, read
in place: ``source.root`` points at it) into a temporary output folder,
through the CLI, with the loopback stub as the model server (in its own
process). Then, in the same run:

- ``sweep_unchanged``: the baseline, a sweep of the unchanged folder (every
  stage, nothing to embed, no purge);
- ``sweep_with_rule``: a sweep after a custom ``[[sanitize.rules]]`` that
  matches a word of one document only (chosen from the collection): every
  text is sanitized again (the sanitizer changed), the document's new windows
  are embedded, and its old ones are purged;
- ``purge``: the purge alone in that sweep (``erase.erase_superseded``, timed
  by itself between chunk and embed): the old windows, ids and vectors
  deleted, FTS5 ``optimize``, the TRUNCATE checkpoint, every key's derived
  files in ``index/`` rebuilt.

``ratio_purge_to_sweep`` is the purge over the unchanged sweep;
``ratio_rule_sweep_to_sweep`` the whole rule sweep over it. Each figure is
the median of ``--rounds`` (the rule is made to match one more document each
round).

Usage: python3 bench/embed/erase.py [--collection scifact] [--size 192] [--rounds 3]
``BASTION_SHARED_DATA`` overrides ``../shared/data``. Prints JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bastion_agent.core.layout import Layout  # noqa: E402
from bastion_agent.embedding import erase  # noqa: E402
from bastion_agent.testing.testsupport import clean_env, run_cli  # noqa: E402

DIM = 384
WORD = re.compile(r"[A-Za-z]{9,}")


def shared_data() -> Path:
    return Path(os.environ.get("BASTION_SHARED_DATA") or REPO.parent / "shared" / "data")


@contextlib.contextmanager
def stub_process():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "bastion_agent.testing.stub_server", "--port", str(port),
                                "--dim", str(DIM)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO)
    try:
        process.stdout.readline()
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(30)


def rare_words(docs: Path, count: int) -> list[str]:
    """Words (9+ letters) that occur in exactly one document, one per document, the first ``count``."""
    seen: Counter = Counter()
    first_in: dict[str, str] = {}
    for path in sorted(docs.glob("*.txt")):
        for word in set(WORD.findall(path.read_text(encoding="utf-8", errors="replace").lower())):
            seen[word] += 1
            first_in.setdefault(word, path.name)
    chosen, used = [], set()
    for word in sorted(seen):
        if seen[word] == 1 and first_in[word] not in used and still_there(docs / first_in[word], word):
            chosen.append(word)
            used.add(first_in[word])
            if len(chosen) == count:
                break
    return chosen


def still_there(path: Path, word: str) -> bool:
    """Whether the word survives the default sanitizer in its document (not inside an address it removes)."""
    from bastion_agent.sanitizing.scanner import redact

    return re.search(rf"(?i)\b{word}\b", redact(path.read_text(encoding="utf-8", errors="replace"))) is not None


def write_manifest(folder: Path, root: Path, size: int, words: list[str]) -> Path:
    path = folder / "manifest.toml"
    text = (f'[source]\nroot = "{root}"\n\n[embed]\nmodel = "stub-model"\ndim = {DIM}\n\n'
            f"[embed.chunk]\nsize_tokens = {size}\noverlap_tokens = {size // 8}\n")
    if words:  # the words of every round so far: each round's rule changes one more document
        text += f'\n[[sanitize.rules]]\nid = "bench-word"\npattern = \'(?i)\\b(?:{"|".join(words)})\\b\'\n'
    path.write_text(text, encoding="utf-8")
    return path


def stage(name: str, manifest: Path, out: Path, url: str) -> float:
    started = time.perf_counter()
    with clean_env(EMBED_URL=url, EMBED_BATCH="256"):
        code, _, err = run_cli(name, manifest, "--out", out, "--quiet")
    if code != 0:
        raise SystemExit(f"{name} failed: {err.strip()}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--collection", default="scifact")
    parser.add_argument("--size", type=int, default=192, help="window size in tokens (192: about 10k SciFact windows)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    docs = shared_data() / "ir" / args.collection / "docs"
    words = rare_words(docs, args.rounds)
    figures: dict[str, list[float]] = {"sweep_unchanged": [], "sweep_with_rule": [], "purge": []}
    with tempfile.TemporaryDirectory(prefix="bastion-erase-") as tmp, stub_process() as url:
        folder, out = Path(tmp), Path(tmp) / "out"
        layout = Layout(out)
        manifest = write_manifest(folder, docs, args.size, [])
        first = stage("sweep", manifest, out, url)
        summary = json.loads(layout.summary_path("embed").read_text(encoding="utf-8"))
        for round_number, word in enumerate(words):
            figures["sweep_unchanged"].append(stage("sweep", manifest, out, url))
            manifest = write_manifest(folder, docs, args.size, words[: round_number + 1])
            started = time.perf_counter()
            for name in ("extract", "sanitize", "chunk"):
                stage(name, manifest, out, url)
            purge_started = time.perf_counter()
            erased = erase.erase_superseded(layout)
            figures["purge"].append(time.perf_counter() - purge_started)
            stage("embed", manifest, out, url)
            figures["sweep_with_rule"].append(time.perf_counter() - started)
            if erased != 1:
                raise SystemExit(f"the rule for {word!r} superseded {erased} documents, not 1")
            stage("sweep", manifest, out, url)  # settle, so the next unchanged sweep is unchanged
        size = layout.vectors_db.stat().st_size
    medians = {name: statistics.median(values) for name, values in figures.items()}
    print(json.dumps({
        "collection": args.collection,
        "windows": summary["windows"],
        "documents": summary["documents"],
        "size_tokens": args.size,
        "db_mb": round(size / 1e6, 1),
        "rounds": args.rounds,
        "first_sweep_seconds": round(first, 3),
        **{f"{name}_seconds": [round(v, 3) for v in values] for name, values in figures.items()},
        "ratio_purge_to_sweep": round(medians["purge"] / medians["sweep_unchanged"], 3),
        "ratio_rule_sweep_to_sweep": round(medians["sweep_with_rule"] / medians["sweep_unchanged"], 3),
    }, indent=2))


if __name__ == "__main__":
    main()
