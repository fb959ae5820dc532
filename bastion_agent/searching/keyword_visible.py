"""Keyword search for a caller who may see only some windows: BM25 over those windows alone.

Joining FTS5's ranking to the caller's windows would rank the right
windows, but FTS5's ``bm25()`` weighs each word by how many windows of the
*whole* index hold it, and by their average length: a caller could then
tell from a hit's score (or its relevance) whether a document it may not
see holds the words it searched. So for such a caller every statistic is
taken over its own windows (the temporary table ``Visible.table``):

- document frequencies are counted over the caller's windows (capped like
  ``keyword.capped_count``), and so is the window count ``N``;
- the average length is that of the caller's windows (FTS5's own token
  counts, ``chunks_fts_docsize``);
- each word's count in a window is read with FTS5's ``highlight()`` over
  the candidate windows (the word searched alone marks each occurrence).

The score is FTS5's BM25 formula (k1 = 1.2, b = 0.75, its idf floored just
above zero) computed from those numbers, and the same planning as
``keyword.top`` (rarest words first, a budget of windows to rank, the
bounded fallback for common words). On a store where the caller's windows
are all there is, the scores equal FTS5's own to rounding.
"""

from __future__ import annotations

import math
import sqlite3

from bastion_agent.core.errors import ConfigError
from bastion_agent.searching.keyword import (
    BOUNDED_RANK,
    WORD_RE,
    MAX_DF_SHARE,
    RANK_BUDGET,
    KeywordHit,
    Term,
    Vocabulary,
    _varint,
    has_index,
    idf,
    plan,
    query_words,
)

K1 = 1.2
B = 0.75
OPEN, CLOSE = "\x01", "\x02"  # highlight() marks; sanitized text holds no control characters of this kind


def caller_top(db: sqlite3.Connection, text: str, n: int, vocabulary: Vocabulary | None, visible) -> list[KeywordHit]:
    """The ``n`` best of the caller's windows for ``text``, best first, scored from the caller's windows only."""
    if not WORD_RE.search(text):
        return []
    if not has_index(db):
        raise ConfigError("this Python's SQLite has no FTS5, which keyword and hybrid search need; use --mode vector")
    own = vocabulary is None
    vocabulary = vocabulary or Vocabulary(db)
    try:
        with vocabulary.lock:
            words = vocabulary._one_per_stem(query_words(text)) if query_words(text) else []
    finally:
        if own:
            vocabulary.close()
    windows = visible.windows
    if not words or not windows:
        return []
    terms = [Term(f'"{word}"', _count(db, visible.table, f'"{word}"', RANK_BUDGET + 1)) for word in words]
    most = max(1, int(MAX_DF_SHARE * windows))
    terms = sorted((term for term in terms if term.df <= most), key=lambda term: (term.df, term.phrase))
    absent = [term for term in terms if term.df == 0]
    terms = [term for term in terms if term.df > 0]
    if not terms:
        return []
    expression, searched, bounded = plan(terms)
    candidates = _candidates(db, visible.table, expression, bounded)
    if not candidates and bounded:  # no window holds every word: the rarest one alone, bounded
        searched = terms[:1]
        candidates = _candidates(db, visible.table, searched[0].phrase, True)
    if not candidates:
        return []
    scores = _bm25(db, visible, searched, candidates, windows)
    weight = sum(idf(term.df, windows) for term in searched + absent) or 1.0
    ids = _chunk_ids(db, list(scores))
    hits = [KeywordHit(ids[rowid], score, min(1.0, score / weight)) for rowid, score in scores.items() if rowid in ids]
    hits.sort(key=lambda hit: (-hit.bm25, hit.chunk_id))
    return hits[:n]


def _count(db, table: str, expression: str, cap: int) -> int:
    """The caller's windows matching ``expression``, counted up to ``cap``."""
    return db.execute(f"SELECT count(*) FROM (SELECT 1 FROM chunks_fts CROSS JOIN temp.{table} v"
                      f" ON v.rowid = chunks_fts.rowid WHERE chunks_fts MATCH ? LIMIT ?)", (expression, cap)).fetchone()[0]


def _candidates(db, table: str, expression: str, bounded: bool) -> list[int]:
    """The caller's windows matching ``expression`` (only the first ``BOUNDED_RANK`` by rowid when ``bounded``)."""
    sql = (f"SELECT chunks_fts.rowid FROM chunks_fts CROSS JOIN temp.{table} v ON v.rowid = chunks_fts.rowid"
           f" WHERE chunks_fts MATCH ? ORDER BY chunks_fts.rowid")
    if bounded:
        return [row[0] for row in db.execute(sql + " LIMIT ?", (expression, BOUNDED_RANK))]
    return [row[0] for row in db.execute(sql + " LIMIT ?", (expression, RANK_BUDGET + 1))]


def _bm25(db, visible, searched: list[Term], candidates: list[int], windows: int) -> dict[int, float]:
    """FTS5's BM25 of each candidate for the searched words, from the caller's statistics."""
    average = visible.average_length
    lengths = _lengths(db, candidates)
    scores = dict.fromkeys(candidates, 0.0)
    for term in searched:
        weight = idf(term.df, windows)
        for rowid, count in _occurrences(db, term.phrase, candidates).items():
            length = lengths.get(rowid, 0)
            scale = K1 * (1 - B + B * length / average) if average > 0 else K1
            scores[rowid] += weight * count * (K1 + 1) / (count + scale)
    return scores


def _occurrences(db, phrase: str, candidates: list[int]) -> dict[int, int]:
    """How often ``phrase`` occurs in each candidate window (FTS5 marks each occurrence)."""
    found: dict[int, int] = {}
    for first in range(0, len(candidates), 500):
        part = candidates[first : first + 500]
        marks = ",".join("?" * len(part))
        for rowid, marked in db.execute(
                f"SELECT rowid, highlight(chunks_fts, 0, ?, ?) FROM chunks_fts WHERE chunks_fts MATCH ?"
                f" AND rowid IN ({marks})", (OPEN, CLOSE, phrase, *part)):
            found[rowid] = marked.count(OPEN)
    return found


def _lengths(db, rowids: list[int]) -> dict[int, int]:
    """FTS5's token count of each window."""
    found: dict[int, int] = {}
    for first in range(0, len(rowids), 500):
        part = rowids[first : first + 500]
        marks = ",".join("?" * len(part))
        for rowid, size in db.execute(f"SELECT id, sz FROM chunks_fts_docsize WHERE id IN ({marks})", part):
            found[rowid] = _varint(size) if size else 0
    return found


def average_length(db, table: str) -> float:
    """The mean token count of the windows in ``table`` (FTS5's own counts; 0 without a keyword index)."""
    try:
        sizes = [_varint(size) if size else 0 for (size,) in db.execute(
            f"SELECT d.sz FROM chunks_fts_docsize d JOIN temp.{table} v ON v.rowid = d.id")]
    except sqlite3.OperationalError:
        return 0.0
    return sum(sizes) / len(sizes) if sizes else 0.0


def _chunk_ids(db, rowids: list[int]) -> dict[int, str]:
    found: dict[int, str] = {}
    for first in range(0, len(rowids), 500):
        part = rowids[first : first + 500]
        marks = ",".join("?" * len(part))
        found.update(db.execute(f"SELECT rowid, chunk_id FROM chunks WHERE rowid IN ({marks})", part))
    return found
