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
        write_dated(docs, "hr/copy.txt", f"shared {cls.topic} checklist for the depot", NEW)  # a hidden copy

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

    def test_a_hidden_copys_path_is_not_shown(self):
        doc = self.doc_of("copy/a.txt")
        self.assertEqual(document_view(self.index.db, doc, STAFF).paths, ["copy/a.txt", "copy/b.txt"])
        self.assertIn("hr/copy.txt", document_view(self.index.db, doc, None).paths)

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


class DocumentRouteTests(unittest.TestCase):
    """``GET /doc/ID`` over HTTP with two named tokens: each reads its own documents; the other's is a 404 like absent."""

    @classmethod
    def setUpClass(cls):
        import tempfile
        from pathlib import Path

        from bastion_agent.commands import token_cli
        from bastion_agent.testing.labelled_docs import ENG_DOCS, HR_DOCS
        from bastion_agent.testing.serve_store import Store
        from bastion_agent.testing.stub_server import StubServer
        from bastion_agent.testing.testsupport import label_documents

        cls.holder = tempfile.TemporaryDirectory()
        cls.stub = StubServer().start()
        docs = {**HR_DOCS, **ENG_DOCS}
        groups = {path: [path.split("/")[0]] for paths in docs.values() for path in paths}

        class Labelled(Store):
            def sweep(self, docs=None):
                label_documents(self.layout, groups)
                super().sweep(docs)

        cls.store = Labelled(Path(cls.holder.name), cls.stub, docs)
        cls.tokens_file = Path(cls.holder.name) / "conf" / "tokens.json"
        cls.hr = token_cli.add_token(cls.tokens_file, "hr-portal", ("hr",))
        cls.eng = token_cli.add_token(cls.tokens_file, "eng-wiki", ("eng",))
        cls.hr_doc = next(doc for text, doc in cls.store.ids.items() if text in HR_DOCS)

    @classmethod
    def tearDownClass(cls):
        cls.stub.stop()
        cls.holder.cleanup()

    def get(self, url, path, token, accept="application/json"):
        from bastion_agent.testing.serve_store import request

        return request(url, path=path, headers={"Authorization": f"Bearer {token}", "Accept": accept})

    def test_hidden_and_absent_documents_get_the_same_answer(self):
        from bastion_agent.testing.serve_store import start

        server = start(self.store, self, tokens_file=self.tokens_file)
        status, _, mine = self.get(server.url, f"/doc/{self.hr_doc}", self.hr)
        self.assertEqual(status, 200)
        self.assertEqual(mine["doc"], self.hr_doc)
        hidden = self.get(server.url, f"/doc/{self.hr_doc}", self.eng)
        absent = self.get(server.url, "/doc/" + hashlib.sha256(os.urandom(8)).hexdigest(), self.eng)
        self.assertEqual((hidden[0], hidden[2]), (absent[0], absent[2]))
        self.assertEqual(hidden[0], 404)
        for bad in ("/doc/..%2f..%2fetc%2fpasswd", "/doc/" + "A" * 64, "/doc/x"):
            self.assertEqual(self.get(server.url, bad, self.hr)[0], 404, bad)
        self.assertEqual(self.get(server.url, f"/doc/{self.hr_doc}/more", self.hr)[0], 404)

    def test_a_browser_gets_a_page_without_script(self):
        from bastion_agent.testing.serve_store import start

        server = start(self.store, self, tokens_file=self.tokens_file)
        status, answer, page = self.get(server.url, f"/doc/{self.hr_doc}", self.hr, accept="text/html")
        self.assertEqual((status, answer.getheader("Content-Type")), (200, "text/html; charset=utf-8"))
        self.assertNotIn(b"<script", page)
        self.assertIn("default-src 'none'", answer.getheader("Content-Security-Policy"))
        no_token = self.get(server.url, f"/doc/{self.hr_doc}", "not-a-token", accept="text/html")
        self.assertEqual(no_token[0], 401)
