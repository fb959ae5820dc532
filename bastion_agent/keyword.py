"""Keyword search over the sanitized windows (SQLite FTS5) and rank fusion.

Embeddings blur exact strings: a part number, an error code or a surname
is often nowhere near the top of a vector ranking. ``chunks_fts``
(``vectorstore._m003_search_state``) indexes this sweep's windows with
Porter stemming over Unicode words, and triggers keep it in step with the
``chunks`` table, so only current windows can match.

A user's text never reaches FTS5 as syntax: it is cut into ``\\w+`` words,
each becomes a quoted phrase, and the phrases are joined with OR, ranked by
FTS5's BM25. Quotes, ``*``, ``NEAR``, ``AND``/``OR``/``NOT``, column
filters and parentheses are therefore plain words or nothing.

``fuse`` is reciprocal rank fusion: a window's score is the sum over the
rankings it appears in of ``1 / (RRF_K + rank)``.
"""

from __future__ import annotations

import re
import sqlite3

from .errors import ConfigError

WORD_RE = re.compile(r"\w+")
MAX_TERMS = 64
RRF_K = 60


def fts_query(text: str) -> str:
    """A safe FTS5 MATCH expression for arbitrary user text ("" when it has no word)."""
    terms = []
    for word in WORD_RE.findall(text.lower()):
        if word not in terms:
            terms.append(word)
    return " OR ".join(f'"{word}"' for word in terms[:MAX_TERMS])


def has_index(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE name = 'chunks_fts'").fetchone() is not None


def top(db: sqlite3.Connection, text: str, n: int) -> list[tuple[float, str]]:
    """``(score, chunk_id)`` of the ``n`` best current windows by BM25, best first (higher is better)."""
    expression = fts_query(text)
    if not expression:
        return []
    if not has_index(db):
        raise ConfigError("this Python's SQLite has no FTS5, which keyword and hybrid search need; use --mode vector")
    ranked = db.execute(  # FTS5's own "ORDER BY rank" path: about twice as fast as sorting the join
        "SELECT rowid, rank FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rank LIMIT ?", (expression, n)
    ).fetchall()
    if not ranked:
        return []
    marks = ",".join("?" * len(ranked))
    ids = dict(db.execute(f"SELECT rowid, chunk_id FROM chunks WHERE rowid IN ({marks})", [r for r, _ in ranked]))
    return sorted(((-score, ids[rowid]) for rowid, score in ranked if rowid in ids), key=lambda item: (-item[0], item[1]))


def fuse(rankings: list[list[str]], n: int, k: int = RRF_K) -> list[tuple[float, str]]:
    """Reciprocal rank fusion of several best-first lists of chunk ids; ties by chunk id."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, chunk_id in enumerate(ranking, start=1):
            scores[chunk_id] = scores.get(chunk_id, 0.0) + 1.0 / (k + rank)
    return sorted(((score, chunk_id) for chunk_id, score in scores.items()), key=lambda item: (-item[0], item[1]))[:n]
