-- Migration 7, after the groups columns and the new policy: write_documents with each document's groups,
-- update_groups, published_groups; add_bastion/remove_bastion granting the longer list; the owner's
-- functions that make readers and gateways; the keyword pass for the role in effect.
--
-- Read by schema_files.statements(): each statement follows a '-- statement:' line (that line and this
-- header are not sent). A migration that has run is never edited, so these statements stay byte for byte
-- what ran: publishing/test_schema_files.py hashes them. A change of rights or of a function is a new
-- migration.
-- {vec} stands for pgvector's schema, quoted as an identifier.
-- statement: function write_documents
CREATE OR REPLACE FUNCTION bastion_agent.write_documents(p_bastion text, p_model text, p_docs text[], p_fingerprints text[], p_paths text[], p_windows integer[], p_groups text[]) RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        DECLARE v_bastion text; v_dim integer; v_ok boolean; v_deleted integer; v_inserted integer;
        BEGIN
        SELECT b.bastion INTO v_bastion FROM bastion_agent.bastions b WHERE b.role = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = session_user);
        IF v_bastion IS NULL THEN
            RAISE EXCEPTION 'role % publishes no bastion here', session_user
                USING HINT = 'the administrator runs: bastion-agent admin add-bastion NAME';
        END IF;
        IF v_bastion <> p_bastion THEN
            RAISE EXCEPTION 'role % publishes bastion %, not %', session_user, v_bastion, p_bastion
                USING HINT = 'use the publishing role of the manifest''s bastion';
        END IF;
            SELECT m.dim INTO v_dim FROM bastion_agent.models m WHERE m.model = p_model;
            IF v_dim IS NULL THEN
                RAISE EXCEPTION 'model % is not registered on this server', p_model;
            END IF;
        SELECT c.relowner = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user)
            AND c.relkind = 'r' AND NOT c.relrowsecurity INTO v_ok
            FROM pg_catalog.pg_class c WHERE c.oid = to_regclass('pg_temp.publish_staging');
        IF v_ok IS NOT TRUE THEN
            RAISE EXCEPTION 'the staging table is not the one open_staging() made';
        END IF;
            IF cardinality(p_groups) IS DISTINCT FROM cardinality(p_docs) THEN
                RAISE EXCEPTION 'the batch names % documents and % group lists', cardinality(p_docs), cardinality(p_groups);
            END IF;
            DELETE FROM bastion_agent.windows w WHERE w.bastion = v_bastion AND w.model = p_model AND w.doc = ANY (p_docs);
            GET DIAGNOSTICS v_deleted = ROW_COUNT;
            INSERT INTO bastion_agent.windows (bastion, model, chunk_id, doc, idx, start, "end", text, embedding, groups)
                SELECT v_bastion, p_model, t.chunk_id, t.doc, t.idx, t.start, t."end", t.text, t.embedding, d.groups
                FROM pg_temp.publish_staging t JOIN (SELECT DISTINCT ON (u.doc) u.doc, bastion_agent.groups_of(u.g) AS groups
                    FROM unnest(p_docs, p_groups) AS u(doc, g) ORDER BY u.doc) d ON d.doc = t.doc
                WHERE {vec}.vector_dims(t.embedding) = v_dim;
            GET DIAGNOSTICS v_inserted = ROW_COUNT;
            IF v_inserted <> (SELECT coalesce(sum(n), 0) FROM unnest(p_windows) AS n) THEN
                RAISE EXCEPTION 'the batch declares % windows, % staged windows belong to its documents with dim %',
                    (SELECT coalesce(sum(n), 0) FROM unnest(p_windows) AS n), v_inserted, v_dim;
            END IF;
            INSERT INTO bastion_agent.documents (bastion, model, doc, chunks_fingerprint, paths, windows, published_at, groups)
                SELECT v_bastion, p_model, d.doc, d.fingerprint, d.paths::jsonb, d.windows, now(), bastion_agent.groups_of(d.g)
                FROM unnest(p_docs, p_fingerprints, p_paths, p_windows, p_groups) AS d(doc, fingerprint, paths, windows, g)
                ON CONFLICT (bastion, doc, model) DO UPDATE SET chunks_fingerprint = excluded.chunks_fingerprint,
                    paths = excluded.paths, windows = excluded.windows, published_at = excluded.published_at,
                    groups = excluded.groups;
            TRUNCATE pg_temp.publish_staging;
            RETURN v_deleted;
        END
$fn$
-- statement: function write_documents
CREATE OR REPLACE FUNCTION bastion_agent.write_documents(p_bastion text, p_model text, p_docs text[], p_fingerprints text[], p_paths text[], p_windows integer[]) RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        BEGIN
            RETURN bastion_agent.write_documents(p_bastion, p_model, p_docs, p_fingerprints, p_paths, p_windows,
                ARRAY(SELECT coalesce((SELECT to_jsonb(d.groups)::text FROM bastion_agent.documents d WHERE d.bastion = p_bastion
                    AND d.model = p_model AND d.doc = u.doc), '[]') FROM unnest(p_docs) WITH ORDINALITY AS u(doc, i)
                    ORDER BY u.i));
        END
$fn$
-- statement: function update_groups
CREATE OR REPLACE FUNCTION bastion_agent.update_groups(p_bastion text, p_model text, p_docs text[], p_groups text[]) RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        DECLARE v_bastion text; v_count integer;
        BEGIN
        SELECT b.bastion INTO v_bastion FROM bastion_agent.bastions b WHERE b.role = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = session_user);
        IF v_bastion IS NULL THEN
            RAISE EXCEPTION 'role % publishes no bastion here', session_user
                USING HINT = 'the administrator runs: bastion-agent admin add-bastion NAME';
        END IF;
        IF v_bastion <> p_bastion THEN
            RAISE EXCEPTION 'role % publishes bastion %, not %', session_user, v_bastion, p_bastion
                USING HINT = 'use the publishing role of the manifest''s bastion';
        END IF;
            -- only the rows whose groups change are rewritten; no window leaves or re-enters the graph otherwise
            UPDATE bastion_agent.documents d SET groups = u.groups, published_at = now()
                FROM (SELECT x.doc, bastion_agent.groups_of(x.g) AS groups FROM unnest(p_docs, p_groups) AS x(doc, g)) u
                WHERE d.bastion = v_bastion AND d.model = p_model AND d.doc = u.doc AND d.groups <> u.groups;
            GET DIAGNOSTICS v_count = ROW_COUNT;
            UPDATE bastion_agent.windows w SET groups = u.groups
                FROM (SELECT x.doc, bastion_agent.groups_of(x.g) AS groups FROM unnest(p_docs, p_groups) AS x(doc, g)) u
                WHERE w.bastion = v_bastion AND w.model = p_model AND w.doc = u.doc AND w.groups <> u.groups;
            RETURN v_count;
        END
$fn$
-- statement: function published_groups
CREATE OR REPLACE FUNCTION bastion_agent.published_groups(p_bastion text, p_model text) RETURNS TABLE (doc text, groups text) LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        DECLARE v_bastion text;
        BEGIN
        SELECT b.bastion INTO v_bastion FROM bastion_agent.bastions b WHERE b.role = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = session_user);
        IF v_bastion IS NULL THEN
            RAISE EXCEPTION 'role % publishes no bastion here', session_user
                USING HINT = 'the administrator runs: bastion-agent admin add-bastion NAME';
        END IF;
        IF v_bastion <> p_bastion THEN
            RAISE EXCEPTION 'role % publishes bastion %, not %', session_user, v_bastion, p_bastion
                USING HINT = 'use the publishing role of the manifest''s bastion';
        END IF;
            RETURN QUERY SELECT d.doc, to_jsonb(d.groups)::text FROM bastion_agent.documents d
                WHERE d.bastion = v_bastion AND d.model = p_model;
        END
$fn$
-- statement: function add_bastion
CREATE OR REPLACE FUNCTION bastion_agent.add_bastion(p_bastion text, p_role name) RETURNS void LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        DECLARE v_oid oid; v_role name := p_role; v_held oid;
        BEGIN
            SELECT r.oid INTO v_oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role;
            IF v_oid IS NULL THEN
                RAISE EXCEPTION 'role % does not exist', p_role USING HINT = 'a superuser creates it first (docs/publish.md)';
            END IF;
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = v_oid AND (r.rolsuper OR r.rolbypassrls)) THEN
                RAISE EXCEPTION 'role % bypasses row-level security: a publishing role must not', p_role;
            END IF;
            IF EXISTS (SELECT 1 FROM bastion_agent.bastions b WHERE b.role = v_oid AND b.bastion <> p_bastion) THEN
                RAISE EXCEPTION 'role % already publishes another bastion', p_role
                    USING HINT = 'one role per bastion, so a stolen password speaks for one bastion';
            END IF;
            SELECT b.role INTO v_held FROM bastion_agent.bastions b WHERE b.bastion = p_bastion;
            IF v_held IS NOT NULL AND v_held <> v_oid AND EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = v_held) THEN
                RAISE EXCEPTION 'bastion % is published by another role', p_bastion
                    USING HINT = 'remove the bastion first: bastion-agent admin remove-bastion NAME';
            END IF;
            INSERT INTO bastion_agent.bastions (bastion, role, role_name) VALUES (p_bastion, v_oid, p_role)
                ON CONFLICT (bastion) DO UPDATE SET role = excluded.role, role_name = excluded.role_name;
            EXECUTE format('GRANT USAGE ON SCHEMA bastion_agent TO %I', v_role);
            EXECUTE format('GRANT SELECT ON bastion_agent.migrations TO %I', v_role);
            EXECUTE format('GRANT EXECUTE ON FUNCTION bastion_agent.published_documents(text, text, integer) TO %I', v_role); EXECUTE format('GRANT EXECUTE ON FUNCTION bastion_agent.lock_bastion(text) TO %I', v_role); EXECUTE format('GRANT EXECUTE ON FUNCTION bastion_agent.open_staging() TO %I', v_role); EXECUTE format('GRANT EXECUTE ON FUNCTION bastion_agent.write_documents(text, text, text[], text[], text[], integer[]) TO %I', v_role); EXECUTE format('GRANT EXECUTE ON FUNCTION bastion_agent.update_paths(text, text, text[], text[]) TO %I', v_role); EXECUTE format('GRANT EXECUTE ON FUNCTION bastion_agent.delete_documents(text, text, text[]) TO %I', v_role); EXECUTE format('GRANT EXECUTE ON FUNCTION bastion_agent.write_documents(text, text, text[], text[], text[], integer[], text[]) TO %I', v_role); EXECUTE format('GRANT EXECUTE ON FUNCTION bastion_agent.update_groups(text, text, text[], text[]) TO %I', v_role); EXECUTE format('GRANT EXECUTE ON FUNCTION bastion_agent.published_groups(text, text) TO %I', v_role);
        END
$fn$
-- statement: function remove_bastion
CREATE OR REPLACE FUNCTION bastion_agent.remove_bastion(p_bastion text) RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        DECLARE v_oid oid; v_role name; v_count integer;
        BEGIN
            -- the mapping first (waits for a publish in flight: its lock is on this row), then the rows
            SELECT b.role INTO v_oid FROM bastion_agent.bastions b WHERE b.bastion = p_bastion FOR UPDATE;
            SELECT r.rolname INTO v_role FROM pg_catalog.pg_roles r WHERE r.oid = v_oid;
            IF v_role IS NOT NULL THEN
                EXECUTE format('REVOKE EXECUTE ON FUNCTION bastion_agent.published_documents(text, text, integer) FROM %I', v_role); EXECUTE format('REVOKE EXECUTE ON FUNCTION bastion_agent.lock_bastion(text) FROM %I', v_role); EXECUTE format('REVOKE EXECUTE ON FUNCTION bastion_agent.open_staging() FROM %I', v_role); EXECUTE format('REVOKE EXECUTE ON FUNCTION bastion_agent.write_documents(text, text, text[], text[], text[], integer[]) FROM %I', v_role); EXECUTE format('REVOKE EXECUTE ON FUNCTION bastion_agent.update_paths(text, text, text[], text[]) FROM %I', v_role); EXECUTE format('REVOKE EXECUTE ON FUNCTION bastion_agent.delete_documents(text, text, text[]) FROM %I', v_role); EXECUTE format('REVOKE EXECUTE ON FUNCTION bastion_agent.write_documents(text, text, text[], text[], text[], integer[], text[]) FROM %I', v_role); EXECUTE format('REVOKE EXECUTE ON FUNCTION bastion_agent.update_groups(text, text, text[], text[]) FROM %I', v_role); EXECUTE format('REVOKE EXECUTE ON FUNCTION bastion_agent.published_groups(text, text) FROM %I', v_role);
                EXECUTE format('REVOKE ALL ON SCHEMA bastion_agent FROM %I', v_role);
                EXECUTE format('REVOKE ALL ON bastion_agent.migrations FROM %I', v_role);
            END IF;
            DELETE FROM bastion_agent.bastions b WHERE b.bastion = p_bastion;
            DELETE FROM bastion_agent.windows w WHERE w.bastion = p_bastion;
            GET DIAGNOSTICS v_count = ROW_COUNT;
            DELETE FROM bastion_agent.documents d WHERE d.bastion = p_bastion;
            RETURN v_count;
        END
$fn$
-- statement: function add_searcher
CREATE OR REPLACE FUNCTION bastion_agent.add_searcher(p_role name) RETURNS void LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        DECLARE v_oid oid;
        BEGIN
            SELECT r.oid INTO v_oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role;
            IF v_oid IS NULL THEN
                RAISE EXCEPTION 'role % does not exist', p_role USING HINT = 'a superuser creates it first (docs/publish.md)';
            END IF;
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = v_oid AND (r.rolsuper OR r.rolbypassrls)) THEN
                RAISE EXCEPTION 'role % bypasses row-level security: choose another role', p_role;
            END IF;
            IF EXISTS (SELECT 1 FROM bastion_agent.bastions b WHERE b.role = v_oid) THEN
                RAISE EXCEPTION 'role % publishes a bastion: a search role must be another role', p_role;
            END IF;
            IF EXISTS (SELECT 1 FROM bastion_agent.gateways g WHERE g.role = v_oid) THEN
                RAISE EXCEPTION 'role % is a gateway: it reads nothing itself, a reader must be another role', p_role;
            END IF;
            DELETE FROM bastion_agent.readers x WHERE x.role = v_oid;  -- every group now
            INSERT INTO bastion_agent.searchers (role, role_name) VALUES (v_oid, p_role)
                ON CONFLICT (role) DO UPDATE SET role_name = excluded.role_name;
            EXECUTE format('GRANT USAGE ON SCHEMA bastion_agent TO %I', p_role);
            EXECUTE format('GRANT SELECT ON bastion_agent.windows, bastion_agent.documents, bastion_agent.models, bastion_agent.migrations TO %I', p_role);
            EXECUTE format('GRANT EXECUTE ON FUNCTION bastion_agent.keyword_matches(text, text, text[], integer, integer, name) TO %I', p_role);
            EXECUTE format('GRANT EXECUTE ON FUNCTION bastion_agent.keyword_matches(text, text, text[], integer, integer) TO %I', p_role);
        END
$fn$
-- statement: function add_reader
CREATE OR REPLACE FUNCTION bastion_agent.add_reader(p_role name, p_groups text[]) RETURNS void LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        DECLARE v_oid oid; v_groups text[] := ARRAY(SELECT DISTINCT g FROM unnest(p_groups) g ORDER BY g);
        BEGIN
            SELECT r.oid INTO v_oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role;
            IF v_oid IS NULL THEN
                RAISE EXCEPTION 'role % does not exist', p_role USING HINT = 'a superuser creates it first (docs/publish.md)';
            END IF;
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = v_oid AND (r.rolsuper OR r.rolbypassrls)) THEN
                RAISE EXCEPTION 'role % bypasses row-level security: choose another role', p_role;
            END IF;
            IF EXISTS (SELECT 1 FROM bastion_agent.bastions b WHERE b.role = v_oid) THEN
                RAISE EXCEPTION 'role % publishes a bastion: a search role must be another role', p_role;
            END IF;
            IF EXISTS (SELECT 1 FROM bastion_agent.gateways g WHERE g.role = v_oid) THEN
                RAISE EXCEPTION 'role % is a gateway: it reads nothing itself, a reader must be another role', p_role;
            END IF;
            IF NOT bastion_agent.valid_groups(v_groups) THEN
                RAISE EXCEPTION 'a group name is 1-63 lowercase letters, digits, - and _ (at most 256 groups)';
            END IF;
            DELETE FROM bastion_agent.searchers x WHERE x.role = v_oid;  -- no longer every group
            EXECUTE format('REVOKE ALL ON FUNCTION bastion_agent.keyword_matches(text, text, text[], integer, integer) FROM %I', p_role);
            INSERT INTO bastion_agent.readers (role, role_name, groups) VALUES (v_oid, p_role, v_groups)
                ON CONFLICT (role) DO UPDATE SET role_name = excluded.role_name, groups = excluded.groups;
            EXECUTE format('GRANT USAGE ON SCHEMA bastion_agent TO %I', p_role);
            EXECUTE format('GRANT SELECT ON bastion_agent.windows, bastion_agent.documents, bastion_agent.models, bastion_agent.migrations TO %I', p_role);
            EXECUTE format('GRANT EXECUTE ON FUNCTION bastion_agent.keyword_matches(text, text, text[], integer, integer, name) TO %I', p_role);
        END
$fn$
-- statement: function remove_searcher
CREATE OR REPLACE FUNCTION bastion_agent.remove_searcher(p_role name) RETURNS void LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        BEGIN
            DELETE FROM bastion_agent.searchers x WHERE x.role_name = p_role
                OR x.role = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role);
            DELETE FROM bastion_agent.readers x WHERE x.role_name = p_role
                OR x.role = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role);
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = p_role) THEN
                EXECUTE format('REVOKE ALL ON bastion_agent.windows, bastion_agent.documents, bastion_agent.models, bastion_agent.migrations FROM %I', p_role);
                EXECUTE format('REVOKE ALL ON FUNCTION bastion_agent.keyword_matches(text, text, text[], integer, integer) FROM %I', p_role);
                EXECUTE format('REVOKE ALL ON FUNCTION bastion_agent.keyword_matches(text, text, text[], integer, integer, name) FROM %I', p_role);
                EXECUTE format('REVOKE ALL ON SCHEMA bastion_agent FROM %I', p_role);
            END IF;
        END
$fn$
-- statement: function add_gateway
CREATE OR REPLACE FUNCTION bastion_agent.add_gateway(p_role name) RETURNS void LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        DECLARE v_oid oid;
        BEGIN
            SELECT r.oid INTO v_oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role;
            IF v_oid IS NULL THEN
                RAISE EXCEPTION 'role % does not exist', p_role USING HINT = 'a superuser creates it first (docs/publish.md)';
            END IF;
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = v_oid AND (r.rolsuper OR r.rolbypassrls)) THEN
                RAISE EXCEPTION 'role % bypasses row-level security: choose another role', p_role;
            END IF;
            IF EXISTS (SELECT 1 FROM bastion_agent.bastions b WHERE b.role = v_oid) THEN
                RAISE EXCEPTION 'role % publishes a bastion: a search role must be another role', p_role;
            END IF;
            IF EXISTS (SELECT 1 FROM bastion_agent.searchers x WHERE x.role = v_oid)
                    OR EXISTS (SELECT 1 FROM bastion_agent.readers x WHERE x.role = v_oid) THEN
                RAISE EXCEPTION 'role % reads rows itself: a gateway must be another role', p_role;
            END IF;
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = v_oid AND r.rolinherit) THEN
                RAISE EXCEPTION 'role % inherits the rights of its roles: a gateway must be NOINHERIT', p_role;
            END IF;
            INSERT INTO bastion_agent.gateways (role, role_name) VALUES (v_oid, p_role)
                ON CONFLICT (role) DO UPDATE SET role_name = excluded.role_name;
            -- what a search checks before it becomes a reader: the schema's version and the model's row
            EXECUTE format('GRANT USAGE ON SCHEMA bastion_agent TO %I', p_role);
            EXECUTE format('GRANT SELECT ON bastion_agent.migrations, bastion_agent.models TO %I', p_role);
        END
$fn$
-- statement: function remove_gateway
CREATE OR REPLACE FUNCTION bastion_agent.remove_gateway(p_role name) RETURNS void LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        BEGIN
            DELETE FROM bastion_agent.gateways g WHERE g.role_name = p_role
                OR g.role = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role);
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = p_role) THEN
                EXECUTE format('REVOKE ALL ON bastion_agent.migrations, bastion_agent.models FROM %I', p_role);
                EXECUTE format('REVOKE ALL ON SCHEMA bastion_agent FROM %I', p_role);
            END IF;
        END
$fn$
-- statement: function keyword_matches
CREATE OR REPLACE FUNCTION bastion_agent.keyword_matches(p_query text, p_model text, p_bastions text[], p_pool integer, p_n integer, p_role name) RETURNS TABLE (bastion text, chunk_id text, r real) LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        DECLARE
            v_oid oid := (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role);
            -- the owner and superusers read every row; others what the policy gives p_role, the role in effect
            -- (the caller passes current_user), and only when the login role may become it
            v_all boolean := v_oid IS NOT NULL AND pg_catalog.pg_has_role(session_user, v_oid, 'MEMBER')
                AND (p_role = current_user OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid = v_oid));
            v_readable text[] := CASE WHEN v_all THEN NULL ELSE bastion_agent.readable_bastions(p_role) END;
            v_groups text[] := CASE WHEN v_all THEN NULL ELSE bastion_agent.readable_groups(p_role) END;
        BEGIN
            -- the policy's rule as plain conditions (so the GIN index answers), applied before the pool's
            -- LIMIT and the ranking: a reader's top rows are the best of the rows it may read
            RETURN QUERY
            WITH q AS (SELECT to_tsquery('english'::regconfig, p_query) AS q),
                 m AS MATERIALIZED (SELECT w.bastion, w.chunk_id, w.tsv FROM bastion_agent.windows w, q
                     WHERE w.model = p_model AND w.tsv @@ q.q
                       AND (v_readable IS NULL OR w.bastion = ANY (v_readable))
                       AND (v_groups IS NULL OR w.groups && v_groups)
                       AND (p_bastions IS NULL OR w.bastion = ANY (p_bastions))
                     LIMIT p_pool)
            SELECT m.bastion, m.chunk_id, ts_rank(m.tsv, q.q, 32) FROM m, q
                ORDER BY 3 DESC, 1, 2 LIMIT p_n;
        END
$fn$
