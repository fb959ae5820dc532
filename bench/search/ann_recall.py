#!/usr/bin/env python3
"""Does the build's recall measurement keep its promise on real questions, and what does it cost? One run.

Builds (or reuses) ``bench/_realtext.py``'s store of real prose (the stub's
bag-of-words vectors) through ``embed.refresh_derived``, which builds the
graph and measures it (``embedding/ann_recall.py``: a held-out sample of the
store's own rows as queries, the smallest beam clearing ``[search]
ann_recall`` by the margin). Then it reads what the header recorded (beam,
measured recall, the measurement's time against the build's) and asks the
saved graph the real questions of ``bench/search/search_latency.py`` at the chosen
beam and at the beams around it, each beside the sample's own recall at that
beam: whether the sample predicts what real questions get.

``--reaches`` adds the sample's recall at each beam for other values of
``ann_recall.REACH`` (how far a query is moved from its row), on the same
rows and graph, to see which one tracks real questions.

Usage: python3 bench/search/ann_recall.py --keep DIR [--windows 120000] [--queries 200] [--target 0.95]
       [--reaches 0.28,0.25]
Prints JSON on stdout (progress on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
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


def real_thresholds(view, queries):
    """Each real question's exact 10th-best cosine over the current rows (nothing held out: they are not rows)."""
    return ann_recall.thresholds(view, queries, np.full(len(queries), -1, dtype=np.int64))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, required=True)
    parser.add_argument("--windows", type=int, default=120_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--target", type=float, default=ann_recall.DEFAULT_TARGET)
    parser.add_argument("--build", action="store_true",
                        help="build the graph again in this run (as embed does), so the measurement's cost is a ratio "
                             "to a build timed in the same run")
    parser.add_argument("--reaches", default="", help="other values of ann_recall.REACH to draw the sample with")
    args = parser.parse_args()
    if args.windows < ann.MIN_ROWS:
        parser.error(f"--windows {args.windows}: a store of fewer than {ann.MIN_ROWS} windows has no graph "
                     "to measure (embedding/ann.py MIN_ROWS)")

    log = _realtext.stderr

    import faiss

    load_before = os.getloadavg()
    folder = args.keep / str(args.windows)
    built = _realtext.build(folder, args.windows, log=log)
    layout = Layout(folder / "out")
    view, header = load_view(layout)
    index = faiss.read_index(str(ann.path_of(view.files, header)))
    recorded = ann_recall.Calibration.of(header)
    build_s = None
    if args.build:
        started = time.perf_counter()
        index = ann.new_graph(faiss, view.dim)
        ann.add_rows(faiss, index, view, 0)
        build_s = time.perf_counter() - started
        log(f"built the graph again in {build_s:.1f} s")
    calibration = ann_recall.measure(faiss, index, view, args.target, ann.graph_of(header), build_s)  # as this tree does
    log(f"measured the saved graph in {calibration.seconds:.1f} s: beam {calibration.beam}, {calibration.recall}")
    raw = [np.asarray(bag_of_words(text, _realtext.DIM), dtype=np.float32) for text in questions(args.queries)]
    real = np.stack([q / (np.linalg.norm(q) or 1.0) for q in raw]).astype(np.float32)
    real_floor = real_thresholds(view, real)
    copies, background = ann_recall.survey(faiss, index, view, ann_recall.sample(view, 2 * ann_recall.SAMPLE_QUERIES, seed=view.rows))
    positions, sample = ann_recall.held_out(faiss, index, view, ann_recall.sample(view, 2 * ann_recall.SAMPLE_QUERIES, seed=view.rows))
    started = time.perf_counter()
    sample_floor = ann_recall.thresholds(view, sample, positions)
    truth_s = time.perf_counter() - started
    rows = ann_recall.unit_rows(view, positions)
    rows_floor = ann_recall.thresholds(view, rows, positions)  # held-out rows as they are, without noise
    nobody = np.full(len(real), -1, dtype=np.int64)
    chosen = ann_recall.BEAMS.index(calibration.beam) if calibration.beam in ann_recall.BEAMS else 0
    beams = ann_recall.BEAMS[max(0, chosen - 4): chosen + 4]
    faiss.omp_set_num_threads(1)
    others = {}
    for reach in (float(x) for x in args.reaches.split(",") if x):
        floor_reach = min(max(background, 0.0), 0.9)
        own = floor_reach + reach * (1.0 - floor_reach)  # as ann_recall.noise_for, at another reach
        queries = ann_recall.questions_near(view, positions, seed=view.rows, noise=(1.0 / (own * own) - 1.0) ** 0.5)
        others[reach] = (queries, ann_recall.thresholds(view, queries, positions))
    table = []
    for beam in beams:
        table.append({
            "beam": beam,
            "sample_recall@10": round(ann_recall.recall_at(faiss, index, view, sample, positions, sample_floor, beam), 4),
            "held_out_rows_recall@10": round(ann_recall.recall_at(faiss, index, view, rows, positions, rows_floor, beam), 4),
            "real_questions_recall@10": round(ann_recall.recall_at(faiss, index, view, real, nobody, real_floor, beam), 4),
            **{f"sample_reach_{reach:g}_recall@10": round(ann_recall.recall_at(faiss, index, view, queries, positions,
                                                                                 floor, beam), 4)
               for reach, (queries, floor) in others.items()},
        })
    print(json.dumps({
        "windows": view.rows, "graph": ann.graph_of(header), "target": args.target,
        "calibration": calibration.as_dict(),
        "recorded_at_build": recorded.as_dict() if recorded else None,
        "measurement_over_build_same_run": round(calibration.seconds / build_s, 4) if build_s else None,
        "store_build_s": built.get("derived_s"), "exact_truth_of_sample_s": round(truth_s, 3),
        "real_questions": len(real), "by_beam": table,
        "background_cosine": round(background, 4), "noise": round(ann_recall.noise_for(background), 3),
        "boilerplate_in_draw": int(np.count_nonzero(copies > ann_recall.BOILERPLATE)),
        "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()],
    }, indent=2))


if __name__ == "__main__":
    main()
