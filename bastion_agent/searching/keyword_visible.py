"""Keyword search for a caller who may see only some windows: BM25 over those windows alone, from their postings alone.

FTS5's ``bm25()`` over ``chunks_fts`` weighs each word by how many windows
of the *whole* index hold it, and by their average length: a caller could
then tell from a hit's score (or its relevance) whether a document it may
not see holds the words it searched. And walking ``chunks_fts``'s posting
lists, even joined to the caller's windows, costs time in proportion to
every window that holds the word, hidden ones included. So such a caller
is answered from the keyword indexes of its reader sets
(``keyword_sets``: one FTS5 index per distinct group set, holding only that
set's windows; a caller from whom nothing is hidden reads ``chunks_fts``,
``SearchIndex._keyword_top``), and every statistic is taken over its own
windows:

- document frequencies are counted in the caller's set indexes (capped
  like ``keyword.capped_count``), and so is the window count ``N``;
- the average length is that of the caller's windows (FTS5's own token
  counts, ``Visible.average_length``);
- each word's count in a window is read from the set index's posting list
  (``fts5vocab`` in ``instance`` mode, one row per occurrence of a token;
  a word the tokenizer cuts into several tokens is counted with
  ``highlight()``, which marks each occurrence of the phrase).

No query reads ``chunks_fts`` or a posting of a window the caller may not
see, so a hidden window adds no work whatever words it holds
(``test_access_work`` counts SQLite's steps).

The score is FTS5's BM25 formula (k1 = 1.2, b = 0.75, its idf floored just
above zero) computed from those numbers, and the same planning as
``keyword.top`` (rarest words first, a budget of windows to rank, the
bounded fallback for common words). On a store where the caller's windows
are all there is, the scores equal FTS5's own to rounding.
"""

from __future__ import annotations

import sqlite3

from bastion_agent.searching.keyword import (
    BOUNDED_RANK,
    DF_CACHE_WORDS,
    RANK_BUDGET,
    KeywordHit,
    Term,
    Vocabulary,
    _varint,
    discriminating,
    idf,
    query_words,
    ranked_terms,
    searchable,
    vocabulary_of,
)

K1 = 1.2
B = 0.75
OPEN, CLOSE = "\x01", "\x02"  # highlight() marks (a window that holds one itself only raises its own count)


def caller_top(db: sqlite3.Connection, text: str, n: int, vocabulary: Vocabulary | None, visible) -> list[KeywordHit]:
    """The ``n`` best of the caller's windows for ``text``, best first, scored from the caller's windows only."""
    if not searchable(db, text):
        return []
    words = query_words(text)
    with vocabulary_of(db, vocabulary) as vocabulary:
        with vocabulary.lock:
            tokens = vocabulary.stemmed(words) if words else {}
    measured = visible.measured  # whose windows weigh the words (the caller's whole share when dates narrow it)
    windows = measured.windows
    if not tokens or not windows or not visible.windows:
        return []
    terms = discriminating([Term(f'"{word}"', _frequency(db, measured, f'"{word}"')) for word in tokens], windows)
    searched, absent, candidates = ranked_terms(
        terms, lambda expression, bounded: _candidates(db, _tables(visible), visible.table, expression, bounded))
    if not candidates:
        return []
    scores = _bm25(db, measured, searched, candidates, windows, {f'"{word}"': tokens[word] for word in tokens})
    weight = sum(idf(term.df, windows) for term in searched + absent) or 1.0
    best = _best(db, scores, n)
    return [KeywordHit(chunk, score, min(1.0, score / weight)) for chunk, score in best]


def _best(db, scores: dict[int, float], n: int) -> list[tuple[str, float]]:
    """``(chunk_id, score)`` of the ``n`` best, ties by chunk id; only the ids near the cut are read."""
    ranked = sorted(scores.items(), key=lambda item: -item[1])
    if len(ranked) > n:
        cut = ranked[n - 1][1]
        ranked = [item for item in ranked if item[1] >= cut]
    ids = _chunk_ids(db, [rowid for rowid, _ in ranked])
    best = sorted(((ids[rowid], score) for rowid, score in ranked if rowid in ids), key=lambda item: (-item[1], item[0]))
    return best[:n]


def _tables(visible) -> list:
    """The keyword indexes of the caller's reader sets (``keyword_sets.KeywordTable``: kept, or built on first
    use), or ``chunks_fts`` alone for a share from which nothing is hidden (``keyword_sets.WholeIndex``).

    A share narrowed for one search may carry the caller's whole share as
    ``statistics``; the indexes are that share's (``_candidates`` keeps to
    the narrowed windows).
    """
    share = visible if visible.keyword is not None else getattr(visible, "statistics", None)
    return share.keyword.tables(share.sets) if share is not None and share.keyword is not None else []


def _frequency(db, visible, phrase: str) -> int:
    """The caller's windows holding ``phrase``, counted up to ``RANK_BUDGET + 1`` and kept while the store does not change."""
    found = visible.frequencies.get(phrase)
    if found is None:
        found = _count(db, _tables(visible), phrase, RANK_BUDGET + 1)
        if len(visible.frequencies) >= DF_CACHE_WORDS:
            visible.frequencies.clear()
        visible.frequencies[phrase] = found
    return found


def _count(db, tables: list, expression: str, cap: int) -> int:
    """The caller's windows matching ``expression``, counted up to ``cap`` (each set's index walked only that far)."""
    total = 0
    for table in tables:
        if total >= cap:
            break
        total += db.execute(f"SELECT count(*) FROM (SELECT 1 FROM {table.table} WHERE {table.name} MATCH ? LIMIT ?)",
                            (expression, cap - total)).fetchone()[0]
    return total


def _candidates(db, tables: list, within: str, expression: str, bounded: bool) -> dict[int, int]:
    """The caller's windows (those of the temp table ``within``) matching ``expression``, with their lengths
    in tokens (FTS5's own counts).

    The first ``BOUNDED_RANK`` by rowid when ``bounded`` (else up to
    ``RANK_BUDGET + 1``): each set's index gives its first that many, and
    the first that many of their union are kept. Every window of a set
    index is the caller's, so ``within`` removes nothing unless the share
    was narrowed for this search; it costs one lookup a match either way.
    """
    limit = BOUNDED_RANK if bounded else RANK_BUDGET + 1
    found: dict[int, int] = {}
    for table in tables:
        name = table.name
        sql = (f"SELECT {name}.rowid, d.sz FROM {table.table} CROSS JOIN temp.{within} w ON w.rowid = {name}.rowid"
               f" CROSS JOIN {table.docsize} d ON d.id = {name}.rowid WHERE {name} MATCH ? ORDER BY {name}.rowid LIMIT ?")
        found.update((rowid, _varint(size) if size else 0) for rowid, size in db.execute(sql, (expression, limit)))
    return {rowid: found[rowid] for rowid in sorted(found)[:limit]}


def _bm25(db, visible, searched: list[Term], lengths: dict[int, int], windows: int,
          tokens: dict[str, tuple[str, ...]]) -> dict[int, float]:
    """FTS5's BM25 of each candidate (``lengths``' keys) for the searched words, from the caller's statistics."""
    average = visible.average_length
    candidates = sorted(lengths)
    scores = dict.fromkeys(candidates, 0.0)
    wanted = set(candidates)
    tables = _tables(visible)
    for term in searched:
        weight = idf(term.df, windows)
        cut = tokens.get(term.phrase, ())
        if len(cut) == 1:
            found = _token_counts(db, tables, cut[0], wanted)
        else:
            found = _occurrences(db, tables, term.phrase, candidates)
        for rowid, count in sorted(found.items()):
            length = lengths.get(rowid, 0)
            scale = K1 * (1 - B + B * length / average) if average > 0 else K1
            scores[rowid] += weight * count * (K1 + 1) / (count + scale)
    return scores


def _token_counts(db, tables: list, token: str, wanted: set[int]) -> dict[int, int]:
    """How often one token occurs in each wanted window, from the posting lists of the caller's set indexes."""
    found: dict[int, int] = {}
    for table in tables:
        for rowid, count in db.execute(f"SELECT doc, count(*) FROM {table.instance} WHERE term = ? GROUP BY doc",
                                       (token,)):
            if rowid in wanted:
                found[rowid] = count
    return found


def _occurrences(db, tables: list, phrase: str, candidates: list[int]) -> dict[int, int]:
    """How often ``phrase`` occurs in each candidate window (FTS5 marks each occurrence)."""
    found: dict[int, int] = {}
    for table in tables:
        for first in range(0, len(candidates), 500):
            part = candidates[first : first + 500]
            marks = ",".join("?" * len(part))
            for rowid, marked in db.execute(
                    f"SELECT rowid, highlight({table.name}, 0, ?, ?) FROM {table.table} WHERE {table.name} MATCH ?"
                    f" AND rowid IN ({marks})", (OPEN, CLOSE, phrase, *part)):
                found[rowid] = (marked or "").count(OPEN)
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
