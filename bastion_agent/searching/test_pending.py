"""Never silently stale: every answer counts the caller's windows still waiting for vectors, and says since when.

Hostile first: the count must depend only on the documents the caller may
read, so growing another department's share changes nothing a caller sees.
"""

from __future__ import annotations

import json
import sqlite3
import unittest

from bastion_agent import embed
from bastion_agent.core.errors import ModelServerUnreachable
from bastion_agent.testing.labelled_docs import ENG_DOCS, GROUPS, HR_DOCS, SHARED
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import SanitizedStoreCase, clean_env, closed_port_url, label_documents, run_cli

HR, ENG = frozenset({"hr"}), frozenset({"eng"})
MORE_ENG = {f"Engineering note {n}: the scheduler {'retries ' * n}the failed build on another worker.": [f"eng/note{n}.txt"]
            for n in range(1, 6)}


class PendingCase(SanitizedStoreCase):
    size, overlap = 8, 2
    docs = {**HR_DOCS, **ENG_DOCS, **SHARED}

    def setUp(self):
        super().setUp()
        label_documents(self.layout, GROUPS)
        self.chunk()

    def embed_unreachable(self):
        with clean_env(EMBED_URL=closed_port_url()):
            with self.assertRaises(ModelServerUnreachable):
                embed.run_embed(self.manifest(), self.layout)

    def answer(self, groups, mode="keyword", query="review"):
        with clean_env(EMBED_URL=closed_port_url()):
            return embed.answer(self.manifest(), self.layout, query, 3, mode=mode, groups=groups)

    def windows_of(self, groups: set[str]) -> int:
        """The windows of the documents sharing a group with ``groups``, counted from the store itself."""
        with sqlite3.connect(self.layout.vectors_db) as db:
            rows = db.execute("SELECT d.groups FROM chunks c JOIN documents d ON d.doc = c.doc").fetchall()
        return sum(1 for (names,) in rows if set(json.loads(names)) & groups)


class HostilePendingTests(PendingCase):
    def test_the_count_depends_only_on_what_the_caller_may_read(self):
        self.embed_unreachable()
        hr_before = self.answer(HR).windows_pending
        self.restock({**HR_DOCS, **ENG_DOCS, **SHARED, **MORE_ENG})
        label_documents(self.layout, {**GROUPS, **{paths[0]: ["eng"] for paths in MORE_ENG.values()}})
        self.chunk()
        self.embed_unreachable()
        self.assertEqual(self.answer(HR).windows_pending, hr_before)  # engineering grew; HR learns nothing of it
        self.assertGreater(self.answer(ENG).windows_pending, hr_before)
        self.assertEqual(self.answer(HR).windows_pending, self.windows_of({"hr"}))


class PendingTests(PendingCase):
    def test_unreachable_server_leaves_the_windows_searchable_by_keyword_and_counted(self):
        self.embed_unreachable()
        found = self.answer(HR, query="salary review Dana Quill")
        self.assertTrue(found.hits)
        self.assertTrue(all(path.startswith(("hr/", "all/")) for hit in found.hits for path in hit.paths))
        self.assertEqual(found.windows_pending, self.windows_of({"hr"}))
        self.assertEqual(self.answer(None).windows_pending, self.windows_of({"hr", "eng"}))
        self.assertIsNotNone(found.stale_since)
        self.assertIn("cannot reach the model server", found.stale_error)
        self.assertEqual(self.answer(HR, mode="vector").hits, [])  # vector search uses windows with vectors only

    def test_a_finished_embed_clears_the_count_and_the_failure(self):
        self.embed_unreachable()
        first = self.answer(HR).stale_since
        self.embed_unreachable()
        self.assertEqual(self.answer(HR).stale_since, first)  # since the first failure of the row
        with StubServer() as stub:
            self.embed_with(stub)
            with clean_env(EMBED_URL=stub.url):
                found = embed.answer(self.manifest(), self.layout, "review", 3, mode="hybrid", groups=HR)
        self.assertEqual((found.windows_pending, found.stale_since), (0, None))
        self.assertTrue(found.hits)

    def test_the_cli_says_it_in_one_stderr_line_and_json_stays_an_array(self):
        self.embed_unreachable()
        code, out, err = run_cli("search", self.manifest_path, "review", "--out", self.out, "--json", "--mode", "keyword")
        self.assertEqual(code, 0, err)
        self.assertIsInstance(json.loads(out), list)
        lines = err.splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertIn(f"{self.windows_of({'hr', 'eng'})} of your windows still wait for vectors", lines[0])
        self.assertIn("embed has not finished since", lines[0])


if __name__ == "__main__":
    unittest.main()


class PendingAtLoadTests(PendingCase):
    """A loaded index counts pending windows from what it loaded: no scan of the store a request."""

    def test_the_count_without_a_commit_since_the_load_is_the_scans_and_scans_nothing(self):
        from unittest import mock

        from bastion_agent.searching import searcher

        stub = StubServer().start()
        self.addCleanup(stub.stop)
        self.embed_with(stub)
        self.restock({**self.docs, **MORE_ENG})  # engineering's new notes: chunked, not embedded
        label_documents(self.layout, {**GROUPS, **{path: ["eng"] for paths in MORE_ENG.values() for path in paths}})
        self.chunk()
        self.embed_unreachable()  # their windows reach vectors.db (keyword search finds them), with no vector
        index = searcher.SearchIndex.load(self.manifest(), self.layout)
        self.addCleanup(index.close)
        callers = (None, HR, ENG)
        keyword_only = searcher.SearchIndex.load(self.manifest(), self.layout, vectors=False)  # a one-off keyword CLI
        self.addCleanup(keyword_only.close)
        with mock.patch.object(index, "_pending_counted", side_effect=AssertionError("the store was scanned")), \
                mock.patch.object(keyword_only, "_pending_counted", side_effect=AssertionError("scanned")):
            at_load = {groups: index.pending(groups) for groups in callers}
            self.assertEqual(keyword_only.pending(None), at_load[None])
        self.assertEqual(at_load, {groups: index._pending_counted(groups) for groups in callers})
        self.assertGreater(at_load[ENG], 0)
        self.assertEqual(at_load[HR], 0)  # engineering's new windows count for engineering only

    def test_the_windows_at_load_are_the_vector_files_headers_and_no_count_of_the_store(self):
        from bastion_agent.embedding import vectorfile
        from bastion_agent.searching import searcher

        stub = StubServer().start()
        self.addCleanup(stub.stop)
        self.embed_with(stub)
        self.restock({**self.docs, **MORE_ENG})
        self.chunk()
        self.embed_unreachable()  # windows without a vector: the count has something to say
        with sqlite3.connect(self.layout.vectors_db) as db:
            windows = db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        for vectors in (True, False):  # a vector or hybrid load reads the header refresh returns; a keyword one reads it
            with self.subTest(vectors=vectors):
                index = searcher.SearchIndex.load(self.manifest(), self.layout, vectors=vectors)
                self.addCleanup(index.close)
                statements: list[str] = []
                index.db.set_trace_callback(statements.append)
                pending = index.pending(None)
                index.db.set_trace_callback(None)
                self.assertEqual([sql for sql in statements if "FROM chunks" in sql], [])
                self.assertEqual(pending, index._pending_counted(None))
                self.assertGreater(pending, 0)
        header = vectorfile.read_header(vectorfile.Files.for_key(self.layout, self.manifest().embed.vector_key))
        self.assertEqual(header["windows"], windows)

    def test_a_header_from_before_the_window_count_is_counted_in_the_store(self):
        from bastion_agent.core.layout import write_json
        from bastion_agent.embedding import vectorfile
        from bastion_agent.searching import searcher

        stub = StubServer().start()
        self.addCleanup(stub.stop)
        self.embed_with(stub)
        self.restock({**self.docs, **MORE_ENG})
        self.chunk()
        self.embed_unreachable()
        searcher.SearchIndex.load(self.manifest(), self.layout).close()  # the header in step with the store
        files = vectorfile.Files.for_key(self.layout, self.manifest().embed.vector_key)
        header = vectorfile.read_header(files)
        header.pop("windows")
        write_json(files.header, header)  # as an older refresh left it
        for vectors in (True, False):
            with self.subTest(vectors=vectors):
                index = searcher.SearchIndex.load(self.manifest(), self.layout, vectors=vectors)
                self.addCleanup(index.close)
                statements: list[str] = []
                index.db.set_trace_callback(statements.append)
                pending = index.pending(None)
                index.db.set_trace_callback(None)
                self.assertEqual([sql for sql in statements if "COUNT(*) FROM chunks" in sql], ["SELECT COUNT(*) FROM chunks"])
                self.assertEqual(pending, index._pending_counted(None))
                self.assertGreater(pending, 0)
