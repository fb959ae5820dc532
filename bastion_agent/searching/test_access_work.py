"""A caller's search and fetch do work bounded by what it may see: hidden windows holding the word add none.

Time is never asserted here. The work is: the SQLite virtual-machine steps
a search takes on the index's connection (a progress handler called at
every step), the windows the reader-set keyword indexes were built from,
and the hits. Two stores differ only in a word that every ``hr`` window
holds in one and none in the other; a ``public`` caller searching that word
must take the same number of steps in both (before the per-set indexes, the
walk over the word's posting list took one join step per ``hr`` window).
"""

from __future__ import annotations

import dataclasses
import json
import random
import string
import unittest

from bastion_agent import embed
from bastion_agent.config import manifest as manifest_module
from bastion_agent.core.layout import Layout
from bastion_agent.embedding.endpoint import EndpointConfig
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import (
    TempFolder,
    clean_env,
    label_documents,
    write_manifest,
    write_sanitized_store,
)

PUBLIC = frozenset({"public"})
HIDDEN_DOCS = 40


def fresh_word(rng: random.Random) -> str:
    """A word no text here holds by chance (letters only, so the Porter stemmer keeps it whole)."""
    return "zq" + "".join(rng.choice(string.ascii_lowercase) for _ in range(9)) + "x"


class HiddenWordStores(TempFolder, unittest.TestCase):
    """Two stores with the same ``public`` documents; every ``hr`` window holds ``word`` in one, ``other`` in
    the other."""

    def setUp(self):
        rng = random.Random()
        self.word, self.other, self.control = fresh_word(rng), fresh_word(rng), fresh_word(rng)
        self.swept: dict = {}  # each store's output folder -> (manifest path, its documents)
        self.stub = StubServer().start()
        self.addCleanup(self.stub.stop)
        public = {
            f"The {self.word} report for the {self.control} team lists the quarterly numbers, {self.word}_note.":
                ["public/report.txt"],
            "Office hours and holidays: the office closes on public holidays and weekends.": ["public/hours.txt"],
            "The cafeteria menu changes every Monday; vegetarian dishes are marked.": ["public/menu.txt"],
        }
        self.with_word = self.store(public, self.word, rng)
        self.without = self.store(public, self.other, rng)

    def store(self, public: dict, hidden_word: str, rng: random.Random):
        tmp = self.make_tmp()
        path = write_manifest(tmp, size=8, overlap=2)
        layout = Layout(tmp / "out")
        hidden = {f"Case {number} {rng.random():.6f}: {hidden_word} appears in the {hidden_word} file, "
                  f"again {hidden_word}_note and {hidden_word} for review.": [f"hr/case-{number}.txt"]
                  for number in range(HIDDEN_DOCS)}
        manifest = self.sweep(path, layout, {**public, **hidden})
        self.swept[layout.root] = (path, {**public, **hidden})
        index = embed.SearchIndex.load(manifest, layout, use_ann=False)
        self.addCleanup(index.close)
        return manifest, layout, index

    def sweep(self, path, layout: Layout, docs: dict, hidden_paths: tuple = ("hr/",)):
        """Write ``docs`` (``{text: [paths]}``) as sanitize would, labelled, then chunk and embed them."""
        from bastion_agent.chunking import chunker
        from bastion_agent.embedding import embed_stage

        write_sanitized_store(layout, docs)
        label_documents(layout, {path: (["hr"] if path.startswith(hidden_paths) else ["public"])
                                 for paths in docs.values() for path in paths})
        with clean_env(EMBED_URL=self.stub.url):
            manifest = manifest_module.load(path)
            chunker.run_chunk(manifest, layout)
            embed_stage.run_embed(manifest, layout)
        return manifest

    def unrefreshed(self, layout: Layout) -> None:
        """Make the kept reader-set indexes disagree with the windows, as in a store whose windows an older
        agent wrote: searches then build the sets themselves."""
        from bastion_agent.embedding import vectorstore

        db = vectorstore.connect(layout.vectors_db, create=False)
        try:
            db.execute("DELETE FROM keyword_set_rows WHERE (set_id, row) IN"
                       " (SELECT set_id, min(row) FROM keyword_set_rows GROUP BY set_id)")
        finally:
            db.close()

    def vector(self, query: str):
        from bastion_agent.testing.stub_server import bag_of_words

        return bag_of_words(query, 64)

    def steps(self, index, function) -> tuple[int, object]:
        """SQLite VM steps ``function()`` takes on ``index``'s connection, and what it returned."""
        count = [0]

        def step():
            count[0] += 1
            return 0

        index.db.set_progress_handler(step, 1)
        try:
            result = function()
        finally:
            index.db.set_progress_handler(None, 1)
        return count[0], result

    def search_steps(self, store, query: str, mode: str) -> tuple[int, list]:
        _, _, index = store
        vector = self.vector(query) if mode != "keyword" else None
        index.search("holidays", self.vector("holidays") if mode != "keyword" else None, 3, mode, groups=PUBLIC)
        steps, hits = self.steps(index, lambda: index.search(query, vector, 3, mode, groups=PUBLIC))
        return steps, [json.dumps(dataclasses.asdict(hit), sort_keys=True) for hit in hits]


class KeywordWorkTests(HiddenWordStores):
    def test_hidden_windows_holding_the_word_add_no_steps(self):
        for mode in ("keyword", "hybrid", "vector"):
            # one word; two; and one the tokenizer cuts in two (counted by highlight(), not the posting list)
            for query in (self.word, f"{self.word} report", f"{self.word}_note {self.control}"):
                with self.subTest(mode=mode, query=query):
                    seen, hits = self.search_steps(self.with_word, query, mode)
                    control, control_hits = self.search_steps(self.without, query, mode)
                    self.assertEqual(hits, control_hits)
                    self.assertEqual(seen, control)
                    if mode == "keyword":
                        self.assertTrue(hits and all('"public/report.txt"' in hit for hit in hits), hits)

    def test_the_hidden_set_is_never_indexed_for_a_caller_who_cannot_see_it(self):
        manifest, layout, _ = self.with_word
        self.unrefreshed(layout)  # the fallback: sets built by the search process itself
        index = embed.SearchIndex.load(manifest, layout, use_ann=False)
        self.addCleanup(index.close)
        index.search(self.word, None, 3, "keyword", groups=PUBLIC)
        public_windows = index.visible(PUBLIC).windows
        self.assertGreater(public_windows, 0)
        self.assertEqual(index.visible(PUBLIC).keyword.built_windows, public_windows)
        hr = frozenset({"hr"})
        hits = index.search(f"{self.word} case", None, 50, "keyword", groups=hr)
        self.assertTrue(hits and all(hit.paths[0].startswith("hr/") for hit in hits))
        self.assertEqual(index.visible(hr).keyword.built_windows, public_windows + index.visible(hr).windows)

    def test_scores_are_fts5s_bm25_over_the_callers_windows_only(self):
        import sqlite3

        from bastion_agent.embedding.vectorstore_schema import FTS_TOKENIZER
        from bastion_agent.searching import keyword_visible

        _, _, index = self.with_word
        visible = index.visible(PUBLIC)
        texts = index.db.execute(f"SELECT c.rowid, c.text FROM chunks c JOIN temp.{visible.table} v"
                                 " ON v.rowid = c.rowid").fetchall()
        alone = sqlite3.connect(":memory:")
        self.addCleanup(alone.close)
        alone.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, tokenize='{FTS_TOKENIZER}')")
        alone.executemany("INSERT INTO t(rowid, text) VALUES (?, ?)", texts)
        expected = alone.execute("SELECT rowid, -bm25(t) FROM t WHERE t MATCH ?", (f'"{self.word}"',)).fetchall()
        hits = keyword_visible.caller_top(index.db, self.word, 10, index.vocabulary(), visible)
        ids = dict(index.db.execute("SELECT chunk_id, rowid FROM chunks").fetchall())
        self.assertTrue(expected)
        self.assertEqual(len(hits), len(expected))
        scores = dict(expected)
        for hit in hits:
            self.assertAlmostEqual(hit.bm25, scores[ids[hit.chunk_id]], places=9)

    def test_a_caller_from_whom_nothing_is_hidden_builds_no_index_and_gets_the_whole_index_answer(self):
        _, _, index = self.with_word
        everyone = frozenset({"public", "hr"})
        query = f"{self.word} case report"
        mine = index.search(query, None, 10, "keyword", groups=everyone)
        sets = index._labels_of().keyword
        self.assertEqual((sets.built_windows, sets.kept_sets), (0, 0))  # no set index built, none read
        self.assertEqual(mine, index.search(query, None, 10, "keyword"))

    def test_a_reloaded_index_builds_the_sets_the_old_one_had_before_it_answers(self):
        manifest, layout, _ = self.with_word
        self.unrefreshed(layout)  # sets the store does not keep current are built in the search process
        index = embed.SearchIndex.load(manifest, layout, use_ann=False)
        self.addCleanup(index.close)
        index.search(self.word, None, 3, "keyword", groups=PUBLIC)
        fresh = embed.SearchIndex.load(manifest, layout, use_ann=False)
        self.addCleanup(fresh.close)
        fresh.warm_keyword_like(index)
        windows = fresh.visible(PUBLIC).windows
        self.assertEqual(fresh.visible(PUBLIC).keyword.built_windows, windows)
        hits = fresh.search(self.word, None, 3, "keyword", groups=PUBLIC)
        self.assertEqual(fresh.visible(PUBLIC).keyword.built_windows, windows)  # nothing built on the request
        self.assertEqual([hit.chunk_id for hit in hits],
                         [hit.chunk_id for hit in index.search(self.word, None, 3, "keyword", groups=PUBLIC)])
        untouched = embed.SearchIndex.load(manifest, layout, use_ann=False)
        self.addCleanup(untouched.close)
        untouched.warm_keyword_like(fresh)
        self.assertEqual(untouched._labels_of().keyword.built_windows, windows)  # hr was never built, so never carried


class KeptSetTests(HiddenWordStores):
    """The reader-set indexes embed keeps in ``vectors.db``: a new process builds nothing, and no change to the
    windows (a sweep, a relabel, a deletion, a write not yet refreshed) lets a kept set show what it should not."""

    def fresh(self, store):
        manifest, layout, _ = store
        index = embed.SearchIndex.load(manifest, layout, use_ann=False)
        self.addCleanup(index.close)
        return index

    def ranked(self, index, query: str, groups=PUBLIC, **options) -> list[tuple[str, float, list]]:
        return [(hit.chunk_id, round(hit.score, 9), hit.paths)
                for hit in index.search(query, None, 50, "keyword", groups=groups, **options)]

    def test_the_first_filtered_search_in_a_fresh_process_builds_nothing_and_hidden_windows_add_no_steps(self):
        counted = []
        for store in (self.with_word, self.without):
            index = self.fresh(store)
            index._labels_of()  # what loading reads (every window's set number), before the search is counted
            counted.append(self.steps(index, lambda index=index: self.ranked(index, self.word)))
            keyword = index.visible(PUBLIC).keyword
            self.assertEqual(keyword.built_windows, 0)  # no index built in this process
            self.assertEqual(keyword.kept_sets, 1)  # the public set, read as embed kept it; never hr's
            self.assertEqual(index.db.execute("SELECT count(*) FROM sqlite_temp_master WHERE name LIKE 'kw_set_%'")
                             .fetchone()[0], 0)
        (steps, hits), (control_steps, control_hits) = counted
        self.assertTrue(hits and all(paths == ["public/report.txt"] for _, _, paths in hits), hits)
        self.assertEqual(hits, control_hits)
        self.assertEqual(steps, control_steps)

    def test_kept_sets_answer_as_sets_built_from_the_current_windows_after_an_incremental_sweep(self):
        manifest, layout, _ = self.with_word
        path, docs = self.swept[layout.root]
        docs = dict(docs)
        moved = next(text for text, paths in docs.items() if paths == ["public/report.txt"])
        gone = next(text for text, paths in docs.items() if paths == ["hr/case-0.txt"])
        del docs[gone]
        added = f"A new {self.word} notice on the public board, {self.control} included."
        docs[added] = ["public/notice.txt"]
        self.sweep(path, layout, docs, hidden_paths=("hr/", "public/report.txt"))  # the report is hr's now
        kept = self.fresh(self.with_word)
        answer = self.ranked(kept, f"{self.word} {self.control}")
        self.assertEqual(kept.visible(PUBLIC).keyword.built_windows, 0)
        self.assertEqual({tuple(paths) for _, _, paths in answer}, {("public/notice.txt",)})
        self.unrefreshed(layout)
        built = self.fresh(self.with_word)
        self.assertEqual(self.ranked(built, f"{self.word} {self.control}"), answer)  # same scores: same statistics
        self.assertGreater(built.visible(PUBLIC).keyword.built_windows, 0)
        hr = self.ranked(kept, f"{self.word} {self.control}", groups=frozenset({"hr"}))
        self.assertIn(("public/report.txt",), {tuple(paths) for _, _, paths in hr})
        self.assertNotIn(("hr/case-0.txt",), {tuple(paths) for _, _, paths in hr})
        self.assertNotIn(moved, [text for (text,) in kept.db.execute(
            "SELECT c.text FROM chunks c JOIN keyword_set_rows r ON r.row = c.rowid JOIN keyword_sets s"
            " ON s.set_id = r.set_id WHERE s.groups = ?", (json.dumps(["public"]),))])

    def test_a_deleted_window_leaves_its_kept_set_and_a_window_not_yet_refreshed_is_never_missed(self):
        from bastion_agent.embedding import reader_sets, vectorstore

        manifest, layout, _ = self.with_word
        db = vectorstore.connect(layout.vectors_db, create=False)
        self.addCleanup(db.close)
        report = db.execute("SELECT doc FROM chunks WHERE text LIKE ?", (f"%{self.word} report%",)).fetchone()[0]
        db.execute("DELETE FROM chunks WHERE doc = ?", (report,))  # as prune or an erased document deletes
        index = self.fresh(self.with_word)
        self.assertEqual(self.ranked(index, self.word), [])
        self.assertGreater(index.visible(PUBLIC).keyword.built_windows, 0)  # not merged yet: built, not read
        self.assertEqual(reader_sets.merge(db), 1)
        index = self.fresh(self.with_word)
        self.assertEqual(self.ranked(index, self.word), [])
        self.assertEqual(index.visible(PUBLIC).keyword.built_windows, 0)
        table = reader_sets.members(db, json.dumps(["public"]))[0]
        db.execute(f"CREATE VIRTUAL TABLE temp.words USING fts5vocab(main, '{table}', 'row')")
        self.assertEqual(db.execute("SELECT count(*) FROM temp.words WHERE term = ?", (self.word,)).fetchone()[0], 0)
        db.execute("INSERT INTO chunks (chunk_id, doc, idx, start, \"end\", text) VALUES (?, ?, 0, 0, 9, ?)",
                   ("%064x" % random.getrandbits(256), report, f"late {self.word} window"))  # no refresh yet
        index = self.fresh(self.with_word)
        self.assertEqual(len(self.ranked(index, self.word)), 1)
        self.assertGreater(index.visible(PUBLIC).keyword.built_windows, 0)

    def test_a_document_relabelled_without_the_sets_is_never_shown_from_its_old_set(self):
        from bastion_agent.embedding import vectorstore

        db = vectorstore.connect(self.with_word[1].vectors_db, create=False)
        self.addCleanup(db.close)
        self.assertTrue(self.ranked(self.fresh(self.with_word), self.word))
        with vectorstore.transaction(db):  # a relabel by a writer that does not update the sets (an older agent)
            db.execute("UPDATE documents SET groups = ?, path_groups = ? WHERE paths = ?",
                       (json.dumps(["hr"]), json.dumps([["hr"]]), json.dumps(["public/report.txt"])))
        index = self.fresh(self.with_word)
        self.assertEqual(self.ranked(index, self.word), [])
        self.assertGreater(index.visible(PUBLIC).keyword.built_windows, 0)  # the kept public set no longer matches

    def test_a_dated_search_by_a_caller_with_every_group_builds_and_reads_no_set(self):
        from bastion_agent.core import dates
        from bastion_agent.embedding import vectorstore

        db = vectorstore.connect(self.with_word[1].vectors_db, create=False)
        with vectorstore.transaction(db):  # every document dated (the listing written here has no times)
            db.execute("UPDATE documents SET modified = (SELECT json_group_array('2026-01-02T03:04:05Z')"
                       " FROM json_each(documents.paths))")
        db.close()
        index = self.fresh(self.with_word)
        every_date = dates.date_range("1970-01-01", None)
        query = f"{self.word} case report"
        whole = self.ranked(index, query, groups=None)
        for groups in (None, frozenset({"public", "hr"})):
            with self.subTest(groups=groups):
                dated = self.ranked(index, query, groups=groups, dates=every_date)
                labels = index._labels_of()
                self.assertEqual((labels.keyword.built_windows, labels.keyword.kept_sets), (0, 0))
                self.assertEqual([(chunk, paths) for chunk, _, paths in dated],
                                 [(chunk, paths) for chunk, _, paths in whole])
                for (_, score, _), (_, expected, _) in zip(dated, whole):
                    self.assertAlmostEqual(score, expected, places=6)


class FetchWorkTests(HiddenWordStores):
    """MCP ``fetch`` of an id the caller may not see: the same answer after the same steps as an absent id."""

    def test_a_hidden_id_costs_what_an_absent_one_does(self):
        from bastion_agent.core.errors import BastionError
        from bastion_agent.serving import mcp_server, tokens

        manifest, layout, index = self.with_word
        tools = mcp_server.BastionTools(manifest, layout, EndpointConfig(url=self.stub.url))
        caller = tokens.Caller("reader", PUBLIC)
        hidden = index.db.execute("SELECT chunk_id FROM chunks WHERE text LIKE ? LIMIT 1",
                                  (f"%{self.word} file%",)).fetchone()[0]
        absent = "%064x" % random.getrandbits(256)
        visible = tools.search({"query": self.word, "mode": "keyword"}, caller)["hits"][0]["chunk_id"]
        tools.fetch({"chunk_id": visible}, caller)  # the caller's windows are loaded once, before counting
        service_index = tools.service().index
        answers = []
        for chunk in (hidden, absent, hidden, absent):
            def attempt(chunk=chunk):
                try:
                    tools.fetch({"chunk_id": chunk}, caller)
                except BastionError as exc:
                    return str(exc).replace(chunk, "ID")
                return "found"
            answers.append(self.steps(service_index, attempt))
        self.assertEqual(answers[0], answers[1])
        self.assertEqual(answers[0][1].count("no window ID in this sweep"), 1)
        self.assertEqual(answers[2], answers[3])
        self.assertEqual(tools.fetch({"chunk_id": hidden}, tokens.Caller("hr", frozenset({"hr"})))["chunk_id"], hidden)

    def test_id_tables_leave_with_their_callers(self):
        from bastion_agent.searching import visible

        _, _, index = self.with_word
        for number in range(visible.CACHED_CALLERS + 5):
            index.visible_ids(frozenset({"public", f"g{number}"}))
        tables = index.db.execute("SELECT count(*) FROM sqlite_temp_master WHERE type = 'table'"
                                  " AND name LIKE 'visible%_ids'").fetchone()[0]
        self.assertEqual(tables, visible.CACHED_CALLERS)


if __name__ == "__main__":
    unittest.main()
