"""Readers across bastions: published rows carry their groups, and row-level security limits a reader to them.

Against the real PostgreSQL of ``testing/publish_case`` (its cases and helpers):
each test gets its own database, a bastion whose documents are labelled
``hr``, ``eng``, both, or nothing, a gateway (the login role serve uses),
and readers made with ``admin add-searcher NAME --groups … --gateway …``.
"""

from __future__ import annotations

import io
import json
import sqlite3
import unittest
from types import SimpleNamespace

from bastion_agent.core.errors import ConfigError, DatabaseError
from bastion_agent.publishing import remote_search
from bastion_agent.testing import publish_case
from bastion_agent.testing.labelled_docs import CENTRAL_ENG, CENTRAL_HR
from bastion_agent.testing.publish_case import PublishCase, RoleSetup, query
from bastion_agent.testing.testsupport import clean_env, run_cli

HR, ENG = CENTRAL_HR, CENTRAL_ENG
SHARED = "The cafeteria serves soup on Mondays and bread baked in the iron oven for everyone."
UNLABELLED = "Merger plan draft: the acquisition closes in spring and the board alone may read this."
DOCS = {text: [f"hr/{i}.txt"] for i, text in enumerate(HR)} | {text: [f"eng/{i}.txt"] for i, text in enumerate(ENG)} | {
    SHARED: ["all/cafeteria.txt"], UNLABELLED: ["board/merger.txt"]}
LABELS = {text: ["hr"] for text in HR} | {text: ["eng"] for text in ENG} | {SHARED: ["eng", "hr"], UNLABELLED: []}
MODES = ("vector", "keyword", "hybrid")


setUpModule, tearDownModule = publish_case.setUpModule, publish_case.tearDownModule  # one throw-away server for the module


def label(bastion, groups_by_text: dict[str, list[str]]) -> None:
    """Give documents groups in vectors.db (``documents.groups``, a JSON list), as the access labels do."""
    db = sqlite3.connect(bastion.layout.vectors_db)
    try:
        if "groups" not in {row[1] for row in db.execute("PRAGMA table_info(documents)")}:
            db.execute("ALTER TABLE documents ADD COLUMN groups TEXT NOT NULL DEFAULT '[]'")
        for text, groups in groups_by_text.items():
            db.execute("UPDATE documents SET groups = ? WHERE doc = ?", (json.dumps(sorted(groups)), bastion.ids[text]))
        db.commit()
    finally:
        db.close()


def manifest_of(dim: int = 64):
    return SimpleNamespace(embed=SimpleNamespace(vector_key="stub-model", dim=dim, model="stub-model"),
                           search_mode=None)


class ReaderCase(PublishCase):
    def setUp(self):
        super().setUp()
        import psycopg

        self.psycopg = psycopg
        self.fs = self.bastion("fs-01", docs=DOCS)
        label(self.fs, LABELS)
        code, _, err = self.fs.publish(self.dsn)
        self.assertEqual(code, 0, err)
        query(self.dsn, "ANALYZE bastion_agent.windows; ANALYZE bastion_agent.documents")
        self.gateway = self.new_role("gw")
        self.ok(self.admin("add-gateway", self.gateway, stdin="gateway-password\n"))
        self.hr, self.eng = self.new_role("hr"), self.new_role("eng")
        self.ok(self.admin("add-searcher", self.hr, "--groups", "hr", "--gateway", self.gateway))
        self.ok(self.admin("add-searcher", self.eng, "--groups", "eng", "--gateway", self.gateway))
        self.gateway_dsn = publish_case.SERVER.dsn(user=self.gateway, password="gateway-password",
                                                   dbname=self.database)
        self.index = remote_search.RemoteIndex(manifest_of(), self.gateway_dsn)
        self.addCleanup(self.index.close)

    def admin(self, *args: str, stdin: str = "") -> tuple[int, str, str]:
        from unittest import mock

        with clean_env(BASTION_ADMIN_DSN=self.super_dsn), mock.patch("sys.stdin", io.StringIO(stdin)):
            return run_cli("admin", *args)

    def ok(self, result: tuple[int, str, str]) -> str:
        code, out, err = result
        self.assertEqual(code, 0, err)
        return out

    def docs_of(self, texts) -> set[str]:
        return {self.fs.ids[text] for text in texts}

    def search(self, reader, text: str, mode: str, k: int = 10, exact: bool = False, index=None) -> list:
        index = index or self.index
        vector = self.stub_vector(text) if mode != "keyword" else None
        return index.search(text, vector, k, mode, exact=exact, reader=reader)

    def stub_vector(self, text: str) -> list[float]:
        from bastion_agent.config.manifest import load
        from bastion_agent.searching import searcher

        with clean_env(EMBED_URL=self.stub.url):
            return searcher.embed_query(load(self.fs.manifest_path), text)

    def inner_plan(self, reader: str, vector, exact: bool = False, bastions=()) -> str:
        """The plan of the statement a reader's vector search runs inside the owner's function: the owner's
        ``vector_sql`` words it with the reader's scope, explained under the search's own settings."""
        from psycopg import sql

        index = remote_search.RemoteIndex(manifest_of(), self.gateway_dsn, bastions)
        self.addCleanup(index.close)
        with index.lock:
            index.counts(reader)
            with index._as_reader(reader):
                self.assertTrue(index._through_functions, "a reader searches through the functions")
                settings, call = index.vector_query(vector, 5, exact)
                groups = self.ok_query(index, "SELECT bastion_agent.readable_groups(current_user)")
        literal = "[" + ",".join(repr(float(x)) for x in vector) + "]"
        limit = 5 if exact else max(5, index.ef_search)
        owner = remote_search.RemoteIndex(manifest_of(), self.dsn, bastions)
        self.addCleanup(owner.close)
        statement = query(self.dsn, "SELECT bastion_agent.vector_sql('stub-model', %s, '{fs-01}', %s, %s, %s)",
                          (literal, groups, list(bastions) or None, limit))[0][0]
        self.assertIn(f"LIMIT {limit}", statement)
        return "\n".join(row[0] for row in owner.in_one_message(settings, sql.SQL("EXPLAIN " + statement)))

    @staticmethod
    def ok_query(index, statement: str):
        return index.conn.execute(statement).fetchone()[0]

    def visible_windows(self, groups: list[str]) -> set[str]:
        return {row[0] for row in query(self.dsn, "SELECT chunk_id FROM bastion_agent.windows WHERE groups && %s",
                                        (groups,))}


class ReaderSearchTests(ReaderCase):
    def test_two_readers_with_disjoint_groups_get_disjoint_hits_in_every_mode(self):
        one = remote_search.RemoteIndex(manifest_of(), self.gateway_dsn, ["fs-01"])
        self.addCleanup(one.close)
        shared = self.docs_of([SHARED])
        for index_name, index in (("all bastions", self.index), ("one bastion", one)):
            for mode in MODES:
                for exact in (False, True):
                    with self.subTest(index=index_name, mode=mode, exact=exact):
                        hr = self.search(self.hr, "review the board office keys deploy soup", mode, 50, exact, index)
                        eng = self.search(self.eng, "review the board office keys deploy soup", mode, 50, exact, index)
                        self.assertTrue(hr and eng)
                        self.assertLessEqual({h.doc for h in hr}, self.docs_of(HR) | shared)
                        self.assertLessEqual({h.doc for h in eng}, self.docs_of(ENG) | shared)
                        both = {h.chunk_id for h in hr} & {h.chunk_id for h in eng}
                        self.assertLessEqual({h.doc for h in hr if h.chunk_id in both}, shared)
                        self.assertNotIn(self.fs.ids[UNLABELLED], {h.doc for h in hr + eng})
        # the search role of before reads every group, the unlabelled document included
        roles = RoleSetup(self, "fs-02")
        hits = self.remote_search(self.fs, "merger plan acquisition board", "--mode", "hybrid", "-k", "50",
                                  dsn=roles.search_dsn)
        self.assertIn(self.fs.ids[UNLABELLED], {hit["doc"] for hit in hits})

    def test_a_query_aimed_at_the_other_groups_document_returns_k_of_the_readers_own(self):
        eng_windows = self.visible_windows(["eng"])
        self.assertGreaterEqual(len(eng_windows), 5)
        for mode in ("vector", "hybrid"):
            for exact in (False, True):
                with self.subTest(mode=mode, exact=exact):
                    hits = self.search(self.eng, HR[0], mode, 5, exact)
                    self.assertEqual(len(hits), 5)
                    self.assertLessEqual({h.chunk_id for h in hits}, eng_windows)
                    every = self.search(self.eng, HR[0], mode, 500, exact)
                    self.assertEqual({h.chunk_id for h in every}, eng_windows, "every row it may read, no other")
        # keyword: "review" ranks the HR windows first for everyone else; the reader still gets its own, all of them
        matching = {row[0] for row in query(self.dsn, "SELECT chunk_id FROM bastion_agent.windows WHERE groups && %s"
                                            " AND tsv @@ to_tsquery('english', 'review')", (["eng"],))}
        self.assertTrue(matching)
        for k in (1, 50):
            with self.subTest(keyword_k=k):
                hits = self.search(self.eng, "salary review performance review", "keyword", k)
                self.assertEqual(len(hits), min(k, len(matching)))
                self.assertLessEqual({h.chunk_id for h in hits}, matching)

    def test_a_readers_approximate_search_walks_the_graph_and_exact_reads_the_rows(self):
        vector = self.stub_vector(HR[0])
        for exact, expected in ((False, "windows_hnsw_"), (True, "Seq Scan")):
            with self.subTest(exact=exact):
                plan = self.inner_plan(self.eng, vector, exact)
                self.assertIn(expected, plan)
                self.assertIn("groups && '{eng}'", plan, "the reader's groups are part of the scan")

    def test_a_readers_one_bastion_search_walks_that_bastions_graph_inside_the_read_policy(self):
        query(self.dsn, "SELECT bastion_agent.set_own_graph('fs-01', true)")  # the administrator's opt-in
        one = remote_search.RemoteIndex(manifest_of(), self.gateway_dsn, ["fs-01"])
        self.addCleanup(one.close)
        self.assertIsNotNone(one.own_graph)
        vector = self.stub_vector(HR[0])
        plan = self.inner_plan(self.eng, vector, bastions=["fs-01"])
        self.assertIn(f"Index Scan using {one.own_graph} on windows", plan)
        self.assertIn("groups && '{eng}'", plan, "the reader's groups filter the walk, before the LIMIT")
        eng_windows = self.visible_windows(["eng"])
        for k in (5, 500):
            with self.subTest(k=k):
                hits = self.search(self.eng, HR[0], "vector", k, index=one)
                self.assertEqual(len(hits), min(k, len(eng_windows)))
                self.assertLessEqual({h.chunk_id for h in hits}, eng_windows)

    def test_counts_and_scores_are_the_readers_own(self):
        self.assertEqual(self.index.visible_count(reader=self.eng), len(self.visible_windows(["eng"])))
        self.assertEqual(self.index.visible_count(reader=self.hr), len(self.visible_windows(["hr"])))
        self.assertEqual(len(self.index), 0, "the gateway on its own counts nothing")
        with self.assertRaises(ConfigError):
            self.index.search("review", None, 5, "keyword", groups=frozenset({"eng"}))  # groups, but no reader
        for hostile in ('postgres"; RESET ROLE; --', "Reader", ""):
            with self.subTest(reader=hostile), self.assertRaises(ConfigError):
                self.index.search("review", None, 5, "keyword", reader=hostile)
        roles = RoleSetup(self, "fs-02")  # a role the gateway may not become: refused by the server, in one line
        for reader in ("no_such_role_x", roles.searcher):
            with self.subTest(reader=reader[:12]), self.assertRaises(DatabaseError) as refused:
                self.index.search("review", None, 5, "keyword", reader=reader)
            self.assertEqual(len(str(refused.exception).splitlines()), 1)
        self.assertEqual(len(self.search(self.eng, "review", "keyword", 5)), 1, "the connection is still usable")

    def test_a_reader_with_no_groups_and_a_role_in_no_table_read_nothing(self):
        empty = self.new_role("empty")
        self.ok(self.admin("add-searcher", empty, "--groups", "nothing-here", "--gateway", self.gateway))
        query(self.dsn, "UPDATE bastion_agent.readers SET groups = '{}' WHERE role_name = %s", (empty,))
        stray = self.new_role("stray")  # granted the tables by hand, in no table of the schema
        query(self.super_dsn, f"CREATE ROLE {stray} NOLOGIN; GRANT {stray} TO {self.gateway}")
        query(self.dsn, f"GRANT USAGE ON SCHEMA bastion_agent TO {stray};"
                        f" GRANT SELECT ON bastion_agent.windows, bastion_agent.documents TO {stray};"
                        f" GRANT EXECUTE ON FUNCTION bastion_agent.keyword_matches(text, text, text[], integer,"
                        f" integer, name) TO {stray}")
        for role in (empty, stray):
            for mode in MODES:
                with self.subTest(role=role[:5], mode=mode):
                    self.assertEqual(self.search(role, "review keys soup merger", mode, 10), [])
            self.assertEqual(self.index.visible_count(reader=role), 0)

    def test_the_gateway_alone_reads_nothing_and_cannot_write(self):
        Error = self.psycopg.errors.InsufficientPrivilege
        for statement in ("SELECT count(*) FROM bastion_agent.windows", "SELECT count(*) FROM bastion_agent.documents",
                          "SELECT * FROM bastion_agent.readers",
                          "SELECT * FROM bastion_agent.keyword_matches('review', 'stub-model', NULL, 10, 10, current_user)",
                          "DELETE FROM bastion_agent.windows",
                          "SELECT bastion_agent.update_groups('fs-01', 'stub-model', ARRAY['x'], ARRAY['[]'])",
                          f"SELECT bastion_agent.add_reader('{self.gateway}', ARRAY['hr'])",
                          "SELECT bastion_agent.ensure_model('x', 3)"):
            with self.subTest(statement=statement[:50]), self.assertRaises(Error):
                query(self.gateway_dsn, statement)
        # it may read only the schema's version and the models, what a search checks before it becomes a reader
        self.assertEqual(query(self.gateway_dsn, "SELECT count(*) FROM bastion_agent.models"), [(1,)])

    def test_a_reader_cannot_become_another_or_change_its_groups(self):
        Error = self.psycopg.errors.InsufficientPrivilege
        direct = self.new_role("direct")
        self.ok(self.admin("add-searcher", direct, "--groups", "eng", "--login", stdin="direct-password\n"))
        dsn = publish_case.SERVER.dsn(user=direct, password="direct-password", dbname=self.database)
        for statement in (f"SET ROLE {self.hr}", f"SET ROLE {self.gateway}",
                          "UPDATE bastion_agent.readers SET groups = '{hr}'",
                          f"SELECT bastion_agent.add_reader('{direct}', ARRAY['hr'])",
                          f"SELECT bastion_agent.add_searcher('{direct}')"):
            with self.subTest(statement=statement[:40]), self.assertRaises(Error):
                query(dsn, statement)
        hr_docs = self.docs_of(HR)
        # naming another role to the functions the policy calls gives nothing: it may not become that role
        self.assertEqual(query(dsn, "SELECT bastion_agent.readable_groups(%s)", (self.hr,)), [([],)])
        rows = query(dsn, "SELECT chunk_id FROM bastion_agent.keyword_matches('review', 'stub-model', NULL, 100, 100,"
                          " %s)", (self.hr,))
        self.assertEqual(rows, [])
        keys = query(self.dsn, "SELECT array_agg(bastion), array_agg(chunk_id) FROM bastion_agent.windows")[0]
        rows = "SELECT doc FROM bastion_agent.window_rows('stub-model', %s, %s, {})"
        seen = {row[0] for row in query(dsn, rows.format("current_user"), keys)}
        self.assertTrue(seen)
        self.assertFalse(seen & hr_docs)
        self.assertEqual(query(dsn, rows.format("%s"), (*keys, self.hr)), [])
        for statement in ("SELECT doc FROM bastion_agent.windows", "SELECT count(*) FROM bastion_agent.documents"):
            with self.subTest(statement=statement), self.assertRaises(Error):
                query(dsn, statement)  # no table: its functions only
        # the gateway, once a reader, cannot step sideways into the every-group search role
        roles = RoleSetup(self, "fs-02")
        import psycopg

        with psycopg.connect(self.gateway_dsn, autocommit=True) as conn:
            conn.execute(f"SET ROLE {self.eng}")
            with self.assertRaises(Error):
                conn.execute(f"SET ROLE {roles.searcher}")

    def test_explain_estimates_do_not_depend_on_groups_the_reader_lacks(self):
        # hostile: a reader that logs in itself runs EXPLAIN with literals on hidden groups, ids and idx ranges
        direct = self.new_role("direct")
        self.ok(self.admin("add-searcher", direct, "--groups", "eng", "--login", stdin="direct-password\n"))
        dsn = publish_case.SERVER.dsn(user=direct, password="direct-password", dbname=self.database)
        hidden_doc = self.fs.ids[HR[0]]
        for statement in ("SELECT * FROM bastion_agent.windows WHERE groups && '{hr}'",
                          f"SELECT * FROM bastion_agent.windows WHERE doc = '{hidden_doc}'",
                          "SELECT * FROM bastion_agent.windows WHERE idx > 100",
                          "SELECT * FROM bastion_agent.documents WHERE groups && '{hr}'"):
            with self.subTest(statement=statement[30:60]), self.assertRaises(self.psycopg.errors.InsufficientPrivilege):
                query(dsn, "EXPLAIN " + statement)  # no table to plan against
        self.assertEqual(query(dsn, "SELECT count(*) FROM pg_stats WHERE schemaname = 'bastion_agent'"), [(0,)],
                         "no column statistics (most common groups, ids) of the shared tables")
        before = self.reader_estimates(dsn, hidden_doc)
        self.assertEqual(before["rows of a hidden id"], before["rows of a made-up id"])
        # many more hidden rows (another bastion, all hr), analysed: the reader's estimates do not move
        roles = RoleSetup(self, "hr-02", searcher=False)
        other = self.bastion("hr-02", docs={f"{text} Copy {i} of the hidden file.": [f"hr/{i}.txt"]
                                            for i in range(12) for text in HR[:1]})
        label(other, {f"{HR[0]} Copy {i} of the hidden file.": ["hr"] for i in range(12)})
        code, _, err = other.publish(roles.publish_dsn)
        self.assertEqual(code, 0, err)
        query(self.dsn, "ANALYZE bastion_agent.windows; ANALYZE bastion_agent.documents")
        self.assertEqual(self.reader_estimates(dsn, hidden_doc), before)

    def reader_estimates(self, dsn: str, hidden_doc: str) -> dict[str, tuple]:
        """(rows, total cost) of EXPLAIN of each function a reader may call, with literals aimed at hidden rows."""
        vector = "[" + ",".join(["0.5"] * 64) + "]"
        calls = {
            "count hr": "SELECT bastion_agent.window_count('stub-model', '{fs-01}', current_user)",
            "vector": f"SELECT * FROM bastion_agent.vector_matches('stub-model', '{vector}', NULL, 10, current_user)",
            "cosines of a hidden id": f"SELECT * FROM bastion_agent.window_cosines('stub-model', '{vector}',"
                                      f" '{{fs-01}}', '{{{hidden_doc}}}', current_user)",
            "rows of a hidden id": f"SELECT * FROM bastion_agent.window_rows('stub-model', '{{fs-01}}',"
                                   f" '{{{hidden_doc}}}', current_user) WHERE idx > 100",
            "rows of a made-up id": "SELECT * FROM bastion_agent.window_rows('stub-model', '{fs-01}', '{0000}',"
                                    " current_user) WHERE idx > 100",
            "keyword hr": "SELECT * FROM bastion_agent.keyword_matches('salary', 'stub-model', NULL, 10, 10,"
                          " current_user)",
            "floor": "SELECT bastion_agent.window_floor('stub-model', 48, current_user)",
        }
        found = {}
        for name, statement in calls.items():
            plan = query(dsn, "EXPLAIN (FORMAT JSON) " + statement)[0][0][0]["Plan"]
            found[name] = (plan["Plan Rows"], plan["Total Cost"])
        return found

    def test_relevance_is_the_same_with_and_without_hidden_rows(self):
        queries = ("review the code before the deploy", "backup keys rotation", "soup bread")
        def answers() -> list:
            index = remote_search.RemoteIndex(manifest_of(), self.gateway_dsn)  # a fresh index: no floor kept
            self.addCleanup(index.close)
            found = []
            for text in queries:
                for mode in ("vector", "hybrid"):
                    hits = index.search(text, self.stub_vector(text), 10, mode, reader=self.eng)
                    found.append([(h.chunk_id, round(h.score, 9), h.relevance) for h in hits])
            return found, index._floors[self.eng]

        before, floor = answers()
        self.assertTrue(all(before))
        # the floor is the median pairwise cosine of the reader's own documents with the lowest ids
        own = query(self.dsn, "SELECT w.embedding::text FROM bastion_agent.windows w WHERE w.groups && '{eng}'"
                              " ORDER BY w.doc, w.bastion, w.idx")
        import statistics

        vectors = [[float(x) for x in row[0].strip("[]").split(",")] for row in own]

        def cosine(a, b):
            return sum(x * y for x, y in zip(a, b)) / ((sum(x * x for x in a) ** 0.5) * (sum(y * y for y in b) ** 0.5))

        pairs = [cosine(a, b) for i, a in enumerate(vectors) for b in vectors[i + 1:]]
        self.assertAlmostEqual(floor, statistics.median(pairs), places=6)
        # hidden rows everywhere in the table: interleaved with the reader's, then many more of them
        roles = RoleSetup(self, "hr-02", searcher=False)
        hidden = {f"Salary band {i}: the review board approves raises for grade {i} staff in the people office.":
                  [f"hr/band-{i}.txt"] for i in range(30)}
        other = self.bastion("hr-02", docs=hidden)
        label(other, {text: ["hr"] for text in hidden})
        code, _, err = other.publish(roles.publish_dsn)
        self.assertEqual(code, 0, err)
        after, floor_after = answers()
        self.assertEqual(floor_after, floor)
        self.assertEqual(after, before)
        with_hidden_floor = remote_search.RemoteIndex(manifest_of(), self.dsn)  # the owner reads every row
        self.addCleanup(with_hidden_floor.close)
        self.assertNotEqual(with_hidden_floor.cosine_floor(), floor, "the hidden rows do move an every-row floor")


class LabelPublishTests(ReaderCase):
    def test_a_label_change_republishes_the_groups_and_no_vector(self):
        roles = RoleSetup(self, "hr-02", searcher=False)  # a publishing role, through the owner's functions
        other = self.bastion("hr-02", docs={HR[1]: ["leave.txt"], ENG[2]: ["build.txt"]})
        label(other, {HR[1]: ["hr"], ENG[2]: ["eng"]})
        code, _, err = other.publish(roles.publish_dsn)
        self.assertEqual(code, 0, err)
        for publisher, bastion in ((self.dsn, self.fs), (roles.publish_dsn, other)):
            with self.subTest(bastion=bastion.name):
                before = self.row_versions()
                label(bastion, {ENG[2]: ["hr"]})  # the build notes move to hr
                code, _, err = bastion.publish(publisher)
                self.assertEqual(code, 0, err)
                summary = bastion.summary()
                self.assertEqual((summary["documents_groups_updated"], summary["inserted"], summary["deleted"]),
                                 (1, 0, 0))
                doc = bastion.ids[ENG[2]]
                self.assertEqual({tuple(row[0]) for row in query(
                    self.dsn, "SELECT groups FROM bastion_agent.windows WHERE bastion = %s AND doc = %s",
                    (bastion.name, doc))}, {("hr",)})
                changed = {row[1:] for row in self.row_versions() - before}
                self.assertTrue(changed)
                self.assertLessEqual({key[1] for key in changed}, {doc} | {
                    c for d, c in bastion.local_windows() if d == doc}, "only the relabelled document's rows")
                eng_hits = self.search(self.eng, ENG[2], "vector", 100)
                self.assertNotIn((bastion.name, doc), {(h.bastion, h.doc) for h in eng_hits})
                self.assertIn((bastion.name, doc), {(h.bastion, h.doc) for h in self.search(self.hr, ENG[2], "vector", 100)})
                code, _, err = bastion.publish(publisher)  # and again: nothing to do
                self.assertEqual(bastion.summary()["documents_groups_updated"], 0)

    def test_sanitize_labels_reach_the_central_rows_through_embed_and_a_relabel_sends_no_vector(self):
        from bastion_agent.testing.testsupport import label_documents

        folder = self.tmp / "lab-03"
        folder.mkdir()
        lab = publish_case.Bastion(folder, "lab-03", {HR[2]: ["people/notes.txt"], ENG[1]: ["eng/review.txt"]})
        label_documents(lab.layout, {"people/notes.txt": ["hr"], "eng/review.txt": ["eng", "staff"]})
        lab.embed(self.stub)
        code, _, err = lab.publish(self.dsn)
        self.assertEqual(code, 0, err)

        def central() -> dict[str, list[str]]:
            return dict(query(self.dsn, "SELECT doc, groups FROM bastion_agent.documents WHERE bastion = 'lab-03'"))

        self.assertEqual(central(), {lab.ids[HR[2]]: ["hr"], lab.ids[ENG[1]]: ["eng", "staff"]})
        label_documents(lab.layout, {"people/notes.txt": ["hr", "staff"], "eng/review.txt": ["eng"]})
        lab.embed(self.stub)  # embed copies the new labels into vectors.db and embeds nothing
        code, _, err = lab.publish(self.dsn)
        self.assertEqual(code, 0, err)
        summary = lab.summary()
        self.assertEqual((summary["documents_groups_updated"], summary["inserted"]), (2, 0))
        self.assertEqual(central(), {lab.ids[HR[2]]: ["hr", "staff"], lab.ids[ENG[1]]: ["eng"]})
        windows = query(self.dsn, "SELECT DISTINCT doc, groups FROM bastion_agent.windows WHERE bastion = 'lab-03'")
        self.assertEqual(dict(windows), central(), "each window carries its document's groups")

    def test_bad_groups_in_vectors_db_stop_the_publish_in_one_line(self):
        label(self.fs, {HR[0]: ["Bad Group/../etc"]})
        code, out, err = self.fs.publish(self.dsn)
        self.assertNotEqual(code, 0)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("not group names", err)
        self.assertNotIn("etc", err)
        with self.assertRaises(self.psycopg.errors.RaiseException):  # and the server refuses them on its own
            query(self.dsn, "SELECT bastion_agent.add_reader(%s, ARRAY['HR; DROP TABLE x'])", (self.hr,))
        with self.assertRaises(self.psycopg.errors.CheckViolation):
            query(self.dsn, "UPDATE bastion_agent.documents SET groups = '{../hr}'")


class ReaderAdminTests(ReaderCase):
    def test_re_running_add_searcher_with_other_groups_replaces_them(self):
        self.assertEqual(remote_search.reader_groups(self.gateway_dsn, self.hr), frozenset({"hr"}))
        for _ in range(2):
            self.ok(self.admin("add-searcher", self.hr, "--groups", "eng,staff", "--gateway", self.gateway))
        self.assertEqual(remote_search.reader_groups(self.gateway_dsn, self.hr), frozenset({"eng", "staff"}))
        self.assertLessEqual({h.doc for h in self.search(self.hr, "review keys", "hybrid", 50)},
                             self.docs_of(ENG + [SHARED]))

    def test_reader_groups_refuses_what_serve_must_not_map_a_token_to(self):
        roles = RoleSetup(self, "fs-02")
        query(self.super_dsn, f"GRANT {roles.searcher} TO {self.gateway}")  # an administrator's mistake
        stranger = self.new_role("stranger")
        self.ok(self.admin("add-searcher", stranger, "--groups", "hr"))  # no gateway: this one may not become it
        cases = {roles.searcher: "reads every group", stranger: "may not become reader", "no_such_role_x": "has no role",
                 "Robert'); DROP": "a role name must be"}
        for reader, message in cases.items():
            with self.subTest(reader=reader[:10]), self.assertRaises((DatabaseError, ConfigError)) as refused:
                remote_search.reader_groups(self.gateway_dsn, reader)
            self.assertIn(message, str(refused.exception))
        import psycopg

        with psycopg.connect(self.gateway_dsn, autocommit=True) as conn:  # serve's own connection works too
            self.assertEqual(remote_search.reader_groups(conn, self.eng), frozenset({"eng"}))
        remote_search.check_reader("hr-team", {"hr", "staff"}, self.hr, frozenset({"hr"}))
        remote_search.check_reader("all", None, self.hr, frozenset({"hr"}))
        with self.assertRaises(ConfigError) as wider:
            remote_search.check_reader("hr-team", {"hr"}, self.eng, frozenset({"eng", "hr"}))
        self.assertIn("also reads group(s) eng", str(wider.exception))

    def test_search_remote_through_the_gateway_as_a_reader(self):
        from bastion_agent.config.manifest import load

        with clean_env(EMBED_URL=self.stub.url, BASTION_PUBLISH_DSN=self.gateway_dsn):
            hits = remote_search.search(load(self.fs.manifest_path), "review keys soup", 50, "hybrid", reader=self.hr)
        self.assertTrue(hits)
        self.assertLessEqual({h.doc for h in hits}, self.docs_of(HR + [SHARED]))

    def test_the_sql_blocks_of_the_docs_make_the_same_gateway_and_reader(self):
        from bastion_agent.testing.publish_case import run_block

        gateway, reader = self.new_role("gwdocs"), self.new_role("legal")
        run_block(self.super_dsn, "superuser gateway", {"serve_gateway": gateway, "'gateway-password'": "'g4teway-pw'"})
        run_block(self.dsn, "owner gateway", {"serve_gateway": gateway})
        query(self.super_dsn, f"CREATE ROLE {reader} NOLOGIN NOINHERIT")
        run_block(self.dsn, "owner reader", {"reader_legal": reader, "'legal'": "'eng'"})
        run_block(self.super_dsn, "superuser reader", {"reader_legal": reader, "serve_gateway": gateway})
        dsn = publish_case.SERVER.dsn(user=gateway, password="g4teway-pw", dbname=self.database)
        self.assertEqual(remote_search.reader_groups(dsn, reader), frozenset({"eng"}))
        index = remote_search.RemoteIndex(manifest_of(), dsn)
        self.addCleanup(index.close)
        hits = index.search("review keys soup", self.stub_vector("review keys soup"), 50, "hybrid", reader=reader)
        self.assertTrue(hits)
        self.assertLessEqual({h.doc for h in hits}, self.docs_of(ENG + [SHARED]))

    def test_migration_9_takes_the_tables_from_the_readers_of_before_and_keeps_the_search_roles(self):
        from bastion_agent.publishing import publish_schema

        roles = RoleSetup(self, "fs-02")
        # the rights a reader held under schema 8 (migration 7's add_reader), and the schema back at 8
        query(self.dsn, f"GRANT SELECT ON bastion_agent.windows, bastion_agent.documents TO {self.eng};"
                        " DELETE FROM bastion_agent.migrations WHERE version >= 9")

        def may_select(role: str) -> bool:
            return query(self.dsn, "SELECT has_table_privilege(%s, 'bastion_agent.windows', 'SELECT')", (role,))[0][0]

        self.assertTrue(may_select(self.eng))
        with self.psycopg.connect(self.dsn, autocommit=True) as conn:
            self.assertEqual(publish_schema.migrate(conn), publish_schema.LATEST)
        self.assertEqual((may_select(self.eng), may_select(self.hr), may_select(roles.searcher)), (False, False, True))
        calls = "SELECT has_function_privilege(%s, 'bastion_agent.window_rows(text, text[], text[], name)', 'EXECUTE')"
        for role, allowed in ((self.eng, True), (roles.searcher, True), (self.gateway, False), ("public", False)):
            with self.subTest(role=role[:6]):
                self.assertEqual(query(self.dsn, calls, (role,))[0][0], allowed)
        hits = self.search(self.eng, "review keys soup", "hybrid", 50)
        self.assertTrue(hits)
        self.assertLessEqual({h.doc for h in hits}, self.docs_of(ENG + [SHARED]))

    def test_print_and_bad_input(self):
        with clean_env():
            code, out, err = run_cli("admin", "add-searcher", "reader_hr", "--groups", "hr,staff", "--gateway",
                                     "serve_gw", "--print")
        self.assertEqual(code, 0, err)
        self.assertIn("CREATE ROLE reader_hr NOLOGIN", out)
        self.assertIn("add_reader('reader_hr', ARRAY['hr', 'staff']::text[])", out)
        self.assertIn("GRANT reader_hr TO serve_gw", out)
        for args, message in (((self.hr, "--groups", "HR"), "group names are"),
                              ((self.hr, "--groups", "hr,../etc"), "group names are"),
                              ((self.hr, "--groups", ","), "at least one group"),
                              ((self.hr, "--gateway", self.gateway), "give its --groups"),
                              ((self.hr, "--groups", "hr", "--gateway", self.eng), "is not a gateway")):
            with self.subTest(args=args[1:]):
                code, out, err = self.admin("add-searcher", *args)
                self.assertNotEqual(code, 0)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn(message, err)
        self.assertEqual(remote_search.reader_groups(self.gateway_dsn, self.hr), frozenset({"hr"}), "unchanged")


if __name__ == "__main__":
    unittest.main()
