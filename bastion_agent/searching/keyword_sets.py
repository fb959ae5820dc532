"""A keyword index per reader set, so a filtered caller's keyword search never reads a hidden window's postings.

``chunks_fts`` is one index over every window. A caller who may see only
some of them could be ranked from it by joining each match to its
windows, but FTS5 would still walk the word's whole posting list (and
``fts5vocab`` its every occurrence), hidden windows included: a word that
3,000 ``hr`` windows hold made a ``public`` caller's search 7 to 15 times
slower than a word only its own window holds, with byte-identical answers.
The time said what the answers did not.

So the windows are split by **reader set** (the distinct ``documents.groups``
values, ``visible.Labels.sets``), and each set has its own FTS5 index. The
stage that writes the windows keeps them in ``vectors.db``
(``embedding/reader_sets.py``), so a new process (a one-off CLI search,
serve or MCP starting) reads them as they are: a set is used when the
windows its kept index holds are exactly the set's windows now (checked on
first use, over that set's rows only). A set that is not kept, or whose
windows differ (windows written by an older agent), is built here the first time a filtered caller who may
see it searches by keyword, and kept while the loaded index lives. A
caller's keyword search reads only the indexes of its own sets
(``keyword_visible``): every posting, occurrence and length it reads is one
of its windows', so a hidden window, whatever words it holds, adds no work.
A caller from whom nothing is hidden reads ``chunks_fts`` itself
(``WholeIndex``), dated searches included: it needs no set index at all.

The indexes built here live in the connection's ``temp`` schema (SQLite's
private temp file, never beside the store) with the same tokenizer as
``chunks_fts``. They hold no text of their own: their content is
``main.chunks`` through a temp view (an external-content FTS5 table), so
``highlight()`` reads the window from the store. Building one costs about
what ``chunks_fts`` cost for those windows at embed time; it is paid once
per reader set and loaded index, by the first filtered caller who may see
that set, and only where the kept index could not be used (docs/access.md).
Where serve reloads, the new index builds the sets the old one had built
before it replaces it (``SearchIndex.warm_keyword_like``), so requests
never wait for them.
"""

from __future__ import annotations

import itertools
import sqlite3
import threading
from dataclasses import dataclass

CONTENT_VIEW = "bastion_chunk_text"  # temp view: each window's rowid and text, what the indexes read content from
_NUMBERS = itertools.count()


@dataclass(frozen=True)
class KeywordTable:
    """One FTS5 index a caller's keyword search reads, and the tables beside it, by qualified name.

    ``name`` is the bare table name, which ``MATCH`` and ``highlight()`` take.
    """

    table: str  # e.g. main.keyword_set_3, temp.kw_set_0, main.chunks_fts
    name: str
    instance: str  # its fts5vocab table in 'instance' mode (one row per occurrence of a token)
    docsize: str  # FTS5's shadow table of each window's token count


def _vocab(db: sqlite3.Connection, schema: str, name: str) -> KeywordTable:
    """The ``KeywordTable`` of ``schema.name``, with its fts5vocab table made in ``temp`` (nothing written
    to the store: a reader may open it read-only)."""
    db.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{name}_instance USING fts5vocab({schema}, '{name}', 'instance')")
    return KeywordTable(f"{schema}.{name}", name, f"temp.{name}_instance", f"{schema}.{name}_docsize")


class ReaderSetIndexes:
    """The per-reader-set keyword indexes of one connection: the kept ones where current, else built on use.

    ``members`` maps a reader set's number to its windows' ``chunks`` rowids;
    ``keys`` maps it to its ``documents.groups`` text (how ``vectors.db``
    names a kept set).
    """

    def __init__(self, db: sqlite3.Connection, members: dict[int, list[int]], keys: dict[int, str] | None = None):
        self.db = db
        self.members = members
        self.keys = keys or {}
        self.lock = threading.Lock()
        self._tables: dict[int, KeywordTable] = {}
        self._built: set[int] = set()
        self.built_windows = 0  # windows indexed here so far (what building has cost; tests read it)
        self.kept_sets = 0  # sets answered from the index kept in vectors.db (tests read it)

    def tables(self, sets) -> list[KeywordTable]:
        """The index of each of ``sets`` that holds a window (kept, or built now where missing); in set order."""
        found = []
        with self.lock:
            for number in sorted(sets):
                if not self.members.get(number):
                    continue
                if number not in self._tables:
                    self._tables[number] = self._kept(number) or self._build(number)
                found.append(self._tables[number])
        return found

    def built(self) -> list[int]:
        """The reader sets built here so far (what a reloaded index builds again before it answers:
        ``SearchIndex``; a kept set needs no head start)."""
        with self.lock:
            return sorted(self._built)

    def _kept(self, number: int) -> KeywordTable | None:
        """The set's index as ``vectors.db`` keeps it, when it holds exactly the set's windows now."""
        from bastion_agent.embedding import reader_sets

        key = self.keys.get(number)
        if key is None:
            return None
        try:
            kept = reader_sets.members(self.db, key)
        except sqlite3.DatabaseError:
            return None
        if kept is None or kept[1] != sorted(self.members[number]):
            return None
        self.kept_sets += 1
        return _vocab(self.db, "main", kept[0])

    def _build(self, number: int) -> KeywordTable:
        from bastion_agent.embedding.vectorstore_schema import FTS_TOKENIZER

        rowids = self.members[number]
        table = f"kw_set_{next(_NUMBERS)}"
        self.db.execute(f"CREATE TEMP VIEW IF NOT EXISTS {CONTENT_VIEW} AS SELECT rowid AS id, text FROM main.chunks")
        self.db.execute(f"CREATE VIRTUAL TABLE temp.{table} USING fts5(text, content='{CONTENT_VIEW}',"
                        f" content_rowid='id', tokenize='{FTS_TOKENIZER}')")
        self.db.execute("BEGIN")
        try:
            for first in range(0, len(rowids), 500):
                part = rowids[first : first + 500]
                marks = ",".join("?" * len(part))
                self.db.execute(f"INSERT INTO temp.{table}(rowid, text) SELECT rowid, text FROM main.chunks"
                                f" WHERE rowid IN ({marks}) ORDER BY rowid", part)
            self.db.execute(f"INSERT INTO temp.{table}({table}) VALUES ('optimize')")
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.built_windows += len(rowids)
        self._built.add(number)
        return _vocab(self.db, "temp", table)


class WholeIndex:
    """``chunks_fts`` as the one index of a share from which nothing is hidden: no set index is read or built.

    What a dated search by a caller with every group ranks from (its
    statistics are every window's, which ``chunks_fts`` holds).
    """

    built_windows = 0
    kept_sets = 0

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        self.lock = threading.Lock()
        self._table: KeywordTable | None = None

    def tables(self, sets) -> list[KeywordTable]:
        with self.lock:
            if self._table is None:
                self._table = _vocab(self.db, "main", "chunks_fts")
            return [self._table]

    def built(self) -> list[int]:
        return []
