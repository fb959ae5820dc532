"""The document behind a hit: the whole sanitized text in order, the hit marked, hidden exactly like absent."""

from __future__ import annotations

import hashlib
import os
import random
import unittest

from bastion_agent.config import manifest as manifest_module
from bastion_agent.core.layout import Layout
from bastion_agent.searching.document_view import document_view
from bastion_agent.searching.searcher import SearchIndex
from bastion_agent.serving import doc_page
from bastion_agent.testing.dated_folder import NEW, DatedFolder, iso, write_dated
from bastion_agent.testing.testsupport import clean_env

STAFF, HR = frozenset({"staff"}), frozenset({"hr"})


class DocumentViewTests(DatedFolder):
    @classmethod
    def extra_files(cls, docs):
        # A long note (many windows, so overlaps are merged) and one whose text would be markup in a page.
        words = [f"{cls.topic}{number}" if number % 7 == 0 else "word" for number in range(120)]
        write_dated(docs, "long/report.txt", " ".join(words), NEW)
        write_dated(docs, "long/markup.txt", f"<script>alert(1)</script> & {cls.topic} <b>bold</b>", NEW)

    def setUp(self):
        with clean_env():
            manifest = manifest_module.load(self.manifest)
        self.index = SearchIndex.load(manifest, Layout(self.out), vectors=False)
        self.addCleanup(self.index.close)

    def doc_of(self, path: str) -> str:
        return next(doc for doc, paths in self.index.db.execute("SELECT doc, paths FROM documents") if path in paths)

    def sanitized_text(self, doc: str) -> str:
        return (Layout(self.out).sanitized_dir / f"{doc}.txt").read_text(encoding="utf-8")

    def test_the_view_is_the_whole_sanitized_text_once(self):
        doc = self.doc_of("long/report.txt")
        view = document_view(self.index.db, doc, STAFF)
        self.assertGreater(len(view.windows), 3)
        self.assertEqual(view.text.strip(), self.sanitized_text(doc).strip())
        self.assertEqual((view.paths, view.modified), (["long/report.txt"], iso(NEW)))
        for window in view.windows:  # each window's span in the view holds exactly its text
            text = self.index.db.execute("SELECT text FROM chunks WHERE chunk_id = ?", (window["chunk_id"],)).fetchone()[0]
            self.assertEqual(view.text[window["start"]:window["end"]], text)

    def test_a_hidden_document_is_answered_exactly_like_an_absent_one(self):
        hidden = self.doc_of("hr/secret.txt")
        absent = hashlib.sha256(os.urandom(16)).hexdigest()
        self.assertIsNone(document_view(self.index.db, hidden, STAFF))
        self.assertIsNone(document_view(self.index.db, absent, STAFF))
        self.assertIsNotNone(document_view(self.index.db, hidden, HR))
        self.assertIsNotNone(document_view(self.index.db, hidden, None))
        for bad in ("", "../../etc/passwd", hidden.upper(), hidden + "0", "x" * 64):
            self.assertIsNone(document_view(self.index.db, bad, None), bad)

    def test_the_page_escapes_the_text_marks_the_hit_and_runs_no_script(self):
        doc = self.doc_of("long/markup.txt")
        view = document_view(self.index.db, doc, STAFF)
        hit = random.choice(view.windows)
        page = doc_page.render(view, hit["chunk_id"]).decode("utf-8")
        self.assertNotIn("<script>", page)
        self.assertIn("&lt;script&gt;alert(1)&lt;/script&gt; &amp;", page)
        self.assertEqual(page.count('<mark id="hit">'), 1)
        policy = doc_page.content_security_policy()
        self.assertTrue(policy.startswith("default-src 'none';") and "script-src" not in policy and "unsafe" not in policy)
        unmarked = doc_page.render(view, "f" * 64).decode("utf-8")
        self.assertNotIn("<mark", unmarked)


if __name__ == "__main__":
    unittest.main()
