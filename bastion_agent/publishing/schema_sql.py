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
