-- Migration 6: least privilege by construction (schema_access.py says why). In order: bastions and searchers
-- replace publishers (the bastions of before keep the roles publishers mapped them to; windows.embedding is
-- stored MAIN: a vector of 384 dimensions with its text passes the 2 kB TOAST threshold, and kept out of line an
-- exact scan of one bastion read 1.6 buffers a row); the read policy (readable_bastions() is called once per
-- query, an init plan, not per row); the publisher's functions; add_bastion/remove_bastion granting them; the
-- search role's functions; ensure_model, every name qualified; and the functions' rights (none for PUBLIC but
-- readable_bastions(), which every policy check calls).
--
-- Read by schema_files.statements(): each statement follows a '-- statement:' line (that line and this
-- header are not sent). A migration that has run is never edited, so these statements stay byte for byte
-- what ran: publishing/test_schema_files.py hashes them. A change of rights or of a function is a new
-- migration.
-- {vec} stands for pgvector's schema, quoted as an identifier.
-- statement: CREATE TABLE bastion_agent.bastions (
CREATE TABLE bastion_agent.bastions (
            bastion text PRIMARY KEY CHECK (bastion ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
            role oid UNIQUE,
            role_name name,
            added_at timestamptz NOT NULL DEFAULT now())
-- statement: CREATE TABLE bastion_agent.searchers (role oid PRIMARY KEY, role_name name NOT NULL, added
CREATE TABLE bastion_agent.searchers (role oid PRIMARY KEY, role_name name NOT NULL, added_at timestamptz NOT NULL DEFAULT now())
-- statement: INSERT INTO bastion_agent.bastions (bastion, role, role_name)
INSERT INTO bastion_agent.bastions (bastion, role, role_name)
            SELECT b.bastion, r.oid, r.rolname FROM (SELECT DISTINCT bastion FROM bastion_agent.documents
                UNION SELECT bastion FROM bastion_agent.publishers) b
            LEFT JOIN LATERAL (SELECT p.role FROM bastion_agent.publishers p WHERE p.bastion = b.bastion
                ORDER BY p.role LIMIT 1) p ON true
            LEFT JOIN pg_catalog.pg_roles r ON r.rolname = p.role
            WHERE b.bastion ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'
            ON CONFLICT DO NOTHING
-- statement: ALTER TABLE bastion_agent.windows ALTER COLUMN embedding SET STORAGE MAIN
ALTER TABLE bastion_agent.windows ALTER COLUMN embedding SET STORAGE MAIN
-- statement: DROP POLICY IF EXISTS windows_read ON bastion_agent.windows
DROP POLICY IF EXISTS windows_read ON bastion_agent.windows
-- statement: DROP POLICY IF EXISTS windows_insert ON bastion_agent.windows
DROP POLICY IF EXISTS windows_insert ON bastion_agent.windows
-- statement: DROP POLICY IF EXISTS windows_update ON bastion_agent.windows
DROP POLICY IF EXISTS windows_update ON bastion_agent.windows
-- statement: DROP POLICY IF EXISTS windows_delete ON bastion_agent.windows
DROP POLICY IF EXISTS windows_delete ON bastion_agent.windows
-- statement: DROP POLICY IF EXISTS documents_read ON bastion_agent.documents
DROP POLICY IF EXISTS documents_read ON bastion_agent.documents
-- statement: DROP POLICY IF EXISTS documents_insert ON bastion_agent.documents
DROP POLICY IF EXISTS documents_insert ON bastion_agent.documents
-- statement: DROP POLICY IF EXISTS documents_update ON bastion_agent.documents
DROP POLICY IF EXISTS documents_update ON bastion_agent.documents
-- statement: DROP POLICY IF EXISTS documents_delete ON bastion_agent.documents
DROP POLICY IF EXISTS documents_delete ON bastion_agent.documents
-- statement: DROP TABLE bastion_agent.publishers
DROP TABLE bastion_agent.publishers
-- statement: function readable_bastions
CREATE OR REPLACE FUNCTION bastion_agent.readable_bastions() RETURNS text[] LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        BEGIN
            -- the bastions whose rows the caller reads: every registered one for a search role, none otherwise
            -- (migration 7 adds readers, each narrowed to its groups)
            IF EXISTS (SELECT 1 FROM bastion_agent.searchers x WHERE x.role = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = session_user)) THEN
                RETURN ARRAY(SELECT b.bastion FROM bastion_agent.bastions b ORDER BY b.bastion);
            END IF;
            RETURN '{}'::text[];
        END
$fn$
-- statement: CREATE POLICY windows_read ON bastion_agent.windows FOR SELECT USING (bastion = ANY ((SELE
CREATE POLICY windows_read ON bastion_agent.windows FOR SELECT USING (bastion = ANY ((SELECT bastion_agent.readable_bastions())::text[]))
-- statement: CREATE POLICY documents_read ON bastion_agent.documents FOR SELECT USING (bastion = ANY ((
CREATE POLICY documents_read ON bastion_agent.documents FOR SELECT USING (bastion = ANY ((SELECT bastion_agent.readable_bastions())::text[]))
-- statement: function published_documents
CREATE OR REPLACE FUNCTION bastion_agent.published_documents(p_bastion text, p_model text, p_dim integer) RETURNS TABLE (doc text, chunks_fingerprint text, paths text, windows integer) LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        DECLARE v_bastion text; v_dim integer;
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
            RAISE EXCEPTION 'model % is not registered on this server', p_model
                USING HINT = format('the administrator runs: bastion-agent admin add-model %s --dim %s', p_model, p_dim);
        END IF;
        IF v_dim <> p_dim THEN
            RAISE EXCEPTION 'model % is published with dim %, not %', p_model, v_dim, p_dim;
        END IF;
            RETURN QUERY SELECT d.doc, d.chunks_fingerprint, d.paths::text, d.windows FROM bastion_agent.documents d
                WHERE d.bastion = v_bastion AND d.model = p_model;
        END
$fn$
-- statement: function lock_bastion
CREATE OR REPLACE FUNCTION bastion_agent.lock_bastion(p_bastion text) RETURNS text LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

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
            -- one publish of a bastion at a time: a lock on its own row, held until the caller's
            -- transaction ends (a killed publisher's ends with its connection); nobody else can take it
            PERFORM 1 FROM bastion_agent.bastions b WHERE b.bastion = v_bastion FOR UPDATE NOWAIT;
            RETURN v_bastion;
        END
$fn$
-- statement: function open_staging
CREATE OR REPLACE FUNCTION bastion_agent.open_staging() RETURNS void LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        BEGIN
            -- the temp table a publisher COPYs its rows into: the owner's, so the caller can only INSERT
            -- into it (no trigger, policy or view of its own runs when the owner reads it back)
            IF to_regclass('pg_temp.publish_staging') IS NULL THEN
                CREATE TEMP TABLE publish_staging (chunk_id text, doc text, idx integer, start integer, "end" integer,
                    text text, embedding {vec}.vector) ON COMMIT DELETE ROWS;
                EXECUTE format('GRANT INSERT ON pg_temp.publish_staging TO %I', session_user);
            END IF;
        END
$fn$
-- statement: function write_documents
CREATE OR REPLACE FUNCTION bastion_agent.write_documents(p_bastion text, p_model text, p_docs text[], p_fingerprints text[], p_paths text[], p_windows integer[]) RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

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
            DELETE FROM bastion_agent.windows w WHERE w.bastion = v_bastion AND w.model = p_model AND w.doc = ANY (p_docs);
            GET DIAGNOSTICS v_deleted = ROW_COUNT;
            -- only the batch's documents, only the model's dimension (a hash join, not a scan of the array
            -- per row); the count must then be the windows the documents declare
            INSERT INTO bastion_agent.windows (bastion, model, chunk_id, doc, idx, start, "end", text, embedding)
                SELECT v_bastion, p_model, t.chunk_id, t.doc, t.idx, t.start, t."end", t.text, t.embedding
                FROM pg_temp.publish_staging t JOIN (SELECT DISTINCT u.doc FROM unnest(p_docs) AS u(doc)) d ON d.doc = t.doc
                WHERE {vec}.vector_dims(t.embedding) = v_dim;
            GET DIAGNOSTICS v_inserted = ROW_COUNT;
            IF v_inserted <> (SELECT coalesce(sum(n), 0) FROM unnest(p_windows) AS n) THEN
                RAISE EXCEPTION 'the batch declares % windows, % staged windows belong to its documents with dim %',
                    (SELECT coalesce(sum(n), 0) FROM unnest(p_windows) AS n), v_inserted, v_dim;
            END IF;
            INSERT INTO bastion_agent.documents (bastion, model, doc, chunks_fingerprint, paths, windows, published_at)
                SELECT v_bastion, p_model, d.doc, d.fingerprint, d.paths::jsonb, d.windows, now()
                FROM unnest(p_docs, p_fingerprints, p_paths, p_windows) AS d(doc, fingerprint, paths, windows)
                ON CONFLICT (bastion, doc, model) DO UPDATE SET chunks_fingerprint = excluded.chunks_fingerprint,
                    paths = excluded.paths, windows = excluded.windows, published_at = excluded.published_at;
            TRUNCATE pg_temp.publish_staging;
            RETURN v_deleted;
        END
$fn$
-- statement: function update_paths
CREATE OR REPLACE FUNCTION bastion_agent.update_paths(p_bastion text, p_model text, p_docs text[], p_paths text[]) RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

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
            UPDATE bastion_agent.documents d SET paths = u.paths::jsonb, published_at = now()
                FROM unnest(p_docs, p_paths) AS u(doc, paths)
                WHERE d.bastion = v_bastion AND d.model = p_model AND d.doc = u.doc;
            GET DIAGNOSTICS v_count = ROW_COUNT;
            RETURN v_count;
        END
$fn$
-- statement: function delete_documents
CREATE OR REPLACE FUNCTION bastion_agent.delete_documents(p_bastion text, p_model text, p_docs text[]) RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

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
            DELETE FROM bastion_agent.windows w WHERE w.bastion = v_bastion AND w.model = p_model AND w.doc = ANY (p_docs);
            GET DIAGNOSTICS v_count = ROW_COUNT;
            DELETE FROM bastion_agent.documents d WHERE d.bastion = v_bastion AND d.model = p_model AND d.doc = ANY (p_docs);
            RETURN v_count;
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
            EXECUTE format('GRANT EXECUTE ON FUNCTION bastion_agent.published_documents(text, text, integer) TO %I', v_role); EXECUTE format('GRANT EXECUTE ON FUNCTION bastion_agent.lock_bastion(text) TO %I', v_role); EXECUTE format('GRANT EXECUTE ON FUNCTION bastion_agent.open_staging() TO %I', v_role); EXECUTE format('GRANT EXECUTE ON FUNCTION bastion_agent.write_documents(text, text, text[], text[], text[], integer[]) TO %I', v_role); EXECUTE format('GRANT EXECUTE ON FUNCTION bastion_agent.update_paths(text, text, text[], text[]) TO %I', v_role); EXECUTE format('GRANT EXECUTE ON FUNCTION bastion_agent.delete_documents(text, text, text[]) TO %I', v_role);
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
                EXECUTE format('REVOKE EXECUTE ON FUNCTION bastion_agent.published_documents(text, text, integer) FROM %I', v_role); EXECUTE format('REVOKE EXECUTE ON FUNCTION bastion_agent.lock_bastion(text) FROM %I', v_role); EXECUTE format('REVOKE EXECUTE ON FUNCTION bastion_agent.open_staging() FROM %I', v_role); EXECUTE format('REVOKE EXECUTE ON FUNCTION bastion_agent.write_documents(text, text, text[], text[], text[], integer[]) FROM %I', v_role); EXECUTE format('REVOKE EXECUTE ON FUNCTION bastion_agent.update_paths(text, text, text[], text[]) FROM %I', v_role); EXECUTE format('REVOKE EXECUTE ON FUNCTION bastion_agent.delete_documents(text, text, text[]) FROM %I', v_role);
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
            IF EXISTS (SELECT 1 FROM bastion_agent.bastions b WHERE b.role = v_oid) THEN
                RAISE EXCEPTION 'role % publishes a bastion: a search role must be another role', p_role;
            END IF;
            INSERT INTO bastion_agent.searchers (role, role_name) VALUES (v_oid, p_role)
                ON CONFLICT (role) DO UPDATE SET role_name = excluded.role_name;
            EXECUTE format('GRANT USAGE ON SCHEMA bastion_agent TO %I', p_role);
            EXECUTE format('GRANT SELECT ON bastion_agent.windows, bastion_agent.documents, bastion_agent.models, bastion_agent.migrations TO %I', p_role);
            EXECUTE format('GRANT EXECUTE ON FUNCTION bastion_agent.keyword_matches(text, text, text[], integer, integer) TO %I', p_role);
        END
$fn$
-- statement: function remove_searcher
CREATE OR REPLACE FUNCTION bastion_agent.remove_searcher(p_role name) RETURNS void LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        BEGIN
            DELETE FROM bastion_agent.searchers x WHERE x.role_name = p_role
                OR x.role = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role);
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = p_role) THEN
                EXECUTE format('REVOKE ALL ON bastion_agent.windows, bastion_agent.documents, bastion_agent.models, bastion_agent.migrations FROM %I', p_role);
                EXECUTE format('REVOKE ALL ON FUNCTION bastion_agent.keyword_matches(text, text, text[], integer, integer) FROM %I', p_role);
                EXECUTE format('REVOKE ALL ON SCHEMA bastion_agent FROM %I', p_role);
            END IF;
        END
$fn$
-- statement: function keyword_matches
CREATE OR REPLACE FUNCTION bastion_agent.keyword_matches(p_query text, p_model text, p_bastions text[], p_pool integer, p_n integer) RETURNS TABLE (bastion text, chunk_id text, r real) LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        DECLARE
            -- the owner and superusers read every row (as row-level security lets them); others the policy's
            v_readable text[] := CASE WHEN session_user = current_user OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r
                WHERE r.rolname = session_user) THEN NULL ELSE bastion_agent.readable_bastions() END;
        BEGIN
            -- the keyword pass of a search, with the policy's rule written as a plain condition: under
            -- row-level security PostgreSQL may not use the GIN index for @@ (not leakproof), and scans
            -- every row instead (600 ms at 100k windows against 10 ms at 1M without the policy)
            RETURN QUERY
            WITH q AS (SELECT to_tsquery('english'::regconfig, p_query) AS q),
                 m AS MATERIALIZED (SELECT w.bastion, w.chunk_id, w.tsv FROM bastion_agent.windows w, q
                     WHERE w.model = p_model AND w.tsv @@ q.q
                       AND (v_readable IS NULL OR w.bastion = ANY (v_readable))
                       AND (p_bastions IS NULL OR w.bastion = ANY (p_bastions))
                     LIMIT p_pool)
            SELECT m.bastion, m.chunk_id, ts_rank(m.tsv, q.q, 32) FROM m, q
                ORDER BY 3 DESC, 1, 2 LIMIT p_n;
        END
$fn$
-- statement: function ensure_model

        CREATE OR REPLACE FUNCTION bastion_agent.ensure_model(p_model text, p_dim integer) RETURNS text
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
        DECLARE
            known bastion_agent.models;
            v_kind text := CASE WHEN p_dim > 2000 THEN 'halfvec' ELSE 'vector' END;
            v_index text := 'windows_hnsw_' || substr(md5(p_model), 1, 16);
        BEGIN
            IF p_dim IS NULL OR p_dim < 1 OR p_dim > 4000 THEN
                RAISE EXCEPTION 'dimension % is outside 1..4000', p_dim;
            END IF;
            IF p_model IS NULL OR length(p_model) = 0 OR length(p_model) > 500 THEN
                RAISE EXCEPTION 'a model name must be 1..500 characters';
            END IF;
            FOR attempt IN 1..2 LOOP
                SELECT * INTO known FROM bastion_agent.models WHERE model = p_model;
                IF FOUND THEN
                    IF known.dim <> p_dim THEN
                        RAISE EXCEPTION 'model % is published with dim %, not %', p_model, known.dim, p_dim;
                    END IF;
                    RETURN known.index_name;
                END IF;
                EXIT WHEN attempt = 2;
                LOCK TABLE bastion_agent.models IN SHARE ROW EXCLUSIVE MODE;  -- one registration at a time
            END LOOP;
            EXECUTE format('CREATE INDEX %I ON bastion_agent.windows USING hnsw ((embedding::{vec}.%s(%s)) {vec}.%s_cosine_ops)'
                           ' WITH (m = %s, ef_construction = %s) WHERE model = %L',
                           v_index, v_kind, p_dim, v_kind, 16, 200, p_model);
            INSERT INTO bastion_agent.models VALUES (p_model, p_dim, v_kind, v_index, 16, 200);
            RETURN v_index;
        END
        $fn$
-- statement: REVOKE ALL ON FUNCTION bastion_agent.published_documents(text, text, integer) FROM PUBLIC
REVOKE ALL ON FUNCTION bastion_agent.published_documents(text, text, integer) FROM PUBLIC
-- statement: REVOKE ALL ON FUNCTION bastion_agent.lock_bastion(text) FROM PUBLIC
REVOKE ALL ON FUNCTION bastion_agent.lock_bastion(text) FROM PUBLIC
-- statement: REVOKE ALL ON FUNCTION bastion_agent.open_staging() FROM PUBLIC
REVOKE ALL ON FUNCTION bastion_agent.open_staging() FROM PUBLIC
-- statement: REVOKE ALL ON FUNCTION bastion_agent.write_documents(text, text, text[], text[], text[], i
REVOKE ALL ON FUNCTION bastion_agent.write_documents(text, text, text[], text[], text[], integer[]) FROM PUBLIC
-- statement: REVOKE ALL ON FUNCTION bastion_agent.update_paths(text, text, text[], text[]) FROM PUBLIC
REVOKE ALL ON FUNCTION bastion_agent.update_paths(text, text, text[], text[]) FROM PUBLIC
-- statement: REVOKE ALL ON FUNCTION bastion_agent.delete_documents(text, text, text[]) FROM PUBLIC
REVOKE ALL ON FUNCTION bastion_agent.delete_documents(text, text, text[]) FROM PUBLIC
-- statement: REVOKE ALL ON FUNCTION bastion_agent.add_bastion(text, name) FROM PUBLIC
REVOKE ALL ON FUNCTION bastion_agent.add_bastion(text, name) FROM PUBLIC
-- statement: REVOKE ALL ON FUNCTION bastion_agent.remove_bastion(text) FROM PUBLIC
REVOKE ALL ON FUNCTION bastion_agent.remove_bastion(text) FROM PUBLIC
-- statement: REVOKE ALL ON FUNCTION bastion_agent.add_searcher(name) FROM PUBLIC
REVOKE ALL ON FUNCTION bastion_agent.add_searcher(name) FROM PUBLIC
-- statement: REVOKE ALL ON FUNCTION bastion_agent.remove_searcher(name) FROM PUBLIC
REVOKE ALL ON FUNCTION bastion_agent.remove_searcher(name) FROM PUBLIC
-- statement: REVOKE ALL ON FUNCTION bastion_agent.ensure_model(text, integer) FROM PUBLIC
REVOKE ALL ON FUNCTION bastion_agent.ensure_model(text, integer) FROM PUBLIC
-- statement: REVOKE ALL ON FUNCTION bastion_agent.keyword_matches(text, text, text[], integer, integer)
REVOKE ALL ON FUNCTION bastion_agent.keyword_matches(text, text, text[], integer, integer) FROM PUBLIC
-- statement: REVOKE ALL ON FUNCTION bastion_agent.readable_bastions() FROM PUBLIC
REVOKE ALL ON FUNCTION bastion_agent.readable_bastions() FROM PUBLIC
-- statement: GRANT EXECUTE ON FUNCTION bastion_agent.readable_bastions() TO PUBLIC
GRANT EXECUTE ON FUNCTION bastion_agent.readable_bastions() TO PUBLIC
