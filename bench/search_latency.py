#!/usr/bin/env python3
"""Search latency at 10k, 100k and 1M synthetic chunks; ANN recall; exact scan against bare numpy.

For each size it writes a temporary ``vectors.db`` of clustered 384-dimension
vectors (1000 cluster centres plus noise, so nearest neighbours mean
something) and short texts over a 5000-word vocabulary, then measures:

- ``refresh_s``: ``embed.refresh_derived`` (the vector file and, above
  ``ann.MIN_ROWS``, the ANN index), what the embed stage calls at its end;
- ``cold_cli``: wall and CPU time of ``python3 -m bastion_agent search`` in a
  new process (the loopback stub embeds the query), median of 5, per mode;
- ``warm_ms``: p50 / p95 of ``SearchIndex.search`` on one open index (after
  one warm-up pass), per mode (vector uses the ANN index above the
  threshold), and ``exact``;
- ``recall_at_10``: the ANN ranking against the exact one on the same queries;
- ``bare_numpy_ms``: p50 of ``matrix @ query`` on the same memory-mapped
  matrix, and ``exact_over_bare``: the exact search's p50 over it (the scan
  uses ``einsum``, single-threaded, which a busy machine does not stall:
  ``bare_einsum_ms`` is that product alone).

Usage: python3 bench/search_latency.py [--sizes 10000,100000,1000000] [--queries 200]
Needs numpy and usearch (pip install -e '.[fast,ann]'). Prints JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from bastion_agent import ann, embed, vectorstore  # noqa: E402
from bastion_agent.layout import Layout, ensure_private_dir  # noqa: E402
from bastion_agent.stub_server import StubServer  # noqa: E402

DIM = 384
MODEL = "bench-model"
VOCABULARY = [f"w{i:04d}" for i in range(5000)]


def manifest_stub():
    from types import SimpleNamespace

    return SimpleNamespace(embed=SimpleNamespace(vector_key=MODEL, dim=DIM), search_mode=None)


def write_manifest(folder: Path) -> Path:
    (folder / "docs").mkdir(exist_ok=True)
    path = folder / "manifest.toml"
    path.write_text(f'[source]\nroot = "docs"\n\n[embed]\nmodel = "{MODEL}"\ndim = {DIM}\n\n'
                    "[embed.chunk]\nsize_tokens = 256\noverlap_tokens = 32\n", encoding="utf-8")
    return path


def clustered(rng, n: int, centres):
    labels = rng.integers(0, len(centres), n)
    return (centres[labels] + 0.6 * rng.standard_normal((n, DIM), dtype=np.float32)).astype("<f4")


def build_store(layout: Layout, n: int, rng, centres) -> float:
    started = time.monotonic()
    ensure_private_dir(layout.root)
    db = vectorstore.connect(layout.vectors_db, create=True)
    ids = [hashlib.sha256(f"chunk {i}".encode()).hexdigest() for i in range(n)]
    words = rng.integers(0, len(VOCABULARY), (n, 12))
    chunks = ((ids[i], ids[i - i % 10], i % 10, 0, 80, " ".join(VOCABULARY[w] for w in words[i])) for i in range(n))
    documents = [(ids[i], json.dumps([f"doc{i}.txt"])) for i in range(0, n, 10)]
    vectorstore.replace_chunks(db, chunks, documents)
    for first in range(0, n, 50_000):
        block = clustered(rng, min(50_000, n - first), centres)
        rows = ((ids[first + j], block[j].tobytes()) for j in range(len(block)))
        vectorstore.add_vectors(db, MODEL, DIM, rows, "2026-01-01T00:00:00+00:00")
    db.close()
    return time.monotonic() - started


def percentiles(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {"p50": round(1000 * statistics.median(ordered), 3),
            "p95": round(1000 * ordered[int(0.95 * (len(ordered) - 1))], 3)}


def timed(function, arguments) -> tuple[list[float], list]:
    times, results = [], []
    for argument in arguments:
        started = time.perf_counter()
        results.append(function(argument))
        times.append(time.perf_counter() - started)
    return times, results


def cold_cli(manifest: Path, out: Path, url: str, mode: str, *extra: str, runs: int = 5) -> dict:
    """Median wall and CPU (user + system) seconds of the search command in a new process.

    CPU time is reported too because other work on a shared machine
    stretches wall time but not the process's own CPU time.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBED_", "BASTION_"))}
    env.update(EMBED_URL=url, PYTHONPATH=str(REPO))
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "bastion_agent", "search", str(manifest), "w0042 w0017 pump",
                               "--out", str(out), "--json", "--mode", mode, *extra], env=env, cwd=REPO,
                              capture_output=True, text=True)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if done.returncode != 0:
            raise SystemExit(f"search failed: {done.stderr.strip()}")
    return {"wall_s": round(statistics.median(walls), 3), "cpu_s": round(statistics.median(cpus), 3)}


def measure(n: int, queries: int, stub: StubServer, seed: int = 0, reuse: Path | None = None) -> dict:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((1000, DIM), dtype=np.float32)
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        folder = reuse or Path(tmp)
        layout = Layout(folder / "out")
        result = {"chunks": n, "dim": DIM}
        if reuse and layout.vectors_db.exists():
            result["reused_store"] = str(reuse)
        else:
            result["write_store_s"] = round(build_store(layout, n, rng, centres), 1)
        started = time.monotonic()
        embed.refresh_derived(layout, manifest_stub())
        result["refresh_s"] = round(time.monotonic() - started, 1)
        manifest = write_manifest(folder)
        result["cold_cli"] = {mode: cold_cli(manifest, layout.root, stub.url, mode)
                              for mode in ("vector", "keyword", "hybrid")}
        result["cold_cli"]["vector --exact"] = cold_cli(manifest, layout.root, stub.url, "vector", "--exact")
        index = embed.SearchIndex.load(manifest_stub(), layout)
        result["ann_used"] = index.ann is not None
        points = clustered(rng, queries, centres) + 0.3 * rng.standard_normal((queries, DIM), dtype=np.float32)
        vectors = [row.tolist() for row in points]
        texts = [" ".join(VOCABULARY[w] for w in rng.integers(0, len(VOCABULARY), 3)) for _ in range(queries)]
        pairs = list(zip(texts, vectors))
        for text, vector in pairs:  # warm up: serve answers from pages already mapped
            index.search(text, vector, 10, "hybrid")
        times, approximate = timed(lambda p: index.search(p[0], p[1], 10, "vector"), pairs)
        warm = {"vector": percentiles(times)}
        times, exact = timed(lambda p: index.search(p[0], p[1], 10, "vector", exact=True), pairs)
        warm["exact"] = percentiles(times)
        for mode in ("keyword", "hybrid"):
            times, _ = timed(lambda p: index.search(p[0], p[1], 10, mode), pairs)
            warm[mode] = percentiles(times)
        result["warm_ms"] = warm
        recalls = [len({h.chunk_id for h in a} & {h.chunk_id for h in e}) / 10 for a, e in zip(approximate, exact)]
        result["recall_at_10"] = round(statistics.mean(recalls), 4)
        matrix = index.vectors.matrix
        bare, _ = timed(lambda v: matrix @ np.asarray(v, dtype=np.float32), vectors)
        scan, _ = timed(lambda v: index.vectors.top(v, 26), vectors)
        result["bare_numpy_ms"] = percentiles(bare)
        bare_einsum, _ = timed(lambda v: np.einsum("ij,j->i", matrix, np.asarray(v, dtype=np.float32)), vectors)
        result["bare_einsum_ms"] = percentiles(bare_einsum)
        result["exact_scan_ms"] = percentiles(scan)
        result["exact_over_bare"] = round(warm["exact"]["p50"] / result["bare_numpy_ms"]["p50"], 3)
        result["exact_scan_over_bare"] = round(result["exact_scan_ms"]["p50"] / result["bare_numpy_ms"]["p50"], 3)
        if n <= 20_000:
            pure = embed.SearchIndex.load(manifest_stub(), layout, use_numpy=False)
            times, _ = timed(lambda p: pure.search(p[0], p[1], 10, "vector"), pairs[:20])
            result["warm_pure_python_ms"] = percentiles(times)
            pure.close()
        index.close()
        result["index_bytes"] = sum(p.stat().st_size for p in (layout.root / "index").iterdir())
        result["vectors_db_bytes"] = layout.vectors_db.stat().st_size
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--keep", metavar="DIR", type=Path,
                        help="build each store in DIR/SIZE and keep it; a later run reuses it (delete DIR after)")
    args = parser.parse_args()
    if not ann.available():
        raise SystemExit("usearch is not installed: pip install -e '.[fast,ann]'")
    results = []
    with StubServer(dim=DIM) as stub:
        for size in (int(s) for s in args.sizes.split(",")):
            reuse = args.keep / str(size) if args.keep else None
            if reuse:
                reuse.mkdir(parents=True, exist_ok=True)
            results.append(measure(size, args.queries, stub, reuse=reuse))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"ann_min_rows": ann.MIN_ROWS, "cpus": os.cpu_count(), "sizes": results}, indent=2))


if __name__ == "__main__":
    main()
