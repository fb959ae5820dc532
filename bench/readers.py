#!/usr/bin/env python3
"""Remote search as a reader limited to its groups, against the every-group search role, in the same run.

The windows, vectors and queries are bench/publish.py's (real text cut into
32-token windows, the stub's bag-of-words vectors, the Cranfield and SciFact
queries), loaded as 10 bastions into a throw-away PostgreSQL + pgvector
(``--cache``, outside the repository). Each document gets one of ten groups
(``g0`` .. ``g9``, by its position), so a reader of ``g0`` sees 10 % of the
windows and a reader of ``g0`` .. ``g8`` sees 90 %.

Three callers, their queries interleaved (the machine is shared and noisy):

- ``all``: the search role of before (``add_searcher``), every group;
- ``reader_10``, ``reader_90``: readers (``add_reader``) that a gateway
  login role becomes per search (``SET LOCAL ROLE``), as serve does;
- ``reader_10_depth_k``: the 10 % reader with the graph walk asked for k
  rows instead of ``ef_search`` (the alternative ``RemoteIndex.depth`` weighs).

For each of vector, keyword and hybrid: p50/p95 of ``RemoteIndex.search``
(k 10, the query vector given), and the ratio of each reader's p50 to the
search role's. Also the vector ranking's recall@10 for each reader against
its own exact scan (the HNSW walk filtered by row-level security).

Prints JSON. Usage: python3 bench/readers.py [--windows 100000] [--queries 100]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import psycopg  # noqa: E402

from bastion_agent.publishing import publish, publish_schema, remote_search  # noqa: E402
from bastion_agent.testing.pgtest import ThrowawayPostgres  # noqa: E402

spec = importlib.util.spec_from_file_location("publish_bench", REPO / "bench" / "publish.py")
publish_bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(publish_bench)

GROUPS = [f"g{i}" for i in range(10)]
READERS = {"reader_10": GROUPS[:1], "reader_90": GROUPS[:9]}
PORT = 55433
PASSWORD = "bench-readers"
SETTINGS = {**publish_bench.SERVER_SETTINGS, "shared_buffers": "'512MB'", "maintenance_work_mem": "'1GB'"}


def load(pg: ThrowawayPostgres, cache: Path, n: int) -> dict:
    """n windows as 10 bastions, each document in one group; the HNSW graph built after the load."""
    conn = psycopg.connect(pg.dsn(), autocommit=True)
    publish_schema.migrate(conn)
    publish_schema.ensure_model(conn, publish_bench.MODEL, publish_bench.DIM)
    have = conn.execute("SELECT count(*) FROM bastion_agent.windows").fetchone()[0]
    model = publish_schema.model_index(conn, publish_bench.MODEL)
    result = {}
    if have < n:
        windows, vectors = publish_bench.load_data(cache, n)
        conn.execute(f"DROP INDEX IF EXISTS bastion_agent.{model.index_name}")
        conn.execute("TRUNCATE bastion_agent.windows, bastion_agent.documents")
        per = n // publish_bench.BASTIONS
        started = time.monotonic()
        position = 0
        for b in range(publish_bench.BASTIONS):
            local = publish_bench.documents(windows, vectors, b * per, per)
            for document in local.values():
                document.groups = [GROUPS[position % len(GROUPS)]]
                position += 1
            writer = publish.OwnerWriter(conn, pg.dsn(), f"bastion-{b:02d}", publish_bench.MODEL, publish_bench.DIM)
            publish.publish_documents(writer, local)
        result["load_s"] = round(time.monotonic() - started, 1)
        conn.execute("VACUUM FULL bastion_agent.windows")  # the labels' UPDATE left a dead copy of each row
        started = time.monotonic()
        conn.execute(model.create_sql(model.index_name, model.m, model.ef_construction))
        result["hnsw_build_s"] = round(time.monotonic() - started, 1)
        conn.execute("VACUUM ANALYZE bastion_agent.windows")
    for role in ["bench_all", "bench_gateway", *READERS]:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
            login = "LOGIN" if role in ("bench_all", "bench_gateway") else "NOLOGIN"
            conn.execute(f"CREATE ROLE {role} {login} NOINHERIT PASSWORD '{PASSWORD}'")
    conn.execute("SELECT bastion_agent.add_searcher('bench_all')")
    conn.execute("SELECT bastion_agent.add_gateway('bench_gateway')")
    for role, groups in READERS.items():
        conn.execute("SELECT bastion_agent.add_reader(%s, %s)", (role, groups))
        conn.execute(f"GRANT {role} TO bench_gateway")
    result["windows"] = conn.execute("SELECT count(*) FROM bastion_agent.windows").fetchone()[0]
    conn.close()
    return result


def measure(pg: ThrowawayPostgres, count: int, recall_queries: int) -> dict:
    manifest = SimpleNamespace(embed=SimpleNamespace(vector_key=publish_bench.MODEL, dim=publish_bench.DIM),
                               search_mode=None)
    everyone = remote_search.RemoteIndex(manifest, pg.dsn(user="bench_all", password=PASSWORD))
    gateway = remote_search.RemoteIndex(manifest, pg.dsn(user="bench_gateway", password=PASSWORD))
    shallow = remote_search.RemoteIndex(manifest, pg.dsn(user="bench_gateway", password=PASSWORD))
    shallow.depth = lambda n: n  # the alternative: ask the filtered graph walk for k rows only, not ef_search
    callers = {"all": None, **{name: name for name in READERS}, "reader_10_depth_k": "reader_10"}
    indexes = {"all": everyone, **{name: gateway for name in READERS}, "reader_10_depth_k": shallow}
    texts = publish_bench.queries(count)
    vectors = [publish_bench.bow(text) for text in texts]
    result = {"queries": len(texts), "ef_search": everyone.ef_search,
              "visible_windows": {name: indexes[name].counts(reader)[0] for name, reader in callers.items()}}
    for mode in ("vector", "keyword", "hybrid"):
        times, short = {name: [] for name in callers}, {}
        for text, vector in zip(texts[:10], vectors[:10]):  # warm-up
            for name, reader in callers.items():
                indexes[name].search(text, vector, 10, mode, reader=reader)
        for text, vector in zip(texts, vectors):
            for name, reader in callers.items():  # interleaved: the machine's load falls on all three alike
                started = time.perf_counter()
                hits = indexes[name].search(text, vector, 10, mode, reader=reader)
                times[name].append(time.perf_counter() - started)
                if mode != "keyword" and len(hits) < 10:
                    short[name] = short.get(name, 0) + 1
        for name in callers:
            result[f"{name}_{mode}"] = publish_bench.percentiles(times[name])
        result[f"fewer_than_10_{mode}"] = short  # searches answered with fewer than k hits, by caller
        base = result[f"all_{mode}"]["p50_ms"]
        for name in [*READERS, "reader_10_depth_k"]:
            result[f"{name}_{mode}_p50_over_all"] = round(result[f"{name}_{mode}"]["p50_ms"] / base, 2)
        publish_bench.log(f"{mode}: {[(name, result[f'{name}_{mode}']) for name in callers]}")
    for name, reader in callers.items():
        index = indexes[name]
        found, truth = [], []
        for vector in vectors[:recall_queries]:
            with index.lock:
                with index._as_reader(reader):
                    found.append(index.vector_top(vector, 10))
                    truth.append(index.vector_top(vector, 10, exact=True))
        result[f"{name}_recall_at_10"] = round(statistics.mean(map(publish_bench.recall, found, truth)), 4)
    for index in (everyone, gateway, shallow):
        index.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/bastion-bench-readers"))
    parser.add_argument("--windows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--recall-queries", type=int, default=50)
    parser.add_argument("--port", type=int, default=PORT)
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    args.cache.chmod(0o711)  # the server runs as nobody when we are root: it traverses to pg/, lists nothing
    publish_bench.make_data(args.cache, args.windows)
    pg = ThrowawayPostgres(port=args.port, folder=args.cache / "pg", settings=SETTINGS,
                           password="bench")
    try:
        psycopg.connect(pg.dsn(), connect_timeout=3).close()
        started = False
    except psycopg.OperationalError:
        pg.start()
        started = True
    try:
        result = {"windows_asked": args.windows, "load": load(pg, args.cache, args.windows)}
        result["search"] = measure(pg, args.queries, args.recall_queries)
    finally:
        if started:
            pg.stop(remove=False)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
