#!/usr/bin/env python3
"""Search beside the tools a user would pick instead, on the same windows, vectors and questions, in one run.

The store is ``bench/_realtext.py``'s (windows of real prose: the shared
test collections, the licence texts, ``/usr/share/doc``; the loopback stub's
bag-of-words vectors, 384 dimensions). Every system below is loaded with
exactly those windows and vectors, and answers the same real questions
(SciFact's and Cranfield's, alternately). Queries are interleaved: for each
question every system and mode answers in turn, in a seeded order balanced
over the questions (``balanced_orders``: rows of Williams squares), so load on
this shared machine stretches every system alike, and every mode is as often
the first to touch a question's pages, and as often the one that runs right
after a full scan (numpy's, FAISS flat's, bastion's exact), as every other
(each row's ``after_full_scan`` is the share of questions where it did). The machine's load average is printed at the start and the end.

Systems (each in process, warm, top 10):

- ``bastion``: ``SearchIndex.search`` loaded as serve and the CLI load it
  (the ANN graph memory-mapped), in its four modes (``vector``: the ANN
  path at its default beam; ``exact``; ``keyword``; ``hybrid``), and the
  ANN path at other beams (``vector_efN``: search beam N), to compare with
  FAISS at equal recall; and ``walk``, the graph's walk alone at the
  default beam (no re-rank, no hits), so ``vector`` minus ``walk`` is what
  surrounds the walk.
- ``numpy``: ``M @ q`` over the normalised float32 matrix, top 10 by
  ``argpartition`` (the exact floor a user would write first).
- ``faiss-hnsw``: ``IndexHNSWFlat`` (M 32, inner product on normalised
  vectors), at ``efSearch`` 16 (its default) and 64 to 1024 (to compare at equal
  recall: a million windows need a wider beam; ``ratios`` names the narrowest
  beam that finds at least what bastion's default finds), and up to 4096
  beside a measured beam that wide.
- ``faiss-flat``: ``IndexFlatIP`` on the normalised vectors (FAISS's exact
  scan, the other exact floor beside numpy's).
- ``chroma``: a persistent collection (HNSW, cosine).
- ``lancedb``: an IVF-PQ vector index, its full-text index, and hybrid
  through its RRF reranker.
- ``qmd-style``: one SQLite file with FTS5 (porter) and sqlite-vec's
  ``vec0`` (cosine), fused by reciprocal rank (k 60, 30 candidates a side),
  the layout of the qmd tool; run through ``apsw``, whose SQLite loads
  extensions.

Recall@10 of every vector path is measured against the exact top 10
(numpy). The output also carries what the build recorded in the ANN header
(``calibration``: the beam it chose, the recall it measured on its held-out
sample, and the measurement's seconds beside the graph build's) and the
store's build times, so one run reports both.

``--cold N`` also times a cold start: ``python3 -m bastion_agent search`` in
a new process per mode (the stub embeds the query), interleaved with
``python3 -c pass`` (the interpreter's own start), N rounds, medians of wall
and CPU time. Compile the tree's bytecode first (``python3 -m compileall
bastion_agent``) when ``PYTHONDONTWRITEBYTECODE`` is set, as an installed
package has it: without it every run compiles the package from source. The peers are not dependencies of the project: install them in a
separate environment, e.g.::

    python3 -m venv --system-site-packages /tmp/peers
    /tmp/peers/bin/pip install numpy faiss-cpu lancedb chromadb sqlite-vec apsw
    /tmp/peers/bin/python bench/search/search_peers.py --keep /tmp/peers-store --windows 188678

Every system runs a query on one thread (``OMP_NUM_THREADS``,
``OPENBLAS_NUM_THREADS`` and ``MKL_NUM_THREADS`` are 1 unless
``--threads-default``): FAISS's OpenMP workers and a threaded BLAS keep
spinning after their own query, on a two-core machine they took the cores
from whichever system answered next (bastion's ANN path measured 43 ms p50
beside them, 1-3 ms alone), and one query gains nothing from a pool.

A peer that is not installed is left out of the table, and says so.
Prints JSON: one row per system and mode (p50, p95, recall@10, and the
p50 and p95 of the querying thread's CPU time: on a loaded machine the run
queue stretches wall time by whole time slices, CPU time much less), and
the ratios the search issue sets targets on.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

if "--threads-default" not in sys.argv:  # one thread per query for every system, as a serving process runs it
    for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, "1")

import numpy as np  # noqa: E402

os.environ.setdefault("RUST_LOG", "error")  # lance logs a deprecation warning on every query otherwise

import _realtext  # noqa: E402
from search.search_latency import questions  # noqa: E402
from bastion_agent import embed  # noqa: E402
from bastion_agent.core.layout import Layout  # noqa: E402
from bastion_agent.embedding import vectorstore  # noqa: E402
from bastion_agent.testing.stub_server import bag_of_words  # noqa: E402

K = 10
RRF_K = 60
RRF_DEPTH = 30
BATCH = 5000
EXPANSIONS = (128, 192, 256, 384, 512, 1024, 2048)  # bastion's ANN beside its default (the beam its build measured)
# The modes that read every vector: whichever query runs next finds its caches evicted.
FULL_SCANS = {("bastion", "exact"), ("numpy", "vector"), ("faiss-flat", "vector")}
FAISS_EFS = (16, 64, 128, 192, 256, 320, 384, 448, 512, 640, 768, 1024, 1536, 2048, 3072, 4096)


def load_rows(layout: Layout) -> tuple[list[str], list[str], np.ndarray]:
    """Every window's chunk id, text and vector, in the store's own order."""
    db = vectorstore.connect(layout.vectors_db, create=False)
    rows = db.execute("SELECT c.chunk_id, c.text, v.vec FROM chunks c JOIN vectors v "
                      "ON v.chunk_id = c.chunk_id AND v.model = ? ORDER BY c.rowid", (_realtext.MODEL,)).fetchall()
    db.close()
    matrix = np.frombuffer(b"".join(row[2] for row in rows), dtype="<f4").reshape(len(rows), _realtext.DIM)
    return [row[0] for row in rows], [row[1] for row in rows], matrix


def normalised(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (matrix / norms).astype(np.float32)


def top_rows(scores: np.ndarray, k: int = K) -> list[int]:
    best = np.argpartition(-scores, k)[:k]
    return [int(i) for i in best[np.argsort(-scores[best], kind="stable")]]


def rrf(*rankings: list) -> list:
    """Reciprocal-rank fusion, the qmd-style and LanceDB default."""
    scores: dict = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (RRF_K + rank)
    return sorted(scores, key=lambda item: -scores[item])[:K]


class Bastion:
    name = "bastion"

    def __init__(self, layout: Layout, rowid_of: dict[str, int]):
        self.index = embed.SearchIndex.load(_realtext.manifest_stub(), layout)
        self.rowid_of = rowid_of
        self.modes = {
            "vector": lambda q: self._rows(self.index.search(q.text, q.vector, K, "vector")),
            "exact": lambda q: self._rows(self.index.search(q.text, q.vector, K, "vector", exact=True)),
            "keyword": lambda q: self._rows(self.index.search(q.text, None, K, "keyword")),
            "hybrid": lambda q: self._rows(self.index.search(q.text, q.vector, K, "hybrid")),
        }
        if self.index.ann is not None:  # the ANN path at other beam widths, to compare with FAISS at equal recall
            for expansion in EXPANSIONS:
                self.modes[f"vector_ef{expansion}"] = self._at_expansion(expansion)
            # the graph's walk alone at the default beam (no re-rank, no hits): what surrounds it is vector - walk
            self.modes["walk"] = lambda q: (self.index.ann.neighbours(q.unit[None, :], 32), [])[1]

    def _at_expansion(self, expansion: int):
        def search(q):
            graph = self.index.ann
            default, graph.expansion = graph.expansion, expansion
            try:
                return self._rows(self.index.search(q.text, q.vector, K, "vector"))
            finally:
                graph.expansion = default
        return search

    def _rows(self, answer) -> list[int]:
        hits = answer.hits if hasattr(answer, "hits") else answer
        return [self.rowid_of[hit.chunk_id] for hit in hits]


class Numpy:
    name = "numpy"

    def __init__(self, unit: np.ndarray):
        self.unit = unit
        self.modes = {"vector": lambda q: top_rows(self.unit @ q.unit)}


class FaissHnsw:
    name = "faiss-hnsw"

    def __init__(self, unit: np.ndarray, saved: Path | None = None):
        import faiss

        if saved is not None and saved.exists():  # built by an earlier run over the same vectors
            self.index = faiss.read_index(str(saved))
        else:
            self.index = faiss.IndexHNSWFlat(unit.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
            self.index.add(unit)
            if saved is not None:
                faiss.write_index(self.index, str(saved))
        if self.index.ntotal != len(unit):
            raise SystemExit(f"{saved} holds {self.index.ntotal} vectors, not these {len(unit)}")
        self.modes = {f"vector_ef{ef}": self._searcher(ef) for ef in FAISS_EFS}

    def _searcher(self, ef: int):
        def search(q):
            self.index.hnsw.efSearch = ef
            _, found = self.index.search(q.unit[None, :], K)
            return [int(i) for i in found[0] if i >= 0]
        return search


class FaissFlat:
    name = "faiss-flat"

    def __init__(self, unit: np.ndarray):
        import faiss

        self.index = faiss.IndexFlatIP(unit.shape[1])
        self.index.add(unit)
        self.modes = {"vector": self._vector}

    def _vector(self, q):
        _, found = self.index.search(q.unit[None, :], K)
        return [int(i) for i in found[0] if i >= 0]


class Chroma:
    name = "chroma"

    def __init__(self, unit: np.ndarray, folder: Path):
        import chromadb

        client = chromadb.PersistentClient(path=str(folder / "chroma"))
        self.collection = client.create_collection("bench", metadata={"hnsw:space": "cosine"})
        for first in range(0, len(unit), BATCH):
            block = unit[first:first + BATCH]
            self.collection.add(ids=[str(i) for i in range(first, first + len(block))], embeddings=block)
        self.modes = {"vector": self._vector}

    def _vector(self, q):
        found = self.collection.query(query_embeddings=[q.unit], n_results=K, include=[])
        return [int(i) for i in found["ids"][0]]


class Lance:
    name = "lancedb"

    def __init__(self, unit: np.ndarray, texts: list[str], folder: Path):
        import lancedb
        import pyarrow as pa

        db = lancedb.connect(str(folder / "lance"))
        vectors = pa.FixedSizeListArray.from_arrays(pa.array(unit.reshape(-1), pa.float32()), unit.shape[1])
        table = pa.table({"row": pa.array(range(len(texts)), pa.int64()), "text": pa.array(texts), "vector": vectors})
        self.table = db.create_table("bench", table)
        partitions = max(16, int(len(texts) ** 0.5))
        self.table.create_index(metric="cosine", num_partitions=partitions, num_sub_vectors=48)
        self.table.create_fts_index("text")
        self.modes = {"vector": self._vector, "keyword": self._keyword, "hybrid": self._hybrid}

    def _rows(self, query) -> list[int]:
        return [int(row) for row in query.limit(K).to_arrow()["row"].to_pylist()]

    def _vector(self, q):
        return self._rows(self.table.search(q.unit).select(["row"]))

    def _keyword(self, q):
        return self._rows(self.table.search(q.text, query_type="fts").select(["row"]))

    def _hybrid(self, q):
        return self._rows(self.table.search(query_type="hybrid").vector(q.unit).text(q.text).select(["row"]))


class QmdStyle:
    name = "qmd-style"

    def __init__(self, unit: np.ndarray, texts: list[str], folder: Path):
        import apsw
        import sqlite_vec

        self.db = apsw.Connection(str(folder / "qmd.sqlite"))
        self.db.enable_load_extension(True)
        self.db.load_extension(sqlite_vec.loadable_path())
        self.db.execute("CREATE VIRTUAL TABLE fts USING fts5(text, tokenize='porter unicode61')")
        self.db.execute(f"CREATE VIRTUAL TABLE vec USING vec0(embedding float[{unit.shape[1]}] distance_metric=cosine)")
        with self.db:
            self.db.executemany("INSERT INTO fts(rowid, text) VALUES (?, ?)", enumerate(texts))
            self.db.executemany("INSERT INTO vec(rowid, embedding) VALUES (?, ?)",
                                ((i, unit[i].tobytes()) for i in range(len(unit))))
        self.modes = {"vector": lambda q: self._vector(q, K), "keyword": lambda q: self._keyword(q, K),
                      "hybrid": self._hybrid}

    def _vector(self, q, n: int) -> list[int]:
        return [row for row, in self.db.execute(
            "SELECT rowid FROM vec WHERE embedding MATCH ? AND k = ? ORDER BY distance", (q.unit.tobytes(), n))]

    def _keyword(self, q, n: int) -> list[int]:
        words = _realtext.WORD_RE.findall(q.text.lower())
        if not words:
            return []
        expression = " OR ".join(f'"{word}"' for word in dict.fromkeys(words))
        return [row for row, in self.db.execute(
            "SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT ?", (expression, n))]

    def _hybrid(self, q) -> list[int]:
        return rrf(self._vector(q, RRF_DEPTH), self._keyword(q, RRF_DEPTH))


class Question:
    def __init__(self, text: str):
        self.text = text
        self.vector = bag_of_words(text, _realtext.DIM)
        raw = np.asarray(self.vector, dtype=np.float32)
        norm = float(np.linalg.norm(raw)) or 1.0
        self.unit = raw / norm


def build_peers(names: set[str], unit, texts, folder: Path, log, faiss_index: Path | None = None) -> tuple[list, dict]:
    """Each peer that is installed and asked for, with its build time; the others with the reason they are out."""
    makers = {
        "numpy": lambda: Numpy(unit),
        "faiss-hnsw": lambda: FaissHnsw(unit, faiss_index),
        "faiss-flat": lambda: FaissFlat(unit),
        "chroma": lambda: Chroma(unit, folder),
        "lancedb": lambda: Lance(unit, texts, folder),
        "qmd-style": lambda: QmdStyle(unit, texts, folder),
    }
    peers, out = [], {}
    for name, make in makers.items():
        if name not in names:
            continue
        started = time.monotonic()
        try:
            peers.append(make())
        except ImportError as error:
            out[name] = f"not installed ({error.name})"
            continue
        log(f"{name}: built in {time.monotonic() - started:.0f} s")
    return peers, out


def measure(systems: list, queries: list[Question], exact: list[list[int]]) -> list[dict]:
    """p50 / p95 and recall@10 of every system and mode, queries interleaved in balanced orders."""
    runs = [(system.name, mode, function) for system in systems for mode, function in system.modes.items()]
    for _, _, function in runs:  # warm up: pages mapped, caches filled, as a serving process would be
        for question in queries[:10]:
            function(question)
    walls = {(name, mode): [] for name, mode, _ in runs}
    cpus = {(name, mode): [] for name, mode, _ in runs}  # the thread's CPU time: what the run queue does not stretch
    recalls = {(name, mode): [] for name, mode, _ in runs}
    after_scan = {(name, mode): 0 for name, mode, _ in runs}  # questions it answered right after a full scan
    for number, (question, order) in enumerate(zip(queries, balanced_orders(runs, len(queries)))):
        for place, (name, mode, function) in enumerate(order):
            if place and (order[place - 1][0], order[place - 1][1]) in FULL_SCANS:
                after_scan[(name, mode)] += 1
            started, cpu = time.perf_counter(), time.thread_time()
            rows = function(question)
            walls[(name, mode)].append(time.perf_counter() - started)
            cpus[(name, mode)].append(time.thread_time() - cpu)
            if not mode.startswith(("keyword", "hybrid", "walk")):
                recalls[(name, mode)].append(len(set(rows) & set(exact[number])) / K)
    table = []
    for name, mode, _ in runs:
        samples = sorted(walls[(name, mode)])
        row = {"system": name, "mode": mode, "p50_ms": round(1000 * statistics.median(samples), 3),
               "p95_ms": round(1000 * samples[int(0.95 * (len(samples) - 1))], 3)}
        spent = sorted(cpus[(name, mode)])
        row["cpu_p50_ms"] = round(1000 * statistics.median(spent), 3)
        row["cpu_p95_ms"] = round(1000 * spent[int(0.95 * (len(spent) - 1))], 3)
        if recalls[(name, mode)]:
            row["recall@10"] = round(statistics.mean(recalls[(name, mode)]), 3)
        row["after_full_scan"] = round(after_scan[(name, mode)] / len(queries), 3)
        table.append(row)
    return table


def balanced_orders(runs: list, count: int, seed: int = 0) -> list[list]:
    """``count`` orders of ``runs``, one per question, in which every run follows every other equally often.

    The modes of one system walk the same graph nodes and rows, so whichever
    answers a question first pays its cache misses for the others, and a full
    scan evicts the caches of whichever runs right after it. A rotation put
    the same mode first three times in four; a shuffle per question left it
    to chance (over 200 questions it put bastion's vector mode right after a
    full scan 12 % of the time and FAISS's ef 384 7.5 %). So the orders are
    the rows of Williams squares: over each square's rows (as many as runs;
    twice that for an odd number) every run comes first once and right after
    each other run once. Each square's runs and rows are shuffled (seeded);
    ``after_full_scan`` in the output shows the balance reached.
    """
    n = len(runs)
    first = [0] + [(step + 1) // 2 if step % 2 else n - step // 2 for step in range(1, n)]
    square = [[(value + shift) % n for value in first] for shift in range(n)]
    if n % 2:
        square += [list(reversed(row)) for row in square]
    chance, orders = random.Random(seed), []
    while len(orders) < count:
        names, rows = list(runs), list(square)
        chance.shuffle(names)
        chance.shuffle(rows)
        orders += [[names[value] for value in row] for row in rows]
    return orders[:count]


def ratios(table: list[dict]) -> dict:
    """The figures the search issue sets targets on, as ratios within this run."""
    p50 = {(row["system"], row["mode"]): row["p50_ms"] for row in table}
    found = {}
    for faiss_mode in (f"vector_ef{ef}" for ef in FAISS_EFS):
        if ("faiss-hnsw", faiss_mode) in p50:
            found[f"bastion_vector_over_faiss_{faiss_mode}"] = round(p50[("bastion", "vector")] / p50[("faiss-hnsw", faiss_mode)], 2)
            if ("bastion", faiss_mode) in p50:  # the same beam on both graphs
                found[f"bastion_{faiss_mode}_over_faiss_{faiss_mode}"] = round(
                    p50[("bastion", faiss_mode)] / p50[("faiss-hnsw", faiss_mode)], 2)
    found.update(at_equal_recall(table))
    if ("numpy", "vector") in p50:
        found["bastion_exact_over_numpy"] = round(p50[("bastion", "exact")] / p50[("numpy", "vector")], 2)
    if ("faiss-flat", "vector") in p50:
        found["bastion_exact_over_faiss_flat"] = round(p50[("bastion", "exact")] / p50[("faiss-flat", "vector")], 2)
        found["bastion_vector_over_faiss_flat"] = round(p50[("bastion", "vector")] / p50[("faiss-flat", "vector")], 3)
    for peer in ("lancedb", "qmd-style"):
        for mode in ("keyword", "hybrid"):
            if (peer, mode) in p50:
                found[f"bastion_{mode}_over_{peer}"] = round(p50[("bastion", mode)] / p50[(peer, mode)], 3)
    return found


def at_equal_recall(table: list[dict]) -> dict:
    """bastion's vector p50 over FAISS HNSW's at the narrowest ``efSearch`` whose recall@10 is at least bastion's.

    FAISS at a beam that finds less would flatter it; the next narrower beam
    (which finds less than bastion) is reported beside it, so the ratio at
    exactly equal recall lies between the two.
    """
    rows = {(row["system"], row["mode"]): row for row in table}
    ours = rows.get(("bastion", "vector"))
    faiss = sorted((row for row in table if row["system"] == "faiss-hnsw"), key=lambda row: int(row["mode"][9:]))
    if ours is None or not faiss:
        return {}
    reached = [row for row in faiss if row["recall@10"] >= ours["recall@10"]]
    below = [row for row in faiss if row["recall@10"] < ours["recall@10"]]
    found = {}
    if reached:
        found["faiss_ef_at_equal_recall"] = reached[0]["mode"]
        found["bastion_vector_over_faiss_at_equal_recall"] = round(ours["p50_ms"] / reached[0]["p50_ms"], 2)
        found["bastion_vector_p95_over_faiss_at_equal_recall"] = round(ours["p95_ms"] / reached[0]["p95_ms"], 2)
        found["bastion_vector_cpu_over_faiss_at_equal_recall"] = round(ours["cpu_p50_ms"] / reached[0]["cpu_p50_ms"], 2)
    if below:
        found["faiss_ef_just_below"] = below[-1]["mode"]
        found["bastion_vector_over_faiss_just_below"] = round(ours["p50_ms"] / below[-1]["p50_ms"], 2)
        found["bastion_vector_cpu_over_faiss_just_below"] = round(ours["cpu_p50_ms"] / below[-1]["cpu_p50_ms"], 2)
    return found


def cold_start(folder: Path, layout: Layout, query: str, rounds: int) -> dict:
    """Median wall and CPU seconds of a cold ``search`` per mode and of ``python3 -c pass``, interleaved."""
    import resource
    import subprocess

    from bastion_agent.testing.stub_server import StubServer

    manifest = _realtext.write_manifest(folder)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBED_", "BASTION_"))
           and k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}  # as a user's shell runs it
    env["PYTHONPATH"] = str(REPO)
    commands = {"python -c pass": [sys.executable, "-c", "pass"]}
    for mode in ("keyword", "hybrid", "vector"):
        commands[mode] = [sys.executable, "-m", "bastion_agent", "search", str(manifest), query,
                          "--out", str(layout.root), "--json", "--mode", mode]
    walls: dict = {name: [] for name in commands}
    cpus: dict = {name: [] for name in commands}
    with StubServer(dim=_realtext.DIM) as stub:
        env["EMBED_URL"] = stub.url
        for _ in range(rounds):
            for name, command in commands.items():
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                started = time.perf_counter()
                done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True)
                walls[name].append(time.perf_counter() - started)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpus[name].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
                if done.returncode != 0:
                    raise SystemExit(f"{name} failed: {done.stderr.strip()}")
    return {name: {"wall_s": round(statistics.median(walls[name]), 3), "cpu_s": round(statistics.median(cpus[name]), 3)}
            for name in commands}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, required=True, help="build the store in DIR/SIZE (outside the repository) and reuse it")
    parser.add_argument("--windows", type=int, default=188_678)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--peers", default="numpy,faiss-hnsw,faiss-flat,chroma,lancedb,qmd-style")
    parser.add_argument("--threads-default", action="store_true",
                        help="leave OpenMP and BLAS their default thread counts (they then spin between queries)")
    parser.add_argument("--faiss-index", type=Path, help="keep FAISS's graph in this file and reuse it (same vectors)")
    parser.add_argument("--cold", type=int, default=0, metavar="N", help="also time N rounds of cold CLI searches")
    args = parser.parse_args()

    log = _realtext.stderr

    load_before = os.getloadavg()
    folder = args.keep / str(args.windows)
    built = _realtext.build(folder, args.windows, log=log)
    layout = Layout(folder / "out")
    chunk_ids, texts, matrix = load_rows(layout)
    unit = normalised(matrix)
    queries = [Question(text) for text in questions(args.queries)]
    exact = [top_rows(unit @ q.unit) for q in queries]
    systems: list = [Bastion(layout, {chunk: row for row, chunk in enumerate(chunk_ids)})]
    graph = systems[0].index.ann
    calibration = graph.calibration.as_dict() if graph is not None and graph.calibration is not None else None
    with tempfile.TemporaryDirectory(prefix="bastion-peers-") as scratch:
        peers, left_out = build_peers(set(args.peers.split(",")), unit, texts, Path(scratch), log, args.faiss_index)
        table = measure(systems + peers, queries, exact)
    systems[0].index.close()
    cold = cold_start(folder, layout, queries[0].text, args.cold) if args.cold else None
    print(json.dumps({"windows": built["windows"], "dim": _realtext.DIM, "queries": len(queries), "k": K,
                      "cpus": os.cpu_count(), "load_before": [round(x, 2) for x in load_before],
                      "load_after": [round(x, 2) for x in os.getloadavg()], "left_out": left_out,
                      "store_build": built, "calibration": calibration,
                      "default_beam": graph.expansion if graph else None,
                      "table": table, "ratios": ratios(table), "cold_start": cold}, indent=2))


if __name__ == "__main__":
    main()
