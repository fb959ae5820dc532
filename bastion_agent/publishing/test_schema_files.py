"""The migration SQL read from files is, byte for byte, what the migrations ran before it was moved there.

The hashes below were taken from the statements the code wrote when they
were still built in Python (the same order, pgvector's schema given as
``"public"``); a migration that has run must never change, so an edit of
one of these files fails here. No database is needed: the statements are
compared, not run (the publishing tests run them).
"""

from __future__ import annotations

import hashlib
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from bastion_agent.publishing import publish_schema, schema_access, schema_files

VEC = '"public"'
# sha256 of the statements joined by NUL, as the code wrote them before they became files
RECORDED = {
    "m003_ensure_model": "e7355c234f8acb5228f10648c34a662a83356de8a865ca2a860cbafd1dec8572",
    "m004_ensure_model": "ed94c159dc8e9e331e7ac8a2c43287106d1b796f8bb84790370701a10f960ede",
    "m005_ensure_model": "903ad9a84423b190038c69eb8e015fcab63903d1c680f1cc41c9b18b7900534a",
    "m006_least_privilege": "7c3f5d68fd4f3190100221c1db840a4decbac17f672e394e8bdd3e6d33ae40f7",
    "m007_reader_scope": "ba8e5d6a92b5c0342f22fee7c22c5ea0054831a192d94e3bbe99d82416b5380e",
    "m007_reader_roles": "bfdb72eea04b3d3f574ca05392ed47203d15f315a04c3bf0b2d73f97baf9f2a9",
    "m008_bastion_graphs": "fd4a5a3e8fbe5d28942ae979443cfd1a2883512c8ca2e161d45047c03e7117d1",
}


def digest(statements: list[str]) -> str:
    return hashlib.sha256("\x00".join(statements).encode("utf-8")).hexdigest()


class MigrationFilesTests(unittest.TestCase):
    def test_the_migrations_read_the_statements_they_ran(self):
        made = {
            "m003_ensure_model": [publish_schema._ensure_model_function(3)],
            "m004_ensure_model": [publish_schema._ensure_model_function(4)],
            "m005_ensure_model": [publish_schema._ensure_model_function(5)],
            "m006_least_privilege": schema_access.least_privilege_sql(VEC),
            "m007_reader_scope": schema_access.reader_scope_sql(),
            "m007_reader_roles": schema_access.reader_roles_sql(VEC),
            "m008_bastion_graphs": publish_schema._bastion_graphs_sql(VEC),
        }
        self.assertEqual({name: digest(found) for name, found in made.items()}, RECORDED)

    def test_every_file_is_hashed_and_every_placeholder_filled(self):
        folder = Path(schema_files.__file__).parent / "sql"
        self.assertEqual(sorted(path.stem for path in folder.glob("*.sql")), sorted(RECORDED))
        for name in RECORDED:
            for statement in schema_files.statements(name, vec=VEC):
                self.assertNotIn("{vec}", statement, name)
                self.assertNotIn("-- statement:", statement, name)

    def test_a_changed_byte_a_missing_placeholder_or_an_empty_file_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "m000_sample.sql"
            path.write_text("-- header\n-- statement: one\nSELECT 1\n-- statement: two\nSELECT {vec}.x\n\n")
            with mock.patch.object(schema_files, "read_sql", lambda name: path.read_text()):
                self.assertEqual(schema_files.statements("m000_sample", vec='"v"'), ["SELECT 1", 'SELECT "v".x\n'])
                with self.assertRaisesRegex(ValueError, "missing"):
                    schema_files.statements("m000_sample")
                with self.assertRaisesRegex(ValueError, "unknown"):
                    schema_files.statements("m000_sample", vec='"v"', other="x")
                path.write_text("-- only a header\n")
                with self.assertRaisesRegex(ValueError, "no statement"):
                    schema_files.statements("m000_sample")
        edited = schema_access.least_privilege_sql(VEC)
        edited[0] = edited[0].replace("PRIMARY KEY", "PRIMARY  KEY")
        self.assertNotEqual(digest(edited), RECORDED["m006_least_privilege"])


if __name__ == "__main__":
    unittest.main()
