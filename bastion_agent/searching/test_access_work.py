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
        """Make the kept reader-set indexes disagree with the windows, as a store read between a write and
        its refresh does (or one an older agent wrote): searches then build the sets themselves."""
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

        from bastion_agent.embedding.vectorstore import FTS_TOKENIZER
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
        self.assertEqual(index.visible(everyone).keyword.built_windows, 0)
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
