"""The records that cross stages, and the SQL and schemas made from their fields."""

import dataclasses
import sqlite3
import tempfile
import unittest
from pathlib import Path

from bastion_agent.core import records
from bastion_agent.core.records import DocumentRow, Hit, StoredChunk
from bastion_agent.embedding import vectorstore


class SqlByNameTests(unittest.TestCase):
    def test_a_record_goes_in_and_comes_back_by_column_name(self):
        db = sqlite3.connect(":memory:")
        db.execute('CREATE TABLE t (text TEXT, "end" INTEGER, start INTEGER, idx INTEGER, doc TEXT, chunk_id TEXT)')
        row = StoredChunk("c" * 64, "d" * 64, 2, 5, 9, "four")
        db.execute(records.insert_sql("t", StoredChunk), records.values(StoredChunk)(row))
        self.assertEqual(StoredChunk(*db.execute(records.select_sql("t", StoredChunk)).fetchone()), row)
        self.assertEqual(db.execute('SELECT text, "end" FROM t').fetchone(), ("four", 9))

    def test_only_keeps_the_columns_a_table_has(self):
        self.assertEqual(records.insert_sql("documents", DocumentRow, only=("doc", "paths")),
                         'INSERT INTO documents ("doc", "paths") VALUES (?, ?)')
        self.assertEqual(records.values(DocumentRow, only=("doc",))(DocumentRow("d", "[]")), ("d",))
        self.assertIn("%s, %s, %s", records.insert_sql("x", DocumentRow, mark="%s"))

    def test_vectors_db_has_a_column_for_every_field_of_its_records(self):
        with tempfile.TemporaryDirectory() as tmp:
            db = vectorstore.connect(Path(tmp) / "vectors.db", create=True)
            try:
                for table, record in (("chunks", StoredChunk), ("documents", DocumentRow)):
                    columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
                    with self.subTest(table=table):
                        self.assertEqual(set(records.column_names(record)) - set(columns), set())
            finally:
                db.close()

    def test_replace_chunks_stores_the_records_and_keeps_the_first_of_a_repeated_window(self):
        with tempfile.TemporaryDirectory() as tmp:
            db = vectorstore.connect(Path(tmp) / "vectors.db", create=True)
            try:
                first = StoredChunk("a" * 64, "d" * 64, 0, 0, 3, "one")
                again = dataclasses.replace(first, idx=7)
                vectorstore.replace_chunks(db, [first, again], [DocumentRow("d" * 64, '["x.txt"]', groups='["hr"]')])
                got = db.execute(records.select_sql("chunks", StoredChunk)).fetchall()
                self.assertEqual([StoredChunk(*row) for row in got], [first])
                self.assertEqual(db.execute(records.select_sql("documents", DocumentRow)).fetchall(),
                                 [("d" * 64, '["x.txt"]', "[]", '["hr"]', "[]")])  # Document's field order
            finally:
                db.close()


class BuildTests(unittest.TestCase):
    def test_fields_come_from_given_then_from_each_source_in_turn_and_the_rest_keep_defaults(self):
        db = sqlite3.connect(":memory:")
        db.row_factory = sqlite3.Row
        row = db.execute("SELECT 'w' AS text, 'd' AS doc, 3 AS idx, 0 AS start, 1 AS \"end\", 'x' AS unused").fetchone()
        ranked_type = dataclasses.make_dataclass("Ranked", [("score", float), ("chunk_id", str), ("doc", str)])
        ranked = ranked_type(0.5, "c", "not")  # its doc comes first: a source earlier in the list wins
        hit = records.build(Hit, ranked, row, paths=["p"], mode="vector")
        self.assertEqual(hit, Hit(0.5, "not", 3, "c", "w", ["p"], 0, 1, mode="vector"))
        self.assertIsNone(hit.page)

    def test_a_missing_required_field_is_an_error(self):
        with self.assertRaises(TypeError):
            records.build(Hit, {"score": 1.0})


class SchemaTests(unittest.TestCase):
    def test_types_of_every_kind_of_field(self):
        self.assertEqual(records.json_type(float), {"type": "number"})
        self.assertEqual(records.json_type(list[str]), {"type": "array", "items": {"type": "string"}})
        self.assertEqual(records.json_type(int | None), {"type": ["integer", "null"]})

    def test_the_hit_schema_requires_exactly_the_fields_without_a_default(self):
        schema = records.json_schema(Hit)
        self.assertEqual(schema["required"], ["score", "doc", "idx", "chunk_id", "text", "paths", "start", "end"])
        self.assertEqual(schema["properties"]["page"]["minimum"], 1)
        self.assertNotIn("description", records.json_schema(Hit, described=False)["properties"]["score"])


if __name__ == "__main__":
    unittest.main()
