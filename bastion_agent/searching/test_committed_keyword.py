"""A loaded index (serve's) answers keyword queries from what is committed, with no reload.

``serve --watch`` used to answer a new file's word only after it loaded the
index again: the keyword side remembered that the word was in no window.
Now the keyword statistics follow SQLite's commit count. Hostile first: a
caller who may not read every window must gain nothing from that, neither a
window nor a changed score, until its own share is read again at a reload.
"""

from __future__ import annotations

import random
import secrets
import sqlite3
import string
import unittest

from bastion_agent.searching import searcher
from bastion_agent.testing.labelled_docs import ENG_DOCS, GROUPS, HR_DOCS, SHARED, LabelledStore
from bastion_agent.testing.testsupport import label_documents

HR, ENG = frozenset({"hr"}), frozenset({"eng"})
AIMED_AT_HR = "salary review of Dana Quill pay band appraisal"


def fresh_word() -> str:
    """A word no store of this run holds (letters only: nothing the sanitizer would take for a secret)."""
    return "quor" + "".join(random.choice(string.ascii_lowercase) for _ in range(8))


class CommittedStore(LabelledStore):
    """HR's, engineering's and a shared document, chunked, labelled, embedded through the stub, and loaded."""

    def setUp(self):
        super().setUp()
        self.word = fresh_word()
        self.index = searcher.SearchIndex.load(self.manifest(), self.layout)
        self.addCleanup(self.index.close)

    def commit(self, text: str, path: str, groups: list[str]) -> None:
        """A later sweep adds ``text`` at ``path`` labelled ``groups``: chunked and embedded (committed)."""
        self.restock({**HR_DOCS, **ENG_DOCS, **SHARED, text: [path]})
        label_documents(self.layout, {**GROUPS, path: groups})
        self.chunk()
        self.embed_with(self.stub)

    def found(self, groups, query: str | None = None, k: int = 20) -> list:
        return self.index.search(query or self.word, None, k, "keyword", groups=groups)


class HiddenCommitTests(CommittedStore):
    docs = {**ENG_DOCS, **SHARED}  # at load, the engineering caller may read every window

    def test_a_filtered_callers_scores_do_not_move_with_a_hidden_window_committed_after_the_load(self):
        before = self.scores(ENG)
        self.assertTrue(before)  # the words are in engineering's windows: there are scores to compare
        self.commit(f"Payroll memo {secrets.token_hex(3)}: compiler review of the pay band, review, review.",
                    f"hr/memo-{secrets.token_hex(3)}.txt", ["hr"])
        self.assertEqual(self.scores(ENG), before)  # from ENG's reader sets as loaded, not chunks_fts

    def scores(self, groups) -> list:
        hits = self.index.search("compiler review", None, 10, "keyword", groups=groups)
        return [(hit.chunk_id, round(hit.score, 9), hit.relevance) for hit in hits]  # summed in another order

    def test_a_filtered_caller_learns_nothing_of_a_hidden_window_committed_after_the_load(self):
        self.assertTrue(self.index.visible(ENG).every_window)  # at load ENG may read every window: the shortcut
        self.assertEqual(self.found(ENG), [])
        vocabulary = self.index.vocabulary()
        self.assertEqual(vocabulary.frequencies.get(f'"{self.word}"'), 0)
        self.commit(f"Payroll memo: {self.word} salary review for Dana Quill, pay band appraisal.", "hr/memo.txt",
                    ["hr"])
        for query in (self.word, AIMED_AT_HR, "salary review", "compiler review"):
            with self.subTest(query=query):
                hits = self.found(ENG, query)
                self.assertFalse([hit for hit in hits if self.word in hit.text or "alar" in hit.text])
                self.assertTrue(self.docs_of(hits) <= {"eng", "all"}, self.docs_of(hits))
        # the store's statistics, which now count the hidden window, were neither read again nor used for ENG
        self.assertEqual(vocabulary.recounts, 0)
        self.assertEqual(vocabulary.frequencies.get(f'"{self.word}"'), 0)
        self.assertTrue(self.found(None))  # the caller with every group reads the commit at once
        self.assertEqual(vocabulary.recounts, 1)
        fresh = searcher.SearchIndex.load(self.manifest(), self.layout)  # a reload: each caller's new share
        self.addCleanup(fresh.close)
        self.assertFalse(fresh.search(self.word, None, 20, "keyword", groups=ENG))
        self.assertTrue(fresh.search(self.word, None, 20, "keyword", groups=HR))


class CommittedKeywordTests(CommittedStore):
    def test_a_word_committed_after_the_load_is_found_by_the_same_index(self):
        self.assertEqual(self.found(None), [])  # asked before the commit: its frequency (0) is remembered
        vocabulary = self.index.vocabulary()
        windows = vocabulary.windows
        self.commit(f"Engineering note: the {self.word} cache is flushed before each build.", "eng/cache.txt",
                    ["eng"])
        hits = self.found(None)
        self.assertEqual([self.word in hit.text for hit in hits], [True])
        self.assertIs(self.index.vocabulary(), vocabulary)  # the same index and cache: no reload
        self.assertEqual(vocabulary.recounts, 1)
        self.assertGreater(vocabulary.windows, windows)
        self.assertEqual([hit.chunk_id for hit in self.found(None)], [hit.chunk_id for hit in hits])
        self.assertEqual(vocabulary.recounts, 1)  # no commit since: the statistics are kept between queries

    def test_answers_match_a_fresh_load_after_the_commit(self):
        queries = (self.word, "review", "salary review compiler")
        for query in queries:  # asked before the commit: the window count and these words' counts are kept
            self.found(None, query)
        self.commit(f"Shared notice: the {self.word} review of every office is on Monday.", "all/notice.txt",
                    ["hr", "eng"])
        fresh = searcher.SearchIndex.load(self.manifest(), self.layout)
        self.addCleanup(fresh.close)
        for query in queries:
            with self.subTest(query=query):
                mine = [(hit.chunk_id, hit.score, hit.relevance) for hit in self.found(None, query)]
                theirs = [(hit.chunk_id, hit.score, hit.relevance)
                          for hit in fresh.search(query, None, 20, "keyword")]
                self.assertEqual(mine, theirs)


class SnapshotTests(CommittedStore):
    def test_a_commit_during_a_read_snapshot_is_seen_by_the_next_one_only(self):
        db = self.index.db
        with searcher.read_snapshot(db) as version:
            before = db.execute("SELECT count(*) FROM chunks").fetchone()[0]
            with sqlite3.connect(self.layout.vectors_db) as writer:
                writer.execute("DELETE FROM chunks WHERE rowid = (SELECT max(rowid) FROM chunks)")
            self.assertEqual(db.execute("SELECT count(*) FROM chunks").fetchone()[0], before)
            self.assertEqual(searcher.commits_seen(db), version)
        self.assertFalse(db.in_transaction)
        with searcher.read_snapshot(db) as later:
            self.assertNotEqual(later, version)
            self.assertEqual(db.execute("SELECT count(*) FROM chunks").fetchone()[0], before - 1)


if __name__ == "__main__":
    unittest.main()
