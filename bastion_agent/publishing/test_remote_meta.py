"""A per-document field declared once travels publish -> central index -> remote hit (schema 12's ``meta``).

The test declares ``language`` on a subclass of ``Document`` (``published``)
and stands it in for the stages' record; the bastion's sanitized listing
carries a fresh value per document. No function, grant or column is added
for it: publish sends it in ``meta`` through the checked functions, the
central ``CHECK`` holds the object's shape, and ``hit_rows`` gives it back,
to a reader only for the windows it may read. Against the real PostgreSQL
of ``testing/publish_case``, as a non-superuser owner and roles made as
docs/publish.md says.
"""

from __future__ import annotations

import dataclasses
import io
import json
import secrets
import sqlite3
import unittest
from types import SimpleNamespace
from unittest import mock

from bastion_agent.core import catalogue, records
from bastion_agent.core.records import Document
from bastion_agent.publishing import publish_schema, remote_search, schema_meta
from bastion_agent.publishing.remote_search import RemoteHit
from bastion_agent.publishing.schema_readers import FUNCTION_ROWS
from bastion_agent.testing import publish_case
from bastion_agent.testing.labelled_docs import CENTRAL_ENG, CENTRAL_HR
from bastion_agent.testing.publish_case import PublishCase, RoleSetup, query
from bastion_agent.testing.testsupport import clean_env, run_cli

HR, ENG = CENTRAL_HR, CENTRAL_ENG
DOCS = {text: [f"hr/{i}.txt"] for i, text in enumerate(HR)} | {text: [f"eng/{i}.txt"] for i, text in enumerate(ENG)}
MODES = ("vector", "keyword", "hybrid")
QUERY = "review keys board deploy"

setUpModule, tearDownModule = publish_case.setUpModule, publish_case.tearDownModule  # one throw-away server


@dataclasses.dataclass(frozen=True)
class Wider(Document):
    language: str | None = dataclasses.field(default=None, metadata=records._merged(
        "first", column="value", hit="as is", published=True))


@dataclasses.dataclass(frozen=True)
class WiderRemoteHit(RemoteHit):
    language: str | None = None


class MetaCase(PublishCase):
    """One bastion whose documents (HR's and ENG's) each carry a fresh ``language``, published by its own role."""

    def setUp(self):
        super().setUp()
        for target, name, value in ((records, "document_record", lambda: Wider),
                                    (remote_search, "RemoteHit", WiderRemoteHit)):
            patcher = mock.patch.object(target, name, value)
            patcher.start()
            self.addCleanup(patcher.stop)
        self.fs = self.bastion("fs-01", docs=DOCS)
        self.label({text: ["hr"] for text in HR} | {text: ["eng"] for text in ENG})
        self.languages = {self.fs.ids[text]: "lang-" + secrets.token_hex(4) for text in DOCS}
        self.relist(self.languages)
        with psycopg_connect(self.dsn) as conn:
            publish_schema.migrate(conn)
            publish_schema.ensure_model(conn, "stub-model", 64)
        self.who = RoleSetup(self, "fs-01")
        code, _, err = self.fs.publish(self.who.publish_dsn)
        self.assertEqual(code, 0, err)

    def label(self, groups: dict[str, list[str]]) -> None:
        db = sqlite3.connect(self.fs.layout.vectors_db)
        try:
            for text, names in groups.items():
                db.execute("UPDATE documents SET groups = ? WHERE doc = ?", (json.dumps(names), self.fs.ids[text]))
            db.commit()
        finally:
            db.close()

    def relist(self, languages: dict[str, str]) -> None:
        """The sanitized listing with each document's ``language``, as sanitize would write it for ``Wider``."""
        catalogue.write_documents(self.fs.layout.sanitized_listing, [
            Wider(**{item.name: getattr(document, item.name) for item in dataclasses.fields(Document)},
                  language=languages.get(document.doc)) for document in catalogue.read_documents(self.fs.layout.sanitized_listing)])

    def stored_meta(self) -> dict:
        return {doc: meta for doc, meta in query(self.dsn, "SELECT doc, meta FROM bastion_agent.documents")}

    def readers(self):
        """A gateway and two readers (hr, eng) made as docs/publish.md says, through ``admin``."""
        gateway, hr, eng = self.new_role("gw"), self.new_role("hr"), self.new_role("eng")
        for args, stdin in ((("add-gateway", gateway), "gateway-password\n"),
                            (("add-searcher", hr, "--groups", "hr", "--gateway", gateway), ""),
                            (("add-searcher", eng, "--groups", "eng", "--gateway", gateway), "")):
            with clean_env(BASTION_ADMIN_DSN=self.super_dsn), mock.patch("sys.stdin", io.StringIO(stdin)):
                code, _, err = run_cli("admin", *args)
            self.assertEqual(code, 0, err)
        return hr, eng, publish_case.SERVER.dsn(user=gateway, password="gateway-password", dbname=self.database)

    def index(self, dsn: str) -> remote_search.RemoteIndex:
        manifest = SimpleNamespace(embed=SimpleNamespace(vector_key="stub-model", dim=64, model="stub-model"),
                                   search_mode=None)
        index = remote_search.RemoteIndex(manifest, dsn)
        self.addCleanup(index.close)
        return index

    def search(self, index, mode: str, reader=None, k: int = 20) -> list:
        from bastion_agent.config.manifest import load
        from bastion_agent.searching import searcher

        with clean_env(EMBED_URL=self.stub.url):
            vector = searcher.embed_query(load(self.fs.manifest_path), QUERY) if mode != "keyword" else None
        return index.search(QUERY, vector, k, mode, reader=reader)


def psycopg_connect(dsn: str):
    import psycopg

    return psycopg.connect(dsn, autocommit=True)


class HostileMetaTests(MetaCase):
    def test_no_role_writes_meta_of_another_shape_or_for_another_bastion_and_none_reads_it_by_a_table(self):
        import psycopg

        other = RoleSetup(self, "fs-02", searcher=False)
        doc = self.fs.ids[HR[0]]
        update = "SELECT bastion_agent.update_meta('fs-01', 'stub-model', %s, %s)"
        for dsn, meta, error in (
                (self.who.publish_dsn, '["not", "an", "object"]', "documents_meta_fits"),
                (self.who.publish_dsn, json.dumps({"language": {"nested": "x"}}), "documents_meta_fits"),
                (self.who.publish_dsn, json.dumps({"language": "x" * (schema_meta.MAX_META_STRING + 1)}),
                 "documents_meta_fits"),
                (self.who.publish_dsn, json.dumps({"Bad Key'; --": 1}), "documents_meta_fits"),
                (self.who.publish_dsn, json.dumps({f"k{i}": i for i in range(schema_meta.MAX_META_KEYS + 1)}),
                 "documents_meta_fits"),
                (self.who.publish_dsn, "{not json", "invalid input syntax for type json"),
                (other.publish_dsn, json.dumps({"language": "x"}), "not fs-01"),
                (self.who.search_dsn, json.dumps({"language": "x"}), "permission denied")):
            with self.subTest(meta=meta[:40], error=error):
                with self.assertRaisesRegex(psycopg.Error, error):
                    query(dsn, update, ([doc], [meta]))
        self.assertEqual(self.stored_meta()[doc], {"language": self.languages[doc]}, "no refused call changed it")
        with self.assertRaisesRegex(psycopg.Error, "permission denied"):
            query(other.publish_dsn, "SELECT meta FROM bastion_agent.documents")
        for role in (self.who.searcher, "public"):
            for function in schema_meta.PUBLISHER_FUNCTIONS_12[-3:]:
                with self.subTest(role=role[:6], function=function):
                    self.assertFalse(query(self.dsn, "SELECT has_function_privilege(%s, %s, 'EXECUTE')",
                                           (role, f"bastion_agent.{function}"))[0][0])

    def test_a_reader_sees_the_meta_of_the_windows_it_may_read_only_and_explain_is_unchanged(self):
        import psycopg

        hr, eng, gateway_dsn = self.readers()
        index = self.index(gateway_dsn)
        for reader, texts in ((hr, HR), (eng, ENG)):
            allowed = {self.languages[self.fs.ids[text]] for text in texts}
            for mode in MODES:
                with self.subTest(reader=reader[:3], mode=mode):
                    hits = self.search(index, mode, reader)
                    self.assertTrue(hits)
                    self.assertLessEqual({hit.language for hit in hits}, allowed)
        # hr names eng's windows to hit_rows directly: no row, so no meta
        eng_windows = [chunk for doc, chunk in self.server_windows("fs-01")
                       if doc in {self.fs.ids[text] for text in ENG}]
        with psycopg_connect(gateway_dsn) as conn:
            conn.execute(f'SET ROLE "{hr}"')
            rows = conn.execute("SELECT * FROM bastion_agent.hit_rows('stub-model', %s, %s, current_user)",
                                (["fs-01"] * len(eng_windows), eng_windows)).fetchall()
            plan = conn.execute("EXPLAIN SELECT * FROM bastion_agent.hit_rows('stub-model', %s, %s, current_user)",
                                (["fs-01"], eng_windows[:1])).fetchall()
            with self.assertRaisesRegex(psycopg.Error, "permission denied"):
                conn.execute("SELECT meta FROM bastion_agent.documents")
        self.assertEqual(rows, [])
        self.assertIn(f"rows={FUNCTION_ROWS} ", plan[0][0])

    def test_a_value_the_central_index_would_refuse_stops_publish_in_one_line_before_anything_is_sent(self):
        doc = self.fs.ids[ENG[0]]
        planted = "lang-" + secrets.token_hex(200)
        self.relist({**self.languages, doc: planted})
        before = self.row_versions()
        code, out, err = self.fs.publish(self.who.publish_dsn)
        self.assertNotEqual(code, 0)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("language is longer than", err)
        self.assertNotIn(planted, err)
        self.assertEqual(self.row_versions(), before)


class PublishedMetaTests(MetaCase):
    def test_each_document_is_published_with_its_declared_field_and_every_remote_hit_carries_it(self):
        self.assertEqual(self.stored_meta(), {doc: {"language": value} for doc, value in self.languages.items()})
        index = self.index(self.who.search_dsn)
        for mode in MODES:
            with self.subTest(mode=mode):
                hits = self.search(index, mode)
                self.assertTrue(hits)
                if mode != "keyword":  # the nearest 20 of this store are all of its documents
                    self.assertEqual({hit.doc for hit in hits}, set(self.languages), "every document found")
                for hit in hits:
                    self.assertEqual(hit.language, self.languages[hit.doc])
                    self.assertEqual(hit.as_dict()["language"], self.languages[hit.doc])

    def test_an_unchanged_republish_writes_nothing_and_a_changed_value_rewrites_only_that_row(self):
        before = self.row_versions()
        code, _, err = self.fs.publish(self.who.publish_dsn)
        self.assertEqual(code, 0, err)
        self.assertEqual(self.row_versions(), before)
        self.assertEqual(self.fs.summary()["documents_unchanged"], len(DOCS))
        doc = self.fs.ids[HR[1]]
        self.relist({**self.languages, doc: "lang-" + secrets.token_hex(4)})
        code, _, err = self.fs.publish(self.who.publish_dsn)
        self.assertEqual(code, 0, err)
        summary = self.fs.summary()
        self.assertEqual((summary["documents_meta_updated"], summary["documents_written"], summary["inserted"]),
                         (1, 0, 0))
        self.assertEqual({row[2] for row in before - self.row_versions()}, {doc}, "only that document's row")


class UpgradeTests(MetaCase):
    def roll_back_to_11(self) -> None:
        """The schema as migration 11 left it: no meta column, none of migration 12's functions, 11's hit_rows."""
        from bastion_agent.publishing import schema_paths, schema_sql

        with psycopg_connect(self.dsn) as conn, conn.transaction():
            conn.execute(schema_sql.keeping_grants(schema_meta.HIT_ROWS, schema_paths._rows_sql("hit_rows", True)))
            conn.execute("ALTER TABLE bastion_agent.documents DROP COLUMN meta")
            for function in (schema_meta.PUBLISHER_FUNCTIONS_12[len(schema_paths.PUBLISHER_FUNCTIONS_11):]
                             + schema_meta.OWNER_HELPERS_12):
                conn.execute(f"DROP FUNCTION bastion_agent.{function}")
            for statement in schema_paths.bastion_role_functions(schema_paths.PUBLISHER_FUNCTIONS_11):
                conn.execute(statement)
            conn.execute("DELETE FROM bastion_agent.migrations WHERE version >= 12")

    def test_a_schema_11_index_is_upgraded_in_place_its_readers_keep_hit_rows_and_the_next_publish_sends_meta_alone(self):
        hr, _, gateway_dsn = self.readers()
        self.roll_back_to_11()
        before = self.row_versions()
        self.assertEqual({hit.language for hit in self.search(self.index(gateway_dsn), "hybrid", hr)}, {None})
        with psycopg_connect(self.dsn) as conn:
            self.assertEqual(publish_schema.migrate(conn), publish_schema.LATEST)
        self.assertEqual(self.row_versions(), before, "no window or document rewritten by the migration")
        self.assertEqual(set(self.stored_meta().values()), {None})
        for role in (hr, self.who.searcher):
            with self.subTest(role=role[:6]):
                self.assertTrue(query(self.dsn, "SELECT has_function_privilege(%s, %s, 'EXECUTE')",
                                      (role, f"bastion_agent.{schema_meta.HIT_ROWS}"))[0][0])
        self.assertFalse(query(self.dsn, "SELECT has_function_privilege('public', %s, 'EXECUTE')",
                               (f"bastion_agent.{schema_meta.HIT_ROWS}",))[0][0])
        code, _, err = self.fs.publish(self.who.publish_dsn)
        self.assertEqual(code, 0, err)
        summary = self.fs.summary()
        self.assertEqual((summary["documents_meta_updated"], summary["documents_written"], summary["inserted"]),
                         (len(DOCS), 0, 0))
        allowed = {self.languages[self.fs.ids[text]] for text in HR}
        found = {hit.language for hit in self.search(self.index(gateway_dsn), "hybrid", hr)}
        self.assertTrue(found)
        self.assertLessEqual(found, allowed)


if __name__ == "__main__":
    unittest.main()
