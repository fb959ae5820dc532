"""Recall as a setting: each graph's search beam is measured against the exact scan when it is built.

A fixed beam was tuned on one store of 120,000 windows (0.956 recall@10
there); a store of another size, or with other vectors, fell below 0.95
without a word (0.914 on 188,678 windows of other prose). So the beam is
not a constant: when the embed stage builds or rebuilds a graph, it takes a
sample of the store's own current rows (not its boilerplate: ``survey``),
moves each far from every window as a question is (noise set by the store's
background cosine: ``noise_for``), finds each one's exact top ``K`` (the
query's own row left out: a held-out query, not a lookup), walks the graph
at widening beams, and keeps the smallest beam whose recall@``K`` clears the
target by ``MARGIN``. The choice and the measured recall are stored in the
index header (``ann_calibration``), and reported by ``search --json`` and
serve's ``/healthz``.

What a walk is measured on is what a search does with it: the same number
of neighbours asked for (``CANDIDATES``), the stale rows dropped, and the
candidates judged by their exact cosine (the search re-ranks them exactly,
so a true top-``K`` row among the candidates is a found one). Ties at the
``K``-th score count as found.

Cost: the exact top ``K`` of ``SAMPLE_QUERIES`` queries is the one pass over
the matrix in blocks (about as many multiply-adds as scanning for that many
queries); the boilerplate and the background are read from the graph and
a few thousand rows; each beam tried is at most that many walks, and a beam
short of the goal stops after as few as ``STEP`` of them. Building a graph
makes every row walk a construction beam, so the measurement is a small
share of a build: it is recorded beside the build's time in the header
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
# (neighbours of one query are not independent), and the sample is no exact
# stand-in for questions: on graphs built with a construction beam of 200 it
# read 0.015 above the real questions at 120,000 windows (0.9645 against
# 0.9495 at beam 192) and within 0.004 of them at 188,678 (docs/search.md, The
# graph's construction beam). 0.015 covers both: a margin of 0.01 chose a beam
# where real questions found 0.9495 on the first store.
MARGIN = 0.015
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
FLOOR_ROWS = 4096  # rows whose K-th best bounds the exact pass's from below (about K * rows / 4096 kept a query)
SLACK = 1e-4  # far above float32 rounding of a cosine, far below any gap that matters
# A held-out row is no stand-in for a question: windows overlap, so a row has near
# copies, and the graph finds them at once (120,000 windows of real prose: 0.98 at
# beam 32 for held-out rows, 0.72 for 200 real questions). A question lands far
# from every window. So each query is a held-out row plus isotropic noise, as far
# from its row as a question is from its nearest window *relative to the store*:
# every two windows of one store already share a background cosine (the mean over
# all pairs: 0.137 and 0.146 on two stores of real prose, about 0 for random
# vectors), so the noise is set for the query's cosine with its own row to stand
# REACH of the way from that background to 1. A fixed noise (2.5 x the row's
# length) matched real questions on the first store and was much harder than them
# on the second (beam 1536 chosen where real questions reach 0.957 at 384). With
# boilerplate left out (below) it was 0.02-0.03 harder than real questions on both;
# a reach of 0.32 (noise 2.2 x on both) tracks them within 0.008 from beam 192 to
# 448 on both (docs/search.md, Recall as a setting).
REACH = 0.32
NOISE = 2.5  # questions_near's noise when none is given: the fixed one before REACH (bench/search/ann_recall.py compares)
# Boilerplate: a row with more than BOILERPLATE near copies (cosine above NEAR_COPY)
# is a text repeated across documents (licences, generated tables): a uniform
# sample of windows draws it once per copy, and a query near it asks for the exact
# top 10 of thousands of almost equal scores, which no question sees (on 188,678
# windows a fifth of the sample, holding most of the misses at every beam). The
# sample is drawn among the other rows, and topped up with boilerplate only when a
# store holds too few others.
NEAR_COPY = 0.9
BOILERPLATE = 100
BACKGROUND_ROWS = 4096  # the rows a sampled row's mean cosine is taken over (a standard error near 0.001)
# A beam's walk stops early once it cannot reach the goal: after each STEP queries,
# when even finding every remaining neighbour would leave it short, or when its
# recall so far is below the goal by more than STOP_ERRORS standard errors
# (the beam is then counted as short; a beam that is kept is always walked in full).
STEP = 50
STOP_ERRORS = 3.0
# The way the queries are drawn, recorded with each measurement: 1 was held-out rows
# with the fixed noise, boilerplate in; 2 leaves boilerplate out and takes the noise
# from the background. A graph measured another way is measured again by the next embed.
SAMPLE_METHOD = 2


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
    sample: int = SAMPLE_METHOD  # how the queries were drawn (headers before this field: 1)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def of(cls, header: dict) -> "Calibration | None":
        """The calibration the header records, or None (an older header, or one not readable as such)."""
        value = header.get("ann_calibration")
        names = {field.name for field in fields(cls)}
        if not isinstance(value, dict) or set(value) not in (names, names - {"sample"}):
            return None
        try:
            found = cls(float(value["target"]), int(value["beam"]), float(value["recall"]), bool(value["reached"]),
                        str(value["graph"]), int(value["rows"]), int(value["queries"]), float(value["seconds"]),
                        None if value["build_seconds"] is None else float(value["build_seconds"]),
                        int(value.get("sample", 1)))
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
    if calibration.sample != SAMPLE_METHOD:
        return True  # measured on another sample (the first one's beams were up to 3 x wider than needed)
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


def survey(faiss, index, view, positions):
    """Each row at ``positions``' count of near copies (up to BOILERPLATE + 1), and the store's background cosine.

    Neither needs a pass over the matrix: the copies are what the graph
    finds among a row's BOILERPLATE + 2 nearest (a text repeated thousands
    of times fills them all), and the background is the mean cosine of the
    rows with BACKGROUND_ROWS others drawn at random.
    """
    np = view.np
    rows = unit_rows(view, positions)
    asked = min(BOILERPLATE + 2, index.ntotal)
    _, keys = index.search(rows, asked, params=faiss.SearchParametersHNSW(efSearch=2 * asked))
    copies = np.zeros(len(positions), dtype=np.int64)
    for at, (row, own) in enumerate(zip(rows, positions)):
        near = keys[at][(keys[at] >= 0) & (keys[at] < view.rows) & (keys[at] != own)]
        if view.stale is not None:
            near = near[~view.stale[near]]
        copies[at] = np.count_nonzero(unit_rows(view, near) @ row > NEAR_COPY) if len(near) else 0
    others = sample(view, BACKGROUND_ROWS, seed=view.rows + 1)
    background = float(np.mean(rows @ unit_rows(view, others).T))
    return copies, background


def noise_for(background: float) -> float:
    """The noise (times the row's length) that puts a query's cosine with its own row REACH of the way from
    ``background`` to 1: isotropic noise is about orthogonal to the row, so that cosine is 1 / sqrt(1 + noise^2)."""
    floor = min(max(background, 0.0), 0.9)  # random vectors: about 0; past 0.9 every window is one text
    own = floor + REACH * (1.0 - floor)
    return (1.0 / (own * own) - 1.0) ** 0.5


def pick(view, positions, copies, count: int, seed: int):
    """``count`` of ``positions``, drawn among the rows that are not boilerplate, topped up with boilerplate."""
    np = view.np
    draw = random.Random(seed)
    plain = [int(p) for p, c in zip(positions, copies) if c <= BOILERPLATE]
    repeated = [int(p) for p, c in zip(positions, copies) if c > BOILERPLATE]
    chosen = draw.sample(plain, min(count, len(plain)))
    chosen += draw.sample(repeated, min(count - len(chosen), len(repeated)))
    return np.sort(np.asarray(chosen, dtype=np.int64))


def questions_near(view, positions, seed: int, noise: float | None = None):
    """Unit queries made from the rows at ``positions``: each row plus ``noise`` times its length of random noise."""
    np = view.np
    rows = unit_rows(view, positions)
    shake = np.random.default_rng(seed).standard_normal(rows.shape).astype(np.float32)
    shake /= np.maximum(np.linalg.norm(shake, axis=1, keepdims=True), 1e-12)
    queries = rows + (NOISE if noise is None else noise) * shake
    return np.ascontiguousarray(queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12),
                                dtype=np.float32)


def thresholds(view, queries, positions, k: int = K):
    """Each query's ``k``-th best cosine over the current rows, its own row left out (one pass in blocks).

    Only the scores at or above a floor every answer clears are kept (the
    ``k``-th best over FLOOR_ROWS rows drawn at random, less SLACK for the
    rounding of another product order): a few hundred a query, not a
    partition of every block.
    """
    np = view.np
    low = lower_bounds(view, queries, positions, k) - SLACK
    kept: list[list] = [[] for _ in range(len(positions))]
    for start in range(0, view.rows, BLOCK_ROWS):
        stop = min(start + BLOCK_ROWS, view.rows)
        scores = queries @ view.matrix[start:stop].T  # (queries, rows of the block): the rows as stored,
        scores *= view.inverse[start:stop]  # then scaled to cosines (no copy of the block)
        if view.stale is not None:
            scores[:, view.stale[start:stop]] = -np.inf
        inside = (positions >= start) & (positions < stop)
        scores[np.flatnonzero(inside), positions[inside] - start] = -np.inf  # held out: not its own neighbour
        rows, columns = np.nonzero(scores >= low[:, None])
        parts = np.split(scores[rows, columns], np.cumsum(np.bincount(rows, minlength=len(positions)))[:-1])
        for at, part in enumerate(parts):
            kept[at].append(part)
    floor = np.full(len(positions), -np.inf, dtype=np.float32)
    for at, parts in enumerate(kept):
        values = np.concatenate(parts)
        if len(values) >= k:
            floor[at] = np.partition(values, len(values) - k)[len(values) - k]
    return floor


def lower_bounds(view, queries, positions, k: int = K):
    """Each query's ``k``-th best cosine over FLOOR_ROWS current rows drawn at random: at most its true one."""
    np = view.np
    drawn = sample(view, FLOOR_ROWS, seed=view.rows + 2)
    if len(drawn) <= k:
        return np.full(len(positions), -np.inf, dtype=np.float32)
    scores = queries @ unit_rows(view, drawn).T
    scores[drawn[None, :] == positions[:, None]] = -np.inf
    return np.partition(scores, len(drawn) - k, axis=1)[:, len(drawn) - k]


def recall_at(faiss, index, view, queries, positions, floor, beam: int, k: int = K, goal: float | None = None) -> float:
    """Recall@``k`` of a walk at ``beam``: the share of each query's true top ``k`` among its candidates.

    With a ``goal``, the walk goes ``STEP`` queries at a time and stops as
    soon as the goal is out of reach, or far below the recall so far (the
    estimate so far is returned: below the goal, so the beam is short).
    """
    np = view.np
    count = min(CANDIDATES, index.ntotal)
    params = faiss.SearchParametersHNSW(efSearch=beam)
    shares: list[float] = []
    for start in range(0, len(positions), STEP if goal is not None else max(len(positions), 1)):
        stop = min(start + STEP if goal is not None else len(positions), len(positions))
        _, keys = index.search(queries[start:stop], count, params=params)
        for row in range(stop - start):
            shares.append(found_of(view, keys[row], queries[start + row], positions[start + row], floor[start + row], k) / k)
        if goal is not None and stop < len(positions) and hopeless(np, shares, len(positions), goal):
            return sum(shares) / len(shares)
    return sum(shares) / len(shares) if shares else 1.0


def found_of(view, candidates, query, own, least, k: int) -> int:
    """How many of a query's true top ``k`` (cosine at least ``least``) are among the graph's ``candidates``."""
    np = view.np
    candidates = candidates[(candidates >= 0) & (candidates < view.rows) & (candidates != own)]
    if view.stale is not None:
        candidates = candidates[~view.stale[candidates]]
    if not len(candidates):
        return 0
    scores = unit_rows(view, candidates) @ query
    return min(k, int(np.count_nonzero(scores >= least - TIE)))


def hopeless(np, shares: list, total: int, goal: float) -> bool:
    """Whether a walk of ``total`` queries cannot reach ``goal`` after these ``shares``: short even if every
    remaining query found all, or more than STOP_ERRORS standard errors below it so far."""
    if (sum(shares) + total - len(shares)) / total < goal:
        return True
    spread = float(np.std(shares)) / len(shares) ** 0.5
    return float(np.mean(shares)) + STOP_ERRORS * spread < goal


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


def held_out(faiss, index, view, drawn):
    """The measurement's queries: ``SAMPLE_QUERIES`` of the rows ``drawn`` (boilerplate last), each moved by the
    noise the store's background calls for; their positions and the unit queries."""
    copies, background = survey(faiss, index, view, drawn)
    positions = pick(view, drawn, copies, SAMPLE_QUERIES, seed=view.rows)
    return positions, questions_near(view, positions, seed=view.rows, noise=noise_for(background))


def measure(faiss, index, view, target: float, graph: str, build_seconds: float | None,
            beams: tuple | None = None) -> Calibration:
    """The smallest beam of ``beams`` whose recall clears ``target`` by ``MARGIN`` (else the widest, not reached)."""
    started = time.perf_counter()
    beams = beams or BEAMS
    positions = sample(view, 2 * SAMPLE_QUERIES, seed=view.rows)
    if len(positions) <= K:  # too few rows to hold a query out and still have K neighbours: any walk finds them all
        return Calibration(target, beams[0], 1.0, True, graph, index.ntotal, 0, time.perf_counter() - started,
                           build_seconds, SAMPLE_METHOD)
    faiss.omp_set_num_threads(os.cpu_count() or 1)  # the embed stage's time: every core, as the build
    try:
        positions, queries = held_out(faiss, index, view, positions)
        floor = thresholds(view, queries, positions)
        beam, recall = smallest_beam(beams, index.ntotal, target + MARGIN,
                                     lambda beam: recall_at(faiss, index, view, queries, positions, floor, beam,
                                                         goal=target + MARGIN))
    finally:
        faiss.omp_set_num_threads(1)
    reached = recall >= target + MARGIN or (beam >= index.ntotal and recall >= target)
    return Calibration(target, beam, round(recall, 4), reached, graph, index.ntotal, len(positions),
                       round(time.perf_counter() - started, 4), build_seconds, SAMPLE_METHOD)
