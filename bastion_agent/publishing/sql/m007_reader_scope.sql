-- Migration 7, first: the functions the read policy calls (which bastions and which groups a role reads),
-- and the checks of group names (groups_of: a JSON list of names, what a publisher sends, as the sorted,
-- distinct array the rows hold).
--
-- Read by schema_files.statements(): each statement follows a '-- statement:' line (that line and this
-- header are not sent). A migration that has run is never edited, so these statements stay byte for byte
-- what ran: publishing/test_schema_files.py hashes them. A change of rights or of a function is a new
-- migration.
-- statement: function valid_groups
CREATE FUNCTION bastion_agent.valid_groups(p_groups text[]) RETURNS boolean LANGUAGE sql IMMUTABLE
            SET search_path = pg_catalog AS $fn$
            SELECT p_groups IS NOT NULL AND cardinality(p_groups) <= 256
                AND coalesce((SELECT bool_and(g IS NOT NULL AND g ~ '^[a-z0-9][a-z0-9_-]{0,62}$') FROM unnest(p_groups) g), true)
            $fn$
-- statement: function groups_of
CREATE FUNCTION bastion_agent.groups_of(p_json text) RETURNS text[] LANGUAGE sql IMMUTABLE
            SET search_path = pg_catalog AS $fn$
            SELECT coalesce(array_agg(DISTINCT g ORDER BY g), '{}') FROM jsonb_array_elements_text(p_json::jsonb) g
            $fn$
-- statement: function readable_bastions
CREATE OR REPLACE FUNCTION bastion_agent.readable_bastions(p_role name) RETURNS text[] LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        DECLARE v_oid oid;
        BEGIN
            SELECT r.oid INTO v_oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role;
            IF v_oid IS NULL OR NOT pg_catalog.pg_has_role(session_user, v_oid, 'MEMBER') THEN
                RETURN '{}'::text[];
            END IF;
            IF EXISTS (SELECT 1 FROM bastion_agent.searchers x WHERE x.role = v_oid)
                    OR EXISTS (SELECT 1 FROM bastion_agent.readers x WHERE x.role = v_oid) THEN
                RETURN ARRAY(SELECT b.bastion FROM bastion_agent.bastions b ORDER BY b.bastion);
            END IF;
            RETURN '{}'::text[];
        END
$fn$
-- statement: function readable_groups
CREATE OR REPLACE FUNCTION bastion_agent.readable_groups(p_role name) RETURNS text[] LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        DECLARE v_oid oid; v_groups text[];
        BEGIN
            SELECT r.oid INTO v_oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role;
            IF v_oid IS NULL OR NOT pg_catalog.pg_has_role(session_user, v_oid, 'MEMBER') THEN
                RETURN '{}'::text[];
            END IF;
            IF EXISTS (SELECT 1 FROM bastion_agent.searchers x WHERE x.role = v_oid) THEN
                RETURN NULL;  -- a search role: every group
            END IF;
            SELECT x.groups INTO v_groups FROM bastion_agent.readers x WHERE x.role = v_oid;
            RETURN coalesce(v_groups, '{}'::text[]);
        END
$fn$
