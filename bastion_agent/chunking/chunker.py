"""The ``chunk`` stage: sanitized text cut into overlapping windows of regex tokens, with content-addressed ids.

A window's id is the sha256 of its document's id and its text, so the same
window of the same document keeps its id, and a re-chunk of unchanged text
changes nothing downstream. Standard library only.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass

from bastion_agent.core.layout import Layout, write_private, write_summary
from bastion_agent.core.progress import Progress
from bastion_agent.core.records import ChunkRow
from bastion_agent.sanitizing.sanitized_store import (
    read_checked_text,
    sanitized_documents,
)

TOKEN_RE = re.compile(r"\w+|[^\w\s]")


CHUNKER_VERSION = 1


# --- chunk -----------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """A window's character span ``[start, end)`` and its token count."""

    start: int
    end: int
    tokens: int


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
    object per token (bench/embed/chunk_speed.py). A group takes fewer tokens than
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
        ChunkRow(chunk, doc, idx, start, end, end - start, tokens, CHUNKER_VERSION)
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
        for document in documents:
            doc = document.doc
            text = read_checked_text(sanitized, doc)
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
