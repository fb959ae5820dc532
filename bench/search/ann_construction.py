#!/usr/bin/env python3
"""Which construction beam (and links a node) the graph should be built with: recall against walk CPU, one run.

A graph built with a narrow construction beam links each node to fewer,
worse neighbours, so a search needs a wider beam for the same recall; a
wider construction beam costs build time once. This bench puts both sides
of that trade in one run, on ``bench/_realtext.py``'s store of real prose
(the stub's bag-of-words vectors) and the 200 real questions of
``bench/search/search_latency.py``.

For each graph (``links:construction``, float16 rows, built as ``ann``
builds one, on every core, timed) it runs the build's measurement
(``ann_recall.measure``: the beam it would choose, its seconds as a share of
that build), then walks every graph at each beam of a ladder for the real
questions, interleaved per question across graphs and beams (so load
stretches them alike): recall@10 as a search judges it (33 neighbours
asked for, exact cosines, a tie with the 10th counted as found) and the
walk's CPU time on the querying thread (``time.thread_time``), one
OpenMP thread as search runs it. ``--faiss-index FILE`` adds FAISS's own
float32 graph (``IndexHNSWFlat``, as ``search_peers.py`` builds it) walked
the same way, so the figures read beside the peer's; a graph spec
``f32:LINKS:CONSTRUCTION`` builds FAISS's float32 graph with those settings
in the run (so a reader sees what is the construction beam and what is the
float16 storage).

Only the walk is timed: what surrounds it (the re-rank, the hits) does not
depend on the graph. Ratios are within this run.

Usage: python3 bench/search/ann_construction.py --keep DIR --windows 120000
       [--graphs 32:40,32:80,32:128] [--beams 64,96,...] [--faiss-index FILE]
Prints JSON on stdout (progress on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import numpy as np  # noqa: E402

import _realtext  # noqa: E402
from ann_params import load_view  # noqa: E402
from search.search_latency import questions  # noqa: E402
from bastion_agent.core.layout import Layout  # noqa: E402
from bastion_agent.embedding import ann, ann_recall  # noqa: E402
from bastion_agent.testing.stub_server import bag_of_words  # noqa: E402

BEAMS = "64,96,128,160,192,256,320,384,448,512,640,768,1024,1536,2048"


def build(faiss, view, links: int, construction: int, target: float, log) -> tuple[object, dict]:
    """A graph of these settings as ``ann`` builds one, and what the build's measurement chose on it."""
    started = time.perf_counter()
    index = ann.new_graph(faiss, view.dim, links, construction)
    ann.add_rows(faiss, index, view, 0)
    build_s = time.perf_counter() - started
    graph = ann.graph_name(links, construction)
    calibration = ann_recall.measure(faiss, index, view, target, graph, build_s)
    log(f"{graph}: built in {build_s:.1f} s, measured in {calibration.seconds:.1f} s: beam {calibration.beam}")
    return index, {"graph": graph, "build_s": round(build_s, 2), "calibration": calibration.as_dict(),
                   "measurement_over_build": round(calibration.seconds / build_s, 4)}


def build_float32(faiss, view, links: int, construction: int, log) -> tuple[object, dict]:
    """FAISS's own float32 graph (``IndexHNSWFlat``, inner product on unit rows) with these settings, timed."""
    started = time.perf_counter()
    index = faiss.IndexHNSWFlat(view.dim, links, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = construction
    ann.add_rows(faiss, index, view, 0)
    build_s = time.perf_counter() - started
    log(f"float32 {links}:{construction}: built in {build_s:.1f} s")
    return index, {"graph": f"faiss-hnsw-float32:{links}:{construction}", "build_s": round(build_s, 2)}


def walk_table(faiss, graphs: dict, view, real, floor, beams: list[int]) -> dict:
    """Per graph and beam: the real questions' recall@10 and the walk's CPU p50 / p95 (ms), interleaved."""
    faiss.omp_set_num_threads(1)
    nobody = -1
    count = ann_recall.CANDIDATES - 1  # what a search asks for at k = 10 (no own row to drop)
    runs = [(name, beam) for name in graphs for beam in beams]
    params = {beam: faiss.SearchParametersHNSW(efSearch=beam) for beam in beams}
    cpu = {run: [] for run in runs}
    found = {run: [] for run in runs}
    order = random.Random(7)
    for at in range(len(real)):
        query = real[at:at + 1]
        shuffled = runs[:]
        order.shuffle(shuffled)
        for run in shuffled:
            name, beam = run
            started = time.thread_time()
            _, keys = graphs[name].search(query, count, params=params[beam])
            cpu[run].append(time.thread_time() - started)
            found[run].append(ann_recall.found_of(view, keys[0], real[at], nobody, floor[at], ann_recall.K))
    table: dict = {name: [] for name in graphs}
    for name, beam in runs:
        samples = sorted(cpu[(name, beam)])
        table[name].append({"beam": beam, "recall@10": round(sum(found[(name, beam)]) / (ann_recall.K * len(real)), 4),
                            "walk_cpu_p50_ms": round(1000 * statistics.median(samples), 4),
                            "walk_cpu_p95_ms": round(1000 * samples[int(0.95 * (len(samples) - 1))], 4)})
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, required=True)
    parser.add_argument("--windows", type=int, default=120_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--target", type=float, default=ann_recall.DEFAULT_TARGET)
    parser.add_argument("--graphs", default="32:40,32:80,32:128")
    parser.add_argument("--beams", default=BEAMS)
    parser.add_argument("--faiss-index", type=Path, help="FAISS's own float32 graph of the same rows (read only)")
    args = parser.parse_args()

    log = _realtext.stderr

    import faiss

    load_before = os.getloadavg()
    folder = args.keep / str(args.windows)
    _realtext.build(folder, args.windows, log=log)
    view, _ = load_view(Layout(folder / "out"))
    graphs, builds = {}, []
    for spec in args.graphs.split(","):
        links, construction = (int(x) for x in spec.removeprefix("f32:").split(":"))
        if spec.startswith("f32:"):
            graphs[spec], built = build_float32(faiss, view, links, construction, log)
        else:
            graphs[spec], built = build(faiss, view, links, construction, args.target, log)
        builds.append(built)
    if args.faiss_index:
        graphs["faiss-float32"] = faiss.read_index(str(args.faiss_index), getattr(faiss, "IO_FLAG_MMAP", 0))
    raw = [np.asarray(bag_of_words(text, _realtext.DIM), dtype=np.float32) for text in questions(args.queries)]
    real = np.stack([q / (np.linalg.norm(q) or 1.0) for q in raw]).astype(np.float32)
    floor = ann_recall.thresholds(view, real, np.full(len(real), -1, dtype=np.int64))
    table = walk_table(faiss, graphs, view, real, floor, [int(b) for b in args.beams.split(",")])
    base = builds[0]["build_s"] if builds else None
    for built in builds:
        built["build_over_first"] = round(built["build_s"] / base, 2) if base else None
    print(json.dumps({"windows": view.rows, "queries": len(real), "cpus": os.cpu_count(), "builds": builds,
                      "walks": table, "load_before": [round(x, 2) for x in load_before],
                      "load_after": [round(x, 2) for x in os.getloadavg()]}, indent=2))


if __name__ == "__main__":
    main()
