"""A hit's paths, dates and page, kept per document between queries, are never another caller's nor stale.

Hostile first: one loaded index answers a caller who may see every path,
then a caller who may see only the public one; what was worked out for the
first must not reach the second (the hidden path's name is fresh each run).
Then: a row edited under a loaded index shows at once, the work is done once
per document and caller, the memory is bounded, and page maps that are long,
malformed or missing behave as before.
"""

from __future__ import annotations

import json
import random
import sqlite3
import string
import unittest
from unittest import mock

from bastion_agent import embed
from bastion_agent.searching import hit_rows
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import SanitizedStoreCase, clean_env

PUBLIC = frozenset({"public"})


def fresh(prefix: str) -> str:
    return prefix + "".join(random.choice(string.ascii_lowercase) for _ in range(12)) + ".txt"


class HitRowsCase(SanitizedStoreCase):
    size, overlap = 8, 2

    def setUp(self):
        self.hidden = fresh("hr/dismissals/")
        self.docs = {"Exit interview form: reason for leaving, notice period, equipment returned.": [
                         "public/exit-form.txt", self.hidden]}
        self.docs.update({f"Canteen note {n}: soup {'and bread ' * n}on Fridays at noon.": [f"public/canteen{n}.txt"]
                          for n in range(1, 7)})
        super().setUp()
        self.chunk()
        with StubServer() as stub:
            self.embed_with(stub)
        with self.db() as db:  # the shared form's paths each with its own groups, as sanitize labels them
            (paths,) = db.execute("SELECT paths FROM documents WHERE paths LIKE '%exit-form%'").fetchone()
            path_groups = [["hr"] if path == self.hidden else ["public"] for path in json.loads(paths)]
            db.execute("UPDATE documents SET groups = '[\"hr\", \"public\"]', path_groups = ?"
                       " WHERE paths LIKE '%exit-form%'", (json.dumps(path_groups),))
            db.execute("UPDATE documents SET groups = '[\"public\"]', path_groups = '[[\"public\"]]'"
                       " WHERE paths NOT LIKE '%exit-form%'")
        self.index = self.load()

    def load(self):
        index = embed.SearchIndex.load(self.manifest(), self.layout)
        self.addCleanup(index.close)
        return index

    def db(self):
        return sqlite3.connect(self.layout.vectors_db, isolation_level=None)

    def form(self, index, groups=None, query="exit interview form notice period"):
        hits = [hit for hit in index.search(query, None, 10, "keyword", groups=groups) if "Exit interview" in hit.text]
        self.assertEqual(len(hits), 1)
        return hits[0]


class HostileHitRowsTests(HitRowsCase):
    def test_a_caller_never_gets_paths_worked_out_for_another(self):
        self.assertEqual(sorted(self.form(self.index).paths), sorted(["public/exit-form.txt", self.hidden]))
        public = self.form(self.index, PUBLIC)
        self.assertEqual(public.paths, ["public/exit-form.txt"])
        self.assertNotIn(self.hidden, json.dumps(public.as_dict()))
        self.assertNotIn("dismissals", json.dumps(public.as_dict()))
        self.assertEqual(sorted(self.form(self.index).paths), sorted(["public/exit-form.txt", self.hidden]))

    def test_a_hits_paths_list_is_its_own(self):
        first = self.form(self.index)
        first.paths.append("changed/by/the/caller.txt")  # a front end that edits a hit's list in place
        self.assertNotIn("changed/by/the/caller.txt", self.form(self.index).paths)


class HitRowsTests(HitRowsCase):
    def test_a_row_edited_under_a_loaded_index_shows_at_once(self):
        self.form(self.index)
        renamed = fresh("hr/renamed/")  # in the hidden path's place: only the paths column changes
        with self.db() as db:
            db.execute("UPDATE documents SET paths = replace(paths, ?, ?)", (self.hidden, renamed))
        self.assertEqual(sorted(self.form(self.index).paths), sorted(["public/exit-form.txt", renamed]))

    def test_each_document_is_worked_out_once_per_caller(self):
        with mock.patch.object(hit_rows, "shown_of", wraps=hit_rows.shown_of) as worked:
            for _ in range(5):
                hits = self.index.search("soup bread Fridays exit form", None, 10, "keyword")
                self.index.search("soup bread Fridays exit form", None, 10, "keyword", groups=PUBLIC)
        documents = len({hit.doc for hit in hits})
        self.assertGreater(len(hits), documents - 1)
        self.assertEqual(worked.call_count, 2 * documents)  # two callers, each document once, whatever the queries

    def test_the_memory_is_bounded_and_answers_do_not_change_at_the_bound(self):
        expected = [hit.as_dict() for hit in self.index.search("soup bread Fridays", None, 10, "keyword")]
        with mock.patch.object(hit_rows, "KEPT", 2):
            bounded = self.load()
            for _ in range(3):
                found = [hit.as_dict() for hit in bounded.search("soup bread Fridays", None, 10, "keyword")]
                self.assertEqual(found, expected)
                self.assertLessEqual(len(bounded._hit_rows._shown), 2)
        self.assertGreater(len({hit["doc"] for hit in expected}), 2)

    def test_page_maps_long_malformed_or_missing(self):
        doc = self.form(self.index).doc
        long_map = [[0, 1, False]] + [[10_000 + n, n + 2, n % 2 == 0] for n in range(hit_rows.LONG_MAP // 10)]
        for pages, page in ((json.dumps([[0, 3, True]]), 3), (json.dumps(long_map), 1), ("{not json", None)):
            with self.subTest(pages=pages[:20]):
                with self.db() as db:
                    db.execute("INSERT OR REPLACE INTO document_pages (doc, pages) VALUES (?, ?)", (doc, pages))
                self.assertEqual(self.form(self.index).page, page)
        self.assertFalse(any(len(key[3] or "") > hit_rows.LONG_MAP for key in self.index._hit_rows._shown))
        with self.db() as db:
            db.execute("DROP TABLE document_pages")  # an old store's, under a loaded index
        self.assertIsNone(self.form(self.index).page)
        self.assertIsNone(self.form(self.load()).page)

    def test_a_passing_error_does_not_lose_the_page_maps(self):
        doc = self.form(self.index).doc
        with self.db() as db:
            db.execute("INSERT OR REPLACE INTO document_pages (doc, pages) VALUES (?, ?)", (doc, "[[0, 4, false]]"))
        rows = self.index._hit_rows

        class Busy:  # the joined statement fails once, as a locked database makes it
            def __init__(self, db):
                self.db, self.failures = db, 1

            def execute(self, sql, *args):
                if self.failures and "document_pages p" in sql:
                    self.failures -= 1
                    raise sqlite3.OperationalError("database is locked")
                return self.db.execute(sql, *args)

        rows.db = Busy(rows.db)
        self.assertEqual(self.form(self.index).page, 4)
        self.assertEqual(rows.db.failures, 0)
        self.assertEqual(self.form(self.index).page, 4)


class NewHitTests(unittest.TestCase):
    def test_the_same_record_as_build_and_build_for_what_it_cannot_fill(self):
        from dataclasses import dataclass

        from bastion_agent.core import records
        from bastion_agent.core.records import Hit
        from bastion_agent.searching.fusion import Scored

        score = random.random()
        given = dict(doc="d" * 64, idx=3, chunk_id="c" * 64, start=1, end=9, text=fresh("text "), paths=["a/b.txt"],
                     mode="hybrid", modified=None, ocr=False, page=None)
        ranked = Scored(score, "c" * 64, 40, keyword_score=2.5, keyword_rank=1, keyword_relevance=40)
        made = hit_rows.new_hit(ranked, **given)
        self.assertIs(type(made), Hit)
        self.assertEqual(made, records.build(Hit, ranked, **given))
        self.assertEqual(made.as_dict(), records.build(Hit, ranked, **given).as_dict())
        with self.assertRaises(AttributeError):  # still frozen
            made.score = 0.0

        @dataclass(frozen=True)
        class Wider:  # a ranking with a field a hit lacks: left out, as records.build leaves it out
            score: float
            chunk_id: str
            secret: str

        with mock.patch.object(hit_rows.records, "build", wraps=hit_rows.records.build) as built:
            wider = hit_rows.new_hit(Wider(score, "c" * 64, "not a hit field"), **given)
        self.assertEqual(built.call_count, 1)
        self.assertNotIn("not a hit field", json.dumps(wider.as_dict()))
        self.assertEqual(wider.score, score)


if __name__ == "__main__":
    with clean_env():
        unittest.main()
