"""``vectors.db``: this sweep's windows and every vector ever embedded.

Two tables from the stage contract (docs/contract.md), plus one for the documents' paths:

- ``chunks(chunk_id PK, doc, idx, start, end, text)``: this sweep's windows
  with their sanitized text, replaced whole on every embed run;
- ``vectors(chunk_id, model, dim, vec, created)``, PK ``(chunk_id, model)``:
  rows are only ever added, so switching models or going back to an earlier
  document costs nothing;
- ``documents(doc PK, paths, groups, path_groups)``: each document's sanitized source
  paths (JSON list), so a hit can say where it comes from, and its access
  groups (JSON sorted list, ``_m007_document_groups``), so a search can
  keep to what its caller may see, and each path's own groups
  (``_m009_path_groups``), so a hit names only the paths its caller may read.
- ``embed_failures(chunk_id, model, reason, attempts, last_failed)``: chunks
  the model server refused, so a re-run knows what it retries (no text).
- ``reuse_by_text``: empty but while a store written with old, raw-file ids
  is rebuilt (``_m004_sanitized_ids``).
- ``chunk_docs(chunk_id PK, doc)``: the document of every window that was
  ever in ``chunks`` (``_m006_chunk_docs``), so the vectors of a document can
  be found after its windows left the table: a superseded document's are
  erased (``erase_documents``), and ``prune`` erases stale ones.
- ``document_pages(doc PK, pages)``: the page map of each paged document (a
  PDF, an image: ``sanitizing/pages.py``, JSON), so a hit can say its page
  and whether OCR read it. Offsets in the sanitized text only.

Removed text leaves the file's bytes: every connection sets
``secure_delete`` (deleted rows and freed pages are zeroed), and ``scrub``
merges the keyword index and truncates the WAL after windows were deleted.

The schema is a list of numbered migrations applied in order, each with its
``PRAGMA user_version`` in the same transaction, so an older database
upgrades in place (``vectorstore_schema`` holds them; ``migrate`` here runs them). WAL mode and a busy timeout let a reader (search, serve)
work while embed writes, and see either the old or the new state.
"""

from __future__ import annotations

import base64
import sqlite3
import sys
from array import array
from pathlib import Path
from typing import Callable, Iterable, Iterator

from bastion_agent.core import records
from bastion_agent.core.errors import StoreError
from bastion_agent.core.records import DocumentRow, StoredChunk
from bastion_agent.embedding.vectorstore_schema import (
    MIGRATIONS,
    add_document_columns,
    has_column,
    missing_document_columns,
)

BUSY_TIMEOUT_MS = 10_000


def rekey_pending(db: sqlite3.Connection) -> bool:
    """Whether this store held old ids (``_m004_sanitized_ids``) and no embed has rebuilt it yet."""
    return db.execute("SELECT 1 FROM search_state WHERE name = 'rekey_pending'").fetchone() is not None


def reuse_vectors_by_text(db: sqlite3.Connection) -> int:
    """Give this sweep's windows the old vectors of the same text and key; forget the rest. Returns how many."""
    with transaction(db):
        before = count(db, "SELECT COUNT(*) FROM vectors")
        db.execute("INSERT OR IGNORE INTO vectors (chunk_id, model, dim, vec, created)"
                   " SELECT c.chunk_id, r.model, r.dim, r.vec, r.created FROM chunks c JOIN reuse_by_text r ON r.text = c.text")
        added = count(db, "SELECT COUNT(*) FROM vectors") - before
        db.execute("DELETE FROM reuse_by_text")
        db.execute("DELETE FROM search_state WHERE name = 'rekey_pending'")
    return added


def scrub(db: sqlite3.Connection) -> None:
    """Make deleted text leave the file: merge the keyword index, then empty the WAL.

    Deleted rows and freed pages are already zeroed (``secure_delete``, set
    by ``connect``), but FTS5 (before SQLite 3.42) deletes by appending
    delete markers: a removed window's words stay in the old segments until
    they are merged, which 'optimize' does. The WAL still holds page images
    from before the deletes until a TRUNCATE checkpoint empties it (it waits
    for readers, and is retried by the next writer if one holds on).
    """
    if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'chunks_fts'").fetchone():
        with transaction(db):
            db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('optimize')")
    checkpoint(db)


def checkpoint(db: sqlite3.Connection) -> None:
    """Copy the WAL into the database and truncate it to nothing (nothing to do when it is empty).

    Why not always: a checkpoint moves every other connection's
    ``PRAGMA data_version``, as a commit does, and serve's loaded index asks
    that to know whether a reload would find anything new; a sweep that
    wrote nothing leaves the WAL empty and so leaves it alone.
    """
    import os

    name = next((row[2] for row in db.execute("PRAGMA database_list") if row[1] == "main"), "")
    if name:
        try:
            if os.stat(name + "-wal").st_size == 0:
                return
        except FileNotFoundError:
            return
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


def pack(vector: Iterable[float]) -> bytes:
    """A vector as little-endian float32 bytes (``4 * dim``)."""
    values = array("f", vector)
    if sys.byteorder != "little":
        values.byteswap()
    return values.tobytes()


def pack_base64(vector: Iterable[float]) -> str:
    """A vector as the OpenAI-style ``encoding_format: "base64"`` sends it (little-endian float32)."""
    return base64.b64encode(pack(vector)).decode("ascii")


def unpack(blob: bytes) -> array:
    """The inverse of ``pack``: an ``array('f')``."""
    values = array("f")
    values.frombytes(blob)
    if sys.byteorder != "little":
        values.byteswap()
    return values


def connect(path: Path, *, create: bool) -> sqlite3.Connection:
    """Open ``vectors.db`` (creating it only when ``create``) and bring its schema up to date."""
    if not create and not path.exists():
        raise StoreError(f"no vector store at {path}: run embed (or sweep) first")
    try:
        db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
        db.execute("PRAGMA recursive_triggers = ON")  # a REPLACE's implicit delete fires the delete triggers too
        db.execute("PRAGMA secure_delete = ON")  # deleted rows and freed pages are zeroed: removed text leaves the file
        migrate(db)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path} is not a usable vector store: {exc}") from None
    return db


def migrate(db: sqlite3.Connection) -> None:
    """Apply every migration newer than the database's ``user_version``."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):
        raise StoreError(f"vectors.db has schema version {version}, newer than this agent knows ({len(MIGRATIONS)})")
    while version < len(MIGRATIONS):
        with transaction(db):
            # Read again under the write lock: another process (a reader opening
            # the store while embed creates it) may have migrated meanwhile.
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version < len(MIGRATIONS):
                MIGRATIONS[version](db)
                version += 1
                db.execute(f"PRAGMA user_version = {version}")
    if missing_document_columns(db, records.document_record()):  # read first: a reader takes no write lock
        with transaction(db):
            add_document_columns(db, records.document_record())


class transaction:
    """``with transaction(db):`` one ``BEGIN IMMEDIATE`` … ``COMMIT`` (rolled back on error).

    ``write=False`` begins a deferred transaction: a reader's consistent
    snapshot that takes no write lock.
    """

    def __init__(self, db: sqlite3.Connection, write: bool = True):
        self.db = db
        self.write = write

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE" if self.write else "BEGIN")
        return self.db

    def __exit__(self, exc_type, exc, tb) -> None:
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")


def replace_chunks(db: sqlite3.Connection, chunks: Iterable[StoredChunk], documents: Iterable[DocumentRow],
                   pages: Iterable[tuple] = (), then: Callable[[sqlite3.Connection], object] | None = None) -> int:
    """Make ``chunks``, ``documents`` and ``document_pages`` hold exactly this sweep's rows, atomically.

    A chunk id seen twice (a repeated window) keeps its first position. Both
    tables are written by column name from their record's fields
    (``records.insert_sql``), so a field added to ``StoredChunk`` or
    ``DocumentRow`` needs only its column (a migration) here.

    ``documents`` holds the rows' record (``records.stored_row``): a column
    it declares and the table lacks is added first (``add_document_columns``).

    Only the difference is written: an unchanged chunk keeps its row, so the
    keyword index (kept in step by triggers) and the derived search files
    redo only what changed. Returns how many windows left the table (their
    text then still sits in the keyword index's segments: see ``scrub``).
    ``then(db)`` runs last, in the same transaction (embed brings the reader
    sets' keyword indexes up to date there: ``reader_sets.update``).
    """
    documents = list(documents)
    row = type(documents[0]) if documents else DocumentRow
    with transaction(db):
        if documents and db.execute("PRAGMA user_version").fetchone()[0] >= len(MIGRATIONS):  # not an old store
            add_document_columns(db, row.document_record)
        db.execute(f"CREATE TEMP TABLE IF NOT EXISTS new_chunks ({_NEW_CHUNKS_COLUMNS})")
        db.execute("DELETE FROM temp.new_chunks")
        db.executemany(records.insert_sql("temp.new_chunks", StoredChunk, "INSERT OR IGNORE"),
                       map(records.values(StoredChunk), chunks))
        deleted = db.execute("DELETE FROM chunks WHERE chunk_id NOT IN (SELECT chunk_id FROM temp.new_chunks)").rowcount
        db.execute(_UPSERT_CHUNKS)
        db.execute("DELETE FROM temp.new_chunks")
        # a store not yet migrated this far (only tests write one) lacks the newer columns: those are left out
        columns = [name for name in records.column_names(row) if has_column(db, "documents", name)]
        rows = list(map(records.values(row, only=columns), documents))
        quoted = ", ".join(f'"{name}"' for name in columns)
        if _differ(db, f"SELECT {quoted} FROM documents", rows):  # unchanged: no write (a reader sees no commit)
            db.execute("DELETE FROM documents")
            db.executemany(records.insert_sql("documents", row, only=columns), rows)
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'document_pages'").fetchone():  # not in an old store
            pages = list(dict((doc, map_) for doc, map_ in pages).items())  # INSERT OR REPLACE's last one wins
            if _differ(db, "SELECT doc, pages FROM document_pages", pages):
                db.execute("DELETE FROM document_pages")
                db.executemany("INSERT OR REPLACE INTO document_pages (doc, pages) VALUES (?, ?)", pages)
        if then is not None:
            then(db)
    return deleted


def _differ(db: sqlite3.Connection, select: str, rows: list[tuple]) -> bool:
    """Whether a table's rows (``select``) differ from ``rows``, as multisets.

    A sweep that changed nothing then writes nothing, so serve's loaded index
    sees no commit (``PRAGMA data_version``) and a watch cycle that found
    nothing new makes serve load nothing.
    """
    import collections

    return collections.Counter(map(tuple, db.execute(select))) != collections.Counter(map(tuple, rows))


def _chunk_columns() -> tuple[str, str]:
    """The temporary table a sweep's windows are staged in, and the upsert that moves the changed ones into
    ``chunks``, both named from ``StoredChunk``'s fields (its first field, ``chunk_id``, is the key)."""
    key, *rest = records.column_names(StoredChunk)
    table = ", ".join([f'"{key}" TEXT PRIMARY KEY'] + [f'"{name}"' for name in rest])
    columns = ", ".join(f'"{name}"' for name in (key, *rest))
    mine = ", ".join(f'"{name}"' for name in rest)
    theirs = ", ".join(f'excluded."{name}"' for name in rest)
    upsert = (f"INSERT INTO chunks ({columns}) SELECT {columns} FROM temp.new_chunks WHERE true"
              f' ON CONFLICT ("{key}") DO UPDATE SET ' + ", ".join(f'"{name}" = excluded."{name}"' for name in rest)
              + f" WHERE ({mine}) IS NOT ({theirs})")
    return table, upsert


_NEW_CHUNKS_COLUMNS, _UPSERT_CHUNKS = _chunk_columns()


def missing_chunks(db: sqlite3.Connection, model: str) -> list[tuple[str, str]]:
    """``(chunk_id, text)`` of this sweep's windows with no vector for ``model``, in document order."""
    return db.execute(
        "SELECT c.chunk_id, c.text FROM chunks c WHERE NOT EXISTS"
        " (SELECT 1 FROM vectors v WHERE v.chunk_id = c.chunk_id AND v.model = ?) ORDER BY c.doc, c.idx",
        (model,),
    ).fetchall()


def add_vectors(db: sqlite3.Connection, model: str, dim: int, rows: Iterable[tuple[str, bytes]], created: str) -> None:
    """Store one batch of ``(chunk_id, packed vector)`` in one transaction."""
    with transaction(db):
        db.executemany(
            "INSERT OR IGNORE INTO vectors (chunk_id, model, dim, vec, created) VALUES (?, ?, ?, ?, ?)",
            ((chunk_id, model, dim, blob, created) for chunk_id, blob in rows),
        )


def store_batch(db: sqlite3.Connection, model: str, dim: int, stored: Iterable[tuple[str, bytes]],
                failed: Iterable[tuple[str, str]], created: str) -> None:
    """One batch's outcome in one short transaction: its vectors, and its failures.

    A stored chunk's earlier failure is forgotten; a failed chunk's row
    counts its attempts. Readers see the batch whole or not at all.
    """
    stored, failed = list(stored), list(failed)
    with transaction(db):
        db.executemany(
            "INSERT OR IGNORE INTO vectors (chunk_id, model, dim, vec, created) VALUES (?, ?, ?, ?, ?)",
            ((chunk_id, model, dim, blob, created) for chunk_id, blob in stored),
        )
        db.executemany("DELETE FROM embed_failures WHERE chunk_id = ? AND model = ?",
                       ((chunk_id, model) for chunk_id, _ in stored))
        db.executemany(
            "INSERT INTO embed_failures (chunk_id, model, reason, attempts, last_failed) VALUES (?, ?, ?, 1, ?)"
            " ON CONFLICT (chunk_id, model) DO UPDATE SET reason = excluded.reason,"
            " attempts = attempts + 1, last_failed = excluded.last_failed",
            ((chunk_id, model, reason, created) for chunk_id, reason in failed),
        )


def failed_chunk_ids(db: sqlite3.Connection, model: str) -> set[str]:
    """Chunks of this sweep that an earlier run recorded as refused for ``model`` (and still lack a vector)."""
    return {
        row[0]
        for row in db.execute(
            "SELECT f.chunk_id FROM embed_failures f JOIN chunks c ON c.chunk_id = f.chunk_id WHERE f.model = ?"
            " AND NOT EXISTS (SELECT 1 FROM vectors v WHERE v.chunk_id = f.chunk_id AND v.model = f.model)",
            (model,),
        )
    }


def count(db: sqlite3.Connection, sql: str, *params) -> int:
    return db.execute(sql, params).fetchone()[0]


def stale_vector_count(db: sqlite3.Connection, model: str | None = None) -> int:
    """Vectors whose chunk is not in this sweep (of one model, or of all)."""
    sql = "SELECT COUNT(*) FROM vectors v WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.chunk_id = v.chunk_id)"
    if model is None:
        return count(db, sql)
    return count(db, sql + " AND v.model = ?", model)


def erase_documents(db: sqlite3.Connection, docs: Iterable[str]) -> int:
    """Delete every trace of these documents: windows, vectors of every model, failures, rows. Returns windows erased.

    For documents that sanitize superseded (``embedding.erase``): their
    windows' ids and vectors were computed from text the current sanitizer
    would not let out. The windows are those of ``chunk_docs`` (every window
    the document ever had) and of ``chunks``. The caller scrubs afterwards
    (``scrub``), so the deleted bytes leave the file and its WAL.
    """
    docs = sorted(set(docs))
    if not docs:
        return 0
    with transaction(db):
        db.execute("CREATE TEMP TABLE IF NOT EXISTS erase_docs (doc TEXT PRIMARY KEY)")
        db.execute("CREATE TEMP TABLE IF NOT EXISTS erase_ids (chunk_id TEXT PRIMARY KEY)")
        db.execute("DELETE FROM temp.erase_docs")
        db.execute("DELETE FROM temp.erase_ids")
        db.executemany("INSERT OR IGNORE INTO temp.erase_docs VALUES (?)", ((doc,) for doc in docs))
        db.execute("INSERT OR IGNORE INTO temp.erase_ids SELECT chunk_id FROM chunk_docs WHERE doc IN temp.erase_docs")
        db.execute("INSERT OR IGNORE INTO temp.erase_ids SELECT chunk_id FROM chunks WHERE doc IN temp.erase_docs")
        erased = count(db, "SELECT COUNT(*) FROM temp.erase_ids")
        for table in ("vectors", "embed_failures", "chunks", "chunk_docs"):
            db.execute(f"DELETE FROM {table} WHERE chunk_id IN temp.erase_ids")
        db.execute("DELETE FROM documents WHERE doc IN temp.erase_docs")
        db.execute("DELETE FROM document_pages WHERE doc IN temp.erase_docs")
        db.execute("DELETE FROM temp.erase_ids")
        db.execute("DELETE FROM temp.erase_docs")
    return erased


def erase_stale(db: sqlite3.Connection, model: str | None = None, keep: Iterable[str] = ()) -> dict[str, int]:
    """Delete the vectors whose window is in neither ``chunks`` nor ``keep`` (of ``model``, or every model).

    Returns how many were deleted per model. A window left with no vector
    of any model also loses its ``chunk_docs`` row, and failure records of
    windows not in this sweep go too (``prune``). The caller scrubs.
    """
    with transaction(db):
        db.execute("CREATE TEMP TABLE IF NOT EXISTS keep_ids (chunk_id TEXT PRIMARY KEY)")
        db.execute("DELETE FROM temp.keep_ids")
        db.executemany("INSERT OR IGNORE INTO temp.keep_ids VALUES (?)", ((chunk_id,) for chunk_id in keep))
        stale = ("NOT EXISTS (SELECT 1 FROM chunks c WHERE c.chunk_id = {t}.chunk_id)"
                 " AND {t}.chunk_id NOT IN temp.keep_ids")
        where, params = stale.format(t="v"), ()
        if model is not None:
            where, params = where + " AND v.model = ?", (model,)
        removed = dict(db.execute(f"SELECT v.model, COUNT(*) FROM vectors v WHERE {where} GROUP BY v.model", params))
        db.execute(f"DELETE FROM vectors WHERE {stale.format(t='vectors')}"
                   + (" AND model = ?" if model is not None else ""), params)
        db.execute(f"DELETE FROM embed_failures WHERE {stale.format(t='embed_failures')}"
                   + (" AND model = ?" if model is not None else ""), params)
        db.execute("DELETE FROM chunk_docs WHERE NOT EXISTS (SELECT 1 FROM vectors v WHERE v.chunk_id = chunk_docs.chunk_id)"
                   " AND NOT EXISTS (SELECT 1 FROM embed_failures f WHERE f.chunk_id = chunk_docs.chunk_id)"
                   f" AND {stale.format(t='chunk_docs')}")
        db.execute("DELETE FROM temp.keep_ids")
    return {name: n for name, n in sorted(removed.items())}


def searchable(db: sqlite3.Connection, model: str) -> Iterator[tuple]:
    """``(chunk_id, doc, idx, start, end, text, vec)`` of every current window with a vector for ``model``."""
    return db.execute(
        'SELECT c.chunk_id, c.doc, c.idx, c.start, c."end", c.text, v.vec FROM vectors v'
        " JOIN chunks c ON c.chunk_id = v.chunk_id WHERE v.model = ?",
        (model,),
    )


def document_pages(db: sqlite3.Connection, docs: Iterable[str]) -> dict[str, list]:
    """Each listed document's page map (``sanitizing/pages.py``); a document without pages is left out."""
    import json

    docs = sorted(set(docs))
    if not docs:
        return {}
    marks = ",".join("?" * len(docs))
    try:
        rows = db.execute(f"SELECT doc, pages FROM document_pages WHERE doc IN ({marks})", docs).fetchall()
    except sqlite3.OperationalError:  # a store no embed has opened since pages were kept: none known
        return {}
    result = {}
    for doc, pages in rows:
        try:
            result[doc] = json.loads(pages)
        except ValueError:
            continue
    return result


def document_groups(db: sqlite3.Connection) -> dict[str, tuple[str, ...]]:
    """Every current document's groups (a document with none maps to ``()``)."""
    import json

    return {doc: tuple(json.loads(groups)) for doc, groups in db.execute("SELECT doc, groups FROM documents")}


def document_paths(db: sqlite3.Connection, docs: Iterable[str], caller: frozenset | None = None) -> dict[str, list[str]]:
    """Each document's sanitized source paths that ``caller`` may see (None: every group, every path)."""
    import json

    from bastion_agent.core.access import visible_paths

    result = {}
    for doc in set(docs):
        row = db.execute("SELECT paths, groups, path_groups FROM documents WHERE doc = ?", (doc,)).fetchone()
        result[doc] = visible_paths(caller, json.loads(row[0]), json.loads(row[2]), json.loads(row[1])) if row else []
    return result
