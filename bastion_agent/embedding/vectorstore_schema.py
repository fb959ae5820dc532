"""vectors.db's schema: its numbered migrations, and the document columns the document record declares.

Apart from the store's reads and writes (``vectorstore``) because a
migration, once shipped, is history: it changes never, while the reads and
writes change with every stage. ``vectorstore.migrate`` runs the list in
order, each with its ``PRAGMA user_version`` in the same transaction, then
adds the columns of ``documents`` that ``Document`` declares and the table
lacks (``add_document_columns``).
"""

from __future__ import annotations

import sqlite3

from bastion_agent.config.model_names import canonical_name
from bastion_agent.core import records

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


def _m002_embed_failures(db: sqlite3.Connection) -> None:
    """Chunks the model server refused, per vector key, so a re-run knows what it retries.

    Only a reason label, a count and a time: never the chunk's text.
    """
    db.execute(
        "CREATE TABLE embed_failures (chunk_id TEXT NOT NULL, model TEXT NOT NULL, reason TEXT NOT NULL,"
        " attempts INTEGER NOT NULL, last_failed TEXT NOT NULL, PRIMARY KEY (chunk_id, model))"
    )


def _m003_search_state(db: sqlite3.Connection) -> None:
    """What the derived search files are checked against, and the keyword index.

    ``search_state`` holds a random ``store_id`` (a copied or re-created
    database is another store) and two counters that triggers bump on every
    change a derived file cannot follow by itself: any change to ``chunks``,
    and a vector deleted or rewritten (vectors are otherwise only added, which
    ``max(rowid)`` shows). ``chunks_fts`` is an FTS5 index over the chunks'
    sanitized text, kept in step by the same triggers; a Python whose SQLite
    lacks FTS5 gets no keyword index (keyword search then says so).
    """
    import uuid

    db.execute("CREATE TABLE search_state (name TEXT PRIMARY KEY, value NOT NULL)")
    db.executemany("INSERT INTO search_state VALUES (?, ?)",
                   [("store_id", uuid.uuid4().hex), ("chunks_generation", 0), ("vectors_generation", 0)])
    bump = "UPDATE search_state SET value = value + 1 WHERE name = '{}';"
    fts = fts5_available(db)
    if fts:
        db.execute(f"CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='chunks', content_rowid='rowid',"
                   f" tokenize='{FTS_TOKENIZER}')")
        db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')")
    add = "INSERT INTO chunks_fts(rowid, text) VALUES (new.rowid, new.text);" if fts else ""
    remove = "INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.rowid, old.text);" if fts else ""
    chunks_bump = bump.format("chunks_generation")
    db.execute(f"CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN {chunks_bump} {add} END")
    db.execute(f"CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN {chunks_bump} {remove} END")
    db.execute(f"CREATE TRIGGER chunks_au AFTER UPDATE ON chunks BEGIN {chunks_bump} {remove} {add} END")
    vectors_bump = bump.format("vectors_generation")
    db.execute(f"CREATE TRIGGER vectors_ad AFTER DELETE ON vectors BEGIN {vectors_bump} END")
    db.execute(f"CREATE TRIGGER vectors_au AFTER UPDATE ON vectors BEGIN {vectors_bump} END")


# Porter stemming over Unicode words, accents folded: measured best of the
# FTS5 tokenizers on Cranfield and SciFact (docs/search.md).
FTS_TOKENIZER = "porter unicode61 remove_diacritics 2"


def fts5_available(db: sqlite3.Connection) -> bool:
    """Whether this Python's SQLite has FTS5 compiled in."""
    try:
        db.execute("CREATE VIRTUAL TABLE temp.fts5_probe USING fts5(x)")
        db.execute("DROP TABLE temp.fts5_probe")
        return True
    except sqlite3.OperationalError:
        return False


def _m004_sanitized_ids(db: sqlite3.Connection) -> None:
    """Forget every id an older agent made from raw bytes; keep its vectors by window text.

    Before this version a document's id was the sha256 of the raw file, and
    a chunk id the sha256 of that id and the window: both are oracles for
    what sanitize removed (docs/sanitize.md). So the windows, documents,
    failures and the keyword index of such a store go, and every vector goes
    too, after its window's text and vector key are copied to
    ``reuse_by_text``: the next embed gives those vectors the new chunk id
    of the same text (``reuse_vectors_by_text``), so unchanged text is not
    embedded again, and drops the rest. The ``rekey_pending`` state says a
    store is waiting for that embed (search refuses it meanwhile). On a new,
    empty database this only creates the table.
    """
    db.execute("CREATE TABLE reuse_by_text (model TEXT NOT NULL, text TEXT NOT NULL, dim INTEGER NOT NULL,"
               " vec BLOB NOT NULL, created TEXT NOT NULL, PRIMARY KEY (model, text))")
    old = sum(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in ("chunks", "vectors", "documents"))
    if not old:
        return
    db.execute("INSERT OR IGNORE INTO reuse_by_text SELECT v.model, c.text, v.dim, v.vec, v.created"
               " FROM vectors v JOIN chunks c ON c.chunk_id = v.chunk_id")
    for table in ("vectors", "embed_failures", "chunks", "documents"):
        db.execute(f"DELETE FROM {table}")
    if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'chunks_fts'").fetchone():
        db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')")
    db.execute("INSERT INTO search_state VALUES ('rekey_pending', 1)")


PREFIX_MARK = "+passage_prefix="  # EmbedSettings.vector_key: the name, then the prefix


def canonical_key(key: str) -> str:
    """A vector key with its model name in canonical form (``config.model_names``), the prefix part kept."""
    name, mark, prefix = key.partition(PREFIX_MARK)
    return canonical_name(name) + mark + prefix


def _m005_canonical_model_keys(db: sqlite3.Connection) -> None:
    """Key every vector by its model's canonical name, as ``EmbedSettings.vector_key`` now does.

    A store written before keyed them by the name as the manifest wrote it,
    so ``multilingual-e5-small`` and ``multilingual-e5-small:latest`` were two
    models and switching re-embedded everything. Each key of another form is
    renamed; where a chunk has a vector under both forms, the one already
    canonical stays and the other goes (the same model's vector of the same
    text). Failures and pending reuse rows are renamed alike.
    """
    for table, unique in (("vectors", "chunk_id"), ("embed_failures", "chunk_id"), ("reuse_by_text", "text")):
        keys = [row[0] for row in db.execute(f"SELECT DISTINCT model FROM {table}")]
        for key in keys:
            canonical = canonical_key(key)
            if canonical == key:
                continue
            db.execute(f"DELETE FROM {table} WHERE model = ? AND {unique} IN"
                       f" (SELECT {unique} FROM {table} WHERE model = ?)", (key, canonical))
            db.execute(f"UPDATE {table} SET model = ? WHERE model = ?", (canonical, key))


def _m006_chunk_docs(db: sqlite3.Connection) -> None:
    """Which document each window came from, kept after the window leaves ``chunks``.

    ``chunks`` holds only this sweep's windows, and ``vectors`` is keyed by
    chunk id and model: once a document's windows left the table, nothing
    said which vectors were its. When sanitize's result for the same raw
    text changes (a new rule), the old document's vectors must go
    (``erase_documents``), including those of windows an earlier chunk size
    made. A trigger records every window as it enters ``chunks``; this
    migration records the windows there now. Vectors of windows that left
    ``chunks`` before it ran have no row: ``prune`` erases them as stale.
    """
    db.execute("CREATE TABLE IF NOT EXISTS chunk_docs (chunk_id TEXT PRIMARY KEY, doc TEXT NOT NULL)")
    db.execute("CREATE INDEX IF NOT EXISTS chunk_docs_doc ON chunk_docs (doc)")
    db.execute("INSERT OR IGNORE INTO chunk_docs SELECT chunk_id, doc FROM chunks")
    db.execute("CREATE TRIGGER IF NOT EXISTS chunks_doc AFTER INSERT ON chunks BEGIN"
               " INSERT OR IGNORE INTO chunk_docs VALUES (new.chunk_id, new.doc); END")


def _m008_document_pages(db: sqlite3.Connection) -> None:
    """Each paged document's page map, beside ``documents`` (whose columns others may extend).

    Written so that it works in whatever place of the list it ends up: it
    creates only what is missing, and reads nothing another migration makes.
    """
    db.execute("CREATE TABLE IF NOT EXISTS document_pages (doc TEXT PRIMARY KEY, pages TEXT NOT NULL)")


def _m007_document_groups(db: sqlite3.Connection) -> None:
    """Each document's access groups (a JSON sorted list of names), as sanitize labelled it.

    Rows of an older store get ``[]``: no group, so only a caller with every
    group sees them until the next embed copies the labels from the
    sanitized listing (fail closed). Labels are rewritten with the documents
    on every embed, so a label change never re-embeds a window. Idempotent,
    like every migration a re-run may meet.
    """
    if not has_column(db, "documents", "groups"):
        db.execute("ALTER TABLE documents ADD COLUMN groups TEXT NOT NULL DEFAULT '[]'")


def _m009_path_groups(db: sqlite3.Connection) -> None:
    """Each document's groups per path (JSON, aligned with ``paths``): a caller sees only the paths it may read.

    Rows of an older store get ``[]``, read as "the document's groups for
    every path" until the next embed copies them from the sanitized listing.
    Idempotent, and it reads nothing another migration makes.
    """
    if not has_column(db, "documents", "path_groups"):
        db.execute("ALTER TABLE documents ADD COLUMN path_groups TEXT NOT NULL DEFAULT '[]'")


def _m010_document_modified(db: sqlite3.Connection) -> None:
    """Each document's per-path modification times (a JSON list beside ``paths``), for the dates of hits.

    Rows of an older store get ``[]`` (no date known) until the next embed
    copies the times from the sanitized listing. Idempotent.
    """
    if not has_column(db, "documents", "modified"):
        db.execute("ALTER TABLE documents ADD COLUMN modified TEXT NOT NULL DEFAULT '[]'")


def has_column(db: sqlite3.Connection, table: str, column: str) -> bool:
    return any(row[1] == column for row in db.execute(f"PRAGMA table_info({table})"))


MIGRATIONS = [_m001_create_tables, _m002_embed_failures, _m003_search_state, _m004_sanitized_ids,
              _m005_canonical_model_keys, _m006_chunk_docs, _m007_document_groups,
              _m008_document_pages, _m009_path_groups, _m010_document_modified]


def missing_document_columns(db: sqlite3.Connection, record: type) -> list[str]:
    """The columns of ``documents`` that the document record declares (``records.stored_fields``) and the table lacks."""
    have = {row[1] for row in db.execute("PRAGMA table_info(documents)")}
    return [item.name for item in records.stored_fields(record) if item.name not in have]


def add_document_columns(db: sqlite3.Connection, record: type) -> None:
    """The step after the numbered migrations: add each column of ``documents`` the record declares and the
    table lacks, its type and default from the field (``records.column_sql``). So a new nullable field
    of ``Document`` needs no migration written by hand; the numbered ones stay, for stores made before
    them. Idempotent; the caller holds the write transaction."""
    for name in missing_document_columns(db, record):
        db.execute(f'ALTER TABLE documents ADD COLUMN "{name}" {records.column_sql(record, name)}')
