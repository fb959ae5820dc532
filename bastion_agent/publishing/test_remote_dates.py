"""Dates in the central index: published per document (the date alone), shown on every remote hit, and filtered
before ranking, inside the reader's functions, so a reader's range never reveals a row it may not read.

Against the real PostgreSQL of ``testing/publish_case``: each test gets its
own database. The documents' per-path times are written into vectors.db's
``documents.modified`` (as embed writes them from extract's mtimes), with
times drawn fresh each run.
"""

from __future__ import annotations

import io
import json
import random
import sqlite3
import unittest
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from bastion_agent.core import dates
from bastion_agent.core.errors import ConfigError
from bastion_agent.publishing import publish_schema, remote_search
from bastion_agent.testing import publish_case
from bastion_agent.testing.labelled_docs import CENTRAL_ENG, CENTRAL_HR
from bastion_agent.testing.publish_case import PublishCase, RoleSetup, query
from bastion_agent.testing.testsupport import clean_env, run_cli

HR, ENG = CENTRAL_HR, CENTRAL_ENG
UNDATED = "The cafeteria serves soup on Mondays and bread baked in the iron oven, reviewed by the staff council."
DOCS = ({text: [f"hr/{i}.txt", f"hr/copy-{i}.txt"] for i, text in enumerate(HR)}
        | {text: [f"eng/{i}.txt"] for i, text in enumerate(ENG)} | {UNDATED: ["all/cafeteria.txt"]})
LABELS = {text: ["hr"] for text in HR} | {text: ["eng"] for text in ENG} | {UNDATED: ["eng", "hr"]}
MODES = ("vector", "keyword", "hybrid")
QUERY = "review keys board deploy soup"

setUpModule, tearDownModule = publish_case.setUpModule, publish_case.tearDownModule  # one throw-away server


def psycopg_connect(dsn: str):
    import psycopg

    return psycopg.connect(dsn, autocommit=True)


def manifest_of(dim: int = 64):
    return SimpleNamespace(embed=SimpleNamespace(vector_key="stub-model", dim=dim, model="stub-model"),
                           search_mode=None)


def write_store_column(bastion, column: str, values: dict[str, list]) -> None:
    """Set a JSON column of vectors.db's ``documents`` (``modified``: a time per path; ``groups``) by text."""
    db = sqlite3.connect(bastion.layout.vectors_db)
    try:
        if column not in {row[1] for row in db.execute("PRAGMA table_info(documents)")}:
            db.execute(f"ALTER TABLE documents ADD COLUMN {column} TEXT NOT NULL DEFAULT '[]'")
        for text, value in values.items():
            db.execute(f"UPDATE documents SET {column} = ? WHERE doc = ?", (json.dumps(value), bastion.ids[text]))
        db.commit()
    finally:
        db.close()


class DatedCase(PublishCase):
    """One bastion: HR documents dated long ago (two files each), ENG documents recently, one undated."""

    def setUp(self):
        super().setUp()
        rng = random.Random()
        self.now = datetime.now(timezone.utc).replace(microsecond=0)
        self.old = [self.now - timedelta(days=rng.randint(400, 800), seconds=rng.randint(0, 86399)) for _ in HR]
        self.new = [self.now - timedelta(days=rng.randint(1, 30), seconds=rng.randint(0, 86399)) for _ in ENG]
        self.cut = dates.stamp(self.now - timedelta(days=200))  # between the two
        self.fs = self.bastion("fs-01", docs=DOCS)
        write_store_column(self.fs, "groups", LABELS)
        # an HR document's second file is a day older: only the latest of the two may leave the bastion
        times = {text: [dates.stamp(when), dates.stamp(when - timedelta(days=1))] for text, when in zip(HR, self.old)}
        times |= {text: [dates.stamp(when)] for text, when in zip(ENG, self.new)} | {UNDATED: [None]}
        write_store_column(self.fs, "modified", times)
        self.expected = {self.fs.ids[text]: stamps[0] for text, stamps in times.items()}
        self.migrate()  # the owner makes the schema and registers the model; the bastion's own role publishes
        with psycopg_connect(self.dsn) as conn:
            publish_schema.ensure_model(conn, "stub-model", 64)
        self.who = RoleSetup(self, "fs-01")
        code, _, err = self.fs.publish(self.who.publish_dsn)
        self.assertEqual(code, 0, err)

    def migrate(self) -> int:
        with psycopg_connect(self.dsn) as conn:
            return publish_schema.migrate(conn)

    def index(self, dsn: str | None = None) -> remote_search.RemoteIndex:
        index = remote_search.RemoteIndex(manifest_of(), dsn or self.who.search_dsn)
        self.addCleanup(index.close)
        return index

    def vector(self, text: str) -> list[float]:
        from bastion_agent.config.manifest import load
        from bastion_agent.searching import searcher

        with clean_env(EMBED_URL=self.stub.url):
            return searcher.embed_query(load(self.fs.manifest_path), text)

    def search(self, index, mode: str, k: int, within=None, reader=None, text: str = QUERY) -> list:
        vector = self.vector(text) if mode != "keyword" else None
        return index.search(text, vector, k, mode, reader=reader, dates=within)

    def docs_of(self, texts) -> set[str]:
        return {self.fs.ids[text] for text in texts}

    def readers(self):
        """A gateway and two readers (hr, eng) made as docs/publish.md says, through ``admin``."""
        from unittest import mock

        gateway, hr, eng = self.new_role("gw"), self.new_role("hr"), self.new_role("eng")
        for args, stdin in ((("add-gateway", gateway), "gateway-password\n"),
                            (("add-searcher", hr, "--groups", "hr", "--gateway", gateway), ""),
                            (("add-searcher", eng, "--groups", "eng", "--gateway", gateway), "")):
            with clean_env(BASTION_ADMIN_DSN=self.super_dsn), mock.patch("sys.stdin", io.StringIO(stdin)):
                code, _, err = run_cli("admin", *args)
            self.assertEqual(code, 0, err)
        gateway_dsn = publish_case.SERVER.dsn(user=gateway, password="gateway-password", dbname=self.database)
        return gateway, hr, eng, gateway_dsn


class HostileDateTests(DatedCase):
    def test_no_role_writes_a_date_that_is_not_a_time_or_for_another_bastion_or_reads_the_owners_sql(self):
        import psycopg

        other = RoleSetup(self, "fs-02", searcher=False)
        doc = self.fs.ids[HR[0]]
        injected = "2026-01-01T00:00:00Z' OR 'a' = 'a"
        for dsn, statement, params, error in (
                (self.who.publish_dsn, "SELECT bastion_agent.update_dates('fs-01', 'stub-model', %s, %s)",
                 ([doc], [injected]), "a date is a UTC time"),
                (self.who.publish_dsn, "SELECT bastion_agent.update_dates('fs-01', 'stub-model', %s, %s)",
                 ([doc], [None, None]), "documents and 2 dates"),
                (other.publish_dsn, "SELECT bastion_agent.update_dates('fs-01', 'stub-model', %s, %s)",
                 ([doc], ["2001-01-01T00:00:00Z"]), "not fs-01"),
                (other.publish_dsn, "SELECT * FROM bastion_agent.published_dates('fs-01', 'stub-model')",
                 (), "not fs-01"),
                (self.who.search_dsn, "SELECT bastion_agent.update_dates('fs-01', 'stub-model', %s, %s)",
                 ([doc], ["2001-01-01T00:00:00Z"]), "permission denied"),
                (self.who.search_dsn, "SELECT bastion_agent.vector_sql('stub-model', '[1]', NULL, NULL, NULL, 5,"
                 " %s, NULL)", ("2001-01-01T00:00:00Z",), "permission denied"),
                (self.who.search_dsn, "SELECT * FROM bastion_agent.keyword_matches('review', 'stub-model', NULL,"
                 " 10, 10, current_user, %s, NULL)", (injected,), "since and before are UTC times")):
            with self.subTest(statement=statement[:60], error=error):
                with self.assertRaisesRegex(psycopg.Error, error):
                    query(dsn, statement, params)
        self.assertEqual(query(self.dsn, "SELECT modified FROM bastion_agent.documents WHERE doc = %s", (doc,)),
                         [(self.expected[doc],)], "no refused call changed the date")
        for role in (self.who.searcher, "public"):
            for function in ("update_dates(text, text, text[], text[])", "published_dates(text, text)"):
                with self.subTest(role=role[:6], function=function):
                    self.assertFalse(query(self.dsn, "SELECT has_function_privilege(%s, %s, 'EXECUTE')",
                                           (role, f"bastion_agent.{function}"))[0][0])

    def test_a_bad_range_is_one_line_and_no_search(self):
        with clean_env(EMBED_URL=self.stub.url, BASTION_PUBLISH_DSN=self.who.search_dsn):
            for args, message in ((("--since", "yesterday"), "since must be"),
                                  (("--since", "1d", "--before", "2d"), "must be earlier than before")):
                with self.subTest(args=args):
                    code, out, err = run_cli("search", self.fs.manifest_path, QUERY, "--remote", "--json", *args)
                    self.assertNotEqual(code, 0)
                    self.assertEqual(out, "")
                    self.assertEqual(len(err.strip().splitlines()), 1, err)
                    self.assertIn(message, err)


class PublishedDateTests(DatedCase):
    def test_each_document_is_published_with_its_latest_time_alone(self):
        rows = dict(query(self.dsn, "SELECT doc, modified FROM bastion_agent.documents"))
        self.assertEqual(rows, self.expected)
        # the older file's time of a two-file document is nowhere on the server
        older = [dates.stamp(when - timedelta(days=1)) for when in self.old]
        found = query(self.dsn, "SELECT count(*) FROM bastion_agent.documents d, unnest(%s::text[]) t"
                                " WHERE to_jsonb(d)::text LIKE '%%' || t || '%%'", (older,))[0][0]
        self.assertEqual(found, 0)

    def test_every_remote_hit_carries_its_documents_date_in_the_cli_json(self):
        hits = self.remote_search(self.fs, QUERY, "-k", "20", dsn=self.who.search_dsn)
        self.assertEqual({hit["doc"] for hit in hits}, set(self.expected), "every document found")
        for hit in hits:
            self.assertEqual(hit["modified"], self.expected[hit["doc"]])

    def test_an_unchanged_republish_writes_nothing_and_a_date_change_rewrites_only_that_row(self):
        before = self.row_versions()
        code, _, err = self.fs.publish(self.who.publish_dsn)
        self.assertEqual(code, 0, err)
        self.assertEqual(self.row_versions(), before)
        self.assertEqual(self.fs.summary()["documents_unchanged"], len(DOCS))
        later = dates.stamp(self.now - timedelta(hours=random.randint(1, 48)))
        write_store_column(self.fs, "modified", {ENG[0]: [later]})
        code, _, err = self.fs.publish(self.who.publish_dsn)
        self.assertEqual(code, 0, err)
        summary = self.fs.summary()
        self.assertEqual((summary["documents_dates_updated"], summary["documents_written"], summary["inserted"]),
                         (1, 0, 0))
        changed = before - self.row_versions()
        self.assertEqual({row[2] for row in changed}, {self.fs.ids[ENG[0]]}, "only that document's row")
        self.assertEqual(query(self.dsn, "SELECT modified FROM bastion_agent.documents WHERE doc = %s",
                               (self.fs.ids[ENG[0]],)), [(later,)])


class DateFilterTests(DatedCase):
    def test_since_and_before_keep_to_the_range_before_ranking_and_return_k_hits(self):
        index = self.index()
        recent, older = dates.DateRange(since=self.cut), dates.DateRange(before=self.cut)
        for mode in MODES:
            for within, texts in ((recent, ENG), (older, HR)):
                with self.subTest(mode=mode, within=within):
                    # a query aimed at a document outside the range still gets k of the range's windows
                    aimed = (HR if texts is ENG else ENG)[1]
                    everything = self.search(index, mode, 500, within, text=aimed)
                    if mode == "vector":
                        self.assertEqual({hit.doc for hit in everything}, self.docs_of(texts), "the range, all of it")
                    self.assertLessEqual({hit.doc for hit in everything}, self.docs_of(texts))
                    hits = self.search(index, mode, 4, within, text=aimed)
                    self.assertEqual(len(hits), min(4, len(everything)))
                    self.assertLessEqual({hit.doc for hit in hits}, self.docs_of(texts))
                    self.assertTrue(all(within.holds(hit.modified) for hit in hits))

    def test_search_remote_since_on_the_command_line(self):
        hits = self.remote_search(self.fs, ENG[1], "-k", "3", "--since", "200d", dsn=self.who.search_dsn)
        self.assertEqual(len(hits), 3)
        self.assertLessEqual({hit["doc"] for hit in hits}, self.docs_of(ENG))
        hits = self.remote_search(self.fs, ENG[1], "-k", "3", "--before", self.cut[:10], "--mode", "keyword",
                                  dsn=self.dsn)  # the owner reads the tables: the same range, its own statement
        self.assertTrue(hits)
        self.assertLessEqual({hit["doc"] for hit in hits}, self.docs_of(HR))

    def test_a_readers_range_never_reveals_rows_it_may_not_read(self):
        _, hr, eng, gateway_dsn = self.readers()
        index = self.index(gateway_dsn)
        recent = dates.DateRange(since=self.cut)  # holds ENG only: none of them is hr's
        for mode in MODES:
            with self.subTest(mode=mode):
                self.assertEqual(self.search(index, mode, 10, recent, reader=hr, text=ENG[0]), [])
                everything = self.search(index, mode, 500, recent, reader=eng, text=HR[0])
                hits = self.search(index, mode, 3, recent, reader=eng, text=HR[0])
                self.assertTrue(everything)
                self.assertEqual(len(hits), min(3, len(everything)), "k of the reader's range when k exist")
                self.assertLessEqual({hit.doc for hit in everything}, self.docs_of(ENG))
        # hr's dated answer, the same whatever the rows it may not read hold: every ENG document moved into hr's range
        older = dates.DateRange(before=self.cut)
        answers = {mode: [(h.doc, h.chunk_id, h.score, h.modified) for h in self.search(index, mode, 5, older, hr)]
                   for mode in MODES}
        write_store_column(self.fs, "modified", {text: [dates.stamp(self.old[0])] for text in ENG})
        code, _, err = self.fs.publish(self.who.publish_dsn)
        self.assertEqual(code, 0, err)
        self.assertEqual(self.fs.summary()["documents_dates_updated"], len(ENG))
        fresh = self.index(gateway_dsn)
        for mode in MODES:
            with self.subTest(mode=mode, after="hidden rows re-dated"):
                again = [(h.doc, h.chunk_id, h.score, h.modified) for h in self.search(fresh, mode, 5, older, hr)]
                self.assertEqual(again, answers[mode])
                self.assertTrue(answers[mode])

    def test_a_readers_dated_search_walks_the_graph_with_the_range_inside_the_scan(self):
        from psycopg import sql

        _, hr, _, gateway_dsn = self.readers()
        index, within = self.index(gateway_dsn), dates.DateRange(before=self.cut)
        vector = self.vector(HR[0])
        with index.lock:
            index.counts(hr)
            index._within = within
            with index._as_reader(hr):
                self.assertTrue(index._through_functions)
                settings, call = index.vector_query(vector, 5)
                groups = index.conn.execute("SELECT bastion_agent.readable_groups(current_user)").fetchone()[0]
        self.assertIn(f"'{self.cut}'::text", call.as_string(None))
        literal = "[" + ",".join(repr(float(x)) for x in vector) + "]"
        statement = query(self.dsn, "SELECT bastion_agent.vector_sql('stub-model', %s, '{fs-01}', %s, NULL, %s, NULL,"
                                    " %s)", (literal, groups, max(5, index.ef_search), self.cut))[0][0]
        owner = self.index(self.dsn)
        plan = "\n".join(row[0] for row in owner.in_one_message(settings, sql.SQL("EXPLAIN " + statement)))
        self.assertIn("windows_hnsw_", plan, "the graph, not a sort of every row")
        # from schema 11 the date compared is the one of the paths the reader may read (schema_paths)
        self.assertIn(f"modified, '{{hr}}'::text[]) < '{self.cut}'", plan, "the range is a condition of the scan")
        self.assertIn("groups && '{hr}'", plan)

    def test_a_narrow_range_is_read_exactly_a_wide_one_walks_the_graph_counted_as_the_caller(self):
        _, hr, _, gateway_dsn = self.readers()
        index = self.index(gateway_dsn)
        hr_windows = query(self.dsn, "SELECT coalesce(sum(windows), 0) FROM bastion_agent.documents"
                                     " WHERE 'hr' = ANY(groups) AND modified < %s", (self.cut,))[0][0]
        for within, count, exact in ((dates.DateRange(before=self.cut), hr_windows, False),
                                     (dates.DateRange(since=self.cut), 0, True)):  # only eng's documents: none of hr's
            with self.subTest(within=within), index.lock:
                index.counts(hr)
                index._within = within
                try:
                    with index._as_reader(hr):
                        self.assertEqual((index._dated_count(), index.scans_exactly()), (count, exact))
                finally:
                    index._within = None


class UpgradeTests(DatedCase):
    def roll_back_to_9(self) -> None:
        """The schema as migration 9 left it: no date column, no function of migration 10, 9's role functions."""
        from bastion_agent.publishing import schema_access, schema_dates, schema_readers

        with psycopg_connect(self.dsn) as conn, conn.transaction():
            for function in (schema_dates.PUBLISHER_FUNCTIONS_10[len(schema_access.PUBLISHER_FUNCTIONS_7):]
                             + schema_dates.READER_FUNCTIONS_10 + (schema_dates.VECTOR_SQL_10,)):
                conn.execute(f"DROP FUNCTION bastion_agent.{function}")
            conn.execute("ALTER TABLE bastion_agent.documents DROP COLUMN modified")
            for statement in (schema_readers.reader_roles_sql_9()
                              + schema_access.bastion_role_functions(schema_access.PUBLISHER_FUNCTIONS_7)):
                conn.execute(statement)
            conn.execute("DELETE FROM bastion_agent.migrations WHERE version >= 10")

    def test_an_older_schema_is_upgraded_in_place_and_the_next_publish_sends_only_dates(self):
        _, hr, _, gateway_dsn = self.readers()
        self.roll_back_to_9()
        windows_before = {row for row in self.row_versions() if row[2] in {c for _, c in self.fs.local_windows()}}
        with self.assertRaisesRegex(ConfigError, "holds no dates yet"):
            self.search(self.index(gateway_dsn), "keyword", 3, dates.DateRange(since=self.cut), reader=hr)
        self.assertEqual([h.modified for h in self.search(self.index(gateway_dsn), "hybrid", 3, reader=hr)],
                         [None] * 3, "a schema-9 hit has no date")
        self.assertEqual(self.migrate(), publish_schema.LATEST)
        self.assertLessEqual(windows_before, self.row_versions(), "no window rewritten by the migration")
        self.assertEqual(query(self.dsn, "SELECT count(*) FROM bastion_agent.documents WHERE modified IS NULL")[0][0],
                         len(DOCS))
        calls = "SELECT has_function_privilege(%s, %s, 'EXECUTE')"
        for role, function, allowed in ((hr, "hit_rows(text, text[], text[], name)", True),
                                        (self.who.searcher, "hit_rows(text, text[], text[], name)", True),
                                        (self.who.publisher, "update_dates(text, text, text[], text[])", True),
                                        (hr, "update_dates(text, text, text[], text[])", False),
                                        ("public", "hit_rows(text, text[], text[], name)", False)):
            with self.subTest(role=role[:6], function=function):
                self.assertEqual(query(self.dsn, calls, (role, f"bastion_agent.{function}"))[0][0], allowed)
        code, _, err = self.fs.publish(self.who.publish_dsn)
        self.assertEqual(code, 0, err)
        summary = self.fs.summary()
        self.assertEqual((summary["documents_dates_updated"], summary["documents_written"]), (len(DOCS) - 1, 0))
        self.assertLessEqual(windows_before, self.row_versions(), "no window sent again for a date")
        hits = self.search(self.index(gateway_dsn), "hybrid", 3, dates.DateRange(before=self.cut), reader=hr)
        self.assertEqual(len(hits), 3)
        self.assertTrue(all(hit.modified == self.expected[hit.doc] for hit in hits))


if __name__ == "__main__":
    unittest.main()
