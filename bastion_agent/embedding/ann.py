"""The approximate-nearest-neighbour index: FAISS's HNSW over a vector file.

Why FAISS (extra ``ann``): its HNSW walk over float16 rows is the cheapest
measured here at recall@10 >= 0.95 on real text (docs/search.md, *Search at
the floor*: about half of usearch's time on the same 120,000 windows);
it memory-maps a saved graph (a load in milliseconds whatever the size),
adds vectors to a saved graph incrementally, and is maintained by a large
team with wheels for every common platform.

The index lives beside the vector file as ``<name>.<build>.faiss`` and
keys each vector by its position in that build (FAISS numbers rows in the
order they are added), so rows appended to the vector file are appended to
the index. It holds every row, stale ones too (like the vector file): a
search asks for more neighbours than it needs and drops rows that are not
current. Candidates are then re-ranked by exact (float64) cosine on the
float32 rows, so float16 storage costs no recall; rows the index does not
hold yet are scanned exactly.
"""

from __future__ import annotations

import contextlib
import math
import os
import time

from bastion_agent.core.errors import StoreError
from bastion_agent.core.extras import optional
from bastion_agent.core.layout import write_json
from bastion_agent.embedding import ann_recall
from bastion_agent.embedding.ann_recall import DEFAULT_TARGET, Calibration
from bastion_agent.embedding.vectorfile import (
    Files,
    RowFilter,
    VectorFile,
    read_header,
    writer_lock,
)

# Below this many current rows the exact scan is used: numpy scans 100k x 384
# float32 in a few milliseconds (bench/search/search_latency.py), and exact has
# perfect recall.
MIN_ROWS = 100_000
# A search (or serve's reload) adds at most this many rows to the index
# itself; more is the embed stage's refresh_derived, which builds it whole.
LAZY_ROWS = 20_000
# Chosen on real text (bench/search/ann_params.py: 120,000 windows of real prose, the
# stub's bag-of-words vectors, 200 real questions; docs/search.md). Rows are
# stored as float16 with 32 links a node. Over 8-bit rows the graph was worse
# (coarse distances build a worse graph, and decoding them cost more time a
# walk); over float32 rows a walk took 1.4 x as long for the same recall. 16
# links reached 0.80 at a search beam of 192, and 48 links matched 32 at a
# higher cost a walk. Recall did not move between 20, 52 and 200 neighbours
# asked for at any beam (the beam decides), so a search asks for what it keeps
# and at least MIN_CANDIDATES: each is a float32 row read for the exact re-rank.
#
# The construction beam (how many candidates a row's insertion walks before
# its links are chosen) is 200, not FAISS's default of 40, which is narrower
# than the 64 links a node holds on the bottom layer. Measured side by side
# (bench/search/ann_construction.py: recall@10 of the real questions against
# the walk's CPU, per search beam, each graph built in the same run), a beam
# of 200 found as much as 40 at about 0.6-0.75 x the walk's CPU: 0.970 at
# search beam 256 on 120,000 windows where 40 found 0.969 at 384, and 0.979
# at 448 on 188,678 windows where 40 found 0.969 at 448 (FAISS's own float32
# graph, built with 40: 0.971 at 384 and 0.963 at 448). 128 and 160 were
# between; 80 found less than 40 at every beam up to 1024 on 120,000 windows
# (its walks cheaper, its links fewer); 48 and 24 links with 128-200 were no
# better than 32. The build costs 3-5 x as long (measured under load; it is
# one pass at embed time, beside the model's own time for each window), and
# the graph is the same size.
CONNECTIVITY = 32
EXPANSION_ADD = 200
EXPANSION_SEARCH = 208
MIN_CANDIDATES = 32
# A larger graph needs a wider beam for the same recall. On a million windows
# of the same prose (the same settings, bench/search/ann_params.py) the beam of 208
# found 0.862; 448 0.925, 896 0.949, 960 0.956, 1152 0.963. So the beam grows
# with the rows the graph holds: EXPANSION_SEARCH up to BEAM_ROWS, and from
# there geometrically through the beam measured at a million (about the 0.72th
# power of the rows; beyond a million that slope is extrapolated, not measured).
# Both were measured on graphs of construction beam 40, and serve only headers
# no build measured (ann_recall), which hold such graphs.
BEAM_ROWS = 120_000
BEAM_AT_MILLION = 960
STORAGE = "fp16"
# The graph a store gets when no beam of ann_recall.BEAMS reaches its target on
# the defaults' graph: more links (48 matched 32 at a higher cost a walk on
# real text, bench/search/ann_params.py), with the same construction beam.
DENSER_CONNECTIVITY = 48
DENSER_EXPANSION_ADD = EXPANSION_ADD
# What the saved index was built with is recorded in the header ("ann_graph"):
# an index built with other settings is rebuilt whole by the next embed (a
# search never rebuilds it). Meanwhile a FAISS graph of other settings is
# searched with the widest beam measured, and a graph this code cannot open
# (usearch's, the ANN library before FAISS: "i8:16:128", or no "ann_graph"
# at all) is not opened: the exact scan answers until the rebuild.
GRAPH = f"faiss-hnsw-{STORAGE}:{CONNECTIVITY}:{EXPANSION_ADD}"
GRAPH_PREFIX = "faiss-hnsw-"
WIDEST_EXPANSION_SEARCH = 256
# Index files of earlier ANN libraries, removed when a FAISS graph replaces them in the same build.
REPLACED_KINDS = ("usearch",)
# A caller who may see less than this share of the current rows is answered by
# the exact scan over its rows. 1.0: every caller who cannot see every window.
# The graph is one for all callers, so a walk for a filtered caller passes
# through windows it may not see, and which of its own neighbours the walk
# finds depends on them: an answer that a hidden document could change. On
# speed alone the two would cross near a quarter (bench/access/access_filter.py,
# 100k windows: the widened ANN search took 3.0x the scan's time at 2 %
# visible and 1.7x at 10 %, the scan 1.9x the ANN's at 90 %); the promise
# that no answer depends on a hidden window comes first.
EXACT_SHARE = 1.0
# Additions smaller than this are inserted on one thread: the graph is then
# the same for the same rows (threads insert in a racy order, and a small
# graph built that way can miss a true top-5 row), and they take
# milliseconds anyway. Large builds use every core.
PARALLEL_ADD_ROWS = 16_384
ADD_BATCH = 65_536
INSTALL_HINT = "pip install 'bastion-agent[ann]'"


def faiss_or_none():
    return optional("faiss")


def available() -> bool:
    return faiss_or_none() is not None


def path_of(files: Files, header: dict):
    return files.data(header["build"], "faiss")


def update(files: Files, header: dict, view: VectorFile, limit: int | None = None,
           target: float = DEFAULT_TARGET) -> dict:
    """Add the rows the index lacks (at most ``limit`` of them; all when None); return the header.

    With a ``limit`` (a search's lazy update) it never waits for another
    builder, and never measures a graph it only extended. Without one (the
    embed stage) a graph built, grown by more than ``ann_recall.REGROWTH``,
    or measured for another ``target`` is measured again (``ann_recall``):
    the beam that reaches ``target`` is recorded in the header, and a graph
    that no beam brings there is rebuilt denser once.

    Builds the index when it is missing and the file holds at least
    ``MIN_ROWS`` rows. One builder at a time (its own lock file, so searches
    never wait for a build); the saved file replaces the old one atomically
    and the header names it last, so a reader's memory map keeps the file it
    opened.
    """
    if view.rows < MIN_ROWS or view.np is None:
        return header
    faiss = faiss_or_none()  # imported only here: it costs 0.2 s of CPU, which a small store never pays
    if faiss is None:
        return header
    with writer_lock(Files(files.folder, files.name + "-ann"), wait=limit is None) as held:
        latest = read_header(files)
        if not held:  # another process is building it: search with what is saved, scanning the rest
            return latest if latest is not None and latest.get("build") == header["build"] else header
        if latest is None or latest.get("build") != header["build"]:
            return header  # rebuilt meanwhile: the next load sees the new build
        graph = graph_of(latest)
        readable = graph in known_graphs() and _readable(faiss, files, latest, view)
        covered = latest["ann_rows"] if readable else 0
        missing = view.rows - covered
        if limit is not None and missing > limit:
            return latest
        if missing <= 0:
            if limit is None and readable and ann_recall.stale_for(Calibration.of(latest), graph, covered, target):
                return _measured(faiss, files, header, _read(faiss, files, latest, mapped=True), view, target,
                                 graph, None, saved=True)
            return latest
        index = _read(faiss, files, latest, mapped=False) if covered else None
        if index is None or index.ntotal != covered:
            index, covered, graph = new_graph(faiss, view.dim), 0, GRAPH
        started = time.perf_counter()
        add_rows(faiss, index, view, covered)
        seconds = time.perf_counter() - started
        if covered == 0 or (limit is None and ann_recall.stale_for(Calibration.of(latest), graph, view.rows, target)):
            return _measured(faiss, files, header, index, view, target, graph, seconds if not covered else None)
        return _save(faiss, files, header, index, view.rows, graph)


def _measured(faiss, files: Files, header: dict, index, view: VectorFile, target: float, graph: str,
              build_seconds: float | None, saved: bool = False) -> dict:
    """Measure the graph's beam for ``target`` and save both; when no beam reaches it, build the denser graph once.

    ``saved``: the graph is the saved file (only the header is written,
    unless the denser graph replaces it). Of two graphs that both miss the
    target the one with the higher recall is kept, and the header says it is
    below target: search then answers by the exact scan.
    """
    calibration = ann_recall.measure(faiss, index, view, target, graph, build_seconds)
    denser = graph_name(DENSER_CONNECTIVITY, DENSER_EXPANSION_ADD)
    if not calibration.reached and graph != denser:
        started = time.perf_counter()
        other = new_graph(faiss, view.dim, DENSER_CONNECTIVITY, DENSER_EXPANSION_ADD)
        add_rows(faiss, other, view, 0)
        second = ann_recall.measure(faiss, other, view, target, denser, time.perf_counter() - started)
        if second.reached or second.recall > calibration.recall:
            index, calibration, graph, saved = other, second, denser, False
    return _save(faiss, files, header, None if saved else index, view.rows, graph, calibration)


def add_rows(faiss, index, view: VectorFile, first: int) -> None:
    """Add the vector file's rows from ``first`` on, scaled to unit length (inner product is then cosine)."""
    np = view.np
    threads = 1 if view.rows - first < PARALLEL_ADD_ROWS else os.cpu_count() or 1
    faiss.omp_set_num_threads(threads)
    try:
        for start in range(first, view.rows, ADD_BATCH):
            stop = min(start + ADD_BATCH, view.rows)
            index.add(np.ascontiguousarray(view.matrix[start:stop] * view.inverse[start:stop, None], dtype=np.float32))
    finally:
        faiss.omp_set_num_threads(1)


def _save(faiss, files: Files, header: dict, index, rows: int, graph: str = "",
          calibration: Calibration | None = None) -> dict:
    """Write the index beside the vector file (None: it is already there) and name it in the header (last).

    Returns the header as written. ``calibration`` replaces the recorded
    measurement; without one the recorded one is kept (it names the graph
    and the rows it measured).
    """
    target = path_of(files, header)
    temporary = target.with_name(target.name + ".tmp")
    if index is not None:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()  # left by a build that died: its mode is not ours to trust
        os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))  # private before FAISS writes a byte
        faiss.write_index(index, str(temporary))  # fopen "wb" keeps the file's mode
    with writer_lock(files):
        latest = read_header(files)
        if latest is None or latest.get("build") != header["build"]:
            if index is not None:
                temporary.unlink()
            return header
        if index is not None:
            os.replace(temporary, target)
            latest["ann_rows"] = rows
        latest["ann_graph"] = graph or GRAPH
        if calibration is not None:
            latest["ann_calibration"] = calibration.as_dict()
        write_json(files.header, latest)
    for kind in REPLACED_KINDS:
        with contextlib.suppress(FileNotFoundError):
            files.data(header["build"], kind).unlink()
    return latest


def graph_of(header: dict) -> str:
    """What the saved index was built with ("" when there is none; usearch's first defaults when not recorded)."""
    if not header.get("ann_rows"):
        return ""
    return header.get("ann_graph", "i8:16:128")


def graph_name(links: int, construction: int) -> str:
    return f"{GRAPH_PREFIX}{STORAGE}:{links}:{construction}"


def known_graphs() -> set[str]:
    """The settings this code builds: the defaults, and the denser graph a store may need for its target."""
    return {GRAPH, graph_name(DENSER_CONNECTIVITY, DENSER_EXPANSION_ADD)}


def calibration_of(header: dict) -> Calibration | None:
    """The measurement of the saved graph (None when there is none, or it measured another graph)."""
    calibration = Calibration.of(header)
    return calibration if calibration is not None and calibration.graph == graph_of(header) else None


def expansion_for(header: dict) -> int:
    """The beam for the saved graph: the one measured for it (``ann_recall``); else, for a graph measured by
    no build (an older header), the one measured here for its size, and never under the widest first measured
    when the graph was built with other settings (which need a beam measured for them).
    """
    calibration = calibration_of(header)
    if calibration is not None:
        return calibration.beam
    beam = beam_for(header.get("ann_rows", 0))
    return beam if graph_of(header) == GRAPH else max(beam, WIDEST_EXPANSION_SEARCH)


def beam_for(rows: int) -> int:
    """The search beam for a graph of ``rows`` rows (``EXPANSION_SEARCH`` up to ``BEAM_ROWS``, then growing)."""
    if rows <= BEAM_ROWS:
        return EXPANSION_SEARCH
    slope = math.log(BEAM_AT_MILLION / EXPANSION_SEARCH) / math.log(1_000_000 / BEAM_ROWS)
    return round(EXPANSION_SEARCH * (rows / BEAM_ROWS) ** slope)


def opens(header: dict) -> bool:
    """Whether the saved index is a FAISS graph (of any settings), the only kind this code walks."""
    return graph_of(header).startswith(GRAPH_PREFIX)


def _read(faiss, files: Files, header: dict, mapped: bool):
    """The saved index, mapped (read-only, loads in milliseconds) or read whole (to add to); None when unreadable."""
    flags = getattr(faiss, "IO_FLAG_MMAP_IFC", 0) if mapped else 0
    try:
        return faiss.read_index(str(path_of(files, header)), flags)
    except (RuntimeError, ValueError, OSError):
        return None


def _readable(faiss, files: Files, header: dict, view: VectorFile) -> bool:
    """Whether the saved index opens (mapped) and holds the rows the header says, over vectors of this width."""
    index = _read(faiss, files, header, mapped=True)
    return index is not None and index.ntotal == header.get("ann_rows", 0) <= view.rows and index.d == view.dim


def new_graph(faiss, dim: int, links: int | None = None, construction: int | None = None):
    """An empty graph over float16 rows (they need no training): the current settings unless told others."""
    index = faiss.IndexHNSWSQ(dim, faiss.ScalarQuantizer.QT_fp16, links or CONNECTIVITY, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = construction or EXPANSION_ADD
    return index


class AnnIndex:
    """An index over the first ``rows`` positions of a vector file, its graph memory-mapped.

    The map is read-only and shared with every other reader of the file
    (the page cache's, not the process's own memory), costs nothing to open
    and holds in memory only the pages the walks touch.
    """

    def __init__(self, files: Files, header: dict, view: VectorFile):
        faiss = faiss_or_none()
        if faiss is None:
            raise StoreError(f"faiss is not installed: {INSTALL_HINT}")
        if not opens(header):
            raise StoreError("the ANN index was made by another library: it is rebuilt by the next embed")
        self.view = view
        self.rows = header.get("ann_rows", 0)
        self.index = _read(faiss, files, header, mapped=True)
        if self.index is None or self.index.ntotal < self.rows or self.index.d != view.dim:
            raise StoreError("the ANN index file is unreadable: it is rebuilt by the next embed or search")
        self.expansion = expansion_for(header)
        self.calibration = calibration_of(header)  # None: no build measured this graph (an older header)
        self._faiss = faiss
        self._params: dict = {}  # beam -> FAISS's search parameters (``neighbours``)

    def shortfall(self, target: float) -> str | None:
        """Why this graph cannot promise recall@10 ``target`` (None when it can, or was never measured)."""
        measured = self.calibration
        if measured is None or measured.meets(target):
            return None
        return (f"the ANN index's measured recall@10 is {measured.recall:.3f} at beam {measured.beam}, below "
                f"[search] ann_recall = {target:g}; answered by the exact scan until the next embed rebuilds it")

    def top(self, query, n: int, allowed: RowFilter | None = None) -> list[tuple[float, int]]:
        """About the ``n`` best current rows (of ``allowed`` when given) as ``(float64 cosine, position)``, best first.

        Each candidate's float32 row is read once, from the vector file's map,
        to score it exactly: those scores are final (the caller does not read
        the vectors again). A caller who sees a share of the rows asks for
        proportionally more neighbours (and four times more again until
        ``n`` visible ones are found), as does a search among stale rows. Below ``EXACT_SHARE`` of the current
        rows (by default: unless the caller sees them all) the exact scan over
        just the caller's rows answers instead, so no hidden window can change
        which of its rows are found.
        """
        view = self.view
        if allowed is not None and allowed.count < EXACT_SHARE * view.current:
            return view.ranked(query, [position for _, position in view.top(query, n, allowed=allowed)])
        np = view.np
        share = (view.current if allowed is None else allowed.count) / view.rows if view.rows else 1.0
        count = max(MIN_CANDIDATES, math.ceil(n / max(share, 1e-6)))
        query32 = np.asarray(query, dtype=np.float32).reshape(1, -1)
        while True:
            count = min(count, self.rows)
            keys = self.neighbours(query32, count)
            keys = keys[(keys >= 0) & (keys < self.rows)]
            if allowed is not None:
                keys = keys[allowed.mask[keys]]
            elif view.stale is not None:
                keys = keys[~view.stale[keys]]
            if len(keys) >= n or count >= self.rows:
                break
            count *= 4
        unindexed = view.top(query, n, first=self.rows, allowed=allowed)  # rows the index does not hold yet
        if unindexed:
            keys = np.concatenate([keys, np.asarray([position for _, position in unindexed], dtype=np.int64)])
        return view.ranked(query, keys, n)

    def neighbours(self, query32, count: int):
        """The positions of about ``count`` nearest rows (-1 where the graph has fewer), found on the calling thread.

        The beam is passed with each search, not set on the shared index, so
        serve's threads never see one another's settings; one OpenMP thread,
        because a pool sized to the cores would spin after the walk and take
        them from the next request (bench/search/search_peers.py found that). The
        thread count is set only when it is not one already, and the search
        parameters are made once per beam (FAISS only reads them, so threads
        share them): doing both per walk cost about 5 us a query.
        """
        faiss = self._faiss
        if faiss.omp_get_max_threads() != 1:  # per thread: a build on this thread sets it back to one
            faiss.omp_set_num_threads(1)
        params = self._params.get(self.expansion)
        if params is None:
            params = self._params[self.expansion] = faiss.SearchParametersHNSW(efSearch=self.expansion)
        _, keys = self.index.search(query32, count, params=params)
        return keys[0]
