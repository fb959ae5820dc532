"""Each bastion's own HNSW graph (schema migration 8), against the real PostgreSQL of ``testing/publish_case``.

The catalogs are readable by every role, so a per-bastion index would show
the bastion's name and size to other bastions' roles: by default no
bastion has one, and nothing in ``pg_indexes`` or ``pg_class`` names a
bastion. An administrator opts a bastion in (``admin add-bastion
--own-graph``, ``admin set-bastion``): its graph is then made with each
model, dropped on opt-out and with the bastion; a search of that one
bastion walks it (the planner proves its predicate from the search's
filter), finds what an exact scan of the bastion finds, and stays inside
the read policy. Only the owner's functions create or drop it.
"""

from __future__ import annotations

import hashlib
import io
import unittest
from types import SimpleNamespace

from bastion_agent.publishing import publish_schema, remote_search
from bastion_agent.testing import publish_case
from bastion_agent.testing.publish_case import PublishCase, RoleSetup, query
from bastion_agent.testing.testsupport import clean_env, run_cli

# enough windows per bastion that the graph has layers and neighbours to choose among
FS_DOCS = {f"Ledger {i}: the {word} invoice was paid from account {i * 7} after the audit of the {other} budget.":
           [f"fin/{i}.txt"] for i, (word, other) in enumerate(zip(
               ["north", "south", "east", "west", "cedar", "iron", "salt", "harbour", "quarry", "mill", "ferry", "orchard"],
               ["travel", "roof", "bread", "keys", "payroll", "server", "garden", "fleet", "library", "canteen", "tax",
                "bonus"]))}
HR_DOCS = {f"Leave request {i} for the {word} team goes to the lead two weeks ahead of the {other} review.":
           [f"hr/{i}.txt"] for i, (word, other) in enumerate(zip(
               ["design", "sales", "night", "audit", "payroll", "kitchen", "legal", "field"],
               ["spring", "summer", "annual", "board", "safety", "budget", "merger", "salary"]))}
QUERIES = ["invoice paid after the audit", "leave request for the design team", "budget review of the bonus",
           "harbour ferry account", "salary review two weeks ahead", "keys to the server room"]


setUpModule, tearDownModule = publish_case.setUpModule, publish_case.tearDownModule  # one throw-away server for the module


def manifest_of(model: str = "stub-model", dim: int = 64):
    return SimpleNamespace(embed=SimpleNamespace(vector_key=model, dim=dim, model=model), search_mode=None)


class BastionGraphCase(PublishCase):
    def setUp(self):
        super().setUp()
        import psycopg

        self.psycopg = psycopg
        self.fs = self.bastion("fs-01", docs=FS_DOCS)
        self.hr = self.bastion("hr-02", docs=HR_DOCS)
        for bastion in (self.fs, self.hr):
            code, _, err = bastion.publish(self.dsn)
            self.assertEqual(code, 0, err)
        query(self.dsn, "ANALYZE bastion_agent.windows")

    def opt_in(self, *bastions: str, on: bool = True) -> None:
        """What ``admin set-bastion NAME --own-graph on|off`` runs, as the owner."""
        for bastion in bastions:
            query(self.dsn, "SELECT bastion_agent.set_own_graph(%s, %s)", (bastion, on))

    def graphs(self) -> dict[str, str]:
        """index name -> its definition, of every per-bastion graph on windows."""
        rows = query(self.super_dsn, "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'bastion_agent'"
                                     " AND indexdef LIKE '%%AND (bastion = %%'")
        return dict(rows)

    def index(self, bastions=(), dsn=None, model="stub-model") -> remote_search.RemoteIndex:
        index = remote_search.RemoteIndex(manifest_of(model), dsn or self.dsn, list(bastions))
        self.addCleanup(index.close)
        return index

    def plan(self, index: remote_search.RemoteIndex, vector, exact: bool = False, no_sort: bool = False) -> str:
        from psycopg import sql

        settings, statement = index.vector_query(vector, 5, exact)
        return "\n".join(row[0] for row in index.in_one_message(settings + self.no_sort(no_sort),
                                                                  sql.SQL("EXPLAIN ") + statement))

    @staticmethod
    def no_sort(really: bool = True) -> list:
        """Settings that take the sort of every row away: unfiltered, a store of a few dozen rows is sorted
        faster than the shared graph is walked (rightly), so a test of that plan has to ask for it."""
        from psycopg import sql

        return [sql.SQL("SET LOCAL enable_sort = off"), sql.SQL("SET LOCAL enable_seqscan = off")] if really else []

    def graph_top(self, index: remote_search.RemoteIndex, vector, n: int) -> list[tuple[float, str]]:
        """The product's approximate search, checked to walk the bastion's graph: (cosine, key), best first."""
        self.assertIn(f"Index Scan using {index.own_graph} on windows", self.plan(index, vector))
        return [(round(cos, 6), key) for cos, key in index.vector_top(vector, n)]

    def vector(self, text: str) -> list[float]:
        from bastion_agent.testing.stub_server import bag_of_words

        return bag_of_words(text, 64)


class LifecycleTests(BastionGraphCase):
    def catalog_view(self, dsn: str) -> list[str]:
        """What a role reads of the schema's relations and index definitions: names, sizes, definitions."""
        indexes = query(dsn, "SELECT indexname || ' ' || indexdef FROM pg_indexes WHERE schemaname = 'bastion_agent'")
        relations = query(dsn, "SELECT relname || ' ' || reltuples::text || ' ' || relpages::text FROM pg_class"
                               " WHERE relnamespace = 'bastion_agent'::regnamespace")
        return [row[0] for row in indexes + relations]

    def assert_names_no_bastion(self, seen: list[str], bastions, who: str) -> None:
        for bastion in bastions:
            digest = hashlib.md5(bastion.encode()).hexdigest()[:16]
            self.assertFalse([line for line in seen if bastion in line or digest in line],
                             f"{who} reads bastion {bastion}'s name or graph in the catalogs")

    def test_by_default_no_bastion_has_a_graph_and_no_role_reads_a_bastion_in_the_catalogs(self):
        roles = RoleSetup(self, "ops-03")  # registered by the administrator, as the docs say
        query(self.dsn, "SELECT bastion_agent.ensure_model('other-model', 32)")
        self.assertEqual(self.graphs(), {}, "published, registered, a model added: no graph of a bastion")
        self.assertEqual(query(self.dsn, "SELECT bastion, own_graph FROM bastion_agent.bastions ORDER BY 1"),
                         [("fs-01", False), ("hr-02", False), ("ops-03", False)])
        for who, dsn in (("publisher", roles.publish_dsn), ("searcher", roles.search_dsn)):
            with self.subTest(who=who):
                seen = self.catalog_view(dsn)
                self.assertTrue(any("windows" in line for line in seen), "the role does read the catalogs")
                self.assertFalse([line for line in seen if line.startswith(publish_schema.BASTION_GRAPH_PREFIX)
                                  and "AND (bastion" in line])
                self.assert_names_no_bastion(seen, ("fs-01", "hr-02", "ops-03"), who)
        one = self.index(["hr-02"])
        self.assertIsNone(one.own_graph, "search keeps its exact scan / shared graph choice")
        self.assertNotIn(publish_schema.BASTION_GRAPH_PREFIX, self.plan(one, self.vector(QUERIES[0])).replace(
            one.model.index_name, ""))

    def test_an_opted_in_bastions_graphs_follow_each_model_and_go_on_opt_out_and_removal(self):
        fs_graph = publish_schema.bastion_graph_name("stub-model", "fs-01")
        self.opt_in("fs-01")
        graphs = self.graphs()
        self.assertEqual(set(graphs), {fs_graph}, "only the bastion opted in")
        self.assertIn("WHERE ((model = 'stub-model'::text) AND (bastion = 'fs-01'::text))", graphs[fs_graph])
        self.assertIn("USING hnsw", graphs[fs_graph])
        self.opt_in("fs-01")  # again: nothing changes
        self.assertEqual(set(self.graphs()), {fs_graph})
        # the trade-off, as docs/publish.md states it: every role now reads this bastion's name in the catalogs
        roles = RoleSetup(self, "ops-03")
        self.assertTrue(any("fs-01" in line for line in self.catalog_view(roles.publish_dsn)))
        self.assert_names_no_bastion(self.catalog_view(roles.publish_dsn), ("hr-02", "ops-03"), "publisher")
        # a model added: one graph per opted-in bastion
        query(self.dsn, "SELECT bastion_agent.ensure_model('other-model', 32)")
        self.assertEqual(set(self.graphs()), {fs_graph, publish_schema.bastion_graph_name("other-model", "fs-01")})
        # a registered bastion opted in later: its graph of each model, built in that transaction
        self.opt_in("ops-03")
        self.assertEqual(len(self.graphs()), 4)
        # opted out: its graphs dropped, the others kept
        self.opt_in("fs-01", on=False)
        self.assertEqual(set(self.graphs()), {publish_schema.bastion_graph_name(m, "ops-03")
                                              for m in ("stub-model", "other-model")})
        self.assertIsNone(self.index(["fs-01"]).own_graph)
        # removed as the docs say: its graphs (of both models) go with its rows
        roles.remove_as_the_docs_say()
        self.assertEqual(self.graphs(), {})
        with self.assertRaises(self.psycopg.errors.RaiseException) as refused:
            self.opt_in("ops-03")
        self.assertIn("bastion ops-03 is not registered", str(refused.exception))

    def test_the_migration_adds_the_choice_off_and_builds_no_graph(self):
        query(self.dsn, "DROP TRIGGER bastion_graphs ON bastion_agent.bastions;"
                        " DROP TRIGGER bastion_graphs ON bastion_agent.models;"
                        " DROP FUNCTION bastion_agent.bastion_graphs_on_change(), bastion_agent.build_bastion_graphs(),"
                        " bastion_agent.drop_bastion_graphs(text), bastion_agent.build_bastion_graph(text, text),"
                        " bastion_agent.set_own_graph(text, boolean), bastion_agent.bastion_graph_name(text, text);"
                        " ALTER TABLE bastion_agent.bastions DROP COLUMN own_graph;"
                        " DELETE FROM bastion_agent.migrations WHERE version >= 8")
        with self.psycopg.connect(self.dsn, autocommit=True) as conn:
            self.assertEqual(publish_schema.migrate(conn), publish_schema.LATEST)
        self.assertEqual(self.graphs(), {})
        self.assertEqual(query(self.dsn, "SELECT count(*) FROM bastion_agent.bastions WHERE own_graph"), [(0,)])
        self.assertEqual(query(self.dsn, "SELECT bastion_agent.build_bastion_graphs()"), [(0,)])
        self.opt_in("hr-02")
        self.assertEqual(set(self.graphs()), {publish_schema.bastion_graph_name("stub-model", "hr-02")})

    def test_hostile_model_names_make_quoted_graphs_and_nothing_else(self):
        hostile = "m'); DROP TABLE bastion_agent.windows; --\"x"
        self.opt_in("fs-01")
        query(self.dsn, "SELECT bastion_agent.ensure_model(%s, 16)", (hostile,))
        name = publish_schema.bastion_graph_name(hostile, "fs-01")
        self.assertLessEqual(len(name), 63)
        definition = self.graphs()[name]
        self.assertIn("model = 'm''); DROP TABLE bastion_agent.windows; --\"x'::text", definition)
        self.assertEqual(len(self.server_windows("fs-01")), len(self.fs.local_windows()), "the table is intact")


class GraphSearchTests(BastionGraphCase):
    def setUp(self):
        super().setUp()
        self.opt_in("fs-01", "hr-02")

    def test_a_one_bastion_search_walks_its_own_graph(self):
        one = self.index(["hr-02"])
        self.assertEqual(one.own_graph, publish_schema.bastion_graph_name("stub-model", "hr-02"))
        self.assertFalse(one.scans_exactly(), "one bastion: its graph, however small its share")
        # as the owner: the plan the server makes for the product's settings and statement, unaided
        plan = self.plan(one, self.vector(QUERIES[0]))
        self.assertIn(f"Index Scan using {one.own_graph} on windows", plan)
        self.assertNotIn(one.model.index_name + " ", plan)
        self.assertIn("Seq Scan", self.plan(one, self.vector(QUERIES[0]), exact=True))
        # every bastion: the shared graph; several: as before (the exact scan for a small share)
        everywhere = self.index()
        self.assertIsNone(everywhere.own_graph)
        self.assertIn(everywhere.model.index_name + " ", self.plan(everywhere, self.vector(QUERIES[0]), no_sort=True))
        self.assertIsNone(self.index(["hr-02", "fs-01"]).own_graph)

    def test_one_bastion_finds_what_the_exact_scan_of_its_rows_finds(self):
        for bastion, docs in (("fs-01", self.fs), ("hr-02", self.hr)):
            one = self.index([bastion])
            for text in QUERIES:
                with self.subTest(bastion=bastion, query=text):
                    vector = self.vector(text)
                    approximate = self.graph_top(one, vector, 10)
                    exact = one.vector_top(vector, 10, exact=True)
                    # the same cosines (ties among equal cosines may be cut at the 10th place either way)
                    self.assertEqual([cos for cos, _ in approximate], [round(cos, 6) for cos, _ in exact])
                    self.assertTrue(all(key.startswith(bastion + "\0") for _, key in approximate))
            self.assertEqual(len(self.graph_top(one, self.vector(QUERIES[0]), 500)), len(docs.local_windows()),
                             "every row of the bastion is in its graph, no other")

    def test_a_search_role_reads_one_bastion_through_its_graph_and_only_that_bastion(self):
        roles = RoleSetup(self, "fs-01")
        one = self.index(["hr-02"], dsn=roles.search_dsn)
        self.assertIsNotNone(one.own_graph)
        hits = one.search(QUERIES[1], self.vector(QUERIES[1]), 50, "vector")
        self.assertEqual({hit.bastion for hit in hits}, {"hr-02"})
        self.assertEqual(len(hits), len(self.hr.local_windows()))

    def test_a_bastion_with_no_rows_yet_answers_empty(self):
        RoleSetup(self, "ops-03", searcher=False)
        self.opt_in("ops-03")
        one = self.index(["ops-03"])
        self.assertIsNotNone(one.own_graph)
        self.assertEqual(one.vector_top(self.vector(QUERIES[0]), 10), [])


class GraphPrivilegeTests(BastionGraphCase):
    def test_publishing_and_search_roles_cannot_make_drop_or_rebuild_a_graph(self):
        roles = RoleSetup(self, "fs-01")
        self.opt_in("fs-01", "hr-02")
        graph = publish_schema.bastion_graph_name("stub-model", "fs-01")
        statements = [
            f"DROP INDEX bastion_agent.{graph}",
            f"REINDEX INDEX bastion_agent.{graph}",
            f"ALTER INDEX bastion_agent.{graph} RENAME TO stolen",
            "REINDEX TABLE bastion_agent.windows",
            "CREATE INDEX mine ON bastion_agent.windows USING hnsw ((embedding::vector(64)) vector_cosine_ops)"
            " WHERE model = 'stub-model' AND bastion = 'fs-01'",
            "SELECT bastion_agent.build_bastion_graph('stub-model', 'fs-01')",
            "SELECT bastion_agent.drop_bastion_graphs('hr-02')",
            "SELECT bastion_agent.build_bastion_graphs()",
            "SELECT bastion_agent.set_own_graph('hr-02', false)",
            "SELECT bastion_agent.set_own_graph('fs-01', true)",
            "UPDATE bastion_agent.bastions SET own_graph = false",
        ]
        for who, dsn in (("publisher", roles.publish_dsn), ("searcher", roles.search_dsn)):
            for statement in statements:
                with self.subTest(who=who, statement=statement[:40]):
                    with self.assertRaises((self.psycopg.errors.InsufficientPrivilege,
                                            self.psycopg.errors.UndefinedFunction)) as refused:
                        query(dsn, statement)
                    self.assertNotIsInstance(refused.exception, self.psycopg.errors.UndefinedFunction,
                                             "the function exists; the role may not call it")
        self.assertEqual(query(self.dsn, "SELECT bastion, own_graph FROM bastion_agent.bastions ORDER BY 1"),
                         [("fs-01", True), ("hr-02", True)])
        self.assertEqual(set(self.graphs()), {graph, publish_schema.bastion_graph_name("stub-model", "hr-02")})
        # what the role may do still works: its own publish, through the functions, into its graph
        added = "A new ledger line for the harbour fees of the north quay, paid in kroner."
        self.fs.restock({**FS_DOCS, added: ["fin/new.txt"]})
        self.fs.embed(self.stub)
        code, _, err = self.fs.publish(roles.publish_dsn)
        self.assertEqual(code, 0, err)
        one = self.index(["fs-01"])
        top = one.vector_top(self.vector(added), 1)
        self.assertTrue(top[0][1].startswith("fs-01"))
        self.assertIn(top[0][1].split("\0")[1], {c for _, c in self.fs.local_windows()})


class AdminOptInTests(BastionGraphCase):
    """``admin add-bastion --own-graph`` and ``admin set-bastion``: the administrator's opt-in, idempotent."""

    def admin(self, *args: str, stdin: str = "correct-horse-battery\n") -> tuple[int, str, str]:
        from unittest import mock

        with clean_env(BASTION_ADMIN_DSN=self.super_dsn), mock.patch("sys.stdin", io.StringIO(stdin)):
            return run_cli("admin", *args)

    def test_add_bastion_own_graph_then_set_bastion_off_and_on(self):
        role = self.new_role("publish")
        graph = publish_schema.bastion_graph_name("stub-model", "ops-03")
        for attempt in range(2):  # idempotent
            code, out, err = self.admin("add-bastion", "ops-03", "--role", role, "--own-graph")
            self.assertEqual(code, 0, err)
        self.assertIn("with its own graphs", out)
        self.assertEqual(set(self.graphs()), {graph})
        code, _, err = self.admin("add-bastion", "ops-03", "--role", role)  # a password change keeps the choice
        self.assertEqual(code, 0, err)
        self.assertEqual(set(self.graphs()), {graph})
        for attempt in range(2):
            code, out, err = self.admin("set-bastion", "ops-03", "--own-graph", "off")
            self.assertEqual(code, 0, err)
        self.assertEqual(self.graphs(), {})
        code, _, err = self.admin("set-bastion", "hr-02", "--own-graph", "on")
        self.assertEqual(code, 0, err)
        self.assertEqual(set(self.graphs()), {publish_schema.bastion_graph_name("stub-model", "hr-02")})

    def test_print_shows_the_opt_in_and_connects_nowhere(self):
        from unittest import mock

        with clean_env(), mock.patch("sys.stdin", io.StringIO("correct-horse-battery\n")):
            code, out, err = run_cli("admin", "add-bastion", "ops-03", "--own-graph", "--print")
        self.assertEqual(code, 0, err)
        self.assertLess(out.index("add_bastion('ops-03'"), out.index("SELECT bastion_agent.set_own_graph('ops-03', true)"))
        with clean_env():
            code, out, err = run_cli("admin", "set-bastion", "ops-03", "--own-graph", "off", "--print")
        self.assertEqual(code, 0, err)
        self.assertEqual(out.strip().splitlines()[-1], "SELECT bastion_agent.set_own_graph('ops-03', false);")
        self.assertEqual(self.graphs(), {})

    def test_bad_input_is_one_line_and_changes_nothing(self):
        cases = {
            "unregistered": (("set-bastion", "ops-03", "--own-graph", "on"), "bastion ops-03 is not registered"),
            "hostile name": (("set-bastion", "x'); DROP TABLE bastion_agent.windows; --", "--own-graph", "on"),
                             "the bastion name must be"),
        }
        for label, (args, message) in cases.items():
            with self.subTest(label):
                code, out, err = self.admin(*args)
                self.assertNotEqual(code, 0)
                self.assertEqual(out, "")
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn(message, err)
        query(self.dsn, "DELETE FROM bastion_agent.migrations WHERE version >= 8")  # a server not yet migrated
        code, out, err = self.admin("set-bastion", "fs-01", "--own-graph", "on")
        self.assertNotEqual(code, 0)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("needs version 8 (bastion-agent admin migrate)", err)
        self.assertEqual(self.graphs(), {})
        self.assertEqual(query(self.dsn, "SELECT count(*) FROM bastion_agent.bastions WHERE own_graph"), [(0,)])
        self.assertEqual(len(self.server_windows("fs-01")), len(self.fs.local_windows()))


if __name__ == "__main__":
    unittest.main()
