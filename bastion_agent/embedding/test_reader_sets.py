"""The reader-set keyword indexes kept in ``vectors.db``: each holds exactly its set's windows, follows every
change by the work that change needs, and a hidden or removed window is never in a set it does not belong to."""

from __future__ import annotations

import json
import random
import unittest
from pathlib import Path

from bastion_agent.embedding import reader_sets, vectorstore
from bastion_agent.testing.testsupport import TempFolder


class ReaderSetStore(TempFolder, unittest.TestCase):
    def setUp(self):
        self.db = vectorstore.connect(self.make_tmp() / "vectors.db", create=True)
        self.addCleanup(self.db.close)
        self.rng = random.Random()
        self.docs: dict[str, str] = {}

    def add_document(self, groups: list[str], texts: list[str]) -> str:
        doc = "%064x" % self.rng.getrandbits(256)
        with vectorstore.transaction(self.db):
            self.db.execute("INSERT INTO documents (doc, paths, groups) VALUES (?, ?, ?)",
                            (doc, json.dumps([f"{groups[0]}/{doc[:8]}.txt"]), json.dumps(sorted(groups))))
            for idx, text in enumerate(texts):
                self.db.execute('INSERT INTO chunks (chunk_id, doc, idx, start, "end", text) VALUES (?, ?, ?, 0, ?, ?)',
                                ("%064x" % self.rng.getrandbits(256), doc, idx, len(text), text))
        return doc

    def kept(self) -> dict[str, set[str]]:
        """Each kept set's groups -> the texts of the windows its FTS5 index matches for ``*`` words (all)."""
        found = {}
        for groups, in self.db.execute("SELECT groups FROM keyword_sets"):
            table, rows = reader_sets.members(self.db, groups)
            indexed = {row for (row,) in self.db.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH 'w*'")}
            self.assertEqual(indexed, set(rows))
            found[groups] = {text for (text,) in self.db.execute(
                f"SELECT c.text FROM chunks c WHERE c.rowid IN (SELECT row FROM keyword_set_rows"
                f" WHERE set_id = (SELECT set_id FROM keyword_sets WHERE groups = ?))", (groups,))}
        return found

    def word(self) -> str:
        return "w" + "".join(self.rng.choice("bcdfghjklmnpqrstvz") for _ in range(10))


class ReaderSetTests(ReaderSetStore):
    def test_hostile_a_hidden_window_is_never_in_a_set_that_does_not_hold_its_groups(self):
        secret, public = self.word(), self.word()
        self.add_document(["hr"], [f"{secret} one", f"{secret} two"])
        self.add_document(["public"], [f"{public} notice"])
        self.add_document(["hr", "public"], [f"{public} {secret} shared"])
        reader_sets.refresh(self.db)
        kept = self.kept()
        self.assertEqual(kept[json.dumps(["public"])], {f"{public} notice"})
        self.assertEqual(kept[json.dumps(["hr"])], {f"{secret} one", f"{secret} two"})
        self.assertEqual(kept[json.dumps(["hr", "public"])], {f"{public} {secret} shared"})
        table = reader_sets.members(self.db, json.dumps(["public"]))[0]
        self.assertEqual(self.db.execute(f"SELECT count(*) FROM {table} WHERE {table} MATCH ?",
                                         (secret,)).fetchone()[0], 0)

    def test_a_refresh_does_the_work_of_the_change_and_no_more(self):
        for _ in range(3):
            self.add_document(["hr"], [f"{self.word()} case"] * 2)
            self.add_document(["public"], [f"{self.word()} page"])
        self.assertEqual(reader_sets.refresh(self.db), {"added": 9, "removed": 0, "merged": 0})
        self.assertEqual(reader_sets.refresh(self.db), {"added": 0, "removed": 0, "merged": 0})
        late = self.add_document(["public"], [f"{self.word()} late"])
        self.assertEqual(reader_sets.refresh(self.db), {"added": 1, "removed": 0, "merged": 0})
        with vectorstore.transaction(self.db):  # relabelled: its window moves from public to hr
            self.db.execute("UPDATE documents SET groups = ? WHERE doc = ?", (json.dumps(["hr"]), late))
        self.assertEqual(reader_sets.refresh(self.db), {"added": 1, "removed": 1, "merged": 1})
        self.assertNotIn("late", " ".join(self.kept()[json.dumps(["public"])]))

    def test_a_window_deleted_by_anything_leaves_its_set_at_once(self):
        gone = self.word()
        self.add_document(["hr"], [f"{self.word()} stays"])
        doc = self.add_document(["public"], [f"{gone} goes", f"{self.word()} stays"])
        reader_sets.refresh(self.db)
        with vectorstore.transaction(self.db):
            self.db.execute("DELETE FROM chunks WHERE doc = ? AND idx = 0", (doc,))
        self.assertIsNone(reader_sets.members(self.db, json.dumps(["public"])))  # not merged: not to be read
        self.assertEqual(reader_sets.merge(self.db), 1)
        table, rows = reader_sets.members(self.db, json.dumps(["public"]))
        self.assertEqual(len(rows), 1)
        self.db.execute(f"CREATE VIRTUAL TABLE temp.terms USING fts5vocab(main, '{table}', 'row')")
        self.assertEqual(self.db.execute("SELECT count(*) FROM temp.terms WHERE term = ?", (gone,)).fetchone()[0], 0)
        self.kept()

    def test_a_removed_windows_words_leave_the_files_bytes(self):
        gone = self.word()
        self.add_document(["hr"], [f"{self.word()} stays"])
        doc = self.add_document(["public"], [f"{gone} goes", f"{self.word()} stays"])
        reader_sets.refresh(self.db)
        path = Path(self.db.execute("PRAGMA database_list").fetchone()[2])
        vectorstore.checkpoint(self.db)
        tail = gone[4:].encode()  # an index stores a term after the prefix it shares with the one before
        self.assertIn(tail, path.read_bytes())
        with vectorstore.transaction(self.db):
            self.db.execute("DELETE FROM chunks WHERE doc = ? AND idx = 0", (doc,))
        reader_sets.merge(self.db)  # what prune and an erased document do, before the WAL is emptied
        vectorstore.scrub(self.db)
        for name in (path, path.with_name(path.name + "-wal")):
            if name.exists():
                self.assertNotIn(tail, name.read_bytes(), name)

    def test_one_reader_set_keeps_no_index(self):
        self.add_document(["default"], [f"{self.word()} one"])
        self.add_document(["default"], [f"{self.word()} two"])
        reader_sets.refresh(self.db)
        self.assertEqual(self.kept(), {})
        other = self.add_document(["hr"], [f"{self.word()} three"])
        reader_sets.refresh(self.db)
        self.assertEqual(len(self.kept()), 2)
        with vectorstore.transaction(self.db):
            self.db.execute("DELETE FROM chunks WHERE doc = ?", (other,))
            self.db.execute("DELETE FROM documents WHERE doc = ?", (other,))
        self.assertEqual(reader_sets.refresh(self.db)["dropped"], 2)
        self.assertEqual(self.kept(), {})
        self.assertEqual(self.db.execute("SELECT count(*) FROM sqlite_master WHERE name GLOB 'keyword_set_[0-9]*'"
                                         " AND type IN ('table', 'trigger')").fetchone()[0], 0)


if __name__ == "__main__":
    unittest.main()
