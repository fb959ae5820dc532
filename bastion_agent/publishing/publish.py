"""``publish MANIFEST``: this bastion's sanitized windows and vectors to PostgreSQL + pgvector.

Many bastions, one search. Each bastion sends what already left its private
stores, and nothing else: the sanitized windows of ``vectors.db`` (text,
``doc``, ``idx``, offsets), their vectors for the manifest's model, the
documents' sanitized paths and groups, and each document's date alone (the
latest of its files' modification times; which file, and the others' times,
stay here), and, so that a reader is shown only the paths it may read, each
path's own groups and time (``schema_paths``). The database (``BASTION_PUBLISH_DSN``, a libpq
connection string, from the environment only) is one an organisation
already runs, backs up and shards; ``docs/publish.md`` shows the set-up.

Exact and incremental, per document: the server keeps, for each (bastion,
model, doc), a fingerprint of the document's sorted chunk ids (computed from
sanitized ids, never from raw bytes) and its paths. A publish compares
those with the bastion's and then

- deletes the documents the bastion no longer has (windows and row);
- replaces the windows of each new or changed document, whole documents per
  transaction (a batch of them), loaded with binary ``COPY``;
- updates only the paths, the groups (its ``[access]`` labels) or the date
  of a document whose windows are the same: such a change sends no vector;
- writes nothing for an unchanged document.

A publish killed at any point leaves every document as it was before or as
it is after (its transaction committed or not), never a mix; the next run
sees the difference and completes it. Rows are keyed by (bastion, chunk_id,
model), so there is never a duplicate. Schema in ``publish_schema``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import struct
import sys
import time
from array import array
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from bastion_agent.config.manifest import validate_bastion_name  # noqa: F401  (publish.validate_bastion_name, as before)
from bastion_agent.core.errors import (
    DatabaseError,
    ManifestError,
    StoreError,
)
from bastion_agent.core import access, dates, records
from bastion_agent.core.layout import Layout, write_summary
from bastion_agent.embedding import vectorstore
from bastion_agent.publishing.connection import (connect, describe_dsn, dsn_from_env, psycopg_module, say_warnings,
                                                 scrub)

BATCH_WINDOWS = 10000  # windows per transaction (whole documents; a larger document gets its own)
# Test hook: publish one document per transaction and, after this many, stop
# inside the next transaction (rows copied, not committed) until killed.
PAUSE_VARIABLE = "BASTION_PUBLISH_TEST_PAUSE_AFTER"
LOCK_WAIT_SECONDS = 30.0  # a killed publisher's session can take a moment to end on the server


# --- settings --------------------------------------------------------------


def bastion_of(manifest) -> str:
    """The manifest's ``[publish] bastion``, which publishing requires."""
    name = getattr(manifest, "publish_bastion", None)
    if not name:
        raise ManifestError(f"manifest {manifest.path}: publishing needs a [publish] table with"
                            " bastion = \"NAME\" (lowercase letters, digits, dashes)")
    return name


# --- what the bastion has --------------------------------------------------


@dataclass(frozen=True)
class PublishedWindow:
    """One window of a document as publish sends it: a vectors.db window (``StoredChunk``) and its vector."""

    chunk_id: str
    idx: int
    start: int
    end: int
    text: str
    vec: bytes  # the packed little-endian float32 vector, as vectors.db stores it


@dataclass
class LocalDocument:
    """One document as this bastion would publish it."""

    doc: str
    paths: list[str]
    windows: list[PublishedWindow] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)  # who may read it (vectors.db's documents.groups)
    # the latest modification time of its files (core.dates.latest): the date alone leaves the bastion
    modified: str | None = None
    # each path's own groups and date ({path: {"groups": [...], "modified": ...}}), so the central index shows
    # a reader only the paths it may read; None: not known here (a store embedded before paths had groups)
    access: dict | None = None
    # its published fields by name (``document_meta``); None: the record publishes none, or none has a value
    meta: dict | None = None

    @property
    def chunks_fingerprint(self) -> str:
        """sha256 of the sorted chunk ids: equal exactly when the windows are (ids are content-addressed)."""
        ids = sorted(window.chunk_id for window in self.windows)
        return hashlib.sha256("\n".join(ids).encode("ascii")).hexdigest()

    @property
    def paths_json(self) -> str:
        return json.dumps(sorted(self.paths), ensure_ascii=False)

    @property
    def groups_json(self) -> str:
        return json.dumps(sorted(set(self.groups)))

    @property
    def access_json(self) -> str | None:
        return None if self.access is None else json.dumps(self.access, sort_keys=True, ensure_ascii=False)

    @property
    def meta_json(self) -> str | None:
        return None if self.meta is None else json.dumps(self.meta, sort_keys=True, ensure_ascii=False)


MAX_META_STRING = 200  # characters of a published string: the central CHECK (schema_meta) holds the same bound


def document_meta(row) -> dict | None:
    """A document's published fields (``records.published_fields`` of its row's record), by name, those that
    have a value; None when none has. The keys are the record's, so no other name leaves the bastion; a
    value the central index would refuse (a string over ``MAX_META_STRING``) is one ``StoreError`` here."""
    meta = {}
    for item in records.published_fields(type(row).document_record):
        value = getattr(row, item.name)
        if value is None:
            continue
        if isinstance(value, str) and len(value) > MAX_META_STRING:
            raise StoreError(f"document {row.doc[:12]}: {item.name} is longer than {MAX_META_STRING} characters,"
                             " which the central index does not take")
        meta[item.name] = value
    return meta or None


def local_documents(manifest, layout: Layout) -> dict[str, LocalDocument]:
    """This bastion's documents with their windows and vectors, after the stores' guard.

    The guard is chunk's and embed's: the sanitized store must cover what
    extract read, ``chunks.jsonl`` must match the sanitized store (each
    window cut again and its id checked), and ``vectors.db`` must hold
    exactly those windows with a vector of the manifest's model for each.
    Anything else means a stage has not run since: refuse, name it.
    """
    from bastion_agent.embedding import embed_stage
    from bastion_agent.sanitizing import sanitized_store

    sanitized_store.sanitized_documents(layout)
    chunk_rows, documents = embed_stage.current_windows(layout)
    if not layout.vectors_db.exists():
        raise StoreError(f"no vectors.db in {layout.root}: run embed first")
    key, dim = manifest.embed.vector_key, manifest.embed.dim
    db = vectorstore.connect(layout.vectors_db, create=False)
    try:
        stored = {chunk for chunk, in db.execute("SELECT chunk_id FROM chunks")}
        vectors = dict(db.execute("SELECT chunk_id, vec FROM vectors WHERE model = ? AND dim = ?", (key, dim)))
        groups = document_groups(db)
        modified = document_dates(db)
        per_path = path_access(db, groups)
    finally:
        db.close()
    if stored != {row.chunk_id for row in chunk_rows}:
        raise StoreError("vectors.db holds other windows than chunks.jsonl: run embed first")
    missing = len(stored - vectors.keys())
    if missing:
        raise StoreError(f"{missing} window(s) have no vector for model {key!r} (dim {dim}): run embed first")
    result = {row.doc: LocalDocument(row.doc, json.loads(row.paths), groups=groups.get(row.doc, []),
                                     modified=modified.get(row.doc), access=per_path.get(row.doc),
                                     meta=document_meta(row))
              for row in documents}
    for document in result.values():
        if document.access is not None and set(document.access) != set(document.paths):
            document.access = None  # another listing of paths than the store's: not known
    seen: set[str] = set()
    for row in chunk_rows:
        if row.chunk_id in seen:  # a repeated window keeps its first position, as in vectors.db
            continue
        seen.add(row.chunk_id)
        result[row.doc].windows.append(
            PublishedWindow(row.chunk_id, row.idx, row.start, row.end, row.text, vectors[row.chunk_id]))
    return result


def document_groups(db) -> dict[str, list[str]]:
    """doc -> its groups, from vectors.db's ``documents.groups`` (a JSON list); {} before that column exists.

    A document without groups is published with none, which only the
    every-group search role reads (fails closed). A name that is not a group
    name stops the publish: labels are names, never paths or text.
    """
    columns = {row[1] for row in db.execute("PRAGMA table_info(documents)")}
    if "groups" not in columns:
        return {}
    result = {}
    for doc, text in db.execute("SELECT doc, groups FROM documents"):
        names = json.loads(text) if text else []
        if not isinstance(names, list) or not all(access.is_group_name(name) for name in names):
            raise StoreError("vectors.db holds a document whose groups are not group names: run embed again")
        result[doc] = sorted(set(names))
    return result


def document_dates(db) -> dict[str, str]:
    """doc -> the latest of its files' modification times (vectors.db's ``documents.modified``), where known.

    Only the date is kept: which path it belongs to, and the other paths'
    times, are not published. {} before that column exists (nothing dated).
    """
    columns = {row[1] for row in db.execute("PRAGMA table_info(documents)")}
    if "modified" not in columns:
        return {}
    result = {}
    for doc, paths, times in db.execute("SELECT doc, paths, modified FROM documents"):
        try:
            count = len(json.loads(paths or "[]"))
        except ValueError:
            continue
        latest = dates.latest(times, count)
        if latest is not None:
            result[doc] = latest
    return result


def path_access(db, groups: dict[str, list[str]]) -> dict[str, dict]:
    """doc -> {path: {"groups": its groups, "modified": its time or None}}, from vectors.db's ``path_groups``
    and ``modified`` (JSON lists aligned with ``paths``), where every path has its groups.

    A document is left out (the server then knows none of its paths'
    groups, and shows a group-limited reader no path of several) when the
    lists are not aligned, or when its paths' groups together are not its
    groups: the server refuses such a map rather than guess.
    """
    columns = {row[1] for row in db.execute("PRAGMA table_info(documents)")}
    if "path_groups" not in columns:
        return {}
    times = "modified" if "modified" in columns else "NULL"
    result = {}
    for doc, paths, path_groups, modified in db.execute(f"SELECT doc, paths, path_groups, {times} FROM documents"):
        try:
            paths, path_groups = json.loads(paths or "[]"), json.loads(path_groups or "[]")
            stamps = json.loads(modified or "[]")
        except ValueError:
            continue
        if not (isinstance(paths, list) and isinstance(path_groups, list) and len(path_groups) == len(paths)
                and len(set(paths)) == len(paths)):
            continue
        if not all(isinstance(names, list) and all(access.is_group_name(n) for n in names) for names in path_groups):
            continue
        if sorted({name for names in path_groups for name in names}) != groups.get(doc, []):
            continue
        if not isinstance(stamps, list) or len(stamps) != len(paths):
            stamps = [None] * len(paths)
        result[doc] = {path: {"groups": sorted(set(names)),
                              "modified": when if isinstance(when, str) and dates.STAMP.fullmatch(when) else None}
                       for path, names, when in zip(paths, path_groups, stamps)}
    return result


# --- binary COPY -----------------------------------------------------------

COPY_COLUMNS = ("bastion", "model", "chunk_id", "doc", "idx", "start", '"end"', "text", "embedding")
STAGING_COLUMNS = COPY_COLUMNS[2:]
STAGING = "publish_staging"  # schema_access.STAGING: the temp table open_staging() makes
COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
COPY_TRAILER = struct.pack(">h", -1)


def _text_field(value: str) -> bytes:
    data = value.encode("utf-8")
    return struct.pack(">i", len(data)) + data


def _vector_field(blob: bytes) -> bytes:
    """pgvector's binary form: int16 dim, int16 0, big-endian float4s (from our little-endian blob)."""
    values = array("f")
    values.frombytes(blob)
    if sys.byteorder == "little":
        values.byteswap()
    return struct.pack(">ihh", 4 + 4 * len(values), len(values), 0) + values.tobytes()


_INTS = struct.Struct(">ii" + "ii" + "ii")


def copy_rows(bastion: str | None, model: str | None, documents: Iterable[LocalDocument]) -> Iterator[bytes]:
    """The binary COPY tuples of these documents' windows (``COPY_COLUMNS``, in order; ``STAGING_COLUMNS``
    when ``bastion`` and ``model`` are None: the functions that read the staging table add them)."""
    if bastion is None or model is None:
        head = struct.pack(">h", len(STAGING_COLUMNS))
    else:
        head = struct.pack(">h", len(COPY_COLUMNS)) + _text_field(bastion) + _text_field(model)
    for document in documents:
        doc = _text_field(document.doc)
        for window in document.windows:
            yield b"".join((head, _text_field(window.chunk_id), doc, _INTS.pack(4, window.idx, 4, window.start, 4,
                            window.end), _text_field(window.text), _vector_field(window.vec)))


# --- the publisher ---------------------------------------------------------


@dataclass
class Plan:
    """What a publish does: the documents to write, to delete, and to leave."""

    write: list[LocalDocument]
    paths_only: list[LocalDocument]
    delete: list[str]
    unchanged: int
    groups_only: list[LocalDocument] = field(default_factory=list)  # same windows, other groups
    dates_only: list[LocalDocument] = field(default_factory=list)  # same windows, another date
    access_only: list[LocalDocument] = field(default_factory=list)  # same windows, another map of paths' groups
    meta_only: list[LocalDocument] = field(default_factory=list)  # same windows, other published fields


@dataclass(frozen=True)
class RemoteDocument:
    """What the server holds of one of this bastion's documents, as publish compares it (``published_state``)."""

    chunks_fingerprint: str
    paths: str  # the sorted paths as a JSON list, in our canonical form (``canonical``)
    windows: int
    groups: str = "[]"  # a sorted JSON list
    modified: str | None = None
    access: str | None = None  # the map of its paths' groups and dates, as the server writes it (JSON)
    meta: str | None = None  # its published fields, as the server writes them (JSON)


def plan(local: dict[str, LocalDocument], remote: dict[str, RemoteDocument]) -> Plan:
    """Compare the bastion's documents with the server's. A written document carries its groups, date, map and
    published fields; a kept one whose groups differ is relabelled, one whose date differs is re-dated, one
    whose published fields differ gets them alone, and its map is sent again after any of the first three (the
    server forgets a map when what it describes changes)."""
    todo = Plan([], [], [], 0)
    for doc in sorted(local):
        document, held = local[doc], remote.get(doc)
        if held is None or held.chunks_fingerprint != document.chunks_fingerprint:
            todo.write.append(document)
            continue
        relabel, redate = held.groups != document.groups_json, held.modified != document.modified
        moved = held.paths != document.paths_json
        remap = (None if relabel or redate or moved else _loaded(held.access)) != document.access
        remeta = _loaded(held.meta) != document.meta
        for changed, where in ((relabel, todo.groups_only), (redate, todo.dates_only), (moved, todo.paths_only),
                               (remap, todo.access_only), (remeta, todo.meta_only)):
            if changed:
                where.append(document)
        todo.unchanged += not (moved or relabel or redate or remap or remeta)
    todo.delete.extend(sorted(doc for doc in remote if doc not in local))
    return todo


def _loaded(text: str | None):
    """A JSON value the server returned (jsonb re-serialises), loaded for comparing; None stays None."""
    return None if text is None else json.loads(text)


def batches(documents: list[LocalDocument], limit: int) -> Iterator[list[LocalDocument]]:
    """Whole documents, about ``limit`` windows per batch (a larger document is a batch of its own)."""
    batch, size = [], 0
    for document in documents:
        if batch and size + len(document.windows) > limit:
            yield batch
            batch, size = [], 0
        batch.append(document)
        size += len(document.windows)
    if batch:
        yield batch


def run(manifest, layout: Layout, dsn: str | None = None) -> dict:
    """The ``publish`` stage: vectors.db -> the central database + ``publish.summary.json``."""
    from bastion_agent.publishing import publish_schema

    started = time.monotonic()
    bastion = bastion_of(manifest)
    dsn = dsn or dsn_from_env()
    local = local_documents(manifest, layout)
    key, dim = manifest.embed.vector_key, manifest.embed.dim
    psycopg = psycopg_module()
    warnings: list[str] = []
    conn = connect(dsn, warnings=warnings)
    try:
        writer = open_writer(conn, dsn, bastion, key, dim)
        counts = publish_documents(writer, local)
    except psycopg.Error as exc:
        raise DatabaseError(f"PostgreSQL ({describe_dsn(dsn)}) refused the publish: {scrub(exc, dsn)}") from None
    finally:
        conn.close()
    say_warnings("publish", warnings)
    counts.update({"bastion": bastion, "model": manifest.embed.model, "vector_key": key, "dim": dim,
                   "server": describe_dsn(dsn), "schema_version": publish_schema.LATEST,
                   "seconds": round(time.monotonic() - started, 3)})
    return write_summary(layout, "publish", counts, manifest.signature)


def open_writer(conn, dsn: str, bastion: str, model: str, dim: int) -> "Writer":
    """The way this role writes: a publishing role through the owner's functions, the owner straight in.

    The owner (or a superuser) migrates the schema and registers the model;
    a publishing role can do neither, so an old schema or an unknown model
    stops its publish with the command that fixes it.
    """
    from bastion_agent.publishing import publish_schema

    exists, owner = conn.execute(
        f"SELECT to_regclass('{publish_schema.SCHEMA}.migrations') IS NOT NULL, CASE WHEN to_regclass("
        f"'{publish_schema.SCHEMA}.windows') IS NOT NULL THEN has_table_privilege(to_regclass("
        f"'{publish_schema.SCHEMA}.windows'), 'INSERT') END").fetchone()
    version = conn.execute(f"SELECT coalesce(max(version), 0) FROM {publish_schema.SCHEMA}.migrations"
                           ).fetchone()[0] if exists else 0
    if version == 0 or owner:
        publish_schema.migrate(conn)  # the owner's first publish makes the schema (one transaction)
        if publish_schema.model_index(conn, model) is None:
            publish_schema.ensure_model(conn, model, dim)
        return OwnerWriter(conn, dsn, bastion, model, dim)
    if version < publish_schema.LATEST:
        raise DatabaseError(f"the schema on PostgreSQL ({describe_dsn(dsn)}) is at version {version}, this"
                            f" bastion-agent needs {publish_schema.LATEST}: the schema's owner runs one publish"
                            " (or bastion-agent admin migrate) to upgrade it")
    return Writer(conn, dsn, bastion, model, dim)


class Writer:
    """A publishing role's writes: every one a call to a function the schema's owner made (docs/publish.md).

    The role holds no right on any table. Its rows go through a temp table
    that ``open_staging()`` creates as the owner (the role may only INSERT
    into it), then ``write_documents`` moves them in; the bastion each
    function writes is the one ``bastions`` maps the login role to.
    """

    def __init__(self, conn, dsn: str, bastion: str, model: str, dim: int):
        self.conn, self.dsn, self.bastion, self.model, self.dim = conn, dsn, bastion, model, dim
        self.staging_open = False

    def published_state(self) -> dict[str, RemoteDocument]:
        """doc -> what the server holds of it (``RemoteDocument``: fingerprint, paths, windows, groups, date,
        map of paths' groups, published fields), in one statement, each column by its field's name."""
        from psycopg.rows import dict_row

        rows = self.conn.cursor(row_factory=dict_row).execute(
            "SELECT p.doc, p.chunks_fingerprint, p.paths, p.windows, coalesce(g.groups, '[]') AS groups,"
            " t.modified, a.access, m.meta"
            " FROM bastion_agent.published_documents(%s, %s, %s) p"
            " LEFT JOIN bastion_agent.published_groups(%s, %s) g ON g.doc = p.doc"
            " LEFT JOIN bastion_agent.published_dates(%s, %s) t ON t.doc = p.doc"
            " LEFT JOIN bastion_agent.published_access(%s, %s) a ON a.doc = p.doc"
            " LEFT JOIN bastion_agent.published_meta(%s, %s) m ON m.doc = p.doc",
            (self.bastion, self.model, self.dim) + (self.bastion, self.model) * 4).fetchall()
        return {row["doc"]: records.build(RemoteDocument, row) for row in rows}

    LOCK_SQL = "SELECT bastion_agent.lock_bastion(%s)"

    @contextlib.contextmanager
    def lock(self, wait: float | None = None):
        """One publish of this bastion at a time: a lock on the bastion's own row, held by a second connection.

        The batches commit one by one (a killed publish keeps what it
        committed), so the lock lives in a transaction of its own, on its
        own connection, which ends when the publisher's process does.
        """
        psycopg = psycopg_module()
        holder = connect(self.dsn, check=False)
        try:
            deadline = time.monotonic() + (LOCK_WAIT_SECONDS if wait is None else wait)
            holder.execute("BEGIN")
            while True:
                try:
                    holder.execute("SAVEPOINT attempt")
                    holder.execute(self.LOCK_SQL, (self.bastion,))
                    break
                except psycopg.errors.LockNotAvailable:
                    holder.execute("ROLLBACK TO SAVEPOINT attempt")
                    if time.monotonic() >= deadline:
                        raise DatabaseError(f"another publish of bastion {self.bastion!r} is running;"
                                            " try again when it ends") from None
                    time.sleep(0.5)
            yield
        finally:
            holder.close()

    def write(self, batch: list[LocalDocument], pause: bool = False) -> int:
        """One transaction: replace these documents' windows and rows; return the windows deleted."""
        if not self.staging_open:
            self.conn.execute("SET temp_buffers = '64MB'")  # the staged batch stays in memory (before first use)
            self.conn.execute("SELECT bastion_agent.open_staging()")
            self.staging_open = True
        with self.conn.transaction():
            with self.conn.cursor() as cur:
                copy_into(cur, f"pg_temp.{STAGING}", copy_rows(None, None, batch), STAGING_COLUMNS, pause)
                cur.execute("SELECT bastion_agent.write_documents(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                            (self.bastion, self.model, [d.doc for d in batch], [d.chunks_fingerprint for d in batch],
                             [d.paths_json for d in batch], [len(d.windows) for d in batch],
                             [d.groups_json for d in batch], [d.modified for d in batch],
                             [d.access_json for d in batch], [d.meta_json for d in batch]))
                return cur.fetchone()[0]

    def update_paths(self, documents: list[LocalDocument]) -> None:
        self.conn.execute("SELECT bastion_agent.update_paths(%s, %s, %s, %s)",
                          (self.bastion, self.model, [d.doc for d in documents], [d.paths_json for d in documents]))

    def update_groups(self, documents: list[LocalDocument]) -> None:
        """New labels on documents the server holds: their rows and windows are relabelled, no vector sent."""
        self.conn.execute("SELECT bastion_agent.update_groups(%s, %s, %s, %s)",
                          (self.bastion, self.model, [d.doc for d in documents], [d.groups_json for d in documents]))

    def update_dates(self, documents: list[LocalDocument]) -> None:
        """New dates on documents the server holds: only their rows of ``documents`` change, no vector is sent."""
        self.conn.execute("SELECT bastion_agent.update_dates(%s, %s, %s, %s)",
                          (self.bastion, self.model, [d.doc for d in documents], [d.modified for d in documents]))

    def update_access(self, documents: list[LocalDocument]) -> None:
        """New maps of paths' groups and dates on documents the server holds: no vector is sent."""
        self.conn.execute("SELECT bastion_agent.update_access(%s, %s, %s, %s)",
                          (self.bastion, self.model, [d.doc for d in documents], [d.access_json for d in documents]))

    def update_meta(self, documents: list[LocalDocument]) -> None:
        """New published fields on documents the server holds: only their rows of ``documents`` change."""
        self.conn.execute("SELECT bastion_agent.update_meta(%s, %s, %s, %s)",
                          (self.bastion, self.model, [d.doc for d in documents], [d.meta_json for d in documents]))

    def delete(self, docs: list[str]) -> int:
        return self.conn.execute("SELECT bastion_agent.delete_documents(%s, %s, %s)",
                                 (self.bastion, self.model, docs)).fetchone()[0]


@dataclass(frozen=True)
class PublishedDocument:
    """One row of the server's ``documents`` as the owner writes it (the server stamps ``published_at``).

    Its first three fields are the row's key; the owner's upsert is made
    from the fields (``_owner_documents_sql``), so a column added here and in
    ``publish_schema`` is written without another line.
    """

    bastion: str
    model: str
    doc: str
    chunks_fingerprint: str  # LocalDocument.chunks_fingerprint
    paths: str  # the sorted paths as a JSON list (the column is jsonb)
    windows: int
    modified: str | None = None  # LocalDocument.modified: the document's date alone
    meta: str | None = None  # LocalDocument.meta_json: its published fields (the column is jsonb)


def _owner_documents_sql() -> str:
    key, rest = records.column_names(PublishedDocument)[:3], records.column_names(PublishedDocument)[3:]
    updates = ", ".join(f'"{name}" = excluded."{name}"' for name in rest)
    return (records.insert_sql("bastion_agent.documents", PublishedDocument, mark="%s")
            + f" ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}, published_at = excluded.published_at")


class OwnerWriter(Writer):
    """The schema's owner (setting up, or a bulk load): straight into the tables, which it owns."""

    DOCUMENTS_SQL = _owner_documents_sql()

    LOCK_SQL = "SELECT bastion FROM bastion_agent.bastions WHERE bastion = %s FOR UPDATE NOWAIT"

    def published_state(self) -> dict[str, RemoteDocument]:
        from psycopg.rows import dict_row

        rows = self.conn.cursor(row_factory=dict_row).execute(
            "SELECT doc, chunks_fingerprint, paths::text AS paths, windows, to_jsonb(groups)::text AS groups,"
            " modified, path_access::text AS access, meta::text AS meta FROM bastion_agent.documents"
            " WHERE bastion = %s AND model = %s", (self.bastion, self.model)).fetchall()
        return {row["doc"]: records.build(RemoteDocument, row) for row in rows}

    @contextlib.contextmanager
    def lock(self, wait: float | None = None):
        # the bastion the owner publishes is registered (so search roles read it), without a role
        self.conn.execute("INSERT INTO bastion_agent.bastions (bastion) VALUES (%s) ON CONFLICT DO NOTHING",
                          (self.bastion,))
        with super().lock(wait):
            yield

    def write(self, batch: list[LocalDocument], pause: bool = False) -> int:
        with self.conn.transaction():
            deleted = self.conn.execute(
                "DELETE FROM bastion_agent.windows WHERE bastion = %s AND model = %s AND doc = ANY(%s)",
                (self.bastion, self.model, [document.doc for document in batch])).rowcount
            with self.conn.cursor() as cur:
                copy_into(cur, "bastion_agent.windows", copy_rows(self.bastion, self.model, batch), COPY_COLUMNS,
                          pause)
                rows = [PublishedDocument(self.bastion, self.model, d.doc, d.chunks_fingerprint, d.paths_json,
                                          len(d.windows), d.modified, d.meta_json) for d in batch]
                cur.executemany(self.DOCUMENTS_SQL, list(map(records.values(PublishedDocument), rows)))
            # COPY wrote no groups: every document's, in this transaction (an unchanged one costs no write)
            self.update_groups(batch)
            self.update_access(batch)  # after the groups, which the map's CHECK compares with
            return deleted

    def update_paths(self, documents: list[LocalDocument]) -> None:
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany("UPDATE bastion_agent.documents SET paths = %s::jsonb, published_at = now()"
                            " WHERE bastion = %s AND model = %s AND doc = %s",
                            [(d.paths_json, self.bastion, self.model, d.doc) for d in documents])

    def update_groups(self, documents: list[LocalDocument]) -> None:
        with self.conn.transaction():
            for table in ("documents", "windows"):
                self.conn.execute(
                    f"UPDATE bastion_agent.{table} t SET groups = bastion_agent.groups_of(u.g) FROM unnest(%s::text[],"
                    " %s::text[]) AS u(doc, g) WHERE t.bastion = %s AND t.model = %s AND t.doc = u.doc"
                    " AND t.groups <> bastion_agent.groups_of(u.g)",
                    ([d.doc for d in documents], [d.groups_json for d in documents], self.bastion, self.model))

    def update_dates(self, documents: list[LocalDocument]) -> None:
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany("UPDATE bastion_agent.documents SET modified = %s, published_at = now()"
                            " WHERE bastion = %s AND model = %s AND doc = %s",
                            [(d.modified, self.bastion, self.model, d.doc) for d in documents])

    def update_access(self, documents: list[LocalDocument]) -> None:
        # one statement for the batch (a bulk load writes every document's map); unchanged rows are not rewritten
        with self.conn.transaction():
            self.conn.execute("UPDATE bastion_agent.documents d SET path_access = u.a::jsonb"
                              " FROM unnest(%s::text[], %s::text[]) AS u(doc, a)"
                              " WHERE d.bastion = %s AND d.model = %s AND d.doc = u.doc"
                              " AND d.path_access IS DISTINCT FROM u.a::jsonb",
                              ([d.doc for d in documents], [d.access_json for d in documents], self.bastion, self.model))

    def update_meta(self, documents: list[LocalDocument]) -> None:
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany("UPDATE bastion_agent.documents SET meta = %s::jsonb, published_at = now()"
                            " WHERE bastion = %s AND model = %s AND doc = %s",
                            [(d.meta_json, self.bastion, self.model, d.doc) for d in documents])

    def delete(self, docs: list[str]) -> int:
        with self.conn.transaction():
            deleted = self.conn.execute(
                "DELETE FROM bastion_agent.windows WHERE bastion = %s AND model = %s AND doc = ANY(%s)",
                (self.bastion, self.model, docs)).rowcount
            self.conn.execute("DELETE FROM bastion_agent.documents WHERE bastion = %s AND model = %s"
                              " AND doc = ANY(%s)", (self.bastion, self.model, docs))
        return deleted


def canonical(remote: dict[str, RemoteDocument]) -> dict[str, RemoteDocument]:
    """jsonb re-serialises: the server's paths in the same canonical form as ours."""
    return {doc: dataclasses.replace(held, paths=json.dumps(sorted(json.loads(held.paths)), ensure_ascii=False))
            for doc, held in remote.items()}


def published(writer: Writer) -> dict[str, RemoteDocument]:
    """The server's documents (canonical paths) with their groups, dates, maps of paths' groups and published fields."""
    return canonical(writer.published_state())


def publish_documents(writer: Writer, local: dict[str, LocalDocument]) -> dict:
    """Bring the server's rows of (bastion, model) to ``local``; return the counts.

    An unchanged bastion costs one statement here (the fingerprints and groups) and
    takes no lock; otherwise the bastion's row is locked and the
    fingerprints read again under the lock, since a publish that held it
    may have written meanwhile.
    """
    todo = plan(local, published(writer))
    counts = {"documents": len(local), "documents_written": 0, "documents_deleted": 0,
              "documents_unchanged": todo.unchanged, "documents_paths_updated": 0, "documents_groups_updated": 0,
              "documents_dates_updated": 0, "documents_paths_groups_updated": 0, "documents_meta_updated": 0,
              "windows": sum(len(d.windows) for d in local.values()), "inserted": 0, "deleted": 0}
    if (todo.write or todo.paths_only or todo.groups_only or todo.dates_only or todo.access_only or todo.meta_only
            or todo.delete):
        with writer.lock():
            todo = plan(local, published(writer))
            counts["documents_unchanged"] = todo.unchanged
            apply_plan(writer, todo, counts)
    written = {document.doc for document in todo.write}
    counts["unchanged"] = sum(len(document.windows) for doc, document in local.items() if doc not in written)
    return counts


def apply_plan(writer: Writer, todo: Plan, counts: dict) -> None:
    """New and changed documents first, then the paths, then the gone ones: an interrupted run never leaves
    the index with less than it had."""
    pause_after = _pause_after()
    limit = 1 if pause_after is not None else BATCH_WINDOWS
    for batch in batches(todo.write, limit):
        pause = pause_after is not None and counts["documents_written"] >= pause_after
        counts["deleted"] += writer.write(batch, pause)
        counts["documents_written"] += len(batch)
        counts["inserted"] += sum(len(document.windows) for document in batch)
    if todo.paths_only:
        writer.update_paths(todo.paths_only)
        counts["documents_paths_updated"] = len(todo.paths_only)
    if todo.groups_only:
        writer.update_groups(todo.groups_only)
        counts["documents_groups_updated"] = len(todo.groups_only)
    if todo.dates_only:
        writer.update_dates(todo.dates_only)
        counts["documents_dates_updated"] = len(todo.dates_only)
    if todo.meta_only:
        writer.update_meta(todo.meta_only)
        counts["documents_meta_updated"] = len(todo.meta_only)
    if todo.access_only:  # last: the updates above make the server forget the maps they touch
        writer.update_access(todo.access_only)
        counts["documents_paths_groups_updated"] = len(todo.access_only)
    for first in range(0, len(todo.delete), 1000):
        part = todo.delete[first : first + 1000]
        counts["deleted"] += writer.delete(part)
        counts["documents_deleted"] += len(part)


def copy_into(cur, table: str, rows: Iterable[bytes], columns=COPY_COLUMNS, pause: bool = False) -> None:
    """One binary COPY of ``rows`` (``copy_rows`` tuples) into ``table``, sent in pieces of about 1 MiB.

    ``pause``: the test hook, inside the COPY with every row sent (nothing
    committed) until a line arrives on stdin or the process is killed.
    """
    with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.write(COPY_HEADER)
        pending, size = [], 0
        for row in rows:
            pending.append(row)
            size += len(row)
            if size > 1 << 20:
                copy.write(b"".join(pending))
                pending, size = [], 0
        copy.write(b"".join(pending))
        if pause:
            print("bastion_agent publish: paused inside a transaction (test hook)", file=sys.stderr, flush=True)
            sys.stdin.readline()
        copy.write(COPY_TRAILER)


def _pause_after() -> int | None:
    value = os.environ.get(PAUSE_VARIABLE)
    return int(value) if value and value.isdigit() else None


# --- the command line ------------------------------------------------------


def add_publish_arguments(parser) -> None:
    from bastion_agent.config.arguments import add_manifest_arguments

    add_manifest_arguments(parser)


def run_publish(args) -> int:
    from bastion_agent.config.arguments import load_manifest_and_layout

    manifest, layout = load_manifest_and_layout(args)
    summary = run(manifest, layout)
    print(f"bastion_agent publish: bastion {summary['bastion']}: {summary['documents_written']} document(s) written"
          f" ({summary['inserted']} windows), {summary['documents_deleted']} deleted ({summary['deleted']} windows"
          f" removed), {summary['documents_unchanged']} unchanged, in {summary['seconds']} s")
    return 0
