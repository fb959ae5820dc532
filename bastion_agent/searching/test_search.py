"""Search at scale: the derived vector file, numpy and pure scans, the ANN index, keyword and hybrid modes."""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
import unittest
from pathlib import Path
from unittest import mock

from bastion_agent import embed
from bastion_agent.core.layout import Layout, ensure_private_dir, write_json
from bastion_agent.core.records import DocumentRow, StoredChunk
from bastion_agent.embedding import ann, vectorfile, vectorstore
from bastion_agent.searching import keyword, searcher
from bastion_agent.testing.search_manifest import DIM, fake_manifest
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import (
    SanitizedStoreCase,
    TempFolder,
    clean_env,
    closed_port_url,
    run_cli,
    sha256_hex,
    write_manifest,
)

HAS_NUMPY = vectorfile.numpy_or_none() is not None
HAS_FAISS = ann.available()


class SyntheticStore(TempFolder, unittest.TestCase):
    """A vectors.db written directly: ``n`` windows with random vectors and a word each."""

    def setUp(self):
        self.layout = Layout(self.make_tmp() / "out")
        self.rng = random.Random(7)
        ensure_private_dir(self.layout.root)
        self.db = vectorstore.connect(self.layout.vectors_db, create=True)
        self.addCleanup(self.db.close)

    def rows(self, n: int, start: int = 0, text=lambda i: f"window number {i} about topic{i % 7}"):
        chunks, vectors = [], []
        for i in range(start, start + n):
            chunk = sha256_hex(f"chunk {i}")
            chunks.append((chunk, sha256_hex(f"doc {i // 3}"), i % 3, 0, 10, text(i)))
            vectors.append((chunk, vectorstore.pack([self.rng.gauss(0, 1) for _ in range(DIM)])))
        return chunks, vectors

    def store(self, chunks, vectors, key: str = "synthetic"):
        vectorstore.replace_chunks(self.db, [StoredChunk(*c) for c in chunks],
                                   [DocumentRow(doc, json.dumps([f"{doc[:6]}.txt"])) for doc in sorted({c[1] for c in chunks})])
        vectorstore.add_vectors(self.db, key, DIM, vectors, "2026-01-01T00:00:00+00:00")

    def query(self):
        return [self.rng.gauss(0, 1) for _ in range(DIM)]

    def reference(self, query, k: int) -> list[str]:
        """The contract's exact scan over every current row (docs/contract.md): the ranking to reproduce."""
        return [row[0] for _, row in embed.top_k(query, vectorstore.searchable(self.db, "synthetic"), k)]

    def load(self, **options) -> embed.SearchIndex:
        index = embed.SearchIndex.load(fake_manifest(), self.layout, **options)
        self.addCleanup(index.close)
        return index

    def ids(self, hits) -> list[str]:
        return [hit.chunk_id for hit in hits]

    def assert_scored(self, hits, expected: list[tuple[float, str]], exact_floats: bool = False) -> None:
        """The hits are ``expected``'s windows in its order, each with its cosine (numpy sums in another order: 1e-12)."""
        self.assertEqual(self.ids(hits), [chunk for _, chunk in expected])
        for hit, (score, _) in zip(hits, expected):
            if exact_floats:
                self.assertEqual(hit.score, score)
            else:
                self.assertAlmostEqual(hit.score, score, places=12)


class ExactScanTests(SyntheticStore):
    def setUp(self):
        super().setUp()
        self.store(*self.rows(300))

    def test_pure_scan_gives_the_specifications_ranking(self):
        index = self.load(use_numpy=False)
        for _ in range(5):
            query = self.query()
            self.assertEqual(self.ids(index.search("", query, 10, "vector")), self.reference(query, 10))

    @unittest.skipUnless(HAS_NUMPY, "numpy is not installed (pip install 'bastion-agent[fast]')")
    def test_numpy_and_pure_scans_agree_on_ranking_and_scores(self):
        fast, pure = self.load(use_numpy=True), self.load(use_numpy=False)
        for _ in range(10):
            query = self.query()
            fast_hits, pure_hits = fast.search("", query, 10, "vector"), pure.search("", query, 10, "vector")
            self.assertEqual(self.ids(fast_hits), self.ids(pure_hits))
            for fast_hit, pure_hit in zip(fast_hits, pure_hits):
                self.assertAlmostEqual(fast_hit.score, pure_hit.score, places=9)

    def test_hits_carry_text_doc_and_paths_from_the_database(self):
        hit = self.load().search("", self.query(), 1, "vector")[0]
        text, doc = self.db.execute("SELECT text, doc FROM chunks WHERE chunk_id = ?", (hit.chunk_id,)).fetchone()
        self.assertEqual((hit.text, hit.doc, hit.paths), (text, doc, [f"{doc[:6]}.txt"]))

    def test_scores_are_the_specifications_float64_cosines_of_the_database_vectors(self):
        for use_numpy in (False, True) if HAS_NUMPY else (False,):
            index = self.load(use_numpy=use_numpy)
            for _ in range(3):
                query = self.query()
                expected = [(score, row[0]) for score, row in
                            embed.top_k(query, vectorstore.searchable(self.db, "synthetic"), 10)]
                self.assert_scored(index.search("", query, 10, "vector"), expected, exact_floats=not use_numpy)

    def test_paths_text_and_doc_are_read_from_the_database_at_query_time(self):
        index = self.load()
        hit = index.search("", self.query(), 1, "vector")[0]
        self.db.execute("UPDATE documents SET paths = ? WHERE doc = ?", (json.dumps(["a/b.txt", "c\nd.txt"]), hit.doc))
        again = index.search("", self.query(), 300, "vector")
        (same,) = [h for h in again if h.chunk_id == hit.chunk_id]
        self.assertEqual((same.text, same.doc), (hit.text, hit.doc))
        self.assertEqual(same.paths, ["a/b.txt", "c\\x0ad.txt"])  # escaped as the CLI prints names
        self.db.execute("DELETE FROM documents WHERE doc = ?", (hit.doc,))
        (orphan,) = [h for h in index.search("", self.query(), 300, "vector") if h.chunk_id == hit.chunk_id]
        self.assertEqual(orphan.paths, [])

    def test_a_hit_as_a_dict_is_what_asdict_gives_subclass_fields_included(self):
        import dataclasses

        @dataclasses.dataclass(frozen=True)
        class Tagged(embed.Hit):
            bastion: str = ""

        for hit in self.load().search("", self.query(), 3, "vector"):
            self.assertEqual(hit.as_dict(), dataclasses.asdict(hit))
            tagged = Tagged(**dataclasses.asdict(hit), bastion="b1")
            self.assertEqual(tagged.as_dict(), dataclasses.asdict(tagged))
            self.assertEqual(json.dumps(tagged.as_dict()), json.dumps(dataclasses.asdict(tagged)))

    def test_a_zero_query_vector_scores_zero_without_error(self):
        hits = self.load().search("", [0.0] * DIM, 3, "vector")
        self.assertEqual([h.score for h in hits], [0.0, 0.0, 0.0])

    def test_a_query_vector_of_the_wrong_dimension_is_refused(self):
        with self.assertRaisesRegex(Exception, "dimensions"):
            self.load().search("", [1.0] * (DIM + 1), 3, "vector")


class DerivedFileTests(SyntheticStore):
    def setUp(self):
        super().setUp()
        self.chunks, self.vectors = self.rows(120)
        self.store(self.chunks, self.vectors)
        self.files = vectorfile.Files.for_key(self.layout, "synthetic")

    def header(self) -> dict:
        return json.loads(self.files.header.read_text())

    def data(self, kind: str) -> Path:
        return self.files.data(self.header()["build"], kind)

    def assert_matches_reference(self):
        query = self.query()
        self.assertEqual(self.ids(self.load().search("", query, 8, "vector")), self.reference(query, 8))

    def wait_for_the_file_clock(self, path: Path) -> None:
        """Until a write now gets a later change time than ``path``'s (file times move in clock ticks, not ns)."""
        probe = self.layout.root / "clock-probe"
        written = path.stat().st_ctime_ns
        while True:
            probe.write_bytes(b"x")
            if probe.stat().st_ctime_ns > written:
                return

    def test_files_are_built_beside_vectors_db_and_private(self):
        self.load()
        self.assertEqual(self.header()["rows"], 120)
        self.assertEqual(self.data("f32").stat().st_size, 120 * DIM * 4)
        for path in self.files.folder.iterdir():
            self.assertEqual(path.stat().st_mode & 0o077, 0, path.name)

    def test_rebuilt_when_missing(self):
        self.load()
        for path in self.files.folder.iterdir():
            path.unlink()
        self.assert_matches_reference()
        self.assertEqual(self.header()["rows"], 120)

    def test_extended_not_rebuilt_when_vectors_are_added(self):
        self.load()
        build = self.header()["build"]
        self.store(*self.rows(130))  # 10 new windows; the first 120 stay current
        self.assert_matches_reference()
        self.assertEqual((self.header()["build"], self.header()["rows"]), (build, 130))

    def test_vectors_added_while_embed_runs_are_marked_without_a_full_pass(self):
        chunks, vectors = self.rows(140)
        self.store(chunks, [])  # 20 windows without vectors yet, as while embed runs
        self.assertEqual(len(self.load()), 120)
        stale_chunk = sha256_hex("a window of another sweep")
        added = vectors[120:] + [(stale_chunk, vectorstore.pack([1.0] * DIM))]
        vectorstore.add_vectors(self.db, "synthetic", DIM, added, "2026-01-01T00:00:00+00:00")
        with mock.patch.object(vectorfile, "_write_mask", side_effect=AssertionError("full mask pass")):
            index = self.load()
        self.assertEqual(len(index), 140)
        query = vectorstore.unpack(vectors[130][1]).tolist()
        self.assertEqual(self.ids(index.search("", query, 1, "vector")), [chunks[130][0]])
        self.assertNotIn(stale_chunk, self.ids(index.search("", [1.0] * DIM, 140, "vector")))

    def test_a_corrupt_matrix_is_never_trusted(self):
        self.load()
        size = self.data("f32").stat().st_size
        self.data("f32").write_bytes(b"\x00" * size)
        self.assert_matches_reference()
        self.assertNotEqual(self.data("f32").read_bytes(), b"\x00" * size)

    def test_a_row_edited_in_place_is_never_used_even_where_no_spot_check_looks(self):
        self.load()
        build = self.header()["build"]
        self.wait_for_the_file_clock(self.data("f32"))
        target = [self.rng.gauss(0, 1) for _ in range(DIM)]
        with open(self.data("f32"), "r+b") as handle:  # row 60 now claims to be the query itself
            handle.seek(60 * DIM * 4)
            handle.write(vectorstore.pack(target))
        with mock.patch.object(vectorfile, "SPOT_CHECKS", 0):  # first and last rows only: row 60 is not compared
            hits = self.load().search("", target, 5, "vector")
        self.assertNotEqual(self.header()["build"], build)
        self.assertEqual(self.ids(hits), self.reference(target, 5))
        self.assert_scored(hits, [(score, row[0]) for score, row in
                                  embed.top_k(target, vectorstore.searchable(self.db, "synthetic"), 5)])

    def test_swapped_chunk_ids_never_name_the_wrong_window(self):
        self.load()
        self.wait_for_the_file_clock(self.data("ids"))
        ids = bytearray(self.data("ids").read_bytes())
        ten, fifty = slice(64 * 10, 64 * 11), slice(64 * 50, 64 * 51)
        ids[ten], ids[fifty] = ids[fifty], ids[ten]  # rows 10 and 50 name each other's window
        with open(self.data("ids"), "r+b") as handle:
            handle.write(ids)
        query = vectorstore.unpack(self.vectors[10][1]).tolist()
        with mock.patch.object(vectorfile, "SPOT_CHECKS", 0):  # first and last rows only: neither is compared
            hit = self.load().search("", query, 1, "vector")[0]
        self.assertEqual(hit.chunk_id, self.chunks[10][0])
        self.assertEqual(hit.text, self.chunks[10][5])

    def test_a_build_from_before_the_ids_file_gets_it_and_keeps_its_build(self):
        self.load()
        header = self.header()
        build = header["build"]
        self.data("ids").unlink()
        header["files"].pop("ids")
        self.files.header.write_text(json.dumps(header))
        query = self.query()
        self.assertEqual(self.ids(self.load().search("", query, 8, "vector")), self.reference(query, 8))
        self.assertEqual(self.header()["build"], build)  # not rebuilt: an ANN index of this build stays usable
        self.assertEqual(self.data("ids").stat().st_size, 120 * 64)
        self.assertEqual(self.data("ids").stat().st_mode & 0o077, 0)

    def test_an_older_build_put_back_with_its_header_is_never_used(self):
        import shutil

        self.load()
        saved = self.layout.root / "saved-index"
        shutil.copytree(self.files.folder, saved)  # copy2: sizes and modification times kept
        chunk = self.chunks[30][0]
        target = [self.rng.gauss(0, 1) for _ in range(DIM)]
        self.db.execute("UPDATE vectors SET vec = ? WHERE chunk_id = ?", (vectorstore.pack(target), chunk))
        self.load()
        shutil.rmtree(self.files.folder)
        shutil.copytree(saved, self.files.folder)
        hits = self.load().search("", target, 1, "vector")
        self.assertEqual(self.ids(hits), [chunk])
        self.assertAlmostEqual(hits[0].score, 1.0, places=6)

    def test_an_index_loaded_before_a_window_left_the_sweep_never_answers_with_it(self):
        index = self.load()
        query = vectorstore.unpack(self.vectors[9][1]).tolist()
        self.store([c for i, c in enumerate(self.chunks) if i != 9], [])
        hits = index.search("", query, 5, "vector")  # the mask is the old one: the database still decides
        self.assertNotIn(self.chunks[9][0], self.ids(hits))
        self.assertEqual(len(hits), 5)

    def test_a_header_that_disagrees_with_the_database_is_never_trusted(self):
        self.load()
        for change in ({"rows": 5000}, {"store_id": "someone-else"}, {"max_rowid": 10**9}, {"format": 99}):
            with self.subTest(change=change):
                header = self.header()
                header.update(change)
                self.files.header.write_text(json.dumps(header))
                self.assert_matches_reference()
                self.assertEqual(self.header()["rows"], 120)

    def test_a_truncated_matrix_is_rebuilt(self):
        self.load()
        with open(self.data("f32"), "r+b") as handle:
            handle.truncate(100)
        self.assert_matches_reference()

    def test_a_rewritten_vector_is_seen(self):
        self.load()
        chunk = self.reference(self.query(), 1)[0]
        self.db.execute("UPDATE vectors SET vec = ? WHERE chunk_id = ?", (vectorstore.pack([0.0] * DIM), chunk))
        target = [self.rng.gauss(0, 1) for _ in range(DIM)]
        self.db.execute("UPDATE vectors SET vec = ? WHERE chunk_id = ?", (vectorstore.pack(target), chunk))
        self.assertEqual(self.ids(self.load().search("", target, 1, "vector")), [chunk])

    def test_stale_rows_never_rank_and_come_back_when_current_again(self):
        chunks, vectors = self.chunks, self.vectors
        query = vectorstore.unpack(vectors[5][1]).tolist()
        self.assertEqual(self.ids(self.load().search("", query, 1, "vector")), [chunks[5][0]])
        self.store([c for i, c in enumerate(chunks) if i != 5], [])
        self.assertNotIn(chunks[5][0], self.ids(self.load().search("", query, 200, "vector")))
        self.store(chunks, [])
        self.assertEqual(self.ids(self.load().search("", query, 1, "vector")), [chunks[5][0]])

    def test_another_models_vectors_never_mix_in(self):
        chunks, _ = self.rows(120)
        other = [(chunk[0], vectorstore.pack([1.0] * DIM)) for chunk in chunks]
        vectorstore.add_vectors(self.db, "other-model", DIM, other, "2026-01-01T00:00:00+00:00")
        self.assert_matches_reference()
        self.assertEqual(len(self.load()), 120)


@unittest.skipUnless(HAS_NUMPY and HAS_FAISS, "the ANN index needs numpy and faiss (pip install 'bastion-agent[ann]')")
class AnnTests(SyntheticStore):
    def setUp(self):
        super().setUp()
        patcher = mock.patch.multiple(ann, MIN_ROWS=50, LAZY_ROWS=100_000)
        patcher.start()
        self.addCleanup(patcher.stop)
        self.chunks, self.vectors = self.rows(400)
        self.store(self.chunks, self.vectors)

    def claim_graph_rows(self, rows: int) -> None:
        """Make the derived header say the saved graph holds ``rows`` rows (0: none, so embed builds it again)."""
        files = vectorfile.Files.for_key(self.layout, "synthetic")
        header = vectorfile.read_header(files)
        header["ann_rows"] = rows
        write_json(files.header, header)

    def test_ann_is_used_above_the_threshold_and_exact_forces_the_scan(self):
        index = self.load()
        self.assertIsNotNone(index.ann)
        query = self.query()
        with mock.patch.object(ann.AnnIndex, "top", wraps=index.ann.top) as ann_top:
            approximate = index.search("", query, 5, "vector")
            self.assertEqual(ann_top.call_count, 1)
            exact = index.search("", query, 5, "vector", exact=True)
            self.assertEqual(ann_top.call_count, 1)
        self.assertEqual(self.ids(exact), self.reference(query, 5))
        self.assertEqual(self.ids(approximate), self.ids(exact))  # 400 rows: HNSW finds them all

    def test_a_one_off_search_scans_exactly_below_its_threshold_and_walks_the_graph_from_it(self):
        self.load()  # the graph is built
        query = self.query()
        with mock.patch.object(searcher, "ONE_OFF_ANN_ROWS", 401):
            one_off = self.load(one_off=True)
            self.assertIsNone(one_off.ann)  # FAISS is not even imported for it
            self.assertEqual(self.ids(one_off.search("", query, 5, "vector")), self.reference(query, 5))
            self.assertIsNotNone(self.load().ann)  # serve's load is unchanged
        with mock.patch.object(searcher, "ONE_OFF_ANN_ROWS", 400):
            self.assertIsNotNone(self.load(one_off=True).ann)

    def test_a_store_below_the_threshold_never_imports_faiss(self):
        """Importing FAISS costs 0.2 s of CPU: embed and search of a small store must not pay it."""
        self.store(*self.rows(10, start=400))
        script = ("import sys; from pathlib import Path; from bastion_agent import embed;"
                  " from bastion_agent.core.layout import Layout;"
                  " from bastion_agent.testing.search_manifest import fake_manifest, DIM;"
                  " layout = Layout(Path(sys.argv[1])); embed.refresh_derived(layout, fake_manifest());"
                  " index = embed.SearchIndex.load(fake_manifest(), layout);"
                  " index.search('', [1.0] * DIM, 5, 'vector'); index.close();"
                  " print(sorted(name for name in sys.modules if name.split('.')[0] == 'faiss'))")
        result = subprocess.run([sys.executable, "-c", script, str(self.layout.root)], capture_output=True,
                                text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
        self.assertEqual((result.returncode, result.stderr), (0, ""))
        self.assertEqual(result.stdout.strip(), "[]")

    def test_the_beam_widens_with_the_graph_through_the_measured_points(self):
        self.assertEqual(ann.beam_for(400), ann.EXPANSION_SEARCH)
        self.assertEqual(ann.beam_for(ann.BEAM_ROWS), ann.EXPANSION_SEARCH)
        self.assertEqual(ann.beam_for(1_000_000), ann.BEAM_AT_MILLION)  # a million windows needed 960 for 0.95
        sizes = [ann.BEAM_ROWS, 200_000, 500_000, 1_000_000, 5_000_000]
        beams = [ann.beam_for(rows) for rows in sizes]
        self.assertEqual(beams, sorted(set(beams)))  # wider for every larger graph
        header = {"ann_rows": 1_000_000, "ann_graph": ann.GRAPH}
        self.assertEqual(ann.expansion_for(header), ann.BEAM_AT_MILLION)

    def test_below_the_threshold_no_ann_is_built(self):
        with mock.patch.object(ann, "MIN_ROWS", 10_000):
            self.assertIsNone(self.load().ann)
        self.assertEqual(list(self.layout.root.glob("index/*.faiss")), [])

    def test_the_index_grows_with_new_vectors_and_rows_it_lacks_are_scanned(self):
        self.load()
        chunks, vectors = self.rows(450)
        self.store(chunks, vectors)
        query = vectorstore.unpack(vectors[440][1]).tolist()
        with mock.patch.object(ann, "LAZY_ROWS", 0):  # the index is not extended: the new rows are scanned
            self.assertEqual(self.ids(self.load().search("", query, 1, "vector")), [chunks[440][0]])
        index = self.load()
        self.assertEqual(index.ann.rows, 450)
        self.assertEqual(self.ids(index.search("", query, 1, "vector")), [chunks[440][0]])

    def test_a_search_never_waits_for_an_index_being_built(self):
        self.load()
        chunks, vectors = self.rows(450)
        self.store(chunks, vectors)
        files = vectorfile.Files.for_key(self.layout, "synthetic")
        query = vectorstore.unpack(vectors[445][1]).tolist()
        with vectorfile.writer_lock(vectorfile.Files(files.folder, files.name + "-ann")):  # a builder at work
            index = self.load()
            self.assertEqual(index.ann.rows, 400)  # the saved index; the 50 new rows are scanned
            self.assertEqual(self.ids(index.search("", query, 1, "vector")), [chunks[445][0]])

    def test_stale_vectors_never_come_from_the_ann_index(self):
        self.load()
        query = vectorstore.unpack(self.vectors[7][1]).tolist()
        self.store(self.chunks[8:], [])
        hits = self.load().search("", query, 50, "vector")
        self.assertEqual(len(hits), 50)
        self.assertFalse({c[0] for c in self.chunks[:8]} & set(self.ids(hits)))

    def test_a_corrupt_index_falls_back_to_the_scan_and_is_rebuilt(self):
        self.load()
        (path,) = self.layout.root.glob("index/*.faiss")
        path.write_bytes(b"garbage" * 100)
        query = self.query()
        with mock.patch.object(ann, "LAZY_ROWS", 0):
            self.assertEqual(self.ids(self.load().search("", query, 5, "vector")), self.reference(query, 5))
        embed.refresh_derived(self.layout, fake_manifest())
        index = self.load()
        self.assertEqual(index.ann.rows, 400)
        self.assertEqual(self.ids(index.search("", query, 5, "vector")), self.reference(query, 5))

    def test_an_index_built_with_other_settings_is_searched_with_the_widest_beam_until_embed_rebuilds_it(self):
        self.load()
        files = vectorfile.Files.for_key(self.layout, "synthetic")
        header = vectorfile.read_header(files)
        self.assertEqual(header["ann_graph"], ann.GRAPH)
        del header["ann_calibration"]  # a graph no build measured (an older header): no beam is known for it
        write_json(files.header, header)
        query = self.query()
        newer = {"GRAPH": "faiss-hnsw-fp16:16:40", "CONNECTIVITY": 16, "EXPANSION_SEARCH": 64}
        with mock.patch.multiple(ann, LAZY_ROWS=0, **newer):
            index = self.load()  # a search never rebuilds it: the saved graph answers, with the widest beam
            self.assertEqual(index.ann.expansion, ann.WIDEST_EXPANSION_SEARCH)
            self.assertEqual(self.ids(index.search("", query, 5, "vector")), self.reference(query, 5))
            embed.refresh_derived(self.layout, fake_manifest())
            header = vectorfile.read_header(files)
            self.assertEqual(header["ann_graph"], "faiss-hnsw-fp16:16:40")
            index = self.load()
            self.assertEqual(index.ann.index.hnsw.nb_neighbors(0), 32)  # 2 x 16 links
            self.assertEqual(index.ann.expansion, header["ann_calibration"]["beam"])  # the beam measured for it
            self.assertEqual(index.ann.rows, 400)
            self.assertEqual(self.ids(index.search("", query, 5, "vector")), self.reference(query, 5))

    def test_a_graph_of_the_earlier_construction_beam_is_rebuilt_whole_with_the_current_one(self):
        files = vectorfile.Files.for_key(self.layout, "synthetic")
        earlier = ann.graph_name(ann.CONNECTIVITY, 40)  # FAISS's default construction beam, the graphs built before
        self.assertNotEqual(earlier, ann.GRAPH)
        with mock.patch.multiple(ann, EXPANSION_ADD=40, GRAPH=earlier):
            self.load()
        header = vectorfile.read_header(files)
        self.assertEqual((header["ann_graph"], header["ann_calibration"]["graph"]), (earlier, earlier))
        with mock.patch.object(ann, "LAZY_ROWS", 0):  # until the next embed, a search walks it (never rebuilds it)
            self.assertEqual(self.load().ann.index.hnsw.efConstruction, 40)
        query = self.query()
        embed.refresh_derived(self.layout, fake_manifest())
        header = vectorfile.read_header(files)
        self.assertEqual(header["ann_graph"], ann.graph_name(ann.CONNECTIVITY, ann.EXPANSION_ADD))
        self.assertEqual((header["ann_calibration"]["graph"], header["ann_rows"]), (ann.GRAPH, 400))
        self.assertIsNotNone(header["ann_calibration"]["build_seconds"])  # built, not only measured again
        index = self.load()
        self.assertEqual(index.ann.index.hnsw.efConstruction, ann.EXPANSION_ADD)
        self.assertGreaterEqual(ann.EXPANSION_ADD, 2 * ann.CONNECTIVITY)  # the beam fills a bottom-layer node's links
        self.assertEqual(self.ids(index.search("", query, 5, "vector")), self.reference(query, 5))

    def test_a_graph_of_the_earlier_library_is_scanned_exactly_until_embed_replaces_it(self):
        self.load()
        files = vectorfile.Files.for_key(self.layout, "synthetic")
        header = vectorfile.read_header(files)
        (graph,) = self.layout.root.glob("index/*.faiss")
        old = graph.with_suffix(".usearch")
        graph.rename(old)  # what an earlier version left: usearch's file, and a header without "ann_graph"
        del header["ann_graph"]
        write_json(files.header, header)
        query = self.query()
        with mock.patch.object(ann, "LAZY_ROWS", 0):
            index = self.load()
            self.assertIsNone(index.ann)
            self.assertEqual(self.ids(index.search("", query, 5, "vector")), self.reference(query, 5))
        embed.refresh_derived(self.layout, fake_manifest())
        self.assertEqual(vectorfile.read_header(files)["ann_graph"], ann.GRAPH)
        self.assertFalse(old.exists())
        self.assertEqual(self.load().ann.rows, 400)

    def test_a_graph_that_does_not_match_the_header_answers_exactly_and_is_rebuilt(self):
        self.load()
        files = vectorfile.Files.for_key(self.layout, "synthetic")
        for claimed in (399, 401):  # the graph holds 400 rows; a header that says otherwise is not believed
            with self.subTest(claimed=claimed):
                self.claim_graph_rows(claimed)
                query = self.query()
                with mock.patch.object(ann, "LAZY_ROWS", 0):
                    self.assertEqual(self.ids(self.load().search("", query, 5, "vector")), self.reference(query, 5))
                embed.refresh_derived(self.layout, fake_manifest())
                self.assertEqual(vectorfile.read_header(files)["ann_rows"], 400)
                self.assertEqual(self.load().ann.index.ntotal, 400)

    def test_the_graph_is_readable_by_its_owner_only_even_while_it_is_written(self):
        self.load()
        (graph,) = self.layout.root.glob("index/*.faiss")
        stale = graph.with_name(graph.name + ".tmp")
        stale.write_bytes(b"left by a build that died")
        stale.chmod(0o666)
        self.claim_graph_rows(0)
        faiss = ann.faiss_or_none()
        write = faiss.write_index
        modes = []

        def write_index(index, path):
            modes.append(os.stat(path).st_mode & 0o777)  # what another user could have read meanwhile
            write(index, path)

        previous = os.umask(0)
        try:
            with mock.patch.object(faiss, "write_index", write_index):
                embed.refresh_derived(self.layout, fake_manifest())
        finally:
            os.umask(previous)
        self.assertEqual(modes, [0o600])
        self.assertEqual(graph.stat().st_mode & 0o777, 0o600)
        self.assertFalse(stale.exists())

    def test_a_small_graph_built_twice_from_the_same_rows_is_the_same(self):
        self.load()
        (graph,) = self.layout.root.glob("index/*.faiss")
        builds = []
        for _ in range(2):
            builds.append(graph.read_bytes())
            self.claim_graph_rows(0)
            self.load()
        builds.append(graph.read_bytes())
        self.assertEqual(len(set(builds)), 1)


class KeywordTests(SyntheticStore):
    HOSTILE = ['"', '""', "AND", "OR NOT", "NEAR(a b, 2)", "text:window", "*", "^window", "a -b", "(((",
               "'; DROP TABLE chunks; --", "window*", "{text}: x", "\u0000", "🙂 ünïcödé"]

    def setUp(self):
        super().setUp()
        self.chunks, self.vectors = self.rows(30)
        self.chunks[4] = (*self.chunks[4][:5], "maintenance of pump ZX-4471-B failed on Tuesday")
        self.store(self.chunks, self.vectors)

    def test_keyword_mode_finds_an_exact_code_without_a_query_vector(self):
        hits = self.load().search("ZX-4471-B", None, 3, "keyword")
        self.assertEqual(hits[0].chunk_id, self.chunks[4][0])
        self.assertEqual(len(hits), 1)

    def test_stemming_matches_word_forms(self):
        hits = self.load().search("pumps failing", None, 3, "keyword")
        self.assertEqual(hits[0].chunk_id, self.chunks[4][0])

    def test_hostile_query_syntax_is_plain_text(self):
        index = self.load()
        for query in self.HOSTILE:
            with self.subTest(query=query):
                for mode in ("keyword", "hybrid"):
                    index.search(query, self.query(), 5, mode)
        self.assertEqual(vectorstore.count(self.db, "SELECT COUNT(*) FROM chunks"), 30)

    def test_query_words_are_quoted_phrases(self):
        self.assertEqual(keyword.fts_query('say "hi" AND NEAR(x)'), '"say" OR "hi" OR "and" OR "near" OR "x"')
        self.assertEqual(keyword.fts_query("?!"), "")

    def test_hybrid_adds_a_window_only_keywords_find(self):
        target = self.chunks[4][0]
        query = vectorstore.unpack(self.vectors[9][1]).tolist()
        index = self.load()
        vector_hits = self.ids(index.search("ZX-4471-B", query, 10, "vector"))
        self.assertNotIn(target, vector_hits)
        hybrid = index.search("ZX-4471-B", query, 10, "hybrid")
        self.assertIn(target, self.ids(hybrid))
        self.assertEqual(self.ids(hybrid)[0], vector_hits[0])  # the query's own window (cosine 1) stays first
        found = hybrid[self.ids(hybrid).index(target)]
        self.assertEqual(found.keyword_rank, 1)
        self.assertGreater(found.vector_rank, 10)  # far down the vector side, brought up by its exact words
        self.assertGreaterEqual(found.keyword_relevance, 50)  # its own side's evidence is kept
        self.assertLess(found.relevance, found.keyword_relevance)  # the blend, by which it ranks below

    def test_keyword_index_follows_the_chunks(self):
        self.store(self.chunks[:4] + self.chunks[5:], [])
        self.assertEqual(self.load().search("ZX-4471-B", None, 3, "keyword"), [])
        self.store(self.chunks, [])
        self.assertEqual(self.ids(self.load().search("ZX-4471-B", None, 3, "keyword")), [self.chunks[4][0]])

    def test_rank_fusion_for_rankings_without_scores_sums_reciprocal_ranks(self):
        fused = keyword.fuse([["a", "b"], ["b", "c"]], 3, k=60)
        self.assertEqual([chunk for _, chunk in fused], ["b", "a", "c"])
        self.assertAlmostEqual(fused[0][0], 1 / 62 + 1 / 61)

    def test_an_older_store_gets_its_keyword_index_on_upgrade(self):
        path = self.layout.root / "old.db"
        with mock.patch.object(vectorstore, "MIGRATIONS", vectorstore.MIGRATIONS[:2]):
            old = vectorstore.connect(path, create=True)
            vectorstore.replace_chunks(old, [StoredChunk(*c) for c in self.chunks], [])
            old.close()
        with mock.patch.object(vectorstore, "MIGRATIONS", vectorstore.MIGRATIONS[:3]):  # m004 forgets old ids
            upgraded = vectorstore.connect(path, create=False)
        self.addCleanup(upgraded.close)
        self.assertEqual([hit.chunk_id for hit in keyword.top(upgraded, "ZX-4471-B", 3)], [self.chunks[4][0]])


class ParaphraseTests(SanitizedStoreCase):
    """Fusion over a real chunk + embed with the stub's bag of words, which behaves like a (poor) embedding."""

    size, overlap = 64, 8
    INVOICES = "When you have to settle an invoice, you have to transfer the amount to the bank before the due date."
    docs = {
        INVOICES: ["billing/invoices.txt"],
        "Do I know? I do.": ["notes/doubt.txt"],
        "The ferry crossed to the island at dawn when the tide was high.": ["travel/ferry.txt"],
        "The orchard grew pears and plums.": ["garden/orchard.txt"],
    }
    QUERY = "when do I have to pay the bill"

    def setUp(self):
        super().setUp()
        self.stub = StubServer().start()
        self.addCleanup(self.stub.stop)
        self.chunk()
        self.embed_with(self.stub)

    def search(self, mode, k=4, url=None):
        with clean_env(EMBED_URL=url or self.stub.url):
            return embed.search(self.manifest(), self.layout, self.QUERY, k, mode=mode)

    def test_a_query_sharing_only_stop_words_ranks_the_document_where_the_vector_side_does(self):
        invoices = self.ids[self.INVOICES]
        self.assertEqual(self.search("vector")[0].doc, invoices)
        db = vectorstore.connect(self.layout.vectors_db, create=False)
        self.addCleanup(db.close)
        unpruned = db.execute("SELECT c.doc FROM chunks_fts f JOIN chunks c ON c.rowid = f.rowid"
                              " WHERE chunks_fts MATCH ? ORDER BY f.rank", (keyword.fts_query(self.QUERY),)).fetchall()
        self.assertNotEqual(unpruned[0][0], invoices)  # the trap: BM25 over every word prefers "Do I? I do."
        self.assertEqual(self.search("keyword"), [])  # only stop words and words no window holds
        hybrid = self.search("hybrid")
        self.assertEqual([h.doc for h in hybrid], [h.doc for h in self.search("vector")])

    def test_json_carries_each_sides_score_and_rank(self):
        with clean_env(EMBED_URL=self.stub.url):
            code, out, err = run_cli("search", self.manifest_path, "orchard pears ferry", "--out", self.out, "--json")
        self.assertEqual((code, err), (0, ""))
        hits = json.loads(out)
        fields = {"score", "relevance", "vector_score", "vector_rank", "keyword_score", "keyword_rank"}
        self.assertTrue(all(fields <= set(hit) for hit in hits))
        both = [hit for hit in hits if hit["vector_rank"] and hit["keyword_rank"]]
        self.assertEqual(both[0]["paths"], ["garden/orchard.txt"])
        self.assertEqual(hits[0]["paths"], ["garden/orchard.txt"])
        self.assertEqual(sorted(hit["vector_rank"] for hit in hits if hit["vector_rank"]),
                         list(range(1, 1 + sum(1 for hit in hits if hit["vector_rank"]))))
        for hit in hits:
            self.assertIsInstance(hit["relevance"], int)
            self.assertTrue(0 <= hit["relevance"] <= 100)
            self.assertEqual(hit["keyword_score"] is None, hit["keyword_rank"] is None)
            self.assertEqual(hit["vector_score"] is None, hit["vector_rank"] is None)
        self.assertEqual([hit["score"] for hit in hits], sorted((hit["score"] for hit in hits), reverse=True))

    def test_relevance_is_bounded_and_means_the_same_across_modes(self):
        for mode in ("vector", "keyword", "hybrid"):
            with self.subTest(mode=mode):
                with clean_env(EMBED_URL=self.stub.url):
                    hits = embed.search(self.manifest(), self.layout, "orchard pears plums", 4, mode=mode)
                self.assertEqual(hits[0].paths, ["garden/orchard.txt"])
                self.assertTrue(all(0 <= hit.relevance <= 100 for hit in hits))
                self.assertGreaterEqual(hits[0].relevance, 50)  # every word of the query is in the window
        with clean_env(EMBED_URL=self.stub.url):
            weak = embed.search(self.manifest(), self.layout, "orchard violins trumpets drums", 1, mode="keyword")
        self.assertLess(weak[0].relevance, hits[0].relevance)  # one word of four matched reads lower

    def test_relevance_never_rises_down_the_list_in_any_mode(self):
        """Regression: hybrid showed 85, then 100, then 76 (the stronger side of each, ranked by the blend)."""
        for query in ("orchard pears ferry", "ferry island invoice bank", "plums tide dawn"):
            for mode in ("vector", "keyword", "hybrid"):
                with self.subTest(query=query, mode=mode), clean_env(EMBED_URL=self.stub.url):
                    code, out, err = run_cli("search", self.manifest_path, query, "--out", self.out, "--json",
                                             "--mode", mode, "-k", "4")
                    hits = json.loads(out)
                    shown = [hit["relevance"] for hit in hits]
                    self.assertEqual(shown, sorted(shown, reverse=True))
                    self.assertTrue(all(hit["mode"] == mode and hit["fallback"] is False for hit in hits))
                    side = {"vector": "vector_relevance", "keyword": "keyword_relevance"}.get(mode)
                    for hit in hits:  # each side's own evidence stays, and it is what a single mode shows
                        if side:
                            self.assertEqual(hit["relevance"], hit[side])
                        else:
                            self.assertIsNotNone(hit["keyword_relevance"])

    def test_hybrid_relevance_is_the_blend_the_order_follows(self):
        from bastion_agent.searching import fusion

        # a: strong words, far meaning; b: close meaning, no words. Ranked b, a; the stronger sides read 50, 100.
        fused = fusion.fuse([(0.9, "b"), (0.55, "a")], [keyword.KeywordHit("a", 9.0, 1.0)], {}, 0.5, 2)
        self.assertEqual([item.chunk_id for item in fused], ["b", "a"])
        self.assertEqual([item.relevance for item in fused], [48, 46])
        self.assertEqual([(item.vector_relevance, item.keyword_relevance) for item in fused], [(80, 0), (10, 100)])

    @unittest.skipUnless(HAS_NUMPY, "numpy is not installed")
    def test_numpy_and_pure_python_calibrate_and_fuse_alike(self):
        with clean_env(EMBED_URL=self.stub.url):
            manifest = self.manifest()
            vector = embed.embed_query(manifest, "orchard pears ferry")
        answers = []
        for use_numpy in (True, False):
            index = embed.SearchIndex.load(manifest, self.layout, use_numpy=use_numpy)
            self.addCleanup(index.close)
            answers.append((round(index.cosine_floor(), 9),
                            [(h.chunk_id, h.relevance) for h in index.search("orchard pears ferry", vector, 4, "hybrid")]))
        self.assertEqual(answers[0], answers[1])
        self.assertTrue(0 < answers[0][0] < 1)

    def test_cli_answers_by_keyword_when_the_model_server_is_down(self):
        with clean_env(EMBED_URL=closed_port_url()):
            code, out, err = run_cli("search", self.manifest_path, "orchard pears", "--out", self.out, "--json")
        self.assertEqual(code, 0)
        self.assertEqual(len(err.strip().splitlines()), 1)
        self.assertIn("answered with keyword search instead of hybrid search", err)
        hits = json.loads(out)
        self.assertEqual(hits[0]["paths"], ["garden/orchard.txt"])
        self.assertIsNone(hits[0]["vector_rank"])
        self.assertTrue(all(hit["mode"] == "keyword" and hit["fallback"] is True for hit in hits))
        with clean_env(EMBED_URL=closed_port_url()):  # vector mode too: a script can tell it did not answer
            code, out, err = run_cli("search", self.manifest_path, "orchard pears", "--out", self.out, "--json",
                                     "--mode", "vector")
        self.assertEqual(code, 0)
        self.assertIn("instead of vector search", err)
        self.assertTrue(json.loads(out) and all(hit["fallback"] is True for hit in json.loads(out)))
        with clean_env(EMBED_URL=closed_port_url()):
            code, out, err = run_cli("search", self.manifest_path, "orchard pears", "--out", self.out)
        self.assertEqual(code, 0)
        self.assertIn("relevance", out.splitlines()[0])

    def test_the_library_search_still_raises_without_the_fallback(self):
        from bastion_agent.core.errors import ModelServerError

        with self.assertRaises(ModelServerError):
            self.search("hybrid", url=closed_port_url())
        with clean_env(EMBED_URL=closed_port_url()):
            result = embed.answer(self.manifest(), self.layout, "orchard", 2, mode="vector")
        self.assertEqual((result.mode, result.fallback), ("keyword", "keyword"))
        self.assertIn("instead of vector search", result.notice)


class KeywordPruningTests(SyntheticStore):
    """Which words the keyword side searches, on a store where one word is everywhere."""

    def setUp(self):
        super().setUp()
        texts = [f"common word filler{i % 50} window {i}" for i in range(400)]
        texts[17] = "common word zebra crossing"
        texts[18] = "common crossing guard"
        self.chunks, self.vectors = self.rows(400, text=lambda i: texts[i])
        self.store(self.chunks, self.vectors)

    def test_a_word_in_most_windows_is_not_searched(self):
        vocabulary = keyword.Vocabulary(self.db)
        self.addCleanup(vocabulary.close)
        self.assertEqual(vocabulary.windows, 400)
        self.assertEqual([t.phrase for t in vocabulary.terms("the common zebra crossing")], ['"zebra"', '"crossing"'])
        self.assertEqual(keyword.top(self.db, "common", 5, vocabulary), [])

    def test_word_forms_count_once_and_evidence_is_bounded(self):
        hits = keyword.top(self.db, "zebra zebras crossing crossings", 5)
        self.assertEqual([h.chunk_id for h in hits][:2], [self.chunks[17][0], self.chunks[18][0]])
        self.assertTrue(all(0 < h.evidence <= 1 for h in hits))
        self.assertGreater(hits[0].evidence, hits[1].evidence)

    def test_only_the_rarest_words_are_ranked_when_the_budget_is_small(self):
        with mock.patch.object(keyword, "RANK_BUDGET", 3):
            vocabulary = keyword.Vocabulary(self.db)
            self.addCleanup(vocabulary.close)
            terms = vocabulary.terms("zebra crossing filler7")
            self.assertEqual(keyword.plan(terms)[0], '"zebra" OR "crossing"')
            hits = keyword.top(self.db, "filler7 window", 5, vocabulary)  # both too common: bounded AND
        self.assertTrue(hits)
        self.assertTrue(all(" filler7 " in self.text_of(h.chunk_id) for h in hits))

    def text_of(self, chunk_id):
        return self.db.execute("SELECT text FROM chunks WHERE chunk_id = ?", (chunk_id,)).fetchone()[0] + " "


def reference_windows(text: str, size: int, overlap: int) -> list[tuple[int, int, int]]:
    """The contract's windows (docs/contract.md), walking every token: what the fast chunker must reproduce."""
    spans = [match.span() for match in embed.TOKEN_RE.finditer(text)]
    result, first = [], 0
    while spans:
        last = min(first + size, len(spans)) - 1
        result.append((0 if first == 0 else spans[first][0], len(text) if last == len(spans) - 1 else spans[last][1],
                       last - first + 1))
        if last == len(spans) - 1:
            return result
        first += size - overlap
    return result


class FastChunkerTests(unittest.TestCase):
    """The chunk stage cuts windows one regular-expression match per step; it must equal the token walk."""

    PIECES = ["a", "bb", "ccc", " ", "  ", "\n", ",", ".", "é", "ß", "_", "1", "-", "'", "\t", "日本", "🙂", '"', "x y"]

    def test_windows_equal_the_token_walk_on_random_texts(self):
        rng = random.Random(11)
        for _ in range(3000):
            text = "".join(rng.choice(self.PIECES) for _ in range(rng.randint(0, 80)))
            size = rng.randint(1, 12)
            overlap = rng.randint(0, size - 1)
            got = [(w.start, w.end, w.tokens) for w in embed.windows(text, size, overlap)]
            self.assertEqual(got, reference_windows(text, size, overlap), (text, size, overlap))

    def test_windows_longer_than_one_piece_equal_the_token_walk(self):
        rng = random.Random(12)
        for _ in range(300):
            text = "".join(rng.choice(self.PIECES) for _ in range(rng.randint(0, 900)))
            size = rng.randint(20, 150)
            overlap = rng.choice([0, 1, size // 2, size - 1, rng.randint(0, size - 1)])
            got = [(w.start, w.end, w.tokens) for w in embed.windows(text, size, overlap)]
            self.assertEqual(got, reference_windows(text, size, overlap), (size, overlap))

    def test_chunk_ids_of_non_ascii_and_ascii_text_follow_the_definition(self):
        for text in ("plain ascii words here and more", "Grüße aus Köln, 日本語 🙂 and more words"):
            rows = embed.chunk_document("d" * 64, text, 3, 1)
            for row in rows:
                self.assertEqual(row.chunk_id, sha256_hex("d" * 64 + "\0" + text[row.start : row.end]))


class PipelineModeTests(SanitizedStoreCase):
    """Modes through ``embed.search`` and the CLI, over a real chunk + embed."""

    docs = {
        "The rocket engine burns liquid oxygen and kerosene; part RK-77 is its turbopump.": ["space/engine.txt"],
        "Sourdough bread needs flour, water, salt and a lively starter culture.": ["kitchen/bread.txt"],
        "The violin has four strings tuned in fifths and is played with a bow.": ["music/violin.md"],
    }

    def setUp(self):
        super().setUp()
        self.stub = StubServer().start()
        self.addCleanup(self.stub.stop)
        self.sweep()

    def sweep(self, docs=None):
        if docs is not None:
            self.restock(docs)
        self.chunk()
        self.embed_with(self.stub)

    def search(self, query, mode, k=10, url=None, exact=False):
        with clean_env(EMBED_URL=url or self.stub.url):
            return embed.search(self.manifest(), self.layout, query, k, mode=mode, exact=exact)

    def test_stale_vectors_never_appear_in_any_mode(self):
        bread = "Sourdough bread needs flour, water, salt and a lively starter culture."
        bread_doc = self.ids[bread]
        for mode in ("vector", "keyword", "hybrid"):
            self.assertIn(bread_doc, {h.doc for h in self.search("flour water salt starter", mode)})
        self.sweep({t: p for t, p in self.docs.items() if t != bread})
        for mode in ("vector", "keyword", "hybrid"):
            for exact in (False, True):
                with self.subTest(mode=mode, exact=exact):
                    hits = self.search("flour water salt starter", mode, exact=exact)
                    self.assertNotIn(bread_doc, {h.doc for h in hits})
                    self.assertTrue(hits or mode == "keyword")

    def test_keyword_mode_needs_no_model_server(self):
        hits = self.search("RK-77", "keyword", url=closed_port_url())
        self.assertEqual(hits[0].paths, ["space/engine.txt"])

    def test_mode_and_exact_through_the_cli(self):
        with clean_env(EMBED_URL=closed_port_url()):
            code, out, err = run_cli("search", self.manifest_path, "RK-77", "--mode", "keyword", "--out", self.out, "--json")
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(json.loads(out)[0]["paths"], ["space/engine.txt"])
        for mode in ("vector", "hybrid"):
            with self.subTest(mode=mode), clean_env(EMBED_URL=self.stub.url):
                code, out, err = run_cli("search", self.manifest_path, "violin strings fifths", "--mode", mode,
                                         "--exact", "--out", self.out, "--json", "-k", "1")
                self.assertEqual((code, err), (0, ""))
                self.assertEqual(json.loads(out)[0]["paths"], ["music/violin.md"])

    def test_an_unknown_mode_is_refused(self):
        from bastion_agent.commands.cli import build_parser

        with self.assertRaises(SystemExit) as caught, mock.patch("sys.stderr", new_callable=io.StringIO) as err:
            build_parser().parse_args(["search", str(self.manifest_path), "x", "--mode", "fuzzy"])
        self.assertEqual(caught.exception.code, 2)
        self.assertIn("--mode", err.getvalue())

    def test_the_manifests_search_mode_is_the_default(self):
        write_manifest(self.tmp, size=8, overlap=2, extra='\n[search]\nmode = "keyword"\n')
        with clean_env(EMBED_URL=closed_port_url()):  # keyword: no server needed
            code, out, err = run_cli("search", self.manifest_path, "RK-77", "--out", self.out, "--json")
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(json.loads(out)[0]["paths"], ["space/engine.txt"])


class QueryFloorTests(SyntheticStore):
    """A query in another language scores below every window-to-window cosine.

    E5 puts a query further from every window than windows are from each
    other (``query: `` against ``passage: ``), and a German question about
    English pages further still: against the store's floor (window against
    window) its best window had evidence 0, relevance 0 in vector mode, and
    hybrid ranked by the keyword side alone. The floor is the query's own now.
    """

    def setUp(self):
        super().setUp()
        base = [self.rng.gauss(0, 1) for _ in range(DIM)]
        noises = [[self.rng.gauss(0, 1) for _ in range(DIM)] for _ in range(60)]
        chunks, vectors = self.rows(60)
        # Windows that all look alike (as E5's do: window-to-window cosines about 0.9) ...
        vectors = [(chunk, vectorstore.pack([b + 0.25 * n for b, n in zip(base, noise)]))
                   for (chunk, _), noise in zip(vectors, noises)]
        self.store(chunks, vectors)
        self.target = chunks[17][0]
        # ... and a query near one of them but far from all (about 0.7 to it, 0.5 to the rest).
        away = [self.rng.gauss(0, 1) for _ in range(DIM)]
        self.vector = [b + 1.5 * n + 0.8 * a for b, n, a in zip(base, noises[17], away)]

    def test_the_best_window_of_a_distant_query_is_not_shown_as_unrelated(self):
        index = self.load()
        self.assertGreater(min(index._query_cosines(self.vector, 48)), 0)
        self.assertLess(index.query_floor(self.vector), index.cosine_floor())
        hits = index.search("", self.vector, 3, "vector")
        self.assertEqual(hits[0].chunk_id, self.target)
        self.assertGreater(hits[0].relevance, 0)
        self.assertGreater(hits[0].relevance, hits[1].relevance)
        hybrid = index.search("nothing in any window", self.vector, 3, "hybrid")
        self.assertEqual((hybrid[0].chunk_id, hybrid[0].relevance > 0), (self.target, True))

    @unittest.skipUnless(HAS_NUMPY, "numpy is not installed (pip install 'bastion-agent[fast]')")
    def test_numpy_and_pure_python_give_the_same_query_floor(self):
        fast, pure = self.load(use_numpy=True), self.load(use_numpy=False)
        self.assertAlmostEqual(fast.query_floor(self.vector), pure.query_floor(self.vector), places=9)


class VectorTiesTests(SanitizedStoreCase):
    """Windows whose vectors are the same score the same: they rank by chunk id, not by where their rows lie."""

    def setUp(self):
        chance = random.Random()  # fresh words each run: fresh chunk ids, so the rows' order is not theirs
        self.shared = " ".join("".join(chance.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(9)) for _ in range(8))
        self.docs = {f"{self.shared} tail{n} {'x' * (n + 1)} end": [f"doc{n}.txt"] for n in range(6)}
        super().setUp()

    def test_tied_windows_rank_by_chunk_id_whatever_their_rows_order(self):
        from bastion_agent.testing.stub_server import bag_of_words

        self.chunk()
        with StubServer() as stub:
            self.embed_with(stub)
        index = embed.SearchIndex.load(self.manifest(), self.layout)
        self.addCleanup(index.close)
        for exact in (False, True):  # both scan a store this small; the graph's candidates reach the same sort
            hits = index.search(self.shared, bag_of_words(self.shared, index.dim), 6, "vector", exact=exact)
            self.assertEqual(len({hit.score for hit in hits}), 1)  # one score: six ties
            self.assertEqual([hit.text for hit in hits], [self.shared] * 6)
            self.assertEqual([hit.chunk_id for hit in hits], sorted(hit.chunk_id for hit in hits))


if __name__ == "__main__":
    unittest.main()
