"""What every migration of the central schema writes its SQL with: the schema's name and two helpers."""

from __future__ import annotations

SCHEMA = "bastion_agent"


def vector_schema(conn) -> str:
    """The schema pgvector is installed in: functions with a fixed search_path name its types through it."""
    row = conn.execute("SELECT n.nspname FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n"
                       " ON n.oid = e.extnamespace WHERE e.extname = 'vector'").fetchone()
    return row[0]


def definer(signature: str, returns: str, body: str, volatility: str = "VOLATILE") -> str:
    """A function that runs as the owner: a fixed search_path (pg_temp last), plpgsql, not executable by PUBLIC."""
    return (f"CREATE OR REPLACE FUNCTION {SCHEMA}.{signature} RETURNS {returns} LANGUAGE plpgsql {volatility}"
            f" SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$\n{body}\n$fn$")


def keeping_grants(signature: str, create: str) -> str:
    """``create`` (a ``CREATE FUNCTION`` of ``signature``, e.g. ``hit_rows(text, text[], text[], name)``) run after
    dropping the function, so that its returned columns may differ from those in place, and every role that could
    call it can again (PUBLIC never). A migration that adds a column to a reader's rows runs this, and so does
    each earlier one that makes the function, since a schema taken back by its ``migrations`` rows runs them again."""
    return f"""DO $do$
        DECLARE v_grantees name[];
        BEGIN
            SELECT coalesce(array_agg(DISTINCT r.rolname), '{{}}') INTO v_grantees
                FROM pg_catalog.pg_proc p CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
                JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
                WHERE p.oid = pg_catalog.to_regprocedure('{SCHEMA}.{signature}') AND a.privilege_type = 'EXECUTE'
                  AND r.oid <> p.proowner;
            DROP FUNCTION IF EXISTS {SCHEMA}.{signature};
            EXECUTE $create${create}$create$;
            REVOKE ALL ON FUNCTION {SCHEMA}.{signature} FROM PUBLIC;
            FOR i IN 1 .. coalesce(array_length(v_grantees, 1), 0) LOOP
                EXECUTE format('GRANT EXECUTE ON FUNCTION {SCHEMA}.{signature} TO %I', v_grantees[i]);
            END LOOP;
        END $do$"""
