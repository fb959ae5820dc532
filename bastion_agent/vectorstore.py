"""``vectors.db``: this sweep's windows and every vector ever embedded.

Two tables from the specification, plus one for the documents' paths:

- ``chunks(chunk_id PK, doc, idx, start, end, text)``: this sweep's windows
  with their sanitized text, replaced whole on every embed run;
- ``vectors(chunk_id, model, dim, vec, created)``, PK ``(chunk_id, model)``:
  rows are only ever added, so switching models or going back to an earlier
  document costs nothing;
- ``documents(doc PK, paths)``: each document's sanitized source paths (JSON
  list), so a hit can say where it comes from.

The schema is a list of numbered migrations applied in order, each with its
``PRAGMA user_version`` in the same transaction, so an older database
upgrades in place. WAL mode and a busy timeout let a reader (search, serve)
work while embed writes, and see either the old or the new state.
"""

from __future__ import annotations

import sqlite3
import sys
from array import array
from pathlib import Path
from typing import Iterable, Iterator

from .errors import StoreError

BUSY_TIMEOUT_MS = 10_000


def _m001_create_tables(db: sqlite3.Connection) -> None:
    db.execute(
        'CREATE TABLE chunks (chunk_id TEXT PRIMARY KEY, doc TEXT NOT NULL, idx INTEGER NOT NULL,'
        ' start INTEGER NOT NULL, "end" INTEGER NOT NULL, text TEXT NOT NULL)'
    )
    db.execute("CREATE INDEX chunks_doc_idx ON chunks (doc, idx)")
    db.execute(
        "CREATE TABLE vectors (chunk_id TEXT NOT NULL, model TEXT NOT NULL, dim INTEGER NOT NULL,"
        " vec BLOB NOT NULL, created TEXT NOT NULL, PRIMARY KEY (chunk_id, model))"
    )
    db.execute("CREATE TABLE documents (doc TEXT PRIMARY KEY, paths TEXT NOT NULL)")


MIGRATIONS = [_m001_create_tables]


def pack(vector: Iterable[float]) -> bytes:
    """A vector as little-endian float32 bytes (``4 * dim``)."""
    values = array("f", vector)
    if sys.byteorder != "little":
        values.byteswap()
    return values.tobytes()


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
        migrate(db)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path} is not a usable vector store: {exc}") from None
    return db


def migrate(db: sqlite3.Connection) -> None:
    """Apply every migration newer than the database's ``user_version``."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):
        raise StoreError(f"vectors.db has schema version {version}, newer than this agent knows ({len(MIGRATIONS)})")
    for number, step in enumerate(MIGRATIONS[version:], start=version + 1):
        with transaction(db):
            step(db)
            db.execute(f"PRAGMA user_version = {number}")


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


def replace_chunks(db: sqlite3.Connection, chunks: Iterable[tuple], documents: Iterable[tuple]) -> None:
    """Make ``chunks`` and ``documents`` hold exactly this sweep's rows, atomically.

    ``chunks`` rows are ``(chunk_id, doc, idx, start, end, text)``; a chunk id
    seen twice (a repeated window) keeps its first position.
    """
    with transaction(db):
        db.execute("DELETE FROM chunks")
        db.execute("DELETE FROM documents")
        db.executemany("INSERT OR IGNORE INTO chunks VALUES (?, ?, ?, ?, ?, ?)", chunks)
        db.executemany("INSERT INTO documents VALUES (?, ?)", documents)


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


def count(db: sqlite3.Connection, sql: str, *params) -> int:
    return db.execute(sql, params).fetchone()[0]


def stale_vector_count(db: sqlite3.Connection, model: str | None = None) -> int:
    """Vectors whose chunk is not in this sweep (of one model, or of all)."""
    sql = "SELECT COUNT(*) FROM vectors v WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.chunk_id = v.chunk_id)"
    if model is None:
        return count(db, sql)
    return count(db, sql + " AND v.model = ?", model)


def searchable(db: sqlite3.Connection, model: str) -> Iterator[tuple]:
    """``(chunk_id, doc, idx, start, end, text, vec)`` of every current window with a vector for ``model``."""
    return db.execute(
        'SELECT c.chunk_id, c.doc, c.idx, c.start, c."end", c.text, v.vec FROM vectors v'
        " JOIN chunks c ON c.chunk_id = v.chunk_id WHERE v.model = ?",
        (model,),
    )


def document_paths(db: sqlite3.Connection, docs: Iterable[str]) -> dict[str, list[str]]:
    """Each document's sanitized source paths."""
    import json

    result = {}
    for doc in set(docs):
        row = db.execute("SELECT paths FROM documents WHERE doc = ?", (doc,)).fetchone()
        result[doc] = json.loads(row[0]) if row else []
    return result
