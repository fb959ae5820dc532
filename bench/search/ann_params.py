#!/usr/bin/env python3
"""Which HNSW settings reach recall@10 >= 0.95 on real-text vectors, and what each costs, in one run.

The store is ``bench/_realtext.py``'s (windows of real prose, the loopback
stub's bag-of-words vectors at 384 dimensions; above ``ann.MIN_ROWS`` so
that search uses the index) and the questions are the real ones
``bench/search/search_latency.py`` asks. For each graph (FAISS HNSW over float16
unit rows, as ``ann`` builds it, with a number of links a node and a
construction beam; the store's own saved index is the first) and
each search setting (the search beam ``efSearch``, the number of neighbours
asked for), it runs what ``ann.AnnIndex.top`` runs: ask the graph, keep current
rows, score them exactly from the vector file, take the top 10. Recall@10 is
against the exact top 10 of a full scan (``recall@10_ties`` also counts a
window whose cosine equals the exact 10th's: overlapping windows of the same
text often tie, and the scan's pick among them is arbitrary), and p50 / p95 are the wall time of
that whole step. A numpy scan (``matrix @ q``, the exact floor) is timed in
the same loop, interleaved, as the baseline the ratios are quoted against.

Usage: python3 bench/search/ann_params.py --keep DIR [--windows 120000] [--queries 200]
       [--graphs saved,32:40,32:80,16:40,48:40] [--settings 160:96,192:96,256:96,...]
Prints JSON on stdout (progress on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import numpy as np  # noqa: E402

import _realtext  # noqa: E402
from search.search_latency import questions  # noqa: E402
from bastion_agent.core.layout import Layout  # noqa: E402
from bastion_agent.embedding import ann, vectorfile, vectorstore  # noqa: E402
from bastion_agent.testing.stub_server import bag_of_words  # noqa: E402

K = 10
TIE = 1e-6  # float32 cosines this close to the exact 10th are the same score


def load_view(layout: Layout) -> tuple[vectorfile.VectorFile, dict]:
    db = vectorstore.connect(layout.vectors_db, create=False)
    try:
        header = vectorfile.refresh(db, layout, _realtext.MODEL, _realtext.DIM)
    finally:
        db.close()
    files = vectorfile.Files.for_key(layout, _realtext.MODEL)
    return vectorfile.VectorFile(files, header, use_numpy=True), header


def build_graph(view: vectorfile.VectorFile, connectivity: int, construction: int, log):
    """A graph as ``ann`` builds one, with these links a node and this construction beam."""
    import faiss

    started = time.monotonic()
    index = ann.new_graph(faiss, view.dim, connectivity, construction)
    ann.add_rows(faiss, index, view, 0)
    log(f"graph {connectivity}:{construction}: built in {time.monotonic() - started:.0f} s")
    return index


def approximate(index, view: vectorfile.VectorFile, query: np.ndarray, expansion: int, count: int) -> list[int]:
    """``AnnIndex.top`` at this beam and ``count`` neighbours: current rows, exact float64 scores, the top ``K``."""
    import faiss

    _, keys = index.search(query.reshape(1, -1), count, params=faiss.SearchParametersHNSW(efSearch=expansion))
    found = [int(key) for key in keys[0] if key >= 0 and view.is_current_row(int(key))]
    return [position for _, position in view.ranked(query, found)[:K]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, required=True)
    parser.add_argument("--windows", type=int, default=120_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--graphs", default="saved,32:80,16:40,48:40")
    parser.add_argument("--settings", default="128:96,160:96,192:96,256:96,192:200")
    args = parser.parse_args()

    log = _realtext.stderr

    load_before = os.getloadavg()
    folder = args.keep / str(args.windows)
    _realtext.build(folder, args.windows, log=log)
    layout = Layout(folder / "out")
    view, header = load_view(layout)
    unit = np.asarray(view.matrix, dtype=np.float32) * view.inverse[:, None]
    current = ~view.stale if view.stale is not None else np.ones(view.rows, dtype=bool)
    queries = [np.asarray(bag_of_words(text, _realtext.DIM), dtype=np.float32) for text in questions(args.queries)]
    exact, tenth = [], []
    for q in queries:
        scores = unit @ (q / (np.linalg.norm(q) or 1.0))
        scores[~current] = -np.inf
        best = np.argpartition(-scores, K)[:K]
        exact.append(set(int(i) for i in best))
        tenth.append(float(scores[best].min()))
    graphs = {}
    for spec in args.graphs.split(","):
        if spec == "saved":
            import faiss

            graphs[f"saved {ann.graph_of(header)}"] = faiss.read_index(str(ann.path_of(view.files, header)))
        else:
            connectivity, construction = spec.split(":")
            graphs[spec] = build_graph(view, int(connectivity), int(construction), log)
    settings = [tuple(int(x) for x in pair.split(":")) for pair in args.settings.split(",")]
    runs = [(name, expansion, count) for name in graphs for expansion, count in settings]
    walls = {run: [] for run in runs}
    recalls = {run: [] for run in runs}
    tied = {run: [] for run in runs}
    scan = []
    for number, q in enumerate(queries):
        started = time.perf_counter()
        np.argpartition(-(unit @ q), K)
        scan.append(time.perf_counter() - started)
        shift = number % len(runs)
        for run in runs[shift:] + runs[:shift]:
            name, expansion, count = run
            started = time.perf_counter()
            found = approximate(graphs[name], view, q, expansion, count)
            walls[run].append(time.perf_counter() - started)
            recalls[run].append(len(set(found) & exact[number]) / K)
            scored = unit[found] @ (q / (np.linalg.norm(q) or 1.0))  # a window tied with the exact 10th is as good
            tied[run].append(min(K, int(np.sum(scored >= tenth[number] - TIE))) / K)
    scan_p50 = statistics.median(scan)
    table = []
    for run in runs:
        samples = sorted(walls[run])
        p50 = statistics.median(samples)
        table.append({"graph": run[0], "expansion_search": run[1], "candidates": run[2],
                      "recall@10": round(statistics.mean(recalls[run]), 3),
                      "recall@10_ties": round(statistics.mean(tied[run]), 3), "p50_ms": round(1000 * p50, 3),
                      "p95_ms": round(1000 * samples[int(0.95 * (len(samples) - 1))], 3),
                      "p50_over_numpy_scan": round(p50 / scan_p50, 3)})
    print(json.dumps({"windows": view.rows, "current": view.current, "queries": len(queries), "cpus": os.cpu_count(),
                      "load_before": [round(x, 2) for x in load_before],
                      "load_after": [round(x, 2) for x in os.getloadavg()],
                      "numpy_scan_p50_ms": round(1000 * scan_p50, 3), "table": table}, indent=2))


if __name__ == "__main__":
    main()
