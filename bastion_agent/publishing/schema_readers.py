"""Migration 9: a reader reads through functions, never a table, so the planner tells it nothing about hidden rows.

Under migration 7 a reader held ``SELECT`` on ``windows`` and ``documents``
behind a row-level policy. The policy hides rows, not statistics: the
planner estimates a query's rows from the whole table's statistics, so a
reader that ran ``EXPLAIN`` with literals (``groups && '{hr}'``, a hidden
document's id, an ``idx`` range) read how many hidden rows matched. From
this migration a reader holds no right on those tables. It calls the
functions below, which run as the schema's owner (``SECURITY DEFINER``,
``search_path`` fixed to ``pg_catalog, pg_temp``, every name qualified) and
apply the reader's bastions and groups as plain conditions, as
``keyword_matches`` already did. ``EXPLAIN`` of a call shows a function
scan with the function's declared row count, the same whatever the tables
hold; ``EXPLAIN`` of a table is refused; ``pg_stats`` shows a role only the
columns it may read, so none of these.

Each function takes the role in effect (the caller passes
``current_user``: the reader after ``SET ROLE``) and answers only for a
role the login role may become (``readable_bastions`` and
``readable_groups`` fail closed otherwise), like ``keyword_matches``.

The relevance calibration (``window_floor``) samples the rows the caller
may read, chosen by their documents' ids (sha256 of sanitized text, so in
effect a random draw that does not move with anything else in the table),
where ``TABLESAMPLE SYSTEM`` drew table pages whose mix of hidden and
visible rows moved a reader's relevance.
"""

from __future__ import annotations

from bastion_agent.publishing.schema_sql import SCHEMA, definer

READER_FUNCTIONS_9 = (  # what a reader (and a search role) may call from migration 9
    "window_count(text, text[], name)", "vector_matches(text, text, text[], integer, name)",
    "window_cosines(text, text, text[], text[], name)", "window_rows(text, text[], text[], name)",
    "window_floor(text, integer, name)")
VECTOR_SQL = "vector_sql(text, text, text[], text[], text[], integer)"  # the owner's only
KEYWORD_FUNCTION = "keyword_matches(text, text, text[], integer, integer, name)"  # migration 7's, kept
MAX_FLOOR_SAMPLE = 256  # window_floor compares every pair of its sample: a caller cannot ask for more
FUNCTION_ROWS = 100  # the row count every set-returning function declares: the planner's one figure for a call

# the role in effect and what it reads: every row for the owner or a superuser the login role may become,
# else the bastions and groups the read policy gives it (NULL groups: a search role, every group)
_SCOPE = f"""
        v_oid oid := (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role);
        v_all boolean := v_oid IS NOT NULL AND pg_catalog.pg_has_role(session_user, v_oid, 'MEMBER')
            AND (p_role = current_user OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid = v_oid));
        v_readable text[] := CASE WHEN v_all THEN NULL ELSE {SCHEMA}.readable_bastions(p_role) END;
        v_groups text[] := CASE WHEN v_all THEN NULL ELSE {SCHEMA}.readable_groups(p_role) END;"""
# the same rule as plain conditions on a row of windows (w) or documents (d)
_VISIBLE = """(v_readable IS NULL OR {t}.bastion = ANY (v_readable)) AND (v_groups IS NULL OR {t}.groups && v_groups)
                AND (p_bastions IS NULL OR {t}.bastion = ANY (p_bastions))"""


def reader_functions_sql(vec: str) -> list[str]:
    """The five functions a reader searches through (``vec``: pgvector's schema, quoted)."""
    s = SCHEMA
    d = _VISIBLE.format(t="d")
    return [
        definer("window_count(p_model text, p_bastions text[], p_role name)", "bigint", f"""
        DECLARE{_SCOPE}
        BEGIN
            -- the windows of the chosen bastions the role may read (serve's page and /healthz show it)
            RETURN (SELECT coalesce(sum(d.windows), 0) FROM {s}.documents d WHERE d.model = p_model AND {d});
        END""", "STABLE"),
        _vector_sql(vec),
        definer("vector_matches(p_model text, p_query text, p_bastions text[], p_limit integer, p_role name)",
                "TABLE (bastion text, chunk_id text, distance double precision)", f"""
        DECLARE{_SCOPE}
            v_sql text := {s}.vector_sql(p_model, p_query, v_readable, v_groups, p_bastions, p_limit);
        BEGIN
            -- the caller's SET LOCAL settings (hnsw.ef_search, iterative_scan, enable_sort, enable_indexscan)
            -- apply to the statement run here
            IF v_sql IS NOT NULL THEN
                RETURN QUERY EXECUTE v_sql;
            END IF;
        END""", f"STABLE ROWS {FUNCTION_ROWS}"),
        definer("window_cosines(p_model text, p_query text, p_bastions text[], p_chunks text[], p_role name)",
                "TABLE (bastion text, chunk_id text, cosine double precision)", f"""
        DECLARE{_SCOPE}
        BEGIN
            -- the cosine with the query of listed windows (keyword hits the vector side missed), if readable;
            -- EXECUTE, planned for these values each call: the cached plan of the same static statement read
            -- every row (40 ms against 1 at 20,000 windows)
            RETURN QUERY EXECUTE 'SELECT w.bastion, w.chunk_id, 1 - (w.embedding OPERATOR({vec}.<=>) $1::{vec}.vector)
                FROM {s}.windows w JOIN unnest($2, $3) AS k(bastion, chunk_id)
                    ON w.bastion = k.bastion AND w.chunk_id = k.chunk_id
                WHERE w.model = $4 AND ($5 IS NULL OR w.bastion = ANY ($5)) AND ($6 IS NULL OR w.groups && $6)'
                USING p_query, p_bastions, p_chunks, p_model, v_readable, v_groups;
        END""", f"STABLE ROWS {FUNCTION_ROWS}"),
        definer("window_rows(p_model text, p_bastions text[], p_chunks text[], p_role name)",
                'TABLE (bastion text, chunk_id text, doc text, idx integer, start integer, "end" integer, text text,'
                ' paths jsonb)', f"""
        DECLARE{_SCOPE}
        BEGIN
            -- a hit's row and its document's paths, for the listed windows the role may read (EXECUTE: as above)
            RETURN QUERY EXECUTE 'SELECT w.bastion, w.chunk_id, w.doc, w.idx, w.start, w."end", w.text, d.paths
                FROM {s}.windows w JOIN unnest($1, $2) AS k(bastion, chunk_id)
                    ON w.bastion = k.bastion AND w.chunk_id = k.chunk_id
                LEFT JOIN {s}.documents d ON d.bastion = w.bastion AND d.doc = w.doc AND d.model = w.model
                WHERE w.model = $3 AND ($4 IS NULL OR w.bastion = ANY ($4)) AND ($5 IS NULL OR w.groups && $5)'
                USING p_bastions, p_chunks, p_model, v_readable, v_groups;
        END""", f"STABLE ROWS {FUNCTION_ROWS}"),
        _floor_sql(vec),
    ]


def _vector_sql(vec: str) -> str:
    """``vector_sql``: the statement of a vector search with its scope as literals (the owner's alone, so a test
    or an administrator can ``EXPLAIN`` what a reader's search runs; no reader may call it)."""
    s = SCHEMA
    return definer("vector_sql(p_model text, p_query text, p_readable text[], p_groups text[], p_bastions text[],"
                   " p_limit integer)", "text", f"""
        DECLARE v_dim integer; v_kind text;
        BEGIN
            SELECT m.dim, m.kind INTO v_dim, v_kind FROM {s}.models m WHERE m.model = p_model;
            IF v_dim IS NULL OR v_kind NOT IN ('vector', 'halfvec') THEN
                RETURN NULL;
            END IF;
            -- literals, as a search of the tables had: the model's partial graph (and an opted-in bastion's)
            -- is chosen only for a literal that matches its predicate
            RETURN format(
                'SELECT w.bastion, w.chunk_id, w.embedding::{vec}.%1$s(%2$s) OPERATOR({vec}.<=>) %3$L::{vec}.%1$s(%2$s)'
                ' AS distance FROM {s}.windows w WHERE w.model = %4$L%5$s%6$s%7$s ORDER BY distance LIMIT %8$s',
                v_kind, v_dim, p_query, p_model,
                CASE WHEN p_readable IS NULL THEN '' ELSE format(' AND w.bastion = ANY (%L::text[])', p_readable) END,
                CASE WHEN p_groups IS NULL THEN '' ELSE format(' AND w.groups && %L::text[]', p_groups) END,
                CASE WHEN p_bastions IS NULL THEN '' ELSE format(' AND w.bastion = ANY (%L::text[])', p_bastions) END,
                greatest(0, least(coalesce(p_limit, 0), 100000)));
        END""", "STABLE")


def _floor_sql(vec: str) -> str:
    """``window_floor``: the median pairwise cosine of a sample of the windows the role may read."""
    s = SCHEMA
    p_bastions = "NULL::text[]"  # the floor is the model's, over every bastion the role reads
    d = _VISIBLE.format(t="d").replace("p_bastions", p_bastions)
    return definer("window_floor(p_model text, p_sample integer, p_role name)", "double precision", f"""
        DECLARE{_SCOPE}
            v_sample integer := least(greatest(coalesce(p_sample, 0), 0), {MAX_FLOOR_SAMPLE});  -- pairs: n^2 / 2
        BEGIN
            -- the sample: windows of the readable documents with the lowest ids (content hashes, so a draw that
            -- no hidden row moves), each document's first window before any second one (neighbouring windows of
            -- one document are alike, and would raise the floor); the documents table is read, not the pages
            RETURN (WITH docs AS MATERIALIZED (SELECT d.bastion, d.doc FROM {s}.documents d
                        WHERE d.model = p_model AND {d} ORDER BY d.doc, d.bastion LIMIT v_sample),
                    s AS MATERIALIZED (SELECT w.embedding AS e, row_number() OVER () AS i FROM (
                        SELECT w.embedding FROM docs JOIN {s}.windows w
                            ON w.bastion = docs.bastion AND w.doc = docs.doc AND w.model = p_model
                        WHERE (v_groups IS NULL OR w.groups && v_groups)
                        ORDER BY w.idx, docs.doc, docs.bastion LIMIT v_sample) w)
                SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY 1 - (a.e OPERATOR({vec}.<=>) b.e))
                FROM s a JOIN s b ON a.i < b.i);
        END""", "STABLE")


def reader_roles_sql_9(functions: tuple[str, ...] = READER_FUNCTIONS_9 + (KEYWORD_FUNCTION,)) -> list[str]:
    """``add_searcher``, ``add_reader`` and ``remove_searcher`` again: a reader gets the functions and no table,
    a search role (every group) keeps its tables and gets the functions too. ``functions``: what a reader may
    call (migration 9's list; migration 10 adds the date-filtered ones)."""
    from bastion_agent.publishing.schema_access import SEARCHER_FUNCTIONS, SEARCHER_TABLES, reader_checks

    s = SCHEMA
    tables = ", ".join(f"{s}.{t}" for t in SEARCHER_TABLES)
    plain_role, not_gateway, _ = reader_checks()
    calls = ", ".join(f"{s}.{f}" for f in functions)
    reader_grants = f"""
            EXECUTE format('GRANT USAGE ON SCHEMA {s} TO %I', p_role);
            EXECUTE format('REVOKE ALL ON {s}.windows, {s}.documents FROM %I', p_role);
            EXECUTE format('GRANT SELECT ON {s}.migrations, {s}.models TO %I', p_role);
            EXECUTE format('GRANT EXECUTE ON FUNCTION {calls} TO %I', p_role);"""
    return [
        definer("add_searcher(p_role name)", "void", f"""
        DECLARE v_oid oid;
        BEGIN{plain_role}{not_gateway}
            DELETE FROM {s}.readers x WHERE x.role = v_oid;  -- every group now
            INSERT INTO {s}.searchers (role, role_name) VALUES (v_oid, p_role)
                ON CONFLICT (role) DO UPDATE SET role_name = excluded.role_name;{reader_grants}
            EXECUTE format('GRANT SELECT ON {tables} TO %I', p_role);
            EXECUTE format('GRANT EXECUTE ON FUNCTION {s}.{SEARCHER_FUNCTIONS[0]} TO %I', p_role);
        END"""),
        definer("add_reader(p_role name, p_groups text[])", "void", f"""
        DECLARE v_oid oid; v_groups text[] := ARRAY(SELECT DISTINCT g FROM unnest(p_groups) g ORDER BY g);
        BEGIN{plain_role}{not_gateway}
            IF NOT {s}.valid_groups(v_groups) THEN
                RAISE EXCEPTION 'a group name is 1-63 lowercase letters, digits, - and _ (at most 256 groups)';
            END IF;
            DELETE FROM {s}.searchers x WHERE x.role = v_oid;  -- no longer every group
            EXECUTE format('REVOKE ALL ON FUNCTION {s}.{SEARCHER_FUNCTIONS[0]} FROM %I', p_role);
            INSERT INTO {s}.readers (role, role_name, groups) VALUES (v_oid, p_role, v_groups)
                ON CONFLICT (role) DO UPDATE SET role_name = excluded.role_name,
                    groups = excluded.groups;{reader_grants}
        END"""),
        definer("remove_searcher(p_role name)", "void", f"""
        BEGIN
            DELETE FROM {s}.searchers x WHERE x.role_name = p_role
                OR x.role = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role);
            DELETE FROM {s}.readers x WHERE x.role_name = p_role
                OR x.role = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role);
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = p_role) THEN
                EXECUTE format('REVOKE ALL ON {tables} FROM %I', p_role);
                EXECUTE format('REVOKE ALL ON FUNCTION {s}.{SEARCHER_FUNCTIONS[0]}, {calls} FROM %I', p_role);
                EXECUTE format('REVOKE ALL ON SCHEMA {s} FROM %I', p_role);
            END IF;
        END"""),
    ]


def sealed_readers_sql() -> list[str]:
    """What migration 9 runs after the functions: PUBLIC may call none of them, and every reader and search role
    of before gets its rights the new way (a reader loses its tables)."""
    s = SCHEMA
    return ([f"REVOKE ALL ON FUNCTION {s}.{f} FROM PUBLIC" for f in READER_FUNCTIONS_9 + (VECTOR_SQL,)]
            + reader_roles_sql_9() + [regrant_readers_sql()])


def regrant_readers_sql() -> str:
    """Every reader and search role of before gets its rights again, from the ``add_*`` functions now in place."""
    s = SCHEMA
    return f"""DO $do$
        DECLARE v_role name; v_groups text[];
        BEGIN
            FOR v_role, v_groups IN SELECT x.role_name, x.groups FROM {s}.readers x
                    JOIN pg_catalog.pg_roles r ON r.oid = x.role ORDER BY 1 LOOP
                PERFORM {s}.add_reader(v_role, v_groups);
            END LOOP;
            FOR v_role IN SELECT x.role_name FROM {s}.searchers x JOIN pg_catalog.pg_roles r ON r.oid = x.role
                    ORDER BY 1 LOOP
                PERFORM {s}.add_searcher(v_role);
            END LOOP;
        END $do$"""
