-- Migration 8: a graph of each bastion's own rows for the bastions the administrator opts in
-- (publish_schema.py says why): the opt-in column, the owner's functions that build and drop the graphs,
-- and the triggers that call them.
--
-- Read by schema_files.statements(): each statement follows a '-- statement:' line (that line and this
-- header are not sent). A migration that has run is never edited, so these statements stay byte for byte
-- what ran: publishing/test_schema_files.py hashes them. A change of rights or of a function is a new
-- migration.
-- {vec} stands for pgvector's schema, quoted as an identifier.
-- statement: ALTER TABLE bastion_agent.bastions ADD COLUMN own_graph boolean NOT NULL DEFAULT false
ALTER TABLE bastion_agent.bastions ADD COLUMN own_graph boolean NOT NULL DEFAULT false
-- statement: function bastion_graph_name
CREATE FUNCTION bastion_agent.bastion_graph_name(p_model text, p_bastion text) RETURNS text LANGUAGE sql IMMUTABLE
            SET search_path = pg_catalog AS $fn$ SELECT 'windows_hnsw_' || substr(md5(p_model), 1, 16) || '_' || substr(md5(p_bastion), 1, 16) $fn$
-- statement: function build_bastion_graph
CREATE OR REPLACE FUNCTION bastion_agent.build_bastion_graph(p_model text, p_bastion text) RETURNS text LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        DECLARE known bastion_agent.models; v_index text := bastion_agent.bastion_graph_name(p_model, p_bastion);
        BEGIN
            SELECT * INTO known FROM bastion_agent.models m WHERE m.model = p_model;
            IF NOT FOUND OR NOT EXISTS (SELECT 1 FROM bastion_agent.bastions b WHERE b.bastion = p_bastion) THEN
                RAISE EXCEPTION 'no registered model % and bastion % to build a graph for', p_model, p_bastion;
            END IF;
            -- IF NOT EXISTS: a graph an administrator built beforehand (CONCURRENTLY, same name) is kept
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON bastion_agent.windows USING hnsw'
                           ' ((embedding::{vec}.%s(%s)) {vec}.%s_cosine_ops) WITH (m = %s, ef_construction = %s)'
                           ' WHERE model = %L AND bastion = %L',
                           v_index, known.kind, known.dim, known.kind, known.hnsw_m, known.hnsw_ef_construction,
                           p_model, p_bastion);
            RETURN v_index;
        END
$fn$
-- statement: function drop_bastion_graphs
CREATE OR REPLACE FUNCTION bastion_agent.drop_bastion_graphs(p_bastion text) RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        DECLARE v_model text; v_count integer := 0;
        BEGIN
            FOR v_model IN SELECT m.model FROM bastion_agent.models m LOOP
                IF to_regclass(format('bastion_agent.%I', bastion_agent.bastion_graph_name(v_model, p_bastion))) IS NOT NULL THEN
                    EXECUTE format('DROP INDEX bastion_agent.%I', bastion_agent.bastion_graph_name(v_model, p_bastion));
                    v_count := v_count + 1;
                END IF;
            END LOOP;
            RETURN v_count;
        END
$fn$
-- statement: function build_bastion_graphs
CREATE OR REPLACE FUNCTION bastion_agent.build_bastion_graphs() RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        DECLARE v_pair record; v_count integer := 0;
        BEGIN
            -- every (model, opted-in bastion) pair: for the owner after a bulk load
            FOR v_pair IN SELECT m.model, b.bastion FROM bastion_agent.models m CROSS JOIN bastion_agent.bastions b
                    WHERE b.own_graph ORDER BY m.model, b.bastion LOOP
                PERFORM bastion_agent.build_bastion_graph(v_pair.model, v_pair.bastion);
                v_count := v_count + 1;
            END LOOP;
            RETURN v_count;
        END
$fn$
-- statement: function set_own_graph
CREATE OR REPLACE FUNCTION bastion_agent.set_own_graph(p_bastion text, p_on boolean) RETURNS void LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        BEGIN
            UPDATE bastion_agent.bastions b SET own_graph = p_on WHERE b.bastion = p_bastion;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'bastion % is not registered', p_bastion
                    USING HINT = 'bastion-agent admin add-bastion NAME first';
            END IF;
        END
$fn$
-- statement: function bastion_graphs_on_change
CREATE OR REPLACE FUNCTION bastion_agent.bastion_graphs_on_change() RETURNS trigger LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$

        DECLARE v_model text; v_bastion text;
        BEGIN
            -- nested, not one condition: NEW of a models row has no own_graph field to evaluate
            IF TG_TABLE_NAME = 'models' THEN
                FOR v_bastion IN SELECT b.bastion FROM bastion_agent.bastions b WHERE b.own_graph ORDER BY b.bastion LOOP
                    PERFORM bastion_agent.build_bastion_graph(NEW.model, v_bastion);
                END LOOP;
            ELSIF TG_OP = 'DELETE' THEN
                PERFORM bastion_agent.drop_bastion_graphs(OLD.bastion);
            ELSIF NEW.own_graph THEN
                FOR v_model IN SELECT m.model FROM bastion_agent.models m ORDER BY m.model LOOP
                    PERFORM bastion_agent.build_bastion_graph(v_model, NEW.bastion);
                END LOOP;
            ELSIF TG_OP = 'UPDATE' THEN
                PERFORM bastion_agent.drop_bastion_graphs(OLD.bastion);
            END IF;
            RETURN NULL;
        END
$fn$
-- statement: CREATE TRIGGER bastion_graphs AFTER INSERT OR DELETE OR UPDATE OF own_graph ON bastion_age
CREATE TRIGGER bastion_graphs AFTER INSERT OR DELETE OR UPDATE OF own_graph ON bastion_agent.bastions FOR EACH ROW EXECUTE FUNCTION bastion_agent.bastion_graphs_on_change()
-- statement: CREATE TRIGGER bastion_graphs AFTER INSERT ON bastion_agent.models FOR EACH ROW EXECUTE FU
CREATE TRIGGER bastion_graphs AFTER INSERT ON bastion_agent.models FOR EACH ROW EXECUTE FUNCTION bastion_agent.bastion_graphs_on_change()
-- statement: REVOKE ALL ON FUNCTION bastion_agent.build_bastion_graph(text, text), bastion_agent.drop_b
REVOKE ALL ON FUNCTION bastion_agent.build_bastion_graph(text, text), bastion_agent.drop_bastion_graphs(text), bastion_agent.build_bastion_graphs(), bastion_agent.set_own_graph(text, boolean), bastion_agent.bastion_graphs_on_change() FROM PUBLIC
