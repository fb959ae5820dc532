"""The vector side of a search of the central index: the HNSW walk or the exact scan, and the cosines fusion reads.

Apart from ``remote_search`` (the index, its connection, its readers, the
keyword pass and the hits) because this is where the planner is steered:
how many rows to ask the graph for, when a filter reads the chosen rows
instead (``EXACT_SHARE``), a bastion's own graph, and the settings sent in
one message with the statement. ``VectorSearch`` is a part of
``remote_search.RemoteIndex``: its methods read the index's connection,
model, bastions, reader and range of dates.
"""

from __future__ import annotations

from bastion_agent.core.errors import ConfigError

EF_SEARCH = 300  # recall@10 0.95 at 1M windows of the benchmark (m 16, ef_construction 200); BASTION_HNSW_EF_SEARCH sets it (docs/publish.md)
EF_SEARCH_VARIABLE = "BASTION_HNSW_EF_SEARCH"
EXACT_SHARE = 0.2  # a filter to at most this share of the model's rows scans them exactly (RemoteIndex.scans_exactly)
FLOOR_SAMPLE = 48  # fusion.FLOOR_SAMPLE: windows whose pairwise cosines give the vector evidence's floor


def ef_search_from_env(environ=None) -> int:
    """``BASTION_HNSW_EF_SEARCH`` (10..1000), else ``EF_SEARCH``."""
    import os

    text = (os.environ if environ is None else environ).get(EF_SEARCH_VARIABLE, "").strip()
    if not text:
        return EF_SEARCH
    if not text.isdigit() or not 10 <= int(text) <= 1000:
        raise ConfigError(f"{EF_SEARCH_VARIABLE} must be a whole number from 10 to 1000; got {text!r}")
    return int(text)


def window_key(bastion: str, chunk_id: str) -> str:
    return f"{bastion}\0{chunk_id}"  # the same document on two bastions is two hits


class VectorSearch:
    """The vector search of ``RemoteIndex`` (``conn``, ``key``, ``model``, ``dim``, ``bastions``, ``ef_search``,
    ``version``, ``own_graph``, the reader in effect and the range of dates are the index's)."""

    def cosine_floor(self) -> float:
        """The median cosine between windows of this model taken at random (a page sample): ``fusion``'s floor."""
        reader = self._reading_as  # each reader's floor from the rows it may read
        if reader not in self._floors and self._calls.get(reader):
            # a draw of the rows the role may read that no other row moves (schema_readers.window_floor)
            row = self.conn.execute("SELECT bastion_agent.window_floor(%s, %s, current_user)",
                                    (self.key, FLOOR_SAMPLE)).fetchone()
            self._floors[reader] = float(row[0]) if row and row[0] is not None else 0.0
        if reader not in self._floors:
            percent = min(100.0, 100.0 * 400 / max(self.counts(reader)[1], 1))
            row = self.conn.execute(
                "WITH s AS (SELECT embedding AS e, row_number() OVER () AS i FROM (SELECT embedding FROM"
                f" bastion_agent.windows TABLESAMPLE SYSTEM ({percent:.6f}) REPEATABLE (26) WHERE model = %s"
                f" LIMIT {FLOOR_SAMPLE}) x)"
                " SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY 1 - (a.e <=> b.e)) FROM s a JOIN s b ON a.i < b.i",
                (self.key,)).fetchone()
            self._floors[reader] = float(row[0]) if row and row[0] is not None else 0.0
        return self._floors[reader]

    def cosines_of(self, query_vector, keys: list[str]) -> dict[str, float]:
        """The cosine of each listed window with the query, read on the server (keyword hits the vector side missed)."""
        if query_vector is None or not keys:
            return {}
        pairs = [key.split("\0", 1) for key in keys]
        literal = "[" + ",".join(repr(float(x)) for x in query_vector) + "]"
        if self._through_functions:
            rows = self.conn.execute("SELECT * FROM bastion_agent.window_cosines(%s, %s, %s, %s, current_user)",
                                     (self.key, literal, [b for b, _ in pairs], [c for _, c in pairs])).fetchall()
            return {window_key(bastion, chunk): float(cos) for bastion, chunk, cos in rows if cos is not None}
        rows = self.conn.execute(
            f"SELECT w.bastion, w.chunk_id, 1 - ({self.model.expression} <=> %s::{self.model.kind}({self.dim}))"
            " FROM bastion_agent.windows w JOIN unnest(%s::text[], %s::text[]) AS k(bastion, chunk_id)"
            "   ON w.bastion = k.bastion AND w.chunk_id = k.chunk_id WHERE w.model = %s",
            (literal, [b for b, _ in pairs], [c for _, c in pairs], self.key)).fetchall()
        return {window_key(bastion, chunk): float(cos) for bastion, chunk, cos in rows if cos is not None}

    def _bastion_filter(self):
        """`` AND bastion = ANY('{…}')`` for the chosen bastions (a literal: the vector search sends no parameters),
        and the range of dates (as ``schema_dates`` words it for a reader)."""
        from psycopg import sql

        where = sql.SQL("")
        if self.bastions:
            where = sql.SQL(" AND bastion = ANY({}::text[])").format(sql.Literal(self.bastions))
        if self._dated():
            since, before = self._within.since, self._within.before
            where += sql.SQL(" AND EXISTS (SELECT 1 FROM bastion_agent.documents d WHERE d.bastion = windows.bastion"
                             " AND d.doc = windows.doc AND d.model = windows.model{}{})").format(
                sql.SQL("") if since is None else sql.SQL(" AND d.modified >= {}").format(sql.Literal(since)),
                sql.SQL("") if before is None else sql.SQL(" AND d.modified < {}").format(sql.Literal(before)))
        return where

    def depth(self, n: int) -> int:
        """How many rows to ask the HNSW scan for, to answer the ``n`` nearest.

        Unfiltered: ``n``. The scan's first pass gathers ``ef_search``
        candidates and returns them nearest first, so its first ``n`` rows
        are the best ``n`` it found; asking for more only reads more rows
        (1.5 ms of 11 at ef_search 400 and 1M windows). Filtered: ``ef_search``
        rows that pass the filter, not just ``n``: the iterative scan walks
        the graph until it has that many of the bastions' rows, and the ``n``
        nearest are taken from them. Asking for ``n`` there loses recall
        (0.79 against 0.94 at ef_search 100, one bastion of ten: docs/publish.md).
        A reader's search is filtered too (row-level security, to its groups).
        """
        filtered = self.bastions or self._reading_as or self._through_functions or self._dated()
        return max(n, self.ef_search) if filtered else n

    def _own_graph(self) -> str | None:
        """The partial graph of the one chosen bastion's rows (schema migration 8), if the server has it:
        only for a bastion the administrator opted in, since its catalog entry shows every role its name."""
        from bastion_agent.publishing import publish_schema

        if self.model is None or len(self.bastions) != 1 or self.version < 8:
            return None
        name = publish_schema.bastion_graph_name(self.key, self.bastions[0])
        found = self.conn.execute("SELECT to_regclass(%s)", (f"{publish_schema.SCHEMA}.{name}",)).fetchone()[0]
        return name if found is not None else None

    def scans_exactly(self) -> bool:
        """Whether a search of the chosen bastions reads their rows instead of walking a graph.

        A bastion the administrator opted in (``--own-graph``) has a graph
        of its own rows (migration 8), which the same statement walks
        (``vector_query`` takes the sort away): 0.54 x the unfiltered p50 at
        100k windows in 10 bastions against 1.06 x for the exact scan, 0.75 x
        against 2.16 x at 300k (docs/publish.md), so such a bastion never
        scans. A bastion not opted in, and several bastions, walk
        the shared graph, which holds every bastion's rows: to find the
        ``ef_search`` nearest of a share ``s`` of them, the walk reads about
        ``1 / s`` times the pages of an unfiltered search, while reading the
        chosen rows costs in proportion to ``s`` and finds the true nearest.
        So up to ``EXACT_SHARE`` of the model's rows, the exact scan (its
        bitmap on ``(bastion, model, doc)``) answers; above it, the graph.
        """
        if self._dated():  # the same rule for a range of dates: its windows against every one the caller reads
            return self._dated_count() <= EXACT_SHARE * max(self.counts(self._reading_as)[1], 1)
        if self.own_graph is not None:
            return False
        windows, every = self.counts(self._reading_as)  # the reader's own counts: nothing it may not read
        return bool(self.bastions) and windows <= EXACT_SHARE * max(every, 1)

    def _dated_count(self) -> int:
        """The windows of the chosen bastions' documents in the search's range of dates, that the caller may read."""
        since, before = self._within.since, self._within.before
        bastions = self.bastions or None
        if self._through_functions:
            return int(self.conn.execute("SELECT bastion_agent.window_count(%s, %s, current_user, %s, %s)",
                                         (self.key, bastions, since, before)).fetchone()[0])
        return int(self.conn.execute(
            "SELECT coalesce(sum(windows), 0) FROM bastion_agent.documents WHERE model = %s"
            " AND (%s::text[] IS NULL OR bastion = ANY(%s::text[])) AND (%s::text IS NULL OR modified >= %s)"
            " AND (%s::text IS NULL OR modified < %s)",
            (self.key, bastions, bastions, since, since, before, before)).fetchone()[0])

    def vector_top(self, query_vector, n: int, exact: bool = False) -> list[tuple[float, str]]:
        """``(cosine, key)`` of the ``n`` nearest windows, best first."""
        if query_vector is None:
            return []
        exact = exact or self.scans_exactly()
        rows = self.in_one_message(*self.vector_query(query_vector, n, exact))
        if self._dated() and not exact and len(rows) < n:
            # the graph's scan stopped before n rows of the range: read the range's rows, so n exist, n return
            rows = self.in_one_message(*self.vector_query(query_vector, n, True))
        ranked = sorted(((1.0 - float(distance), window_key(bastion, chunk)) for bastion, chunk, distance in rows),
                        key=lambda item: (-item[0], item[1]))
        return ranked[:n]

    def vector_query(self, query_vector, n: int, exact: bool = False) -> tuple[list, object]:
        """The settings and the statement of a vector search (``bench/publish/publish.py`` explains the same one)."""
        from psycopg import sql

        literal = "[" + ",".join(repr(float(x)) for x in query_vector) + "]"
        limit = n if exact else self.depth(n)
        if self._through_functions:  # the same statement, run by the owner's function with the reader's groups
            dated = sql.SQL(", {}::text, {}::text").format(sql.Literal(self._within.since),
                                                           sql.Literal(self._within.before)) \
                if self._dated() else sql.SQL("")
            statement = sql.SQL("SELECT bastion, chunk_id, distance FROM bastion_agent.vector_matches({model},"
                                " {query}, {bastions}::text[], {limit}, current_user{dated})").format(
                model=sql.Literal(self.key), query=sql.Literal(literal),
                bastions=sql.Literal(self.bastions or None), limit=sql.Literal(limit), dated=dated)
        else:
            statement = sql.SQL(
                "SELECT bastion, chunk_id, {expression} <=> {query}::{kind} AS distance FROM bastion_agent.windows"
                " WHERE model = {model}{where} ORDER BY distance LIMIT {limit}"
            ).format(expression=sql.SQL(self.model.expression), query=sql.Literal(literal),
                     kind=sql.SQL(f"{self.model.kind}({self.dim})"), model=sql.Literal(self.key),  # the partial index's
                     where=self._bastion_filter(), limit=sql.Literal(limit))                        # literal, as it says
        if exact:
            return [sql.SQL("SET LOCAL enable_indexscan = off")], statement
        settings = [sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(max(self.ef_search, n))),
                    sql.SQL("SET LOCAL hnsw.iterative_scan = relaxed_order")]
        if self._reading_as is not None or self.own_graph is not None or self._through_functions or self._dated():
            # the planner guesses the read policy keeps ~1 % of the rows, so ef_search rows through the graph
            # look dearer than sorting every row: 460 ms against 80 at 100k windows (docs/publish.md); and it
            # sorts a bastion of 10,000 rows rather than walk its own graph, at twice the graph's time (24.9
            # against 12.4 ms, docs/publish.md): the graph walk is what an approximate search means
            settings.append(sql.SQL("SET LOCAL enable_sort = off"))
        return settings, statement

    def in_one_message(self, settings: list, statement) -> list[tuple]:
        """The rows of ``statement`` run with ``settings`` (``SET LOCAL``), all in one message to the server.

        ``BEGIN; SET LOCAL …; SELECT …; COMMIT`` as one simple query: one
        round trip instead of five (0.93x the time at ef_search 100 and 1M
        windows, 0.97x at 300: docs/publish.md), the settings still end with the
        transaction (nothing lingers on serve's shared connection, and Citus
        passes ``SET LOCAL`` on to its workers), and no prepared statement
        can carry a plan over from one search to the next (the simple
        protocol prepares nothing). A failure inside leaves the transaction
        aborted: it is rolled back here, so the next search starts clean.
        """
        from psycopg import Error, pq, sql

        if self._reading_as is not None:  # inside the reader's transaction: the settings end with a savepoint
            message = sql.SQL("; ").join([sql.SQL("SAVEPOINT vector_search"), *settings, statement,
                                          sql.SQL("ROLLBACK TO SAVEPOINT vector_search")])
            return self._rows_of(self.conn.execute(message, prepare=False))
        message = sql.SQL("; ").join([sql.SQL("BEGIN"), *settings, statement, sql.SQL("COMMIT")])
        try:
            cursor = self.conn.execute(message, prepare=False)
        except Error:
            if not self.conn.closed and self.conn.pgconn.transaction_status == pq.TransactionStatus.INERROR:
                self.conn.rollback()
            raise
        return self._rows_of(cursor)

    @staticmethod
    def _rows_of(cursor) -> list[tuple]:
        """The rows of the one statement of a multi-statement message that returns any."""
        rows: list[tuple] = []
        while True:
            if cursor.description is not None:
                rows = cursor.fetchall()
            if not cursor.nextset():
                return rows
