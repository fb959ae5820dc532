"""Only visible paths, centrally: a reader of the central index is shown the paths (and the date) it may read.

The attacker reads ``public``; the same form sits at
``public/forms-exit-interview.txt`` and at an HR path whose name is news
(fresh each run), so the two files are one document, labelled both
``public`` and ``hr``. The HR file is the recent one: its date is news too.
A real folder is swept with ``[access]`` rules and published; readers made
with ``admin add-searcher --groups`` then ask through every front end that
goes remote: the index itself, ``search --remote --json`` (a reader that
logs in) and ``serve --remote`` over HTTP (GET, and the page's POST) with a
named token. Against the real PostgreSQL of ``testing/publish_case``.
"""

from __future__ import annotations

import json
import os
import random
import string
import time
import urllib.parse

import io

from bastion_agent.core import dates
from bastion_agent.core.layout import Layout
from bastion_agent.publishing import remote_search
from bastion_agent.testing import publish_case
from bastion_agent.testing.labelled_docs import HR_PUBLIC_ACCESS
from bastion_agent.testing.publish_case import PublishCase, RoleSetup, query
from bastion_agent.testing.serve_store import request
from bastion_agent.testing.testsupport import clean_env, run_cli, write_manifest

PUBLIC = "public/forms-exit-interview.txt"
FORM = ("Exit interview form: reason for leaving, notice period served, equipment returned, "
        "final pay confirmed by the manager.\n")
OTHERS = {"public/canteen.txt": "The canteen opens at eight and serves soup with fresh bread on Fridays.\n",
          "hr/salary.txt": "Salary review for the design team: each raise is approved by the board after review.\n"}
QUERY = "exit interview form notice period equipment returned"
MODES = ("vector", "keyword", "hybrid")

setUpModule, tearDownModule = publish_case.setUpModule, publish_case.tearDownModule  # one throw-away server


def hidden_name() -> str:
    return "hr/dismissals/" + "".join(random.choice(string.ascii_lowercase) for _ in range(12)) + "-layoffs.txt"


def stamp(moment: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(moment)))


class RemotePathsCase(PublishCase):
    """One bastion swept from real files (the shared form at a public and an HR path), readers of each group."""

    def setUp(self):
        super().setUp()
        self.hidden = hidden_name()
        now = time.time()
        self.old, self.recent = now - random.randint(400, 800) * 86400, now - random.randint(1, 30) * 86400
        folder = self.tmp / "fs-01"
        files = {PUBLIC: FORM, self.hidden: FORM} | OTHERS
        for relative, text in files.items():
            path = folder / "docs" / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            moment = self.recent if relative == self.hidden else self.old
            os.utime(path, (moment, moment))
        self.manifest_path = write_manifest(folder, size=8, overlap=2,
                                            extra=f'\n[publish]\nbastion = "fs-01"\n{HR_PUBLIC_ACCESS}')
        self.layout = Layout(folder / "out")
        self.sweep_and_publish(self.dsn)
        query(self.dsn, "ANALYZE bastion_agent.windows; ANALYZE bastion_agent.documents")
        self.gateway, self.public, self.hr = self.new_role("gw"), self.new_role("pub"), self.new_role("hr")
        self.admin("add-gateway", self.gateway, stdin="gateway-password\n")
        self.admin("add-searcher", self.public, "--groups", "public", "--gateway", self.gateway)
        self.admin("add-searcher", self.hr, "--groups", "hr,public", "--gateway", self.gateway)  # HR reads both
        self.gateway_dsn = publish_case.SERVER.dsn(user=self.gateway, password="gateway-password",
                                                   dbname=self.database)
        self.tokens_path = self.tmp / "tokens.json"
        self.public_token = self.token("add", "public-wiki", "--groups", "public", "--reader", self.public)
        self.hr_token = self.token("add", "hr-portal", "--groups", "hr,public", "--reader", self.hr)
        self.shared = query(self.dsn, "SELECT doc FROM bastion_agent.documents WHERE jsonb_array_length(paths) = 2")[0][0]
        self.index = remote_search.RemoteIndex(self.manifest_of(), self.gateway_dsn)
        self.addCleanup(self.index.close)

    def admin(self, *args: str, stdin: str = "") -> None:
        from unittest import mock

        with clean_env(BASTION_ADMIN_DSN=self.super_dsn), mock.patch("sys.stdin", io.StringIO(stdin)):
            code, _, err = run_cli("admin", *args)
        self.assertEqual(code, 0, err)

    def token(self, *args: str) -> str:
        with clean_env(BASTION_SERVE_TOKENS=str(self.tokens_path)):
            code, out, err = run_cli("token", *args)
        self.assertEqual(code, 0, err)
        return out.strip()

    def start(self):
        """serve --remote, with the gateway as BASTION_PUBLISH_DSN, on a free loopback port for the rest of the test."""
        from bastion_agent.config.manifest import load
        from bastion_agent.embedding.client import EndpointConfig
        from bastion_agent.serving import serve, serve_settings

        with clean_env(BASTION_PUBLISH_DSN=self.gateway_dsn):
            manifest = load(self.manifest_path)
            index = remote_search.open_index(manifest)
        self.addCleanup(index.close)
        settings = serve_settings.ServeSettings(port=0, reload_check_seconds=3600.0, tokens_file=self.tokens_path)
        server = serve.build_server(manifest, self.layout, settings, io.StringIO(),
                                    endpoint=EndpointConfig(url=self.stub.url), remote=index)
        running = serve.RunningServer(server).__enter__()
        self.addCleanup(running.__exit__, None, None, None)
        return running

    def get(self, running, path: str, token: str):
        return request(running.url, path=path, headers={"Authorization": f"Bearer {token}"})

    def sweep_and_publish(self, dsn: str, stages=("sweep", "publish")) -> None:
        with clean_env(EMBED_URL=self.stub.url, BASTION_PUBLISH_DSN=dsn):
            for stage in stages:
                code, _, err = run_cli(stage, str(self.manifest_path), "--out", str(self.layout.root))
                self.assertEqual(code, 0, err)

    def publish(self, dsn: str) -> dict:
        self.sweep_and_publish(dsn, ("publish",))
        return json.loads(self.layout.summary_path("publish").read_text())

    @staticmethod
    def manifest_of():
        from types import SimpleNamespace

        return SimpleNamespace(embed=SimpleNamespace(vector_key="stub-model", dim=64, model="stub-model"),
                               search_mode=None)

    def vector(self, text: str) -> list[float]:
        from bastion_agent.config.manifest import load
        from bastion_agent.searching import searcher

        with clean_env(EMBED_URL=self.stub.url):
            return searcher.embed_query(load(self.manifest_path), text)

    def hits(self, reader: str, mode: str, k: int = 10, within=None) -> list:
        vector = self.vector(QUERY) if mode != "keyword" else None
        return self.index.search(QUERY, vector, k, mode, reader=reader, dates=within)

    def assert_nothing_of_hr(self, text: str) -> None:
        self.assertNotIn("dismissals", text)
        self.assertNotIn(self.hidden.split("/")[-1].split("-")[0], text)
        self.assertNotIn(stamp(self.recent), text)


class RemotePathsTests(RemotePathsCase):
    def test_a_public_reader_never_sees_the_hr_path_or_its_date_in_any_mode(self):
        for mode in MODES:
            with self.subTest(mode=mode):
                public = self.hits(self.public, mode)
                shared = [hit for hit in public if hit.doc == self.shared]
                self.assertTrue(shared, "the shared form is the public reader's hit")
                for hit in shared:
                    self.assertEqual((hit.paths, hit.modified), ([PUBLIC], stamp(self.old)))
                self.assert_nothing_of_hr(repr(public))
                hr = [hit for hit in self.hits(self.hr, mode) if hit.doc == self.shared]
                self.assertTrue(hr)
                for hit in hr:
                    self.assertEqual(sorted(hit.paths), sorted([PUBLIC, self.hidden]))
                    self.assertEqual(hit.modified, stamp(self.recent), "the HR reader is dated by both files")
                only_hr = self.new_role("onlyhr")
                self.admin("add-searcher", only_hr, "--groups", "hr", "--gateway", self.gateway)
                for hit in [hit for hit in self.hits(only_hr, mode) if hit.doc == self.shared]:
                    self.assertEqual((hit.paths, hit.modified), ([self.hidden], stamp(self.recent)))

    def test_search_remote_json_as_a_reader_that_logs_in(self):
        login = self.new_role("publogin")
        self.admin("add-searcher", login, "--groups", "public", "--login", stdin="login-password\n")
        dsn = publish_case.SERVER.dsn(user=login, password="login-password", dbname=self.database)
        for mode in MODES:
            with self.subTest(mode=mode), clean_env(EMBED_URL=self.stub.url, BASTION_PUBLISH_DSN=dsn):
                code, out, err = run_cli("search", str(self.manifest_path), QUERY, "--remote", "--json",
                                         "--mode", mode)
                self.assertEqual(code, 0, err)
                hits = json.loads(out)
                self.assertIn([PUBLIC], [hit["paths"] for hit in hits if hit["doc"] == self.shared])
                self.assert_nothing_of_hr(out + err)

    def test_serve_remote_over_http_get_and_the_pages_post(self):
        running = self.start()
        for mode in MODES:
            with self.subTest(mode=mode):
                status, _, body = self.get(running, "/search?" + urllib.parse.urlencode(
                    {"q": QUERY, "mode": mode, "k": 10}), self.public_token)
                self.assertEqual(status, 200, body)
                self.assertIn([PUBLIC], [hit["paths"] for hit in body["hits"] if hit["doc"] == self.shared])
                self.assert_nothing_of_hr(json.dumps(body))
                status, _, body = request(running.url, "POST", "/search", {"query": QUERY, "mode": mode, "k": 10},
                                          {"Authorization": f"Bearer {self.public_token}",
                                           "Content-Type": "application/json"})
                self.assertEqual(status, 200, body)
                self.assert_nothing_of_hr(json.dumps(body))
                status, _, body = self.get(running, "/search?" + urllib.parse.urlencode(
                    {"q": QUERY, "mode": mode, "k": 10}), self.hr_token)
                self.assertIn(sorted([PUBLIC, self.hidden]),
                              [sorted(hit["paths"]) for hit in body["hits"] if hit["doc"] == self.shared])

    def test_a_range_of_dates_compares_the_date_of_the_paths_the_reader_may_read(self):
        cut = stamp((self.old + self.recent) / 2)
        for mode in MODES:
            with self.subTest(mode=mode):
                since = dates.DateRange(since=cut)
                self.assertNotIn(self.shared, {hit.doc for hit in self.hits(self.public, mode, 10, since)},
                                 "only the hidden file is recent: the public reader's form is old")
                self.assertIn(self.shared, {hit.doc for hit in self.hits(self.hr, mode, 10, since)})
                before = dates.DateRange(before=cut)
                self.assertIn(self.shared, {hit.doc for hit in self.hits(self.public, mode, 10, before)})

    def test_estimates_and_relevance_are_the_same_whatever_the_paths_show(self):
        def explain() -> str:
            with self.index.lock, self.index._as_reader(self.public):
                return "\n".join(row[0] for row in self.index.conn.execute(
                    "EXPLAIN SELECT * FROM bastion_agent.hit_rows('stub-model', NULL, '{}', current_user)"))

        def ranked() -> list:
            return [(hit.chunk_id, hit.relevance, hit.score) for hit in self.hits(self.public, "hybrid", 20)]

        before_plan, before_hits = explain(), ranked()
        self.assertIn("rows=100 ", before_plan, "a function scan with its declared rows, nothing of the tables")
        query(self.dsn, "UPDATE bastion_agent.documents SET path_access = NULL")  # as an index published before
        self.assertEqual(explain(), before_plan)
        self.assertEqual(ranked(), before_hits, "which paths are shown moves no hit, score or relevance")
        with self.index.lock, self.index._as_reader(self.public):
            held = self.index.conn.execute("SELECT has_table_privilege(current_user, 'bastion_agent.documents',"
                                           " 'SELECT')").fetchone()[0]
        self.assertFalse(held, "a reader still holds no table")


class PathsPublishedBeforeTests(RemotePathsCase):
    def test_a_document_published_before_shows_a_limited_reader_one_path_or_none(self):
        query(self.dsn, "UPDATE bastion_agent.documents SET path_access = NULL")  # what migration 11 finds
        only_hr = self.new_role("onlyhr")
        self.admin("add-searcher", only_hr, "--groups", "hr", "--gateway", self.gateway)
        for mode in MODES:
            with self.subTest(mode=mode):
                public = self.hits(self.public, mode)
                shared = [hit for hit in public if hit.doc == self.shared]
                self.assertTrue(shared, "the hit stays: its text is one the reader may read")
                self.assertEqual({(tuple(hit.paths), hit.modified) for hit in shared}, {((), None)},
                                 "two paths, which is whose unknown: none shown, no date")
                single = [hit for hit in public if hit.doc != self.shared]
                self.assertTrue(all(len(hit.paths) == 1 and hit.modified for hit in single))
                self.assertTrue(single or mode == "keyword", "the canteen's one path is still shown")
                self.assert_nothing_of_hr(repr(public))
                every = [hit for hit in self.hits(self.hr, mode) if hit.doc == self.shared]
                self.assertEqual({len(hit.paths) for hit in every}, {2}, "a reader of every group it has sees both")
                hr = [hit for hit in self.hits(only_hr, mode) if hit.doc == self.shared]
                self.assertEqual({(tuple(hit.paths), hit.modified) for hit in hr}, {((), None)})
        summary = self.publish(self.dsn)  # the next publish sends the maps again
        self.assertEqual(summary["documents_paths_groups_updated"], 3)
        self.assertEqual(summary["documents_written"], 0)
        self.assertEqual([hit.paths for hit in self.hits(self.public, "hybrid") if hit.doc == self.shared][0], [PUBLIC])

    def test_a_map_that_does_not_fit_its_document_is_refused(self):
        import psycopg

        bad = {PUBLIC: {"groups": ["public"], "modified": None}, self.hidden: {"groups": ["public"], "modified": None}}
        for value, why in ((bad, "the hr group is missing"), ({PUBLIC: {"groups": ["public"]}}, "a path missing"),
                           ({PUBLIC: {"groups": ["Pub lic"]}, self.hidden: {"groups": ["hr"]}}, "not a group name")):
            with self.subTest(why=why), self.assertRaises(psycopg.errors.CheckViolation):
                query(self.dsn, "UPDATE bastion_agent.documents SET path_access = %s::jsonb WHERE doc = %s",
                      (json.dumps(value), self.shared))

    def test_a_publishing_role_sends_the_maps_through_its_functions_and_an_old_writer_clears_them(self):
        roles = RoleSetup(self, "fs-01", searcher=False)
        query(self.dsn, "UPDATE bastion_agent.documents SET path_access = NULL")
        summary = self.publish(roles.publish_dsn)
        self.assertEqual((summary["documents_written"], summary["documents_paths_groups_updated"]), (0, 3))
        held = dict(query(self.dsn, "SELECT doc, path_access FROM bastion_agent.documents WHERE doc = %s",
                          (self.shared,)))[self.shared]
        self.assertEqual(held, {PUBLIC: {"groups": ["public"], "modified": stamp(self.old)},
                                self.hidden: {"groups": ["hr"], "modified": stamp(self.recent)}})
        self.assertEqual(self.publish(roles.publish_dsn)["documents_unchanged"], 3)
        # an agent of before changes a date through the function it knows: the map it did not send is forgotten
        with publish_case_connection(roles.publish_dsn) as conn:
            conn.execute("SELECT bastion_agent.update_dates('fs-01', 'stub-model', %s, %s)",
                         ([self.shared], [stamp(time.time())]))
        self.assertEqual(query(self.dsn, "SELECT path_access FROM bastion_agent.documents WHERE doc = %s",
                               (self.shared,)), [(None,)])
        self.assertEqual([hit.paths for hit in self.hits(self.public, "hybrid") if hit.doc == self.shared][0], [])
        with publish_case_connection(roles.publish_dsn) as conn, self.assertRaises(Exception):
            conn.execute("SELECT * FROM bastion_agent.documents LIMIT 1")  # and still no table


def publish_case_connection(dsn: str):
    import psycopg

    return psycopg.connect(dsn, autocommit=True)


class UpgradeTests(RemotePathsCase):
    def roll_back_to_10(self) -> None:
        """The schema as migration 10 left it: 10's reader bodies, no map column, no function of migration 11."""
        from psycopg import sql

        from bastion_agent.publishing import schema_dates, schema_paths, schema_readers, schema_sql

        with publish_case_connection(self.dsn) as conn, conn.transaction():
            vec = sql.Identifier(schema_sql.vector_schema(conn)).as_string(conn)
            for statement in (schema_readers.reader_functions_sql(vec) + [
                    schema_dates._vector_sql(vec), schema_dates._vector_matches_sql(), schema_dates._keyword_sql(),
                    schema_dates._hit_rows_sql(), schema_dates._count_sql()]
                    + schema_dates.bastion_role_functions(schema_dates.PUBLISHER_FUNCTIONS_10)):
                conn.execute(statement)
            conn.execute("DROP TRIGGER forget_path_access ON bastion_agent.documents")
            conn.execute("ALTER TABLE bastion_agent.documents DROP COLUMN path_access")
            for function in (schema_paths.PUBLISHER_FUNCTIONS_11[len(schema_dates.PUBLISHER_FUNCTIONS_10):]
                             + schema_paths.OWNER_HELPERS_11):
                conn.execute(f"DROP FUNCTION bastion_agent.{function}")
            conn.execute("DELETE FROM bastion_agent.migrations WHERE version >= 11")

    def shared_paths(self, reader: str) -> list:
        return [sorted(hit.paths) for hit in self.hits(reader, "hybrid") if hit.doc == self.shared]

    def test_a_schema_10_index_is_upgraded_in_place_and_the_next_publish_sends_only_the_maps(self):
        from bastion_agent.publishing import publish_schema

        self.roll_back_to_10()
        self.assertIn(sorted([PUBLIC, self.hidden]), self.shared_paths(self.public), "the gap schema 10 left")
        windows_before = self.row_versions()
        with publish_case_connection(self.dsn) as conn:
            self.assertEqual(publish_schema.migrate(conn), publish_schema.LATEST)
        self.assertEqual(self.row_versions(), windows_before, "no window or document rewritten by the migration")
        shown = self.shared_paths(self.public)
        self.assertTrue(shown, "the hit itself stays")
        self.assertTrue(all(paths == [] for paths in shown), "a map not yet sent: no path, not every path")
        summary = self.publish(self.dsn)
        self.assertEqual((summary["documents_written"], summary["documents_paths_groups_updated"]), (0, 3))
        self.assertTrue(all(paths == [PUBLIC] for paths in self.shared_paths(self.public)))
        self.assertTrue(all(paths == sorted([PUBLIC, self.hidden]) for paths in self.shared_paths(self.hr)))
