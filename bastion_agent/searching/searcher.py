"""``search``: a query embedded like the windows, ranked over the current windows by vector, keyword or both.

``SearchIndex`` holds what one store needs between queries (the vectors, the
ANN index, the keyword index) and is refreshed when the store changes; exact
cosine scoring is the fallback and the reference. Standard library only (numpy
and FAISS when installed).
"""

from __future__ import annotations

import contextlib
import heapq
import math
import operator
import dataclasses
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable, Sequence

from bastion_agent.config.manifest import SEARCH_MODES
from bastion_agent.core.errors import ConfigError, ModelServerError, StoreError
from bastion_agent.core.layout import Layout
from bastion_agent.core.records import Hit
from bastion_agent.embedding import vectorstore
from bastion_agent.embedding.client import EmbedClient
from bastion_agent.embedding.endpoint import EndpointConfig
from bastion_agent.searching.hit_rows import HitRows, listed_ids

DEFAULT_K = 5


# --- search ----------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """What a search returns: the hits, the mode that answered, and why it differs from the one asked."""

    hits: list[Hit]
    mode: str
    fallback: str | None = None  # "keyword" when the model server was down and keyword search answered
    notice: str | None = None  # one line saying so
    windows_pending: int = 0  # the caller's windows still without a vector (``SearchIndex.pending``)
    stale_since: str | None = None  # when embed last failed, while it has not finished since (``embed_health``)
    stale_error: str | None = None  # that failure's line
    vector_search: object = None  # vector_status.VectorSearch: how the vector side answered (None in keyword mode)


DEFAULT_MODE = "hybrid"  # the best of the three on Cranfield and SciFact (docs/search.md)


FUSION_CANDIDATES = 100  # how deep each ranking goes into fusion


RESCORE_MARGIN = 16  # extra candidates re-scored in float64, so float32 near-ties rank alike


# Searches read the database through a memory map of up to this many bytes
# (SQLite clamps it to its own limit, 2 GB in the usual builds): a hit's text
# is then read where the kernel's page cache holds it, rather than copied
# by a read() per page into SQLite's own 2 MB cache, which a store of
# 100,000 windows outgrows at once (0.20 -> 0.15 ms to read ten hits' text
# and paths, 120,000 windows). The mapped pages are the page cache's,
# shared and dropped under memory pressure: they show in the resident set
# as file-backed memory, not as the process's own (docs/search.md).
SQLITE_MAP_BYTES = 1 << 31
# A one-off search (the CLI) below this many current vectors scans them all
# instead of walking the ANN graph: importing FAISS costs about 0.2 s of CPU
# (bench/search/search_peers.py --cold: a cold hybrid search 0.40 -> 0.61 s at
# 120,000 windows), and numpy scans 120,000 rows in 14 ms, a million in
# 0.12-0.25 s. So until about a million rows the scan is the cheaper answer
# for one question, and an exact one; serve, MCP and the graph's build are
# unchanged.
ONE_OFF_ANN_ROWS = 1_000_000


def recall_target(manifest) -> float:
    """The manifest's ``[search] ann_recall``: the recall@10 the ANN graph must deliver, else the exact scan answers."""
    from bastion_agent.embedding.ann_recall import DEFAULT_TARGET

    return getattr(manifest, "ann_recall", None) or DEFAULT_TARGET


def needs_vector(mode: str) -> bool:
    """Whether a search in ``mode`` needs the query's vector (keyword search does not)."""
    return mode != "keyword"


def resolve_mode(manifest, mode: str | None) -> str:
    """The command line's mode, else the manifest's ``[search] mode``, else ``DEFAULT_MODE``."""
    chosen = mode or getattr(manifest, "search_mode", None) or DEFAULT_MODE
    if chosen not in SEARCH_MODES:
        raise ConfigError(f"search mode must be one of {', '.join(SEARCH_MODES)}; got {chosen!r}")
    return chosen


class SearchIndex:
    """One model's searchable state, opened once and kept warm.

    ``search`` for the CLI opens one per query; ``serve`` keeps one and
    reloads it when ``vectors.db`` changes (``is_current``). Opening brings
    the derived vector file (``vectorfile``) and, above ``ann.MIN_ROWS``
    current vectors, the ANN index (``ann``) in step with the database, then
    memory-maps them: no vector is read from SQLite per query. Candidates
    are scored in float64 from the vector file's rows (checked against the
    database when it was loaded), and only candidates whose window is in the
    database's ``chunks`` table answer, so only this sweep's windows (never
    stale vectors) appear, whatever the mask says.
    """

    def __init__(self, manifest, layout: Layout, vectors, ann_index, version: tuple, status=None, db=None):
        import threading

        from bastion_agent.searching.vector_status import VectorSearch

        self.layout = layout
        self.key = manifest.embed.vector_key
        self.dim = manifest.embed.dim
        self.default_mode = resolve_mode(manifest, None)
        self.vectors = vectors
        self.ann = ann_index
        self.target = recall_target(manifest)
        # how the vector side answers: the graph at its measured beam, or the scan (and why)
        self.vector_search = status or (VectorSearch.of_graph(ann_index, self.target) if ann_index is not None
                                        else VectorSearch.exact(self.target))
        self.version = version
        self.loaded_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.lock = threading.RLock()  # re-entered: search holds it while it asks for the caller's filter
        self._vocabulary = None
        self._labels = None
        self._labels_version: int | None = None
        # the store's windows when it was loaded, and a keyword-only load's current vector rows, from the vector
        # file's header when it matched the store (``vectorfile.counts_in_step``; None: ``pending`` counts them)
        self._windows: int | None = None
        self._current_rows: int | None = None
        self._pending: dict = {}  # (commit count, groups) -> windows waiting for vectors, since a commit
        self._floor: float | None = None
        self._floor_sample: dict = {}  # count -> the unit rows whose cosines with a query give its floor (numpy)
        self.db = db if db is not None else open_reader(layout)
        # what no commit since moves (a checkpoint does not): taken by load() before the derived files are read
        self.commits_seen = commits_seen(self.db)
        self._hit_rows = HitRows(self.db)

    @classmethod
    def load(cls, manifest, layout: Layout, *, use_numpy: bool | None = None, use_ann: bool = True,
             vectors: bool = True, one_off: bool = False) -> "SearchIndex":
        """Open the manifest's model, refreshing the derived files first when the database moved on.

        ``use_numpy=False`` forces the pure-Python scan (``True`` requires
        numpy); ``use_ann=False`` never opens the ANN index; ``vectors=False``
        opens only what keyword search reads (a one-off keyword query);
        ``one_off=True`` (a process that answers one search: the CLI) opens the
        ANN index only from ``ONE_OFF_ANN_ROWS`` current vectors, where the
        exact scan would cost more than loading FAISS.
        """
        version = store_version(layout)
        db = vectorstore.connect(layout.vectors_db, create=False)
        try:
            reader = open_reader(layout)  # the index's own connection, opened first: a commit from now on is a change
        except BaseException:
            db.close()
            raise
        try:
            return cls._load(manifest, layout, db, reader, version, use_numpy, use_ann, vectors, one_off)
        except BaseException:
            reader.close()
            raise

    @classmethod
    def _load(cls, manifest, layout, db, reader, version, use_numpy, use_ann, vectors, one_off) -> "SearchIndex":
        from bastion_agent.embedding import ann, vectorfile
        from bastion_agent.searching.vector_status import VectorSearch

        baseline = commits_seen(reader)
        try:
            if vectorstore.rekey_pending(db):
                raise StoreError("this output folder was written with document ids taken from the raw files: "
                                 "run sweep (or chunk and embed) to rebuild it")
            if not vectors:
                index = cls._made(manifest, layout, None, None, version, None, reader, baseline)
                index._current_rows, index._windows = vectorfile.counts_in_step(db, layout, manifest.embed.vector_key)
                return index
            header = vectorfile.refresh(db, layout, manifest.embed.vector_key, manifest.embed.dim)
        finally:
            db.close()
        files = vectorfile.Files.for_key(layout, manifest.embed.vector_key)
        vectors = vectorfile.VectorFile(files, header, use_numpy)
        ann_index, status = None, None
        ann_from = max(ann.MIN_ROWS, ONE_OFF_ANN_ROWS) if one_off else ann.MIN_ROWS
        if use_ann and vectors.np is not None and vectors.current >= ann_from and ann.available():
            ann_index = cls._open_ann(files, header, vectors, recall_target(manifest))
            shortfall = ann_index.shortfall(recall_target(manifest)) if ann_index is not None else None
            if shortfall:  # the graph does not deliver the recall asked for: the scan does, and says so
                ann_index, status = None, VectorSearch.exact(recall_target(manifest), shortfall)
        return cls._made(manifest, layout, vectors, ann_index, version, status, reader, baseline, vectorfile.windows_of(header))

    @classmethod
    def _made(cls, manifest, layout, vectors, ann_index, version, status, reader, baseline, windows=None) -> "SearchIndex":
        index = cls(manifest, layout, vectors, ann_index, version, status, db=reader)
        index.commits_seen, index._windows = baseline, windows  # windows: the header's, in step with the store
        return index

    def unchanged(self) -> bool:
        """Whether no writer has committed to ``vectors.db`` since this index was loaded (a reload would find the same).

        Unlike ``is_current`` (the files' stamps), a WAL checkpoint, or this
        connection making the WAL file, does not count: ``serve --watch`` asks
        after every cycle, and a cycle that changed nothing then loads nothing.
        """
        file_now, file_then = store_version(self.layout)[0], self.version[0]
        if file_now is None or file_then is None or file_now[2] != file_then[2]:
            return False  # another file in its place (a copy, a restore): this connection still reads the old one
        with self.lock:
            return commits_seen(self.db) == self.commits_seen

    @staticmethod
    def _open_ann(files, header: dict, vectors, target: float):
        """The ANN index, brought up to date when it lacks rows or does not open; None to scan exactly.

        An index that holds every row is opened once (a memory map that FAISS
        walks: 5 ms at 120,000 rows), not opened a first time to count it.
        """
        from bastion_agent.embedding import ann

        for attempt in range(2):
            if attempt or header.get("ann_rows") != vectors.rows:
                header = ann.update(files, header, vectors, limit=ann.LAZY_ROWS, target=target)
            if header.get("ann_rows"):
                try:
                    return ann.AnnIndex(files, header, vectors)
                except (StoreError, RuntimeError, ValueError, OSError):
                    pass  # unreadable: once more after update (which rebuilds what it may), else scan exactly
        return None  # an unreadable index only costs speed: scan exactly, and rebuild after embed

    def __len__(self) -> int:
        """How many current windows have a vector of this model (0 when opened without vectors)."""
        return self.vectors.current if self.vectors is not None else 0

    def close(self) -> None:
        if self._vocabulary is not None:
            self._vocabulary.close()
        self.db.close()

    def visible(self, groups: frozenset | None):
        """What a caller with ``groups`` (None: every group) may search (``searching.visible``)."""
        with self.lock:
            return self._labels_of().visible(groups)

    def _labels_of(self):
        """The documents' labels, read once per loaded index (``searching.visible.Labels``)."""
        from bastion_agent.searching.visible import Labels

        if self._labels is None:
            self._labels_version = commits_seen(self.db)  # before the read: a commit during it counts as later
            self._labels = Labels(self.db, self.vectors, self.key, self.dim)
        return self._labels

    def labels_current(self) -> bool:
        """Whether nothing has been committed to ``vectors.db`` since the labels (each caller's share) were read."""
        with self.lock:
            return self._labels is not None and commits_seen(self.db) == self._labels_version

    def warm_keyword_like(self, other: "SearchIndex") -> None:
        """Build the reader-set keyword indexes ``other`` had built, before this index answers anyone.

        Serve calls it on a freshly loaded index while the old one still
        answers, so no request after a reload waits for a set's index.
        """
        import sqlite3

        from bastion_agent.searching import keyword

        labels = getattr(other, "_labels", None)
        built = labels.keyword_sets_built() if labels is not None else []
        try:
            if built and keyword.has_index(self.db):
                with self.lock:
                    self._labels_of().build_keyword_sets(built)
        except sqlite3.Error:
            pass  # only a head start: the first keyword search of such a caller builds what is missing

    def visible_ids(self, groups: frozenset) -> str:
        """The temp table of the chunk ids a filtered caller may read (``visible.Labels.id_table``)."""
        with self.lock:
            return self._labels_of().id_table(self.visible(groups))

    def visible_count(self, groups: frozenset | None = None) -> int:
        """How many windows a caller with ``groups`` may search (None: every group, ``len`` of the index)."""
        if groups is None and self.vectors is not None:
            return len(self)
        return self.visible(groups).count

    def pending(self, groups: frozenset | None = None) -> int:
        """How many of the caller's windows wait for a vector of this model (keyword search finds them already).

        Counted over the caller's windows only (``visible``), so the number says
        nothing about documents the caller may not read.
        """
        with self.lock:
            version = commits_seen(self.db)
            if version == self.commits_seen and (self.vectors is not None or groups is None):
                # nothing committed since the load: the counts taken then answer, no scan of the store (a scan
                # of every window against the vectors cost seconds a request at a million windows)
                current = self.vectors.current if self.vectors is not None else self._current_rows
                if groups is None and current is not None:
                    return max(0, self._windows_at_load() - current)
                if groups is not None:
                    visible = self.visible(groups)
                    return max(0, visible.windows - visible.count)
            key = (version, groups)
            if key not in self._pending:
                self._pending = {key: self._pending_counted(groups)}  # once a commit: kept until the next
            return self._pending[key]

    def _windows_at_load(self) -> int:
        if self._windows is None:
            self._windows = int(self.db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])
        return self._windows

    def _pending_counted(self, groups: frozenset | None) -> int:
        """The caller's windows without a vector, counted in the store as committed now."""
        visible = self.visible(groups) if groups is not None else None
        where = f" AND c.rowid IN (SELECT rowid FROM temp.{visible.table})" if visible and visible.table else ""
        sql = ("SELECT COUNT(*) FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM vectors v WHERE"
               " v.chunk_id = c.chunk_id AND v.model = ? AND v.dim = ?)" + where)
        return int(self.db.execute(sql, (self.key, self.dim)).fetchone()[0])

    def is_current(self) -> bool:
        """False once ``vectors.db`` has changed since this index was loaded."""
        return store_version(self.layout) == self.version

    def search(self, query: str, query_vector: Sequence[float] | None, k: int, mode: str | None = None,
               exact: bool = False, groups: frozenset | None = None, dates=None) -> list[Hit]:
        """The top ``k`` hits; ``query_vector`` may be None in keyword mode.

        ``mode`` is vector, keyword or hybrid (None: the manifest's default);
        ``exact`` scans every vector even where the ANN index would answer.
        ``groups`` is the caller's (None: every group): every side ranks only
        the windows of documents sharing a group with it, so the hits are the
        top ``k`` of those, and nothing in them depends on any other window.
        ``dates`` (``core.dates.DateRange``) keeps, the same way, to the
        documents modified within it: filtered before ranking, so a filtered
        search returns ``k`` hits whenever ``k`` such windows exist.
        """
        mode = mode or self.default_mode
        if mode not in SEARCH_MODES:
            raise ConfigError(f"search mode must be one of {', '.join(SEARCH_MODES)}; got {mode!r}")
        if needs_vector(mode) and query_vector is not None and len(query_vector) != self.dim:
            raise ModelServerError(f"the query vector has {len(query_vector)} dimensions, the manifest says dim = {self.dim}")
        if query_vector is not None and self.vectors is not None and self.vectors.np is not None:
            # once, here: the graph, the re-rank and the floor each read it as an array
            query_vector = self.vectors.np.asarray(query_vector, dtype=self.vectors.np.float64)
        with self.lock:
            if dates is not None:
                visible = self._labels_of().dated(groups, dates)
                try:
                    return self._ranked_hits(query, query_vector, k, mode, exact, visible, groups)
                finally:
                    self._labels_of().release(visible)
            visible = self.visible(groups) if groups is not None else None
            return self._ranked_hits(query, query_vector, k, mode, exact, visible, groups)

    def _ranked_hits(self, query: str, query_vector, k: int, mode: str, exact: bool, visible, groups) -> list[Hit]:
        """The top ``k`` hits of ``mode`` among ``visible``'s windows (None: every window), as ``groups`` sees them."""
        from bastion_agent.searching import fusion

        if visible is not None and not visible.count and not visible.windows:
            return []  # nothing to rank, as in an empty store
        if mode == "keyword":
            ranked = fusion.keyword_only(self._keyword_top(query, k, visible))
        elif mode == "vector":
            return self._vector_hits(query_vector, k, exact, visible, groups)
        else:
            ranked = self._hybrid(query, query_vector, k, exact, visible)
        return self._hits(ranked, mode, k, groups)

    def _vector_hits(self, query_vector, k: int, exact: bool, visible=None, groups=None) -> list[Hit]:
        """Vector mode's hits: the rows of the first ``k`` windows are built, the spare ones only when one is gone.

        A spare window stands in for one that left the sweep after the index was loaded, which is rare;
        building every spare row for every query cost more than ranking them.
        """
        from bastion_agent.searching import fusion

        ranked = self._vector_top(query_vector, k, exact, visible, spare=RESCORE_MARGIN)
        floor = self.query_floor(query_vector, visible)
        hits = self._hits(fusion.vector_only(ranked[:k], floor), "vector", k, groups)
        if len(hits) < k < len(ranked):
            hits = self._hits(fusion.vector_only(ranked, floor), "vector", k, groups)
        return hits

    def _hybrid(self, query: str, query_vector, k: int, exact: bool, visible=None) -> list:
        from bastion_agent.searching import fusion

        depth = max(FUSION_CANDIDATES, k)
        by_vector = self._vector_top(query_vector, depth, exact, visible)
        by_keyword = self._keyword_top(query, depth, visible)
        seen = {chunk for _, chunk in by_vector}
        others = self._cosines_of(query_vector, [hit.chunk_id for hit in by_keyword if hit.chunk_id not in seen])
        return fusion.fuse(by_vector, by_keyword, others, self.query_floor(query_vector, visible), k + RESCORE_MARGIN)

    def _keyword_top(self, query: str, n: int, visible=None) -> list:
        """The keyword side: over every window, or over a filtered caller's with its own statistics.

        A caller from whom no window is hidden reads ``chunks_fts`` like a
        caller with every group (its statistics are the whole index's, and
        it holds no posting of a hidden window), as the ANN side does: a
        local user whose ``local_groups`` label every document then builds
        no index of its own for a one-off search.
        """
        from bastion_agent.searching import keyword, keyword_visible

        if visible is None or visible.every_window:
            with read_snapshot(self.db) as version:  # one commit for the check, the statistics and the postings
                # "no window hidden" was true of the store as loaded; once an embed has committed since,
                # chunks_fts may hold a window the caller may not read, and its statistics must not count it:
                # the caller's own share answers (below). A caller with every group reads what is committed.
                if visible is None or (self._labels is not None and version == self._labels_version):
                    vocabulary = self.vocabulary()
                    if vocabulary is not None:
                        vocabulary.follow(version)
                    return keyword.top(self.db, query, n, vocabulary)
        loaded = self._labels_version
        if self._labels is None or visible.groups is None or commits_seen(self.db) == loaded:
            found = keyword_visible.caller_top(self.db, query, n, self.vocabulary(), visible)
            if self._labels is None or visible.groups is None or commits_seen(self.db) == loaded:
                return found  # no commit before or during: chunks_fts held only what the share held
        # a commit since the share was read: chunks_fts may hold a window hidden from this caller, so its
        # own reader sets answer, as loaded (a share with a hidden window reads those anyway)
        return keyword_visible.caller_top(self.db, query, n, self.vocabulary(), self._labels.as_loaded(visible))

    def vocabulary(self):
        """The keyword side's cache for this store (made on first use; it forgets its counts at each commit)."""
        from bastion_agent.searching import keyword

        if self._vocabulary is None:
            self._vocabulary = keyword.Vocabulary(self.db) if keyword.has_index(self.db) else None
        return self._vocabulary

    def cosine_floor(self) -> float:
        """The median cosine between windows of this store taken at random: what "unrelated" scores here."""
        from bastion_agent.searching import fusion

        if self._floor is None:
            self._floor = fusion.cosine_floor(self._sample_cosines(fusion.FLOOR_SAMPLE))
        return self._floor

    def query_floor(self, query_vector, visible=None) -> float:
        """The median cosine between the query and windows of this store taken at random.

        What "unrelated" scores for this query. E5 puts a query (``query: ``)
        further from every window than windows are from each other, and a
        query in another language further still: against the store's floor
        (window against window, about 0.85) a German question's best window
        (0.80) had evidence 0, so hybrid ranked by its keyword side alone.
        A filtered caller's floor is sampled from its own windows only, so
        its relevance numbers never depend on windows it may not see.
        """
        from bastion_agent.searching import fusion

        allowed = visible.measured.rows if visible is not None else None
        return fusion.cosine_floor(self._query_cosines(query_vector, fusion.FLOOR_SAMPLE, allowed))

    def _sample_positions(self, count: int, allowed=None) -> list[int]:
        vectors = self.vectors
        if allowed is not None:
            positions = allowed.positions
            step = max(1, len(positions) // count)
            return [int(p) for p in positions[::step][:count]]
        step = max(1, vectors.rows // count)
        return [p for p in range(0, vectors.rows, step) if vectors.is_current_row(p)][:count]

    def _query_cosines(self, query_vector, count: int, allowed=None) -> list[float]:
        """Cosines between the query and ``count`` current rows (of ``allowed``) spread evenly over the vector file."""
        vectors = self.vectors
        if vectors is None or not vectors.rows or query_vector is None:
            return []
        if vectors.np is not None:
            return self._query_cosines_numpy(query_vector, count, allowed)
        positions = self._sample_positions(count, allowed)
        query_vector = [float(x) for x in query_vector]
        query_norm = math.sqrt(math.fsum(x * x for x in query_vector))
        if query_norm == 0:
            return []
        rows = [vectors.flat[p * self.dim:(p + 1) * self.dim] for p in positions] if vectors.np is None else [
            vectors.matrix[p] for p in positions]
        result = []
        for row in rows:
            row = [float(x) for x in row]
            norm = math.sqrt(math.fsum(x * x for x in row))
            if norm > 0:
                result.append(math.fsum(a * b for a, b in zip(query_vector, row)) / (norm * query_norm))
        return result

    def _query_cosines_numpy(self, query_vector, count: int, allowed=None) -> list[float]:
        """``_query_cosines`` as one product with the sample's unit rows, made once per loaded index.

        Every query of a vector or hybrid search needs these cosines; walking
        the sample element by element through the memory map cost more than
        the whole ANN search. A filtered caller's sample (its own rows) is
        gathered in one step per query and not kept.
        """
        np = self.vectors.np
        sample = self._floor_sample.get(count) if allowed is None else None
        if sample is None:
            rows = np.asarray(self.vectors.matrix[self._sample_positions(count, allowed)], dtype=np.float64)
            norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
            sample = rows[norms > 0] / norms[norms > 0, None]
            if allowed is None:
                self._floor_sample[count] = sample
        q = np.asarray(query_vector, dtype=np.float64)
        query_norm = math.sqrt(float(np.einsum("i,i->", q, q)))
        if query_norm == 0:
            return []
        return (np.einsum("ij,j->i", sample, q) / query_norm).tolist()

    def _sample_cosines(self, count: int) -> list[float]:
        """Cosines between ``count`` current rows of the vector file spread evenly over it (read from the map)."""
        vectors = self.vectors
        if vectors is None or not vectors.rows:
            return []
        step = max(1, vectors.rows // count)
        positions = [p for p in range(0, vectors.rows, step) if vectors.is_current_row(p)][:count]
        if vectors.np is not None:
            np = vectors.np
            rows = np.asarray(vectors.matrix[positions], dtype=np.float64)
            norms = np.linalg.norm(rows, axis=1)
            rows = rows[norms > 0] / norms[norms > 0, None]
            products = rows @ rows.T
            return products[np.triu_indices(len(rows), 1)].tolist()
        rows = [vectors.flat[p * self.dim:(p + 1) * self.dim] for p in positions]
        norms = [math.sqrt(math.fsum(x * x for x in row)) for row in rows]
        return [cosine(rows[i], norms[i], rows[j]) for i in range(len(rows)) for j in range(i + 1, len(rows))
                if norms[i] > 0]

    def _cosines_of(self, query_vector, chunk_ids: list[str]) -> dict[str, float]:
        """The cosine of each listed window's vector with the query, from the vector file (windows without one are left out)."""
        if query_vector is None or not chunk_ids or self.vectors is None:
            return {}
        found = self.db.execute(f"{listed_ids(len(chunk_ids))} SELECT v.rowid, v.chunk_id FROM ids CROSS JOIN vectors v"
                                " ON v.chunk_id = ids.id AND v.model = ? AND v.dim = ?", (*chunk_ids, self.key, self.dim)).fetchall()
        positions = self.vectors.positions_of([rowid for rowid, _ in found])
        placed = [(position, chunk) for position, (_, chunk) in zip(positions, found) if position is not None]
        scores = self.vectors.cosines(query_vector, [position for position, _ in placed])
        return {chunk: score for (_, chunk), score in zip(placed, scores)}

    def _vector_top(self, query_vector, n: int, exact: bool, visible=None, spare: int = 0) -> list[tuple[float, str]]:
        """``(cosine, chunk_id)`` of the ``n`` nearest current windows (of ``visible``; and up to ``spare`` more).

        The float64 cosine is computed from the vector file's float32 rows (the database's BLOBs byte for
        byte, checked when the file was loaded), each candidate's row read once, and its chunk id comes from
        the ids file: no page of the database is read here. Ties by chunk id. The spare ones stand in for a
        window that left the sweep after the index was loaded (``_hits``). A filtered caller's candidates are
        its own rows only.
        """
        if query_vector is None or not len(self):
            return []
        want = n + RESCORE_MARGIN
        allowed = visible.rows if visible is not None else None
        if self.ann and not exact:
            candidates = self.ann.top(query_vector, want, allowed)
        else:
            candidates = self.vectors.ranked(
                query_vector, [p for _, p in self.vectors.top(query_vector, want, allowed=allowed)])
        scores = [score for score, _ in candidates]  # best first: sorted again only where two tie (by chunk id)
        scored = list(zip(scores, self.vectors.chunk_ids_of([position for _, position in candidates])))
        if any(map(operator.le, scores, scores[1:])):
            scored.sort(key=lambda item: (-item[0], item[1]))
        return scored[: n + spare]

    def _hits(self, ranked: list, mode: str, k: int | None = None, groups: frozenset | None = None) -> list[Hit]:
        """The first ``k`` of ``fusion.Scored`` rows whose window is in ``chunks``, as hits.

        Text, paths and page maps are read in one statement (``chunks`` joined
        with ``documents`` and ``document_pages``) for the first ``k``
        (``hit_rows``); a window that left the sweep since the index was
        loaded has no row and the next one takes its place (another
        statement, only then). A hit lists only the paths ``groups`` may see
        (``access.visible_paths``), here, once, for every front end.
        """
        k = len(ranked) if k is None else k
        hits: list[Hit] = []
        position = 0
        while len(hits) < k and position < len(ranked):
            part = ranked[position : position + k - len(hits)]
            position += len(part)
            rows = self._hit_rows.rows([item.chunk_id for item in part])
            hits += self._hit_rows.hits(part, rows, mode, groups)
        return hits


def cosines(query: Sequence[float], blobs: list[bytes], dim: int, np=None) -> list[float]:
    """Float64 cosine of ``query`` with each packed vector (0.0 for a zero vector), with numpy when given."""
    if np is None or not blobs:
        query_norm = math.sqrt(math.fsum(x * x for x in query))
        return [cosine(query, query_norm, vectorstore.unpack(blob)) for blob in blobs]
    matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(-1, dim).astype(np.float64)
    q = np.asarray(query, dtype=np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix)) * math.sqrt(float(q @ q))
    dots = np.einsum("ij,j->i", matrix, q)
    return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0).tolist()


def open_reader(layout: Layout):
    """A search index's connection to ``vectors.db``: autocommit, shared by the request threads under its lock."""
    import sqlite3

    db = sqlite3.connect(layout.vectors_db, timeout=vectorstore.BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                         check_same_thread=False)
    db.execute(f"PRAGMA mmap_size = {SQLITE_MAP_BYTES}")
    return db


@contextlib.contextmanager
def read_snapshot(db):
    """A read transaction on ``db`` (autocommit) for a query's statements; yields its ``PRAGMA data_version``.

    In WAL mode every statement inside sees the same commit, and the commit
    count read inside it is that commit's: a batch committed meanwhile is
    seen by the next query, never by half of this one. Within a transaction
    already open, that one is used.
    """
    if db.in_transaction:
        yield commits_seen(db)
        return
    db.execute("BEGIN")
    try:
        db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone()  # takes the snapshot, before the count is read
        yield commits_seen(db)
    finally:
        db.execute("COMMIT")


def commits_seen(db) -> int:
    """SQLite's count of other connections' commits, as ``db`` sees it (``PRAGMA data_version``)."""
    return int(db.execute("PRAGMA data_version").fetchone()[0])


def store_version(layout: Layout) -> tuple:
    """What changes when a writer commits to ``vectors.db`` (the file or its WAL)."""
    parts = []
    for path in (layout.vectors_db, layout.vectors_db.with_name(layout.vectors_db.name + "-wal")):
        try:
            stat = path.stat()
            parts.append((stat.st_mtime_ns, stat.st_size, stat.st_ino))
        except FileNotFoundError:
            parts.append(None)
    return tuple(parts)


def embed_query(manifest, query: str, client: EmbedClient | None = None) -> list[float]:
    """The query's vector, with the manifest's query prefix, through the same endpoint."""
    client = client or EmbedClient(EndpointConfig.from_env(), manifest.embed.model)
    if client.dim is None:
        client.probe(manifest.embed.dim)
    (vector,) = client.embed([manifest.embed.query_prefix + query])
    return vector


def search(manifest, layout: Layout, query: str, k: int = DEFAULT_K, client: EmbedClient | None = None,
           mode: str | None = None, exact: bool = False, groups: frozenset | None = None, dates=None) -> list[Hit]:
    """The top ``k`` current windows for ``query``, best first (``answer`` without the keyword fallback).

    ``mode`` (vector, keyword, hybrid) defaults to the manifest's ``[search]
    mode``, else ``DEFAULT_MODE``. Keyword search never calls the model
    server; a model with no vectors gives ``[]`` in the other modes without
    calling it either. An unreachable model server raises ``ModelServerError``.
    ``groups`` is the caller's (None: every group; ``SearchIndex.search``), ``dates`` a ``DateRange``.
    """
    return answer(manifest, layout, query, k, client, mode, exact, fallback=False, groups=groups, dates=dates).hits


def fallback_notice(mode: str, error: Exception) -> str:
    """The one line that says keyword search answered instead of ``mode``."""
    return f"the model server is unavailable ({error}); answered with keyword search instead of {mode} search"


def answer(manifest, layout: Layout, query: str, k: int = DEFAULT_K, client: EmbedClient | None = None,
           mode: str | None = None, exact: bool = False, fallback: bool = True,
           groups: frozenset | None = None, dates=None) -> Answer:
    """``search``, and when the model server cannot embed the query, keyword search with a notice saying so.

    Keyword search needs only ``vectors.db``, so a model server that is down
    (or answers nonsense) costs the meaning side of a query, not the answer.
    ``fallback=False`` raises the ``ModelServerError`` instead. ``groups``
    is the caller's (None: every group); a caller who may see no window gets
    ``[]`` without the query being embedded, exactly like an empty store.
    """
    if not query.strip():
        raise ConfigError("the query is empty")
    if k < 1:
        raise ConfigError(f"k must be a whole number >= 1; got {k}")
    mode = resolve_mode(manifest, mode)
    index = SearchIndex.load(manifest, layout, vectors=needs_vector(mode), one_off=True)
    try:
        found = _answer(index, manifest, query, k, client, mode, exact, fallback, groups, dates)
        return dataclasses.replace(found, windows_pending=index.pending(groups), **staleness(layout))
    finally:
        index.close()


def staleness(layout: Layout) -> dict:
    """``stale_since`` and ``stale_error`` while the last embed has not finished (else None each)."""
    from bastion_agent.embedding import embed_health

    health = embed_health.read_health(layout) or {}
    return {"stale_since": health.get("failing_since"), "stale_error": health.get("error")}


def _answer(index: SearchIndex, manifest, query: str, k: int, client, mode: str, exact: bool, fallback: bool,
            groups: frozenset | None, dates=None) -> Answer:
    """The ranking part of ``answer``: keyword search answers when the query cannot be embedded. A model
    with no vectors gives ``[]`` in the modes that need one (the contract); ``windows_pending`` says why."""
    if needs_vector(mode) and not index.visible_count(groups):
        return Answer([], mode)
    try:
        vector = embed_query(manifest, query, client) if needs_vector(mode) else None
    except ModelServerError as exc:
        if not fallback:
            raise
        hits = [dataclasses.replace(hit, fallback=True)
                for hit in index.search(query, None, k, "keyword", groups=groups, dates=dates)]
        return Answer(hits, "keyword", "keyword", fallback_notice(mode, exc))
    status = index.vector_search
    if exact or (index.ann is not None and (dates is not None or (
            groups is not None and index.visible_count(groups) < len(index)))):
        status = dataclasses.replace(status, method="exact", recall=1.0, beam=None)  # the scan answered (ann.EXACT_SHARE)
    return Answer(index.search(query, vector, k, mode, exact=exact, groups=groups, dates=dates), mode,
                  vector_search=status)


def cosine(query: Sequence[float], query_norm: float, vector: Sequence[float]) -> float:
    """Cosine similarity; 0.0 when either vector has no length."""
    norm = math.sqrt(math.fsum(map(operator.mul, vector, vector)))
    if norm == 0.0 or query_norm == 0.0:
        return 0.0
    return sum(map(operator.mul, query, vector)) / (query_norm * norm)


def top_k(query: Sequence[float], rows: Iterable[tuple], k: int) -> list[tuple[float, tuple]]:
    """``(score, row)`` of the ``k`` best rows (``row[-1]`` is the packed vector); ties by chunk id."""
    query_norm = math.sqrt(math.fsum(x * x for x in query))
    scored = ((cosine(query, query_norm, vectorstore.unpack(row[-1])), row) for row in rows)
    return heapq.nsmallest(k, scored, key=lambda item: (-item[0], item[1][0]))
