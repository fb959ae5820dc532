"""A per-document field declared once on the record travels listing -> vectors.db -> hit with no other change.

The test declares ``language`` on a subclass of ``Document`` (its merge
rule, that vectors.db keeps it as a value, that a hit shows it as is) and
on a subclass of ``Hit`` (the description a hit's schema shows), stands them
in for the stages' records, and runs the real chunk, embed (against the
stub model server) and search: vectors.db gains the column by the step after
the numbered migrations, and each hit carries its document's value.
"""

import dataclasses
import json
import secrets
import sqlite3
import unittest
from unittest import mock

from bastion_agent import embed
from bastion_agent.core import catalogue, document_hits, records
from bastion_agent.core.errors import StoreError
from bastion_agent.core.records import Document, Hit
from bastion_agent.embedding import vectorstore
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import SanitizedStoreCase, clean_env, label_documents


@dataclasses.dataclass(frozen=True)
class Wider(Document):
    language: str | None = dataclasses.field(default=None, metadata=records._merged("first", column="value",
                                                                                    hit="as is"))


@dataclasses.dataclass(frozen=True)
class WiderHit(Hit):
    language: str | None = None


def fresh_word() -> str:
    return "w" + secrets.token_hex(4)


class DeclaredFieldCase(SanitizedStoreCase):
    """Two departments' documents, each given a fresh ``language`` in the sanitized listing."""

    size, overlap = 8, 2

    def setUp(self):
        self.hr_word, self.eng_word = fresh_word(), fresh_word()
        self.docs = {f"salary review {self.hr_word} of the pay band": ["hr/pay.txt"],
                     f"compiler review {self.eng_word} of the code": ["eng/cc.txt"]}
        super().setUp()
        label_documents(self.layout, {"hr/pay.txt": ["hr"], "eng/cc.txt": ["eng"]})
        self.languages = {doc: "'); DROP TABLE documents; -- " + secrets.token_hex(3)
                          for doc in self.ids.values()}
        self.relist(lambda document: self.languages[document.doc])
        for name, record in (("document_record", Wider), ("hit_record", WiderHit)):
            patcher = mock.patch.object(records, name, lambda record=record: record)
            patcher.start()
            self.addCleanup(patcher.stop)
        self.stub = StubServer().start()
        self.addCleanup(self.stub.stop)

    def relist(self, language) -> None:
        documents = catalogue.read_documents(self.layout.sanitized_listing)
        lines = [{**catalogue.document_line(document), "language": language(document)} for document in documents]
        self.layout.sanitized_listing.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")

    def sweep(self) -> None:
        self.chunk()
        self.embed_with(self.stub)

    def answer(self, query: str, groups, mode: str = "keyword"):
        with clean_env(EMBED_URL=self.stub.url):
            return embed.answer(self.manifest(), self.layout, query, 5, mode=mode, groups=groups).hits


class HostileDeclaredFieldTests(DeclaredFieldCase):
    def test_a_value_of_the_wrong_type_is_refused_by_name_and_nothing_is_stored(self):
        planted = fresh_word()
        self.relist(lambda document: [planted])
        with self.assertRaises(StoreError) as caught:
            self.sweep()
        self.assertIn("line 1: language is not str | None", str(caught.exception))
        self.assertNotIn(planted, str(caught.exception))
        self.assertFalse(self.layout.chunks_path.exists())
        self.assertFalse(self.layout.vectors_db.exists())

    def test_a_caller_sees_the_field_of_the_documents_it_may_read_only(self):
        self.sweep()
        for mode in ("keyword", "vector", "hybrid"):
            with self.subTest(mode=mode):
                hits = self.answer("review", frozenset({"hr"}), mode)
                self.assertTrue(hits)
                self.assertEqual({hit.language for hit in hits}, {self.languages[self.ids[text]]
                                                                  for text in self.docs if "salary" in text})


class DeclaredFieldTravelTests(DeclaredFieldCase):
    def test_the_field_reaches_vectors_db_by_its_declaration_and_every_hit_carries_it(self):
        self.sweep()
        db = sqlite3.connect(self.layout.vectors_db)
        try:
            stored = dict(db.execute("SELECT doc, language FROM documents"))
        finally:
            db.close()
        self.assertEqual(stored, self.languages)
        for mode in ("keyword", "vector", "hybrid"):
            for word in (self.hr_word, self.eng_word):
                with self.subTest(mode=mode, word=word):
                    hits = self.answer(word, None, mode)
                    self.assertIsInstance(hits[0], WiderHit)
                    self.assertEqual(hits[0].language, self.languages[hits[0].doc])
                    self.assertEqual(hits[0].as_dict()["language"], self.languages[hits[0].doc])

    def test_a_store_made_before_the_field_gains_its_column_on_open_and_its_values_on_embed(self):
        with mock.patch.object(records, "document_record", lambda: Document):
            self.sweep()
        db = vectorstore.connect(self.layout.vectors_db, create=False)  # the step after the numbered migrations
        try:
            self.assertEqual(dict(db.execute("SELECT doc, language FROM documents")),
                             {doc: None for doc in self.languages})
        finally:
            db.close()
        self.assertIsNone(self.answer(self.hr_word, None)[0].language)  # known once embed copies it
        self.embed_with(self.stub)
        self.assertEqual(self.answer(self.hr_word, None)[0].language, self.languages[self.ids[next(iter(self.docs))]])

    def test_the_select_list_and_the_hit_mapping_follow_the_declaration(self):
        self.assertIn('d."language" AS "document_language"', document_hits.select_list("d", Wider))
        self.assertNotIn("language", document_hits.select_list("d", Document))
        self.assertEqual(records.column_sql(Wider, "language"), "TEXT")
        self.assertEqual(records.column_names(records.stored_row(Wider)),
                         records.column_names(records.DocumentRow) + ("language",))


if __name__ == "__main__":
    unittest.main()
