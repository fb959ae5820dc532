"""Each bastion's own HNSW graph (schema migration 8), against the real PostgreSQL of ``test_publish``.

The graph is made when a bastion is registered or a model is added, dropped
when the bastion is removed; a search of that one bastion walks it (the
planner proves its predicate from the search's filter), finds what an exact
scan of the bastion finds, and stays inside the read policy. Only the
owner's functions create or drop it.
"""

from __future__ import annotations

import unittest
from types import SimpleNamespace

from bastion_agent.publishing import publish_schema, remote_search, test_publish
from bastion_agent.publishing.test_publish import PublishCase, RoleSetup, query
from bastion_agent.testing import pgtest

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


def setUpModule():
    if not test_publish.SKIP_REASON:
        test_publish.SERVER = pgtest.server_for_tests()


def tearDownModule():
    if test_publish.SERVER is not None:
        test_publish.SERVER.stop()
        test_publish.SERVER = None


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
    def test_a_graph_per_model_and_bastion_is_made_with_each_and_dropped_with_the_bastion(self):
        fs_graph = publish_schema.bastion_graph_name("stub-model", "fs-01")
        hr_graph = publish_schema.bastion_graph_name("stub-model", "hr-02")
        graphs = self.graphs()
        self.assertEqual(set(graphs), {fs_graph, hr_graph})
        self.assertIn("WHERE ((model = 'stub-model'::text) AND (bastion = 'fs-01'::text))", graphs[fs_graph])
        self.assertIn("USING hnsw", graphs[fs_graph])
        # a bastion registered by the administrator, before it publishes anything
        roles = RoleSetup(self, "ops-03", searcher=False)
        new_graph = publish_schema.bastion_graph_name("stub-model", "ops-03")
        self.assertIn(new_graph, self.graphs())
        # a model added: one graph per registered bastion
        query(self.dsn, "SELECT bastion_agent.ensure_model('other-model', 32)")
        self.assertEqual(len(self.graphs()), 6)
        self.assertIn(publish_schema.bastion_graph_name("other-model", "hr-02"), self.graphs())
        # removed as the docs say: its graphs (of both models) go with its rows; the others stay
        roles.remove_as_the_docs_say()
        left = self.graphs()
        self.assertNotIn(new_graph, left)
        self.assertNotIn(publish_schema.bastion_graph_name("other-model", "ops-03"), left)
        self.assertEqual(len(left), 4)
        self.assertIn(fs_graph, left)

    def test_the_migration_builds_the_graphs_of_the_bastions_already_published(self):
        for name in self.graphs():
            query(self.dsn, f"DROP INDEX bastion_agent.{name}")
        query(self.dsn, "DROP TRIGGER bastion_graphs ON bastion_agent.bastions;"
                        " DROP TRIGGER bastion_graphs ON bastion_agent.models;"
                        " DROP FUNCTION bastion_agent.bastion_graphs_on_change(), bastion_agent.build_bastion_graphs(),"
                        " bastion_agent.drop_bastion_graphs(text), bastion_agent.build_bastion_graph(text, text),"
                        " bastion_agent.bastion_graph_name(text, text);"
                        " DELETE FROM bastion_agent.migrations WHERE version = 8")
        with self.psycopg.connect(self.dsn, autocommit=True) as conn:
            self.assertEqual(publish_schema.migrate(conn), publish_schema.LATEST)
        self.assertEqual(set(self.graphs()), {publish_schema.bastion_graph_name("stub-model", b)
                                              for b in ("fs-01", "hr-02")})

    def test_hostile_model_names_make_quoted_graphs_and_nothing_else(self):
        hostile = "m'); DROP TABLE bastion_agent.windows; --\"x"
        query(self.dsn, "SELECT bastion_agent.ensure_model(%s, 16)", (hostile,))
        name = publish_schema.bastion_graph_name(hostile, "fs-01")
        self.assertLessEqual(len(name), 63)
        definition = self.graphs()[name]
        self.assertIn("model = 'm''); DROP TABLE bastion_agent.windows; --\"x'::text", definition)
        self.assertEqual(len(self.server_windows("fs-01")), len(self.fs.local_windows()), "the table is intact")


class GraphSearchTests(BastionGraphCase):
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
        one = self.index(["ops-03"])
        self.assertIsNotNone(one.own_graph)
        self.assertEqual(one.vector_top(self.vector(QUERIES[0]), 10), [])


class GraphPrivilegeTests(BastionGraphCase):
    def test_publishing_and_search_roles_cannot_make_drop_or_rebuild_a_graph(self):
        roles = RoleSetup(self, "fs-01")
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
        ]
        for who, dsn in (("publisher", roles.publish_dsn), ("searcher", roles.search_dsn)):
            for statement in statements:
                with self.subTest(who=who, statement=statement[:40]):
                    with self.assertRaises((self.psycopg.errors.InsufficientPrivilege,
                                            self.psycopg.errors.UndefinedFunction)) as refused:
                        query(dsn, statement)
                    self.assertNotIsInstance(refused.exception, self.psycopg.errors.UndefinedFunction,
                                             "the function exists; the role may not call it")
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


if __name__ == "__main__":
    unittest.main()
