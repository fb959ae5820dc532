"""What this bastion has to publish: its documents, read from vectors.db, each with its windows and vectors.

Only what already left the private stores: the sanitized windows and
paths, the groups, each document's date alone (the latest of its files'
times), each path's own groups and time, and the fields the document record
publishes. ``publish`` compares these with what the server holds.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from bastion_agent.core import access, dates, records
from bastion_agent.core.errors import StoreError
from bastion_agent.core.layout import Layout
from bastion_agent.embedding import vectorstore

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
