"""The specification's ``chunk`` and ``embed`` stages, and ``search``.

``chunk`` cuts each sanitized document into overlapping windows of regex
tokens with content-addressed ids; ``embed`` sends the windows that have no
vector yet to the model server and keeps every vector in ``vectors.db``;
``search`` embeds a query the same way and ranks the current windows by
cosine similarity. Standard library only.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import math
import operator
import re
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Sequence

from . import vectorstore
from .client import EmbedClient, EndpointConfig
from .errors import ConfigError, StoreError
from .layout import Layout, read_jsonl, write_jsonl, write_summary
from .progress import Progress

TOKEN_RE = re.compile(r"\w+|[^\w\s]")
CHUNKER_VERSION = 1
DEFAULT_K = 5


# --- chunk -----------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """A window's character span ``[start, end)`` and its token count."""

    start: int
    end: int
    tokens: int


@dataclass(frozen=True)
class ChunkRow:
    """One row of ``chunks.jsonl``."""

    chunk_id: str
    doc: str
    idx: int
    start: int
    end: int
    chars: int
    tokens: int
    v: int = CHUNKER_VERSION


def windows(text: str, size: int, overlap: int) -> list[Window]:
    """Windows of ``size`` tokens advancing by ``size - overlap``; the last may be shorter.

    The first window starts at the first character and the last ends at the
    last one, so with any overlap every character of the text is inside at
    least one window; a text without tokens has no window.
    """
    if not 0 <= overlap < size:
        raise ValueError(f"need 0 <= overlap ({overlap}) < size ({size})")
    spans = [match.span() for match in TOKEN_RE.finditer(text)]
    result = []
    step = size - overlap
    first = 0
    while spans:
        last = min(first + size, len(spans)) - 1
        start = 0 if first == 0 else spans[first][0]
        end = len(text) if last == len(spans) - 1 else spans[last][1]
        result.append(Window(start, end, last - first + 1))
        if last == len(spans) - 1:
            break
        first += step
    return result


def chunk_id(doc: str, window_text: str) -> str:
    """``sha256(doc hex, NUL, window text)``: the same window of the same document keeps its id."""
    digest = hashlib.sha256(doc.encode("utf-8"))
    digest.update(b"\0")
    digest.update(window_text.encode("utf-8"))
    return digest.hexdigest()


def chunk_document(doc: str, text: str, size: int, overlap: int) -> list[ChunkRow]:
    """The rows of one document, in order."""
    return [
        ChunkRow(chunk_id(doc, text[w.start : w.end]), doc, idx, w.start, w.end, w.end - w.start, w.tokens)
        for idx, w in enumerate(windows(text, size, overlap))
    ]


def run_chunk(manifest, layout: Layout) -> dict:
    """The ``chunk`` stage: sanitized store -> ``chunks.jsonl`` + ``chunk.summary.json``."""
    documents = sanitized_documents(layout)
    size, overlap = manifest.embed.size_tokens, manifest.embed.overlap_tokens
    rows: list[ChunkRow] = []
    tokens = characters = 0
    with Progress("chunk", len(documents), "docs") as progress:
        for row in documents:
            text = read_sanitized_text(layout, row["doc"])
            doc_rows = chunk_document(row["doc"], text, size, overlap)
            rows.extend(doc_rows)
            tokens += len(TOKEN_RE.findall(text))
            characters += len(text)
            progress.advance()
    write_jsonl(layout.chunks_path, (asdict(row) for row in rows))
    counts = {
        "documents": len(documents),
        "chunks": len(rows),
        "unique_chunks": len({row.chunk_id for row in rows}),
        "tokens": tokens,
        "characters": characters,
        "size_tokens": size,
        "overlap_tokens": overlap,
        "v": CHUNKER_VERSION,
    }
    return write_summary(layout, "chunk", counts, manifest.signature)


def sanitized_documents(layout: Layout) -> list[dict]:
    """The sanitized listing, sorted by doc, after the sanitize-first guard.

    Chunk reads only sanitized text. It refuses to run when the sanitized
    store is missing, or when it lacks a document that the extract listing
    has read (sanitize has not run since extract). When the extract store
    has been deleted after sanitizing, the sanitized store stands alone.
    """
    if not layout.sanitized_listing.exists():
        raise StoreError(f"no sanitized store at {layout.sanitized_dir}: run sanitize first (chunk reads only sanitized text)")
    documents = sorted(read_jsonl(layout.sanitized_listing), key=lambda row: row["doc"])
    if layout.extract_listing.exists():
        sanitized = {row["doc"] for row in documents}
        extracted = {row["doc"] for row in read_jsonl(layout.extract_listing) if row.get("status") == "extracted"}
        missing = extracted - sanitized
        if missing:
            raise StoreError(
                f"the sanitized store lacks {len(missing)} document(s) that extract has read: run sanitize first"
            )
    return documents


def read_sanitized_text(layout: Layout, doc: str) -> str:
    path = layout.doc_text_path(layout.sanitized_dir, doc)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StoreError(f"the sanitized store lacks document {doc[:12]}: run sanitize again") from None


# --- embed -----------------------------------------------------------------


def run_embed(manifest, layout: Layout, client: EmbedClient | None = None) -> dict:
    """The ``embed`` stage: ``chunks.jsonl`` -> ``vectors.db`` + ``embed.summary.json``.

    The probe runs before the store is opened or created: a wrong dimension
    or an unreachable server never touches ``vectors.db``.
    """
    started = time.monotonic()
    chunk_rows, documents = current_windows(layout)
    client = client or EmbedClient(EndpointConfig.from_env(), manifest.embed.model)
    api = client.probe(manifest.embed.dim)
    key = manifest.embed.vector_key
    db = vectorstore.connect(layout.vectors_db, create=True)
    try:
        vectorstore.replace_chunks(db, chunk_rows, documents)
        missing = vectorstore.missing_chunks(db, key)
        batches = embed_missing(db, client, manifest, missing)
        unique = vectorstore.count(db, "SELECT COUNT(*) FROM chunks")
        counts = {
            "model": manifest.embed.model,
            "vector_key": key,
            "dim": manifest.embed.dim,
            "api": api,
            "url": client.config.display_url,
            "documents": len(documents),
            "windows": len(chunk_rows),
            "chunks": unique,
            "embedded": len(missing),
            "reused": unique - len(missing),
            "batches": batches,
            "stale_vectors": vectorstore.stale_vector_count(db),
            "stale_vectors_this_model": vectorstore.stale_vector_count(db, key),
            "seconds": round(time.monotonic() - started, 3),
        }
    finally:
        db.close()
    return write_summary(layout, "embed", counts, manifest.signature)


def embed_missing(db, client: EmbedClient, manifest, missing: Sequence[tuple[str, str]]) -> int:
    """Embed ``(chunk_id, text)`` pairs in batches, one transaction each; return the batch count."""
    size = client.config.batch
    key, dim, prefix = manifest.embed.vector_key, manifest.embed.dim, manifest.embed.passage_prefix
    batches = 0
    with Progress("embed", len(missing), "chunks") as progress:
        for first in range(0, len(missing), size):
            batch = missing[first : first + size]
            vectors = client.embed([prefix + text for _, text in batch])
            created = datetime.now(timezone.utc).isoformat(timespec="seconds")
            rows = [(chunk_id, vectorstore.pack(vector)) for (chunk_id, _), vector in zip(batch, vectors)]
            vectorstore.add_vectors(db, key, dim, rows, created)
            batches += 1
            progress.advance(len(batch))
    return batches


def current_windows(layout: Layout) -> tuple[list[tuple], list[tuple]]:
    """This sweep's ``(chunk_id, doc, idx, start, end, text)`` rows and ``(doc, paths)`` rows.

    Each window's text is cut from the sanitized store and its id checked
    again, so a sanitized store changed since ``chunk`` is caught here.
    """
    if not layout.chunks_path.exists():
        raise StoreError(f"no {layout.chunks_path.name} in {layout.root}: run chunk first")
    rows = read_jsonl(layout.chunks_path)
    listing = {row["doc"]: row for row in read_jsonl(layout.sanitized_listing)} if layout.sanitized_listing.exists() else {}
    texts: dict[str, str] = {}
    chunk_rows = []
    for row in rows:
        doc = row["doc"]
        if doc not in texts:
            texts[doc] = read_sanitized_text(layout, doc)
        window = texts[doc][row["start"] : row["end"]]
        if chunk_id(doc, window) != row["chunk_id"]:
            raise StoreError("the sanitized store changed since chunk ran: run chunk again")
        chunk_rows.append((row["chunk_id"], doc, row["idx"], row["start"], row["end"], window))
    documents = [(doc, json.dumps(listing.get(doc, {}).get("paths", []))) for doc in sorted(texts)]
    return chunk_rows, documents


# --- search ----------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    """One search result: a sanitized window and where it comes from."""

    score: float
    doc: str
    idx: int
    chunk_id: str
    text: str
    paths: list[str]
    start: int
    end: int


class SearchIndex:
    """The current windows and vectors of one model, loaded once and kept warm.

    ``search`` for the CLI loads one per query; ``serve`` keeps one and
    reloads it when ``vectors.db`` changes (``is_current``). Stale vectors
    (chunks not in this sweep) are never loaded, so they never appear.
    """

    def __init__(self, layout: Layout, key: str, rows: list[tuple], paths: dict[str, list[str]], version: tuple):
        self.layout = layout
        self.key = key
        self.rows = rows  # (chunk_id, doc, idx, start, end, text, packed vector)
        self.paths = paths
        self.version = version
        self.loaded_at = datetime.now(timezone.utc).isoformat(timespec="seconds")

    @classmethod
    def load(cls, manifest, layout: Layout) -> "SearchIndex":
        """Read one consistent snapshot of the manifest's model from ``vectors.db``."""
        version = store_version(layout)
        db = vectorstore.connect(layout.vectors_db, create=False)
        try:
            with vectorstore.transaction(db, write=False):  # one snapshot, even while embed writes
                rows = list(vectorstore.searchable(db, manifest.embed.vector_key))
                paths = vectorstore.document_paths(db, (row[1] for row in rows))
        finally:
            db.close()
        return cls(layout, manifest.embed.vector_key, rows, paths, version)

    def __len__(self) -> int:
        return len(self.rows)

    def is_current(self) -> bool:
        """False once ``vectors.db`` has changed since this index was loaded."""
        return store_version(self.layout) == self.version

    def search(self, query: str, query_vector: Sequence[float], k: int, mode: str = "vector") -> list[Hit]:
        """The top ``k`` hits for a query already embedded as ``query_vector``."""
        if mode != "vector":
            raise ConfigError(f"search mode {mode!r} is not available; use vector")
        best = top_k(query_vector, self.rows, k)
        return [
            Hit(score, doc, idx, chunk_id_, text, self.paths.get(doc, []), start, end)
            for score, (chunk_id_, doc, idx, start, end, text, _) in best
        ]


def store_version(layout: Layout) -> tuple:
    """What changes when a writer commits to ``vectors.db`` (the file or its WAL)."""
    parts = []
    for path in (layout.vectors_db, layout.vectors_db.with_name(layout.vectors_db.name + "-wal")):
        try:
            stat = path.stat()
            parts.append((stat.st_mtime_ns, stat.st_size, stat.st_ino))
        except FileNotFoundError:
            parts.append(None)
    return tuple(parts)


def embed_query(manifest, query: str, client: EmbedClient | None = None) -> list[float]:
    """The query's vector, with the manifest's query prefix, through the same endpoint."""
    client = client or EmbedClient(EndpointConfig.from_env(), manifest.embed.model)
    if client.dim is None:
        client.probe(manifest.embed.dim)
    (vector,) = client.embed([manifest.embed.query_prefix + query])
    return vector


def search(manifest, layout: Layout, query: str, k: int = DEFAULT_K, client: EmbedClient | None = None,
           mode: str = "vector") -> list[Hit]:
    """The top ``k`` current windows for ``query``, best first.

    A model with no vectors gives ``[]`` without calling the model server.
    """
    if not query.strip():
        raise ConfigError("the query is empty")
    if k < 1:
        raise ConfigError(f"k must be a whole number >= 1; got {k}")
    index = SearchIndex.load(manifest, layout)
    if not len(index):
        return []
    return index.search(query, embed_query(manifest, query, client), k, mode)


def cosine(query: Sequence[float], query_norm: float, vector: Sequence[float]) -> float:
    """Cosine similarity; 0.0 when either vector has no length."""
    norm = math.sqrt(math.fsum(map(operator.mul, vector, vector)))
    if norm == 0.0 or query_norm == 0.0:
        return 0.0
    return sum(map(operator.mul, query, vector)) / (query_norm * norm)


def top_k(query: Sequence[float], rows: Iterable[tuple], k: int) -> list[tuple[float, tuple]]:
    """``(score, row)`` of the ``k`` best rows (``row[-1]`` is the packed vector); ties by chunk id."""
    query_norm = math.sqrt(math.fsum(x * x for x in query))
    scored = ((cosine(query, query_norm, vectorstore.unpack(row[-1])), row) for row in rows)
    return heapq.nsmallest(k, scored, key=lambda item: (-item[0], item[1][0]))
