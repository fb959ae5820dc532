"""Migration 11: each path's own groups and date, so a reader is shown only the paths it may read.

Equal sanitized texts are one document, and until this migration the
central index kept groups per document: a reader of ``public`` whose hit
was the form at ``public/forms-exit-interview.txt`` was also shown
``hr/dismissals/2026-q3-warehouse-layoffs.txt``, and the later of the two
files' dates. The local store has kept groups per path since its own
migration 9 (``searching/visible.py``); this migration does the same
centrally.

``documents.path_access`` (jsonb) maps each of the document's paths to
``{"groups": [...], "modified": "…Z" | null}``. A ``CHECK``
(``access_fits``) holds it to the row: its keys are exactly the paths, the
union of its groups is exactly the document's groups, its names are group
names and its dates times as stored. NULL means "not known": a row written
before this migration, or by an agent of before (the owner's trigger
``forget_path_access`` clears it whenever a writer that does not send it
changes the paths, the groups or the date, so a stale map never outlives
what it described).

Publishers send it through the owner's functions, for their own bastion
only, as every other field: ``write_documents`` with a ninth argument,
``update_access`` (nothing else changed) and ``published_access`` (what
publish compares against). They get no table right.

Readers call the same functions as before; their bodies are replaced, so an
agent of before is shown only what it may read too. ``window_rows`` and
``hit_rows`` return the paths whose own groups meet the reader's, and the
latest date among those paths alone; a row whose map is known but shows
none of its paths to the reader is not returned (the ``CHECK`` makes that
impossible: a document the reader may read has a path it may read). The
date-filtered searches (``vector_sql``, ``keyword_matches``,
``window_count`` with a range) compare that same visible date. An every
group role (the owner, a search role) sees every path and the document's
date, as before.

A document whose map is NULL (published before, not yet republished):
a group-limited reader is shown its paths and date only when it has one
path (its groups are then the document's, which the reader shares) or the
reader holds every group of the document; otherwise no path and no date,
until its bastion publishes again with this agent. The hit itself stays
(its text is one the reader may read): fewer paths, never another group's.

``EXPLAIN`` of a reader's call is unchanged: each function keeps its
declared row count, and no reader gains a right on a table.
"""

from __future__ import annotations

from bastion_agent.publishing.schema_access import _CALLER_CHECK, bastion_role_functions
from bastion_agent.publishing.schema_dates import (PUBLISHER_FUNCTIONS_10, STAMP_SQL, _RANGE_CHECK, _keyword_sql,
                                                   _regrant_publishers_sql)
from bastion_agent.publishing.schema_readers import FUNCTION_ROWS, _SCOPE, _VISIBLE
from bastion_agent.publishing.schema_sql import SCHEMA, definer, keeping_grants

PATHS_VERSION = 11  # from this version the central index holds each path's groups and date
PUBLISHER_FUNCTIONS_11 = PUBLISHER_FUNCTIONS_10 + (
    "write_documents(text, text, text[], text[], text[], integer[], text[], text[], text[])",
    "update_access(text, text, text[], text[])", "published_access(text, text)")
OWNER_HELPERS_11 = ("access_fits(jsonb, text[], jsonb)", "visible_paths(jsonb, jsonb, text[], text[])",
                    "visible_modified(jsonb, jsonb, text[], text, text[])", "forget_path_access()")


def paths_sql(vec: str) -> list[str]:
    """Migration 11's statements (``vec``: pgvector's schema, quoted), in the order they run."""
    s = SCHEMA
    return (_helpers_sql()
            + [f"ALTER TABLE {s}.documents ADD COLUMN IF NOT EXISTS path_access jsonb"
               f" CONSTRAINT documents_path_access_fits CHECK ({s}.access_fits(paths, groups, path_access))",
               f"DROP TRIGGER IF EXISTS forget_path_access ON {s}.documents",  # a schema taken back runs this again
               f"CREATE TRIGGER forget_path_access BEFORE UPDATE ON {s}.documents"
               f" FOR EACH ROW EXECUTE FUNCTION {s}.forget_path_access()"]
            + _publisher_sql() + bastion_role_functions(PUBLISHER_FUNCTIONS_11)
            + _reader_sql(vec)
            + [f"REVOKE ALL ON FUNCTION {s}.{f} FROM PUBLIC"
               for f in PUBLISHER_FUNCTIONS_11[len(PUBLISHER_FUNCTIONS_10):] + OWNER_HELPERS_11]
            + [_regrant_publishers_sql()])


def _helpers_sql() -> list[str]:
    """The owner's helpers: the map's check, a reader's paths and date, and the trigger that forgets a stale map."""
    s = SCHEMA
    # the groups of the path p.v (a jsonb string) in the map, as an array (none when the map lacks it)
    path_groups = "ARRAY(SELECT jsonb_array_elements_text(p_access -> (p.v #>> '{}') -> 'groups'))"
    # no map: the paths are the reader's when there is one (its groups are the document's, which the reader
    # shares) or when the reader holds every group of the document (so every group any of its paths has)
    known = "(jsonb_array_length(p_paths) = 1 OR p_doc_groups <@ p_groups)"
    return [
        f"""CREATE OR REPLACE FUNCTION {s}.access_fits(p_paths jsonb, p_groups text[], p_access jsonb) RETURNS boolean
            LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog AS $fn$
        DECLARE v_entry jsonb; v_names text[]; v_union text[] := '{{}}';
        BEGIN
            IF p_access IS NULL THEN
                RETURN true;  -- not known: the reader functions fall back (module docstring)
            END IF;
            IF jsonb_typeof(p_access) <> 'object' OR jsonb_typeof(p_paths) <> 'array' THEN
                RETURN false;
            END IF;
            IF ARRAY(SELECT k FROM jsonb_object_keys(p_access) k ORDER BY k)
                    IS DISTINCT FROM ARRAY(SELECT p FROM jsonb_array_elements_text(p_paths) p ORDER BY p) THEN
                RETURN false;  -- one entry per path, no other
            END IF;
            FOR v_entry IN SELECT e.value FROM jsonb_each(p_access) e LOOP
                IF jsonb_typeof(v_entry) <> 'object' OR jsonb_typeof(v_entry -> 'groups') IS DISTINCT FROM 'array'
                        OR coalesce(jsonb_typeof(v_entry -> 'modified'), 'null') NOT IN ('null', 'string') THEN
                    RETURN false;
                END IF;
                IF EXISTS (SELECT 1 FROM jsonb_array_elements(v_entry -> 'groups') g WHERE jsonb_typeof(g) <> 'string')
                        OR (v_entry ->> 'modified') !~ '{STAMP_SQL}' THEN
                    RETURN false;
                END IF;
                v_names := ARRAY(SELECT jsonb_array_elements_text(v_entry -> 'groups'));
                IF NOT {s}.valid_groups(v_names) THEN
                    RETURN false;
                END IF;
                v_union := v_union || v_names;
            END LOOP;
            -- the document's groups are its paths' groups, together: no path is in a group the row is not
            RETURN ARRAY(SELECT DISTINCT g FROM unnest(v_union) g ORDER BY g) = p_groups;
        END $fn$""",
        f"""CREATE OR REPLACE FUNCTION {s}.visible_paths(p_paths jsonb, p_access jsonb, p_doc_groups text[], p_groups text[])
            RETURNS jsonb
            LANGUAGE sql IMMUTABLE SET search_path = pg_catalog AS $fn$
            SELECT CASE WHEN p_paths IS NULL OR p_groups IS NULL THEN p_paths
                WHEN p_access IS NULL THEN CASE WHEN {known} THEN p_paths ELSE '[]'::jsonb END
                ELSE coalesce((SELECT jsonb_agg(p.v ORDER BY p.n) FROM jsonb_array_elements(p_paths)
                    WITH ORDINALITY AS p(v, n) WHERE {path_groups} && p_groups), '[]'::jsonb) END
            $fn$""",
        f"""CREATE OR REPLACE FUNCTION {s}.visible_modified(p_paths jsonb, p_access jsonb, p_doc_groups text[], p_modified text,
            p_groups text[])
            RETURNS text LANGUAGE sql IMMUTABLE SET search_path = pg_catalog AS $fn$
            SELECT CASE WHEN p_groups IS NULL THEN p_modified
                WHEN p_access IS NULL THEN CASE WHEN {known} THEN p_modified END
                ELSE (SELECT max(p_access -> (p.v #>> '{{}}') ->> 'modified') FROM jsonb_array_elements(p_paths) p(v)
                    WHERE {path_groups} && p_groups) END
            $fn$""",
        definer("forget_path_access()", "trigger", """
        BEGIN
            -- a writer that sent no map (an agent of before, update_paths, update_groups, update_dates) changed
            -- what the map describes: it is no longer known, until the next map arrives
            IF (NEW.paths, NEW.groups, NEW.modified) IS DISTINCT FROM (OLD.paths, OLD.groups, OLD.modified)
                    AND NEW.path_access IS NOT DISTINCT FROM OLD.path_access THEN
                NEW.path_access := NULL;
            END IF;
            RETURN NEW;
        END"""),
    ]


def _publisher_sql() -> list[str]:
    """A batch written with its maps, a map alone, and the maps the server holds: each for the caller's bastion."""
    s = SCHEMA
    count_check = """
            IF cardinality(p_access) IS DISTINCT FROM cardinality(p_docs) THEN
                RAISE EXCEPTION 'the batch names % documents and % path maps', cardinality(p_docs), cardinality(p_access);
            END IF;"""
    # a NULL map is allowed (the bastion does not know its paths' groups); the CHECK refuses one that does not fit
    set_maps = f"""
            UPDATE {s}.documents d SET path_access = u.a::jsonb FROM unnest(p_docs, p_access) AS u(doc, a)
                WHERE d.bastion = v_bastion AND d.model = p_model AND d.doc = u.doc
                  AND d.path_access IS DISTINCT FROM u.a::jsonb;"""
    return [
        definer("write_documents(p_bastion text, p_model text, p_docs text[], p_fingerprints text[], p_paths text[],"
                " p_windows integer[], p_groups text[], p_modified text[], p_access text[])", "integer", f"""
        DECLARE v_bastion text; v_deleted integer;
        BEGIN{_CALLER_CHECK}{count_check}
            v_deleted := {s}.write_documents(p_bastion, p_model, p_docs, p_fingerprints, p_paths, p_windows, p_groups,
                                             p_modified);{set_maps}
            RETURN v_deleted;
        END"""),
        definer("update_access(p_bastion text, p_model text, p_docs text[], p_access text[])", "integer", f"""
        DECLARE v_bastion text; v_count integer;
        BEGIN{_CALLER_CHECK}{count_check}{set_maps}
            GET DIAGNOSTICS v_count = ROW_COUNT;
            RETURN v_count;
        END"""),
        definer("published_access(p_bastion text, p_model text)", "TABLE (doc text, access text)", f"""
        DECLARE v_bastion text;
        BEGIN{_CALLER_CHECK}
            RETURN QUERY SELECT d.doc, d.path_access::text FROM {s}.documents d
                WHERE d.bastion = v_bastion AND d.model = p_model;
        END""", "STABLE"),
    ]


def _rows_sql(name: str, dated: bool, meta: bool = False) -> str:
    """``window_rows`` (migration 9) or ``hit_rows`` (10, with the date; 12, with ``meta``: ``schema_meta``),
    showing the reader only its paths."""
    s = SCHEMA
    returns = ('TABLE (bastion text, chunk_id text, doc text, idx integer, start integer, "end" integer, text text,'
               ' paths jsonb' + (", modified text" if dated else "") + (", meta jsonb" if meta else "") + ")")
    date = f", {s}.visible_modified(d.paths, d.path_access, d.groups, d.modified, $5)" if dated else ""
    date += ", d.meta" if meta else ""
    return definer(f"{name}(p_model text, p_bastions text[], p_chunks text[], p_role name)", returns, f"""
        DECLARE{_SCOPE}
        BEGIN
            -- the listed windows the role may read, each with the paths (and the date) of its document that the
            -- role may read; a document with a known map and none of them is no hit (the CHECK rules it out)
            RETURN QUERY EXECUTE 'SELECT w.bastion, w.chunk_id, w.doc, w.idx, w.start, w."end", w.text, v.paths{date}
                FROM {s}.windows w JOIN unnest($1, $2) AS k(bastion, chunk_id)
                    ON w.bastion = k.bastion AND w.chunk_id = k.chunk_id
                LEFT JOIN {s}.documents d ON d.bastion = w.bastion AND d.doc = w.doc AND d.model = w.model
                CROSS JOIN LATERAL (SELECT {s}.visible_paths(d.paths, d.path_access, d.groups, $5) AS paths) v
                WHERE w.model = $3 AND ($4 IS NULL OR w.bastion = ANY ($4)) AND ($5 IS NULL OR w.groups && $5)
                  AND (d.path_access IS NULL OR v.paths <> ''[]''::jsonb)'
                USING p_bastions, p_chunks, p_model, v_readable, v_groups;
        END""", f"STABLE ROWS {FUNCTION_ROWS}")


def _reader_sql(vec: str) -> list[str]:
    """The reader functions of migrations 9 and 10 whose answers name paths or dates, with new bodies."""
    s = SCHEMA
    # the visible date of window w's document for the groups in {groups} lies in the range
    in_range = (f"EXISTS (SELECT 1 FROM {s}.documents d WHERE d.bastion = w.bastion AND d.doc = w.doc"
                f" AND d.model = w.model AND (p_since IS NULL OR {{date}} >= p_since)"
                f" AND (p_before IS NULL OR {{date}} < p_before))")
    date_of = f"{s}.visible_modified(d.paths, d.path_access, d.groups, d.modified, {{groups}})"
    keyword_range = ("((p_since IS NULL AND p_before IS NULL) OR "
                     + in_range.format(date=date_of.format(groups="v_groups")) + ")")
    visible = _VISIBLE.format(t="d")
    return [
        _rows_sql("window_rows", False),
        keeping_grants("hit_rows(text, text[], text[], name)", _rows_sql("hit_rows", True)),  # 12 changes its columns
        definer("vector_sql(p_model text, p_query text, p_readable text[], p_groups text[], p_bastions text[],"
                " p_limit integer, p_since text, p_before text)", "text", f"""
        DECLARE v_sql text := {s}.vector_sql(p_model, p_query, p_readable, p_groups, p_bastions, p_limit);
                v_date text := format('{s}.visible_modified(d.paths, d.path_access, d.groups, d.modified, %L::text[])', p_groups);
        BEGIN{_RANGE_CHECK}
            IF v_sql IS NULL OR (p_since IS NULL AND p_before IS NULL) THEN
                RETURN v_sql;
            END IF;
            -- the range before ORDER BY and LIMIT, on the date of the paths the scope may read
            RETURN replace(v_sql, ' ORDER BY distance LIMIT ', format(
                ' AND EXISTS (SELECT 1 FROM {s}.documents d WHERE d.bastion = w.bastion AND d.doc = w.doc'
                ' AND d.model = w.model%s%s) ORDER BY distance LIMIT ',
                CASE WHEN p_since IS NULL THEN '' ELSE format(' AND %s >= %L', v_date, p_since) END,
                CASE WHEN p_before IS NULL THEN '' ELSE format(' AND %s < %L', v_date, p_before) END));
        END""", "STABLE"),
        _keyword_sql(keyword_range),
        definer("window_count(p_model text, p_bastions text[], p_role name, p_since text, p_before text)",
                "bigint", f"""
        DECLARE{_SCOPE}
        BEGIN{_RANGE_CHECK}
            RETURN (SELECT coalesce(sum(d.windows), 0) FROM {s}.documents d WHERE d.model = p_model AND {visible}
                AND (p_since IS NULL OR {date_of.format(groups="v_groups")} >= p_since)
                AND (p_before IS NULL OR {date_of.format(groups="v_groups")} < p_before));
        END""", "STABLE"),
    ]
