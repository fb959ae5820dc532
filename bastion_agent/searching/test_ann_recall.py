"""Recall as a setting: the graph's beam measured at build, below-target graphs never answer, the figures reported."""

from __future__ import annotations

import json
import math
import random
import unittest
from types import SimpleNamespace
from unittest import mock

from bastion_agent import embed
from bastion_agent.config import manifest as manifest_module
from bastion_agent.core.layout import Layout, ensure_private_dir, write_json
from bastion_agent.core.records import DocumentRow, StoredChunk
from bastion_agent.embedding import ann, ann_recall, vectorfile, vectorstore
from bastion_agent.searching import searcher
from bastion_agent.testing.search_manifest import fake_manifest
from bastion_agent.testing.serve_store import Store, request, start
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import TempFolder, clean_env, run_cli, sha256_hex

HAS_ANN = vectorfile.numpy_or_none() is not None and ann.available()
SKIP = "the ANN index needs numpy and faiss (pip install 'bastion-agent[ann]')"
DIM = 48
# A sparse graph (4 links, construction beam 8): random vectors in 48 dimensions
# then need a wide beam for a high recall, which a small store shows in milliseconds.
SPARSE = {"CONNECTIVITY": 4, "EXPANSION_ADD": 8, "GRAPH": "faiss-hnsw-fp16:4:8"}


def isotropic(rng: random.Random, n: int) -> list[list[float]]:
    """Random directions in DIM dimensions: the hardest vectors for a graph (no structure to follow)."""
    return [[rng.gauss(0, 1) for _ in range(DIM)] for _ in range(n)]


def flat(rng: random.Random, n: int, spread: int = 3) -> list[list[float]]:
    """Random directions within ``spread`` of the DIM dimensions: few directions to tell apart, an easy graph."""
    return [[rng.gauss(0, 1) for _ in range(spread)] + [0.0] * (DIM - spread) for _ in range(n)]


@unittest.skipUnless(HAS_ANN, SKIP)
class RecallTests(TempFolder, unittest.TestCase):
    """Stores written directly into vectors.db; the ANN threshold lowered so a few thousand rows get a graph."""

    def setUp(self):
        self.rng = random.Random()  # fresh values each run: the behaviour must hold for any of them
        patcher = mock.patch.multiple(ann, MIN_ROWS=50, LAZY_ROWS=100_000)
        patcher.start()
        self.addCleanup(patcher.stop)

    def make_store(self, vectors: list[list[float]]) -> Layout:
        layout = Layout(self.make_tmp() / "out")
        ensure_private_dir(layout.root)
        db = vectorstore.connect(layout.vectors_db, create=True)
        self.addCleanup(db.close)
        chunks = [StoredChunk(sha256_hex(f"chunk {i}"), sha256_hex(f"doc {i}"), 0, 0, 10, f"window {i}")
                  for i in range(len(vectors))]
        vectorstore.replace_chunks(db, chunks, [DocumentRow(c.doc, json.dumps([f"{i}.txt"])) for i, c in enumerate(chunks)])
        vectorstore.add_vectors(db, "synthetic", DIM, [(c.chunk_id, vectorstore.pack(v)) for c, v in zip(chunks, vectors)],
                                "2026-01-01T00:00:00+00:00")
        self.db = db
        return layout

    def build(self, layout: Layout, target: float = 0.95) -> dict:
        embed.refresh_derived(layout, fake_manifest(dim=DIM, ann_recall=target))
        return vectorfile.read_header(vectorfile.Files.for_key(layout, "synthetic"))

    def load(self, layout: Layout, target: float = 0.95) -> searcher.SearchIndex:
        index = searcher.SearchIndex.load(fake_manifest(dim=DIM, ann_recall=target), layout)
        self.addCleanup(index.close)
        return index

    def found_share(self, index, queries, k: int = 10) -> float:
        """Recall@k of ``index`` against the contract's exact scan, over queries the store does not hold."""
        found = 0
        for query in queries:
            exact = [row[0] for _, row in embed.top_k(query, vectorstore.searchable(self.db, "synthetic"), k)]
            found += len(set(exact) & {hit.chunk_id for hit in index.search("", query, k, "vector")})
        return found / (k * len(queries))

    def test_a_store_whose_vectors_need_a_wider_beam_gets_one(self):
        with mock.patch.multiple(ann, **SPARSE):
            easy = self.build(self.make_store(flat(self.rng, 1500)))["ann_calibration"]
            hard_layout = self.make_store(isotropic(self.rng, 1500))
            hard = self.build(hard_layout)["ann_calibration"]
            index = self.load(hard_layout)
            share = self.found_share(index, isotropic(self.rng, 30))
        self.assertEqual(easy["beam"], ann_recall.BEAMS[0])  # three directions: the narrowest beam finds them
        self.assertGreater(hard["beam"], easy["beam"])
        for measured in (easy, hard):
            self.assertTrue(measured["reached"])
            self.assertGreaterEqual(measured["recall"], 0.95 + ann_recall.MARGIN)
            self.assertEqual(measured["queries"], ann_recall.SAMPLE_QUERIES)
        self.assertEqual((index.ann.expansion, index.vector_search.beam), (hard["beam"], hard["beam"]))
        self.assertEqual(index.vector_search.recall, hard["recall"])
        self.assertGreaterEqual(share, 0.9)  # new queries, not the sample: the beam holds beyond what chose it

    def test_a_higher_target_gets_a_wider_beam(self):
        layout = self.make_store(isotropic(self.rng, 1500))
        with mock.patch.multiple(ann, **SPARSE):
            low = self.build(layout, 0.6)["ann_calibration"]
            high = self.build(layout, 0.98)["ann_calibration"]  # another target: measured again, not rebuilt
        self.assertEqual((low["target"], high["target"]), (0.6, 0.98))
        if high["graph"] == low["graph"]:  # the same graph: only a wider beam finds more
            self.assertLess(low["beam"], high["beam"])
        else:  # no beam of the first graph reached 0.98: the denser one was built, and may need less
            self.assertEqual(high["graph"], ann.graph_name(ann.DENSER_CONNECTIVITY, ann.DENSER_EXPANSION_ADD))
        self.assertTrue(high["reached"])
        self.assertGreaterEqual(high["recall"], 0.98)

    def test_when_no_beam_reaches_the_target_the_denser_graph_is_built(self):
        layout = self.make_store(isotropic(self.rng, 1500))
        with mock.patch.multiple(ann, **SPARSE), mock.patch.object(ann_recall, "BEAMS", (32,)):
            header = self.build(layout, 0.9)
            index = self.load(layout, 0.9)
        denser = ann.graph_name(ann.DENSER_CONNECTIVITY, ann.DENSER_EXPANSION_ADD)
        self.assertEqual((header["ann_graph"], header["ann_calibration"]["graph"]), (denser, denser))
        self.assertTrue(header["ann_calibration"]["reached"])
        self.assertEqual(index.ann.index.hnsw.nb_neighbors(0), 2 * ann.DENSER_CONNECTIVITY)
        self.assertEqual(index.vector_search.method, "ann")

    def test_a_graph_that_cannot_reach_the_target_is_not_used_and_search_says_so(self):
        layout = self.make_store(isotropic(self.rng, 1500))
        with mock.patch.multiple(ann, DENSER_CONNECTIVITY=5, DENSER_EXPANSION_ADD=8, **SPARSE), \
                mock.patch.object(ann_recall, "BEAMS", (32,)):
            header = self.build(layout, 0.99)
            index = self.load(layout, 0.99)
        self.assertFalse(header["ann_calibration"]["reached"])
        self.assertLess(header["ann_calibration"]["recall"], 0.99)
        self.assertIsNone(index.ann)
        self.assertEqual((index.vector_search.method, index.vector_search.recall), ("exact", 1.0))
        self.assertIn("below [search] ann_recall = 0.99", index.vector_search.notice)
        self.assertEqual(self.found_share(index, isotropic(self.rng, 5)), 1.0)

    def test_a_header_below_the_target_answers_exactly_until_embed_measures_it_again(self):
        layout = self.make_store(isotropic(self.rng, 400))
        files = vectorfile.Files.for_key(layout, "synthetic")
        header = self.build(layout)
        header["ann_calibration"]["recall"] = 0.8  # what a graph that lost recall would say
        write_json(files.header, header)
        with mock.patch.object(ann_recall, "measure", wraps=ann_recall.measure) as measure:
            index = self.load(layout)
            self.assertEqual(measure.call_count, 0)  # a search never measures: it answers by the scan
            self.assertIsNone(index.ann)
            self.assertIn("measured recall@10 is 0.800", index.vector_search.notice)
            self.build(layout)
            self.assertEqual(measure.call_count, 1)
        self.assertGreaterEqual(vectorfile.read_header(files)["ann_calibration"]["recall"], 0.95)
        self.assertEqual(self.load(layout).vector_search.method, "ann")

    def test_a_header_whose_measurement_makes_no_sense_is_not_believed(self):
        layout = self.make_store(isotropic(self.rng, 400))
        files = vectorfile.Files.for_key(layout, "synthetic")
        header = self.build(layout)
        for change in ({"beam": 10**9}, {"beam": 0}, {"recall": 7.0}, {"recall": "high"}, {"target": 1.5}, {"beam": None}):
            with self.subTest(change=change):
                forged = json.loads(json.dumps(header))
                forged["ann_calibration"].update(change)
                write_json(files.header, forged)
                index = self.load(layout)
                self.assertEqual(index.ann.expansion, ann.beam_for(400))  # the rule for a graph no build measured
                self.assertIsNone(index.vector_search.recall)

    def test_a_graph_measured_on_the_earlier_sample_answers_with_its_beam_until_embed_measures_it_again(self):
        layout = self.make_store(isotropic(self.rng, 400))
        files = vectorfile.Files.for_key(layout, "synthetic")
        header = self.build(layout)
        self.assertEqual(header["ann_calibration"]["sample"], ann_recall.SAMPLE_METHOD)
        old_beam = ann_recall.BEAMS[self.rng.randrange(len(ann_recall.BEAMS))]
        del header["ann_calibration"]["sample"]  # what a header of the earlier measurement holds
        header["ann_calibration"]["beam"] = old_beam
        write_json(files.header, header)
        self.assertEqual(self.load(layout).ann.expansion, old_beam)  # believed: searches use it meanwhile
        with mock.patch.object(ann_recall, "measure", wraps=ann_recall.measure) as measure:
            again = self.build(layout)
            self.assertEqual(measure.call_count, 1)
            self.build(layout)
            self.assertEqual(measure.call_count, 1)  # measured once, then current
        self.assertEqual(again["ann_calibration"]["sample"], ann_recall.SAMPLE_METHOD)

    def test_a_raised_target_is_not_promised_by_a_graph_measured_for_a_lower_one(self):
        layout = self.make_store(isotropic(self.rng, 400))
        files = vectorfile.Files.for_key(layout, "synthetic")
        header = self.build(layout, 0.9)
        header["ann_calibration"]["recall"] = 0.93  # reached 0.9 (with its margin), short of 0.97
        write_json(files.header, header)
        self.assertEqual(self.load(layout, 0.9).vector_search.method, "ann")
        self.assertEqual(self.load(layout, 0.97).vector_search.method, "exact")

    def test_the_measurement_is_sampled_not_a_scan_of_every_row_per_beam(self):
        layout = self.make_store(isotropic(self.rng, 1500))
        with mock.patch.multiple(ann, **SPARSE), \
                mock.patch.object(ann_recall, "thresholds", wraps=ann_recall.thresholds) as truth, \
                mock.patch.object(ann_recall, "recall_at", wraps=ann_recall.recall_at) as walks:
            measured = self.build(layout)["ann_calibration"]
        self.assertEqual(truth.call_count, 1)  # one exact pass for the whole sample, whatever the beams tried
        self.assertEqual(len(truth.call_args.args[2]), ann_recall.SAMPLE_QUERIES)
        self.assertGreater(measured["beam"], ann_recall.BEAMS[0])
        self.assertLessEqual(walks.call_count, (ann_recall.BEAMS.index(measured["beam"]) + 1) // 2 + 2)  # two rungs at a time
        tried = sorted(call.args[6] for call in walks.call_args_list)
        narrower = [beam for beam in tried if beam < measured["beam"]]
        self.assertTrue(narrower)  # a narrower beam was tried and fell short
        self.assertEqual(ann_recall.BEAMS[ann_recall.BEAMS.index(measured["beam"]) - 1], max(narrower))

    def test_the_build_measures_on_questions_not_boilerplate(self):
        text = [self.rng.gauss(0, 1) for _ in range(DIM)]
        plain = self.rng.randrange(1500, 2000)
        vectors = isotropic(self.rng, plain) + [[x + self.rng.gauss(0, 0.2) for x in text] for _ in range(400)]
        layout = self.make_store(vectors)
        with mock.patch.object(ann_recall, "thresholds", wraps=ann_recall.thresholds) as truth:
            measured = self.build(layout)["ann_calibration"]
        positions = list(truth.call_args.args[2])
        self.assertEqual(len(positions), ann_recall.SAMPLE_QUERIES)
        self.assertEqual(measured["queries"], ann_recall.SAMPLE_QUERIES)
        self.assertFalse([p for p in positions if p >= plain])  # rows are stored in order: the copies come last

    def test_the_ladder_search_finds_the_narrowest_beam_that_reaches_the_goal(self):
        beams = ann_recall.BEAMS
        for _ in range(20):
            cut = self.rng.randrange(len(beams) + 1)  # beams from index ``cut`` on reach the goal (none when past the end)
            asked = []

            def recall_of(beam):
                asked.append(beam)
                return 0.99 if beams.index(beam) >= cut else 0.5

            beam, recall = ann_recall.smallest_beam(beams, 10**9, 0.96, recall_of)
            self.assertEqual((beam, recall), (beams[min(cut, len(beams) - 1)], 0.99 if cut < len(beams) else 0.5))
            self.assertEqual(len(asked), len(set(asked)))  # no beam walked twice
            self.assertLessEqual(len(asked), (min(cut, len(beams) - 1) + 1) // 2 + 2)
            self.assertLessEqual(max(asked), beams[min(cut + 1, len(beams) - 1)])  # never far above the answer

    def test_an_unchanged_graph_is_not_measured_again_and_a_grown_one_is(self):
        layout = self.make_store(isotropic(self.rng, 400))
        self.build(layout)
        with mock.patch.object(ann_recall, "measure", wraps=ann_recall.measure) as measure:
            self.build(layout)
            self.assertEqual(measure.call_count, 0)
            more = isotropic(self.rng, 60)  # 15 % more rows
            chunks = [(sha256_hex(f"more {i}"), vector) for i, vector in enumerate(more)]
            vectorstore.add_vectors(self.db, "synthetic", DIM, [(c, vectorstore.pack(v)) for c, v in chunks],
                                    "2026-01-01T00:00:00+00:00")
            header = self.build(layout)
            self.assertEqual(measure.call_count, 1)
        self.assertEqual(header["ann_calibration"]["rows"], 460)


def memory_view(vectors, stale=None):
    """A vector file's view over rows held in memory: what the measurement reads of a store."""
    import numpy as np

    matrix = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1)
    return SimpleNamespace(np=np, matrix=matrix, rows=len(matrix), inverse=(1 / np.maximum(norms, 1e-12)).astype(np.float32),
                           stale=None if stale is None else np.asarray(stale, dtype=bool))


def graph_over(view, links: int = 4, construction: int = 8):
    """A sparse graph over ``view``'s rows, built on one thread."""
    import faiss

    graph = ann.new_graph(faiss, DIM, links, construction)
    with mock.patch.object(ann, "PARALLEL_ADD_ROWS", 10**9):
        ann.add_rows(faiss, graph, view, 0)
    return graph


class CountingGraph:
    """A graph that counts the queries walked through it."""

    def __init__(self, index):
        self.index, self.ntotal, self.walked = index, index.ntotal, 0

    def search(self, queries, count, params=None):
        self.walked += len(queries)
        return self.index.search(queries, count, params=params)


@unittest.skipUnless(HAS_ANN, SKIP)
class SampleTests(unittest.TestCase):
    """What the measurement's queries stand for: questions, not boilerplate, as far from their rows as the store says."""

    def setUp(self):
        self.rng = random.Random()

    def boilerplate_store(self, plain: int, copies: int):
        """``plain`` random rows, then ``copies`` near copies of one text (a licence repeated across documents)."""
        text = [self.rng.gauss(0, 1) for _ in range(DIM)]
        repeated = [[x + self.rng.gauss(0, 0.2) for x in text] for _ in range(copies)]  # cosine about 0.98
        return isotropic(self.rng, plain) + repeated

    def test_boilerplate_is_left_out_of_the_sample_while_other_rows_suffice(self):
        plain = self.rng.randrange(1500, 2500)  # enough that the draw holds more than the sample's worth of them
        view = memory_view(self.boilerplate_store(plain, 600))
        drawn = ann_recall.sample(view, 2 * ann_recall.SAMPLE_QUERIES, seed=view.rows)
        import faiss

        graph = graph_over(view, 16, 64)
        copies, _ = ann_recall.survey(faiss, graph, view, drawn)
        self.assertEqual([int(c > ann_recall.BOILERPLATE) for c in copies], [int(p >= plain) for p in drawn])
        self.assertTrue(any(p >= plain for p in drawn))  # the draw held boilerplate ...
        positions, queries = ann_recall.held_out(faiss, graph, view, drawn)
        self.assertEqual(len(positions), ann_recall.SAMPLE_QUERIES)
        self.assertFalse(any(p >= plain for p in positions))  # ... and the sample none
        self.assertEqual(queries.shape, (ann_recall.SAMPLE_QUERIES, DIM))

    def test_a_store_of_little_but_boilerplate_tops_the_sample_up_with_it(self):
        import faiss

        plain = self.rng.randrange(20, 60)
        view = memory_view(self.boilerplate_store(plain, 900))
        drawn = ann_recall.sample(view, 2 * ann_recall.SAMPLE_QUERIES, seed=view.rows)
        positions, _ = ann_recall.held_out(faiss, graph_over(view, 16, 64), view, drawn)
        self.assertEqual(len(positions), ann_recall.SAMPLE_QUERIES)
        self.assertEqual(sum(p < plain for p in positions), sum(p < plain for p in drawn))  # every plain row drawn is kept

    def test_the_noise_puts_a_query_as_far_from_its_row_as_the_background_calls_for(self):
        import faiss
        import numpy as np

        shift = [abs(self.rng.gauss(3, 1)) for _ in range(DIM)]  # rows sharing one direction: a background cosine
        for vectors in (isotropic(self.rng, 800), [[x + s for x, s in zip(row, shift)] for row in isotropic(self.rng, 800)]):
            view = memory_view(vectors)
            drawn = ann_recall.sample(view, 2 * ann_recall.SAMPLE_QUERIES, seed=view.rows)
            graph = graph_over(view)
            copies, background = ann_recall.survey(faiss, graph, view, drawn)
            units = view.matrix * view.inverse[:, None]
            self.assertAlmostEqual(background, float(np.mean(units[drawn] @ units.T)), places=4)
            positions, queries = ann_recall.held_out(faiss, graph, view, drawn)
            own = np.sum(queries * units[positions], axis=1)
            wanted = background + ann_recall.REACH * (1 - background)
            self.assertLess(abs(float(np.median(own)) - wanted), 0.05)  # in 48 dimensions the noise is nearly orthogonal
        self.assertGreater(ann_recall.noise_for(0.0), ann_recall.noise_for(0.5))  # a tighter store: less noise

    def test_stale_rows_are_neither_copies_nor_background(self):
        import faiss
        import numpy as np

        vectors = self.boilerplate_store(300, 300)
        stale = [False] * 300 + [True] * 300  # the boilerplate was deleted since
        view = memory_view(vectors, stale)
        drawn = ann_recall.sample(view, 2 * ann_recall.SAMPLE_QUERIES, seed=view.rows)
        copies, background = ann_recall.survey(faiss, graph_over(view, 16, 64), view, drawn)
        self.assertTrue(all(p < 300 for p in drawn))
        self.assertLessEqual(int(copies.max()), ann_recall.BOILERPLATE)
        units = view.matrix[:300] * view.inverse[:300, None]
        self.assertAlmostEqual(background, float(np.mean(units[drawn] @ units.T)), places=4)

    def test_the_exact_pass_finds_each_querys_kth_best_over_current_rows_but_its_own(self):
        import numpy as np

        rows = self.rng.randrange(5000, 9000)
        stale = [self.rng.random() < 0.2 for _ in range(rows)]
        view = memory_view(isotropic(self.rng, rows), stale)
        positions = ann_recall.sample(view, ann_recall.SAMPLE_QUERIES, seed=self.rng.randrange(10**6))
        queries = ann_recall.questions_near(view, positions, seed=self.rng.randrange(10**6), noise=1.0)
        with mock.patch.object(ann_recall, "BLOCK_ROWS", 1024):  # several blocks
            floor = ann_recall.thresholds(view, queries, positions)
        scores = queries @ (view.matrix * view.inverse[:, None]).T
        scores[:, view.stale] = -np.inf
        scores[np.arange(len(positions)), positions] = -np.inf
        exact = -np.sort(-scores, axis=1)[:, ann_recall.K - 1]
        self.assertLess(float(np.max(np.abs(floor - exact))), 1e-5)
        self.assertGreater(len(set(np.round(floor, 4))), len(positions) // 2)  # a floor a query, not one for all

    def test_a_beam_short_of_the_goal_stops_early_and_a_kept_one_walks_every_query(self):
        import faiss

        view = memory_view(isotropic(self.rng, 1500))
        graph = graph_over(view)
        positions, queries = ann_recall.held_out(faiss, graph, view, ann_recall.sample(view, 2 * ann_recall.SAMPLE_QUERIES, view.rows))
        floor = ann_recall.thresholds(view, queries, positions)
        full = ann_recall.recall_at(faiss, graph, view, queries, positions, floor, 8)
        counting = CountingGraph(graph)
        short = ann_recall.recall_at(faiss, counting, view, queries, positions, floor, 8, goal=0.999)
        self.assertLess(full, 0.9)
        self.assertLess(short, 0.999)
        self.assertLess(counting.walked, len(positions))  # stopped: the goal was out of reach
        self.assertEqual(counting.walked % ann_recall.STEP, 0)
        counting = CountingGraph(graph)
        kept = ann_recall.recall_at(faiss, counting, view, queries, positions, floor, 1500, goal=0.5)
        self.assertEqual((counting.walked, kept), (len(positions), ann_recall.recall_at(
            faiss, graph, view, queries, positions, floor, 1500)))  # reached: walked in full, the same figure


@unittest.skipUnless(HAS_ANN, SKIP)
class ReportTests(TempFolder, unittest.TestCase):
    """The measured recall and beam, as ``search --json`` and ``/healthz`` show them."""

    TEXT = "Window {i} speaks of topic {t}: engines, bread, violins, budgets and rivers in turn {i}."

    def setUp(self):
        self.stub = StubServer().__enter__()
        self.addCleanup(self.stub.__exit__, None, None, None)
        patcher = mock.patch.multiple(ann, MIN_ROWS=20, LAZY_ROWS=100_000)
        patcher.start()
        self.addCleanup(patcher.stop)
        docs = {self.TEXT.format(i=i, t=i % 5): [f"d{i}.txt"] for i in range(60)}
        self.store = Store(self.make_tmp(), self.stub, docs)

    def test_search_json_reports_the_measured_recall_and_beam_and_stays_an_array(self):
        header = vectorfile.read_header(vectorfile.Files.for_key(self.store.layout, self.store.manifest().embed.vector_key))
        with clean_env(EMBED_URL=self.stub.url), mock.patch.object(searcher, "ONE_OFF_ANN_ROWS", 20):
            code, out, err = run_cli("search", self.store.manifest_path, "bread", "--json", "-k", "3",
                                     "--out", self.store.layout.root)
            exact = json.loads(run_cli("search", self.store.manifest_path, "bread", "--json", "--exact",
                                       "--out", self.store.layout.root)[1])
            keyword = json.loads(run_cli("search", self.store.manifest_path, "bread", "--json", "--mode", "keyword",
                                         "--out", self.store.layout.root)[1])
        self.assertEqual((code, err), (0, ""))
        hits = json.loads(out)
        self.assertIsInstance(hits, list)
        self.assertEqual(len(hits), 3)
        measured = header["ann_calibration"]
        for hit in hits:
            self.assertEqual((hit["vector_search"], hit["vector_recall"], hit["vector_beam"]),
                             ("ann", measured["recall"], measured["beam"]))
        self.assertEqual({(h["vector_search"], h["vector_recall"], h["vector_beam"]) for h in exact}, {("exact", 1.0, None)})
        self.assertNotIn("vector_search", keyword[0])  # keyword search has no vector side

    def test_healthz_reports_the_measured_recall_and_beam(self):
        server = start(self.store, self)
        health = request(server.url, path="/healthz")[2]
        header = vectorfile.read_header(vectorfile.Files.for_key(self.store.layout, self.store.manifest().embed.vector_key))
        measured = header["ann_calibration"]
        self.assertEqual(health["vector_search"], {"method": "ann", "recall": measured["recall"],
                                                   "beam": measured["beam"], "target": 0.95, "notice": None})

    def test_a_manifest_target_outside_its_range_is_refused_naming_the_key(self):
        for value in ("0.2", "1.0", "true", '"high"'):
            with self.subTest(value=value):
                text = self.store.manifest_path.read_text() + f"\n[search]\nann_recall = {value}\n"
                path = self.store.manifest_path.with_name("bad.toml")
                path.write_text(text)
                with self.assertRaises(manifest_module.ManifestError) as caught:
                    manifest_module.load(path)
                self.assertIn("[search] ann_recall must be a number from 0.5 to 0.999", str(caught.exception))
        path.write_text(self.store.manifest_path.read_text() + "\n[search]\nann_recall = 0.99\n")
        self.assertEqual(manifest_module.load(path).ann_recall, 0.99)


if __name__ == "__main__":
    unittest.main()
