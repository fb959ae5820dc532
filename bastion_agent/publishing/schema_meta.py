"""Migration 12: one ``meta`` object per document, so a new per-document field needs no new column, function or grant.

Before it, each field a document carried to the central index (its date,
its paths' groups) took a migration of its own: a column, two ``SECURITY
DEFINER`` functions, a longer list of publisher functions, ``add_bastion``
made again and every publishing role granted again, and readers' functions
with new bodies. This migration does that once more, for the last time:

- ``documents.meta`` (jsonb) holds the document's published fields by name:
  those the bastion's ``Document`` declares ``published``
  (``core/records.py``). NULL is "none sent" (a row of before, or a
  bastion whose record publishes none). A ``CHECK`` (``meta_fits``) holds
  its shape whatever a writer sends: an object of at most ``MAX_META_KEYS``
  keys named like a field (``^[a-z][a-z0-9_]{0,39}$``), each value a
  string of at most ``MAX_META_STRING`` characters, a number, a boolean or
  null, ``MAX_META_BYTES`` bytes at most in all. Which keys a bastion sends
  is checked on its side against its record (``bastion_documents.document_meta``).
- Publishers write it through the owner's functions, for their own bastion
  only: ``write_documents`` with a tenth argument (the 9-argument form of
  migration 11 stays for agents of before, and leaves ``meta`` alone),
  ``update_meta`` (nothing else changed) and ``published_meta`` (what
  publish compares against). They get no table right.
- Readers get it back as one more column of ``hit_rows``, which runs as the
  owner and returns only the windows the reader may read: a reader sees the
  ``meta`` of those documents and no other. The function is dropped and made
  again (a function's columns cannot change in place) and every role that
  could call it can again; its declared row count is the same, so
  ``EXPLAIN`` of a reader's call is unchanged, and no reader gains a right on
  a table. Remote search maps ``meta`` into the hit through the same
  declaration as local search (``core/document_hits.meta_values``).
"""

from __future__ import annotations

from bastion_agent.publishing.schema_access import _CALLER_CHECK, bastion_role_functions
from bastion_agent.publishing.schema_dates import _regrant_publishers_sql
from bastion_agent.publishing.schema_paths import PUBLISHER_FUNCTIONS_11, _rows_sql
from bastion_agent.publishing.schema_sql import SCHEMA, definer, keeping_grants

META_VERSION = 12  # from this version the central index holds each document's published fields
MAX_META_KEYS = 32
MAX_META_STRING = 200  # characters of a string value
MAX_META_BYTES = 4096  # of the object as jsonb writes it
META_KEY_SQL = "^[a-z][a-z0-9_]{0,39}$"
PUBLISHER_FUNCTIONS_12 = PUBLISHER_FUNCTIONS_11 + (
    "write_documents(text, text, text[], text[], text[], integer[], text[], text[], text[], text[])",
    "update_meta(text, text, text[], text[])", "published_meta(text, text)")
OWNER_HELPERS_12 = ("meta_fits(jsonb)",)
HIT_ROWS = "hit_rows(text, text[], text[], name)"


def meta_sql() -> list[str]:
    """Migration 12's statements, in the order they run."""
    s = SCHEMA
    return ([_meta_fits_sql(),
             f"ALTER TABLE {s}.documents ADD COLUMN IF NOT EXISTS meta jsonb"
             f" CONSTRAINT documents_meta_fits CHECK ({s}.meta_fits(meta))"]
            + _publisher_sql() + bastion_role_functions(PUBLISHER_FUNCTIONS_12)
            + [_hit_rows_again_sql()]
            + [f"REVOKE ALL ON FUNCTION {s}.{f} FROM PUBLIC"
               for f in PUBLISHER_FUNCTIONS_12[len(PUBLISHER_FUNCTIONS_11):] + OWNER_HELPERS_12]
            + [_regrant_publishers_sql()])


def _meta_fits_sql() -> str:
    """The shape ``meta`` must have (NULL: none sent); CASE first, so ``jsonb_each`` never meets a non-object."""
    s = SCHEMA
    return f"""CREATE OR REPLACE FUNCTION {s}.meta_fits(p_meta jsonb) RETURNS boolean
        LANGUAGE sql IMMUTABLE SET search_path = pg_catalog AS $fn$
        SELECT CASE WHEN p_meta IS NULL THEN true
            WHEN jsonb_typeof(p_meta) <> 'object' THEN false
            WHEN octet_length(p_meta::text) > {MAX_META_BYTES} THEN false
            ELSE (SELECT count(*) <= {MAX_META_KEYS} AND coalesce(bool_and(
                    e.key ~ '{META_KEY_SQL}'
                    AND jsonb_typeof(e.value) IN ('string', 'number', 'boolean', 'null')
                    AND (jsonb_typeof(e.value) <> 'string' OR char_length(e.value #>> '{{}}') <= {MAX_META_STRING})),
                    true)
                FROM jsonb_each(p_meta) e) END
        $fn$"""


def _publisher_sql() -> list[str]:
    """A batch written with its meta, a meta alone, and the meta the server holds: each for the caller's bastion."""
    s = SCHEMA
    count_check = """
            IF cardinality(p_meta) IS DISTINCT FROM cardinality(p_docs) THEN
                RAISE EXCEPTION 'the batch names % documents and % meta objects', cardinality(p_docs), cardinality(p_meta);
            END IF;"""
    # a text that is no JSON fails the cast; an object of another shape fails the CHECK: the call writes nothing
    set_meta = f"""
            UPDATE {s}.documents d SET meta = u.m::jsonb FROM unnest(p_docs, p_meta) AS u(doc, m)
                WHERE d.bastion = v_bastion AND d.model = p_model AND d.doc = u.doc
                  AND d.meta IS DISTINCT FROM u.m::jsonb;"""
    return [
        definer("write_documents(p_bastion text, p_model text, p_docs text[], p_fingerprints text[], p_paths text[],"
                " p_windows integer[], p_groups text[], p_modified text[], p_access text[], p_meta text[])",
                "integer", f"""
        DECLARE v_bastion text; v_deleted integer;
        BEGIN{_CALLER_CHECK}{count_check}
            v_deleted := {s}.write_documents(p_bastion, p_model, p_docs, p_fingerprints, p_paths, p_windows, p_groups,
                                             p_modified, p_access);{set_meta}
            RETURN v_deleted;
        END"""),
        definer("update_meta(p_bastion text, p_model text, p_docs text[], p_meta text[])", "integer", f"""
        DECLARE v_bastion text; v_count integer;
        BEGIN{_CALLER_CHECK}{count_check}{set_meta}
            GET DIAGNOSTICS v_count = ROW_COUNT;
            RETURN v_count;
        END"""),
        definer("published_meta(p_bastion text, p_model text)", "TABLE (doc text, meta text)", f"""
        DECLARE v_bastion text;
        BEGIN{_CALLER_CHECK}
            RETURN QUERY SELECT d.doc, d.meta::text FROM {s}.documents d
                WHERE d.bastion = v_bastion AND d.model = p_model;
        END""", "STABLE"),
    ]


def _hit_rows_again_sql() -> str:
    """``hit_rows`` with ``meta``: dropped and made again (its columns change), callable by the same roles."""
    return keeping_grants(HIT_ROWS, _rows_sql("hit_rows", True, meta=True))
