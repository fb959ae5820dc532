#!/usr/bin/env python3
"""Search latency on REAL prose at up to a million windows: vector, keyword and hybrid, warm and cold, old and new.

The store is ``bench/_realtext.py``'s: windows of real text (the shared test
collections, the licence texts, ``/usr/share/doc``), deduplicated, with the
loopback stub's bag-of-words vectors; it is built once into ``--keep
DIR/SIZE`` (outside the repository) and reused by later runs. Queries are
real questions: the first ``--queries`` of SciFact's and Cranfield's,
alternately.

Measured in one run, on one open ``embed.SearchIndex`` (after a warm-up pass):

- ``warm_ms``: p50 / p95 of ``vector`` (the ANN index above
  ``ann.MIN_ROWS``), ``exact``, ``keyword``, ``hybrid`` (what the product
  runs now), and the candidates for the keyword side:
  ``keyword_old`` (FTS5's BM25 over the OR of every word, the path before
  this change: the baseline), ``keyword_vocab_pruned`` (the same, without
  the words ``fts5vocab`` says are in more than ``VOCAB_MAX_SHARE`` of the
  windows), and ``hybrid_old`` (the old keyword path plus the vector side,
  fused by reciprocal ranks). The old paths cost a second or more a query at
  a million windows, so they run on the first ``--old-queries`` only.
- ``ratios``: each p50 over the old path's (``keyword_old``, ``hybrid_old``).
- ``cold_cli``: wall and CPU time of ``python3 -m bastion_agent search`` in a
  new process (the stub embeds the query), median of 3, per mode.

Usage: python3 bench/search/search_latency.py --keep /work/cache/search-1m-root [--sizes 1000000] [--queries 200]
Needs numpy and faiss (pip install -e '.[fast,ann]'). Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import _realtext  # noqa: E402
from bastion_agent.embedding import ann
from bastion_agent import embed
from bastion_agent.searching import fusion, keyword  # noqa: E402
from bastion_agent.core.layout import Layout  # noqa: E402
from bastion_agent.testing.stub_server import StubServer, bag_of_words  # noqa: E402

VOCAB_MAX_SHARE = 0.05


def questions(n: int) -> list[str]:
    """Real questions, alternately from SciFact and Cranfield."""
    lists = [[json.loads(line)["text"] for line in (_realtext.IR / name / "queries.jsonl").open(encoding="utf-8")]
             for name in ("scifact", "cranfield")]
    mixed = [text for pair in zip(*lists) for text in pair]
    return mixed[:n]


def percentiles(samples: tuple[list[float], list[float]]) -> dict:
    """p50 / p95 of wall time, and p50 of the thread's CPU time (which other work on the machine does not stretch)."""
    walls, cpus = (sorted(values) for values in samples)
    return {"p50": round(1000 * statistics.median(walls), 2),
            "p95": round(1000 * walls[int(0.95 * (len(walls) - 1))], 2),
            "cpu_p50": round(1000 * statistics.median(cpus), 2), "queries": len(walls)}


def timed(function, arguments) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    for argument in arguments:
        started, cpu = time.perf_counter(), time.thread_time()
        function(argument)
        walls.append(time.perf_counter() - started)
        cpus.append(time.thread_time() - cpu)
    return walls, cpus


def old_keyword(db, text: str, n: int) -> list[tuple[float, str]]:
    """The keyword path before this change: BM25 over the OR of every word, FTS5's ``ORDER BY rank``."""
    expression = keyword.fts_query(text)
    if not expression:
        return []
    ranked = db.execute("SELECT rowid, rank FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rank LIMIT ?",
                        (expression, n)).fetchall()
    if not ranked:
        return []
    marks = ",".join("?" * len(ranked))
    ids = dict(db.execute(f"SELECT rowid, chunk_id FROM chunks WHERE rowid IN ({marks})", [r for r, _ in ranked]))
    return sorted(((-score, ids[rowid]) for rowid, score in ranked if rowid in ids), key=lambda item: (-item[0], item[1]))


class VocabPruned:
    """The ``fts5vocab`` candidate: exact document frequencies, words in more than 5% of windows dropped."""

    def __init__(self, index: embed.SearchIndex):
        self.db = index.db
        self.vocabulary = index.vocabulary()
        self.db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.bench_vocab USING fts5vocab(main, chunks_fts, row)")

    def top(self, text: str, n: int) -> list:
        words = keyword.WORD_RE.findall(text.lower())
        self.vocabulary.stems.execute("DELETE FROM words")
        self.vocabulary.stems.executemany("INSERT INTO words(rowid, word) VALUES (?, ?)", enumerate(words))
        stems = dict(self.vocabulary.stems.execute("SELECT doc, term FROM word_terms"))
        kept = []
        for row, word in enumerate(words):
            found = self.db.execute("SELECT doc FROM temp.bench_vocab WHERE term = ?", (stems.get(row, ""),)).fetchone()
            if found and found[0] <= VOCAB_MAX_SHARE * self.vocabulary.windows and f'"{word}"' not in kept:
                kept.append(f'"{word}"')
        if not kept:
            return []
        return self.db.execute("SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY 2 LIMIT ?",
                               (" OR ".join(kept), n)).fetchall()


def old_hybrid(index: embed.SearchIndex, text: str, vector, k: int) -> list:
    """The hybrid before this change: vector and old keyword rankings, fused by reciprocal ranks, then read."""
    depth = max(embed.FUSION_CANDIDATES, k)
    by_vector = [chunk for _, chunk in index._vector_top(vector, depth, False)]
    by_keyword = [chunk for _, chunk in old_keyword(index.db, text, depth)]
    scores: dict[str, float] = {}
    for ranking in (by_vector, by_keyword):
        for rank, chunk in enumerate(ranking, start=1):
            scores[chunk] = scores.get(chunk, 0.0) + 1.0 / (60 + rank)
    best = sorted(scores, key=lambda chunk: (-scores[chunk], chunk))[:k]
    return index._hits([fusion.Scored(scores[chunk], chunk, 0) for chunk in best])


def cold_cli(manifest: Path, out: Path, url: str, mode: str, query: str, runs: int = 3) -> dict:
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
        done = subprocess.run([sys.executable, "-m", "bastion_agent", "search", str(manifest), query,
                               "--out", str(out), "--json", "--mode", mode], env=env, cwd=REPO,
                              capture_output=True, text=True)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if done.returncode != 0:
            raise SystemExit(f"search failed: {done.stderr.strip()}")
    return {"wall_s": round(statistics.median(walls), 3), "cpu_s": round(statistics.median(cpus), 3)}


def measure(folder: Path, n: int, queries: int, old_queries: int, stub: StubServer) -> dict:
    built = _realtext.build(folder, n, log=_realtext.stderr)
    layout = Layout(folder / "out")
    manifest = _realtext.write_manifest(folder)
    texts = questions(queries)
    pairs = [(text, bag_of_words(text, _realtext.DIM)) for text in texts]
    result = {"windows": built["windows"], "store": built, "k": 10}
    result["cold_cli"] = {mode: cold_cli(manifest, layout.root, stub.url, mode, texts[0])
                          for mode in ("vector", "keyword", "hybrid")}
    index = embed.SearchIndex.load(_realtext.manifest_stub(), layout)
    result["ann_used"] = index.ann is not None
    for text, vector in pairs:  # warm up: serve answers from pages already mapped, with words already counted
        index.search(text, vector, 10, "hybrid")
    warm = {
        "vector": percentiles(timed(lambda p: index.search(p[0], p[1], 10, "vector"), pairs)),
        "exact": percentiles(timed(lambda p: index.search(p[0], p[1], 10, "vector", exact=True), pairs)),
        "keyword": percentiles(timed(lambda p: index.search(p[0], None, 10, "keyword"), pairs)),
        "hybrid": percentiles(timed(lambda p: index.search(p[0], p[1], 10, "hybrid"), pairs)),
    }
    pruned = VocabPruned(index)
    warm["keyword_vocab_pruned"] = percentiles(timed(lambda p: pruned.top(p[0], 10), pairs))
    fresh = embed.SearchIndex.load(_realtext.manifest_stub(), layout)  # nothing counted yet: a serve's first queries
    warm["keyword_first_sight"] = percentiles(timed(lambda p: fresh.search(p[0], None, 10, "keyword"), pairs))
    fresh.close()
    old = pairs[:old_queries]
    warm["keyword_old"] = percentiles(timed(lambda p: old_keyword(index.db, p[0], 10), old))
    warm["hybrid_old"] = percentiles(timed(lambda p: old_hybrid(index, p[0], p[1], 10), old))
    warm["keyword_same_queries"] = percentiles(timed(lambda p: index.search(p[0], None, 10, "keyword"), old))
    warm["hybrid_same_queries"] = percentiles(timed(lambda p: index.search(p[0], p[1], 10, "hybrid"), old))
    result["warm_ms"] = warm
    result["ratios"] = {
        "keyword_over_old": round(warm["keyword_same_queries"]["p50"] / warm["keyword_old"]["p50"], 4),
        "hybrid_over_old": round(warm["hybrid_same_queries"]["p50"] / warm["hybrid_old"]["p50"], 4),
        "vocab_pruned_over_old": round(warm["keyword_vocab_pruned"]["p50"] / warm["keyword_old"]["p50"], 4),
    }
    overlaps = []
    for text, vector in old:  # how often the pruned keyword side keeps the old top 10
        before = {chunk for _, chunk in old_keyword(index.db, text, 10)}
        after = {hit.chunk_id for hit in index.search(text, None, 10, "keyword")}
        overlaps.append(len(before & after) / max(1, len(before)))
    result["keyword_top10_overlap_with_old"] = round(statistics.mean(overlaps), 3)
    index.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", metavar="DIR", type=Path, required=True,
                        help="build each store in DIR/SIZE (outside the repository) and reuse it")
    parser.add_argument("--sizes", default="1000000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--old-queries", type=int, default=20)
    args = parser.parse_args()
    if not ann.available():
        raise SystemExit("faiss is not installed: pip install -e '.[fast,ann]'")
    results = []
    with StubServer(dim=_realtext.DIM) as stub:
        for size in (int(s) for s in args.sizes.split(",")):
            results.append(measure(args.keep / str(size), size, args.queries, args.old_queries, stub))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"ann_min_rows": ann.MIN_ROWS, "rank_budget": keyword.RANK_BUDGET, "cpus": os.cpu_count(),
                      "sizes": results}, indent=2))


if __name__ == "__main__":
    main()
