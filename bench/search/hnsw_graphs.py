#!/usr/bin/env python3
"""Which HNSW graph to build: recall@10 and pages read a query, per graph and ef_search, on a sample of the 1M windows.

Each graph at 1M windows takes 15 to 30 minutes to build on this
machine's two cores; a 200k sample of the same windows (``--rows``,
``TABLESAMPLE`` with a fixed seed) takes about two, and ranks the graphs
the same way. Each graph gets a table of its own (the sample's vectors,
as they are, or normalised for the inner-product variants) and one
index, built with ``maintenance_work_mem = 4GB`` and one parallel worker.
The binary graph (``m16_efc200_binary``) walks one bit a dimension and
re-ranks the ``hnsw.ef_search`` candidates it finds by cosine, all inside
PostgreSQL (pgvector's ``binary_quantize``).

Per ``hnsw.ef_search``, over ``--queries`` Cranfield and SciFact queries
(the stub's bag-of-words vectors, as ``bench/publish/publish.py`` makes them):

- ``recall``: recall@10 against the exact cosine ranking of the sample (a
  window tied with the 10th score counts as found);
- ``buffers``: the shared buffers the query touches, from ``EXPLAIN
  (ANALYZE, BUFFERS)``: the walk's work. It does not change with the
  machine's load, which on these shared cores moves a query's time by 50%
  from one minute to the next, so graphs are compared by it; a query's
  time is about 1.8 us a buffer here.

Runs against bench/publish/publish.py's cached server (``--phase load`` first),
in a schema of its own (``hnsw_graphs``), dropped at the end unless
``--keep``. Prints one JSON line per graph.
Usage: python3 bench/search/hnsw_graphs.py [--rows 200000] [--graphs m16_efc200,m24_efc128]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from publish import publish as publish_bench  # noqa: E402  (its cached server, windows and queries)

SCHEMA = "hnsw_graphs"
# name: (normalised first, opclass, m, ef_construction)
GRAPHS = {
    "m24_efc128": (False, "vector_cosine_ops", 24, 128),  # migration 4's
    "m16_efc200": (False, "vector_cosine_ops", 16, 200),  # migration 5's
    "m32_efc200": (False, "vector_cosine_ops", 32, 200),
    "m12_efc200": (False, "vector_cosine_ops", 12, 200),
    "m16_efc400": (False, "vector_cosine_ops", 16, 400),
    "m16_efc64": (False, "vector_cosine_ops", 16, 64),  # pgvector's defaults
    "m24_efc128_ip": (True, "vector_ip_ops", 24, 128),  # normalised, inner product
    "m24_efc128_halfvec_ip": (True, "halfvec_ip_ops", 24, 128),  # the same in 16-bit floats
    # one bit a dimension (pgvector's binary_quantize), the ef_search nearest by Hamming distance re-ranked by cosine
    "m16_efc200_binary": (False, "bit_hamming_ops", 16, 200),
}
EF_SEARCH = (60, 100, 150, 200, 250)


def literal(vector) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


def sample(conn, rows: int) -> None:
    total = conn.execute("SELECT count(*) FROM bastion_agent.windows WHERE model = %s", (publish_bench.MODEL,)).fetchone()[0]
    percent = min(100.0, 100.0 * rows / max(total, 1))
    conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    conn.execute(f"CREATE SCHEMA {SCHEMA}")
    conn.execute(f"CREATE TABLE {SCHEMA}.sample AS SELECT row_number() OVER () AS id,"
                 f" embedding::vector({publish_bench.DIM}) AS v FROM bastion_agent.windows"
                 f" TABLESAMPLE BERNOULLI ({percent}) REPEATABLE (7) WHERE model = %s", (publish_bench.MODEL,))


def build(conn, name: str) -> dict:
    normalised, opclass, m, ef_construction = GRAPHS[name]
    kind = opclass.split("_")[0]
    value = f"l2_normalize(v)::{kind}({publish_bench.DIM})" if normalised else "v"
    columns = f"{value} AS e"
    if kind == "bit":  # the bits the graph walks, and the vector the candidates are re-ranked by
        columns = f"binary_quantize(v)::bit({publish_bench.DIM}) AS e, v"
    conn.execute(f"CREATE TABLE {SCHEMA}.{name} AS SELECT id, {columns} FROM {SCHEMA}.sample")
    started = time.monotonic()
    conn.execute(f"CREATE INDEX ON {SCHEMA}.{name} USING hnsw (e {opclass}) WITH (m = {m}, ef_construction = {ef_construction})")
    return {"build_s": round(time.monotonic() - started, 1)}


def rerank_query(name: str, candidates: int) -> str:
    """The ``candidates`` nearest by Hamming distance of the bits, the 10 best of them by cosine of the vectors."""
    dim = publish_bench.DIM
    return (f"SELECT id, v <=> %(q)s::vector({dim}) AS d FROM (SELECT id, v FROM {SCHEMA}.{name}"
            f" ORDER BY e <~> binary_quantize(%(q)s::vector({dim}))::bit({dim}) LIMIT {candidates}) candidates"
            " ORDER BY d LIMIT 10")


def measure(conn, name: str, vectors: list, exact: list) -> dict:
    normalised, opclass, _, _ = GRAPHS[name]
    kind, operator = opclass.split("_")[0], "<#>" if "_ip_" in opclass else "<=>"
    figures = {}
    for ef in EF_SEARCH:
        conn.execute(f"SET hnsw.ef_search = {ef}")
        found, pages = [], []
        for vector, truth in zip(vectors, exact):
            query = (rerank_query(name, ef) if kind == "bit" else
                     f"SELECT id, e {operator} %(q)s::{kind}({publish_bench.DIM}) AS d FROM {SCHEMA}.{name} ORDER BY d LIMIT 10")
            parameter = {"q": literal(unit(vector) if normalised else vector)}
            rows = conn.execute(query, parameter, prepare=False).fetchall()
            scores = [-d if operator == "<#>" else 1.0 - d for _, d in rows]
            found.append(min(10, sum(1 for score in scores if score >= truth - 1e-5)) / 10)
            plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) " + query, parameter,
                                prepare=False).fetchone()[0][0]["Plan"]
            pages.append(plan["Shared Hit Blocks"] + plan["Shared Read Blocks"])
        figures[str(ef)] = {"recall": round(statistics.mean(found), 3), "buffers": round(statistics.mean(pages))}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=Path("/work/cache/publish"))
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--graphs", default="m24_efc128,m16_efc200,m32_efc200,m12_efc200,m16_efc400",
                        help=f"comma-separated, of: {', '.join(GRAPHS)}")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--keep", action="store_true", help="keep the schema (its tables and graphs)")
    args = parser.parse_args()
    names = [name.strip() for name in args.graphs.split(",")]
    unknown = [name for name in names if name not in GRAPHS]
    if unknown:
        parser.error(f"unknown graph {unknown[0]!r}")
    pg, started = publish_bench.server(args.cache)
    conn = publish_bench.connect(pg)
    try:
        conn.execute("SET maintenance_work_mem = '4GB'")
        conn.execute("SET max_parallel_maintenance_workers = 1")
        sample(conn, args.rows)
        vectors = [publish_bench.bow(text) for text in publish_bench.queries(args.queries)]
        with conn.transaction():  # the exact 10th score of each query, every row scanned
            conn.execute("SET LOCAL enable_indexscan = off")
            exact = [conn.execute(f"SELECT 1 - (v <=> %s::vector({publish_bench.DIM})) AS s FROM {SCHEMA}.sample"
                                  " ORDER BY s DESC LIMIT 10", [literal(vector)], prepare=False).fetchall()[-1][0]
                     for vector in vectors]
        rows = conn.execute(f"SELECT count(*) FROM {SCHEMA}.sample").fetchone()[0]
        for name in names:
            result = {"graph": name, "rows": rows, "queries": len(vectors), **build(conn, name)}
            result["by_ef_search"] = measure(conn, name, vectors, exact)
            print(json.dumps(result), flush=True)
    finally:
        if not args.keep:
            conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        conn.close()
        if started:
            pg.stop(remove=False)


if __name__ == "__main__":
    main()
