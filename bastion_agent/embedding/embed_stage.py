"""The ``embed`` stage: every current window without a vector for the manifest's model goes to the model server; vectors.db keeps them.

The probe checks the server and the dimension before the store is opened;
``batch_sender`` batches, retries and splits; this module decides what is
missing and writes the summary. Standard library only.
"""

from __future__ import annotations

import json
import time
from typing import Sequence

from bastion_agent.chunking.chunker import chunk_id
from bastion_agent.core.errors import ModelServerError, ModelServerUnreachable, StoreError
from bastion_agent.core import catalogue, records
from bastion_agent.core.layout import Layout, read_jsonl, write_summary
from bastion_agent.core.records import Document, DocumentRow, StoredChunk
from bastion_agent.embedding import reader_sets, vectorstore, window_fit
from bastion_agent.embedding.client import EmbedClient
from bastion_agent.embedding.endpoint import EndpointConfig
from bastion_agent.sanitizing.sanitized_store import read_checked_text

# --- embed -----------------------------------------------------------------


def run_embed(manifest, layout: Layout, client: EmbedClient | None = None, retry=None) -> dict:
    """The ``embed`` stage (``_run_embed``), and whether it finished, for search to say (``embed_health``)."""
    from bastion_agent.embedding import embed_health

    try:
        summary = _run_embed(manifest, layout, client, retry)
    except ModelServerError as exc:
        embed_health.record_failure(layout, str(exc))
        raise
    except KeyboardInterrupt:
        embed_health.record_failure(layout, "interrupted")
        raise
    embed_health.record_success(layout)
    return summary


def _run_embed(manifest, layout: Layout, client: EmbedClient | None = None, retry=None) -> dict:
    """The ``embed`` stage: ``chunks.jsonl`` -> ``vectors.db`` + ``embed.summary.json``.

    The probe runs before the store is opened or created: a wrong dimension,
    API or model never touches ``vectors.db``. A server that does not answer
    at all leaves nothing in doubt: the windows are written then
    (``index_windows``), so keyword search finds them while their vectors
    wait, and the error is raised. After the probe, the
    engine (``batch_sender``) retries, splits and isolates; ``retry`` is its
    ``RetryPolicy`` (tests inject sleep and clock). The summary is written
    whatever happens next (success, failed chunks, the server gone for good,
    Ctrl-C); failed chunks then make the stage exit non-zero, and the next
    run retries exactly the chunks that still have no vector.
    """
    from bastion_agent.embedding.batch_sender import EmbedStats
    from bastion_agent.embedding.erase import erase_superseded

    started = time.monotonic()
    # First, and whatever the model server does: windows sanitize superseded must not outlive the fix.
    erased = erase_superseded(layout)
    # The listing is read once, here, for the windows' documents and their pages: the stage goes down to it
    # once rather than once for each (docs/architecture.md, "The walk of a sweep").
    listed = _documents(layout)
    chunk_rows, documents = current_windows(layout, listed)
    pages = current_pages(layout, {row.doc for row in chunk_rows}, listed)
    client = client or EmbedClient(EndpointConfig.from_env(), manifest.embed.model)
    key = manifest.embed.vector_key
    probed = not all_embedded(layout, key, manifest.embed.dim, chunk_rows)
    # Nothing to embed: no request at all, so a sweep of an unchanged folder
    # works while the model server is down (the summary says it was not probed).
    try:
        api = client.probe(manifest.embed.dim) if probed else _previous_api(layout)
    except ModelServerUnreachable:
        index_windows(layout, chunk_rows, documents, pages)
        raise
    # What the server serves and its context (server_info); a model it does not list stops here.
    server = window_fit.check_server(client, manifest.embed.model, api) if probed else None
    fit = None
    stats = EmbedStats(batch_size_final=client.config.batch)
    db = vectorstore.connect(layout.vectors_db, create=True)
    try:
        rebuilding = vectorstore.rekey_pending(db)  # a store of old, raw-file ids (legacy_ids.py)
        # with each reader set's keyword index, in the same commit, so no search process builds one
        removed = vectorstore.replace_chunks(db, chunk_rows, documents, pages, then=reader_sets.update)
        if rebuilding:
            from bastion_agent.core import legacy_ids

            legacy_ids.announce("embed")
            stats.reused_by_text = vectorstore.reuse_vectors_by_text(db)
        if removed or rebuilding:
            vectorstore.scrub(db)  # the removed windows' words leave vectors.db's bytes
        missing = vectorstore.missing_chunks(db, key)
        stats.retried_failures = len(vectorstore.failed_chunk_ids(db, key))
        stats.reused = vectorstore.count(db, "SELECT COUNT(*) FROM chunks") - len(missing)
        try:
            fit = window_fit.fit_windows(server, client, manifest.embed, missing) if server and missing else None
            embed_missing(db, client, manifest, missing, stats, retry)
        finally:
            counts = _embed_counts(db, manifest, client, api, stats, documents, chunk_rows, missing, started)
            counts.update(window_fit.summary_fields(server, fit, db, key, stats.truncated_ids, manifest.embed.model))
            counts["probed"] = probed
            counts["superseded_erased"] = erased
            summary = write_summary(layout, "embed", counts, manifest.signature)
            vectorstore.checkpoint(db)
    except ModelServerError as exc:
        raise ModelServerError(f"{exc}; {stats.embedded} new vectors are stored: re-run embed to resume") from None
    finally:
        db.close()
    refresh_derived(layout, manifest)
    if stats.failed:
        reasons = ", ".join(f"{reason}: {n}" for reason, n in sorted(stats.failed_by_reason.items()))
        raise ModelServerError(
            f"the model server refused {stats.failed} of {len(missing)} chunks ({reasons}); {stats.embedded} "
            "vectors are stored; see embed.summary.json, then re-run embed to retry only those"
        )
    return summary


def index_windows(layout: Layout, chunk_rows: list[StoredChunk], documents: list[DocumentRow], pages) -> None:
    """Write this sweep's windows (and the keyword index, by its triggers) without a vector, in one transaction.

    What embed does first anyway; alone, when the model server cannot be
    reached: keyword search then finds every chunked window, vector search
    the windows that have vectors, and each answer counts the ones that wait.
    A store of the old raw-file ids is left for a run that can rebuild it.
    """
    db = vectorstore.connect(layout.vectors_db, create=True)
    try:
        if vectorstore.rekey_pending(db):
            return
        if vectorstore.replace_chunks(db, chunk_rows, documents, pages, then=reader_sets.update):
            vectorstore.scrub(db)
        vectorstore.checkpoint(db)
    finally:
        db.close()


def all_embedded(layout: Layout, key: str, dim: int, chunk_rows: list[StoredChunk]) -> bool:
    """Whether every window of this sweep already has a vector of ``key`` and ``dim`` (read only)."""
    if not layout.vectors_db.exists():
        return not chunk_rows
    db = vectorstore.connect(layout.vectors_db, create=False)
    try:  # primary-key lookups, stopping at the first window without a vector
        lookup = "SELECT 1 FROM vectors WHERE chunk_id = ? AND model = ? AND dim = ?"
        return all(db.execute(lookup, (row.chunk_id, key, dim)).fetchone() for row in chunk_rows)
    finally:
        db.close()


def _previous_api(layout: Layout) -> str:
    """The wire format the last embed used, for a summary written without a probe."""
    try:
        return json.loads(layout.summary_path("embed").read_text(encoding="utf-8")).get("api") or "not probed"
    except (OSError, ValueError, AttributeError):
        return "not probed"


def _embed_counts(db, manifest, client: EmbedClient, api: str, stats, documents, chunk_rows, missing,
                  started: float) -> dict:
    """The summary's counts: the fields docs/contract.md fixes, then what this run met."""
    key = manifest.embed.vector_key
    unique = vectorstore.count(db, "SELECT COUNT(*) FROM chunks")
    return {
        "model": manifest.embed.model,
        "vector_key": key,
        "dim": manifest.embed.dim,
        "api": api,
        "encoding": client.encoding,
        "url": client.config.display_url,
        "documents": len(documents),
        "windows": len(chunk_rows),
        "chunks": unique,
        "embedded": stats.embedded,
        "reused": unique - len(missing),
        "reused_by_text": stats.reused_by_text,
        "failed": stats.failed,
        "failed_by_reason": dict(sorted(stats.failed_by_reason.items())),
        "retried_failures": stats.retried_failures,
        "still_missing": len(missing) - stats.embedded,
        "batches": stats.batches,
        "requests": stats.requests,
        "retries": stats.retries,
        "truncated": len(stats.truncated_ids),
        "batch_size": client.config.batch,
        "batch_size_final": stats.batch_size_final,
        "concurrency": client.config.concurrency,
        "batch_settled": stats.batch_settled or stats.batch_size_final,
        "concurrency_settled": stats.concurrency_settled or client.config.concurrency,
        "batch_tuning": stats.tuning.get("batch_tuning", "fixed"),
        "batch_trials": stats.tuning.get("batch_trials", []),
        "interrupted": stats.interrupted,
        "stopped": stats.stopped,
        "stale_vectors": vectorstore.stale_vector_count(db),
        "stale_vectors_this_model": vectorstore.stale_vector_count(db, key),
        "seconds": round(time.monotonic() - started, 3),
    }


def embed_missing(db, client: EmbedClient, manifest, missing: Sequence[tuple[str, str]], stats=None,
                  retry=None) -> int:
    """Embed ``(chunk_id, text)`` pairs in batches, one transaction each; return the batch count.

    ``stats`` (a ``batch_sender.EmbedStats``) is updated as batches commit.
    """
    from bastion_agent.embedding.batch_sender import EmbedStats, embed_chunks

    stats = stats if stats is not None else EmbedStats()
    embed = manifest.embed
    embed_chunks(db, client, embed.vector_key, embed.dim, embed.passage_prefix, missing, stats, retry)
    return stats.batches


def current_windows(layout: Layout, listed: list[Document] | None = None) -> tuple[list[StoredChunk], list[DocumentRow]]:
    """This sweep's windows with their text, and its documents with their paths and groups, as vectors.db keeps them.

    Each window's text is cut from the sanitized store and its id checked
    again, so a sanitized store changed since ``chunk`` is caught here.
    ``listed``: the sanitized listing's documents when the caller has read them (else read here).
    """
    if not layout.chunks_path.exists():
        raise StoreError(f"no {layout.chunks_path.name} in {layout.root}: run chunk first")
    rows = read_jsonl(layout.chunks_path)
    listing = {document.doc: document for document in (_documents(layout) if listed is None else listed)}
    folder = str(layout.sanitized_dir)
    texts: dict[str, str] = {}
    chunk_rows = []
    for row in rows:
        doc = row["doc"]
        if doc not in texts:
            if listing and doc not in listing:
                raise StoreError(f"{layout.chunks_path.name} names a document the sanitized store does not have: run chunk again")
            texts[doc] = read_checked_text(folder, doc)
        window = texts[doc][row["start"] : row["end"]]
        if chunk_id(doc, window) != row["chunk_id"]:
            raise StoreError("the sanitized store changed since chunk ran: run chunk again")
        chunk_rows.append(StoredChunk(row["chunk_id"], doc, row["idx"], row["start"], row["end"], window))
    record = records.document_record()
    documents = [records.document_row(listing.get(doc) or record(doc)) for doc in sorted(texts)]
    return chunk_rows, documents


def _documents(layout: Layout) -> list[Document]:
    """The sanitized listing's documents ([] without a listing: a store chunked by hand stands alone)."""
    return catalogue.read_documents(layout.sanitized_listing) if layout.sanitized_listing.exists() else []


def current_pages(layout: Layout, docs: set[str], listed: list[Document] | None = None) -> list[tuple[str, str]]:
    """``(doc, page map as JSON)`` of this sweep's paged documents, from the sanitized listing.

    The map was made by sanitize from the sanitized text (``sanitizing/pages.py``);
    a malformed one is left out rather than trusted (the catalogue reads it as none),
    and a document without one has no pages. ``listed``: the listing's documents when
    the caller has read them (else read here).
    """
    return [(document.doc, json.dumps(document.pages, separators=(",", ":")))
            for document in (_documents(layout) if listed is None else listed)
            if document.doc in docs and document.pages is not None]


def refresh_derived(layout: Layout, manifest) -> None:
    """Bring the derived search files of the manifest's model in step with ``vectors.db``.

    The embed stage calls this at its end, so the first search after a sweep
    opens ready files; building the ANN index of a large store takes minutes,
    which a search never waits for (it scans what the index lacks exactly).
    """
    from bastion_agent.embedding import ann, vectorfile

    db = vectorstore.connect(layout.vectors_db, create=False)
    try:
        header = vectorfile.refresh(db, layout, manifest.embed.vector_key, manifest.embed.dim)
    finally:
        db.close()
    files = vectorfile.Files.for_key(layout, manifest.embed.vector_key)
    vectors = vectorfile.VectorFile(files, header)
    target = getattr(manifest, "ann_recall", None) or ann.DEFAULT_TARGET  # [search] ann_recall
    ann.update(files, header, vectors, target=target)  # below ann.MIN_ROWS, or without numpy or FAISS, it does nothing
