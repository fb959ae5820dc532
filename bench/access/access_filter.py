#!/usr/bin/env python3
"""What filtering every search by the caller's groups costs, and whether its timing says anything about hidden documents.

The store is ``bench/_realtext.py``'s (windows of real prose with the loopback
stub's bag-of-words vectors), built once into ``--keep DIR/SIZE`` (outside
the repository) and reused. Its documents are labelled here: a tenth of
them (in id order, by their windows) ``ten``, the rest ``ninety``, and a
fifth of the ``ten`` ones also ``two``: the caller ``{"ten"}`` sees about
10 % of the windows, ``{"ninety"}`` about 90 % and ``{"two"}`` about 2 %.

Measured in one run, on one open ``embed.SearchIndex`` each, after a warm-up,
over the same real questions (SciFact's and Cranfield's, alternately):

- ``warm_ms``: p50 / p95 per mode (``vector``: the ANN index when the store
  has ``ann.MIN_ROWS`` windows, ``exact``, ``keyword``, ``hybrid``) for
  every group (no filter: the baseline), the 10 % caller and the 90 % caller;
- ``ratios``: each filtered p50 over the unfiltered p50 of the same mode;
- ``ann_paths``: the ANN side of a 2 %, the 10 % and the 90 % caller answered by
  widening the ANN search (``widen``) and by the exact scan of the visible
  rows (``scan``), p50 and recall@10 against the exact answer: what
  ``ann.EXACT_SHARE`` is chosen from;
- ``hidden_timing``: 200 queries aimed at one ``ninety`` document, asked by
  the 10 % caller on this store and on a copy without that document
  (interleaved), the vector side exact on both; the ratio of their p50
  (1.0: the timing says nothing), and whether the answers are identical.

Usage: python3 bench/access/access_filter.py --keep /tmp/access-bench [--sizes 100000] [--queries 200]
Needs numpy (and faiss for the ANN rows). Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import _realtext  # noqa: E402
from bastion_agent import embed  # noqa: E402
from bastion_agent.core.layout import Layout  # noqa: E402
from bastion_agent.embedding import ann, vectorstore  # noqa: E402
from bastion_agent.testing.stub_server import bag_of_words  # noqa: E402

TWO, TEN, NINETY = frozenset({"two"}), frozenset({"ten"}), frozenset({"ninety"})
CALLERS = {"every": None, "ten": TEN, "ninety": NINETY}
SHARES = (("two", 0.02), ("ten", 0.10))  # cumulative shares of the windows, in document-id order
MODES = {"vector": ("vector", False), "exact": ("vector", True), "keyword": ("keyword", False),
         "hybrid": ("hybrid", False)}


def questions(n: int) -> list[str]:
    lists = [[json.loads(line)["text"] for line in (_realtext.IR / name / "queries.jsonl").open(encoding="utf-8")]
             for name in ("scifact", "cranfield")]
    return [text for pair in zip(*lists) for text in pair][:n]


def p50(samples: list[float]) -> float:
    return round(1000 * statistics.median(samples), 3)


def timed(function, arguments) -> list[float]:
    walls = []
    for argument in arguments:
        started = time.perf_counter()
        function(argument)
        walls.append(time.perf_counter() - started)
    return walls


def label(layout: Layout) -> dict:
    """Label documents in id order: ``two`` and ``ten`` up to 2 % of the windows, ``ten`` up to 10 %, then ``ninety``.

    A document that would overshoot a share is passed over (documents are
    whole files: one changelog can be thousands of windows). Returns each
    caller's share of the windows.
    """
    db = vectorstore.connect(layout.vectors_db, create=False)
    try:
        sizes = db.execute("SELECT doc, count(*) FROM chunks GROUP BY doc ORDER BY doc").fetchall()
        total = sum(count for _, count in sizes)
        labels, taken = {}, {"two": 0, "ten": 0}
        for doc, count in sizes:
            labels[doc] = ["ninety"]
            if taken["two"] + count <= SHARES[0][1] * total:
                labels[doc], taken["two"] = ["ten", "two"], taken["two"] + count
                taken["ten"] += count
            elif taken["ten"] + count <= SHARES[1][1] * total:
                labels[doc], taken["ten"] = ["ten"], taken["ten"] + count
        with vectorstore.transaction(db):
            db.executemany("UPDATE documents SET groups = ? WHERE doc = ?",
                           ((json.dumps(groups), doc) for doc, groups in labels.items()))
    finally:
        db.close()
    return {"two": round(taken["two"] / total, 4), "ten": round(taken["ten"] / total, 4),
            "ninety": round(1 - taken["ten"] / total, 4)}


def warm(index, pairs) -> dict:
    results = {}
    for name, (mode, exact) in MODES.items():
        for caller, groups in CALLERS.items():
            search = lambda p: index.search(p[0], p[1], 10, mode, exact=exact, groups=groups)  # noqa: E731
            timed(search, pairs[:20])  # the caller's filter is built once per loaded index: not part of a query
            results.setdefault(name, {})[caller] = p50(timed(search, pairs))
    return results


def ann_paths(index, pairs) -> dict:
    if index.ann is None:
        return {"skipped": "the store is below ann.MIN_ROWS or faiss is missing"}
    result = {}
    for caller in ("two", "ten", "ninety"):
        groups = {"two": TWO, **CALLERS}[caller]
        truth = [[h.chunk_id for h in index.search(t, v, 10, "vector", exact=True, groups=groups)] for t, v in pairs]
        for path, share in (("widen", 0.0), ("scan", 1.01)):
            with mock.patch.object(ann, "EXACT_SHARE", share):
                search = lambda p: index.search(p[0], p[1], 10, "vector", groups=groups)  # noqa: E731
                walls = timed(search, pairs)
                found = [[h.chunk_id for h in search(p)] for p in pairs]
            recall = statistics.mean(len(set(a) & set(b)) / max(1, len(b)) for a, b in zip(found, truth))
            result[f"{caller}_{path}"] = {"p50": p50(walls), "recall_at_10": round(recall, 4)}
    return result


def hidden_timing(folder: Path, layout: Layout, queries: int) -> dict:
    """The 10 % caller asks about a document it may not see, on this store and on a copy without it."""
    db = vectorstore.connect(layout.vectors_db, create=False)
    try:
        doc = db.execute("""SELECT c.doc FROM chunks c JOIN documents d ON d.doc = c.doc
                            WHERE d.groups = '["ninety"]' GROUP BY c.doc HAVING count(*) BETWEEN 5 AND 50
                            LIMIT 1""").fetchone()[0]
        texts = [row[0] for row in db.execute("SELECT text FROM chunks WHERE doc = ? ORDER BY idx", (doc,))]
    finally:
        db.close()
    copy = folder / "without"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(layout.root, copy)
    other = vectorstore.connect(Layout(copy).vectors_db, create=False)
    try:
        vectorstore.erase_documents(other, [doc])
        vectorstore.checkpoint(other)
    finally:
        other.close()
    asked = [" ".join(texts[i % len(texts)].split()[:12]) for i in range(queries)]
    pairs = [(text, bag_of_words(text, _realtext.DIM)) for text in asked]
    indexes = [embed.SearchIndex.load(_realtext.manifest_stub(), layout),
               embed.SearchIndex.load(_realtext.manifest_stub(), Layout(copy))]
    result = {}
    try:
        # exact vector sides only: the copy has no ANN index yet (a rebuild of 100k rows is the embed
        # stage's), and comparing the ANN path with the scan would measure the two paths, not the document
        for mode in ("exact", "keyword", "hybrid"):
            name, exact = MODES[mode][0], True
            walls: list[list[float]] = [[], []]
            answers = [[], []]
            for pair in pairs[:10]:
                for index in indexes:
                    index.search(pair[0], pair[1], 10, name, exact=exact, groups=TEN)
            for pair in pairs:  # interleaved, so the machine's noise falls on both alike
                for side, index in enumerate(indexes):
                    started = time.perf_counter()
                    hits = index.search(pair[0], pair[1], 10, name, exact=exact, groups=TEN)
                    walls[side].append(time.perf_counter() - started)
                    answers[side].append([(h.chunk_id, h.score, h.relevance) for h in hits])
            result[mode] = {"p50_with": p50(walls[0]), "p50_without": p50(walls[1]),
                            "ratio": round(statistics.median(walls[0]) / statistics.median(walls[1]), 4),
                            "answers_identical": answers[0] == answers[1]}
    finally:
        for index in indexes:
            index.close()
        shutil.rmtree(copy)
    return result


def measure(folder: Path, n: int, queries: int) -> dict:
    built = _realtext.build(folder, n, log=_realtext.stderr)
    layout = Layout(folder / "out")
    shares = label(layout)
    pairs = [(text, bag_of_words(text, _realtext.DIM)) for text in questions(queries)]
    index = embed.SearchIndex.load(_realtext.manifest_stub(), layout)
    try:
        result = {"windows": built["windows"], "shares": shares, "k": 10, "ann_used": index.ann is not None}
        result["warm_ms"] = warm(index, pairs)
        result["ratios"] = {mode: {caller: round(times[caller] / times["every"], 3) for caller in ("ten", "ninety")}
                            for mode, times in result["warm_ms"].items()}
        result["ann_paths"] = ann_paths(index, pairs)
    finally:
        index.close()
    result["hidden_timing"] = hidden_timing(folder, layout, 200)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", metavar="DIR", type=Path, required=True,
                        help="build each store in DIR/SIZE (outside the repository) and reuse it")
    parser.add_argument("--sizes", default="100000")
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        results.append(measure(args.keep / str(size), size, args.queries))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"ann_min_rows": ann.MIN_ROWS, "exact_share": ann.EXACT_SHARE, "cpus": os.cpu_count(),
                      "sizes": results}, indent=2))


if __name__ == "__main__":
    main()
