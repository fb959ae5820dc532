"""Migration 10: each published document's date, and searches that keep to a range of dates before ranking.

A bastion publishes, per document, the latest modification time of its
files (``core.dates.latest`` over the document's paths): the date alone,
ISO 8601 UTC to the second (``…Z``), which orders as text. Which file it
came from, and every other file's time, stay on the bastion. The column is
``documents.modified`` (NULL: not known, a document published before this
migration or by an older agent), checked to be such a time.

Publishers write it only through the owner's functions, for their own
bastion (the same caller check as every publishing function):
``write_documents`` with an eighth argument (the dates of the batch),
``update_dates`` (a document whose windows, paths and groups are the same
but whose date moved: no vector is sent) and ``published_dates`` (what
publish compares against, so an unchanged republish writes nothing).

Readers filter through new overloads of their functions that take
``p_since`` and ``p_before`` (each NULL: unbounded): the range is a plain
condition of the scan itself, next to the reader's groups and before the
``LIMIT``, so a dated search returns the best ``k`` of the rows the reader
may read in that range, and ``hit_rows`` (``window_rows`` and the date)
dates each hit. A document with no date is outside every range, as in the
local search. The functions of migration 9 stay, unchanged, for agents of
before.
"""

from __future__ import annotations

from bastion_agent.publishing.schema_access import _CALLER_CHECK, PUBLISHER_FUNCTIONS_7, bastion_role_functions
from bastion_agent.publishing.schema_readers import (FUNCTION_ROWS, KEYWORD_FUNCTION, READER_FUNCTIONS_9, _SCOPE,
                                                     _VISIBLE, reader_roles_sql_9, regrant_readers_sql)
from bastion_agent.publishing.schema_sql import SCHEMA, definer, keeping_grants

STAMP_SQL = "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$"  # core.dates.STAMP, as a POSIX regex
PUBLISHER_FUNCTIONS_10 = PUBLISHER_FUNCTIONS_7 + (
    "write_documents(text, text, text[], text[], text[], integer[], text[], text[])",
    "update_dates(text, text, text[], text[])", "published_dates(text, text)")
READER_FUNCTIONS_10 = (  # the date-filtered searches a reader (and a search role) may call from migration 10
    "vector_matches(text, text, text[], integer, name, text, text)",
    "keyword_matches(text, text, text[], integer, integer, name, text, text)",
    "hit_rows(text, text[], text[], name)", "window_count(text, text[], name, text, text)")
VECTOR_SQL_10 = "vector_sql(text, text, text[], text[], text[], integer, text, text)"  # the owner's only
DATED_VERSION = 10  # from this version the central index holds dates

# a range's bounds must be times as stored, so that comparing them as text compares the moments
_RANGE_CHECK = f"""
            IF p_since !~ '{STAMP_SQL}' OR p_before !~ '{STAMP_SQL}' THEN
                RAISE EXCEPTION 'since and before are UTC times written YYYY-MM-DDTHH:MM:SSZ';
            END IF;"""
# the document of window w lies in the range (an undated document in none); true when no bound is given
_IN_RANGE = f"""((p_since IS NULL AND p_before IS NULL) OR EXISTS (SELECT 1 FROM {SCHEMA}.documents d
                           WHERE d.bastion = w.bastion AND d.doc = w.doc AND d.model = w.model
                             AND (p_since IS NULL OR d.modified >= p_since)
                             AND (p_before IS NULL OR d.modified < p_before)))"""


def dates_sql(vec: str) -> list[str]:
    """Migration 10's statements (``vec``: pgvector's schema, quoted), in the order they run."""
    s = SCHEMA
    # IF NOT EXISTS: a schema taken back to an earlier version by its migrations rows alone runs this again
    return ([f"ALTER TABLE {s}.documents ADD COLUMN IF NOT EXISTS modified text"
             f" CONSTRAINT documents_modified_stamp CHECK (modified ~ '{STAMP_SQL}')"]
            + _publisher_sql() + bastion_role_functions(PUBLISHER_FUNCTIONS_10)
            + [_vector_sql(vec), _vector_matches_sql(), _keyword_sql(), _hit_rows_sql(), _count_sql()]
            + [f"REVOKE ALL ON FUNCTION {s}.{f} FROM PUBLIC"
               for f in PUBLISHER_FUNCTIONS_10[len(PUBLISHER_FUNCTIONS_7):] + READER_FUNCTIONS_10 + (VECTOR_SQL_10,)]
            + reader_roles_sql_9(READER_FUNCTIONS_9 + (KEYWORD_FUNCTION,) + READER_FUNCTIONS_10)
            + [regrant_readers_sql(), _regrant_publishers_sql()])


def _publisher_sql() -> list[str]:
    """A batch written with its dates, a date change alone, and what the server holds."""
    s = SCHEMA
    stamps_check = f"""
            IF cardinality(p_modified) IS DISTINCT FROM cardinality(p_docs) THEN
                RAISE EXCEPTION 'the batch names % documents and % dates', cardinality(p_docs), cardinality(p_modified);
            END IF;
            IF EXISTS (SELECT 1 FROM unnest(p_modified) m WHERE m !~ '{STAMP_SQL}') THEN
                RAISE EXCEPTION 'a date is a UTC time written YYYY-MM-DDTHH:MM:SSZ';
            END IF;"""
    return [
        definer("write_documents(p_bastion text, p_model text, p_docs text[], p_fingerprints text[], p_paths text[],"
                " p_windows integer[], p_groups text[], p_modified text[])", "integer", f"""
        DECLARE v_deleted integer;
        BEGIN{stamps_check}
            -- the batch as migration 7 writes it (the caller's check is its first step), then the dates
            v_deleted := {s}.write_documents(p_bastion, p_model, p_docs, p_fingerprints, p_paths, p_windows, p_groups);
            UPDATE {s}.documents d SET modified = u.m FROM unnest(p_docs, p_modified) AS u(doc, m)
                WHERE d.bastion = p_bastion AND d.model = p_model AND d.doc = u.doc
                  AND d.modified IS DISTINCT FROM u.m;
            RETURN v_deleted;
        END"""),
        definer("update_dates(p_bastion text, p_model text, p_docs text[], p_modified text[])", "integer", f"""
        DECLARE v_bastion text; v_count integer;
        BEGIN{_CALLER_CHECK}{stamps_check}
            -- only the rows whose date changes are rewritten; no window is touched
            UPDATE {s}.documents d SET modified = u.m, published_at = now()
                FROM unnest(p_docs, p_modified) AS u(doc, m)
                WHERE d.bastion = v_bastion AND d.model = p_model AND d.doc = u.doc AND d.modified IS DISTINCT FROM u.m;
            GET DIAGNOSTICS v_count = ROW_COUNT;
            RETURN v_count;
        END"""),
        definer("published_dates(p_bastion text, p_model text)", "TABLE (doc text, modified text)", f"""
        DECLARE v_bastion text;
        BEGIN{_CALLER_CHECK}
            RETURN QUERY SELECT d.doc, d.modified FROM {s}.documents d
                WHERE d.bastion = v_bastion AND d.model = p_model;
        END""", "STABLE"),
    ]


def _regrant_publishers_sql() -> str:
    """Every publishing role of before gets the new functions, from the ``add_bastion`` now in place."""
    s = SCHEMA
    return f"""DO $do$
        DECLARE v_role name; v_bastion text;
        BEGIN
            FOR v_role, v_bastion IN SELECT b.role_name, b.bastion FROM {s}.bastions b
                    JOIN pg_catalog.pg_roles r ON r.oid = b.role ORDER BY 2 LOOP
                PERFORM {s}.add_bastion(v_bastion, v_role);
            END LOOP;
        END $do$"""


def _vector_sql(vec: str) -> str:
    """``vector_sql`` with a range of dates: migration 9's statement and one more condition on each row."""
    s = SCHEMA
    return definer("vector_sql(p_model text, p_query text, p_readable text[], p_groups text[], p_bastions text[],"
                   " p_limit integer, p_since text, p_before text)", "text", f"""
        DECLARE v_sql text := {s}.vector_sql(p_model, p_query, p_readable, p_groups, p_bastions, p_limit);
        BEGIN{_RANGE_CHECK}
            IF v_sql IS NULL OR (p_since IS NULL AND p_before IS NULL) THEN
                RETURN v_sql;
            END IF;
            -- the range before ORDER BY and LIMIT: the iterative scan goes on until it has enough dated rows
            RETURN replace(v_sql, ' ORDER BY distance LIMIT ', format(
                ' AND EXISTS (SELECT 1 FROM {s}.documents d WHERE d.bastion = w.bastion AND d.doc = w.doc'
                ' AND d.model = w.model%s%s) ORDER BY distance LIMIT ',
                CASE WHEN p_since IS NULL THEN '' ELSE format(' AND d.modified >= %L', p_since) END,
                CASE WHEN p_before IS NULL THEN '' ELSE format(' AND d.modified < %L', p_before) END));
        END""", "STABLE")


def _vector_matches_sql() -> str:
    s = SCHEMA
    return definer("vector_matches(p_model text, p_query text, p_bastions text[], p_limit integer, p_role name,"
                   " p_since text, p_before text)",
                   "TABLE (bastion text, chunk_id text, distance double precision)", f"""
        DECLARE{_SCOPE}
            v_sql text := {s}.vector_sql(p_model, p_query, v_readable, v_groups, p_bastions, p_limit, p_since,
                                         p_before);
        BEGIN
            IF v_sql IS NOT NULL THEN
                RETURN QUERY EXECUTE v_sql;
            END IF;
        END""", f"STABLE ROWS {FUNCTION_ROWS}")


def _keyword_sql(in_range: str = _IN_RANGE) -> str:
    """The keyword pass of migration 7 with the range among its conditions, before the pool's ``LIMIT``
    (``in_range``: whether window w's document lies in the range; migration 11 dates it by the visible paths)."""
    s = SCHEMA
    return definer(
        "keyword_matches(p_query text, p_model text, p_bastions text[], p_pool integer, p_n integer, p_role name,"
        " p_since text, p_before text)", "TABLE (bastion text, chunk_id text, r real)", f"""
        DECLARE{_SCOPE}
        BEGIN{_RANGE_CHECK}
            RETURN QUERY
            WITH q AS (SELECT to_tsquery('english'::regconfig, p_query) AS q),
                 m AS MATERIALIZED (SELECT w.bastion, w.chunk_id, w.tsv FROM {s}.windows w, q
                     WHERE w.model = p_model AND w.tsv @@ q.q
                       AND (v_readable IS NULL OR w.bastion = ANY (v_readable))
                       AND (v_groups IS NULL OR w.groups && v_groups)
                       AND (p_bastions IS NULL OR w.bastion = ANY (p_bastions))
                       AND {in_range}
                     LIMIT p_pool)
            SELECT m.bastion, m.chunk_id, ts_rank(m.tsv, q.q, 32) FROM m, q
                ORDER BY 3 DESC, 1, 2 LIMIT p_n;
        END""", f"STABLE ROWS {FUNCTION_ROWS}")


def _count_sql() -> str:
    """``window_count`` of the documents in a range: how a search chooses between the graph and reading the rows."""
    s = SCHEMA
    visible = _VISIBLE.format(t="d")
    return definer("window_count(p_model text, p_bastions text[], p_role name, p_since text, p_before text)",
                   "bigint", f"""
        DECLARE{_SCOPE}
        BEGIN{_RANGE_CHECK}
            RETURN (SELECT coalesce(sum(d.windows), 0) FROM {s}.documents d WHERE d.model = p_model AND {visible}
                AND (p_since IS NULL OR d.modified >= p_since) AND (p_before IS NULL OR d.modified < p_before));
        END""", "STABLE")


def _hit_rows_sql() -> str:
    """``window_rows`` and each hit's date (its document's, as published); made again keeping its grants
    (``keeping_grants``), as a later migration changes its columns."""
    s = SCHEMA
    return keeping_grants("hit_rows(text, text[], text[], name)", definer("hit_rows(p_model text, p_bastions text[], p_chunks text[], p_role name)",
                   'TABLE (bastion text, chunk_id text, doc text, idx integer, start integer, "end" integer,'
                   ' text text, paths jsonb, modified text)', f"""
        DECLARE{_SCOPE}
        BEGIN
            RETURN QUERY EXECUTE 'SELECT w.bastion, w.chunk_id, w.doc, w.idx, w.start, w."end", w.text, d.paths,
                    d.modified
                FROM {s}.windows w JOIN unnest($1, $2) AS k(bastion, chunk_id)
                    ON w.bastion = k.bastion AND w.chunk_id = k.chunk_id
                LEFT JOIN {s}.documents d ON d.bastion = w.bastion AND d.doc = w.doc AND d.model = w.model
                WHERE w.model = $3 AND ($4 IS NULL OR w.bastion = ANY ($4)) AND ($5 IS NULL OR w.groups && $5)'
                USING p_bastions, p_chunks, p_model, v_readable, v_groups;
        END""", f"STABLE ROWS {FUNCTION_ROWS}"))
