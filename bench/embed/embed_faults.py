"""A sweep of 10,000 chunks against a stub that spoils 10% of requests at random.

The stub (its own process) answers 429, 503, resets the connection, or
answers slower than ``EMBED_TIMEOUT`` on a random tenth of the requests. The
stage must finish with every chunk holding exactly one vector, each the
stub's right answer. Prints JSON: wall time, requests, retries, failed, the
faults served by kind, and the check.

    python3 bench/embed/embed_faults.py [--chunks 10000] [--fail-rate 0.1] [--concurrency 1]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared helpers

from _synthetic import clean_env, stub_process, synthetic_store, temp_folder  # noqa: E402

from bastion_agent import embed  # noqa: E402
from bastion_agent.embedding import vectorstore  # noqa: E402
from bastion_agent.testing.stub_server import bag_of_words  # noqa: E402


def check(layout, key: str, dim: int) -> dict:
    """Every current chunk has exactly one vector for ``key``, and it is the stub's vector for its text."""
    with sqlite3.connect(layout.vectors_db) as db:
        chunks = db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        per_chunk = db.execute(
            "SELECT c.chunk_id, COUNT(v.chunk_id) FROM chunks c LEFT JOIN vectors v"
            " ON v.chunk_id = c.chunk_id AND v.model = ? GROUP BY c.chunk_id", (key,)).fetchall()
        rows = db.execute("SELECT c.text, v.vec FROM chunks c JOIN vectors v USING (chunk_id) WHERE v.model = ?",
                          (key,)).fetchall()
        integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
    wrong = sum(1 for text, blob in rows if list(vectorstore.unpack(blob)) != bag_of_words(text, dim))
    counts = [n for _, n in per_chunk]
    return {
        "chunks": chunks,
        "chunks_with_exactly_one_vector": counts.count(1),
        "chunks_without_vector": counts.count(0),
        "wrong_vectors": wrong,
        "integrity_check": integrity,
        "every_chunk_has_exactly_one_vector": counts.count(1) == chunks == len(counts),
    }


def sweep(manifest, layout, args, fail_rate: float) -> dict:
    """One embed run from an empty vectors.db against a stub spoiling ``fail_rate`` of requests."""
    for suffix in ("", "-wal", "-shm"):
        layout.vectors_db.with_name(layout.vectors_db.name + suffix).unlink(missing_ok=True)
    stub_args = ["--dim", str(args.dim), "--fail-rate", str(fail_rate), "--seed", str(args.seed),
                 "--timeout-delay", str(args.timeout * 2)]
    with stub_process(*stub_args) as (url, stub_stats):
        env = {"EMBED_URL": url, "EMBED_BATCH": str(args.batch), "EMBED_TIMEOUT": str(args.timeout),
               "EMBED_CONCURRENCY": str(args.concurrency), "EMBED_BATCH_FIXED": "1"}  # the batches the figures name
        with clean_env(**env):
            started = time.perf_counter()
            summary = embed.run_embed(manifest, layout)
            wall = time.perf_counter() - started
    return {
        "wall_s": round(wall, 2),
        "requests": summary["requests"],
        "retries": summary["retries"],
        "failed": summary["failed"],
        "embedded": summary["embedded"],
        "stub_posts": stub_stats.get("posts"),
        "faults_served": stub_stats.get("faults"),
        "check": check(layout, manifest.embed.vector_key, args.dim),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--fail-rate", type=float, default=0.1)
    parser.add_argument("--timeout", type=float, default=1.0, help="EMBED_TIMEOUT for the run")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with temp_folder() as folder:
        _, manifest, layout = synthetic_store(Path(folder), args.chunks, args.dim)
        healthy = sweep(manifest, layout, args, 0.0)
        faulty = sweep(manifest, layout, args, args.fail_rate)
    result = {
        "chunks": args.chunks,
        "batch": args.batch,
        "dim": args.dim,
        "fail_rate": args.fail_rate,
        "embed_timeout_s": args.timeout,
        "concurrency": args.concurrency,
        "healthy_stub": healthy,
        "faulty_stub": faulty,
        "faulty_over_healthy_wall": round(faulty["wall_s"] / healthy["wall_s"], 2),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
