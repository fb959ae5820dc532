"""The central schema: numbered migrations, one HNSW index per model, the publish lock.

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
- ``publishers(role, bastion)``: which database role may write which
  bastion's rows (row-level security, ``docs/publish.md``).

Each migration and its ``migrations`` row commit together, under an
advisory lock, so two bastions publishing at once migrate once.
``ensure_model`` is a ``SECURITY DEFINER`` function owned by the schema's
owner, so a publishing role that may not create indexes can still register
its model (the function validates what it is given).
"""

from __future__ import annotations

import contextlib
import hashlib

SCHEMA = "bastion_agent"
MIGRATION_LOCK = 0x62617374  # pg_advisory_xact_lock key: "bast"
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


def _ensure_model_function(build: dict | None) -> str:
    """The ``ensure_model`` function's SQL; ``build``: the HNSW ``WITH`` options it creates and records.

    Migration 3 made it without options (pgvector's defaults, m 16 and
    ef_construction 64); migration 4 replaces it with ``M004_BUILD``,
    migration 5 with ``HNSW_BUILD``.
    """
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


MIGRATIONS = [_m001_tables, _m002_row_security, _m003_ensure_model, _m004_hnsw_build, _m005_hnsw_build]
LATEST = len(MIGRATIONS)


def current_version(conn) -> int:
    """The schema's migration number (0 when it has none)."""
    exists = conn.execute("SELECT to_regclass(%s)", (f"{SCHEMA}.migrations",)).fetchone()[0]
    if exists is None:
        return 0
    return conn.execute(f"SELECT coalesce(max(version), 0) FROM {SCHEMA}.migrations").fetchone()[0]


def migrate(conn) -> int:
    """Apply the missing migrations, each with its record in one transaction; return the version.

    Nothing is written (and no privilege needed) when the schema is current,
    which is every publish but the first after an upgrade.
    """
    if current_version(conn) >= LATEST:
        return LATEST
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.migrations (version integer PRIMARY KEY,"
                     " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
    version = current_version(conn)
    for number, step in enumerate(MIGRATIONS, start=1):
        if number <= version:
            continue
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            if current_version(conn) >= number:  # another publisher applied it meanwhile
                continue
            step(conn)
            conn.execute(f"INSERT INTO {SCHEMA}.migrations (version, name) VALUES (%s, %s)",
                         (number, step.__name__.lstrip("_")))
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


def lock_key(bastion: str) -> int:
    """A signed 64-bit advisory lock key for one bastion's publish."""
    digest = hashlib.sha256(f"bastion-agent publish {bastion}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


LOCK_WAIT_SECONDS = 30.0  # a killed publisher's session can take a moment to end on the server


@contextlib.contextmanager
def bastion_lock(conn, bastion: str, wait: float = LOCK_WAIT_SECONDS):
    """One publish per bastion at a time (a session lock: a killed publisher's ends with its connection)."""
    import time

    from bastion_agent.core.errors import DatabaseError

    deadline = time.monotonic() + wait
    while not conn.execute("SELECT pg_try_advisory_lock(%s)", (lock_key(bastion),)).fetchone()[0]:
        if time.monotonic() >= deadline:
            raise DatabaseError(f"another publish of bastion {bastion!r} is running; try again when it ends")
        time.sleep(0.5)
    try:
        yield
    finally:
        if not conn.closed:
            conn.execute("SELECT pg_advisory_unlock(%s)", (lock_key(bastion),))
