"""The specification's ``chunk`` and ``embed`` stages, and ``search``.

``chunk`` cuts each sanitized document into overlapping windows of regex
tokens with content-addressed ids; ``embed`` sends the windows that have no
vector yet to the model server and keeps every vector in ``vectors.db``;
``search`` embeds a query the same way and ranks the current windows by
cosine similarity. Standard library only.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import json
import math
import operator
import os
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable, Sequence

from . import vectorstore, window_fit
from .client import EmbedClient, EndpointConfig
from .errors import ConfigError, ModelServerError, StoreError
from .layout import Layout, read_jsonl, write_private, write_summary
from .manifest import SEARCH_MODES
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
    return [Window(*span) for span in _windows(text, size, overlap)[0]]


# One token of TOKEN_RE, matched atomically so that a repeat never splits a word.
_ATOMIC_TOKEN = r"(?:\w++|[^\w\s])"


# The most tokens one regular-expression group takes: the last group of a
# text, which may be short, is counted again, so it must stay small.
PIECE_TOKENS = 32


def _step_pieces(size: int, overlap: int) -> tuple[int, ...]:
    """Token counts of the pieces one step is cut into; a piece boundary falls wherever a window starts or ends."""
    step = size - overlap
    remainder = overlap % step
    rest = step - remainder
    return (remainder,) * bool(remainder) + (PIECE_TOKENS,) * (rest // PIECE_TOKENS) + (rest % PIECE_TOKENS,) * bool(rest % PIECE_TOKENS)


@functools.lru_cache(maxsize=None)
def _step_re(pieces: tuple[int, ...]) -> re.Pattern:
    """One step of tokens: group ``i`` takes up to ``pieces[i - 1]`` tokens."""
    def piece(tokens: int) -> str:
        return rf"({_ATOMIC_TOKEN}(?:\s*+{_ATOMIC_TOKEN}){{0,{tokens - 1}}})"

    return re.compile(rf"\s*+{piece(pieces[0])}" + "".join(rf"(?:\s*+{piece(n)})?" for n in pieces[1:]))


def _windows(text: str, size: int, overlap: int) -> tuple[list[tuple[int, int, int]], int]:
    """The windows as ``(start, end, tokens)`` and the text's token count.

    Only the characters where windows start and end matter, and those are
    token boundaries at multiples of the step and at multiples of the step
    plus ``overlap % step``. So the text is cut into pieces of at most
    ``PIECE_TOKENS`` tokens with boundaries there, one regular-expression
    match per step: the same spans as walking every token, without a Python
    object per token (bench/chunk_speed.py). A group takes fewer tokens than
    its piece only where the text ends, so only the last is counted.
    """
    if not 0 <= overlap < size:
        raise ValueError(f"need 0 <= overlap ({overlap}) < size ({size})")
    step = size - overlap
    pieces = _step_pieces(size, overlap)
    groups = tuple(enumerate(pieces, start=1))
    starts: dict[int, int] = {}
    ends: dict[int, int] = {}
    count = 0
    last = None
    for match in _step_re(pieces).finditer(text):
        for group, tokens in groups:
            start, end = match.span(group)
            if start < 0:
                break
            starts[count] = start
            count += tokens
            ends[count] = end
            last = (start, end, tokens)
    if last is None:
        return [], 0
    short = last[2] - len(TOKEN_RE.findall(text, last[0], last[1]))  # only the last piece may be short
    if short:
        del ends[count]
        count -= short
        ends[count] = last[1]
    result = []
    first_token = 0
    while True:
        stop = min(first_token + size, count)
        result.append((starts[first_token] if first_token else 0, ends[stop] if stop < count else len(text),
                       stop - first_token))
        if stop == count:
            return result, count
        first_token += step


def chunk_id(doc: str, window_text: str) -> str:
    """``sha256(doc hex, NUL, window text)``: the same window of the same document keeps its id."""
    digest = hashlib.sha256(doc.encode("utf-8"))
    digest.update(b"\0")
    digest.update(window_text.encode("utf-8"))
    return digest.hexdigest()


def _chunk_ids(doc: str, text: str, spans: list[tuple[int, int, int]]) -> list[str]:
    """``chunk_id`` of each window, hashing the document's prefix once (and encoding ASCII text once)."""
    prefix = hashlib.sha256(doc.encode("utf-8") + b"\0")
    ids = []
    if text.isascii():
        data = memoryview(text.encode("ascii"))
        for start, end, _ in spans:
            digest = prefix.copy()
            digest.update(data[start:end])
            ids.append(digest.hexdigest())
    else:
        for start, end, _ in spans:
            digest = prefix.copy()
            digest.update(text[start:end].encode("utf-8"))
            ids.append(digest.hexdigest())
    return ids


def chunk_document(doc: str, text: str, size: int, overlap: int) -> list[ChunkRow]:
    """The rows of one document, in order."""
    spans = _windows(text, size, overlap)[0]
    return [
        ChunkRow(chunk, doc, idx, start, end, end - start, tokens)
        for idx, ((start, end, tokens), chunk) in enumerate(zip(spans, _chunk_ids(doc, text, spans)))
    ]


def run_chunk(manifest, layout: Layout) -> dict:
    """The ``chunk`` stage: sanitized store -> ``chunks.jsonl`` + ``chunk.summary.json``.

    Rows are formatted straight to JSON lines, exactly as ``write_jsonl``
    writes ``asdict(ChunkRow)`` (sorted keys), without the dataclass.
    """
    documents = sanitized_documents(layout)
    size, overlap = manifest.embed.size_tokens, manifest.embed.overlap_tokens
    sanitized = str(layout.sanitized_dir)
    lines: list[str] = []
    ids: set[str] = set()
    tokens = characters = 0
    with Progress("chunk", len(documents), "docs") as progress:
        for row in documents:
            doc = row["doc"]
            text = _read_text(sanitized, doc)
            spans, count = _windows(text, size, overlap)
            doc_json = json.dumps(doc, ensure_ascii=False)
            chunks = _chunk_ids(doc, text, spans)
            lines += [f'{{"chars": {end - start}, "chunk_id": "{chunk}", "doc": {doc_json}, "end": {end},'
                      f' "idx": {idx}, "start": {start}, "tokens": {tokens}, "v": {CHUNKER_VERSION}}}\n'
                      for idx, ((start, end, tokens), chunk) in enumerate(zip(spans, chunks))]
            ids.update(chunks)
            tokens += count
            characters += len(text)
            progress.advance()
    write_private(layout.chunks_path, "".join(lines))
    counts = {
        "documents": len(documents),
        "chunks": len(lines),
        "unique_chunks": len(ids),
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
    store is missing, or when the extract store holds a text that sanitize
    has not mapped to a document of the listing (sanitize has not run since
    extract). When the extract store has been deleted after sanitizing, the
    sanitized store stands alone.
    """
    from .sanitize import read_map

    if not layout.sanitized_listing.exists():
        raise StoreError(f"no sanitized store at {layout.sanitized_dir}: run sanitize first (chunk reads only sanitized text)")
    documents = sorted(read_jsonl(layout.sanitized_listing), key=lambda row: row["doc"])
    if layout.extract_listing.exists():
        sanitized = {row["doc"] for row in documents}
        mapped = read_map(layout)
        extracted = {row.get("key") for row in read_jsonl(layout.extract_listing) if row.get("status") == "extracted"}
        missing = [key for key in extracted if key not in mapped or mapped[key].doc not in sanitized]
        if missing:
            raise StoreError(
                f"the sanitized store lacks {len(missing)} text(s) that extract has read: run sanitize first"
            )
    return documents


LEGACY_STORE = ("the sanitized store names its documents by the raw files (an older agent wrote it), "
                "or was changed by hand: run sanitize again")


def _read_text(folder: str, doc: str) -> str:
    """A sanitized text, checked against its id (the sha256 of the text), without a Path per document."""
    try:
        with open(os.path.join(folder, doc + ".txt"), "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise StoreError(f"the sanitized store lacks document {doc[:12]}: run sanitize again") from None
    if hashlib.sha256(data).hexdigest() != doc:
        raise StoreError(LEGACY_STORE)
    return data.decode("utf-8")


def read_sanitized_text(layout: Layout, doc: str) -> str:
    return _read_text(str(layout.sanitized_dir), doc)


# --- embed -----------------------------------------------------------------


def run_embed(manifest, layout: Layout, client: EmbedClient | None = None, retry=None) -> dict:
    """The ``embed`` stage: ``chunks.jsonl`` -> ``vectors.db`` + ``embed.summary.json``.

    The probe runs before the store is opened or created: a wrong dimension
    or an unreachable server never touches ``vectors.db``. After it, the
    engine (``embed_engine``) retries, splits and isolates; ``retry`` is its
    ``RetryPolicy`` (tests inject sleep and clock). The summary is written
    whatever happens next (success, failed chunks, the server gone for good,
    Ctrl-C); failed chunks then make the stage exit non-zero, and the next
    run retries exactly the chunks that still have no vector.
    """
    from .embed_engine import EmbedStats

    started = time.monotonic()
    chunk_rows, documents = current_windows(layout)
    client = client or EmbedClient(EndpointConfig.from_env(), manifest.embed.model)
    key = manifest.embed.vector_key
    probed = not all_embedded(layout, key, manifest.embed.dim, chunk_rows)
    # Nothing to embed: no request at all, so a sweep of an unchanged folder
    # works while the model server is down (the summary says it was not probed).
    api = client.probe(manifest.embed.dim) if probed else _previous_api(layout)
    # What the server serves and its context (model_info); a model it does not list stops here.
    server = window_fit.check_server(client, manifest.embed.model, api) if probed else None
    fit = None
    stats = EmbedStats(batch_size_final=client.config.batch)
    db = vectorstore.connect(layout.vectors_db, create=True)
    try:
        rebuilding = vectorstore.rekey_pending(db)  # a store of old, raw-file ids (legacy_ids.py)
        removed = vectorstore.replace_chunks(db, chunk_rows, documents)
        if rebuilding:
            from . import legacy_ids

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


def all_embedded(layout: Layout, key: str, dim: int, chunk_rows: list[tuple]) -> bool:
    """Whether every window of this sweep already has a vector of ``key`` and ``dim`` (read only)."""
    if not layout.vectors_db.exists():
        return not chunk_rows
    db = vectorstore.connect(layout.vectors_db, create=False)
    try:  # primary-key lookups, stopping at the first window without a vector
        lookup = "SELECT 1 FROM vectors WHERE chunk_id = ? AND model = ? AND dim = ?"
        return all(db.execute(lookup, (row[0], key, dim)).fetchone() for row in chunk_rows)
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
    """The summary's counts: the specification's fields, then what this run met."""
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
        "truncated": stats.truncated,
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

    ``stats`` (an ``embed_engine.EmbedStats``) is updated as batches commit.
    """
    from .embed_engine import EmbedStats, embed_chunks

    stats = stats if stats is not None else EmbedStats()
    embed = manifest.embed
    embed_chunks(db, client, embed.vector_key, embed.dim, embed.passage_prefix, missing, stats, retry)
    return stats.batches


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
            if listing and doc not in listing:
                raise StoreError(f"{layout.chunks_path.name} names a document the sanitized store does not have: run chunk again")
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
    relevance: int = 0  # 0-100, the same scale for every query and mode (fusion.py)
    vector_score: float | None = None  # the window's cosine, when the vector side returned it
    vector_rank: int | None = None
    keyword_score: float | None = None  # its BM25, when the keyword side returned it
    keyword_rank: int | None = None


@dataclass(frozen=True)
class Answer:
    """What a search returns: the hits, the mode that answered, and why it differs from the one asked."""

    hits: list[Hit]
    mode: str
    fallback: str | None = None  # "keyword" when the model server was down and keyword search answered
    notice: str | None = None  # one line saying so


DEFAULT_MODE = "hybrid"  # the best of the three on Cranfield and SciFact (docs/search.md)
FUSION_CANDIDATES = 100  # how deep each ranking goes into fusion
RESCORE_MARGIN = 16  # extra candidates re-scored from the database, so float32 near-ties rank alike


def needs_vector(mode: str) -> bool:
    """Whether a search in ``mode`` needs the query's vector (keyword search does not)."""
    return mode != "keyword"


def resolve_mode(manifest, mode: str | None) -> str:
    """The command line's mode, else the manifest's ``[search] mode``, else ``DEFAULT_MODE``."""
    chosen = mode or getattr(manifest, "search_mode", None) or DEFAULT_MODE
    if chosen not in SEARCH_MODES:
        raise ConfigError(f"search mode must be one of {', '.join(SEARCH_MODES)}; got {chosen!r}")
    return chosen


class SearchIndex:
    """One model's searchable state, opened once and kept warm.

    ``search`` for the CLI opens one per query; ``serve`` keeps one and
    reloads it when ``vectors.db`` changes (``is_current``). Opening brings
    the derived vector file (``vectorfile``) and, above ``ann.MIN_ROWS``
    current vectors, the ANN index (``ann``) in step with the database, then
    memory-maps them: no vector is read from SQLite per query. Candidates
    are re-scored from the database's own vectors and their windows read from
    its ``chunks`` table, so only this sweep's windows (never stale vectors)
    appear, whatever the derived files hold.
    """

    def __init__(self, manifest, layout: Layout, vectors, ann_index, version: tuple):
        import sqlite3
        import threading

        self.layout = layout
        self.key = manifest.embed.vector_key
        self.dim = manifest.embed.dim
        self.default_mode = resolve_mode(manifest, None)
        self.vectors = vectors
        self.ann = ann_index
        self.version = version
        self.loaded_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.lock = threading.Lock()
        self._vocabulary = None
        self._floor: float | None = None
        self.db = sqlite3.connect(layout.vectors_db, timeout=vectorstore.BUSY_TIMEOUT_MS / 1000,
                                  isolation_level=None, check_same_thread=False)

    @classmethod
    def load(cls, manifest, layout: Layout, *, use_numpy: bool | None = None, use_ann: bool = True,
             vectors: bool = True) -> "SearchIndex":
        """Open the manifest's model, refreshing the derived files first when the database moved on.

        ``use_numpy=False`` forces the pure-Python scan (``True`` requires
        numpy); ``use_ann=False`` never opens the ANN index; ``vectors=False``
        opens only what keyword search reads (a one-off keyword query).
        """
        from . import ann, vectorfile

        version = store_version(layout)
        db = vectorstore.connect(layout.vectors_db, create=False)
        try:
            if vectorstore.rekey_pending(db):
                raise StoreError("this output folder was written with document ids taken from the raw files: "
                                 "run sweep (or chunk and embed) to rebuild it")
            if not vectors:
                return cls(manifest, layout, None, None, version)
            header = vectorfile.refresh(db, layout, manifest.embed.vector_key, manifest.embed.dim)
        finally:
            db.close()
        files = vectorfile.Files.for_key(layout, manifest.embed.vector_key)
        vectors = vectorfile.VectorFile(files, header, use_numpy)
        ann_index = None
        if use_ann and vectors.np is not None and vectors.current >= ann.MIN_ROWS and ann.available():
            header = ann.update(files, header, vectors, limit=ann.LAZY_ROWS)
            if header.get("ann_rows"):
                try:
                    ann_index = ann.AnnIndex(files, header, vectors)
                except (StoreError, RuntimeError, ValueError, OSError):
                    ann_index = None  # an unreadable index only costs speed: scan exactly, and rebuild after embed
        return cls(manifest, layout, vectors, ann_index, version)

    def __len__(self) -> int:
        """How many current windows have a vector of this model (0 when opened without vectors)."""
        return self.vectors.current if self.vectors is not None else 0

    def close(self) -> None:
        if self._vocabulary is not None:
            self._vocabulary.close()
        self.db.close()

    def is_current(self) -> bool:
        """False once ``vectors.db`` has changed since this index was loaded."""
        return store_version(self.layout) == self.version

    def search(self, query: str, query_vector: Sequence[float] | None, k: int, mode: str | None = None,
               exact: bool = False) -> list[Hit]:
        """The top ``k`` hits; ``query_vector`` may be None in keyword mode.

        ``mode`` is vector, keyword or hybrid (None: the manifest's default);
        ``exact`` scans every vector even where the ANN index would answer.
        """
        from . import fusion, keyword

        mode = mode or self.default_mode
        if mode not in SEARCH_MODES:
            raise ConfigError(f"search mode must be one of {', '.join(SEARCH_MODES)}; got {mode!r}")
        if needs_vector(mode) and query_vector is not None and len(query_vector) != self.dim:
            raise ModelServerError(f"the query vector has {len(query_vector)} dimensions, the manifest says dim = {self.dim}")
        with self.lock:
            if mode == "keyword":
                ranked = fusion.keyword_only(keyword.top(self.db, query, k, self.vocabulary()))
            elif mode == "vector":
                ranked = fusion.vector_only(self._vector_top(query_vector, k, exact), self.cosine_floor())
            else:
                ranked = self._hybrid(query, query_vector, k, exact)
            return self._hits(ranked)

    def _hybrid(self, query: str, query_vector, k: int, exact: bool) -> list:
        from . import fusion, keyword

        depth = max(FUSION_CANDIDATES, k)
        by_vector = self._vector_top(query_vector, depth, exact)
        by_keyword = keyword.top(self.db, query, depth, self.vocabulary())
        seen = {chunk for _, chunk in by_vector}
        others = self._cosines_of(query_vector, [hit.chunk_id for hit in by_keyword if hit.chunk_id not in seen])
        return fusion.fuse(by_vector, by_keyword, others, self.cosine_floor(), k)

    def vocabulary(self):
        """The keyword side's cache for this store (made on first use; the index is dropped when the store changes)."""
        from . import keyword

        if self._vocabulary is None:
            self._vocabulary = keyword.Vocabulary(self.db) if keyword.has_index(self.db) else None
        return self._vocabulary

    def cosine_floor(self) -> float:
        """The median cosine between windows of this store taken at random: what "unrelated" scores here."""
        from . import fusion

        if self._floor is None:
            self._floor = fusion.cosine_floor(self._sample_cosines(fusion.FLOOR_SAMPLE))
        return self._floor

    def _sample_cosines(self, count: int) -> list[float]:
        """Cosines between ``count`` current rows of the vector file spread evenly over it (read from the map)."""
        vectors = self.vectors
        if vectors is None or not vectors.rows:
            return []
        step = max(1, vectors.rows // count)
        positions = [p for p in range(0, vectors.rows, step) if vectors.is_current_row(p)][:count]
        if vectors.np is not None:
            np = vectors.np
            rows = np.asarray(vectors.matrix[positions], dtype=np.float64)
            norms = np.linalg.norm(rows, axis=1)
            rows = rows[norms > 0] / norms[norms > 0, None]
            products = rows @ rows.T
            return products[np.triu_indices(len(rows), 1)].tolist()
        rows = [vectors.flat[p * self.dim:(p + 1) * self.dim] for p in positions]
        norms = [math.sqrt(math.fsum(x * x for x in row)) for row in rows]
        return [cosine(rows[i], norms[i], rows[j]) for i in range(len(rows)) for j in range(i + 1, len(rows))
                if norms[i] > 0]

    def _cosines_of(self, query_vector, chunk_ids: list[str]) -> dict[str, float]:
        """The cosine of each listed window's stored vector with the query (windows without one are left out)."""
        if query_vector is None or not chunk_ids:
            return {}
        marks = ",".join("?" * len(chunk_ids))
        found = self.db.execute(f"SELECT chunk_id, vec FROM vectors WHERE chunk_id IN ({marks}) AND model = ? AND dim = ?",
                                (*chunk_ids, self.key, self.dim)).fetchall()
        scores = cosines(query_vector, [blob for _, blob in found], self.dim,
                         self.vectors.np if self.vectors is not None else None)
        return {chunk: score for (chunk, _), score in zip(found, scores)}

    def _vector_top(self, query_vector, n: int, exact: bool) -> list[tuple[float, str]]:
        """``(cosine, chunk_id)`` of the ``n`` nearest current windows, scored from the database's vectors."""
        if query_vector is None or not len(self):
            return []
        want = n + RESCORE_MARGIN
        candidates = self.ann.top(query_vector, want) if self.ann and not exact else self.vectors.top(query_vector, want)
        rowids = [self.vectors.rowid(position) for _, position in candidates]
        found = []
        for first in range(0, len(rowids), 500):
            part = rowids[first : first + 500]
            marks = ",".join("?" * len(part))
            found += self.db.execute(
                f"SELECT c.chunk_id, v.vec FROM vectors v JOIN chunks c ON c.chunk_id = v.chunk_id"
                f" WHERE v.rowid IN ({marks}) AND v.model = ? AND v.dim = ?", (*part, self.key, self.dim)).fetchall()
        scores = cosines(query_vector, [blob for _, blob in found], self.dim, self.vectors.np)
        scored = sorted(zip(scores, (chunk for chunk, _ in found)), key=lambda item: (-item[0], item[1]))
        return scored[:n]

    def _hits(self, ranked: list) -> list[Hit]:
        """``fusion.Scored`` rows as hits, with their windows' text and paths."""
        if not ranked:
            return []
        marks = ",".join("?" * len(ranked))
        rows = {row[0]: row for row in self.db.execute(
            f'SELECT chunk_id, doc, idx, start, "end", text FROM chunks WHERE chunk_id IN ({marks})',
            [item.chunk_id for item in ranked])}
        paths = vectorstore.document_paths(self.db, (row[1] for row in rows.values()))
        return [
            Hit(item.score, doc, idx, item.chunk_id, text, paths.get(doc, []), start, end, item.relevance,
                item.vector_score, item.vector_rank, item.keyword_score, item.keyword_rank)
            for item in ranked if item.chunk_id in rows
            for _, doc, idx, start, end, text in (rows[item.chunk_id],)
        ]


def cosines(query: Sequence[float], blobs: list[bytes], dim: int, np=None) -> list[float]:
    """Float64 cosine of ``query`` with each packed vector (0.0 for a zero vector), with numpy when given."""
    if np is None or not blobs:
        query_norm = math.sqrt(math.fsum(x * x for x in query))
        return [cosine(query, query_norm, vectorstore.unpack(blob)) for blob in blobs]
    matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(-1, dim).astype(np.float64)
    q = np.asarray(query, dtype=np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix)) * math.sqrt(float(q @ q))
    dots = np.einsum("ij,j->i", matrix, q)
    return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0).tolist()


def refresh_derived(layout: Layout, manifest) -> None:
    """Bring the derived search files of the manifest's model in step with ``vectors.db``.

    The embed stage calls this at its end, so the first search after a sweep
    opens ready files; building the ANN index of a large store takes minutes,
    which a search never waits for (it scans what the index lacks exactly).
    """
    from . import ann, vectorfile

    db = vectorstore.connect(layout.vectors_db, create=False)
    try:
        header = vectorfile.refresh(db, layout, manifest.embed.vector_key, manifest.embed.dim)
    finally:
        db.close()
    files = vectorfile.Files.for_key(layout, manifest.embed.vector_key)
    vectors = vectorfile.VectorFile(files, header)
    if vectors.np is not None and ann.available():
        ann.update(files, header, vectors)


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
           mode: str | None = None, exact: bool = False) -> list[Hit]:
    """The top ``k`` current windows for ``query``, best first (``answer`` without the keyword fallback).

    ``mode`` (vector, keyword, hybrid) defaults to the manifest's ``[search]
    mode``, else ``DEFAULT_MODE``. Keyword search never calls the model
    server; a model with no vectors gives ``[]`` in the other modes without
    calling it either. An unreachable model server raises ``ModelServerError``.
    """
    return answer(manifest, layout, query, k, client, mode, exact, fallback=False).hits


def fallback_notice(mode: str, error: Exception) -> str:
    """The one line that says keyword search answered instead of ``mode``."""
    return f"the model server is unavailable ({error}); answered with keyword search instead of {mode} search"


def answer(manifest, layout: Layout, query: str, k: int = DEFAULT_K, client: EmbedClient | None = None,
           mode: str | None = None, exact: bool = False, fallback: bool = True) -> Answer:
    """``search``, and when the model server cannot embed the query, keyword search with a notice saying so.

    Keyword search needs only ``vectors.db``, so a model server that is down
    (or answers nonsense) costs the meaning side of a query, not the answer.
    ``fallback=False`` raises the ``ModelServerError`` instead.
    """
    if not query.strip():
        raise ConfigError("the query is empty")
    if k < 1:
        raise ConfigError(f"k must be a whole number >= 1; got {k}")
    mode = resolve_mode(manifest, mode)
    index = SearchIndex.load(manifest, layout, vectors=needs_vector(mode))
    try:
        if needs_vector(mode) and not len(index):
            return Answer([], mode)
        try:
            vector = embed_query(manifest, query, client) if needs_vector(mode) else None
        except ModelServerError as exc:
            if not fallback:
                raise
            return Answer(index.search(query, None, k, "keyword"), "keyword", "keyword", fallback_notice(mode, exc))
        return Answer(index.search(query, vector, k, mode, exact=exact), mode)
    finally:
        index.close()


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
