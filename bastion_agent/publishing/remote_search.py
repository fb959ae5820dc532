"""``search --remote`` and ``serve --remote``: one search across every bastion that published.

The same three modes as the local search, answered by PostgreSQL:

- **vector**: the model's partial HNSW index (cosine distance), with
  ``hnsw.iterative_scan = relaxed_order`` so that a filter on bastions keeps
  scanning the graph until it has enough rows (pgvector >= 0.8), then
  re-sorted by exact distance; ``hnsw.ef_search`` is ``EF_SEARCH`` (or the
  depth asked, when larger); a filtered query asks for that many rows (so
  it gathers as many candidates from the bastions' rows as an unfiltered
  one does from all rows), an unfiltered one for the depth asked
  (``RemoteIndex.depth``). ``exact`` scans every row instead.
- **keyword**: the GIN index on ``tsv`` (English stemming). Windows holding
  every word of the query rank first (score ``1 + r``), then windows holding
  any of them (score ``r``), where ``r = ts_rank / (1 + ts_rank)``
  (``ts_rank_cd``, cover density, cost 4x more per row at 1M windows);
  each pass ranks at most ``KEYWORD_POOL`` matching rows, so a query made
  of very common words stays fast (its ranking is then that of a sample).
- **hybrid**: both rankings fused by ``searching/fusion.py``, as the local
  search fuses them: the convex combination of vector evidence (the cosine
  above this model's floor, a median of sampled pairs) and keyword evidence
  (``keyword_evidence``), with the same ``relevance`` (0-100) on every hit.

Hits are ``RemoteHit``: the ``Hit`` record's fields (``core/records.py``) plus ``bastion``. The vector
side (graph or exact scan, ``EXACT_SHARE``, ``EF_SEARCH``) is ``remote_vectors.VectorSearch``, a part of
``RemoteIndex``.

**Readers** (docs/publish.md): a search with ``reader=ROLE`` runs in one
read-only transaction that first does ``SET LOCAL ROLE`` to it, so every
statement of the search (the vector scan, the keyword pass, the hits'
rows) reads what row-level security gives that role: the rows sharing one
of its groups. The filter is part of each scan, before the ``LIMIT``: a
reader gets the best ``k`` of the rows it may read. From schema 9 a
reader holds no table: each of those statements is a call of the owner's
functions (``schema_readers``: ``vector_matches``, ``window_rows`` and the
rest), which apply its groups, so ``EXPLAIN`` and ``pg_stats`` tell it
nothing of other rows, and the relevance floor is drawn from its own rows
(``window_floor``). The connection's own role (``BASTION_PUBLISH_DSN``) is
then a gateway that may only become readers; ``reader_groups`` tells serve which groups a reader has, so a
token is never mapped to a reader that reads more than the token may.
The query vector comes from the local model server, as for local search.

**Paths** (schema 11, ``schema_paths``): a reader's hit names only the
paths whose own groups it shares, and is dated by those alone; the owner's
functions choose them, so nothing here (nor in an agent of before) sees the
others.

**Dates** (schema 10, ``schema_dates``): each hit carries its document's
``modified``, the date its bastion published. A search with ``dates`` (a
``core.dates.DateRange``) keeps to documents dated within it, as a condition
of each scan before its ``LIMIT`` (a reader's inside the owner's functions,
next to its groups), so it returns ``k`` hits when ``k`` such windows
exist. As for a filter on bastions, a range that holds at most
``EXACT_SHARE`` of the caller's windows (counted per search, as the caller)
is read exactly (the documents in the range, then their windows), and a
wider one walks the graph; when the graph's iterative scan stops short of
``k`` rows of the range, the search reads the range's rows exactly.
"""

from __future__ import annotations

import contextlib
import re
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Sequence

from bastion_agent.config.manifest import SEARCH_MODES
from bastion_agent.core import document_hits, records
from bastion_agent.core.errors import ConfigError, DatabaseError, ModelServerError
from bastion_agent.publishing import connection
from bastion_agent.publishing.remote_vectors import VectorSearch, ef_search_from_env, window_key
from bastion_agent.searching import searcher

KEYWORD_POOL = 1000  # matching rows ranked per keyword pass (ranking costs ~20 us a row at 1M windows)
MAX_TERMS = 64
WORD_RE = re.compile(r"\w+")


@dataclass(frozen=True)
class RemoteHit(records.Hit):
    """A hit from the central index: the local hit's fields, and which bastion it comes from."""

    bastion: str = ""


def keyword_evidence(all_words: bool, rank: float) -> float:
    """A keyword hit's evidence (0-1), as ``fusion`` weighs it: windows with every word of the query
    from 0.5 to 1, windows with some of them below 0.5; ``rank`` is ``ts_rank / (1 + ts_rank)``."""
    return ((1.0 if all_words else 0.0) + rank) / 2.0


def tsquery_text(query: str, operator: str) -> str:
    """A ``to_tsquery`` expression of the query's words (only ``\\w`` characters reach it, each quoted)."""
    words = []
    for word in WORD_RE.findall(query.lower()):
        if word not in words:
            words.append(word)
    return f" {operator} ".join(f"'{word}'" for word in words[:MAX_TERMS])


def reader_name(text: str) -> str:
    """A reader role's name as ``admin`` makes them (so it needs no quoting); one line otherwise."""
    from bastion_agent.publishing import admin

    return admin.role_name(text)


class RemoteIndex(VectorSearch):
    """The central index for one model, behind one connection (serve shares it, under a lock).

    ``reader``: the role every search becomes unless it names another
    (None: the connection's own role).
    """

    def __init__(self, manifest, dsn: str, bastions: Sequence[str] = (), reader: str | None = None):
        from bastion_agent.publishing import publish_schema

        self.manifest = manifest
        self.dsn = dsn
        self.bastions = sorted(set(bastions))
        self.reader = None if reader is None else reader_name(reader)
        self._reading_as: str | None = None  # the reader of the search in progress (under self.lock)
        self._within = None  # the range of dates of the search in progress (core.dates.DateRange; under self.lock)
        self._counts: dict[str | None, tuple[int, int]] = {}
        # whether each reader may read the windows at all (None: the connection's own role, which is a gateway
        # that reads nothing on its own); taken with its counts, once
        self._readable: dict[str | None, bool] = {}
        # whether each reader reads through the owner's functions (a reader from schema 9: no table at all) and
        # whether it may call them (the relevance floor of every role that may is the functions')
        self._sealed: dict[str | None, bool] = {}
        self._calls: dict[str | None, bool] = {}
        self._floors: dict[str | None, float] = {}
        self.key, self.dim = manifest.embed.vector_key, manifest.embed.dim
        self.default_mode = searcher.resolve_mode(manifest, None)
        self.loaded_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.lock = threading.Lock()
        self.ef_search = ef_search_from_env()
        self.conn = connection.connect(dsn)
        with self._errors():
            self.version = publish_schema.current_version(self.conn)
            if self.version == 0:
                raise DatabaseError(f"no bastion has published to this database yet ({connection.describe_dsn(dsn)})")
            self.model = publish_schema.model_index(self.conn, self.key)
            if self.model is not None and self.model.dim != self.dim:
                raise DatabaseError(f"model {self.key!r} is published with dim {self.model.dim}, the manifest says {self.dim}")
            if self.reader is not None and self.version < 7:
                raise DatabaseError(f"the schema on PostgreSQL ({connection.describe_dsn(dsn)}) is at version"
                                    f" {self.version}: readers need version 7 (bastion-agent admin migrate)")
            self.windows, self.all_windows = self.counts(self.reader)
            self.own_graph = self._own_graph()

    def __len__(self) -> int:
        return self.windows

    def counts(self, reader: str | None) -> tuple[int, int]:
        """(windows of the chosen bastions, windows of every bastion) that ``reader`` may read, counted once.

        Counted as the reader, so both depend only on the rows it may read
        (serve's page and ``/healthz`` show the first); a role that may read
        no table (a gateway on its own) counts 0.
        """
        if reader not in self._counts:
            with self._as_reader(reader):
                self._calls[reader] = self._may_call_functions()
                self._sealed[reader] = self._calls[reader] and not self._may_select_windows()
                self._readable[reader] = self._sealed[reader] or self._may_select_windows()
                windows = self._count()
                every = self._count(every_bastion=True) if self.bastions else windows
            self._counts[reader] = (windows, every)
        return self._counts[reader]

    def _may_select_windows(self) -> bool:
        return bool(self.conn.execute("SELECT has_table_privilege('bastion_agent.windows', 'SELECT')").fetchone()[0])

    def _may_call_functions(self) -> bool:
        """Whether the role in effect may search through the owner's functions (schema 9 on)."""
        from bastion_agent.publishing import publish_schema, schema_readers

        if self.version < publish_schema.SEALED_READERS_VERSION:
            return False
        return bool(self.conn.execute("SELECT has_function_privilege(%s, 'EXECUTE')",
                                      (f"bastion_agent.{schema_readers.READER_FUNCTIONS_9[0]}",)).fetchone()[0])

    @property
    def _through_functions(self) -> bool:
        """Whether the search in progress reads through the owner's functions (a reader from schema 9)."""
        return self._sealed.get(self._reading_as, False)

    def visible_count(self, groups=None, reader: str | None = None) -> int:
        """The windows this caller may search: ``reader``'s (None: the index's own reader)."""
        reader = self.reader if reader is None else reader_name(reader)
        self._refuse_groups_without_reader(groups, reader)
        with self.lock, self._errors():
            return self.counts(reader)[0]

    @staticmethod
    def _refuse_groups_without_reader(groups, reader: str | None) -> None:
        if groups is not None and reader is None:
            raise ConfigError("a caller limited to groups searches the central index only as a reader role"
                              " (bastion-agent admin add-searcher NAME --groups …; the token's reader)")

    @contextlib.contextmanager
    def _as_reader(self, reader: str | None):
        """One read-only transaction as ``reader`` (``SET LOCAL ROLE``), rolled back at the end; nothing for None."""
        if reader is None:
            yield
            return
        from psycopg import pq, sql

        try:
            # a role that does not exist, or that this login may not become, fails here: rolled back below
            self.conn.execute(sql.SQL("BEGIN READ ONLY; SET LOCAL ROLE {}").format(sql.Identifier(reader)),
                              prepare=False)
            self._reading_as = reader
            yield
        finally:
            self._reading_as = None
            if not self.conn.closed and self.conn.pgconn.transaction_status != pq.TransactionStatus.IDLE:
                with contextlib.suppress(Exception):  # a broken connection: the next search reconnects
                    self.conn.execute("ROLLBACK")

    def is_current(self) -> bool:
        return True  # the database is always current; serve never reloads it

    def close(self) -> None:
        self.conn.close()

    def _count(self, every_bastion: bool = False) -> int:
        if self.model is None:
            return 0
        if self._through_functions:
            bastions = self.bastions if self.bastions and not every_bastion else None
            return int(self.conn.execute("SELECT bastion_agent.window_count(%s, %s, current_user)",
                                         (self.key, bastions)).fetchone()[0])
        if not self.conn.execute("SELECT has_table_privilege('bastion_agent.documents', 'SELECT')").fetchone()[0]:
            return 0
        sql, params = "SELECT coalesce(sum(windows), 0) FROM bastion_agent.documents WHERE model = %s", [self.key]
        if self.bastions and not every_bastion:
            sql += " AND bastion = ANY(%s)"
            params.append(self.bastions)
        return int(self.conn.execute(sql, params).fetchone()[0])

    def _errors(self):
        return _DatabaseErrors(self.dsn)

    def search(self, query: str, query_vector: Sequence[float] | None, k: int, mode: str | None = None,
               exact: bool = False, groups=None, reader: str | None = None, dates=None) -> list[RemoteHit]:
        """The top ``k`` windows that ``reader`` (None: the index's own reader) may read.

        ``groups``: the caller's groups (None: every group). Centrally, the
        groups are the reader's, which serve checked against the token's
        (``reader_groups``); a caller with groups and no reader is refused.
        ``dates``: only documents dated within this ``core.dates.DateRange``.
        """
        reader = self.reader if reader is None else reader_name(reader)
        self._refuse_groups_without_reader(groups, reader)
        mode = mode or self.default_mode
        if mode not in SEARCH_MODES:
            raise ConfigError(f"search mode must be one of {', '.join(SEARCH_MODES)}; got {mode!r}")
        if searcher.needs_vector(mode) and query_vector is not None and len(query_vector) != self.dim:
            raise ModelServerError(f"the query vector has {len(query_vector)} dimensions, the manifest says dim = {self.dim}")
        self.check_dates(dates)
        if self.model is None:
            return []
        with self.lock, self._errors():
            if self.conn.closed or self.conn.broken:  # the server restarted: one new connection, then on
                self.conn = connection.connect(self.dsn)
            self.counts(reader)
            if not self._readable[reader]:  # a gateway on its own (the single token's, the local user's): no rows
                return []
            self._within = dates
            try:
                with self._as_reader(reader):
                    return self._search(query, query_vector, k, mode, exact)
            finally:
                self._within = None

    def check_dates(self, dates) -> None:
        from bastion_agent.publishing.schema_dates import DATED_VERSION

        if dates is not None and self.version < DATED_VERSION:
            raise ConfigError(f"the central index holds no dates yet (its schema is at version {self.version}, dates"
                              f" need {DATED_VERSION}): the schema's owner runs bastion-agent admin migrate, then"
                              " each bastion publishes again")

    def _dated(self) -> bool:
        return self._within is not None and (self._within.since is not None or self._within.before is not None)

    def _search(self, query: str, query_vector, k: int, mode: str, exact: bool) -> list[RemoteHit]:
        from bastion_agent.searching import fusion

        if mode == "keyword":
            ranked = fusion.keyword_only(self.keyword_hits(query, k))
        elif mode == "vector":
            ranked = fusion.vector_only(self.vector_top(query_vector, k, exact), self.cosine_floor())
        else:  # the local search's fusion and relevance (searching/fusion.py), on the server's evidence
            depth = max(searcher.FUSION_CANDIDATES, k)
            by_vector = self.vector_top(query_vector, depth, exact)
            by_keyword = self.keyword_hits(query, depth)
            seen = {key for _, key in by_vector}
            others = self.cosines_of(query_vector, [hit.chunk_id for hit in by_keyword if hit.chunk_id not in seen])
            ranked = fusion.fuse(by_vector, by_keyword, others, self.cosine_floor(), k)
        return self.hits([(item.score, item.chunk_id, item.relevance) for item in ranked])

    def keyword_hits(self, query: str, n: int) -> list:
        """``keyword_top`` as ``keyword.KeywordHit``s (key, score, evidence), which ``fusion`` reads."""
        from bastion_agent.searching import keyword

        return [keyword.KeywordHit(key, score, keyword_evidence(score >= 1.0, score - (1.0 if score >= 1.0 else 0.0)))
                for score, key in self.keyword_top(query, n)]

    def keyword_top(self, query: str, n: int) -> list[tuple[float, str]]:
        """``(score, key)`` of the ``n`` best windows by words: all the words first, then any."""
        ranked: list[tuple[float, str]] = []
        seen: set[str] = set()
        for operator, bonus in (("&", 1.0), ("|", 0.0)):
            expression = tsquery_text(query, operator)
            if not expression or len(ranked) >= n:
                break
            for score, key in self._keyword_pass(expression, n):
                if key not in seen and len(ranked) < n:
                    seen.add(key)
                    ranked.append((bonus + score, key))
            if operator == "&" and len(WORD_RE.findall(query)) < 2:
                break  # one word: the second pass would find the same rows
        return ranked

    def _keyword_pass(self, expression: str, n: int) -> list[tuple[float, str]]:
        """One pass: at most ``KEYWORD_POOL`` matches ranked, through ``keyword_matches`` (the owner's function,
        which applies the read policy's rule itself so that the GIN index can answer)."""
        # from schema 7 the role in effect (a reader after SET ROLE) is named: the function runs as the owner
        role = ", current_user" if self.version >= 7 else ""
        params = [expression, self.key, self.bastions or None, KEYWORD_POOL, n]
        if self._dated():  # schema 10's pass: the range among the conditions, before the pool's LIMIT
            role += ", %s::text, %s::text"
            params += [self._within.since, self._within.before]
        rows = self.conn.execute(f"SELECT * FROM bastion_agent.keyword_matches(%s, %s, %s, %s, %s{role})",
                                 params).fetchall()
        return [(float(r), window_key(bastion, chunk)) for bastion, chunk, r in rows]

    def hits(self, ranked: list[tuple[float, str, int]]) -> list[RemoteHit]:
        """The windows of ``ranked`` (score, key, relevance) with their documents' paths, in that order."""
        if not ranked:
            return []
        from psycopg.rows import dict_row

        pairs = [key.split("\0", 1) for _, key, _ in ranked]
        if self._through_functions:
            rows_of = "hit_rows" if self.version >= 10 else "window_rows"  # schema 10's rows carry the date
            rows = self.conn.cursor(row_factory=dict_row).execute(
                f"SELECT * FROM bastion_agent.{rows_of}(%s, %s, %s, current_user)",
                (self.key, [b for b, _ in pairs], [c for _, c in pairs])).fetchall()
        else:
            rows = self._window_rows(pairs)
        found = {window_key(row["bastion"], row["chunk_id"]): row for row in rows}
        # each column fills the hit's field of its name (records.build), as the local search's rows do, and the
        # document's published fields (schema 12's meta) those the record declares (document_hits.meta_values)
        return [records.build(RemoteHit, found[key], score=score, relevance=relevance,
                              paths=list(found[key]["paths"] or []), **document_hits.meta_values(found[key].get("meta")))
                for score, key, relevance in ranked if key in found]

    def _window_rows(self, pairs: list) -> list[dict]:
        """The hits' rows read from the tables (a role that may: the owner, a search role)."""
        from psycopg.rows import dict_row

        dated = ", d.modified" if self.version >= 10 else ""
        dated += ", d.meta" if self.version >= 12 else ""
        return self.conn.cursor(row_factory=dict_row).execute(
            f'SELECT w.bastion, w.chunk_id, w.doc, w.idx, w.start, w."end", w.text, d.paths{dated}'
            " FROM bastion_agent.windows w JOIN unnest(%s::text[], %s::text[]) AS k(bastion, chunk_id)"
            "   ON w.bastion = k.bastion AND w.chunk_id = k.chunk_id AND w.model = %s"
            " LEFT JOIN bastion_agent.documents d ON d.bastion = w.bastion AND d.doc = w.doc AND d.model = w.model",
            ([b for b, _ in pairs], [c for _, c in pairs], self.key)).fetchall()


class _DatabaseErrors:
    """Turns a database failure during a search into one ``DatabaseError`` line (host/db, never the password)."""

    def __init__(self, dsn: str):
        self.dsn = dsn

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        from psycopg import Error

        if exc is not None and isinstance(exc, Error):
            where = connection.describe_dsn(self.dsn)
            raise DatabaseError(f"PostgreSQL ({where}) failed the search: {connection.scrub(exc, self.dsn)}") from None
        return False


def open_index(manifest, bastions: Sequence[str] = (), reader: str | None = None) -> RemoteIndex:
    """The central index at ``BASTION_PUBLISH_DSN`` for the manifest's model (searched as ``reader``, if given)."""
    from bastion_agent.config.manifest import validate_bastion_name

    for name in bastions:
        try:
            validate_bastion_name(name)
        except ValueError as exc:
            raise ConfigError(f"--bastion {exc}") from None
    return RemoteIndex(manifest, connection.dsn_from_env(), bastions, reader)


def search(manifest, query: str, k: int = searcher.DEFAULT_K, mode: str | None = None, bastions: Sequence[str] = (),
           exact: bool = False, client=None, reader: str | None = None, dates=None) -> list[RemoteHit]:
    """The top ``k`` windows across the bastions (all, or ``bastions``), as ``searcher.search`` for one;
    ``reader``: the reader role the search becomes (``SET LOCAL ROLE``), which reads only its groups' rows;
    ``dates``: only documents dated within this ``core.dates.DateRange``."""
    if not query.strip():
        raise ConfigError("the query is empty")
    mode = searcher.resolve_mode(manifest, mode)
    index = open_index(manifest, bastions, reader)
    try:
        index.check_dates(dates)
        if searcher.needs_vector(mode) and not len(index):
            return []
        vector = searcher.embed_query(manifest, query, client) if searcher.needs_vector(mode) else None
        return index.search(query, vector, k, mode, exact=exact, dates=dates)
    finally:
        index.close()


def reader_groups(conn_or_dsn, reader: str) -> frozenset:
    """The groups of ``reader`` (a role ``admin add-searcher NAME --groups`` made), as the connection's role sees them.

    Serve calls it at load for each token's reader and refuses a token whose
    reader has a group the token lacks (``check_reader``). One line, never a
    frozenset, for a reader this connection's role may not become, a role
    that is not a reader, or the every-group search role (a token with
    groups must never be mapped to it).
    """
    reader = reader_name(reader)
    own = isinstance(conn_or_dsn, str)
    conn = connection.connect(conn_or_dsn) if own else conn_or_dsn
    dsn = conn_or_dsn if own else conn.info.dsn  # libpq's view of it, without the password
    where = connection.describe_dsn(dsn)
    try:
        with _DatabaseErrors(dsn):
            row = conn.execute("SELECT pg_has_role(session_user, r.oid, 'MEMBER') FROM pg_catalog.pg_roles r"
                               " WHERE r.rolname = %s", (reader,)).fetchone()
            if row is None:
                raise DatabaseError(f"PostgreSQL ({where}) has no role {reader}")
            if not row[0]:
                raise DatabaseError(f"this connection's role may not become reader {reader}: the administrator runs"
                                    f" bastion-agent admin add-searcher {reader} --groups … --gateway GATEWAY")
            if publish_schema_version(conn) < 7:
                raise DatabaseError(f"the schema on PostgreSQL ({where}) has no readers yet: bastion-agent admin migrate")
            groups = conn.execute("SELECT bastion_agent.readable_groups(%s)", (reader,)).fetchone()[0]
    finally:
        if own:
            conn.close()
    if groups is None:
        raise DatabaseError(f"role {reader} reads every group (a search role without --groups): a token with groups"
                            " needs a reader made with bastion-agent admin add-searcher NAME --groups …")
    return frozenset(groups)


def check_reader(token: str, token_groups, reader: str, groups_of_reader: frozenset) -> None:
    """Refuse, in one line, a token whose reader reads a group the token may not (``token_groups`` None: every group)."""
    if token_groups is None:
        return
    extra = sorted(groups_of_reader - frozenset(token_groups))
    if extra:
        raise ConfigError(f"token {token}: its reader {reader} also reads group(s) {', '.join(extra)}, which the token"
                          " may not: give the token a reader limited to its groups")


def publish_schema_version(conn) -> int:
    from bastion_agent.publishing import publish_schema

    return publish_schema.current_version(conn)
