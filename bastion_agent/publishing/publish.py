"""``publish MANIFEST``: this bastion's sanitized windows and vectors to PostgreSQL + pgvector.

Many bastions, one search. Each bastion sends what already left its private
stores, and nothing else: the sanitized windows of ``vectors.db`` (text,
``doc``, ``idx``, offsets), their vectors for the manifest's model, and the
documents' sanitized paths. The database (``BASTION_PUBLISH_DSN``, a libpq
connection string, from the environment only) is one an organisation
already runs, backs up and shards; ``docs/publish.md`` shows the set-up.

Exact and incremental, per document: the server keeps, for each (bastion,
model, doc), a fingerprint of the document's sorted chunk ids (computed from
sanitized ids, never from raw bytes) and its paths. A publish compares
those with the bastion's and then

- deletes the documents the bastion no longer has (windows and row);
- replaces the windows of each new or changed document, whole documents per
  transaction (a batch of them), loaded with binary ``COPY``;
- updates only the paths of a document whose windows are the same;
- writes nothing for an unchanged document.

A publish killed at any point leaves every document as it was before or as
it is after (its transaction committed or not), never a mix; the next run
sees the difference and completes it. Rows are keyed by (bastion, chunk_id,
model), so there is never a duplicate. Schema in ``publish_schema``.
"""

from __future__ import annotations

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
    ConfigError,
    DatabaseError,
    ManifestError,
    StoreError,
)
from bastion_agent.core.layout import Layout, write_summary
from bastion_agent.embedding import vectorstore

DSN_VARIABLE = "BASTION_PUBLISH_DSN"
BATCH_WINDOWS = 10000  # windows per transaction (whole documents; a larger document gets its own)
# Test hook: publish one document per transaction and, after this many, stop
# inside the next transaction (rows copied, not committed) until killed.
PAUSE_VARIABLE = "BASTION_PUBLISH_TEST_PAUSE_AFTER"


# --- settings --------------------------------------------------------------


def bastion_of(manifest) -> str:
    """The manifest's ``[publish] bastion``, which publishing requires."""
    name = getattr(manifest, "publish_bastion", None)
    if not name:
        raise ManifestError(f"manifest {manifest.path}: publishing needs a [publish] table with"
                            " bastion = \"NAME\" (lowercase letters, digits, dashes)")
    return name


def dsn_from_env(environ=None) -> str:
    """``BASTION_PUBLISH_DSN``; a clear line when it is missing or not a connection string."""
    environ = os.environ if environ is None else environ
    dsn = environ.get(DSN_VARIABLE, "").strip()
    if not dsn:
        raise ConfigError(f"{DSN_VARIABLE} is not set: give the central PostgreSQL as a libpq connection string,"
                          " e.g. \"host=search-db.example dbname=search user=publish_fs01 sslmode=verify-full\"")
    describe_dsn(dsn)  # parses it, so a malformed one fails here, before any work
    return dsn


def describe_dsn(dsn: str) -> str:
    """``host H port P db D user U``: what an error may show of a DSN (never its password)."""
    from psycopg import conninfo

    try:
        parts = conninfo.conninfo_to_dict(dsn)
    except Exception:  # libpq's own message may quote the string, password included
        raise ConfigError(f"{DSN_VARIABLE} is not a valid libpq connection string (key=value pairs or a"
                          " postgresql:// URL)") from None
    shown = [f"{label} {parts[key]}" for key, label in (("host", "host"), ("hostaddr", "host"), ("port", "port"),
                                                          ("dbname", "db"), ("user", "user")) if parts.get(key)]
    return " ".join(shown) or "the default local server"


def psycopg_module():
    """psycopg, or a clear line naming the extra that installs it."""
    from bastion_agent.core.extras import optional

    module = optional("psycopg")
    if module is None:
        raise ConfigError("publishing and --remote search need psycopg 3: pip install 'bastion-agent[postgres]'")
    return module


def connect(dsn: str):
    """A connection (autocommit; transactions are explicit); one clear line when it fails."""
    psycopg = psycopg_module()
    where = describe_dsn(dsn)
    try:
        return psycopg.connect(dsn, autocommit=True, application_name="bastion-agent")
    except psycopg.Error as exc:
        raise DatabaseError(f"cannot connect to PostgreSQL ({where}): {scrub(exc, dsn)}") from None


def scrub(exc: Exception, dsn: str) -> str:
    """The first line of a database error, with the DSN's password removed should libpq quote it."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    try:
        from psycopg import conninfo

        password = conninfo.conninfo_to_dict(dsn).get("password")
    except Exception:
        password = None
    if password:
        text = text.replace(password, "***")
    return text


# --- what the bastion has --------------------------------------------------


@dataclass
class LocalDocument:
    """One document as this bastion would publish it."""

    doc: str
    paths: list[str]
    windows: list[tuple] = field(default_factory=list)  # (chunk_id, idx, start, end, text, vec blob)

    @property
    def chunks_fingerprint(self) -> str:
        """sha256 of the sorted chunk ids: equal exactly when the windows are (ids are content-addressed)."""
        ids = sorted(window[0] for window in self.windows)
        return hashlib.sha256("\n".join(ids).encode("ascii")).hexdigest()

    @property
    def paths_json(self) -> str:
        return json.dumps(sorted(self.paths), ensure_ascii=False)


def local_documents(manifest, layout: Layout) -> dict[str, LocalDocument]:
    """This bastion's documents with their windows and vectors, after the stores' guard.

    The guard is chunk's and embed's: the sanitized store must cover what
    extract read, ``chunks.jsonl`` must match the sanitized store (each
    window cut again and its id checked), and ``vectors.db`` must hold
    exactly those windows with a vector of the manifest's model for each.
    Anything else means a stage has not run since: refuse, name it.
    """
    from bastion_agent.embedding import embedder
    from bastion_agent.sanitizing import sanitized_store

    sanitized_store.sanitized_documents(layout)
    chunk_rows, documents = embedder.current_windows(layout)
    if not layout.vectors_db.exists():
        raise StoreError(f"no vectors.db in {layout.root}: run embed first")
    key, dim = manifest.embed.vector_key, manifest.embed.dim
    db = vectorstore.connect(layout.vectors_db, create=False)
    try:
        stored = {row[0] for row in db.execute("SELECT chunk_id FROM chunks")}
        vectors = dict(db.execute("SELECT chunk_id, vec FROM vectors WHERE model = ? AND dim = ?", (key, dim)))
    finally:
        db.close()
    if stored != {row[0] for row in chunk_rows}:
        raise StoreError("vectors.db holds other windows than chunks.jsonl: run embed first")
    missing = len(stored - vectors.keys())
    if missing:
        raise StoreError(f"{missing} window(s) have no vector for model {key!r} (dim {dim}): run embed first")
    result = {doc: LocalDocument(doc, json.loads(paths)) for doc, paths in documents}
    seen: set[str] = set()
    for chunk_id, doc, idx, start, end, text in chunk_rows:
        if chunk_id in seen:  # a repeated window keeps its first position, as in vectors.db
            continue
        seen.add(chunk_id)
        result[doc].windows.append((chunk_id, idx, start, end, text, vectors[chunk_id]))
    return result


# --- binary COPY -----------------------------------------------------------

COPY_COLUMNS = ("bastion", "model", "chunk_id", "doc", "idx", "start", '"end"', "text", "embedding")
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


def copy_rows(bastion: str, model: str, documents: Iterable[LocalDocument]) -> Iterator[bytes]:
    """The binary COPY tuples of these documents' windows (``COPY_COLUMNS``, in order)."""
    head = struct.pack(">h", len(COPY_COLUMNS)) + _text_field(bastion) + _text_field(model)
    for document in documents:
        doc = _text_field(document.doc)
        for chunk_id, idx, start, end, text, blob in document.windows:
            yield b"".join((head, _text_field(chunk_id), doc, _INTS.pack(4, idx, 4, start, 4, end),
                            _text_field(text), _vector_field(blob)))


# --- the publisher ---------------------------------------------------------


@dataclass
class Plan:
    """What a publish does: the documents to write, to delete, and to leave."""

    write: list[LocalDocument]
    paths_only: list[LocalDocument]
    delete: list[str]
    unchanged: int


def plan(local: dict[str, LocalDocument], remote: dict[str, tuple[str, str, int]]) -> Plan:
    """Compare the bastion's documents with the server's (doc -> fingerprint, paths, windows)."""
    write, paths_only, unchanged = [], [], 0
    for doc in sorted(local):
        document = local[doc]
        held = remote.get(doc)
        if held is None or held[0] != document.chunks_fingerprint:
            write.append(document)
        elif held[1] != document.paths_json:
            paths_only.append(document)
        else:
            unchanged += 1
    delete = sorted(doc for doc in remote if doc not in local)
    return Plan(write, paths_only, delete, unchanged)


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
    conn = connect(dsn)
    psycopg = psycopg_module()
    try:
        publish_schema.migrate(conn)
        publish_schema.ensure_model(conn, key, dim)
        with publish_schema.bastion_lock(conn, bastion):
            counts = publish_documents(conn, bastion, key, local)
    except psycopg.Error as exc:
        raise DatabaseError(f"PostgreSQL ({describe_dsn(dsn)}) refused the publish: {scrub(exc, dsn)}") from None
    finally:
        conn.close()
    counts.update({"bastion": bastion, "model": manifest.embed.model, "vector_key": key, "dim": dim,
                   "server": describe_dsn(dsn), "schema_version": publish_schema.LATEST,
                   "seconds": round(time.monotonic() - started, 3)})
    return write_summary(layout, "publish", counts, manifest.signature)


def publish_documents(conn, bastion: str, model: str, local: dict[str, LocalDocument]) -> dict:
    """Bring the server's rows of (bastion, model) to ``local``; return the counts."""
    remote = {doc: (fingerprint, paths, windows) for doc, fingerprint, paths, windows in conn.execute(
        "SELECT doc, chunks_fingerprint, paths::text, windows FROM bastion_agent.documents"
        " WHERE bastion = %s AND model = %s", (bastion, model))}
    # jsonb re-serialises: compare the server's paths in the same canonical form as ours
    remote = {doc: (f, json.dumps(sorted(json.loads(p)), ensure_ascii=False), n) for doc, (f, p, n) in remote.items()}
    todo = plan(local, remote)
    pause_after = _pause_after()
    counts = {"documents": len(local), "documents_written": 0, "documents_deleted": 0,
              "documents_unchanged": todo.unchanged, "documents_paths_updated": 0,
              "windows": sum(len(d.windows) for d in local.values()), "inserted": 0, "deleted": 0}
    written = {document.doc for document in todo.write}
    counts["unchanged"] = sum(len(document.windows) for doc, document in local.items() if doc not in written)
    # new and changed documents first, then the gone ones: an interrupted run never leaves the index
    # with less than it had
    limit = 1 if pause_after is not None else BATCH_WINDOWS
    staged = row_security_active(conn)
    for batch in batches(todo.write, limit):
        with conn.transaction():
            pause = pause_after is not None and counts["documents_written"] >= pause_after
            counts["deleted"] += write_batch(conn, bastion, model, batch, pause, staged)
        counts["documents_written"] += len(batch)
        counts["inserted"] += sum(len(document.windows) for document in batch)
    if todo.paths_only:
        with conn.transaction():
            with conn.cursor() as cur:
                cur.executemany("UPDATE bastion_agent.documents SET paths = %s::jsonb, published_at = now()"
                                " WHERE bastion = %s AND model = %s AND doc = %s",
                                [(d.paths_json, bastion, model, d.doc) for d in todo.paths_only])
        counts["documents_paths_updated"] = len(todo.paths_only)
    for first in range(0, len(todo.delete), 1000):
        part = todo.delete[first : first + 1000]
        with conn.transaction():
            cur = conn.execute("DELETE FROM bastion_agent.windows WHERE bastion = %s AND model = %s AND doc = ANY(%s)",
                               (bastion, model, part))
            counts["deleted"] += cur.rowcount
            conn.execute("DELETE FROM bastion_agent.documents WHERE bastion = %s AND model = %s AND doc = ANY(%s)",
                         (bastion, model, part))
        counts["documents_deleted"] += len(part)
    return counts


def write_batch(conn, bastion: str, model: str, batch: list[LocalDocument], pause: bool = False,
                staged: bool = True) -> int:
    """Inside the caller's transaction: replace these documents' windows and rows; return the rows deleted."""
    docs = [document.doc for document in batch]
    deleted = conn.execute("DELETE FROM bastion_agent.windows WHERE bastion = %s AND model = %s AND doc = ANY(%s)",
                           (bastion, model, docs)).rowcount
    columns = ", ".join(COPY_COLUMNS)
    with conn.cursor() as cur:
        if staged:
            # PostgreSQL refuses COPY FROM into a table under row-level security: copy into a temp
            # table (no WAL, no policies), then one INSERT ... SELECT, which the policies check
            cur.execute("CREATE TEMP TABLE IF NOT EXISTS publish_staging (bastion text, model text, chunk_id text,"
                        ' doc text, idx integer, start integer, "end" integer, text text, embedding vector)'
                        " ON COMMIT DELETE ROWS")
            copy_into(cur, "publish_staging", copy_rows(bastion, model, batch))
            cur.execute(f"INSERT INTO bastion_agent.windows ({columns}) SELECT {columns} FROM publish_staging")
        else:  # the owner (setting up, or a bulk load): straight in
            copy_into(cur, "bastion_agent.windows", copy_rows(bastion, model, batch))
        cur.executemany(
            "INSERT INTO bastion_agent.documents (bastion, model, doc, chunks_fingerprint, paths, windows, published_at)"
            " VALUES (%s, %s, %s, %s, %s::jsonb, %s, now()) ON CONFLICT (bastion, doc, model) DO UPDATE SET"
            " chunks_fingerprint = excluded.chunks_fingerprint, paths = excluded.paths, windows = excluded.windows,"
            " published_at = excluded.published_at",
            [(bastion, model, d.doc, d.chunks_fingerprint, d.paths_json, len(d.windows)) for d in batch])
    if pause:
        print("bastion_agent publish: paused inside a transaction (test hook)", file=sys.stderr, flush=True)
        time.sleep(3600)
    return deleted


def copy_into(cur, table: str, rows: Iterable[bytes]) -> None:
    """One binary COPY of ``rows`` (``copy_rows`` tuples) into ``table``, sent in pieces of about 1 MiB."""
    with cur.copy(f"COPY {table} ({', '.join(COPY_COLUMNS)}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.write(COPY_HEADER)
        pending, size = [], 0
        for row in rows:
            pending.append(row)
            size += len(row)
            if size > 1 << 20:
                copy.write(b"".join(pending))
                pending, size = [], 0
        copy.write(b"".join(pending) + COPY_TRAILER)


def row_security_active(conn) -> bool:
    """Whether the policies bind this role on ``windows`` (not for its owner or a superuser)."""
    return conn.execute("SELECT row_security_active('bastion_agent.windows')").fetchone()[0]


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
