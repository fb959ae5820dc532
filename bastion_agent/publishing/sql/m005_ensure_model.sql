-- Migration 5: ensure_model builds a new model's graph with publish_schema.HNSW_BUILD
-- (m 16, ef_construction 200).
--
-- Read by schema_files.statements(): each statement follows a '-- statement:' line (that line and this
-- header are not sent). A migration that has run is never edited, so these statements stay byte for byte
-- what ran: publishing/test_schema_files.py hashes them. A change of rights or of a function is a new
-- migration.
-- statement: function ensure_model

        CREATE OR REPLACE FUNCTION bastion_agent.ensure_model(p_model text, p_dim integer) RETURNS text
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $fn$
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
            PERFORM pg_advisory_xact_lock(1650553716);
            SELECT * INTO known FROM bastion_agent.models WHERE model = p_model;
            IF FOUND THEN
                IF known.dim <> p_dim THEN
                    RAISE EXCEPTION 'model % is published with dim %, not %', p_model, known.dim, p_dim;
                END IF;
                RETURN known.index_name;
            END IF;
            EXECUTE format('CREATE INDEX %I ON bastion_agent.windows USING hnsw ((embedding::%s(%s)) %s_cosine_ops)'
                           ' WITH (m = %s, ef_construction = %s) WHERE model = %L', v_index, v_kind, p_dim, v_kind, 16, 200, p_model);
            INSERT INTO bastion_agent.models VALUES (p_model, p_dim, v_kind, v_index, 16, 200);
            RETURN v_index;
        END
        $fn$
