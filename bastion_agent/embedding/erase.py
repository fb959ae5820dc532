"""Erasing vectors: the two exceptions to "vectors are only ever added".

- **Superseded documents** (remediation). When sanitize's result for an
  unchanged raw text changes (a new rule, an allow-list change, an
  upgrade), sanitize lists the old document in the private extract store
  (``sanitized_store.documents_to_erase``). Its windows' ids and vectors were
  computed from text the current sanitizer would not let out, so the embed
  stage erases them first thing, before it probes the model server (an
  unreachable server must not keep a leak alive), and ``prune`` does too.
- **Stale vectors** on request (``prune``): vectors whose window is not in
  this sweep, of every model or of one.

A superseded document's keyed id leaves the audit log as well
(``audit.forget_documents``). Either way the bytes leave ``vectors.db`` (``secure_delete``, the keyword
index merged, the WAL truncated: ``vectorstore.scrub``) and ``index/``: every
vector key's derived files are rebuilt (a new build; the old build's files
are deleted), since a deleted vector makes them disagree with the database.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bastion_agent.core import audit
from bastion_agent.core.errors import StoreError
from bastion_agent.core.layout import Layout, read_jsonl
from bastion_agent.embedding import reader_sets, vectorfile, vectorstore
from bastion_agent.sanitizing.sanitized_store import documents_erased, documents_to_erase


@dataclass
class Erased:
    """What an erasure removed: counts only (no id, no text)."""

    superseded_documents: int = 0
    stale_vectors: int = 0
    stale_by_model: dict[str, int] = field(default_factory=dict)
    kept_vectors: int = 0


def erase_superseded(layout: Layout) -> int:
    """Erase the documents sanitize superseded; return how many documents were erased.

    Nothing to do (no list, or no ``vectors.db`` yet) costs a file check.
    The list is emptied only once the database and ``index/`` are clean, so
    a crash midway erases again on the next run.
    """
    docs = documents_to_erase(layout)
    if not docs:
        return 0
    if layout.vectors_db.exists():
        db = vectorstore.connect(layout.vectors_db, create=False)
        try:
            vectorstore.erase_documents(db, docs)
            reader_sets.merge(db)  # the erased windows' words leave their reader sets' indexes too
            vectorstore.scrub(db)
            refresh_every_key(db, layout)
        finally:
            db.close()
    audit.forget_documents(layout, docs)  # their keyed ids leave the audit log too, before the list is emptied
    documents_erased(layout, docs)
    return len(docs)


def prune(layout: Layout, model: str | None = None) -> Erased:
    """``prune``: erase superseded documents, then the stale vectors (of ``model``, or every model).

    Stale means: its window is neither in ``vectors.db``'s ``chunks`` (the
    last embed's windows) nor in ``chunks.jsonl`` (the last chunk's), so a
    vector the next embed would reuse is never erased.
    """
    if not layout.vectors_db.exists():
        raise StoreError(f"no vector store at {layout.vectors_db}: run embed (or sweep) first")
    keep = chunked_ids(layout)
    result = Erased(superseded_documents=erase_superseded(layout))
    db = vectorstore.connect(layout.vectors_db, create=False)
    try:
        result.stale_by_model = vectorstore.erase_stale(db, model, keep)
        result.stale_vectors = sum(result.stale_by_model.values())
        reader_sets.merge(db)
        vectorstore.scrub(db)
        refresh_every_key(db, layout)
        result.kept_vectors = vectorstore.count(db, "SELECT COUNT(*) FROM vectors")
    finally:
        db.close()
    return result


def chunked_ids(layout: Layout) -> set[str]:
    """The chunk ids of ``chunks.jsonl`` (none when there is none)."""
    if not layout.chunks_path.exists():
        return set()
    try:
        return {str(row["chunk_id"]) for row in read_jsonl(layout.chunks_path)}
    except (OSError, ValueError, TypeError, KeyError):
        raise StoreError(f"{layout.chunks_path.name} in {layout.root} is unreadable: run chunk again") from None


def refresh_every_key(db, layout: Layout) -> None:
    """Rebuild the derived files of every vector key that has them, so no deleted vector stays in ``index/``.

    ``vectorfile.refresh`` sees the deletion (the vectors generation moved),
    writes a new build from the database and deletes the old build's files
    (the ANN index of a build included). A header that cannot be read is
    removed with its files: search rebuilds them when it needs them.
    """
    folder = layout.root / vectorfile.INDEX_DIR
    if not folder.is_dir():
        return
    for header_path in sorted(folder.glob("*.json")):
        files = vectorfile.Files(folder, header_path.stem)
        header = vectorfile.read_header(files)
        key, dim = (header or {}).get("key"), (header or {}).get("dim")
        if isinstance(key, str) and isinstance(dim, int) and vectorfile.Files.for_key(layout, key) == files:
            vectorfile.refresh(db, layout, key, dim)
        else:
            remove_files(files)


def remove_files(files: vectorfile.Files) -> None:
    """Delete a key's header and data files (not its lock file, which other processes may hold)."""
    import contextlib

    for path in [files.header, *files.folder.glob(f"{files.name}.*.*")]:
        if not path.name.endswith(".lock"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
