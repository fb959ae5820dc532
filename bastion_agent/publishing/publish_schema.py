"""The central schema: its numbered migrations, run in order, and one HNSW index per model.

The statements of migrations 3 to 8 are files that are read
(``sql/``, through ``schema_files``): a migration that has run never
changes. Who may do what (migrations 6 and 7: the roles, the functions
they call, the read policy) is explained in ``schema_access``, and
migration 9's (a reader reads through functions, never a table) is
written in ``schema_readers``; this module runs them in their migration's
order.

Everything lives in the schema ``bastion_agent``:

- ``migrations(version PK, name, applied_at)``: which numbered step ran;
- ``windows(bastion, chunk_id, model, doc, idx, start, end, text, embedding,
  tsv)``, PK ``(bastion, chunk_id, model)``: every bastion's current
  windows. ``embedding`` is a ``vector`` without a fixed dimension, so
  models of different sizes share the table; ``tsv`` is generated from the
  sanitized text (``to_tsvector('english', text)``) with a GIN index;
- ``documents(bastion, doc, model, chunks_fingerprint, paths, windows,
  published_at)``: what publish compares against, and each hit's paths;
  since migration 10 also ``modified``, the document's date (``schema_dates``), and since migration 11
  ``path_access``, each path's own groups and date (``schema_paths``), and since migration 12 ``meta``,
  the document's published fields as one checked object (``schema_meta``);
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

from bastion_agent.publishing.schema_access import (
    OWNER_FUNCTIONS_7,
    PUBLISHER_FUNCTIONS,
    PUBLISHER_FUNCTIONS_7,
    SEARCHER_FUNCTIONS_7,
    grantees,
    least_privilege_sql,
    reader_policy,
    reader_roles_sql,
    reader_scope_sql,
)
from bastion_agent.publishing.schema_files import statements
from bastion_agent.publishing.schema_readers import reader_functions_sql, sealed_readers_sql
from bastion_agent.publishing.schema_sql import SCHEMA, vector_schema

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


def _ensure_model_function(version: int) -> str:
    """The ``ensure_model`` function as migration ``version`` (3 to 5) made it (``sql/m00N_ensure_model.sql``).

    Migration 3 made it without options (pgvector's defaults, m 16 and
    ef_construction 64); migration 4 replaced it with ``M004_BUILD``,
    migration 5 with ``HNSW_BUILD``. Migration 6 qualifies every name (its
    search_path is pg_catalog, pg_temp), answers a known model without any
    lock, and serialises registrations with a lock on ``models`` instead of
    an advisory key any role can take: that one is in migration 6's file.
    """
    (statement,) = statements(f"m{version:03d}_ensure_model")
    return statement


def _m003_ensure_model(conn) -> None:
    """``ensure_model(model, dim)``: register a model and create its partial HNSW index, as the owner."""
    conn.execute(_ensure_model_function(3))
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
    conn.execute(_ensure_model_function(4))  # CREATE OR REPLACE keeps its owner and its grants


def _m005_hnsw_build(conn) -> None:
    """A new model's HNSW index is built with ``HNSW_BUILD``; the indexes made before are kept, as recorded."""
    conn.execute(_ensure_model_function(5))


# --- migration 6: least privilege by construction ---------------------------
#
# The reasons are in schema_access.py, the statements in sql/; here, the order they run in.

def _m006_least_privilege(conn) -> None:
    """No role but the owner holds a right on a table; publishers write through functions, searchers read
    through one fail-closed policy; the roles of before keep what they did (their rights re-granted the new way).
    """
    from psycopg import sql

    held = grantees(conn)
    readers = {role for kind, name, role in held if kind == "TABLE" and name == f"{SCHEMA}.windows"}
    mapped = {row[0] for row in conn.execute(f"SELECT role FROM {SCHEMA}.publishers")}
    for kind, name, role in held:
        conn.execute(sql.SQL(f"REVOKE ALL ON {kind} {name} FROM {{}}").format(sql.Identifier(role)))
    vec = sql.Identifier(vector_schema(conn)).as_string(conn)
    for statement in least_privilege_sql(vec):
        conn.execute(statement)
    for role, bastion in conn.execute(f"SELECT role_name, bastion FROM {SCHEMA}.bastions WHERE role IS NOT NULL"):
        conn.execute(f"SELECT {SCHEMA}.add_bastion(%s, %s)", (bastion, role))
    for role in sorted(readers - mapped):  # a role that read every bastion, before: the search role
        if role != "PUBLIC":
            conn.execute(f"SELECT {SCHEMA}.add_searcher(%s)", (role,))


# --- migration 7: readers limited to groups ----------------------------------
#
# The reasons are in schema_access.py, the statements in sql/; here, the order they run in.

def _m007_reader_groups(conn) -> None:
    """Groups on published rows; readers that row-level security limits to their groups; gateways that read
    nothing and may become readers. The search roles of before keep reading every group."""
    from psycopg import sql

    s = SCHEMA
    vec = sql.Identifier(vector_schema(conn)).as_string(conn)
    for statement in reader_scope_sql():
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
        conn.execute(reader_policy(table))
    for statement in reader_roles_sql(vec):
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
    return statements("m008_bastion_graphs", vec=vec)


def _m008_bastion_graphs(conn) -> None:
    """The functions and triggers of a graph per (model, opted-in bastion); every bastion starts opted out,
    so the migration builds nothing (and holds no publish for a build)."""
    from psycopg import sql

    for statement in _bastion_graphs_sql(sql.Identifier(vector_schema(conn)).as_string(conn)):
        conn.execute(statement)


# --- migration 9: readers read through functions, never a table ----------------
#
# The statements and the reasons are in schema_readers.py.

SEALED_READERS_VERSION = 9  # from this version a reader holds no right on windows or documents


def _m009_sealed_readers(conn) -> None:
    """A reader's search goes through the owner's functions, which apply its groups; it loses SELECT on the
    tables, so neither EXPLAIN nor pg_stats tells it anything about rows it may not read."""
    from psycopg import sql

    for statement in reader_functions_sql(sql.Identifier(vector_schema(conn)).as_string(conn)) + sealed_readers_sql():
        conn.execute(statement)


# --- migration 10: each document's date, and searches within a range of dates ----
#
# The statements and the reasons are in schema_dates.py.

def _m010_document_dates(conn) -> None:
    """``documents.modified`` (NULL for the rows of before, until their bastion publishes again), the functions
    that write it for a publisher's own bastion, and the date-filtered searches; every role of before gets them."""
    from psycopg import sql

    from bastion_agent.publishing.schema_dates import dates_sql

    for statement in dates_sql(sql.Identifier(vector_schema(conn)).as_string(conn)):
        conn.execute(statement)


# --- migration 11: each path's groups and date; a reader is shown only the paths it may read ----
#
# The statements and the reasons are in schema_paths.py.

def _m011_path_access(conn) -> None:
    """``documents.path_access`` (NULL for the rows of before, until their bastion publishes again), the functions
    that write it for a publisher's own bastion, and the reader functions' new bodies, which show a reader only the
    paths (and the date) it may read."""
    from psycopg import sql

    from bastion_agent.publishing.schema_paths import paths_sql

    for statement in paths_sql(sql.Identifier(vector_schema(conn)).as_string(conn)):
        conn.execute(statement)


# --- migration 12: each document's published fields in one checked jsonb object ----
#
# The statements and the reasons are in schema_meta.py.

def _m012_document_meta(conn) -> None:
    """``documents.meta`` (NULL for the rows of before), the functions that write it for a publisher's own bastion,
    and ``hit_rows`` returning it to whoever may read the window: from here a new per-document field is a key."""
    from bastion_agent.publishing.schema_meta import meta_sql

    for statement in meta_sql():
        conn.execute(statement)


MIGRATIONS = [_m001_tables, _m002_row_security, _m003_ensure_model, _m004_hnsw_build, _m005_hnsw_build,
              _m006_least_privilege, _m007_reader_groups, _m008_bastion_graphs, _m009_sealed_readers,
              _m010_document_dates, _m011_path_access, _m012_document_meta]
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
