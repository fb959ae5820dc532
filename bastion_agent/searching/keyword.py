"""Keyword search over the sanitized windows (SQLite FTS5), at a cost that common words do not drive.

Embeddings blur exact strings: a part number, an error code or a surname
is often nowhere near the top of a vector ranking. ``chunks_fts``
(``vectorstore_schema._m003_search_state``) indexes this sweep's windows with
Porter stemming over Unicode words, and triggers keep it in step with the
``chunks`` table, so only current windows can match.

Why not OR every word of the query: FTS5 then computes BM25 for every window
that holds any of them, and in real prose nearly every window holds "the"
or "of" (1.2 s for "the" alone at a million windows; docs/search.md). So a
query keeps only the words that discriminate, and FTS5 ranks only a bounded
number of windows:

1. The query is cut into ``\\w+`` words (lower-cased, at most
   ``MAX_TERMS``); English function words (``STOP_WORDS``) are dropped, and
   words with the same Porter stem (``pay``, ``paying``) count once.
2. Each word's document frequency is counted, but never past
   ``RANK_BUDGET + 1`` windows (a capped count walks the posting list
   without scoring it: about 0.04 microseconds a window), and cached per
   index until the next commit to the store (``Vocabulary.follow``). A word in no window is dropped; so is a word in more than half of
   the windows (``MAX_DF_SHARE``), which BM25 itself gives no weight.
3. The rarest words are kept while the windows they match add up to at most
   ``RANK_BUDGET``, and FTS5 ranks the OR of those (its BM25, about 3
   microseconds a window). Commoner words are left out: at that size the
   rare ones already say which windows matter.
4. When even the rarest word matches more than ``RANK_BUDGET`` windows, the
   windows holding every word are ranked instead, and if that is still too
   many, only the first ``BOUNDED_RANK`` of them by rowid (the oldest): a
   query of only very common words has no better evidence to offer.

A word is always a quoted FTS5 phrase, so quotes, ``*``, ``NEAR``,
``AND``/``OR``/``NOT``, column filters and parentheses are plain words or
nothing: any text is safe.

Each hit carries its BM25 score and its ``evidence``: that score over the
sum of the inverse document frequencies of the words searched and of the
query's words that no window holds (a word left out for the budget does
not count: its capped frequency would overstate its weight), capped at 1
(a window that holds every searched word once, at average length, scores
about 1). Unlike a score divided by the best hit's, it says how much of the
query a window matched, the same way for every query, which fusion and the
readable relevance need (``fusion``).
"""

from __future__ import annotations

import contextlib
import math
import re
import sqlite3
import threading
from dataclasses import dataclass

from bastion_agent.core.errors import ConfigError

WORD_RE = re.compile(r"\w+")
MAX_TERMS = 64
RANK_BUDGET = 2000  # windows FTS5's BM25 may rank for one query (under 10 ms on this project's machine)
BOUNDED_RANK = 300  # windows ranked when only common words are left (step 4)
MAX_DF_SHARE = 0.5  # a word in more than this share of the windows carries no evidence (BM25's idf <= 0)
DF_CACHE_WORDS = 50_000

# English function words: they discriminate nothing, and a small folder has
# too few windows for their document frequency to show it.
STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below between both
but by can could did do does doing down during each few for from further had has have having he her here hers
herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off on
once only or other our ours ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were what when where
which while who whom why will with would you your yours yourself yourselves
""".split())


@dataclass(frozen=True)
class KeywordHit:
    """One window the keyword side returned: its BM25 (higher is better) and its evidence (0-1)."""

    chunk_id: str
    bm25: float
    evidence: float


@dataclass(frozen=True)
class Term:
    """A query word as FTS5 sees it: the quoted phrase searched and its (capped) document frequency."""

    phrase: str
    df: int


def query_words(text: str) -> list[str]:
    """The query's words that may discriminate: lower-cased, no stop words, no repeats, at most ``MAX_TERMS``."""
    words: list[str] = []
    for word in WORD_RE.findall(text.lower()):
        if word not in STOP_WORDS and word not in words:
            words.append(word)
    return words[:MAX_TERMS]


def fts_query(text: str) -> str:
    """The OR of every word of ``text`` as quoted phrases ("" when it has no word): the old, unpruned query.

    Kept for ``bench/search/search_latency.py``, which measures it as the baseline.
    """
    terms = []
    for word in WORD_RE.findall(text.lower()):
        if word not in terms:
            terms.append(word)
    return " OR ".join(f'"{word}"' for word in terms[:MAX_TERMS])


def has_index(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE name = 'chunks_fts'").fetchone() is not None


def searchable(db: sqlite3.Connection, text: str) -> bool:
    """Whether ``text`` holds a word to search; a store whose SQLite has no FTS5 is refused in one line."""
    if not WORD_RE.search(text):
        return False
    if not has_index(db):
        raise ConfigError("this Python's SQLite has no FTS5, which keyword and hybrid search need; use --mode vector")
    return True


@contextlib.contextmanager
def vocabulary_of(db: sqlite3.Connection, vocabulary: "Vocabulary | None"):
    """The loaded index's vocabulary, or one made for this query alone and closed after it."""
    if vocabulary is not None:
        yield vocabulary
        return
    own = Vocabulary(db)
    try:
        yield own
    finally:
        own.close()


def discriminating(terms: list[Term], windows: int) -> list[Term]:
    """The terms that carry evidence (in at most ``MAX_DF_SHARE`` of ``windows``), rarest first."""
    most = max(1, int(MAX_DF_SHARE * windows))
    return sorted((term for term in terms if term.df <= most), key=lambda term: (term.df, term.phrase))


class Vocabulary:
    """What keyword search learns about one store and keeps while the store does not change.

    It holds an in-memory FTS5 table with the same tokenizer, to find which
    query words share a stem, the window count, and the capped document
    frequency of each word asked so far. ``searcher.SearchIndex`` keeps one
    per loaded store and answers from what is committed: before each query
    it hands ``follow`` the store's commit count (``PRAGMA data_version``),
    and the counts are forgotten when a writer has committed since they were
    taken. Otherwise a word first written after the load (a new file under
    ``serve --watch``) would stay "in no window" until the index was loaded
    again. The stems depend on the tokenizer alone and are kept.
    """

    def __init__(self, db: sqlite3.Connection):
        from bastion_agent.embedding.vectorstore_schema import FTS_TOKENIZER

        self.db = db
        self.lock = threading.Lock()
        self.stems = sqlite3.connect(":memory:", check_same_thread=False)
        self.stems.execute(f"CREATE VIRTUAL TABLE words USING fts5(word, tokenize='{FTS_TOKENIZER}')")
        self.stems.execute("CREATE VIRTUAL TABLE word_terms USING fts5vocab(words, instance)")
        self.windows = window_count(db)
        self.frequencies: dict[str, int] = {}
        self.version: int | None = None  # the commit count the statistics were taken at (None: not known)
        self.recounts = 0  # how often ``follow`` forgot the statistics (tests count it)

    def follow(self, version: int) -> None:
        """Forget the window count and the frequencies when ``version`` (``PRAGMA data_version``) moved.

        The caller reads ``version`` inside the read transaction the query
        runs in, so the statistics taken now and the postings ranked next
        are of the same commit.
        """
        with self.lock:
            if version == self.version:
                return
            if self.version is not None:
                self.recounts += 1
            self.frequencies.clear()
            self.windows = window_count(self.db)
            self.version = version

    def close(self) -> None:
        self.stems.close()

    def terms(self, text: str) -> list[Term]:
        """The query's discriminating words with their document frequencies, rarest first (absent words first of all)."""
        words = query_words(text)
        if not words:
            return []
        with self.lock:
            terms = [Term(f'"{word}"', self._frequency(f'"{word}"')) for word in self.stemmed(words)]
        # Counts are capped at RANK_BUDGET + 1, so in a large store no word looks too common here; there the
        # budget of ``plan`` leaves the common ones out instead.
        return discriminating(terms, self.windows)

    def stemmed(self, words: list[str]) -> dict[str, tuple[str, ...]]:
        """The first word of each distinct token sequence (``pay`` and ``paying`` are one term), in order, with
        its tokens as the keyword index's tokenizer cuts it; the caller holds ``lock``."""
        self.stems.execute("DELETE FROM words")
        self.stems.executemany("INSERT INTO words(rowid, word) VALUES (?, ?)", enumerate(words))
        tokens: dict[int, list[str]] = {}
        for row, term in self.stems.execute("SELECT doc, term FROM word_terms ORDER BY doc, offset"):
            tokens.setdefault(row, []).append(term)
        seen, kept = set(), {}
        for row, word in enumerate(words):
            key = tuple(tokens.get(row, ()))
            if key and key not in seen:
                seen.add(key)
                kept[word] = key
        return kept

    def _frequency(self, phrase: str) -> int:
        """How many windows hold ``phrase``, counted up to ``RANK_BUDGET + 1`` (more is "too many to rank")."""
        found = self.frequencies.get(phrase)
        if found is None:
            found = capped_count(self.db, phrase, RANK_BUDGET + 1)
            if len(self.frequencies) >= DF_CACHE_WORDS:
                self.frequencies.clear()
            self.frequencies[phrase] = found
        return found


def capped_count(db: sqlite3.Connection, expression: str, cap: int) -> int:
    """Windows matching ``expression``, counted up to ``cap``: walks posting lists without scoring."""
    return db.execute("SELECT count(*) FROM (SELECT 1 FROM chunks_fts WHERE chunks_fts MATCH ? LIMIT ?)",
                      (expression, cap)).fetchone()[0]


def window_count(db: sqlite3.Connection) -> int:
    """The number of indexed windows, from FTS5's own statistics record (no table scan)."""
    row = db.execute("SELECT block FROM chunks_fts_data WHERE id = 1").fetchone()
    if row and row[0]:
        return _varint(row[0])
    return db.execute("SELECT count(*) FROM chunks").fetchone()[0]


def _varint(data: bytes) -> int:
    """The first SQLite varint of ``data`` (big-endian 7-bit groups; the ninth byte gives 8 bits)."""
    value = 0
    for position, byte in enumerate(data[:9]):
        if position == 8:
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value
    return value


def idf(df: int, windows: int) -> float:
    """FTS5's BM25 inverse document frequency (it floors it just above zero)."""
    return max(1e-6, math.log((windows - df + 0.5) / (df + 0.5)))


def plan(terms: list[Term]) -> tuple[str, list[Term], bool]:
    """The MATCH expression to rank, the terms it searches, and whether it needs the rowid bound.

    Steps 3 and 4 of the module's rules; ``terms`` come rarest first.
    """
    chosen, total = [], 0
    for term in terms:
        if total + term.df > RANK_BUDGET:
            break
        chosen.append(term)
        total += term.df
    if chosen:
        return " OR ".join(term.phrase for term in chosen), chosen, False
    return " AND ".join(term.phrase for term in terms), terms, True


def ranked_terms(terms: list[Term], rank) -> tuple[list[Term], list[Term], list]:
    """``(searched, absent, ranked)``: the words a window holds, planned (``plan``) and ranked by
    ``rank(expression, bounded)``; when no window holds every word, the rarest one alone, bounded.
    ``absent`` are the words no window holds (they still weigh in a relevance)."""
    absent = [term for term in terms if term.df == 0]
    present = [term for term in terms if term.df > 0]
    if not present:
        return [], absent, []
    expression, searched, bounded = plan(present)
    ranked = rank(expression, bounded)
    if not ranked and bounded:
        searched = present[:1]
        ranked = rank(searched[0].phrase, True)
    return searched, absent, ranked


def top(db: sqlite3.Connection, text: str, n: int, vocabulary: Vocabulary | None = None) -> list[KeywordHit]:
    """The ``n`` best current windows for ``text`` by BM25 over its discriminating words, best first.

    Over every window; a caller who may see only some is ranked by
    ``keyword_visible.caller_top`` instead, with statistics of its windows.
    """
    if not searchable(db, text):
        return []
    with vocabulary_of(db, vocabulary) as vocabulary:
        terms, windows = vocabulary.terms(text), vocabulary.windows
    searched, absent, ranked = ranked_terms(terms, lambda expression, bounded: _rank(db, expression, n, bounded))
    weight = sum(idf(term.df, windows) for term in searched + absent) or 1.0
    if not ranked:
        return []
    marks = ",".join("?" * len(ranked))
    ids = dict(db.execute(f"SELECT rowid, chunk_id FROM chunks WHERE rowid IN ({marks})", [r for r, _ in ranked]))
    hits = [KeywordHit(ids[rowid], -score, min(1.0, -score / weight)) for rowid, score in ranked if rowid in ids]
    return sorted(hits, key=lambda hit: (-hit.bm25, hit.chunk_id))


def _rank(db: sqlite3.Connection, expression: str, n: int, bounded: bool) -> list[tuple[int, float]]:
    """``(rowid, FTS5 bm25)`` of the best ``n`` matches; ``bounded`` ranks only the first ``BOUNDED_RANK``."""
    sql = "SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?"
    parameters: tuple = (expression,)
    if bounded:
        last = db.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? LIMIT 1 OFFSET ?",
                          (expression, BOUNDED_RANK - 1)).fetchone()
        if last is not None:
            sql += " AND rowid <= ?"
            parameters += (last[0],)
    # bm25() sorted by SQLite: about twice as fast as FTS5's own "ORDER BY rank" path here (docs/search.md)
    return db.execute(sql + " ORDER BY 2 LIMIT ?", (*parameters, n)).fetchall()


RRF_K = 60


def fuse(rankings: list[list[str]], n: int, k: int = RRF_K) -> list[tuple[float, str]]:
    """Reciprocal rank fusion of best-first lists of chunk ids, for callers that have ranks but no evidence.

    Local hybrid search fuses calibrated evidence instead (``fusion``);
    this stays for rankings that come without comparable scores (the
    central index of ``search --remote``). Ties go to the smaller chunk id.
    """
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, chunk_id in enumerate(ranking, start=1):
            scores[chunk_id] = scores.get(chunk_id, 0.0) + 1.0 / (k + rank)
    return sorted(((score, chunk_id) for chunk_id, score in scores.items()), key=lambda item: (-item[0], item[1]))[:n]
