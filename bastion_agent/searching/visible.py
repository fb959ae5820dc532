"""What one caller may search: the windows of the documents that share a group with it.

A search is filtered *before* ranking: each side ranks only the caller's
windows, so it returns the top k among them (never fewer because other
windows ranked higher), and no hit, count, score or error depends on a
window the caller may not see. This module turns a caller's groups
(``core.access``: None is every group) into the objects each side filters
by:

- ``rows``: a ``vectorfile.RowFilter`` over the vector file (the exact scan
  and the ANN index skip every other row);
- ``table``: a temporary table of the caller's windows (``chunks`` rowids);
  ``Labels.id_table`` adds, the first time MCP ``fetch`` asks, one of their
  chunk ids, where ``fetch`` looks an id up, so that an id the caller may
  not see costs exactly what an absent one does;
- ``sets`` and ``keyword``: the reader sets (distinct document group sets)
  the caller may see, and their keyword indexes (``keyword_sets``), which
  keyword search reads instead of the index over every window (a caller
  from whom nothing is hidden gets ``chunks_fts`` itself: ``WholeIndex``);
- ``count``: how many windows the caller may search.

Documents' groups are read once per loaded index (``Labels``), as one
small table of distinct group sets and, per row of the vector file, the
number of its set; a caller's filter is then a lookup, cached per group set
while the store does not change (``SearchIndex`` is reloaded when it does).
"""

from __future__ import annotations

import itertools
import json
from collections import OrderedDict
from dataclasses import dataclass, field, replace

from bastion_agent.core.access import can_see, caller_key, visible_positions
from bastion_agent.core.dates import latest
from bastion_agent.embedding.vectorfile import RowFilter
from bastion_agent.searching.keyword_sets import ReaderSetIndexes, WholeIndex
from bastion_agent.searching.keyword_visible import average_length

CACHED_CALLERS = 32  # distinct group sets kept per loaded index; each holds a row mask and a temp table
EVERY_WINDOW = "\0every window"  # the cache's key of every window as a share with a table (no caller's key)
_TABLE_NUMBERS = itertools.count()


@dataclass(frozen=True)
class Visible:
    """One caller's share of a store (``groups`` None: every group, nothing filtered)."""

    groups: frozenset | None
    rows: RowFilter | None  # None: every current row of the vector file (or no vector file loaded)
    table: str | None  # temp table of the caller's chunk rowids; None: every window
    count: int  # windows the caller may search (with a vector, when the vector file is loaded)
    windows: int = 0  # the caller's windows in ``chunks`` (what keyword search counts over)
    average_length: float = 0.0  # their mean length in tokens (keyword search's BM25)
    # keyword search's capped document frequencies over these windows, per word asked (``keyword_visible``)
    frequencies: dict = field(default_factory=dict, compare=False, repr=False)
    # A share narrowed for one search (``Labels.dated``) is ranked with the statistics of the caller's whole
    # share: how telling a word is, and what "unrelated" scores, do not change with the dates asked for.
    statistics: "Visible | None" = field(default=None, compare=False, repr=False)

    @property
    def measured(self) -> "Visible":
        """The share whose windows give the ranking its statistics (its own, unless narrowed for one search)."""
        return self.statistics if self.statistics is not None else self
    sets: frozenset = frozenset()  # the reader sets (``Labels.sets`` numbers) the caller may see
    every_window: bool = False  # whether no window is hidden from it (keyword search may then read ``chunks_fts``)
    keyword: ReaderSetIndexes | WholeIndex | None = field(default=None, compare=False, repr=False)

    @property
    def everything(self) -> bool:
        return self.groups is None


class Labels:
    """Each current window's group set, read once from ``documents`` for one loaded index."""

    def __init__(self, db, vectors, key: str, dim: int):
        self.db = db
        self.vectors = vectors
        self.key, self.dim = key, dim
        self._dates = None  # doc -> (group names, latest modification time), read at the first dated search
        self.sets: list[tuple[str, ...]] = []
        numbers: dict[str, int] = {}
        doc_set: dict[str, int] = {}
        for doc, groups in db.execute("SELECT doc, groups FROM documents"):
            if groups not in numbers:
                numbers[groups] = len(self.sets)
                self.sets.append(tuple(_names(groups)))
            doc_set[doc] = numbers[groups]
        self.chunk_sets = [(rowid, doc_set.get(doc, -1)) for rowid, doc in db.execute("SELECT rowid, doc FROM chunks")]
        members: dict[int, list[int]] = {}
        for rowid, number in self.chunk_sets:
            members.setdefault(number, []).append(rowid)
        self.keyword = ReaderSetIndexes(db, members, {number: groups for groups, number in numbers.items()})
        self.whole = WholeIndex(db)  # the keyword index of a share from which nothing is hidden: chunks_fts
        self.position_sets = self._positions(key, dim, doc_set) if vectors is not None else None
        self._cache: OrderedDict = OrderedDict()

    def _positions(self, key: str, dim: int, doc_set: dict[str, int]):
        """The group-set number of each vector-file row (-1: stale, or its document is gone)."""
        vectors = self.vectors
        rows = self.db.execute("SELECT v.rowid, c.doc FROM vectors v JOIN chunks c ON c.chunk_id = v.chunk_id"
                               " WHERE v.model = ? AND v.dim = ? ORDER BY v.rowid", (key, dim)).fetchall()
        if vectors.np is None:
            where = {int(rowid): position for position, rowid in enumerate(vectors.rowids)}
            sets = [-1] * vectors.rows
            for rowid, doc in rows:
                position = where.get(rowid)
                if position is not None:
                    sets[position] = doc_set.get(doc, -1)
            return sets
        np = vectors.np
        sets = np.full(vectors.rows, -1, dtype=np.int32)
        if rows and vectors.rows:
            rowids = np.fromiter((rowid for rowid, _ in rows), dtype=np.int64, count=len(rows))
            found = np.searchsorted(vectors.rowids, rowids)
            inside = found < vectors.rows
            found, picked = found[inside], np.flatnonzero(inside)
            exact = np.asarray(vectors.rowids[found]) == rowids[picked]
            numbers = np.fromiter((doc_set.get(doc, -1) for _, doc in rows), dtype=np.int32, count=len(rows))
            sets[found[exact]] = numbers[picked[exact]]
            if vectors.stale is not None:
                sets[vectors.stale] = -1
        return sets

    def visible(self, groups: frozenset | None) -> Visible:
        """The caller's share (cached per group set; the oldest of ``CACHED_CALLERS`` is dropped)."""
        key = caller_key(groups)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        found = self._build(groups)
        self._cache[key] = found
        if len(self._cache) > CACHED_CALLERS:
            _, dropped = self._cache.popitem(last=False)
            if dropped.table is not None:
                self.db.execute(f"DROP TABLE IF EXISTS temp.{dropped.table}")
                self.db.execute(f"DROP TABLE IF EXISTS temp.{dropped.table}_ids")
        return found

    def keyword_sets_built(self) -> list[tuple[str, ...]]:
        """The group sets (as names) whose keyword indexes have been built."""
        return [self.sets[number] for number in self.keyword.built()]

    def build_keyword_sets(self, names: list[tuple[str, ...]]) -> None:
        """Build the keyword indexes of the group sets named ``names`` (those this store still has)."""
        wanted = set(names)
        self.keyword.tables([number for number, found in enumerate(self.sets) if found in wanted])

    def id_table(self, visible: Visible) -> str:
        """A temp table of the caller's chunk ids (the key) and rowids, made on first use (MCP ``fetch``).

        Looking an id up there misses for a hidden id exactly as for an
        absent one: one search of the same index, nothing else read.
        """
        name = f"{visible.table}_ids"
        if self.db.execute("SELECT 1 FROM sqlite_temp_master WHERE name = ?", (name,)).fetchone() is None:
            self.db.execute(f"CREATE TEMP TABLE {name} (chunk_id TEXT PRIMARY KEY, row INTEGER NOT NULL) WITHOUT ROWID")
            self.db.execute(f"INSERT INTO temp.{name} SELECT c.chunk_id, c.rowid FROM temp.{visible.table} v"
                            f" CROSS JOIN main.chunks c ON c.rowid = v.rowid")
        return name

    def _build(self, groups: frozenset | None, every: bool = False) -> Visible:
        if groups is None:
            count = self.vectors.current if self.vectors is not None else len(self.chunk_sets)
            return Visible(None, None, None, count, len(self.chunk_sets))
        seen = {number for number, names in enumerate(self.sets) if every or can_see(groups, names)}
        table = f"visible_{next(_TABLE_NUMBERS)}"
        self.db.execute(f"CREATE TEMP TABLE {table} (rowid INTEGER PRIMARY KEY)")
        self.db.executemany(f"INSERT INTO temp.{table} VALUES (?)",
                            ((rowid,) for rowid, number in self.chunk_sets if number in seen))
        windows = sum(1 for _, number in self.chunk_sets if number in seen)
        rows = self._row_filter(seen)
        every_window = windows == len(self.chunk_sets)
        # nothing hidden (every group, or a dated search's statistics for such a caller): chunks_fts, no set index
        keyword = self.whole if every_window else self.keyword
        return Visible(groups, rows, table, rows.count if rows is not None else windows, windows,
                       average_length(self.db, table), sets=frozenset(seen), keyword=keyword,
                       every_window=every_window)

    def as_loaded(self, share: Visible) -> Visible:
        """``share`` ranked from its reader sets' own indexes where it would read ``chunks_fts``.

        A share from which nothing was hidden when the labels were read (or a
        dated search's statistics for one) reads ``chunks_fts``; once an embed
        has committed since, ``chunks_fts`` may hold windows hidden from it,
        and its statistics (a word's frequency, the scores) would move with
        them. Its reader sets as they were read hold exactly its windows.
        """
        statistics = share.statistics
        if statistics is not None and statistics.keyword is self.whole:
            statistics = replace(statistics, keyword=self.keyword)
        keyword = self.keyword if share.keyword is self.whole else share.keyword
        if keyword is share.keyword and statistics is share.statistics:
            return share
        return replace(share, keyword=keyword, statistics=statistics)

    def dated(self, groups: frozenset | None, dates) -> Visible:
        """The caller's share of the documents modified within ``dates`` (``core.dates.DateRange``).

        Made for one search and never cached (an age such as ``7d`` moves with
        the clock); ``release`` drops its table after the search. It costs a
        pass over the store's windows, like an exact scan. A document is dated
        by the latest of the paths the caller may see (``core.dates.latest``),
        as its hits are.
        """
        if self._dates is None:
            self._dates = {doc: (_names(names), _listed(paths), _listed(path_groups), modified)
                           for doc, names, paths, path_groups, modified in self.db.execute(
                               "SELECT doc, groups, paths, path_groups, modified FROM documents")}
        docs = {doc: 0 for doc, (names, paths, path_groups, modified) in self._dates.items()
                if (groups is None or can_see(groups, names))
                and dates.holds(latest(modified, len(paths), visible_positions(groups, paths, path_groups, names)))}
        table = f"visible_{next(_TABLE_NUMBERS)}"
        self.db.execute(f"CREATE TEMP TABLE {table} (rowid INTEGER PRIMARY KEY)")
        self.db.execute(f"CREATE TEMP TABLE {table}_docs (doc TEXT PRIMARY KEY)")
        self.db.executemany(f"INSERT INTO temp.{table}_docs VALUES (?)", ((doc,) for doc in docs))
        self.db.execute(f"INSERT INTO temp.{table} SELECT c.rowid FROM chunks c JOIN temp.{table}_docs d ON d.doc = c.doc")
        self.db.execute(f"DROP TABLE temp.{table}_docs")
        windows = self.db.execute(f"SELECT COUNT(*) FROM temp.{table}").fetchone()[0]
        rows = None
        if self.vectors is not None:
            rows = self._row_filter({0}, self._positions(self.key, self.dim, docs))
        whole = self.visible(groups) if groups is not None else self._every_window()
        return Visible(groups if groups is not None else frozenset(), rows, table,
                       rows.count if rows is not None else windows, windows, average_length(self.db, table),
                       statistics=whole)

    def _every_window(self) -> Visible:
        """Every window as a share with a table: the statistics of a dated search by a caller with every group."""
        if EVERY_WINDOW not in self._cache:
            self._cache[EVERY_WINDOW] = self._build(frozenset(), every=True)
        return self._cache[EVERY_WINDOW]

    def release(self, visible: Visible) -> None:
        """Drop the table of a share made for one search (``dated``)."""
        if visible.table is not None:
            self.db.execute(f"DROP TABLE IF EXISTS temp.{visible.table}")

    def _row_filter(self, seen: set[int], position_sets=None) -> RowFilter | None:
        position_sets = self.position_sets if position_sets is None else position_sets
        if position_sets is None:
            return None
        if self.vectors.np is None:
            mask = bytes(1 if number in seen else 0 for number in position_sets)
            return RowFilter([p for p, flag in enumerate(mask) if flag], mask)
        np = self.vectors.np
        mask = np.isin(position_sets, np.fromiter(seen, dtype=np.int32, count=len(seen)))
        return RowFilter(np.flatnonzero(mask).astype(np.int64), mask)


def _listed(value: str) -> list:
    """A JSON list column (``paths``, ``path_groups``); anything unreadable is an empty list."""
    try:
        listed = json.loads(value or "[]")
    except (TypeError, ValueError):
        return []
    return listed if isinstance(listed, list) else []


def _names(groups: str) -> list[str]:
    """A ``documents.groups`` value as names; anything unreadable is no group (fail closed)."""
    try:
        names = json.loads(groups)
    except (TypeError, ValueError):
        return []
    return [name for name in names if isinstance(name, str)] if isinstance(names, list) else []
