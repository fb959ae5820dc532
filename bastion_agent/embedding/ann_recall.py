"""Recall as a setting: each graph's search beam is measured against the exact scan when it is built.

A fixed beam was tuned on one store of 120,000 windows (0.956 recall@10
there); a store of another size, or with other vectors, fell below 0.95
without a word (0.914 on 188,678 windows of other prose). So the beam is
not a constant: when the embed stage builds or rebuilds a graph, it takes a
sample of the store's own current rows, moves each far from every window as
a question is (``NOISE``), finds each one's exact top ``K`` (the query's own
row left out: a held-out query, not a lookup),
walks the graph at widening beams, and keeps the smallest beam whose
recall@``K`` clears the target by ``MARGIN``. The choice and the measured
recall are stored in the index header (``ann_calibration``), and reported
by ``search --json`` and serve's ``/healthz``.

What a walk is measured on is what a search does with it: the same number
of neighbours asked for (``CANDIDATES``), the stale rows dropped, and the
candidates judged by their exact cosine (the search re-ranks them exactly,
so a true top-``K`` row among the candidates is a found one). Ties at the
``K``-th score count as found.

Cost: the exact top ``K`` of ``SAMPLE_QUERIES`` queries is one pass over the
matrix in blocks (about as many multiply-adds as scanning for that many
queries), and each beam tried is that many walks. Building a graph makes
every row walk a construction beam, so the measurement is a small share of
a build: it is recorded beside the build's time in the header
(``seconds`` and ``build_seconds``) and ``bench/search/ann_recall.py`` reports the
ratio.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import asdict, dataclass, fields

DEFAULT_TARGET = 0.95  # [search] ann_recall when the manifest does not say
K = 10  # recall@10: what a person reads is the first page of hits
SAMPLE_QUERIES = 200
# The measured recall must clear the target by this much: with 200 queries of
# 10 neighbours the estimate's standard error near 0.95 is about 0.005-0.007
# (neighbours of one query are not independent), so 0.01 is about 1.5-2 of them.
MARGIN = 0.01
# Beams tried, narrowest first; the first that clears the target is kept. Past
# the widest one a walk visits thousands of nodes: a denser graph, or the exact
# scan, is then the better answer.
BEAMS = (32, 48, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 2048,
         2560, 3072, 4096)
# What a vector search asks the graph for at k = 10: k plus its re-rank margin
# (searching.searcher.RESCORE_MARGIN, 16), and never fewer than
# ann.MIN_CANDIDATES (32). One more, because the query's own row is found and dropped.
CANDIDATES = 33
# The embed stage measures again when the graph has grown by more than this share since it was measured.
REGROWTH = 0.10
BLOCK_ROWS = 65_536
TIE = 1e-6  # float32 cosines within this of the K-th best count as ties
# A held-out row is no stand-in for a question: windows overlap, so a row has near
# copies, and the graph finds them at once (120,000 windows of real prose: 0.98 at
# beam 32 for held-out rows, 0.72 for 200 real questions). A question lands far
# from every window. So each query is a held-out row plus isotropic noise of
# NOISE times its length (its cosine with its own row about 0.37): on that store
# 1.5 x was easier than the real questions at every beam (0.87 at 32, 0.98 at 208,
# against 0.72 and 0.95), 2.0 x a little easier (0.77, 0.96), 3.0 x harder (0.57,
# 0.87). 2.5 x errs on the side of the promise: a wider beam, never a lower recall.
NOISE = 2.5


@dataclass(frozen=True)
class Calibration:
    """One measurement of a graph: the beam chosen for the target, and the recall measured at it."""

    target: float
    beam: int
    recall: float  # recall@K at ``beam`` on the sample
    reached: bool  # whether ``recall`` clears ``target`` (with MARGIN when it was measured)
    graph: str  # the graph's settings (ann.GRAPH and its denser alternative)
    rows: int  # the rows the graph held when measured
    queries: int
    seconds: float  # the measurement's time
    build_seconds: float | None  # the build's (None: the graph was measured again without being built)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def of(cls, header: dict) -> "Calibration | None":
        """The calibration the header records, or None (an older header, or one not readable as such)."""
        value = header.get("ann_calibration")
        if not isinstance(value, dict) or set(value) != {field.name for field in fields(cls)}:
            return None
        try:
            found = cls(float(value["target"]), int(value["beam"]), float(value["recall"]), bool(value["reached"]),
                        str(value["graph"]), int(value["rows"]), int(value["queries"]), float(value["seconds"]),
                        None if value["build_seconds"] is None else float(value["build_seconds"]))
        except (TypeError, ValueError, OverflowError):
            return None
        # a beam no measurement chooses (a header edited by hand) would make every walk visit the whole graph
        sane = 1 <= found.beam <= BEAMS[-1] and 0.0 <= found.recall <= 1.0 and 0.0 < found.target < 1.0
        return found if sane else None

    def meets(self, target: float) -> bool:
        """Whether this measurement promises ``target``: reached, and measured at or above it."""
        return self.reached and self.recall >= target


def stale_for(calibration: Calibration | None, graph: str, rows: int, target: float) -> bool:
    """Whether the embed stage should measure again: never measured, another graph or target, below the
    target, or grown since."""
    if calibration is None or calibration.graph != graph or calibration.target != target:
        return True
    if not calibration.meets(target):
        return True  # below its target (a graph that lost recall): measured again, and rebuilt denser if need be
    return rows > calibration.rows * (1 + REGROWTH)


def sample(view, count: int, seed: int):
    """Up to ``count`` current rows, drawn at random (seeded: the same store gives the same sample)."""
    np = view.np
    current = np.arange(view.rows) if view.stale is None else np.flatnonzero(~view.stale)
    if len(current) <= count:
        return current
    picked = random.Random(seed).sample(range(len(current)), count)
    return np.sort(current[np.asarray(picked, dtype=np.int64)])


def unit_rows(view, positions):
    np = view.np
    return np.ascontiguousarray(view.matrix[positions] * view.inverse[positions, None], dtype=np.float32)


def questions_near(view, positions, seed: int, noise: float | None = None):
    """Unit queries made from the rows at ``positions``: each row plus ``NOISE`` times its length of random noise."""
    np = view.np
    rows = unit_rows(view, positions)
    shake = np.random.default_rng(seed).standard_normal(rows.shape).astype(np.float32)
    shake /= np.maximum(np.linalg.norm(shake, axis=1, keepdims=True), 1e-12)
    queries = rows + (NOISE if noise is None else noise) * shake
    return np.ascontiguousarray(queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12),
                                dtype=np.float32)


def thresholds(view, queries, positions, k: int = K):
    """Each query's ``k``-th best cosine over the current rows, its own row left out (one pass in blocks)."""
    np = view.np
    best = np.full((len(positions), k), -np.inf, dtype=np.float32)
    for start in range(0, view.rows, BLOCK_ROWS):
        stop = min(start + BLOCK_ROWS, view.rows)
        scores = queries @ view.matrix[start:stop].T  # (queries, rows of the block): the rows as stored,
        scores *= view.inverse[start:stop]  # then scaled to cosines (no copy of the block)
        if view.stale is not None:
            scores[:, view.stale[start:stop]] = -np.inf
        inside = (positions >= start) & (positions < stop)
        scores[np.flatnonzero(inside), positions[inside] - start] = -np.inf  # held out: not its own neighbour
        merged = np.concatenate([best, scores], axis=1)
        best = -np.partition(-merged, k - 1, axis=1)[:, :k]
    return best.min(axis=1)


def recall_at(faiss, index, view, queries, positions, floor, beam: int, k: int = K) -> float:
    """Recall@``k`` of a walk at ``beam``: the share of each query's true top ``k`` among its candidates."""
    np = view.np
    count = min(CANDIDATES, index.ntotal)
    _, keys = index.search(queries, count, params=faiss.SearchParametersHNSW(efSearch=beam))
    found = 0
    for row, (query, own, least) in enumerate(zip(queries, positions, floor)):
        candidates = keys[row]
        candidates = candidates[(candidates >= 0) & (candidates < view.rows) & (candidates != own)]
        if view.stale is not None:
            candidates = candidates[~view.stale[candidates]]
        if not len(candidates):
            continue
        scores = unit_rows(view, candidates) @ query
        found += min(k, int(np.count_nonzero(scores >= least - TIE)))
    return found / (k * len(positions)) if len(positions) else 1.0


def smallest_beam(beams: tuple, rows: int, goal: float, recall_of) -> tuple[int, float]:
    """The narrowest of ``beams`` whose ``recall_of(beam)`` reaches ``goal`` (else the widest), and its recall.

    Recall grows with the beam, and a walk costs about its beam, so the
    ladder is climbed two rungs at a time and the rung skipped below the
    first good one is tried last: about half the rungs up to the answer,
    never one far above it (doubling strides overshot to 1024 for an
    answer of 384, the dearest walk of all). A beam as wide as the graph
    visits all of it: no wider one finds more.
    """
    tried: dict[int, float] = {}

    def good(i: int) -> bool:
        if i not in tried:
            tried[i] = recall_of(beams[i])
        return tried[i] >= goal or beams[i] >= rows

    for i in range(0, len(beams), 2):
        if good(i):
            best = i - 1 if i > 0 and good(i - 1) else i
            return beams[best], tried[best]
    last = len(beams) - 1
    good(last)
    return beams[last], tried[last]


def measure(faiss, index, view, target: float, graph: str, build_seconds: float | None,
            beams: tuple | None = None) -> Calibration:
    """The smallest beam of ``beams`` whose recall clears ``target`` by ``MARGIN`` (else the widest, not reached)."""
    started = time.perf_counter()
    beams = beams or BEAMS
    positions = sample(view, SAMPLE_QUERIES, seed=view.rows)
    if len(positions) <= K:  # too few rows to hold a query out and still have K neighbours: any walk finds them all
        return Calibration(target, beams[0], 1.0, True, graph, index.ntotal, 0, time.perf_counter() - started,
                           build_seconds)
    queries = questions_near(view, positions, seed=view.rows)
    floor = thresholds(view, queries, positions)
    faiss.omp_set_num_threads(os.cpu_count() or 1)  # the embed stage's time: every core, as the build
    try:
        beam, recall = smallest_beam(beams, index.ntotal, target + MARGIN,
                                     lambda beam: recall_at(faiss, index, view, queries, positions, floor, beam))
    finally:
        faiss.omp_set_num_threads(1)
    reached = recall >= target + MARGIN or (beam >= index.ntotal and recall >= target)
    return Calibration(target, beam, round(recall, 4), reached, graph, index.ntotal, len(positions),
                       round(time.perf_counter() - started, 4), build_seconds)
