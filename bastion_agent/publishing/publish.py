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

This module plans and applies a publish; what the bastion has is read by
``bastion_documents``, the rows travel by ``binary_copy``, and
``central_writers`` writes them as the connected role may.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Iterator

from bastion_agent.core.errors import DatabaseError, ManifestError
from bastion_agent.core.layout import Layout, write_summary
from bastion_agent.publishing.bastion_documents import LocalDocument, local_documents
from bastion_agent.publishing.central_writers import RemoteDocument, Writer, open_writer, published
from bastion_agent.publishing.connection import connect, describe_dsn, dsn_from_env, psycopg_module, say_warnings, scrub

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
    # the documents whose windows stand but one column moved, in this order: the path maps last, since the
    # updates before them make the server forget the maps they touch
    for changed, update, counted in ((todo.paths_only, writer.update_paths, "documents_paths_updated"),
                                     (todo.groups_only, writer.update_groups, "documents_groups_updated"),
                                     (todo.dates_only, writer.update_dates, "documents_dates_updated"),
                                     (todo.meta_only, writer.update_meta, "documents_meta_updated"),
                                     (todo.access_only, writer.update_access, "documents_paths_groups_updated")):
        if changed:
            update(changed)
            counts[counted] = len(changed)
    for first in range(0, len(todo.delete), 1000):
        part = todo.delete[first : first + 1000]
        counts["deleted"] += writer.delete(part)
        counts["documents_deleted"] += len(part)


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
