"""Search filtered before ranking: each caller gets the top k of the windows it may see, and learns nothing else."""

from __future__ import annotations

import dataclasses
import json
import random
import unittest
from unittest import mock

from bastion_agent import embed
from bastion_agent.config import manifest as manifest_module
from bastion_agent.core.layout import Layout, ensure_private_dir
from bastion_agent.core.records import DocumentRow, StoredChunk
from bastion_agent.embedding import ann, ann_recall, vectorfile, vectorstore
from bastion_agent.testing.labelled_docs import ENG_DOCS, GROUPS, HR_DOCS, SHARED, LabelledStore
from bastion_agent.testing.search_manifest import fake_manifest
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import (
    TempFolder,
    clean_env,
    label_documents,
    sha256_hex,
    write_sanitized_store,
)

HR, ENG = frozenset({"hr"}), frozenset({"eng"})
MODES = ("vector", "keyword", "hybrid")

AIMED_AT_HR = "salary review of Dana Quill pay band appraisal"


class DisjointCallersTests(LabelledStore):
    def test_disjoint_groups_get_disjoint_hits_in_every_mode(self):
        for mode in MODES:
            for query in ("salary review", "compiler review", "review"):
                with self.subTest(mode=mode, query=query):
                    hr = self.answer(query, HR, mode, k=20).hits
                    eng = self.answer(query, ENG, mode, k=20).hits
                    self.assertTrue(self.docs_of(hr) <= {"hr", "all"}, self.docs_of(hr))
                    self.assertTrue(self.docs_of(eng) <= {"eng", "all"}, self.docs_of(eng))
                    shared = {hit.chunk_id for hit in hr} & {hit.chunk_id for hit in eng}
                    self.assertTrue(all(self.docs_of([h]) == {"all"} for h in hr if h.chunk_id in shared))

    def test_a_query_aimed_at_hr_gives_engineering_its_own_best_k(self):
        for mode in ("vector", "hybrid"):
            with self.subTest(mode=mode):
                hits = self.answer(AIMED_AT_HR, ENG, mode, k=4).hits
                self.assertEqual(len(hits), 4)  # never fewer because HR's windows ranked higher
                self.assertTrue(self.docs_of(hits) <= {"eng", "all"})
                everything = self.answer(AIMED_AT_HR, None, mode, k=50).hits
                theirs = [hit.chunk_id for hit in everything if self.docs_of([hit]) <= {"eng", "all"}][:4]
                self.assertEqual([hit.chunk_id for hit in hits], theirs)

    def test_every_group_sees_everything_and_no_group_sees_nothing(self):
        everything = self.answer("review", None, "keyword", k=50).hits
        self.assertEqual(self.docs_of(everything), {"hr", "eng"})
        self.assertEqual(self.answer("review", frozenset(), "hybrid").hits, [])
        self.assertEqual(self.answer("review", frozenset({"sales"}), "vector").hits, [])

    def test_a_caller_who_sees_every_window_gets_fts5s_own_bm25(self):
        both = frozenset({"hr", "eng"})
        for query in ("salary review", "the compiler reports every type error", "review of the cache"):
            with self.subTest(query=query):
                mine = self.answer(query, both, "keyword", k=10).hits
                fts5 = self.answer(query, None, "keyword", k=10).hits
                self.assertEqual([hit.chunk_id for hit in mine], [hit.chunk_id for hit in fts5])
                for a, b in zip(mine, fts5):
                    self.assertAlmostEqual(a.score, b.score, places=9)
                    self.assertEqual(a.relevance, b.relevance)

    def test_the_cli_search_sees_the_manifests_local_groups(self):
        from bastion_agent.testing.testsupport import run_cli, write_manifest

        for extra, expected in (('[access]\nlocal_groups = ["eng"]\n', {"eng", "all"}), ("", {"hr", "eng", "all"})):
            with self.subTest(extra=extra):
                path = write_manifest(self.tmp, size=self.size, overlap=self.overlap, extra=extra)
                with clean_env(EMBED_URL=self.stub.url):
                    code, out, err = run_cli("search", path, "review salary compiler", "-k", "30", "--json",
                                             "--out", self.out)
                self.assertEqual(code, 0, err)
                self.assertEqual({p.split("/")[0] for hit in json.loads(out) for p in hit["paths"]}, expected)

    def test_visible_count_is_the_callers(self):
        index = embed.SearchIndex.load(self.manifest(), self.layout)
        self.addCleanup(index.close)
        windows = dict(vectorstore.connect(self.layout.vectors_db, create=False).execute(
            "SELECT d.groups, count(*) FROM chunks c JOIN documents d ON d.doc = c.doc GROUP BY d.groups").fetchall())
        hr_only, eng_only, both = windows['["hr"]'], windows['["eng"]'], windows['["eng", "hr"]']
        self.assertEqual(index.visible_count(), hr_only + eng_only + both)
        self.assertEqual(index.visible_count(HR), hr_only + both)
        self.assertEqual(index.visible_count(ENG), eng_only + both)
        self.assertEqual(index.visible_count(frozenset({"hr", "eng"})), hr_only + eng_only + both)
        self.assertEqual(index.visible_count(frozenset({"sales"})), 0)

    def test_a_label_change_relabels_without_embedding_again(self):
        requests = len(self.stub.requests)
        label_documents(self.layout, {**GROUPS, "hr/payroll.txt": ["eng"]})
        summary = self.embed_with(self.stub)
        self.assertEqual(len(self.stub.requests), requests)  # not even a probe
        self.assertEqual(summary["embedded"], 0)
        hits = self.answer("payroll calendar salaries paid", ENG, "keyword").hits
        self.assertIn("hr/payroll.txt", {path for hit in hits for path in hit.paths})
        hits = self.answer("payroll calendar salaries paid", HR, "keyword").hits
        self.assertNotIn("hr/payroll.txt", {path for hit in hits for path in hit.paths})

    def test_many_distinct_callers_keep_a_bounded_cache(self):
        from bastion_agent.searching import visible

        index = embed.SearchIndex.load(self.manifest(), self.layout)
        self.addCleanup(index.close)
        for number in range(visible.CACHED_CALLERS + 20):
            index.search("review", None, 3, "keyword", groups=frozenset({"eng", f"g{number}"}))
        tables = index.db.execute("SELECT count(*) FROM sqlite_temp_master WHERE name LIKE 'visible_%'").fetchone()[0]
        self.assertLessEqual(tables, visible.CACHED_CALLERS)

    def test_a_hand_edited_listing_with_bad_group_names_labels_nothing(self):
        from bastion_agent.core.layout import read_jsonl, write_jsonl

        rows = read_jsonl(self.layout.sanitized_listing)
        for row in rows:
            row["groups"] = ["eng", "Not A Group"] if "eng/parser.txt" in row["paths"] else "eng"
        write_jsonl(self.layout.sanitized_listing, rows)
        self.embed_with(self.stub)
        db = vectorstore.connect(self.layout.vectors_db, create=False)
        self.addCleanup(db.close)
        self.assertEqual({row[0] for row in db.execute("SELECT groups FROM documents")}, {"[]"})
        self.assertEqual(self.answer("parser tokens", ENG, "keyword").hits, [])

    def test_a_store_without_labels_shows_nothing_to_a_group_and_everything_to_every_group(self):
        db = vectorstore.connect(self.layout.vectors_db, create=False)
        self.addCleanup(db.close)
        with vectorstore.transaction(db):
            db.execute("UPDATE documents SET groups = '[]'")
        self.assertEqual(self.answer("review", ENG, "hybrid").hits, [])
        self.assertEqual(len(self.answer("review", None, "hybrid").hits), 3)


class SweepRelabelTests(TempFolder, unittest.TestCase):
    """The whole sweep: a changed rule re-labels at the next sweep with no request to the model server."""

    def test_a_changed_rule_relabels_without_a_request(self):
        from bastion_agent.testing.testsupport import run_cli, write_manifest

        tmp = self.make_tmp()
        rules = '[access]\ndefault = ["staff"]\n[[access.rules]]\npaths = ["hr/**"]\ngroups = ["{}"]\n'
        path = write_manifest(tmp, size=8, overlap=2, extra=rules.format("hr"))
        (tmp / "docs" / "hr").mkdir()
        (tmp / "docs" / "hr" / "pay.txt").write_text("Salary bands for the coming year.", encoding="utf-8")
        (tmp / "docs" / "notes.txt").write_text("Lunch is at noon on Fridays.", encoding="utf-8")
        with StubServer() as stub, clean_env(EMBED_URL=stub.url):
            code, _, err = run_cli("sweep", path, "--out", tmp / "out")
            self.assertEqual(code, 0, err)
            requests = len(stub.requests)
            write_manifest(tmp, size=8, overlap=2, extra=rules.format("people"))
            code, _, err = run_cli("sweep", path, "--out", tmp / "out")
            self.assertEqual(code, 0, err)
            self.assertEqual(len(stub.requests), requests)
            manifest = manifest_module.load(path)
            layout = Layout(tmp / "out")
            for groups, expected in ((frozenset({"people"}), ["hr/pay.txt"]), (frozenset({"hr"}), []),
                                     (frozenset({"staff"}), ["notes.txt"])):
                hits = embed.answer(manifest, layout, "salary bands lunch", 5, mode="keyword", groups=groups).hits
                self.assertEqual(sorted({p for hit in hits for p in hit.paths}), expected)


class HostileProbeTests(TempFolder, unittest.TestCase):
    """A caller without HR's group asks about an HR document: its answers equal those of a store that never had it."""

    QUERIES = (AIMED_AT_HR, "Dana Quill", "appraisal", "salary", "review", "compiler", "holidays office",
               "zzz unknown words", "quill's pay band, after the annual appraisal?")

    def store(self, docs: dict) -> tuple:
        tmp = self.make_tmp()
        from bastion_agent.testing.testsupport import write_manifest
        from bastion_agent.chunking import chunker
        from bastion_agent.embedding import embed_stage

        path = write_manifest(tmp, size=8, overlap=2)
        layout = Layout(tmp / "out")
        write_sanitized_store(layout, docs)
        label_documents(layout, GROUPS)
        with clean_env(EMBED_URL=self.stub.url):
            manifest = manifest_module.load(path)
            chunker.run_chunk(manifest, layout)
            embed_stage.run_embed(manifest, layout)
        return manifest, layout

    def setUp(self):
        self.stub = StubServer().start()
        self.addCleanup(self.stub.stop)
        others = {**{t: p for t, p in HR_DOCS.items() if "Quill" not in t}, **ENG_DOCS, **SHARED}
        self.with_it = self.store({**HR_DOCS, **ENG_DOCS, **SHARED})
        self.without = self.store(others)

    def answers(self, store, query: str, mode: str, exact: bool) -> tuple:
        manifest, layout = store
        with clean_env(EMBED_URL=self.stub.url):
            try:
                found = embed.answer(manifest, layout, query, 5, mode=mode, exact=exact, groups=ENG)
            except Exception as exc:  # an error is an answer too: it must not differ either
                return ("error", type(exc).__name__, str(exc))
        return tuple(json.dumps(dataclasses.asdict(hit), sort_keys=True) for hit in found.hits), found.mode, found.notice

    def test_answers_are_those_of_a_store_without_the_document(self):
        for mode in MODES:
            for query in self.QUERIES:
                with self.subTest(mode=mode, query=query):
                    self.assertEqual(self.answers(self.with_it, query, mode, True),
                                     self.answers(self.without, query, mode, True))

    def test_counts_are_those_of_a_store_without_the_document(self):
        counts = []
        for manifest, layout in (self.with_it, self.without):
            index = embed.SearchIndex.load(manifest, layout)
            self.addCleanup(index.close)
            counts.append((index.visible_count(ENG), index.visible_count(frozenset({"eng", "sales"}))))
        self.assertEqual(counts[0], counts[1])


class FilteredScanTests(TempFolder, unittest.TestCase):
    """The vector side over a synthetic store: exact (numpy and pure) and ANN give the top k of the visible rows."""

    N, DIM = 400, 16

    def setUp(self):
        self.layout = Layout(self.make_tmp() / "out")
        ensure_private_dir(self.layout.root)
        self.db = vectorstore.connect(self.layout.vectors_db, create=True)
        self.addCleanup(self.db.close)
        rng = random.Random(11)
        chunks, vectors, docs = [], [], {}
        for i in range(self.N):
            doc = sha256_hex(f"doc {i // 4}")
            chunks.append((sha256_hex(f"chunk {i}"), doc, i % 4, 0, 10, f"window {i} topic{i % 5}"))
            vectors.append((chunks[-1][0], vectorstore.pack([rng.gauss(0, 1) for _ in range(self.DIM)])))
            share = (i // 4) % 10  # a tenth of the documents are HR's, the rest engineering's
            docs[doc] = json.dumps(["hr"] if share == 0 else ["eng"])
        vectorstore.replace_chunks(self.db, [StoredChunk(*c) for c in chunks],
                                   [DocumentRow(doc, json.dumps(["x.txt"]), groups=groups) for doc, groups in docs.items()])
        vectorstore.add_vectors(self.db, "synthetic", self.DIM, vectors, "2026-01-01T00:00:00+00:00")
        self.hr_ids = {c[0] for c in chunks if docs[c[1]] == '["hr"]'}
        self.queries = [[rng.gauss(0, 1) for _ in range(self.DIM)] for _ in range(10)]

    def reference(self, query, k: int, ids: set[str]) -> list[str]:
        rows = [row for row in vectorstore.searchable(self.db, "synthetic") if row[0] in ids]
        return [row[0] for _, row in embed.top_k(query, rows, k)]

    def load(self, **options):
        index = embed.SearchIndex.load(fake_manifest(), self.layout, **options)
        self.addCleanup(index.close)
        return index

    def check(self, index, exact: bool) -> None:
        eng_ids = {row[0] for row in self.db.execute("SELECT chunk_id FROM chunks")} - self.hr_ids
        for query in self.queries:
            for groups, ids in ((HR, self.hr_ids), (ENG, eng_ids)):
                hits = index.search("", query, 10, "vector", exact=exact, groups=groups)
                self.assertEqual([hit.chunk_id for hit in hits], self.reference(query, 10, ids))

    def test_numpy_scan_of_a_small_and_a_large_share(self):
        if vectorfile.numpy_or_none() is None:
            self.skipTest("numpy is not installed")
        self.check(self.load(use_ann=False), exact=True)

    def test_pure_python_scan(self):
        self.check(self.load(use_numpy=False), exact=True)

    @unittest.skipUnless(vectorfile.numpy_or_none() is not None and ann.available(), "the ANN index needs numpy and faiss")
    def test_ann_path_widens_or_scans_and_keeps_to_the_visible_rows(self):
        # A beam as wide as the graph: the walk reaches every row, so the answer must be the scan's and what is
        # under test is the widening and the filter (what a narrower beam misses at rank 100 depends on the graph).
        with mock.patch.multiple(ann, MIN_ROWS=50, LAZY_ROWS=100_000), mock.patch.object(ann_recall, "BEAMS", (512,)):
            for exact_share in (0.0, 1.0):  # 0: always widen the ANN search; 1: always scan the visible rows
                with self.subTest(exact_share=exact_share), mock.patch.object(ann, "EXACT_SHARE", exact_share):
                    index = self.load()
                    self.assertIsNotNone(index.ann)
                    with mock.patch.object(ann.AnnIndex, "top", wraps=index.ann.top) as ann_top:
                        self.check(index, exact=False)
                        self.assertGreater(ann_top.call_count, 0)

    @unittest.skipUnless(vectorfile.numpy_or_none() is not None and ann.available(), "the ANN index needs numpy and faiss")
    def test_a_caller_who_cannot_see_every_window_never_walks_the_shared_graph(self):
        """A walk of the one graph passes through hidden windows, which could change what it finds: scan instead."""
        with mock.patch.multiple(ann, MIN_ROWS=50, LAZY_ROWS=100_000):
            index = self.load()
            self.assertIsNotNone(index.ann)
            walks = mock.Mock(wraps=index.ann.index.search)
            with mock.patch.object(index.ann, "index", mock.Mock(search=walks, wraps=index.ann.index)):
                for groups in (HR, ENG):  # a small and a large share of the windows
                    for query in self.queries[:3]:
                        index.search("", query, 5, "vector", groups=groups)
                self.assertEqual(walks.call_count, 0)
                index.search("", self.queries[0], 5, "vector")
                self.assertGreater(walks.call_count, 0)
            index.close()


class CommittedAfterLoadTests(LabelledStore):
    """A loaded index (serve's) whose store an embed changes before the index is loaded again."""

    docs = {**ENG_DOCS, **SHARED}  # at load, the engineering caller may read every window

    def test_a_hidden_document_committed_after_the_load_never_reaches_a_filtered_caller(self):
        from bastion_agent.searching import searcher

        index = searcher.SearchIndex.load(self.manifest(), self.layout)
        self.addCleanup(index.close)
        self.assertTrue(index.visible(ENG).every_window)  # the shortcut that read the live keyword index
        before = index.search("compiler", None, 20, "keyword", groups=ENG)
        self.assertTrue(before)
        self.restock({**HR_DOCS, **ENG_DOCS, **SHARED})
        label_documents(self.layout, GROUPS)
        self.chunk()
        self.embed_with(self.stub)  # committed: the old index's connection sees the HR windows in chunks_fts
        self.assertFalse(index.is_current())
        for query in (AIMED_AT_HR, "salary", "salaries payroll severance"):
            for groups in (ENG, frozenset({"nobody"})):
                with self.subTest(query=query, groups=groups):
                    hits = index.search(query, None, 20, "keyword", groups=groups)
                    self.assertFalse([hit.text for hit in hits if "alar" in hit.text or "everance" in hit.text])
                    self.assertTrue(self.docs_of(hits) <= {"eng", "all"}, self.docs_of(hits))
        fresh = searcher.SearchIndex.load(self.manifest(), self.layout)  # serve's reload: each caller's new share
        self.addCleanup(fresh.close)
        self.assertTrue(any("alar" in hit.text for hit in fresh.search("salary", None, 20, "keyword", groups=HR)))
        self.assertFalse(any("alar" in hit.text for hit in fresh.search("salary", None, 20, "keyword", groups=ENG)))


if __name__ == "__main__":
    unittest.main()
