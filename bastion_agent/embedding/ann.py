"""The approximate-nearest-neighbour index: usearch's HNSW over a vector file.

Why usearch (extra ``ann``): it memory-maps a saved index ("view", a load
in milliseconds whatever the size), adds vectors to a saved index
incrementally, stores them as int8 (a quarter of float32's size) and is
actively maintained; hnswlib's last release is from 2023 and faiss is a far
larger dependency. Measured choices are in docs/search.md.

The index lives beside the vector file as ``<name>.<build>.usearch`` and
keys each vector by its position in that build, so rows appended to the
vector file are appended to the index. It holds every row, stale ones too
(like the vector file): a search asks for more neighbours than it needs and
drops rows that are not current. Candidates are then re-ranked by exact
(float64) cosine on the float32 rows, so int8 quantisation costs little
recall; rows the index does not hold yet are scanned exactly.
"""

from __future__ import annotations

import math
import mmap
import os
from pathlib import Path

from bastion_agent.core.errors import StoreError
from bastion_agent.core.extras import optional
from bastion_agent.core.layout import write_json
from bastion_agent.embedding.vectorfile import (
    Files,
    RowFilter,
    VectorFile,
    read_header,
    writer_lock,
)

# Below this many current rows the exact scan is used: numpy scans 100k x 384
# float32 in a few milliseconds (bench/search_latency.py), and exact has
# perfect recall.
MIN_ROWS = 100_000
# A search (or serve's reload) adds at most this many rows to the index
# itself; more is the embed stage's refresh_derived, which builds it whole.
LAZY_ROWS = 20_000
CONNECTIVITY = 16
EXPANSION_ADD = 128
# Chosen on real text (bench/ann_params.py: 120,000 windows of real prose, the
# stub's bag-of-words vectors, 200 real questions; docs/search.md): recall@10
# 0.928 at 256, 0.946 at 384, 0.954 at 416, 0.960 at 512 on this graph (int8,
# connectivity 16); 416 is the smallest measured value at or above 0.95.
# (1M clustered synthetic vectors reached 0.99 at 256: real text is harder.)
# Asking for more neighbours than 96 changed nothing there: the beam decides.
EXPANSION_SEARCH = 416
MIN_CANDIDATES = 96
DTYPE = "i8"
# What the saved index was built with is recorded in the header ("ann_graph"):
# an index built with other settings is rebuilt whole by the next embed (a
# search never rebuilds it) and searched meanwhile with the beam its own
# settings need. Indexes saved before the settings were recorded are
# LEGACY_GRAPH's.
GRAPH = f"{DTYPE}:{CONNECTIVITY}:{EXPANSION_ADD}"
LEGACY_GRAPH = "i8:16:128"
LEGACY_EXPANSION_SEARCH = 416
# A caller who may see less than this share of the current rows is answered by
# the exact scan over its rows. 1.0: every caller who cannot see every window.
# The graph is one for all callers, so a walk for a filtered caller passes
# through windows it may not see, and which of its own neighbours the walk
# finds depends on them: an answer that a hidden document could change. On
# speed alone the two would cross near a quarter (bench/access_filter.py,
# 100k windows: the widened ANN search took 3.0x the scan's time at 2 %
# visible and 1.7x at 10 %, the scan 1.9x the ANN's at 90 %); the promise
# that no answer depends on a hidden window comes first.
EXACT_SHARE = 1.0
# Additions smaller than this are inserted on one thread: the graph is then
# the same for the same rows (threads insert in a racy order, and a small
# graph built that way missed a true top-5 row in about 1 search in 20),
# and they take milliseconds anyway. Large builds use every core.
PARALLEL_ADD_ROWS = 16_384
INSTALL_HINT = "pip install 'bastion-agent[ann]'"


def usearch_or_none():
    return optional("usearch.index")


def available() -> bool:
    return usearch_or_none() is not None


def path_of(files: Files, header: dict):
    return files.data(header["build"], "usearch")


def update(files: Files, header: dict, view: VectorFile, limit: int | None = None) -> dict:
    """Add the rows the index lacks (at most ``limit`` of them; all when None); return the header.

    With a ``limit`` (a search's lazy update) it never waits for another
    builder.

    Builds the index when it is missing and the file holds at least
    ``MIN_ROWS`` rows. One builder at a time (its own lock file, so searches
    never wait for a build); the saved file replaces the old one atomically
    and the header names it last, so a reader's memory map keeps the file it
    opened.
    """
    module = usearch_or_none()
    if module is None or view.rows < MIN_ROWS or view.np is None:
        return header
    with writer_lock(Files(files.folder, files.name + "-ann"), wait=limit is None) as held:
        latest = read_header(files)
        if not held:  # another process is building it: search with what is saved, scanning the rest
            return latest if latest is not None and latest.get("build") == header["build"] else header
        if latest is None or latest.get("build") != header["build"]:
            return header  # rebuilt meanwhile: the next load sees the new build
        covered = latest.get("ann_rows", 0) if graph_of(latest) == GRAPH and _readable(module, files, latest) else 0
        missing = view.rows - covered
        if missing <= 0 or (limit is not None and missing > limit):
            return latest
        index = _open_for_writing(module, files, latest, covered, view.dim)
        covered = len(index)
        for first in range(covered, view.rows, 65_536):
            stop = min(first + 65_536, view.rows)
            threads = 1 if stop - first < PARALLEL_ADD_ROWS else os.cpu_count() or 1
            index.add(view.np.arange(first, stop, dtype="uint64"), view.matrix[first:stop], threads=threads)
        target = path_of(files, latest)
        temporary = target.with_name(target.name + ".tmp")
        index.save(str(temporary))
        os.chmod(temporary, 0o600)
        with writer_lock(files):
            latest = read_header(files)
            if latest is None or latest.get("build") != header["build"]:
                temporary.unlink()
                return header
            os.replace(temporary, target)
            latest["ann_rows"] = view.rows
            latest["ann_graph"] = GRAPH
            write_json(files.header, latest)
    return latest


def graph_of(header: dict) -> str:
    """The settings the saved index was built with (an index from before they were recorded: the first defaults)."""
    return header.get("ann_graph", LEGACY_GRAPH)


def expansion_for(header: dict) -> int:
    """The beam for the saved graph: the default for a graph of the current settings, else the first defaults' beam.

    A graph built with other settings needs the beam measured for it, and
    the only other settings a saved index can have so far are the first
    defaults (LEGACY_GRAPH); a graph of settings this code does not know
    gets that beam too, the widest this code has ever searched with.
    """
    return EXPANSION_SEARCH if graph_of(header) == GRAPH else LEGACY_EXPANSION_SEARCH


def _readable(module, files: Files, header: dict) -> bool:
    """Whether the saved index opens and holds the rows the header says."""
    try:
        index = module.Index.restore(str(path_of(files, header)), view=True)
    except (RuntimeError, ValueError, OSError):
        return False
    return index is not None and len(index) == header.get("ann_rows", 0)


def _open_for_writing(module, files: Files, header: dict, covered: int, dim: int):
    if covered:
        try:
            index = module.Index.restore(str(path_of(files, header)))
        except (RuntimeError, ValueError, OSError):
            index = None
        if index is not None and len(index) == covered and index.ndim == dim:
            return index
    return module.Index(ndim=dim, metric="cos", dtype=DTYPE, connectivity=CONNECTIVITY,
                        expansion_add=EXPANSION_ADD, expansion_search=EXPANSION_SEARCH)


# A long-lived process (serve) copies the graph into memory backed by huge
# pages when the kernel offers them and the graph takes at most this share of
# the memory available: each step of the walk lands on a random node, and on
# the file's 4 kB pages nearly every step also missed the TLB. Measured at
# 120,000 windows with cold caches: 1.62 ms a walk against 1.84 ms from the
# file (FAISS HNSW at ef 256: 1.46 ms), a copy of 61 MB taking 0.03-0.08 s.
# A copy in ordinary 4 kB pages was no faster than the file (1.98 ms), so
# without huge pages the file is mapped as before.
RESIDENT_SHARE = 0.25
HUGE_PAGES_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def huge_pages_offered() -> bool:
    """Whether the kernel backs memory advised for huge pages with them (transparent huge pages: always or madvise)."""
    try:
        setting = HUGE_PAGES_SETTING.read_text(encoding="ascii")
    except OSError:
        return False
    return "[always]" in setting or "[madvise]" in setting


def memory_available() -> int:
    """The kernel's estimate of memory available without swapping, in bytes (0 when unknown)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def resident_copy(path) -> mmap.mmap | None:
    """The file read into private memory advised for huge pages; None when huge pages are off or it would not fit."""
    size = os.stat(path).st_size
    if not size or not huge_pages_offered() or not hasattr(mmap, "MADV_HUGEPAGE") \
            or size > RESIDENT_SHARE * memory_available():
        return None
    copy = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    copy.madvise(mmap.MADV_HUGEPAGE)
    done = 0
    with open(path, "rb", buffering=0) as handle:
        while done < size and (got := handle.readinto(memoryview(copy)[done:])):
            done += got
    if done != size:  # the file shrank while it was read: map it instead
        copy.close()
        return None
    return copy


class AnnIndex:
    """An index over the first ``rows`` positions of a vector file: the file memory-mapped, or a resident copy.

    ``resident=True`` (serve) copies the graph into huge-page memory when it
    fits (``resident_copy``): the process then holds the graph as its own
    memory (anonymous, not the page cache's, so not shared with other
    processes or dropped under pressure) and walks it faster. A one-off
    search maps the file, which costs nothing to open.
    """

    def __init__(self, files: Files, header: dict, view: VectorFile, resident: bool = False):
        module = usearch_or_none()
        if module is None:
            raise StoreError(f"usearch is not installed: {INSTALL_HINT}")
        self.view = view
        self.rows = header.get("ann_rows", 0)
        path = str(path_of(files, header))
        self.copy = resident_copy(path) if resident else None  # kept: the index reads from it
        self.index = module.Index.restore(memoryview(self.copy) if self.copy is not None else path, view=True)
        if self.index is None or len(self.index) < self.rows:
            raise StoreError("the ANN index file is unreadable: it is rebuilt by the next embed or search")
        self.index.expansion_search = expansion_for(header)

    def top(self, query, n: int, allowed: RowFilter | None = None) -> list[tuple[float, int]]:
        """About the ``n`` best current rows (of ``allowed`` when given) as ``(float64 cosine, position)``, best first.

        Each candidate's float32 row is read once, from the vector file's map,
        to score it exactly: those scores are final (the caller does not read
        the vectors again). The installed usearch has no filtered search in
        Python, so a caller who sees a share of the rows asks for
        proportionally more neighbours (and four times more again until
        ``2 n`` visible ones are found). Below ``EXACT_SHARE`` of the current
        rows (by default: unless the caller sees them all) the exact scan over
        just the caller's rows answers instead, so no hidden window can change
        which of its rows are found.
        """
        view = self.view
        if allowed is not None and allowed.count < EXACT_SHARE * view.current:
            return view.ranked(query, [position for _, position in view.top(query, n, allowed=allowed)])
        np = view.np
        share = (view.current if allowed is None else allowed.count) / view.rows if view.rows else 1.0
        count = max(MIN_CANDIDATES, math.ceil(2 * n / max(share, 1e-6)))
        query32 = np.asarray(query, dtype=np.float32)
        while True:
            count = min(count, self.rows)
            keys = self.neighbours(query32, count)
            keys = keys[keys < self.rows].astype(np.int64)
            if allowed is not None:
                keys = keys[allowed.mask[keys]]
            elif view.stale is not None:
                keys = keys[~view.stale[keys]]
            if len(keys) >= 2 * n or count >= self.rows:
                break
            count *= 4
        unindexed = view.top(query, n, first=self.rows, allowed=allowed)  # rows the index does not hold yet
        if unindexed:
            keys = np.concatenate([keys, np.asarray([position for _, position in unindexed], dtype=np.int64)])
        return view.ranked(query, keys, n)

    def neighbours(self, query32, count: int):
        """The keys of about ``count`` nearest rows, found on the calling thread.

        usearch's default (``threads=0``) asks how many cores there are on
        every call (two reads of ``/sys/devices/system/cpu/online``) to size
        a pool that one query cannot use; with cold caches the walk took the
        same time either way (1.43 ms at 120,000 rows, beam 416). serve
        answers each request on its own thread anyway.
        """
        return self.index.search(query32, count, threads=1).keys
