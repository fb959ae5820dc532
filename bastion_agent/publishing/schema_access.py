"""Who may do what in the central schema: the roles, the functions they call, the read policy.

No role but the schema's owner holds a right on a table. A publishing role
writes through ``SECURITY DEFINER`` functions that take its bastion from
its login role, a search role or a reader reads through one policy, and a
gateway reads nothing itself but may become a reader. This module writes
those statements for migrations 6 and 7; ``publish_schema`` runs them, in
order, with the rest of each migration. A change of rights is a new
migration, never an edit of one that has run.
"""

from __future__ import annotations

from bastion_agent.publishing.schema_sql import SCHEMA, definer

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


def least_privilege_sql(vec: str, ensure_model: str) -> list[str]:
    """Migration 6's statements after the grants of before are revoked (``vec``: pgvector's schema, quoted;
    ``ensure_model``: the function that registers a model, as this migration words it)."""
    return (_bastions_table_sql() + _read_policy_sql() + _publisher_lock_sql(vec) + _publisher_write_sql(vec)
            + bastion_role_functions(PUBLISHER_FUNCTIONS) + _searcher_functions_sql()
            + [ensure_model] + _function_rights_sql())


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
    statements.append(definer("readable_bastions()", "text[]", f"""
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
    statements.append(definer("published_documents(p_bastion text, p_model text, p_dim integer)",
                               "TABLE (doc text, chunks_fingerprint text, paths text, windows integer)", f"""
        DECLARE v_bastion text; v_dim integer;
        BEGIN{caller}{model_check}
            RETURN QUERY SELECT d.doc, d.chunks_fingerprint, d.paths::text, d.windows FROM {s}.documents d
                WHERE d.bastion = v_bastion AND d.model = p_model;
        END""", "STABLE"))
    statements.append(definer("lock_bastion(p_bastion text)", "text", f"""
        DECLARE v_bastion text;
        BEGIN{caller}
            -- one publish of a bastion at a time: a lock on its own row, held until the caller's
            -- transaction ends (a killed publisher's ends with its connection); nobody else can take it
            PERFORM 1 FROM {s}.bastions b WHERE b.bastion = v_bastion FOR UPDATE NOWAIT;
            RETURN v_bastion;
        END"""))
    statements.append(definer("open_staging()", "void", f"""
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
    statements.append(definer(
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
    statements.append(definer("update_paths(p_bastion text, p_model text, p_docs text[], p_paths text[])",
                               "integer", f"""
        DECLARE v_bastion text; v_count integer;
        BEGIN{caller}
            UPDATE {s}.documents d SET paths = u.paths::jsonb, published_at = now()
                FROM unnest(p_docs, p_paths) AS u(doc, paths)
                WHERE d.bastion = v_bastion AND d.model = p_model AND d.doc = u.doc;
            GET DIAGNOSTICS v_count = ROW_COUNT;
            RETURN v_count;
        END"""))
    statements.append(definer("delete_documents(p_bastion text, p_model text, p_docs text[])", "integer", f"""
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
    statements.append(definer("add_searcher(p_role name)", "void", f"""
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
    statements.append(definer("remove_searcher(p_role name)", "void", f"""
        BEGIN
            DELETE FROM {s}.searchers x WHERE x.role_name = p_role
                OR x.role = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role);
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = p_role) THEN
                EXECUTE format('REVOKE ALL ON {searcher_tables} FROM %I', p_role);
                EXECUTE format('REVOKE ALL ON FUNCTION {s}.{SEARCHER_FUNCTIONS[0]} FROM %I', p_role);
                EXECUTE format('REVOKE ALL ON SCHEMA {s} FROM %I', p_role);
            END IF;
        END"""))
    statements.append(definer(
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


def bastion_role_functions(functions: tuple[str, ...]) -> list[str]:
    """``add_bastion`` and ``remove_bastion``, granting and revoking ``functions`` (migration 6's list, 7's longer)."""
    s = SCHEMA
    statements: list[str] = []
    grant_publisher = "; ".join(f"EXECUTE format('GRANT EXECUTE ON FUNCTION {s}.{f} TO %I', v_role)"
                                for f in functions)
    revoke_publisher = "; ".join(f"EXECUTE format('REVOKE EXECUTE ON FUNCTION {s}.{f} FROM %I', v_role)"
                                 for f in functions)
    statements.append(definer("add_bastion(p_bastion text, p_role name)", "void", f"""
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
    statements.append(definer("remove_bastion(p_bastion text)", "integer", f"""
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


def grantees(conn) -> list[tuple[str, str, str]]:
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


def reader_scope_sql() -> list[str]:
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
        definer("readable_bastions(p_role name)", "text[]", f"""
        DECLARE v_oid oid;
        BEGIN{may_become}
            IF EXISTS (SELECT 1 FROM {s}.searchers x WHERE x.role = v_oid)
                    OR EXISTS (SELECT 1 FROM {s}.readers x WHERE x.role = v_oid) THEN
                RETURN ARRAY(SELECT b.bastion FROM {s}.bastions b ORDER BY b.bastion);
            END IF;
            RETURN '{{}}'::text[];
        END""", "STABLE"),
        definer("readable_groups(p_role name)", "text[]", f"""
        DECLARE v_oid oid; v_groups text[];
        BEGIN{may_become}
            IF EXISTS (SELECT 1 FROM {s}.searchers x WHERE x.role = v_oid) THEN
                RETURN NULL;  -- a search role: every group
            END IF;
            SELECT x.groups INTO v_groups FROM {s}.readers x WHERE x.role = v_oid;
            RETURN coalesce(v_groups, '{{}}'::text[]);
        END""", "STABLE"),
    ]


def reader_policy(table: str) -> str:
    s = SCHEMA
    groups = f"(SELECT {s}.readable_groups(current_user))"  # an init plan: called once per query
    return (f"CREATE POLICY {table}_read ON {s}.{table} FOR SELECT"
            f" USING (bastion = ANY ((SELECT {s}.readable_bastions(current_user))::text[])"
            f" AND ({groups} IS NULL OR groups && {groups}))")


def labelled_writes_sql(vec: str) -> list[str]:
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
        definer("write_documents(p_bastion text, p_model text, p_docs text[], p_fingerprints text[], p_paths text[],"
                 " p_windows integer[], p_groups text[])", "integer", labelled),
        definer("write_documents(p_bastion text, p_model text, p_docs text[], p_fingerprints text[], p_paths text[],"
                 " p_windows integer[])", "integer", f"""
        BEGIN
            RETURN {s}.write_documents(p_bastion, p_model, p_docs, p_fingerprints, p_paths, p_windows,
                ARRAY(SELECT coalesce((SELECT to_jsonb(d.groups)::text FROM {s}.documents d WHERE d.bastion = p_bastion
                    AND d.model = p_model AND d.doc = u.doc), '[]') FROM unnest(p_docs) WITH ORDINALITY AS u(doc, i)
                    ORDER BY u.i));
        END"""),
        definer("update_groups(p_bastion text, p_model text, p_docs text[], p_groups text[])", "integer", f"""
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
        definer("published_groups(p_bastion text, p_model text)", "TABLE (doc text, groups text)", f"""
        DECLARE v_bastion text;
        BEGIN{_CALLER_CHECK}
            RETURN QUERY SELECT d.doc, to_jsonb(d.groups)::text FROM {s}.documents d
                WHERE d.bastion = v_bastion AND d.model = p_model;
        END""", "STABLE"),
    ]


def reader_admin_sql() -> list[str]:
    """The owner's functions that make readers and gateways, and the search role's, now exclusive of them."""
    return _reader_roles_sql() + _gateway_roles_sql() + [_reader_keyword_matches_sql()]


def reader_checks() -> tuple[str, str, str]:
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
    plain_role, not_gateway, reader_grants = reader_checks()
    return [
        definer("add_searcher(p_role name)", "void", f"""
        DECLARE v_oid oid;
        BEGIN{plain_role}{not_gateway}
            DELETE FROM {s}.readers x WHERE x.role = v_oid;  -- every group now
            INSERT INTO {s}.searchers (role, role_name) VALUES (v_oid, p_role)
                ON CONFLICT (role) DO UPDATE SET role_name = excluded.role_name;{reader_grants}
            EXECUTE format('GRANT EXECUTE ON FUNCTION {s}.{SEARCHER_FUNCTIONS[0]} TO %I', p_role);
        END"""),
        definer("add_reader(p_role name, p_groups text[])", "void", f"""
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
        definer("remove_searcher(p_role name)", "void", f"""
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
    plain_role, _, _ = reader_checks()
    return [
        definer("add_gateway(p_role name)", "void", f"""
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
        definer("remove_gateway(p_role name)", "void", f"""
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
    return definer(
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
