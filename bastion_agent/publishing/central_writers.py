"""How a role writes to the central index: a publishing role through the owner's functions, the owner straight in.

``open_writer`` picks the way from what the connected role may do;
``Writer`` and ``OwnerWriter`` offer the same steps (what the server holds,
the bastion's lock, a batch written, paths, groups, dates, maps and
published fields updated, documents deleted), so ``publish`` plans and
applies without knowing which role it is.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from dataclasses import dataclass

from bastion_agent.core import records
from bastion_agent.core.errors import DatabaseError
from bastion_agent.publishing.bastion_documents import LocalDocument
from bastion_agent.publishing.binary_copy import COPY_COLUMNS, STAGING, STAGING_COLUMNS, copy_into, copy_rows
from bastion_agent.publishing.connection import connect, describe_dsn, psycopg_module

LOCK_WAIT_SECONDS = 30.0  # a killed publisher's session can take a moment to end on the server


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
