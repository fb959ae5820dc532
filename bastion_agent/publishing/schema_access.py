"""Who may do what in the central schema: the roles, the functions they call, the read policy.

No role but the schema's owner holds a right on a table. A publishing role
writes through ``SECURITY DEFINER`` functions that take its bastion from
its login role, a search role or a reader reads through one policy, and a
gateway reads nothing itself but may become a reader. Migrations 6 and 7
made them; their statements are files that are read
(``sql/m006_least_privilege.sql``, ``sql/m007_*.sql``, through
``schema_files``), since a migration that has run never changes.
``publish_schema`` runs them, in order, with the rest of each migration.
What stays here is what later migrations build on: the lists of functions
each kind of role is granted, the caller check every publishing function
starts with, ``add_bastion``/``remove_bastion`` granting a given list, the
reader checks and the read policy. A change of rights is a new migration,
never an edit of one that has run.
"""

from __future__ import annotations

from bastion_agent.publishing.schema_files import statements
from bastion_agent.publishing.schema_sql import SCHEMA, definer

# --- migration 6: least privilege by construction ---------------------------
#
# A publishing role holds no right on any table: it hands its rows to the
# functions below, which run as the schema's owner (SECURITY DEFINER, a fixed
# search_path, every name qualified) and take its bastion from ``bastions``
# (the login role's oid), never from what it says. A search role holds SELECT
# through one policy: the rows of the bastions ``readable_bastions()`` gives
# it. No mapping, no rows: every check fails closed.

PUBLISHER_FUNCTIONS = (  # what add_bastion grants a publishing role, and nothing else
    "published_documents(text, text, integer)", "lock_bastion(text)", "open_staging()",
    "write_documents(text, text, text[], text[], text[], integer[])", "update_paths(text, text, text[], text[])",
    "delete_documents(text, text, text[])")
SEARCHER_TABLES = ("windows", "documents", "models", "migrations")
SEARCHER_FUNCTIONS = ("keyword_matches(text, text, text[], integer, integer)",)
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


def least_privilege_sql(vec: str) -> list[str]:
    """Migration 6's statements after the grants of before are revoked (``vec``: pgvector's schema, quoted):
    ``bastions`` and ``searchers``, the read policy, the publisher's and search role's functions, ``ensure_model``
    with every name qualified, and the functions' rights."""
    return statements("m006_least_privilege", vec=vec)


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
    return statements("m007_reader_scope")


def reader_roles_sql(vec: str) -> list[str]:
    """``write_documents`` with each document's groups, ``update_groups`` (a label change: no vector is sent),
    ``published_groups``; ``add_bastion``/``remove_bastion`` granting ``PUBLISHER_FUNCTIONS_7``; the owner's
    functions that make readers and gateways; the keyword pass for the role in effect. The six-argument
    ``write_documents`` of migration 6 keeps each document's groups on the server."""
    return statements("m007_reader_roles", vec=vec)


def reader_policy(table: str) -> str:
    s = SCHEMA
    groups = f"(SELECT {s}.readable_groups(current_user))"  # an init plan: called once per query
    return (f"CREATE POLICY {table}_read ON {s}.{table} FOR SELECT"
            f" USING (bastion = ANY ((SELECT {s}.readable_bastions(current_user))::text[])"
            f" AND ({groups} IS NULL OR groups && {groups}))")


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
