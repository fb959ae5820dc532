"""The keyword index of each reader set, kept in ``vectors.db`` by the stage that writes the windows.

A caller who may see only some windows is ranked from the keyword indexes
of its reader sets (``searching/keyword_sets.py``: one FTS5 index per
distinct ``documents.groups`` value, so a hidden window's postings are never
walked). Built on a caller's first search, they cost a new process (a
one-off CLI search, serve or MCP starting) 3 to 5 times a normal search, and
a one-off CLI search paid that on every run. So the stage that writes the
windows (embed, and ``index_windows`` when the model server is down) brings
them up to date here, in ``vectors.db``, and a search only checks that a set
it needs is current and reads it.

What is kept, beside ``chunks`` and ``chunks_fts``:

- ``keyword_sets(set_id, groups, dirty)``: one row per reader set ever seen
  (``groups`` is the ``documents.groups`` text; ids are never reused, so a
  set's table always holds windows of exactly those groups);
- ``keyword_set_rows(set_id, row)``: which ``chunks`` rowids each set's index
  holds (what a search compares with the windows the documents give it);
- ``keyword_set_N``: the set's FTS5 index, external content over ``chunks``
  (no second copy of the text), with the tokenizer of ``chunks_fts``;
- a trigger per set, ``keyword_set_N_ad``: a window deleted from ``chunks``
  by anything (a sweep, ``prune``, a superseded document erased) leaves its
  set's index in the same statement, with the text it was indexed from, and
  marks the set ``dirty``.

``update`` runs in the transaction that writes the windows and documents
(``vectorstore.replace_chunks``, which embed hands it to): windows new
to a set are added, windows whose document changed groups move, and every
set that lost a window is merged (``optimize``), so removed words leave its
segments (the file's bytes, and the posting walk of its readers). Windows
added to ``chunks`` by a writer that does not hand it over (an older agent)
are in no set index: a search then finds the set's membership differs and builds that set for
itself, as it did before (never a stale index: ``keyword_sets``).

A store with a single reader set (one group for everything, the default)
keeps none: every caller then sees every window or none, and ``chunks_fts``
answers the first.
"""

from __future__ import annotations

import sqlite3

from bastion_agent.embedding import vectorstore
from bastion_agent.embedding.vectorstore_schema import FTS_TOKENIZER

SETS = "keyword_sets"
ROWS = "keyword_set_rows"
BATCH = 500


def table_name(set_id: int) -> str:
    """The FTS5 table of reader set ``set_id`` (in ``main``)."""
    return f"keyword_set_{int(set_id)}"


def present(db: sqlite3.Connection) -> bool:
    """Whether this store keeps reader-set indexes (a store no refresh has reached yet does not)."""
    return db.execute(f"SELECT 1 FROM sqlite_master WHERE name = '{ROWS}'").fetchone() is not None


def members(db: sqlite3.Connection, groups: str) -> tuple[str, list[int]] | None:
    """``(table, sorted rowids)`` of the kept index of the reader set ``groups``; None when there is none or
    when windows left it since its last merge (a search then builds that set for itself)."""
    if not present(db):
        return None
    found = db.execute(f"SELECT set_id, dirty FROM {SETS} WHERE groups = ?", (groups,)).fetchone()
    if found is None or found[1]:
        return None
    rows = [row for (row,) in db.execute(f"SELECT row FROM {ROWS} WHERE set_id = ? ORDER BY row", (found[0],))]
    return table_name(found[0]), rows


def refresh(db: sqlite3.Connection) -> dict:
    """``update`` in a transaction of its own."""
    with vectorstore.transaction(db):
        return update(db)


def update(db: sqlite3.Connection) -> dict:
    """Bring every reader set's index in step with ``chunks`` and ``documents``, in the caller's transaction.

    ``vectorstore.replace_chunks`` runs it in the transaction that writes
    the windows and labels (embed hands it over), so a relabelled window
    leaves its old set in the same commit. Returns the work done
    (``added``, ``removed`` windows, ``merged`` sets), which tests read. A
    store without ``chunks_fts`` (no FTS5) keeps none.
    """
    work = {"added": 0, "removed": 0, "merged": 0}
    if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'chunks_fts'").fetchone() is None:
        return work
    _create(db)
    wanted = _wanted(db)
    if len(set(wanted.values())) < 2:
        work["dropped"] = _drop_all(db)
        return work
    ids = dict(db.execute(f"SELECT groups, set_id FROM {SETS}"))
    for groups in sorted(set(wanted.values()) - set(ids)):
        ids[groups] = _new_set(db, groups)
    stored = dict(db.execute(f"SELECT row, set_id FROM {ROWS}"))
    leaving: dict[int, list[int]] = {}
    for row, set_id in stored.items():
        if wanted.get(row) is None or ids[wanted[row]] != set_id:
            leaving.setdefault(set_id, []).append(row)
    for set_id, rows in sorted(leaving.items()):
        work["removed"] += _remove(db, set_id, sorted(rows))
    stored = dict(db.execute(f"SELECT row, set_id FROM {ROWS}")) if leaving else stored
    coming: dict[int, list[int]] = {}
    for row, groups in wanted.items():
        if stored.get(row) != ids[groups]:
            coming.setdefault(ids[groups], []).append(row)
    for set_id, rows in sorted(coming.items()):
        work["added"] += _add(db, set_id, sorted(rows))
    work["merged"] = merge_dirty(db)
    return work


def merge_dirty(db: sqlite3.Connection) -> int:
    """Merge the index of every set that lost a window (its removed words leave the segments); how many.

    Called inside the writer's transaction by ``update``, and by the erasing
    commands before ``vectorstore.scrub`` empties the WAL.
    """
    if not present(db):
        return 0
    dirty = [set_id for (set_id,) in db.execute(f"SELECT set_id FROM {SETS} WHERE dirty ORDER BY set_id")]
    for set_id in dirty:
        table = table_name(set_id)
        db.execute(f"INSERT INTO main.{table}({table}) VALUES ('optimize')")
    db.execute(f"UPDATE {SETS} SET dirty = 0 WHERE dirty")
    return len(dirty)


def merge(db: sqlite3.Connection) -> int:
    """``merge_dirty`` in a transaction of its own (for a command that deleted windows)."""
    if not present(db):
        return 0
    with vectorstore.transaction(db):
        return merge_dirty(db)


def _drop_all(db: sqlite3.Connection) -> int:
    """Forget every set's index: with one reader set (or none) a caller sees every window or none, and
    ``chunks_fts`` answers the first (a second copy of its postings would cost disk and embed time for
    nothing). Returns how many sets were dropped; their freed pages are zeroed (``secure_delete``)."""
    ids = [set_id for (set_id,) in db.execute(f"SELECT set_id FROM {SETS}")]
    if not ids and db.execute(f"SELECT 1 FROM {ROWS} LIMIT 1").fetchone() is None:
        return 0  # nothing to forget: write nothing, so a reader sees no commit (``serve --watch`` reloads on one)
    for set_id in ids:
        table = table_name(set_id)
        db.execute(f"DROP TRIGGER IF EXISTS main.{table}_ad")
        db.execute(f"DROP TABLE IF EXISTS main.{table}")
    db.execute(f"DELETE FROM {ROWS}")
    db.execute(f"DELETE FROM {SETS}")
    return len(ids)


def _create(db: sqlite3.Connection) -> None:
    db.execute(f"CREATE TABLE IF NOT EXISTS {SETS} (set_id INTEGER PRIMARY KEY AUTOINCREMENT,"
               " groups TEXT NOT NULL UNIQUE, dirty INTEGER NOT NULL DEFAULT 0)")
    db.execute(f"CREATE TABLE IF NOT EXISTS {ROWS} (set_id INTEGER NOT NULL, row INTEGER NOT NULL,"
               " PRIMARY KEY (set_id, row)) WITHOUT ROWID")


def _wanted(db: sqlite3.Connection) -> dict[int, str]:
    """Each window's reader set (its document's ``groups`` text); a window without a document is in none."""
    return {row: groups for row, groups in db.execute(
        "SELECT c.rowid, d.groups FROM chunks c JOIN documents d ON d.doc = c.doc")}


def _new_set(db: sqlite3.Connection, groups: str) -> int:
    """Create the index and the delete trigger of a reader set first seen; its id."""
    set_id = db.execute(f"INSERT INTO {SETS} (groups) VALUES (?)", (groups,)).lastrowid
    table = table_name(set_id)
    db.execute(f"CREATE VIRTUAL TABLE main.{table} USING fts5(text, content='chunks', content_rowid='rowid',"
               f" tokenize='{FTS_TOKENIZER}')")
    db.execute(f"CREATE TRIGGER main.{table}_ad AFTER DELETE ON chunks"
               f" WHEN EXISTS (SELECT 1 FROM {ROWS} WHERE set_id = {set_id} AND row = old.rowid) BEGIN"
               f" INSERT INTO {table}({table}, rowid, text) VALUES ('delete', old.rowid, old.text);"
               f" DELETE FROM {ROWS} WHERE set_id = {set_id} AND row = old.rowid;"
               f" UPDATE {SETS} SET dirty = 1 WHERE set_id = {set_id}; END")
    return set_id


def _remove(db: sqlite3.Connection, set_id: int, rows: list[int]) -> int:
    """Take windows still in ``chunks`` out of a set's index (their document changed groups).

    A window gone from ``chunks`` left its index by the set's trigger; one
    that did not (a store written without it) cannot be deleted by its
    text, so the set is emptied and ``refresh`` adds its windows again.
    """
    table = table_name(set_id)
    there = sum(db.execute(f"SELECT count(*) FROM chunks WHERE rowid IN ({','.join('?' * len(part))})", part)
                .fetchone()[0] for part in _batches(rows))
    if there != len(rows):
        db.execute(f"INSERT INTO main.{table}({table}) VALUES ('delete-all')")
        db.execute(f"DELETE FROM {ROWS} WHERE set_id = ?", (set_id,))
        db.execute(f"UPDATE {SETS} SET dirty = 1 WHERE set_id = ?", (set_id,))
        return len(rows)
    for part in _batches(rows):
        marks = ",".join("?" * len(part))
        db.execute(f"INSERT INTO main.{table}({table}, rowid, text) SELECT 'delete', rowid, text FROM chunks"
                   f" WHERE rowid IN ({marks})", part)
        db.execute(f"DELETE FROM {ROWS} WHERE set_id = ? AND row IN ({marks})", (set_id, *part))
    db.execute(f"UPDATE {SETS} SET dirty = 1 WHERE set_id = ?", (set_id,))
    return len(rows)


def _add(db: sqlite3.Connection, set_id: int, rows: list[int]) -> int:
    table = table_name(set_id)
    for part in _batches(rows):
        marks = ",".join("?" * len(part))
        db.execute(f"INSERT INTO main.{table}(rowid, text) SELECT rowid, text FROM chunks WHERE rowid IN ({marks})"
                   " ORDER BY rowid", part)
        db.executemany(f"INSERT INTO {ROWS} (set_id, row) VALUES (?, ?)", ((set_id, row) for row in part))
    return len(rows)


def _batches(rows: list[int]):
    for first in range(0, len(rows), BATCH):
        yield rows[first : first + BATCH]
