"""The central schema: numbered migrations, one HNSW index per model, the roles and their functions.

Everything lives in the schema ``bastion_agent``:

- ``migrations(version PK, name, applied_at)``: which numbered step ran;
- ``windows(bastion, chunk_id, model, doc, idx, start, end, text, embedding,
  tsv)``, PK ``(bastion, chunk_id, model)``: every bastion's current
  windows. ``embedding`` is a ``vector`` without a fixed dimension, so
  models of different sizes share the table; ``tsv`` is generated from the
  sanitized text (``to_tsvector('english', text)``) with a GIN index;
- ``documents(bastion, doc, model, chunks_fingerprint, paths, windows,
  published_at)``: what publish compares against, and each hit's paths;
- ``models(model PK, dim, kind, index_name)``: one partial HNSW index per
  model on ``(embedding::vector(dim))`` with cosine distance (``halfvec`` above
  2000 dimensions, pgvector's limit for ``vector``), ``WHERE model = '…'``; a
  search names the same expression and predicate, so the planner uses it;
  since migration 8 also one per (model, bastion) for the bastions the
  administrator opts in (``bastions.own_graph``), ``WHERE model = '…' AND
  bastion = '…'``, made and dropped by the owner's triggers on ``bastions``
  and ``models``, which a search of that one bastion walks;
- ``bastions(bastion PK, role oid, role_name, own_graph)``: which login
  role publishes which bastion, and (migration 8) whether it has graphs of
  its own; its row is also the bastion's publish lock;
- ``searchers(role oid PK, role_name)``: the roles that read every
  registered bastion (``readable_bastions()``; migration 7 adds readers limited to groups).

Since migration 6 no role but the owner holds a right on a table: a
publishing role writes through ``SECURITY DEFINER`` functions that take its
bastion from ``bastions`` (``write_documents`` and the rest), a search role
reads through one policy, ``bastion = ANY(readable_bastions())``, which is
empty for a role with no mapping (fails closed). Every migration runs in one
transaction with its ``migrations`` row, serialised by a lock on
``migrations``, never an advisory key (any role can take any advisory key).
``ensure_model`` registers a model and builds its partial HNSW index, as the
owner; only the owner (and superusers) may call it.
"""

from __future__ import annotations

SCHEMA = "bastion_agent"
MIGRATION_LOCK = 0x62617374  # the advisory key migrations 3 to 5 used (migration 6 takes none)
HALFVEC_ABOVE = 2000  # pgvector indexes vector up to 2000 dimensions, halfvec up to 4000
# How a new model's HNSW graph is built (migration 5; changing it takes a new migration that replaces
# ensure_model). pgvector's m with a deeper build: of the graphs measured on the benchmark's windows
# (m 12 to 32, ef_construction 64 to 400), the one that reaches recall@10 0.95 reading the fewest pages a
# query, and no slower to build than migration 4's m 24 / 128 (docs/publish.md, "Measured").
HNSW_BUILD = {"m": 16, "ef_construction": 200}
M004_BUILD = {"m": 24, "ef_construction": 128}  # what migration 4 made ensure_model build
PGVECTOR_DEFAULTS = {"m": 16, "ef_construction": 64}


def _m001_tables(conn) -> None:
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    conn.execute(f"""
        CREATE TABLE {SCHEMA}.windows (
            bastion text NOT NULL,
            chunk_id text NOT NULL,
            model text NOT NULL,
            doc text NOT NULL,
            idx integer NOT NULL,
            start integer NOT NULL,
            "end" integer NOT NULL,
            text text NOT NULL,
            embedding vector NOT NULL,
            tsv tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, text)) STORED,
            PRIMARY KEY (bastion, chunk_id, model)
        )""")
    conn.execute(f"CREATE INDEX windows_doc ON {SCHEMA}.windows (bastion, model, doc)")
    conn.execute(f"CREATE INDEX windows_tsv ON {SCHEMA}.windows USING gin (tsv)")
    conn.execute(f"""
        CREATE TABLE {SCHEMA}.documents (
            bastion text NOT NULL,
            doc text NOT NULL,
            model text NOT NULL,
            chunks_fingerprint text NOT NULL,
            paths jsonb NOT NULL,
            windows integer NOT NULL,
            published_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (bastion, doc, model)
        )""")
    conn.execute(f"""
        CREATE TABLE {SCHEMA}.models (
            model text PRIMARY KEY,
            dim integer NOT NULL CHECK (dim BETWEEN 1 AND 4000),
            kind text NOT NULL CHECK (kind IN ('vector', 'halfvec')),
            index_name text NOT NULL UNIQUE
        )""")
    conn.execute(f"CREATE TABLE {SCHEMA}.publishers (role name NOT NULL, bastion text NOT NULL,"
                 " PRIMARY KEY (role, bastion))")


def _m002_row_security(conn) -> None:
    """Row-level security: a role writes (and reads) only the bastions ``publishers`` maps it to.

    A role with no ``publishers`` row (the search role) reads every row and
    writes none; the tables' owner and superusers bypass the policies.
    ``publishers`` itself shows each role only its own rows.
    """
    mine = f"SELECT p.bastion FROM {SCHEMA}.publishers p WHERE p.role = current_user"
    own = f"bastion IN ({mine})"
    reader = f"NOT EXISTS ({mine})"  # evaluated once per query (an init plan), before the per-row test
    conn.execute(f"ALTER TABLE {SCHEMA}.publishers ENABLE ROW LEVEL SECURITY")
    conn.execute(f"CREATE POLICY publishers_own ON {SCHEMA}.publishers FOR SELECT USING (role = current_user)")
    for table in ("windows", "documents"):
        conn.execute(f"ALTER TABLE {SCHEMA}.{table} ENABLE ROW LEVEL SECURITY")
        conn.execute(f"CREATE POLICY {table}_read ON {SCHEMA}.{table} FOR SELECT USING ({reader} OR {own})")
        conn.execute(f"CREATE POLICY {table}_insert ON {SCHEMA}.{table} FOR INSERT WITH CHECK ({own})")
        conn.execute(f"CREATE POLICY {table}_update ON {SCHEMA}.{table} FOR UPDATE USING ({own}) WITH CHECK ({own})")
        conn.execute(f"CREATE POLICY {table}_delete ON {SCHEMA}.{table} FOR DELETE USING ({own})")


def _ensure_model_function(build: dict | None, vec: str | None = None) -> str:
    """The ``ensure_model`` function's SQL; ``build``: the HNSW ``WITH`` options it creates and records.

    Migration 3 made it without options (pgvector's defaults, m 16 and
    ef_construction 64); migration 4 replaces it with ``M004_BUILD``,
    migration 5 with ``HNSW_BUILD``. Migration 6 (``vec``: pgvector's
    schema) qualifies every name (its search_path is pg_catalog, pg_temp),
    answers a known model without any lock, and serialises registrations
    with a lock on ``models`` instead of an advisory key any role can take.
    """
    if vec is not None:
        return f"""
        CREATE OR REPLACE FUNCTION {SCHEMA}.ensure_model(p_model text, p_dim integer) RETURNS text
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
        DECLARE
            known {SCHEMA}.models;
            v_kind text := CASE WHEN p_dim > {HALFVEC_ABOVE} THEN 'halfvec' ELSE 'vector' END;
            v_index text := 'windows_hnsw_' || substr(md5(p_model), 1, 16);
        BEGIN
            IF p_dim IS NULL OR p_dim < 1 OR p_dim > 4000 THEN
                RAISE EXCEPTION 'dimension % is outside 1..4000', p_dim;
            END IF;
            IF p_model IS NULL OR length(p_model) = 0 OR length(p_model) > 500 THEN
                RAISE EXCEPTION 'a model name must be 1..500 characters';
            END IF;
            FOR attempt IN 1..2 LOOP
                SELECT * INTO known FROM {SCHEMA}.models WHERE model = p_model;
                IF FOUND THEN
                    IF known.dim <> p_dim THEN
                        RAISE EXCEPTION 'model % is published with dim %, not %', p_model, known.dim, p_dim;
                    END IF;
                    RETURN known.index_name;
                END IF;
                EXIT WHEN attempt = 2;
                LOCK TABLE {SCHEMA}.models IN SHARE ROW EXCLUSIVE MODE;  -- one registration at a time
            END LOOP;
            EXECUTE format('CREATE INDEX %I ON {SCHEMA}.windows USING hnsw ((embedding::{vec}.%s(%s)) {vec}.%s_cosine_ops)'
                           ' WITH (m = %s, ef_construction = %s) WHERE model = %L',
                           v_index, v_kind, p_dim, v_kind, {build['m']}, {build['ef_construction']}, p_model);
            INSERT INTO {SCHEMA}.models VALUES (p_model, p_dim, v_kind, v_index, {build['m']}, {build['ef_construction']});
            RETURN v_index;
        END
        $fn$"""
    with_clause = insert = ""
    if build:
        with_clause = " WITH (m = %s, ef_construction = %s)"
        insert = f", {build['m']}, {build['ef_construction']}"
    arguments = f"v_index, v_kind, p_dim, v_kind, {build['m']}, {build['ef_construction']}, p_model" if build else \
        "v_index, v_kind, p_dim, v_kind, p_model"
    return f"""
        CREATE OR REPLACE FUNCTION {SCHEMA}.ensure_model(p_model text, p_dim integer) RETURNS text
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $fn$
        DECLARE
            known {SCHEMA}.models;
            v_kind text := CASE WHEN p_dim > {HALFVEC_ABOVE} THEN 'halfvec' ELSE 'vector' END;
            v_index text := 'windows_hnsw_' || substr(md5(p_model), 1, 16);
        BEGIN
            IF p_dim IS NULL OR p_dim < 1 OR p_dim > 4000 THEN
                RAISE EXCEPTION 'dimension % is outside 1..4000', p_dim;
            END IF;
            IF p_model IS NULL OR length(p_model) = 0 OR length(p_model) > 500 THEN
                RAISE EXCEPTION 'a model name must be 1..500 characters';
            END IF;
            PERFORM pg_advisory_xact_lock({MIGRATION_LOCK});
            SELECT * INTO known FROM {SCHEMA}.models WHERE model = p_model;
            IF FOUND THEN
                IF known.dim <> p_dim THEN
                    RAISE EXCEPTION 'model % is published with dim %, not %', p_model, known.dim, p_dim;
                END IF;
                RETURN known.index_name;
            END IF;
            EXECUTE format('CREATE INDEX %I ON {SCHEMA}.windows USING hnsw ((embedding::%s(%s)) %s_cosine_ops)'
                           '{with_clause} WHERE model = %L', {arguments});
            INSERT INTO {SCHEMA}.models VALUES (p_model, p_dim, v_kind, v_index{insert});
            RETURN v_index;
        END
        $fn$"""


def _m003_ensure_model(conn) -> None:
    """``ensure_model(model, dim)``: register a model and create its partial HNSW index, as the owner."""
    conn.execute(_ensure_model_function(None))
    # functions are executable by PUBLIC by default: only the roles docs/publish.md grants it to
    conn.execute(f"REVOKE EXECUTE ON FUNCTION {SCHEMA}.ensure_model(text, integer) FROM PUBLIC")


def _m004_hnsw_build(conn) -> None:
    """A new model's HNSW index is built with ``M004_BUILD``; ``models`` records each index's parameters.

    An index made before keeps its parameters (rebuilding a large one here
    would hold every publish for as long as the build takes, an hour at 1M
    windows): its row records what it was built with (pgvector's defaults
    unless its ``WITH`` said otherwise), and ``rebuild_index`` (or the SQL
    in docs/publish.md) rebuilds it beside the old one when convenient.
    """
    conn.execute(f"ALTER TABLE {SCHEMA}.models ADD COLUMN hnsw_m integer, ADD COLUMN hnsw_ef_construction integer")
    options = ("(SELECT o.option_value::integer FROM pg_class c, pg_options_to_table(c.reloptions) o"
               f" WHERE c.oid = to_regclass('{SCHEMA}.' || quote_ident(index_name)) AND o.option_name = %s)")
    conn.execute(f"UPDATE {SCHEMA}.models SET hnsw_m = coalesce({options}, {PGVECTOR_DEFAULTS['m']}),"
                 f" hnsw_ef_construction = coalesce({options}, {PGVECTOR_DEFAULTS['ef_construction']})",
                 ("m", "ef_construction"))
    conn.execute(f"ALTER TABLE {SCHEMA}.models ALTER COLUMN hnsw_m SET NOT NULL,"
                 " ALTER COLUMN hnsw_ef_construction SET NOT NULL")
    conn.execute(_ensure_model_function(M004_BUILD))  # CREATE OR REPLACE keeps its owner and its grants


def _m005_hnsw_build(conn) -> None:
    """A new model's HNSW index is built with ``HNSW_BUILD``; the indexes made before are kept, as recorded."""
    conn.execute(_ensure_model_function(HNSW_BUILD))


# --- migration 6: least privilege by construction ---------------------------
#
# A publishing role holds no right on any table: it hands its rows to the
# functions below, which run as the schema's owner (SECURITY DEFINER, a fixed
# search_path, every name qualified) and take its bastion from ``bastions``
# (the login role's oid), never from what it says. A search role holds SELECT
# through one policy: the rows of the bastions ``readable_bastions()`` gives
# it. No mapping, no rows: every check fails closed.

BASTION_NAME_SQL = "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"  # config.manifest's DNS label, as a CHECK
PUBLISHER_FUNCTIONS = (  # what add_bastion grants a publishing role, and nothing else
    "published_documents(text, text, integer)", "lock_bastion(text)", "open_staging()",
    "write_documents(text, text, text[], text[], text[], integer[])", "update_paths(text, text, text[], text[])",
    "delete_documents(text, text, text[])")
SEARCHER_TABLES = ("windows", "documents", "models", "migrations")
SEARCHER_FUNCTIONS = ("keyword_matches(text, text, text[], integer, integer)",)
OWNER_FUNCTIONS = ("add_bastion(text, name)", "remove_bastion(text)", "add_searcher(name)", "remove_searcher(name)",
                   "ensure_model(text, integer)")
STAGING = "publish_staging"  # the temp table a publisher COPYs into (created and owned by the owner)


# the login role (a SECURITY DEFINER function runs as the owner, so current_user inside it is the owner)
_SESSION_ROLE = "(SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = session_user)"
# a publishing function's first step: the caller's bastion, from the login role's mapping, never from what it says
_CALLER_CHECK = f"""
        SELECT b.bastion INTO v_bastion FROM {SCHEMA}.bastions b WHERE b.role = {_SESSION_ROLE};
        IF v_bastion IS NULL THEN
            RAISE EXCEPTION 'role % publishes no bastion here', session_user
                USING HINT = 'the administrator runs: bastion-agent admin add-bastion NAME';
        END IF;
        IF v_bastion <> p_bastion THEN
            RAISE EXCEPTION 'role % publishes bastion %, not %', session_user, v_bastion, p_bastion
                USING HINT = 'use the publishing role of the manifest''s bastion';
        END IF;"""
# the staging table must be the owner's own (open_staging), not one the caller made with a trigger or policy
_STAGED_CHECK = f"""
        SELECT c.relowner = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user)
            AND c.relkind = 'r' AND NOT c.relrowsecurity INTO v_ok
            FROM pg_catalog.pg_class c WHERE c.oid = to_regclass('pg_temp.{STAGING}');
        IF v_ok IS NOT TRUE THEN
            RAISE EXCEPTION 'the staging table is not the one open_staging() made';
        END IF;"""


def _vector_schema(conn) -> str:
    row = conn.execute("SELECT n.nspname FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n"
                       " ON n.oid = e.extnamespace WHERE e.extname = 'vector'").fetchone()
    return row[0]


def _definer(signature: str, returns: str, body: str, volatility: str = "VOLATILE") -> str:
    """A function that runs as the owner: a fixed search_path (pg_temp last), plpgsql, not executable by PUBLIC."""
    return (f"CREATE OR REPLACE FUNCTION {SCHEMA}.{signature} RETURNS {returns} LANGUAGE plpgsql {volatility}"
            f" SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$\n{body}\n$fn$")


def _least_privilege_sql(vec: str) -> list[str]:
    """Migration 6's statements after the grants of before are revoked (``vec``: pgvector's schema, quoted)."""
    return (_bastions_table_sql() + _read_policy_sql() + _publisher_lock_sql(vec) + _publisher_write_sql(vec)
            + _bastion_role_functions(PUBLISHER_FUNCTIONS) + _searcher_functions_sql()
            + [_ensure_model_function(HNSW_BUILD, vec)] + _function_rights_sql())


def _bastions_table_sql() -> list[str]:
    """``bastions`` and ``searchers`` (the mapping from role to bastion) replace ``publishers`` and its policies."""
    s = SCHEMA
    statements = [
        f"""CREATE TABLE {s}.bastions (
            bastion text PRIMARY KEY CHECK (bastion ~ '{BASTION_NAME_SQL}'),
            role oid UNIQUE,
            role_name name,
            added_at timestamptz NOT NULL DEFAULT now())""",
        f"CREATE TABLE {s}.searchers (role oid PRIMARY KEY, role_name name NOT NULL,"
        " added_at timestamptz NOT NULL DEFAULT now())",
        # the bastions of before, with the roles publishers mapped them to
        f"""INSERT INTO {s}.bastions (bastion, role, role_name)
            SELECT b.bastion, r.oid, r.rolname FROM (SELECT DISTINCT bastion FROM {s}.documents
                UNION SELECT bastion FROM {s}.publishers) b
            LEFT JOIN LATERAL (SELECT p.role FROM {s}.publishers p WHERE p.bastion = b.bastion
                ORDER BY p.role LIMIT 1) p ON true
            LEFT JOIN pg_catalog.pg_roles r ON r.rolname = p.role
            WHERE b.bastion ~ '{BASTION_NAME_SQL}'
            ON CONFLICT DO NOTHING""",
    ]
    # a vector (1.5 kB at 384 dimensions) with its text and tsv passes the 2 kB TOAST threshold: kept out of
    # line, an exact scan of one bastion read 1.6 buffers a row; MAIN keeps it in the row when it fits
    # (rows written from now on)
    statements.append(f"ALTER TABLE {s}.windows ALTER COLUMN embedding SET STORAGE MAIN")
    for table in ("windows", "documents"):
        for policy in ("read", "insert", "update", "delete"):
            statements.append(f"DROP POLICY IF EXISTS {table}_{policy} ON {s}.{table}")
    statements += [f"DROP TABLE {s}.publishers"]
    return statements


def _read_policy_sql() -> list[str]:
    """A search role reads every registered bastion through one policy; any other role reads nothing."""
    s = SCHEMA
    me = _SESSION_ROLE
    statements = []
    statements.append(_definer("readable_bastions()", "text[]", f"""
        BEGIN
            -- the bastions whose rows the caller reads: every registered one for a search role, none otherwise
            -- (migration 7 adds readers, each narrowed to its groups)
            IF EXISTS (SELECT 1 FROM {s}.searchers x WHERE x.role = {me}) THEN
                RETURN ARRAY(SELECT b.bastion FROM {s}.bastions b ORDER BY b.bastion);
            END IF;
            RETURN '{{}}'::text[];
        END""", "STABLE"))
    for table in ("windows", "documents"):
        # the function is called once per query (an init plan), not per row
        statements.append(f"CREATE POLICY {table}_read ON {s}.{table} FOR SELECT"
                          f" USING (bastion = ANY ((SELECT {s}.readable_bastions())::text[]))")
    return statements


def _publisher_lock_sql(vec: str) -> list[str]:
    """What a publisher calls before it writes: what it published, its bastion's lock, its staging table."""
    s = SCHEMA
    caller = _CALLER_CHECK
    model_check = f"""
        SELECT m.dim INTO v_dim FROM {s}.models m WHERE m.model = p_model;
        IF v_dim IS NULL THEN
            RAISE EXCEPTION 'model % is not registered on this server', p_model
                USING HINT = format('the administrator runs: bastion-agent admin add-model %s --dim %s', p_model, p_dim);
        END IF;
        IF v_dim <> p_dim THEN
            RAISE EXCEPTION 'model % is published with dim %, not %', p_model, v_dim, p_dim;
        END IF;"""
    statements = []
    statements.append(_definer("published_documents(p_bastion text, p_model text, p_dim integer)",
                               "TABLE (doc text, chunks_fingerprint text, paths text, windows integer)", f"""
        DECLARE v_bastion text; v_dim integer;
        BEGIN{caller}{model_check}
            RETURN QUERY SELECT d.doc, d.chunks_fingerprint, d.paths::text, d.windows FROM {s}.documents d
                WHERE d.bastion = v_bastion AND d.model = p_model;
        END""", "STABLE"))
    statements.append(_definer("lock_bastion(p_bastion text)", "text", f"""
        DECLARE v_bastion text;
        BEGIN{caller}
            -- one publish of a bastion at a time: a lock on its own row, held until the caller's
            -- transaction ends (a killed publisher's ends with its connection); nobody else can take it
            PERFORM 1 FROM {s}.bastions b WHERE b.bastion = v_bastion FOR UPDATE NOWAIT;
            RETURN v_bastion;
        END"""))
    statements.append(_definer("open_staging()", "void", f"""
        BEGIN
            -- the temp table a publisher COPYs its rows into: the owner's, so the caller can only INSERT
            -- into it (no trigger, policy or view of its own runs when the owner reads it back)
            IF to_regclass('pg_temp.{STAGING}') IS NULL THEN
                CREATE TEMP TABLE {STAGING} (chunk_id text, doc text, idx integer, start integer, "end" integer,
                    text text, embedding {vec}.vector) ON COMMIT DELETE ROWS;
                EXECUTE format('GRANT INSERT ON pg_temp.{STAGING} TO %I', session_user);
            END IF;
        END"""))
    return statements


def _publisher_write_sql(vec: str) -> list[str]:
    """A publisher's writes, each to its own bastion only: a batch of documents, new paths, deletions."""
    s = SCHEMA
    caller = _CALLER_CHECK
    statements = []
    staged_check = _STAGED_CHECK
    statements.append(_definer(
        "write_documents(p_bastion text, p_model text, p_docs text[], p_fingerprints text[], p_paths text[],"
        " p_windows integer[])", "integer", f"""
        DECLARE v_bastion text; v_dim integer; v_ok boolean; v_deleted integer; v_inserted integer;
        BEGIN{caller}
            SELECT m.dim INTO v_dim FROM {s}.models m WHERE m.model = p_model;
            IF v_dim IS NULL THEN
                RAISE EXCEPTION 'model % is not registered on this server', p_model;
            END IF;{staged_check}
            DELETE FROM {s}.windows w WHERE w.bastion = v_bastion AND w.model = p_model AND w.doc = ANY (p_docs);
            GET DIAGNOSTICS v_deleted = ROW_COUNT;
            -- only the batch's documents, only the model's dimension (a hash join, not a scan of the array
            -- per row); the count must then be the windows the documents declare
            INSERT INTO {s}.windows (bastion, model, chunk_id, doc, idx, start, "end", text, embedding)
                SELECT v_bastion, p_model, t.chunk_id, t.doc, t.idx, t.start, t."end", t.text, t.embedding
                FROM pg_temp.{STAGING} t JOIN (SELECT DISTINCT u.doc FROM unnest(p_docs) AS u(doc)) d ON d.doc = t.doc
                WHERE {vec}.vector_dims(t.embedding) = v_dim;
            GET DIAGNOSTICS v_inserted = ROW_COUNT;
            IF v_inserted <> (SELECT coalesce(sum(n), 0) FROM unnest(p_windows) AS n) THEN
                RAISE EXCEPTION 'the batch declares % windows, % staged windows belong to its documents with dim %',
                    (SELECT coalesce(sum(n), 0) FROM unnest(p_windows) AS n), v_inserted, v_dim;
            END IF;
            INSERT INTO {s}.documents (bastion, model, doc, chunks_fingerprint, paths, windows, published_at)
                SELECT v_bastion, p_model, d.doc, d.fingerprint, d.paths::jsonb, d.windows, now()
                FROM unnest(p_docs, p_fingerprints, p_paths, p_windows) AS d(doc, fingerprint, paths, windows)
                ON CONFLICT (bastion, doc, model) DO UPDATE SET chunks_fingerprint = excluded.chunks_fingerprint,
                    paths = excluded.paths, windows = excluded.windows, published_at = excluded.published_at;
            TRUNCATE pg_temp.{STAGING};
            RETURN v_deleted;
        END"""))
    statements.append(_definer("update_paths(p_bastion text, p_model text, p_docs text[], p_paths text[])",
                               "integer", f"""
        DECLARE v_bastion text; v_count integer;
        BEGIN{caller}
            UPDATE {s}.documents d SET paths = u.paths::jsonb, published_at = now()
                FROM unnest(p_docs, p_paths) AS u(doc, paths)
                WHERE d.bastion = v_bastion AND d.model = p_model AND d.doc = u.doc;
            GET DIAGNOSTICS v_count = ROW_COUNT;
            RETURN v_count;
        END"""))
    statements.append(_definer("delete_documents(p_bastion text, p_model text, p_docs text[])", "integer", f"""
        DECLARE v_bastion text; v_count integer;
        BEGIN{caller}
            DELETE FROM {s}.windows w WHERE w.bastion = v_bastion AND w.model = p_model AND w.doc = ANY (p_docs);
            GET DIAGNOSTICS v_count = ROW_COUNT;
            DELETE FROM {s}.documents d WHERE d.bastion = v_bastion AND d.model = p_model AND d.doc = ANY (p_docs);
            RETURN v_count;
        END"""))
    return statements


def _searcher_functions_sql() -> list[str]:
    """The owner's ``add_searcher`` and ``remove_searcher``, and the keyword pass a search role calls."""
    s = SCHEMA
    statements = []
    searcher_tables = ", ".join(f"{s}.{t}" for t in SEARCHER_TABLES)
    statements.append(_definer("add_searcher(p_role name)", "void", f"""
        DECLARE v_oid oid;
        BEGIN
            SELECT r.oid INTO v_oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role;
            IF v_oid IS NULL THEN
                RAISE EXCEPTION 'role % does not exist', p_role USING HINT = 'a superuser creates it first (docs/publish.md)';
            END IF;
            IF EXISTS (SELECT 1 FROM {s}.bastions b WHERE b.role = v_oid) THEN
                RAISE EXCEPTION 'role % publishes a bastion: a search role must be another role', p_role;
            END IF;
            INSERT INTO {s}.searchers (role, role_name) VALUES (v_oid, p_role)
                ON CONFLICT (role) DO UPDATE SET role_name = excluded.role_name;
            EXECUTE format('GRANT USAGE ON SCHEMA {s} TO %I', p_role);
            EXECUTE format('GRANT SELECT ON {searcher_tables} TO %I', p_role);
            EXECUTE format('GRANT EXECUTE ON FUNCTION {s}.{SEARCHER_FUNCTIONS[0]} TO %I', p_role);
        END"""))
    statements.append(_definer("remove_searcher(p_role name)", "void", f"""
        BEGIN
            DELETE FROM {s}.searchers x WHERE x.role_name = p_role
                OR x.role = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role);
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = p_role) THEN
                EXECUTE format('REVOKE ALL ON {searcher_tables} FROM %I', p_role);
                EXECUTE format('REVOKE ALL ON FUNCTION {s}.{SEARCHER_FUNCTIONS[0]} FROM %I', p_role);
                EXECUTE format('REVOKE ALL ON SCHEMA {s} FROM %I', p_role);
            END IF;
        END"""))
    statements.append(_definer(
        "keyword_matches(p_query text, p_model text, p_bastions text[], p_pool integer, p_n integer)",
        "TABLE (bastion text, chunk_id text, r real)", f"""
        DECLARE
            -- the owner and superusers read every row (as row-level security lets them); others the policy's
            v_readable text[] := CASE WHEN session_user = current_user OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r
                WHERE r.rolname = session_user) THEN NULL ELSE {s}.readable_bastions() END;
        BEGIN
            -- the keyword pass of a search, with the policy's rule written as a plain condition: under
            -- row-level security PostgreSQL may not use the GIN index for @@ (not leakproof), and scans
            -- every row instead (600 ms at 100k windows against 10 ms at 1M without the policy)
            RETURN QUERY
            WITH q AS (SELECT to_tsquery('english'::regconfig, p_query) AS q),
                 m AS MATERIALIZED (SELECT w.bastion, w.chunk_id, w.tsv FROM {s}.windows w, q
                     WHERE w.model = p_model AND w.tsv @@ q.q
                       AND (v_readable IS NULL OR w.bastion = ANY (v_readable))
                       AND (p_bastions IS NULL OR w.bastion = ANY (p_bastions))
                     LIMIT p_pool)
            SELECT m.bastion, m.chunk_id, ts_rank(m.tsv, q.q, 32) FROM m, q
                ORDER BY 3 DESC, 1, 2 LIMIT p_n;
        END""", "STABLE"))
    return statements


def _function_rights_sql() -> list[str]:
    """No function is executable by PUBLIC but ``readable_bastions()``, which every policy check calls."""
    s = SCHEMA
    statements = []
    statements += [f"REVOKE ALL ON FUNCTION {s}.{f} FROM PUBLIC"
                   for f in PUBLISHER_FUNCTIONS + OWNER_FUNCTIONS + SEARCHER_FUNCTIONS]
    statements.append(f"REVOKE ALL ON FUNCTION {s}.readable_bastions() FROM PUBLIC")
    statements.append(f"GRANT EXECUTE ON FUNCTION {s}.readable_bastions() TO PUBLIC")  # what a policy calls
    return statements


def _bastion_role_functions(functions: tuple[str, ...]) -> list[str]:
    """``add_bastion`` and ``remove_bastion``, granting and revoking ``functions`` (migration 6's list, 7's longer)."""
    s = SCHEMA
    statements: list[str] = []
    grant_publisher = "; ".join(f"EXECUTE format('GRANT EXECUTE ON FUNCTION {s}.{f} TO %I', v_role)"
                                for f in functions)
    revoke_publisher = "; ".join(f"EXECUTE format('REVOKE EXECUTE ON FUNCTION {s}.{f} FROM %I', v_role)"
                                 for f in functions)
    statements.append(_definer("add_bastion(p_bastion text, p_role name)", "void", f"""
        DECLARE v_oid oid; v_role name := p_role; v_held oid;
        BEGIN
            SELECT r.oid INTO v_oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role;
            IF v_oid IS NULL THEN
                RAISE EXCEPTION 'role % does not exist', p_role USING HINT = 'a superuser creates it first (docs/publish.md)';
            END IF;
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = v_oid AND (r.rolsuper OR r.rolbypassrls)) THEN
                RAISE EXCEPTION 'role % bypasses row-level security: a publishing role must not', p_role;
            END IF;
            IF EXISTS (SELECT 1 FROM {s}.bastions b WHERE b.role = v_oid AND b.bastion <> p_bastion) THEN
                RAISE EXCEPTION 'role % already publishes another bastion', p_role
                    USING HINT = 'one role per bastion, so a stolen password speaks for one bastion';
            END IF;
            SELECT b.role INTO v_held FROM {s}.bastions b WHERE b.bastion = p_bastion;
            IF v_held IS NOT NULL AND v_held <> v_oid AND EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = v_held) THEN
                RAISE EXCEPTION 'bastion % is published by another role', p_bastion
                    USING HINT = 'remove the bastion first: bastion-agent admin remove-bastion NAME';
            END IF;
            INSERT INTO {s}.bastions (bastion, role, role_name) VALUES (p_bastion, v_oid, p_role)
                ON CONFLICT (bastion) DO UPDATE SET role = excluded.role, role_name = excluded.role_name;
            EXECUTE format('GRANT USAGE ON SCHEMA {s} TO %I', v_role);
            EXECUTE format('GRANT SELECT ON {s}.migrations TO %I', v_role);
            {grant_publisher};
        END"""))
    statements.append(_definer("remove_bastion(p_bastion text)", "integer", f"""
        DECLARE v_oid oid; v_role name; v_count integer;
        BEGIN
            -- the mapping first (waits for a publish in flight: its lock is on this row), then the rows
            SELECT b.role INTO v_oid FROM {s}.bastions b WHERE b.bastion = p_bastion FOR UPDATE;
            SELECT r.rolname INTO v_role FROM pg_catalog.pg_roles r WHERE r.oid = v_oid;
            IF v_role IS NOT NULL THEN
                {revoke_publisher};
                EXECUTE format('REVOKE ALL ON SCHEMA {s} FROM %I', v_role);
                EXECUTE format('REVOKE ALL ON {s}.migrations FROM %I', v_role);
            END IF;
            DELETE FROM {s}.bastions b WHERE b.bastion = p_bastion;
            DELETE FROM {s}.windows w WHERE w.bastion = p_bastion;
            GET DIAGNOSTICS v_count = ROW_COUNT;
            DELETE FROM {s}.documents d WHERE d.bastion = p_bastion;
            RETURN v_count;
        END"""))
    return statements


def _grantees(conn) -> list[tuple[str, str, str]]:
    """(kind, object, role) of every privilege someone other than the owner holds in the schema."""
    rows = conn.execute(f"""
        SELECT 'TABLE', c.oid::regclass::text, r.rolname FROM pg_catalog.pg_class c
            CROSS JOIN LATERAL aclexplode(c.relacl) a JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
            WHERE c.relnamespace = '{SCHEMA}'::regnamespace AND a.grantee <> c.relowner
        UNION
        SELECT 'FUNCTION', p.oid::regprocedure::text, r.rolname FROM pg_catalog.pg_proc p
            CROSS JOIN LATERAL aclexplode(p.proacl) a JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
            WHERE p.pronamespace = '{SCHEMA}'::regnamespace AND a.grantee <> p.proowner""").fetchall()
    return sorted(set(rows))


def _m006_least_privilege(conn) -> None:
    """No role but the owner holds a right on a table; publishers write through functions, searchers read
    through one fail-closed policy; the roles of before keep what they did (their rights re-granted the new way).
    """
    from psycopg import sql

    held = _grantees(conn)
    readers = {role for kind, name, role in held if kind == "TABLE" and name == f"{SCHEMA}.windows"}
    mapped = {row[0] for row in conn.execute(f"SELECT role FROM {SCHEMA}.publishers")}
    for kind, name, role in held:
        conn.execute(sql.SQL(f"REVOKE ALL ON {kind} {name} FROM {{}}").format(sql.Identifier(role)))
    for statement in _least_privilege_sql(sql.Identifier(_vector_schema(conn)).as_string(conn)):
        conn.execute(statement)
    for role, bastion in conn.execute(f"SELECT role_name, bastion FROM {SCHEMA}.bastions WHERE role IS NOT NULL"):
        conn.execute(f"SELECT {SCHEMA}.add_bastion(%s, %s)", (bastion, role))
    for role in sorted(readers - mapped):  # a role that read every bastion, before: the search role
        if role != "PUBLIC":
            conn.execute(f"SELECT {SCHEMA}.add_searcher(%s)", (role,))


# --- migration 7: readers limited to groups ----------------------------------
#
# Each published document carries its groups (the bastion's [access] labels),
# on its ``documents`` row and on each of its windows, so the read policy is
# a test of the row itself. A **reader** (``readers``: role -> groups) reads
# the rows sharing one of its groups; the search roles of before
# (``searchers``) read every group. A **gateway** (``gateways``) is a login
# role that reads nothing itself and may ``SET ROLE`` to the readers granted
# to it: serve's one connection, becoming each token's reader per search.
# The policy names the role in effect (``current_user``, the reader after
# ``SET ROLE``); the functions it calls answer only for a role the login role
# may become, so no role reads with another's groups.

GROUP_NAME_SQL = "^[a-z0-9][a-z0-9_-]{0,62}$"  # the manifest's and the tokens file's group names, as a CHECK
MAX_GROUPS = 256  # groups on one document or one reader
PUBLISHER_FUNCTIONS_7 = PUBLISHER_FUNCTIONS + (
    "write_documents(text, text, text[], text[], text[], integer[], text[])", "update_groups(text, text, text[], text[])",
    "published_groups(text, text)")
SEARCHER_FUNCTIONS_7 = ("keyword_matches(text, text, text[], integer, integer, name)",)
OWNER_FUNCTIONS_7 = ("add_reader(name, text[])", "add_gateway(name)", "remove_gateway(name)")


def _reader_scope_sql() -> list[str]:
    """The functions the read policy calls: which bastions and which groups a role reads.

    ``readable_groups`` is NULL for a search role (every group), the
    reader's groups for a reader, and empty for anyone else, or for a role
    the login role may not become (fail closed).
    """
    s = SCHEMA
    may_become = """
            SELECT r.oid INTO v_oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role;
            IF v_oid IS NULL OR NOT pg_catalog.pg_has_role(session_user, v_oid, 'MEMBER') THEN
                RETURN '{}'::text[];
            END IF;"""
    return [
        f"""CREATE FUNCTION {s}.valid_groups(p_groups text[]) RETURNS boolean LANGUAGE sql IMMUTABLE
            SET search_path = pg_catalog AS $fn$
            SELECT p_groups IS NOT NULL AND cardinality(p_groups) <= {MAX_GROUPS}
                AND coalesce((SELECT bool_and(g IS NOT NULL AND g ~ '{GROUP_NAME_SQL}') FROM unnest(p_groups) g), true)
            $fn$""",
        # a JSON list of names (what a publisher sends) as the sorted, distinct array the rows hold
        f"""CREATE FUNCTION {s}.groups_of(p_json text) RETURNS text[] LANGUAGE sql IMMUTABLE
            SET search_path = pg_catalog AS $fn$
            SELECT coalesce(array_agg(DISTINCT g ORDER BY g), '{{}}') FROM jsonb_array_elements_text(p_json::jsonb) g
            $fn$""",
        _definer("readable_bastions(p_role name)", "text[]", f"""
        DECLARE v_oid oid;
        BEGIN{may_become}
            IF EXISTS (SELECT 1 FROM {s}.searchers x WHERE x.role = v_oid)
                    OR EXISTS (SELECT 1 FROM {s}.readers x WHERE x.role = v_oid) THEN
                RETURN ARRAY(SELECT b.bastion FROM {s}.bastions b ORDER BY b.bastion);
            END IF;
            RETURN '{{}}'::text[];
        END""", "STABLE"),
        _definer("readable_groups(p_role name)", "text[]", f"""
        DECLARE v_oid oid; v_groups text[];
        BEGIN{may_become}
            IF EXISTS (SELECT 1 FROM {s}.searchers x WHERE x.role = v_oid) THEN
                RETURN NULL;  -- a search role: every group
            END IF;
            SELECT x.groups INTO v_groups FROM {s}.readers x WHERE x.role = v_oid;
            RETURN coalesce(v_groups, '{{}}'::text[]);
        END""", "STABLE"),
    ]


def _reader_policy(table: str) -> str:
    s = SCHEMA
    groups = f"(SELECT {s}.readable_groups(current_user))"  # an init plan: called once per query
    return (f"CREATE POLICY {table}_read ON {s}.{table} FOR SELECT"
            f" USING (bastion = ANY ((SELECT {s}.readable_bastions(current_user))::text[])"
            f" AND ({groups} IS NULL OR groups && {groups}))")


def _labelled_writes_sql(vec: str) -> list[str]:
    """``write_documents`` with each document's groups; ``update_groups`` (a label change: no vector is sent);
    ``published_groups`` (what publish compares against). The six-argument ``write_documents`` of migration 6
    keeps each document's groups on the server (new documents get none: only the search role reads them)."""
    s = SCHEMA
    labelled = f"""
        DECLARE v_bastion text; v_dim integer; v_ok boolean; v_deleted integer; v_inserted integer;
        BEGIN{_CALLER_CHECK}
            SELECT m.dim INTO v_dim FROM {s}.models m WHERE m.model = p_model;
            IF v_dim IS NULL THEN
                RAISE EXCEPTION 'model % is not registered on this server', p_model;
            END IF;{_STAGED_CHECK}
            IF cardinality(p_groups) IS DISTINCT FROM cardinality(p_docs) THEN
                RAISE EXCEPTION 'the batch names % documents and % group lists', cardinality(p_docs), cardinality(p_groups);
            END IF;
            DELETE FROM {s}.windows w WHERE w.bastion = v_bastion AND w.model = p_model AND w.doc = ANY (p_docs);
            GET DIAGNOSTICS v_deleted = ROW_COUNT;
            INSERT INTO {s}.windows (bastion, model, chunk_id, doc, idx, start, "end", text, embedding, groups)
                SELECT v_bastion, p_model, t.chunk_id, t.doc, t.idx, t.start, t."end", t.text, t.embedding, d.groups
                FROM pg_temp.{STAGING} t JOIN (SELECT DISTINCT ON (u.doc) u.doc, {s}.groups_of(u.g) AS groups
                    FROM unnest(p_docs, p_groups) AS u(doc, g) ORDER BY u.doc) d ON d.doc = t.doc
                WHERE {vec}.vector_dims(t.embedding) = v_dim;
            GET DIAGNOSTICS v_inserted = ROW_COUNT;
            IF v_inserted <> (SELECT coalesce(sum(n), 0) FROM unnest(p_windows) AS n) THEN
                RAISE EXCEPTION 'the batch declares % windows, % staged windows belong to its documents with dim %',
                    (SELECT coalesce(sum(n), 0) FROM unnest(p_windows) AS n), v_inserted, v_dim;
            END IF;
            INSERT INTO {s}.documents (bastion, model, doc, chunks_fingerprint, paths, windows, published_at, groups)
                SELECT v_bastion, p_model, d.doc, d.fingerprint, d.paths::jsonb, d.windows, now(), {s}.groups_of(d.g)
                FROM unnest(p_docs, p_fingerprints, p_paths, p_windows, p_groups) AS d(doc, fingerprint, paths, windows, g)
                ON CONFLICT (bastion, doc, model) DO UPDATE SET chunks_fingerprint = excluded.chunks_fingerprint,
                    paths = excluded.paths, windows = excluded.windows, published_at = excluded.published_at,
                    groups = excluded.groups;
            TRUNCATE pg_temp.{STAGING};
            RETURN v_deleted;
        END"""
    return [
        _definer("write_documents(p_bastion text, p_model text, p_docs text[], p_fingerprints text[], p_paths text[],"
                 " p_windows integer[], p_groups text[])", "integer", labelled),
        _definer("write_documents(p_bastion text, p_model text, p_docs text[], p_fingerprints text[], p_paths text[],"
                 " p_windows integer[])", "integer", f"""
        BEGIN
            RETURN {s}.write_documents(p_bastion, p_model, p_docs, p_fingerprints, p_paths, p_windows,
                ARRAY(SELECT coalesce((SELECT to_jsonb(d.groups)::text FROM {s}.documents d WHERE d.bastion = p_bastion
                    AND d.model = p_model AND d.doc = u.doc), '[]') FROM unnest(p_docs) WITH ORDINALITY AS u(doc, i)
                    ORDER BY u.i));
        END"""),
        _definer("update_groups(p_bastion text, p_model text, p_docs text[], p_groups text[])", "integer", f"""
        DECLARE v_bastion text; v_count integer;
        BEGIN{_CALLER_CHECK}
            -- only the rows whose groups change are rewritten; no window leaves or re-enters the graph otherwise
            UPDATE {s}.documents d SET groups = u.groups, published_at = now()
                FROM (SELECT x.doc, {s}.groups_of(x.g) AS groups FROM unnest(p_docs, p_groups) AS x(doc, g)) u
                WHERE d.bastion = v_bastion AND d.model = p_model AND d.doc = u.doc AND d.groups <> u.groups;
            GET DIAGNOSTICS v_count = ROW_COUNT;
            UPDATE {s}.windows w SET groups = u.groups
                FROM (SELECT x.doc, {s}.groups_of(x.g) AS groups FROM unnest(p_docs, p_groups) AS x(doc, g)) u
                WHERE w.bastion = v_bastion AND w.model = p_model AND w.doc = u.doc AND w.groups <> u.groups;
            RETURN v_count;
        END"""),
        _definer("published_groups(p_bastion text, p_model text)", "TABLE (doc text, groups text)", f"""
        DECLARE v_bastion text;
        BEGIN{_CALLER_CHECK}
            RETURN QUERY SELECT d.doc, to_jsonb(d.groups)::text FROM {s}.documents d
                WHERE d.bastion = v_bastion AND d.model = p_model;
        END""", "STABLE"),
    ]


def _reader_admin_sql() -> list[str]:
    """The owner's functions that make readers and gateways, and the search role's, now exclusive of them."""
    return _reader_roles_sql() + _gateway_roles_sql() + [_reader_keyword_matches_sql()]


def _reader_checks() -> tuple[str, str, str]:
    """The checks every role function of migration 7 runs, and the rights a reader gets.

    A role named must exist and obey row-level security and publish no
    bastion (``plain_role``); a reader is not a gateway (``not_gateway``);
    a reader reads the tables and calls the keyword pass (``reader_grants``).
    """
    s = SCHEMA
    tables = ", ".join(f"{s}.{t}" for t in SEARCHER_TABLES)
    keyword = SEARCHER_FUNCTIONS_7[0]
    plain_role = f"""
            SELECT r.oid INTO v_oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role;
            IF v_oid IS NULL THEN
                RAISE EXCEPTION 'role % does not exist', p_role USING HINT = 'a superuser creates it first (docs/publish.md)';
            END IF;
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = v_oid AND (r.rolsuper OR r.rolbypassrls)) THEN
                RAISE EXCEPTION 'role % bypasses row-level security: choose another role', p_role;
            END IF;
            IF EXISTS (SELECT 1 FROM {s}.bastions b WHERE b.role = v_oid) THEN
                RAISE EXCEPTION 'role % publishes a bastion: a search role must be another role', p_role;
            END IF;"""
    not_gateway = f"""
            IF EXISTS (SELECT 1 FROM {s}.gateways g WHERE g.role = v_oid) THEN
                RAISE EXCEPTION 'role % is a gateway: it reads nothing itself, a reader must be another role', p_role;
            END IF;"""
    reader_grants = f"""
            EXECUTE format('GRANT USAGE ON SCHEMA {s} TO %I', p_role);
            EXECUTE format('GRANT SELECT ON {tables} TO %I', p_role);
            EXECUTE format('GRANT EXECUTE ON FUNCTION {s}.{keyword} TO %I', p_role);"""
    return plain_role, not_gateway, reader_grants


def _reader_roles_sql() -> list[str]:
    """``add_searcher`` (every group), ``add_reader`` (its groups) and ``remove_searcher`` (either)."""
    s = SCHEMA
    tables = ", ".join(f"{s}.{t}" for t in SEARCHER_TABLES)
    keyword = SEARCHER_FUNCTIONS_7[0]
    plain_role, not_gateway, reader_grants = _reader_checks()
    return [
        _definer("add_searcher(p_role name)", "void", f"""
        DECLARE v_oid oid;
        BEGIN{plain_role}{not_gateway}
            DELETE FROM {s}.readers x WHERE x.role = v_oid;  -- every group now
            INSERT INTO {s}.searchers (role, role_name) VALUES (v_oid, p_role)
                ON CONFLICT (role) DO UPDATE SET role_name = excluded.role_name;{reader_grants}
            EXECUTE format('GRANT EXECUTE ON FUNCTION {s}.{SEARCHER_FUNCTIONS[0]} TO %I', p_role);
        END"""),
        _definer("add_reader(p_role name, p_groups text[])", "void", f"""
        DECLARE v_oid oid; v_groups text[] := ARRAY(SELECT DISTINCT g FROM unnest(p_groups) g ORDER BY g);
        BEGIN{plain_role}{not_gateway}
            IF NOT {s}.valid_groups(v_groups) THEN
                RAISE EXCEPTION 'a group name is 1-63 lowercase letters, digits, - and _ (at most {MAX_GROUPS} groups)';
            END IF;
            DELETE FROM {s}.searchers x WHERE x.role = v_oid;  -- no longer every group
            EXECUTE format('REVOKE ALL ON FUNCTION {s}.{SEARCHER_FUNCTIONS[0]} FROM %I', p_role);
            INSERT INTO {s}.readers (role, role_name, groups) VALUES (v_oid, p_role, v_groups)
                ON CONFLICT (role) DO UPDATE SET role_name = excluded.role_name, groups = excluded.groups;{reader_grants}
        END"""),
        _definer("remove_searcher(p_role name)", "void", f"""
        BEGIN
            DELETE FROM {s}.searchers x WHERE x.role_name = p_role
                OR x.role = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role);
            DELETE FROM {s}.readers x WHERE x.role_name = p_role
                OR x.role = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role);
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = p_role) THEN
                EXECUTE format('REVOKE ALL ON {tables} FROM %I', p_role);
                EXECUTE format('REVOKE ALL ON FUNCTION {s}.{SEARCHER_FUNCTIONS[0]} FROM %I', p_role);
                EXECUTE format('REVOKE ALL ON FUNCTION {s}.{keyword} FROM %I', p_role);
                EXECUTE format('REVOKE ALL ON SCHEMA {s} FROM %I', p_role);
            END IF;
        END"""),
    ]


def _gateway_roles_sql() -> list[str]:
    """``add_gateway`` and ``remove_gateway``: a login role that reads nothing and may become readers."""
    s = SCHEMA
    plain_role, _, _ = _reader_checks()
    return [
        _definer("add_gateway(p_role name)", "void", f"""
        DECLARE v_oid oid;
        BEGIN{plain_role}
            IF EXISTS (SELECT 1 FROM {s}.searchers x WHERE x.role = v_oid)
                    OR EXISTS (SELECT 1 FROM {s}.readers x WHERE x.role = v_oid) THEN
                RAISE EXCEPTION 'role % reads rows itself: a gateway must be another role', p_role;
            END IF;
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = v_oid AND r.rolinherit) THEN
                RAISE EXCEPTION 'role % inherits the rights of its roles: a gateway must be NOINHERIT', p_role;
            END IF;
            INSERT INTO {s}.gateways (role, role_name) VALUES (v_oid, p_role)
                ON CONFLICT (role) DO UPDATE SET role_name = excluded.role_name;
            -- what a search checks before it becomes a reader: the schema's version and the model's row
            EXECUTE format('GRANT USAGE ON SCHEMA {s} TO %I', p_role);
            EXECUTE format('GRANT SELECT ON {s}.migrations, {s}.models TO %I', p_role);
        END"""),
        _definer("remove_gateway(p_role name)", "void", f"""
        BEGIN
            DELETE FROM {s}.gateways g WHERE g.role_name = p_role
                OR g.role = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role);
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = p_role) THEN
                EXECUTE format('REVOKE ALL ON {s}.migrations, {s}.models FROM %I', p_role);
                EXECUTE format('REVOKE ALL ON SCHEMA {s} FROM %I', p_role);
            END IF;
        END"""),
    ]


def _reader_keyword_matches_sql() -> str:
    """The keyword pass of a search, for the role in effect: the read policy's rule as plain conditions."""
    s = SCHEMA
    return _definer(
        "keyword_matches(p_query text, p_model text, p_bastions text[], p_pool integer, p_n integer, p_role name)",
        "TABLE (bastion text, chunk_id text, r real)", f"""
        DECLARE
            v_oid oid := (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role);
            -- the owner and superusers read every row; others what the policy gives p_role, the role in effect
            -- (the caller passes current_user), and only when the login role may become it
            v_all boolean := v_oid IS NOT NULL AND pg_catalog.pg_has_role(session_user, v_oid, 'MEMBER')
                AND (p_role = current_user OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid = v_oid));
            v_readable text[] := CASE WHEN v_all THEN NULL ELSE {s}.readable_bastions(p_role) END;
            v_groups text[] := CASE WHEN v_all THEN NULL ELSE {s}.readable_groups(p_role) END;
        BEGIN
            -- the policy's rule as plain conditions (so the GIN index answers), applied before the pool's
            -- LIMIT and the ranking: a reader's top rows are the best of the rows it may read
            RETURN QUERY
            WITH q AS (SELECT to_tsquery('english'::regconfig, p_query) AS q),
                 m AS MATERIALIZED (SELECT w.bastion, w.chunk_id, w.tsv FROM {s}.windows w, q
                     WHERE w.model = p_model AND w.tsv @@ q.q
                       AND (v_readable IS NULL OR w.bastion = ANY (v_readable))
                       AND (v_groups IS NULL OR w.groups && v_groups)
                       AND (p_bastions IS NULL OR w.bastion = ANY (p_bastions))
                     LIMIT p_pool)
            SELECT m.bastion, m.chunk_id, ts_rank(m.tsv, q.q, 32) FROM m, q
                ORDER BY 3 DESC, 1, 2 LIMIT p_n;
        END""", "STABLE")


def _m007_reader_groups(conn) -> None:
    """Groups on published rows; readers that row-level security limits to their groups; gateways that read
    nothing and may become readers. The search roles of before keep reading every group."""
    from psycopg import sql

    s = SCHEMA
    vec = sql.Identifier(_vector_schema(conn)).as_string(conn)
    for statement in _reader_scope_sql():
        conn.execute(statement)
    for table in ("windows", "documents"):
        # a constant default: no rewrite of the table (PostgreSQL 11+), the CHECK reads it once
        conn.execute(f"ALTER TABLE {s}.{table} ADD COLUMN groups text[] NOT NULL DEFAULT '{{}}'"
                     f" CONSTRAINT {table}_groups_valid CHECK ({s}.valid_groups(groups))")
    conn.execute(f"""CREATE TABLE {s}.readers (role oid PRIMARY KEY, role_name name NOT NULL,
        groups text[] NOT NULL CHECK ({s}.valid_groups(groups)), added_at timestamptz NOT NULL DEFAULT now())""")
    conn.execute(f"CREATE TABLE {s}.gateways (role oid PRIMARY KEY, role_name name NOT NULL,"
                 " added_at timestamptz NOT NULL DEFAULT now())")
    for table in ("windows", "documents"):
        conn.execute(f"DROP POLICY {table}_read ON {s}.{table}")
        conn.execute(_reader_policy(table))
    for statement in _labelled_writes_sql(vec) + _bastion_role_functions(PUBLISHER_FUNCTIONS_7) + _reader_admin_sql():
        conn.execute(statement)
    for function in PUBLISHER_FUNCTIONS_7[len(PUBLISHER_FUNCTIONS):] + SEARCHER_FUNCTIONS_7 + OWNER_FUNCTIONS_7:
        conn.execute(f"REVOKE ALL ON FUNCTION {s}.{function} FROM PUBLIC")
    conn.execute(f"REVOKE ALL ON FUNCTION {s}.readable_bastions(name), {s}.readable_groups(name) FROM PUBLIC")
    conn.execute(f"GRANT EXECUTE ON FUNCTION {s}.readable_bastions(name), {s}.readable_groups(name) TO PUBLIC")
    for role, bastion in conn.execute(f"SELECT role_name, bastion FROM {s}.bastions WHERE role IS NOT NULL").fetchall():
        if conn.execute("SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = %s", (role,)).fetchone():
            conn.execute(f"SELECT {s}.add_bastion(%s, %s)", (bastion, role))  # the new functions granted
    for (role,) in conn.execute(f"SELECT role_name FROM {s}.searchers").fetchall():
        if conn.execute("SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = %s", (role,)).fetchone():
            conn.execute(f"SELECT {s}.add_searcher(%s)", (role,))


# --- migration 8: a graph of each bastion's own rows, for the bastions opted in --
#
# The shared graph holds every bastion's rows: to find the nearest rows of
# one bastion of ten, its iterative scan reads about ten times the pages of
# an unfiltered search. A partial HNSW index per (model, bastion), ``WHERE
# model = '…' AND bastion = '…'``, holds only that bastion's rows; a search
# filtered to that one bastion (``bastion = ANY('{name}')``) implies its
# predicate, so the planner walks it, unchanged. But PostgreSQL's catalogs
# are readable by every role: such an index shows the bastion's name
# (``pg_indexes.indexdef``) and its approximate size (``reltuples``, the
# relation's pages) to every publishing and search role, which the read
# policy otherwise hides. So a bastion gets its graphs only when the
# administrator opts it in (``bastions.own_graph``, ``set_own_graph``): the
# owner's triggers on ``bastions`` and ``models`` make and drop them, and no
# other role needs, or gets, a right to create, drop or rebuild an index.

BASTION_GRAPH_PREFIX = "windows_hnsw_"


def bastion_graph_name(model: str, bastion: str) -> str:
    """The partial graph's index name: fixed-length hashes, so any model name fits PostgreSQL's 63 bytes."""
    import hashlib

    def digest(text: str) -> str:
        return hashlib.md5(text.encode("utf-8")).hexdigest()[:16]

    return f"{BASTION_GRAPH_PREFIX}{digest(model)}_{digest(bastion)}"


def _bastion_graphs_sql(vec: str) -> list[str]:
    """The opt-in column, the owner's functions that build and drop the graphs, and the triggers that call them."""
    s = SCHEMA
    name = (f"'{BASTION_GRAPH_PREFIX}' || substr(md5(p_model), 1, 16) || '_' || substr(md5(p_bastion), 1, 16)")
    return [
        f"ALTER TABLE {s}.bastions ADD COLUMN own_graph boolean NOT NULL DEFAULT false",
        f"""CREATE FUNCTION {s}.bastion_graph_name(p_model text, p_bastion text) RETURNS text LANGUAGE sql IMMUTABLE
            SET search_path = pg_catalog AS $fn$ SELECT {name} $fn$""",
        _definer("build_bastion_graph(p_model text, p_bastion text)", "text", f"""
        DECLARE known {s}.models; v_index text := {s}.bastion_graph_name(p_model, p_bastion);
        BEGIN
            SELECT * INTO known FROM {s}.models m WHERE m.model = p_model;
            IF NOT FOUND OR NOT EXISTS (SELECT 1 FROM {s}.bastions b WHERE b.bastion = p_bastion) THEN
                RAISE EXCEPTION 'no registered model % and bastion % to build a graph for', p_model, p_bastion;
            END IF;
            -- IF NOT EXISTS: a graph an administrator built beforehand (CONCURRENTLY, same name) is kept
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON {s}.windows USING hnsw'
                           ' ((embedding::{vec}.%s(%s)) {vec}.%s_cosine_ops) WITH (m = %s, ef_construction = %s)'
                           ' WHERE model = %L AND bastion = %L',
                           v_index, known.kind, known.dim, known.kind, known.hnsw_m, known.hnsw_ef_construction,
                           p_model, p_bastion);
            RETURN v_index;
        END"""),
        _definer("drop_bastion_graphs(p_bastion text)", "integer", f"""
        DECLARE v_model text; v_count integer := 0;
        BEGIN
            FOR v_model IN SELECT m.model FROM {s}.models m LOOP
                IF to_regclass(format('{s}.%I', {s}.bastion_graph_name(v_model, p_bastion))) IS NOT NULL THEN
                    EXECUTE format('DROP INDEX {s}.%I', {s}.bastion_graph_name(v_model, p_bastion));
                    v_count := v_count + 1;
                END IF;
            END LOOP;
            RETURN v_count;
        END"""),
        _definer("build_bastion_graphs()", "integer", f"""
        DECLARE v_pair record; v_count integer := 0;
        BEGIN
            -- every (model, opted-in bastion) pair: for the owner after a bulk load
            FOR v_pair IN SELECT m.model, b.bastion FROM {s}.models m CROSS JOIN {s}.bastions b
                    WHERE b.own_graph ORDER BY m.model, b.bastion LOOP
                PERFORM {s}.build_bastion_graph(v_pair.model, v_pair.bastion);
                v_count := v_count + 1;
            END LOOP;
            RETURN v_count;
        END"""),
        _definer("set_own_graph(p_bastion text, p_on boolean)", "void", f"""
        BEGIN
            UPDATE {s}.bastions b SET own_graph = p_on WHERE b.bastion = p_bastion;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'bastion % is not registered', p_bastion
                    USING HINT = 'bastion-agent admin add-bastion NAME first';
            END IF;
        END"""),
        _definer("bastion_graphs_on_change()", "trigger", f"""
        DECLARE v_model text; v_bastion text;
        BEGIN
            -- nested, not one condition: NEW of a models row has no own_graph field to evaluate
            IF TG_TABLE_NAME = 'models' THEN
                FOR v_bastion IN SELECT b.bastion FROM {s}.bastions b WHERE b.own_graph ORDER BY b.bastion LOOP
                    PERFORM {s}.build_bastion_graph(NEW.model, v_bastion);
                END LOOP;
            ELSIF TG_OP = 'DELETE' THEN
                PERFORM {s}.drop_bastion_graphs(OLD.bastion);
            ELSIF NEW.own_graph THEN
                FOR v_model IN SELECT m.model FROM {s}.models m ORDER BY m.model LOOP
                    PERFORM {s}.build_bastion_graph(v_model, NEW.bastion);
                END LOOP;
            ELSIF TG_OP = 'UPDATE' THEN
                PERFORM {s}.drop_bastion_graphs(OLD.bastion);
            END IF;
            RETURN NULL;
        END"""),
        f"CREATE TRIGGER bastion_graphs AFTER INSERT OR DELETE OR UPDATE OF own_graph ON {s}.bastions"
        f" FOR EACH ROW EXECUTE FUNCTION {s}.bastion_graphs_on_change()",
        f"CREATE TRIGGER bastion_graphs AFTER INSERT ON {s}.models"
        f" FOR EACH ROW EXECUTE FUNCTION {s}.bastion_graphs_on_change()",
        f"REVOKE ALL ON FUNCTION {s}.build_bastion_graph(text, text), {s}.drop_bastion_graphs(text),"
        f" {s}.build_bastion_graphs(), {s}.set_own_graph(text, boolean), {s}.bastion_graphs_on_change()"
        f" FROM PUBLIC",
    ]


def _m008_bastion_graphs(conn) -> None:
    """The functions and triggers of a graph per (model, opted-in bastion); every bastion starts opted out,
    so the migration builds nothing (and holds no publish for a build)."""
    from psycopg import sql

    for statement in _bastion_graphs_sql(sql.Identifier(_vector_schema(conn)).as_string(conn)):
        conn.execute(statement)


MIGRATIONS = [_m001_tables, _m002_row_security, _m003_ensure_model, _m004_hnsw_build, _m005_hnsw_build,
              _m006_least_privilege, _m007_reader_groups, _m008_bastion_graphs]
LATEST = len(MIGRATIONS)


def current_version(conn) -> int:
    """The schema's migration number (0 when it has none)."""
    exists = conn.execute("SELECT to_regclass(%s)", (f"{SCHEMA}.migrations",)).fetchone()[0]
    if exists is None:
        return 0
    return conn.execute(f"SELECT coalesce(max(version), 0) FROM {SCHEMA}.migrations").fetchone()[0]


def migrate(conn) -> int:
    """Apply the missing migrations, all in one transaction with their records; return the version.

    One transaction, so a first migration that fails (the extension
    missing, a privilege lacking) leaves no empty schema behind. Two owners
    migrating at once are serialised by a lock on ``migrations`` (a table
    lock only the owner may take: no advisory key another role could hold);
    the one that loses the race to create the schema tries again. Nothing is
    written (and no lock taken) when the schema is current.
    """
    if current_version(conn) >= LATEST:
        return LATEST
    import psycopg

    for attempt in range(3):
        try:
            with conn.transaction():
                conn.execute("SET LOCAL lock_timeout = '30s'")  # never queue every search behind us for long
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
                conn.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.migrations (version integer PRIMARY KEY,"
                             " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
                conn.execute(f"LOCK TABLE {SCHEMA}.migrations IN EXCLUSIVE MODE")
                version = current_version(conn)
                for number, step in enumerate(MIGRATIONS, start=1):
                    if number <= version:
                        continue
                    step(conn)
                    conn.execute(f"INSERT INTO {SCHEMA}.migrations (version, name) VALUES (%s, %s)",
                                 (number, step.__name__.lstrip("_")))
            return LATEST
        except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateSchema, psycopg.errors.DuplicateTable):
            if attempt == 2:  # another owner created it at the same moment: its migration is now visible
                raise
    return LATEST


def ensure_model(conn, model: str, dim: int) -> "ModelIndex":
    """Register ``model`` (its HNSW index is created the first time); refuse a changed dimension."""
    conn.execute(f"SELECT {SCHEMA}.ensure_model(%s, %s)", (model, dim))
    return model_index(conn, model)


class ModelIndex:
    """A model's partial HNSW index: how to name its vectors so the planner uses it, and how it was built."""

    def __init__(self, model: str, dim: int, kind: str, index_name: str = "",
                 m: int = PGVECTOR_DEFAULTS["m"], ef_construction: int = PGVECTOR_DEFAULTS["ef_construction"]):
        self.model, self.dim, self.kind, self.index_name = model, dim, kind, index_name
        self.m, self.ef_construction = m, ef_construction

    @property
    def expression(self) -> str:
        return f"embedding::{self.kind}({self.dim})"

    @property
    def operators(self) -> str:
        return f"{self.kind}_cosine_ops"

    def create_sql(self, name: str, m: int, ef_construction: int, concurrently: bool = False) -> str:
        """``CREATE INDEX`` of this model's graph under ``name``, as ``ensure_model`` words it."""
        from psycopg import sql

        statement = sql.SQL("CREATE INDEX {concurrently}{name} ON {schema}.windows USING hnsw (({expression}) {ops})"
                            " WITH (m = {m}, ef_construction = {efc}) WHERE model = {model}").format(
            concurrently=sql.SQL("CONCURRENTLY " if concurrently else ""), name=sql.Identifier(name),
            schema=sql.Identifier(SCHEMA), expression=sql.SQL(self.expression), ops=sql.SQL(self.operators),
            m=sql.Literal(int(m)), efc=sql.Literal(int(ef_construction)), model=sql.Literal(self.model))
        return statement.as_string(None)


def model_index(conn, model: str) -> ModelIndex | None:
    """The model's row of ``models`` (the build parameters are pgvector's defaults before migration 4)."""
    row = conn.execute(f"SELECT to_jsonb(m) FROM {SCHEMA}.models m WHERE model = %s", (model,)).fetchone()
    if not row:
        return None
    fields = row[0]
    return ModelIndex(model, fields["dim"], fields["kind"], fields["index_name"],
                      fields.get("hnsw_m") or PGVECTOR_DEFAULTS["m"],
                      fields.get("hnsw_ef_construction") or PGVECTOR_DEFAULTS["ef_construction"])


def rebuild_index(conn, model: str, m: int = HNSW_BUILD["m"], ef_construction: int = HNSW_BUILD["ef_construction"],
                  ) -> ModelIndex:
    """Rebuild a model's HNSW index with new parameters, beside the old one, then swap them.

    ``CREATE INDEX CONCURRENTLY`` (``conn`` in autocommit): publishes and
    searches go on against the old graph while the new one builds; the swap
    (drop the old, rename the new to the old name, record the parameters)
    is one short transaction. The session's ``maintenance_work_mem`` should
    hold the graph (a build that spills is many times slower): about
    ``rows * (4 * dim + 40 * m)`` bytes. A leftover from an interrupted
    rebuild (an invalid index) is dropped first.
    """
    current = model_index(conn, model)
    if current is None:
        raise ValueError(f"model {model!r} is not registered")
    if m < 2 or m > 100 or ef_construction < 4 or ef_construction > 1000 or ef_construction < 2 * m:
        raise ValueError("m must be 2..100 and ef_construction 4..1000, at least 2 * m (pgvector's bounds)")
    staging = current.index_name + "_rebuild"
    conn.execute(f"DROP INDEX IF EXISTS {SCHEMA}.{staging}")
    conn.execute(current.create_sql(staging, m, ef_construction, concurrently=True))
    with conn.transaction():
        conn.execute(f"DROP INDEX IF EXISTS {SCHEMA}.{current.index_name}")
        conn.execute(f"ALTER INDEX {SCHEMA}.{staging} RENAME TO {current.index_name}")
        conn.execute(f"UPDATE {SCHEMA}.models SET hnsw_m = %s, hnsw_ef_construction = %s WHERE model = %s",
                     (m, ef_construction, model))
    return model_index(conn, model)
