"""The connection to the central PostgreSQL: its DSN from the environment, the versions it needs, errors in one line.

Publish, ``admin`` and ``search --remote`` all connect through here, so each
reads ``BASTION_PUBLISH_DSN`` (or the admin's own variable) the same way,
refuses a server or a pgvector too old for what they run, and reports a
failure as one line that never shows the DSN's password. psycopg 3 is an
optional extra: it is imported only when a connection is made.
"""

from __future__ import annotations

import os
import re

from bastion_agent.core.errors import ConfigError, DatabaseError

DSN_VARIABLE = "BASTION_PUBLISH_DSN"


def dsn_from_env(environ=None) -> str:
    """``BASTION_PUBLISH_DSN``; a clear line when it is missing or not a connection string."""
    environ = os.environ if environ is None else environ
    dsn = environ.get(DSN_VARIABLE, "").strip()
    if not dsn:
        raise ConfigError(f"{DSN_VARIABLE} is not set: give the central PostgreSQL as a libpq connection string,"
                          " e.g. \"host=search-db.example dbname=search user=publish_fs01 sslmode=verify-full\"")
    describe_dsn(dsn)  # parses it, so a malformed one fails here, before any work
    return dsn


def describe_dsn(dsn: str, variable: str = DSN_VARIABLE) -> str:
    """``host H port P db D user U``: what an error may show of a DSN (never its password)."""
    from psycopg import conninfo

    try:
        parts = conninfo.conninfo_to_dict(dsn)
    except Exception:  # libpq's own message may quote the string, password included
        raise ConfigError(f"{variable} is not a valid libpq connection string (key=value pairs or a"
                          " postgresql:// URL)") from None
    shown = [f"{label} {parts[key]}" for key, label in (("host", "host"), ("hostaddr", "host"), ("port", "port"),
                                                          ("dbname", "db"), ("user", "user")) if parts.get(key)]
    return " ".join(shown) or "the default local server"


def psycopg_module():
    """psycopg, or a clear line naming the extra that installs it."""
    from bastion_agent.core.extras import optional

    module = optional("psycopg")
    if module is None:
        raise ConfigError("publishing and --remote search need psycopg 3: pip install 'bastion-agent[postgres]'")
    return module


MIN_SERVER = (13, "13")  # PostgreSQL: the oldest major version supported
MIN_PGVECTOR = ((0, 8, 0), "0.8.0")  # hnsw.iterative_scan, which a filtered search needs
# pgvector's changelog: HNSW index corruption on vacuum, fixed in 0.8.3 and 0.8.4 (admin and publish warn below it)
SAFE_PGVECTOR = ((0, 8, 4), "0.8.4")


def connect(dsn: str, check: bool = True, warnings: list[str] | None = None):
    """A connection (autocommit; transactions are explicit); one clear line when it fails.

    ``check``: refuse a server older than ``MIN_SERVER`` or a pgvector older
    than ``MIN_PGVECTOR`` (or none), in one line with what was found and the fix.
    ``warnings``: a list that gets ``version_warning``'s line when the check finds a pgvector to upgrade
    (the caller says it once its work is done, so a failure stays one line).
    """

    psycopg = psycopg_module()
    quiet_psycopg()
    where = describe_dsn(dsn)
    try:
        conn = psycopg.connect(dsn, autocommit=True, application_name="bastion-agent")
    except psycopg.Error as exc:
        raise DatabaseError(f"cannot connect to PostgreSQL ({where}): {scrub(exc, dsn)}") from None
    if check:
        try:
            server, pgvector = conn.execute(
                "SELECT current_setting('server_version_num')::integer,"
                " (SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'vector')").fetchone()
        except psycopg.Error as exc:
            conn.close()
            raise DatabaseError(f"PostgreSQL ({where}) refused the version check: {scrub(exc, dsn)}") from None
        problem = version_problem(server, pgvector)
        if problem:
            conn.close()
            raise DatabaseError(f"PostgreSQL ({where}): {problem}")
        warning = version_warning(pgvector)
        if warning and warnings is not None and warning not in warnings:
            warnings.append(warning)
    return conn


def pgvector_parts(pgvector: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in re.split(r"[.\-]", pgvector)[:3])


def version_warning(pgvector: str | None) -> str | None:
    """A usable pgvector that should still be upgraded: the version found, why, and the fix (None otherwise)."""
    if pgvector is None or pgvector_parts(pgvector) >= SAFE_PGVECTOR[0]:
        return None
    return (f"warning: pgvector {pgvector} on the server can corrupt HNSW indexes on vacuum (fixed in 0.8.3 and"
            f" {SAFE_PGVECTOR[1]}): install pgvector {SAFE_PGVECTOR[1]} or newer, then a superuser runs"
            " ALTER EXTENSION vector UPDATE")


def say_warnings(command: str, warnings: list[str]) -> None:
    """Each warning as one line on stderr, ``bastion_agent COMMAND: warning: …``."""
    import sys

    for warning in warnings:
        print(f"bastion_agent {command}: {warning}", file=sys.stderr, flush=True)


def version_problem(server_version_num: int, pgvector: str | None) -> str | None:
    """Why this server cannot be used (None when it can): the versions found and the fix, in one sentence."""
    major = server_version_num // 10000
    found = f"PostgreSQL {major}" + (f" with pgvector {pgvector}" if pgvector else "")
    if major < MIN_SERVER[0]:
        return f"{found} found; bastion-agent needs PostgreSQL {MIN_SERVER[1]} or newer: upgrade the server"
    if pgvector is None:
        return (f"{found} found, without pgvector in this database: a superuser runs"
                f" CREATE EXTENSION vector (pgvector {MIN_PGVECTOR[1]} or newer)")
    parts = pgvector_parts(pgvector)
    if parts < MIN_PGVECTOR[0]:
        return (f"{found} found; bastion-agent needs pgvector {MIN_PGVECTOR[1]} or newer (hnsw.iterative_scan):"
                " install it on the server, then a superuser runs ALTER EXTENSION vector UPDATE")
    return None


def quiet_psycopg() -> None:
    """psycopg's own log lines (``error ignored terminating …`` when a server goes away mid-COPY) stay quiet:
    the failure reaches the user as our one line."""
    import logging

    logger = logging.getLogger("psycopg")
    if not any(isinstance(handler, logging.NullHandler) for handler in logger.handlers):
        logger.addHandler(logging.NullHandler())
    logger.propagate = False


def scrub(exc: Exception, dsn: str) -> str:
    """A database error in one line: its message, with PostgreSQL's DETAIL and HINT, the DSN's password removed."""
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    if primary:
        text = primary.strip()
        for label, value in (("DETAIL", diag.message_detail), ("HINT", diag.message_hint)):
            if value:
                text += f" ({label}: {value.strip()})"
    else:
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if getattr(exc, "sqlstate", None) is None and "server closed the connection" in str(exc):
            text = "the server closed the connection"
    text = " ".join(text.split())
    try:
        from psycopg import conninfo

        password = conninfo.conninfo_to_dict(dsn).get("password")
    except Exception:
        password = None
    if password:
        text = text.replace(password, "***")
    return text
