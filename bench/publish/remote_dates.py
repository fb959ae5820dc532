#!/usr/bin/env python3
"""Remote search within a range of dates, against the same search without one, in the same run.

The central index is bench/publish/readers.py's (bench/publish/publish.py's real-text windows
and stub vectors as 10 bastions, each document in one of ten groups), in a
throw-away PostgreSQL + pgvector of its own (``--cache``, outside the
repository). Each document then gets a date drawn uniformly over the last two
years (a fixed seed), written as the owner. Two callers: the every-group search
role (``all``, which reads the tables) and the reader of one group in ten
(``reader_10``, through the owner's functions). For each, in vector, keyword and
hybrid mode, k 10, interleaved: no range, ``since`` one year ago (about half the
rows), ``since`` 30 days ago (about 4 %), and that last one read exactly
(``--exact``: no graph). Figures: p50/p95, each range's p50
over the same caller's undated p50, how many searches returned fewer than k
hits while k existed, and the vector ranking's recall@10 against the exact scan
of the same range.

Prints JSON. Usage: python3 bench/publish/remote_dates.py [--windows 20000] [--queries 50]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import psycopg  # noqa: E402

from bastion_agent.core import dates  # noqa: E402
from bastion_agent.publishing import remote_search  # noqa: E402
from bastion_agent.testing.pgtest import ThrowawayPostgres  # noqa: E402

spec = importlib.util.spec_from_file_location("readers_bench", REPO / "bench" / "publish" / "readers.py")
readers_bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readers_bench)
publish_bench = readers_bench.publish_bench

PORT = 55461
DAYS = 730


def date_documents(pg: ThrowawayPostgres) -> None:
    """Each document a date in the last two years, drawn from its id (the same every run)."""
    now = datetime.now(timezone.utc)
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        conn.execute("UPDATE bastion_agent.documents SET modified = to_char(%s::timestamptz - make_interval("
                     "secs => abs(('x' || substr(md5(doc), 1, 8))::bit(32)::int::bigint %% %s)), 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
                     (now, DAYS * 86400))
        conn.execute("VACUUM ANALYZE bastion_agent.documents")


def measure(pg: ThrowawayPostgres, count: int) -> dict:
    manifest = SimpleNamespace(embed=SimpleNamespace(vector_key=publish_bench.MODEL, dim=publish_bench.DIM),
                               search_mode=None)
    password = readers_bench.PASSWORD
    indexes = {"all": remote_search.RemoteIndex(manifest, pg.dsn(user="bench_all", password=password)),
               "reader_10": remote_search.RemoteIndex(manifest, pg.dsn(user="bench_gateway", password=password))}
    readers = {"all": None, "reader_10": "reader_10"}
    now = datetime.now(timezone.utc)
    ranges = {"none": None, "year": dates.DateRange(since=dates.stamp(now - timedelta(days=365))),
              "30d": dates.DateRange(since=dates.stamp(now - timedelta(days=30)))}
    ranges["30d_exact"] = ranges["30d"]  # the alternative: read the range's rows instead of walking the graph
    texts = publish_bench.queries(count)
    vectors = [publish_bench.bow(text) for text in texts]
    result: dict = {"queries": len(texts)}
    for mode in ("vector", "keyword", "hybrid"):
        times = {(c, r): [] for c in indexes for r in ranges}
        short: dict = {}
        for text, vector in zip(texts, vectors):
            for caller, index in indexes.items():
                for name, within in ranges.items():
                    started = time.perf_counter()
                    hits = index.search(text, vector, 10, mode, reader=readers[caller], dates=within,
                                        exact=name.endswith("_exact"))
                    times[(caller, name)].append(time.perf_counter() - started)
                    if mode != "keyword" and len(hits) < 10:
                        short[f"{caller}_{name}"] = short.get(f"{caller}_{name}", 0) + 1
        for (caller, name), values in times.items():
            result[f"{caller}_{mode}_{name}"] = publish_bench.percentiles(values)
            result[f"{caller}_{mode}_{name}_p50_over_undated"] = round(
                result[f"{caller}_{mode}_{name}"]["p50_ms"] / result[f"{caller}_{mode}_none"]["p50_ms"], 2)
        result[f"fewer_than_10_{mode}"] = short
        publish_bench.log(f"{mode}: done")
    for caller, index in indexes.items():
        for name, within in ranges.items():
            found, truth = [], []
            if name.endswith("_exact"):
                continue
            for vector in vectors[:20]:
                with index.lock:
                    index._within = within
                    with index._as_reader(readers[caller]):
                        found.append(index.vector_top(vector, 10))
                        truth.append(index.vector_top(vector, 10, exact=True))
                    index._within = None
            result[f"{caller}_{name}_recall_at_10"] = round(statistics.mean(map(publish_bench.recall, found, truth)), 4)
    for index in indexes.values():
        index.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/bastion-bench-remote-dates"))
    parser.add_argument("--windows", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--port", type=int, default=PORT)
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    args.cache.chmod(0o711)  # the server runs as nobody when we are root: it traverses to pg/, lists nothing
    publish_bench.make_data(args.cache, args.windows)
    pg = ThrowawayPostgres(port=args.port, folder=args.cache / "pg", settings=readers_bench.SETTINGS, password="bench")
    pg.start()
    try:
        result = {"windows_asked": args.windows, "load": readers_bench.load(pg, args.cache, args.windows)}
        date_documents(pg)
        result["search"] = measure(pg, args.queries)
    finally:
        pg.stop(remove=False)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
