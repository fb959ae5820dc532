#!/usr/bin/env python3
"""The chunk stage against the floor of tokenising and hashing the same text.

The floor is the least any chunker must do: find every token (the regular
expression ``\\w+|[^\\w\\s]``) and sha256 the text once, over texts already
in memory. The chunk stage (``embed.run_chunk``) also reads each sanitized
file, cuts and hashes every window (overlapping windows hash some text
twice) and writes ``chunks.jsonl``. Both run over the same sanitized store,
made from a test collection in ``../shared/data/ir`` (SciFact by default);
each figure is the best of ``--repeat`` runs, and ``ratio`` is stage over
floor (target <= 2).

Usage: python3 bench/embed/chunk_speed.py [--collection scifact] [--repeat 5]
``BASTION_SHARED_DATA`` overrides ``../shared/data``. Prints JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bastion_agent import embed
from bastion_agent.config import manifest as manifest_module  # noqa: E402
from bastion_agent.core.layout import Layout  # noqa: E402
from bastion_agent.testing.testsupport import clean_env, write_manifest, write_sanitized_store  # noqa: E402


def shared_data() -> Path:
    return Path(os.environ.get("BASTION_SHARED_DATA") or REPO.parent / "shared" / "data")


def floor(texts: list[str]) -> float:
    started = time.perf_counter()
    for text in texts:
        embed.TOKEN_RE.findall(text)
        hashlib.sha256(text.encode("utf-8")).hexdigest()
    return time.perf_counter() - started


def stage(manifest, layout: Layout) -> float:
    started = time.perf_counter()
    embed.run_chunk(manifest, layout)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--collection", default="scifact")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    docs = sorted((shared_data() / "ir" / args.collection / "docs").glob("*.txt"))
    texts = {path.read_text(encoding="utf-8"): [path.name] for path in docs}
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-chunk-") as tmp, clean_env():
        folder = Path(tmp)
        layout = Layout(folder / "out")
        write_sanitized_store(layout, texts)
        for size, overlap in ((256, 32), (64, 16)):
            manifest = manifest_module.load(write_manifest(folder, size=size, overlap=overlap))
            floors, stages = [], []
            for _ in range(args.repeat):  # interleaved, so that a busy machine slows both alike
                floors.append(floor(list(texts)))
                stages.append(stage(manifest, layout))
            floor_s, stage_s = min(floors), min(stages)
            windows = sum(1 for _ in open(layout.chunks_path, encoding="utf-8"))
            results.append({"size_tokens": size, "overlap_tokens": overlap, "windows": windows,
                            "stage_s": round(stage_s, 4), "floor_s": round(floor_s, 4),
                            "ratio": round(stage_s / floor_s, 3)})
    print(json.dumps({"collection": args.collection, "documents": len(texts),
                      "characters": sum(map(len, texts)), "runs": results}, indent=2))


if __name__ == "__main__":
    main()
