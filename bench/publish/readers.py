#!/usr/bin/env python3
"""Remote search as a reader limited to its groups, against the every-group search role, in the same run.

The windows, vectors and queries are bench/publish/publish.py's (real text cut into
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

``--phase hidden``: what a reader observes with and without rows it may not
read. Two databases on the same server hold the same documents of group
``g0``; ``hidden_with`` also holds the other nine groups' (``--hidden-windows``
in all, 10 bastions). The reader of ``g0`` logs in itself and, in each:
runs ``EXPLAIN`` with literals aimed at hidden rows (a hidden group, a
hidden document's id, an ``idx`` range) on the tables and on the functions it
may call; reads ``pg_class.reltuples``; and searches (vector, hybrid) for
each query, keeping every hit's chunk id, score and relevance. Before
(schema 8: the reader holds ``SELECT`` behind the read policy, relevance
from a ``TABLESAMPLE`` floor) and after (schema 9: the functions), in the
same run. Targets: estimates and relevance identical with and without.

Prints JSON. Usage: python3 bench/publish/readers.py [--windows 100000] [--queries 100] [--phase search|hidden]
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

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import psycopg  # noqa: E402

from bastion_agent.publishing import central_writers, publish, publish_schema, remote_search  # noqa: E402
from bastion_agent.testing.pgtest import ThrowawayPostgres  # noqa: E402

spec = importlib.util.spec_from_file_location("publish_bench", REPO / "bench" / "publish" / "publish.py")
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
            writer = central_writers.OwnerWriter(conn, pg.dsn(), f"bastion-{b:02d}", publish_bench.MODEL, publish_bench.DIM)
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


# --- with and without hidden rows ----------------------------------------------

HIDDEN_DATABASES = {"hidden_with": None, "hidden_without": "g0"}  # the groups each holds (None: every group)
HIDDEN_READER, BEFORE_READER = "bench_hidden_reader", "bench_hidden_before"  # schema 9's reader, and schema 8's
HIDDEN_GATEWAY = "bench_hidden_gateway"  # serve's login role, which becomes either reader for the latency figures


def load_hidden(pg: ThrowawayPostgres, cache: Path, n: int) -> dict:
    """The two databases (made once), each with the two readers of ``g0``; the graph built after the load."""
    admin = psycopg.connect(pg.dsn(), autocommit=True)
    for role in (HIDDEN_READER, BEFORE_READER, HIDDEN_GATEWAY):
        if not admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
            admin.execute(f"CREATE ROLE {role} LOGIN NOINHERIT PASSWORD '{PASSWORD}'")
    admin.execute(f"GRANT {HIDDEN_READER}, {BEFORE_READER} TO {HIDDEN_GATEWAY}")
    windows, vectors = publish_bench.load_data(cache, n)
    result = {}
    for name, only in HIDDEN_DATABASES.items():
        if admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            if loaded(pg, name):
                continue
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")  # a load that did not finish
        admin.execute(f"CREATE DATABASE {name}")
        try:
            result[name] = load_one(pg, name, only, windows, vectors)
        except BaseException:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")  # a half-loaded database is never measured
            raise
    for name in HIDDEN_DATABASES:
        with psycopg.connect(pg.dsn(dbname=name), autocommit=True) as conn:
            result[name] = conn.execute("SELECT count(*) FROM bastion_agent.windows").fetchone()[0]
    admin.close()
    return result


def loaded(pg: ThrowawayPostgres, name: str) -> bool:
    """Whether a database was loaded to the end (its gateway and readers are its last step)."""
    with psycopg.connect(pg.dsn(dbname=name), autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('bastion_agent.readers')").fetchone()[0] is None:
            return False
        return conn.execute("SELECT (SELECT count(*) FROM bastion_agent.readers),"
                            " (SELECT count(*) FROM bastion_agent.gateways)").fetchone() == (2, 1)


def load_one(pg: ThrowawayPostgres, name: str, only: str | None, windows, vectors) -> int:
    """One database: the documents of ``only`` (None: every group), the graph, the two readers of ``g0``."""
    conn = psycopg.connect(pg.dsn(dbname=name), autocommit=True)
    try:
        return fill(conn, pg.dsn(dbname=name), only, windows, vectors)
    finally:
        conn.close()


def fill(conn, dsn: str, only: str | None, windows, vectors) -> int:
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    publish_schema.migrate(conn)
    model = publish_schema.ensure_model(conn, publish_bench.MODEL, publish_bench.DIM)
    conn.execute(f"DROP INDEX bastion_agent.{model.index_name}")
    per, position = len(windows) // publish_bench.BASTIONS, 0
    for b in range(publish_bench.BASTIONS):
        local = publish_bench.documents(windows, vectors, b * per, per)
        for document in local.values():
            document.groups = [GROUPS[position % len(GROUPS)]]
            position += 1
        local = {doc: d for doc, d in local.items() if only is None or d.groups == [only]}
        writer = central_writers.OwnerWriter(conn, dsn, f"bastion-{b:02d}", publish_bench.MODEL,
                                     publish_bench.DIM)
        publish.publish_documents(writer, local)
    conn.execute("VACUUM FULL bastion_agent.windows")
    conn.execute(model.create_sql(model.index_name, model.m, model.ef_construction))
    conn.execute("VACUUM ANALYZE bastion_agent.windows")
    conn.execute("ANALYZE bastion_agent.documents")
    conn.execute("SELECT bastion_agent.add_gateway(%s)", (HIDDEN_GATEWAY,))
    for role in (HIDDEN_READER, BEFORE_READER):
        conn.execute("SELECT bastion_agent.add_reader(%s, %s)", (role, ["g0"]))
    # schema 8's reader: SELECT on the tables, rows filtered by the read policy (statistics are not)
    conn.execute(f"GRANT SELECT ON bastion_agent.windows, bastion_agent.documents TO {BEFORE_READER}")
    return conn.execute("SELECT count(*) FROM bastion_agent.windows").fetchone()[0]


def hidden_estimates(dsn: str, hidden_doc: str, vector: list[float]) -> dict:
    """(rows, cost) of EXPLAIN of statements aimed at hidden rows, or "refused"."""
    literal = "[" + ",".join(repr(float(x)) for x in vector) + "]"
    tables = {"groups && {g1}": "SELECT * FROM bastion_agent.windows WHERE groups && '{g1}'",
              "doc = hidden id": f"SELECT * FROM bastion_agent.windows WHERE doc = '{hidden_doc}'",
              "idx > 100": "SELECT * FROM bastion_agent.windows WHERE idx > 100",
              "documents groups && {g1}": "SELECT * FROM bastion_agent.documents WHERE groups && '{g1}'"}
    calls = {"window_count": f"SELECT bastion_agent.window_count('{publish_bench.MODEL}', NULL, current_user)",
             "vector_matches": f"SELECT * FROM bastion_agent.vector_matches('{publish_bench.MODEL}', '{literal}',"
                               " NULL, 10, current_user)",
             "window_rows of a hidden id": f"SELECT * FROM bastion_agent.window_rows('{publish_bench.MODEL}',"
                                           f" '{{bastion-01}}', '{{{hidden_doc}}}', current_user) WHERE idx > 100",
             "window_floor": f"SELECT bastion_agent.window_floor('{publish_bench.MODEL}', 48, current_user)"}
    found = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, statement in {**tables, **calls}.items():
            try:
                plan = conn.execute("EXPLAIN (FORMAT JSON) " + statement).fetchone()[0][0]["Plan"]
                found[name] = [plan["Plan Rows"], plan["Total Cost"]]
            except psycopg.errors.InsufficientPrivilege:
                found[name] = "refused"
        found["pg_class.reltuples windows"] = conn.execute(
            "SELECT reltuples FROM pg_class WHERE oid = 'bastion_agent.windows'::regclass").fetchone()[0]
    return found


def hidden_answers(dsn: str, texts: list[str], vectors: list, before: bool) -> tuple[list, float]:
    """Each query's hits (chunk id, score, relevance) in vector and hybrid mode, and the floor used."""
    manifest = SimpleNamespace(embed=SimpleNamespace(vector_key=publish_bench.MODEL, dim=publish_bench.DIM),
                               search_mode=None)
    index = remote_search.RemoteIndex(manifest, dsn)
    try:
        index.counts(None)
        if before:
            index._calls[None] = False  # schema 8's floor: a page sample of the table, under the read policy
        answers = []
        for text, vector in zip(texts, vectors):
            for mode in ("vector", "hybrid"):
                hits = index.search(text, vector, 10, mode)
                answers.append([(h.chunk_id, round(h.score, 9), h.relevance) for h in hits])
        return answers, index.cosine_floor()
    finally:
        index.close()


def hidden_latency(pg: ThrowawayPostgres, texts: list[str], vectors: list) -> dict:
    """p50 of the same reader's searches through the functions (schema 9) over schema 8's direct statements,
    both through a gateway as serve searches, interleaved on the database with hidden rows (the machine's load
    falls on both alike)."""
    manifest = SimpleNamespace(embed=SimpleNamespace(vector_key=publish_bench.MODEL, dim=publish_bench.DIM),
                               search_mode=None)
    readers = {"before": BEFORE_READER, "after": HIDDEN_READER}
    indexes = {label: remote_search.RemoteIndex(manifest, pg.dsn(user=HIDDEN_GATEWAY, password=PASSWORD,
                                                                  dbname="hidden_with")) for label in readers}
    result = {}
    try:
        for mode in ("vector", "keyword", "hybrid"):
            times: dict[str, list[float]] = {label: [] for label in indexes}
            for repeat in range(2):  # the first pass warms the caches, the second is measured
                for text, vector in zip(texts, vectors):
                    for label, index in indexes.items():
                        started = time.perf_counter()
                        index.search(text, vector, 10, mode, reader=readers[label])
                        if repeat:
                            times[label].append(time.perf_counter() - started)
            result[mode] = {label: publish_bench.percentiles(times[label]) for label in indexes}
            result[mode]["after_p50_over_before"] = round(result[mode]["after"]["p50_ms"]
                                                          / result[mode]["before"]["p50_ms"], 2)
    finally:
        for index in indexes.values():
            index.close()
    return result


def measure_hidden(pg: ThrowawayPostgres, count: int) -> dict:
    texts = publish_bench.queries(count)
    vectors = [publish_bench.bow(text) for text in texts]
    with psycopg.connect(pg.dsn(dbname="hidden_with"), autocommit=True) as conn:
        hidden_doc = conn.execute("SELECT doc FROM bastion_agent.documents WHERE groups = '{g1}' ORDER BY doc"
                                  " LIMIT 1").fetchone()[0]
    result: dict = {"queries": len(texts)}
    for label, role in (("before", BEFORE_READER), ("after", HIDDEN_READER)):
        seen = {}
        for name in HIDDEN_DATABASES:
            dsn = pg.dsn(user=role, password=PASSWORD, dbname=name)
            answers, floor = hidden_answers(dsn, texts, vectors, before=label == "before")
            seen[name] = {"estimates": hidden_estimates(dsn, hidden_doc, vectors[0]), "answers": answers,
                          "floor": round(floor, 6),
                          "top_relevance": [a[0][2] if a else None for a in answers[:10]]}
        with_, without = seen["hidden_with"], seen["hidden_without"]
        same = sum(a == b for a, b in zip(with_["answers"], without["answers"]))
        result[label] = {
            "estimates_with_hidden": with_["estimates"], "estimates_without_hidden": without["estimates"],
            "estimates_identical_but_reltuples": all(
                with_["estimates"][key] == without["estimates"][key] for key in with_["estimates"]
                if key != "pg_class.reltuples windows"),
            "floor_with_hidden": with_["floor"], "floor_without_hidden": without["floor"],
            "searches": len(with_["answers"]), "searches_identical": same,
            "top_relevance_with_hidden": with_["top_relevance"],
            "top_relevance_without_hidden": without["top_relevance"],
        }
        publish_bench.log(f"{label}: {same}/{len(with_['answers'])} searches identical")
    result["latency"] = hidden_latency(pg, texts, vectors)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/bastion-bench-readers"))
    parser.add_argument("--windows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--recall-queries", type=int, default=50)
    parser.add_argument("--port", type=int, default=PORT)
    parser.add_argument("--phase", choices=("search", "hidden"), default="search")
    parser.add_argument("--hidden-windows", type=int, default=20_000)
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    args.cache.chmod(0o711)  # the server runs as nobody when we are root: it traverses to pg/, lists nothing
    publish_bench.make_data(args.cache, args.hidden_windows if args.phase == "hidden" else args.windows)
    pg = ThrowawayPostgres(port=args.port, folder=args.cache / "pg", settings=SETTINGS,
                           password="bench")
    try:
        psycopg.connect(pg.dsn(), connect_timeout=3).close()
        started = False
    except psycopg.OperationalError:
        pg.start()
        started = True
    try:
        if args.phase == "hidden":
            result = {"windows": load_hidden(pg, args.cache, args.hidden_windows),
                      "hidden": measure_hidden(pg, args.queries)}
        else:
            result = {"windows_asked": args.windows, "load": load(pg, args.cache, args.windows)}
            result["search"] = measure(pg, args.queries, args.recall_queries)
    finally:
        if started:
            pg.stop(remove=False)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
