"""A keyword index per reader set, so a filtered caller's keyword search never reads a hidden window's postings.

``chunks_fts`` is one index over every window. A caller who may see only
some of them could be ranked from it by joining each match to its
windows, but FTS5 would still walk the word's whole posting list (and
``fts5vocab`` its every occurrence), hidden windows included: a word that
3,000 ``hr`` windows hold made a ``public`` caller's search 7 to 15 times
slower than a word only its own window holds, with byte-identical answers.
The time said what the answers did not.

So the windows are split by **reader set** (the distinct ``documents.groups``
values, ``visible.Labels.sets``), and each set a filtered caller may see gets
its own FTS5 index, built from that set's windows the first time such a
caller searches by keyword, and kept while the loaded index lives (it is
dropped with ``embed.SearchIndex`` when ``vectors.db`` changes). A caller's
keyword search reads only the indexes of its own sets (``keyword_visible``):
every posting, occurrence and length it reads is one of its windows', so a
hidden window, whatever words it holds, adds no work.

The indexes live in the connection's ``temp`` schema (SQLite's private temp
file, never beside the store) with the same tokenizer as ``chunks_fts``. They
hold no text of their own: their content is ``main.chunks`` through a temp
view (an external-content FTS5 table), so ``highlight()`` reads the window
from the store. Building one costs about what ``chunks_fts`` cost for those
windows at embed time; it is paid once per reader set and loaded index, by
the first filtered caller who may see that set (docs/search.md), except
where serve reloads: the new index builds the sets the old one had built
before it replaces it (``SearchIndex.warm_keyword_like``), so requests
never wait for them.
"""

from __future__ import annotations

import itertools
import sqlite3
import threading

CONTENT_VIEW = "bastion_chunk_text"  # temp view: each window's rowid and text, what the indexes read content from
_NUMBERS = itertools.count()


class ReaderSetIndexes:
    """The per-reader-set keyword indexes of one connection, built on first use.

    ``members`` maps a reader set's number to its windows' ``chunks`` rowids.
    """

    def __init__(self, db: sqlite3.Connection, members: dict[int, list[int]]):
        self.db = db
        self.members = members
        self.lock = threading.Lock()
        self._tables: dict[int, str] = {}
        self.built_windows = 0  # windows indexed so far (what building has cost; tests read it)

    def tables(self, sets) -> list[str]:
        """The index table of each of ``sets`` that holds a window, built now where missing; in set order."""
        found = []
        with self.lock:
            for number in sorted(sets):
                if not self.members.get(number):
                    continue
                if number not in self._tables:
                    self._tables[number] = self._build(self.members[number])
                found.append(self._tables[number])
        return found

    def built(self) -> list[int]:
        """The reader sets indexed so far (what a reloaded index builds again before it answers: ``SearchIndex``)."""
        with self.lock:
            return sorted(self._tables)

    def _build(self, rowids: list[int]) -> str:
        from bastion_agent.embedding.vectorstore import FTS_TOKENIZER

        table = f"kw_set_{next(_NUMBERS)}"
        self.db.execute(f"CREATE TEMP VIEW IF NOT EXISTS {CONTENT_VIEW} AS SELECT rowid AS id, text FROM main.chunks")
        self.db.execute(f"CREATE VIRTUAL TABLE temp.{table} USING fts5(text, content='{CONTENT_VIEW}',"
                        f" content_rowid='id', tokenize='{FTS_TOKENIZER}')")
        self.db.execute(f"CREATE VIRTUAL TABLE temp.{table}_instance USING fts5vocab(temp, '{table}', 'instance')")
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
        return table
