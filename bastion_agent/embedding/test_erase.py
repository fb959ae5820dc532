"""Erasing what sanitize would no longer let out, and stale vectors on request.

Hostile first: an ``EMP-######`` id is swept, the operator adds a rule for
it and sweeps again; whoever reads the output folder (everything but the
private ``extract/``) then fills the new placeholder with guesses, hashes
them into document and chunk ids, and compares with every id there. None
may match, and no byte of the old window (its text, its id, its vector) may
be left in ``vectors.db``, its WAL or ``index/``. Then ``prune``: stale
vectors of every model (or one) leave the store and ``index/``, and bad
input changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import unittest
from pathlib import Path

from bastion_agent.chunking.chunker import chunk_document
from bastion_agent.core.layout import Layout, read_jsonl
from bastion_agent.embedding import vectorstore
from bastion_agent.testing.stub_server import StubServer, bag_of_words
from bastion_agent.testing.testsupport import (
    TempFolder,
    clean_env,
    closed_port_url,
    run_cli,
    write_manifest,
)

SIZE, OVERLAP, DIM = 8, 2, 64
EMPLOYEE = "EMP-804271"
HR_TEXT = f"Staff record for the night shift.\nEmployee {EMPLOYEE} joined in March and drives the forklift.\n"
KEEP_TEXT = "Backups are rotated every friday by the operations team.\n" * 2
RULE = '\n[[sanitize.rules]]\nid = "employee-id"\npattern = \'EMP-\\d{6}\'\n'
PLACEHOLDER = "[REDACTED:employee-id]"
HEX_ID = re.compile(rb"[0-9a-f]{64}")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def files_outside_extract(out: Path) -> dict[str, bytes]:
    """Every file of the output folder but the private extract store, by relative name."""
    found = {}
    for path in sorted(out.rglob("*")):
        relative = path.relative_to(out)
        if path.is_file() and relative.parts[0] != "extract":
            found[str(relative)] = path.read_bytes()
    return found


def ids_in(files: dict[str, bytes]) -> set[str]:
    """Every 64-hex-digit string in those files (ids as text) and every 32-byte run as hex (ids as bytes)."""
    found = {match.decode() for data in files.values() for match in HEX_ID.findall(data)}
    return found


class EraseCase(TempFolder, unittest.TestCase):
    def setUp(self):
        self.tmp = self.make_tmp()
        self.manifest = write_manifest(self.tmp, size=SIZE, overlap=OVERLAP, dim=DIM)
        self.docs = self.tmp / "docs"
        self.out = self.tmp / "out"
        self.layout = Layout(self.out)
        stub = StubServer(dim=DIM)
        self.stub = stub.__enter__()
        self.addCleanup(stub.__exit__, None, None, None)

    def put(self, name: str, text: str) -> None:
        (self.docs / name).write_text(text, encoding="utf-8")

    def cli(self, *argv, url: str | None = None) -> tuple[int, str, str]:
        with clean_env(EMBED_URL=url or self.stub.url):
            return run_cli(*argv)

    def sweep(self, url: str | None = None) -> tuple[int, str, str]:
        return self.cli("sweep", self.manifest, "--out", self.out, url=url)

    def add_rule(self) -> None:
        write_manifest(self.tmp, size=SIZE, overlap=OVERLAP, dim=DIM, extra=RULE)

    def windows(self) -> list[dict]:
        return read_jsonl(self.layout.chunks_path)

    def db_rows(self, sql: str, *params) -> list[tuple]:
        db = sqlite3.connect(self.layout.vectors_db)
        try:
            return db.execute(sql, params).fetchall()
        finally:
            db.close()


class RemediationTests(EraseCase):
    def sweep_then_add_the_rule(self, url: str | None = None) -> tuple[set[str], set[bytes], tuple]:
        """Sweep with the id in clear, add the rule, sweep again; return the old ids, vectors and the outcome."""
        self.put("hr.txt", HR_TEXT)
        self.put("keep.txt", KEEP_TEXT)
        code, _, err = self.sweep()
        self.assertEqual(code, 0, err)
        old_doc = sha(HR_TEXT)
        old_ids = {row["chunk_id"] for row in self.windows() if row["doc"] == old_doc}
        self.assertTrue(old_ids)
        # (a window without the id has the same text, and so the same vector, in the new document)
        old_vectors = {row[0] for row in self.db_rows("SELECT v.vec FROM vectors v JOIN chunks c ON c.chunk_id = v.chunk_id"
                                                      " WHERE c.text LIKE ?", f"%{EMPLOYEE}%")}
        self.assertTrue(old_vectors)
        before = files_outside_extract(self.out)
        self.assertTrue(any(EMPLOYEE.encode() in data for data in before.values()))  # the leak the rule fixes
        self.add_rule()
        return old_ids | {old_doc}, old_vectors, self.sweep(url)

    def assert_erased(self, old_ids: set[str], old_vectors: set[bytes]) -> None:
        after = files_outside_extract(self.out)
        self.assertIn("vectors.db", after)
        for name, data in after.items():
            with self.subTest(file=name):
                self.assertFalse(EMPLOYEE.split("-")[1].encode() in data, "the id's digits")
                for old in old_ids:
                    self.assertFalse(old.encode() in data or bytes.fromhex(old) in data, f"old id {old[:12]}")
                for vector in old_vectors:
                    self.assertFalse(vector in data, "an old vector")

    def test_a_new_rule_erases_the_old_windows_ids_and_vectors_everywhere_outside_extract(self):
        old_ids, old_vectors, (code, _, err) = self.sweep_then_add_the_rule()
        self.assertEqual(code, 0, err)
        new_text = HR_TEXT.replace(EMPLOYEE, PLACEHOLDER)
        self.assertIn(sha(new_text), {row["doc"] for row in self.windows()})
        self.assert_erased(old_ids, old_vectors)

    def test_guessing_the_id_against_every_id_outside_extract_finds_nothing(self):
        _, _, (code, _, err) = self.sweep_then_add_the_rule()
        self.assertEqual(code, 0, err)
        sanitized = HR_TEXT.replace(EMPLOYEE, PLACEHOLDER)  # what anyone reads in sanitized/ and in hits
        self.assertTrue((self.layout.sanitized_dir / f"{sha(sanitized)}.txt").is_file())
        seen = ids_in(files_outside_extract(self.out))
        self.assertIn(sha(sanitized), seen)  # the check sees ids where they are
        matched = []
        for number in range(804171, 804372):  # the attacker's guesses, the right one among them
            guess = sanitized.replace(PLACEHOLDER, f"EMP-{number}")
            doc = sha(guess)
            candidates = {doc} | {row.chunk_id for row in chunk_document(doc, guess, SIZE, OVERLAP)}
            if candidates & seen:
                matched.append(number)
        self.assertEqual(matched, [])

    def test_the_old_windows_are_erased_even_when_the_model_server_is_down(self):
        old_ids, old_vectors, (code, _, err) = self.sweep_then_add_the_rule(url=closed_port_url())
        self.assertNotEqual(code, 0)  # the new windows cannot be embedded...
        self.assertTrue(err.strip().splitlines()[-1].startswith("bastion_agent sweep: cannot reach"), err)
        self.assert_erased(old_ids, old_vectors)  # ...but the old ones are gone all the same
        code, _, err = self.sweep()
        self.assertEqual(code, 0, err)
        self.assert_erased(old_ids, old_vectors)

    def old_ids_of(self, text: str) -> set[str]:
        return {row["chunk_id"] for row in self.windows() if row["doc"] == sha(text)} | {sha(text)}

    def test_a_file_changed_in_the_same_sweep_as_the_rule_loses_its_old_windows_too(self):
        self.put("hr.txt", HR_TEXT)
        self.assertEqual(self.sweep()[0], 0)
        old_ids = self.old_ids_of(HR_TEXT)
        self.put("hr.txt", HR_TEXT + "Reviewed in April.\n")  # other raw bytes: no new document to compare with
        self.add_rule()
        code, _, err = self.sweep()
        self.assertEqual(code, 0, err)
        self.assert_erased(old_ids, set())

    def test_windows_of_an_earlier_chunk_size_are_erased_with_their_document(self):
        self.put("hr.txt", HR_TEXT)
        self.assertEqual(self.sweep()[0], 0)
        old_ids = self.old_ids_of(HR_TEXT)
        write_manifest(self.tmp, size=12, overlap=OVERLAP, dim=DIM)  # the size-8 windows' vectors go stale
        self.assertEqual(self.sweep()[0], 0)
        old_ids |= self.old_ids_of(HR_TEXT)
        write_manifest(self.tmp, size=12, overlap=OVERLAP, dim=DIM, extra=RULE)
        code, _, err = self.sweep()
        self.assertEqual(code, 0, err)
        self.assert_erased(old_ids, set())

    def test_a_document_the_rule_leaves_unchanged_keeps_its_vectors_and_a_removed_file_stays_stale(self):
        self.put("keep.txt", KEEP_TEXT)
        self.put("gone.txt", "The cafeteria menu changes every monday; soup is served at noon.\n")
        self.assertEqual(self.sweep()[0], 0)
        kept = self.db_rows("SELECT chunk_id, vec FROM vectors ORDER BY chunk_id")
        (self.docs / "gone.txt").unlink()
        self.add_rule()
        code, _, err = self.sweep()
        self.assertEqual(code, 0, err)
        summary = json.loads(self.layout.summary_path("embed").read_text(encoding="utf-8"))
        self.assertEqual(summary["embedded"], 0)  # the rule changed nothing here: nothing embedded again
        self.assertEqual(self.db_rows("SELECT chunk_id, vec FROM vectors ORDER BY chunk_id"), kept)
        self.assertGreater(summary["stale_vectors"], 0)  # the removed file's vectors stay, as docs/contract.md says

    def test_the_pending_erasure_lives_only_in_the_extract_store_and_is_forgotten_once_done(self):
        self.put("hr.txt", HR_TEXT)
        self.assertEqual(self.sweep()[0], 0)
        self.add_rule()
        for stage in ("extract", "sanitize"):
            code, _, err = self.cli(stage, self.manifest, "--out", self.out)
            self.assertEqual(code, 0, err)
        pending = self.layout.extract_dir / "erase.jsonl"
        self.assertEqual([row["doc"] for row in read_jsonl(pending)], [sha(HR_TEXT)])
        self.assertEqual(pending.stat().st_mode & 0o777, 0o600)
        written = [data for name, data in files_outside_extract(self.out).items()
                   if name.startswith("sanitized") or name.startswith("sanitize.")]  # what sanitize wrote
        self.assertTrue(written)
        self.assertFalse(any(sha(HR_TEXT).encode() in data for data in written))
        code, _, err = self.cli("chunk", self.manifest, "--out", self.out)
        self.assertEqual(code, 0, err)
        code, _, err = self.cli("embed", self.manifest, "--out", self.out)
        self.assertEqual(code, 0, err)
        self.assertFalse(pending.exists())
        self.assertEqual(self.db_rows("SELECT COUNT(*) FROM chunk_docs WHERE doc = ?", sha(HR_TEXT)), [(0,)])


class PruneTests(EraseCase):
    def two_models_with_stale_vectors(self) -> tuple[str, str]:
        """A sweep, a second model's vectors, then a removed file: stale vectors of two models."""
        self.put("keep.txt", KEEP_TEXT)
        self.put("gone.txt", "The cafeteria menu changes every monday; soup is served at noon.\n")
        self.assertEqual(self.sweep()[0], 0)
        db = vectorstore.connect(self.layout.vectors_db, create=False)
        try:
            rows = db.execute("SELECT chunk_id, text FROM chunks").fetchall()
            vectorstore.add_vectors(db, "other-model", DIM, [(cid, vectorstore.pack(bag_of_words(text + " other", DIM)))
                                                             for cid, text in rows], "2026-01-01T00:00:00+00:00")
        finally:
            db.close()
        gone_doc = sha("The cafeteria menu changes every monday; soup is served at noon.\n")
        gone_ids = {row["chunk_id"] for row in self.windows() if row["doc"] == gone_doc}
        (self.docs / "gone.txt").unlink()
        self.assertEqual(self.sweep()[0], 0)
        self.assertEqual(self.cli("search", self.manifest, "cafeteria", "--out", self.out)[0], 0)  # index/ built
        return gone_doc, gone_ids

    def test_prune_erases_the_stale_vectors_of_every_model_from_the_store_and_index(self):
        gone_doc, gone_ids = self.two_models_with_stale_vectors()
        stale = self.db_rows("SELECT vec FROM vectors v WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.chunk_id = v.chunk_id)")
        self.assertEqual(len(stale), 2 * len(gone_ids))
        current = self.db_rows("SELECT COUNT(*) FROM vectors v JOIN chunks c ON c.chunk_id = v.chunk_id")[0][0]
        code, out, err = self.cli("prune", self.manifest, "--out", self.out, "--json")
        self.assertEqual(code, 0, err)
        report = json.loads(out)
        self.assertEqual(report["removed"], 2 * len(gone_ids))
        self.assertEqual(report["removed_by_model"], {"other-model": len(gone_ids), "stub-model": len(gone_ids)})
        self.assertEqual(report["kept"], current)
        self.assertIn(f"{2 * len(gone_ids)} stale vectors", err)
        after = files_outside_extract(self.out)
        for name, data in after.items():
            with self.subTest(file=name):
                for old in gone_ids:
                    self.assertFalse(old.encode() in data or bytes.fromhex(old) in data, f"stale id {old[:12]}")
                for (vector,) in stale:
                    self.assertFalse(vector in data, "a stale vector")
        summary_stale = self.db_rows("SELECT COUNT(*) FROM vectors v WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.chunk_id = v.chunk_id)")
        self.assertEqual(summary_stale, [(0,)])
        code, out, err = self.cli("search", self.manifest, "backups friday", "--json", "--out", self.out)
        self.assertEqual(code, 0, err)
        self.assertTrue(json.loads(out))

    def test_prune_of_one_model_keeps_the_other_models_stale_vectors(self):
        _, gone_ids = self.two_models_with_stale_vectors()
        code, out, err = self.cli("prune", self.manifest, "--out", self.out, "--model", "other-model", "--json")
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["removed_by_model"], {"other-model": len(gone_ids)})
        left = self.db_rows("SELECT model, COUNT(*) FROM vectors v WHERE NOT EXISTS"
                            " (SELECT 1 FROM chunks c WHERE c.chunk_id = v.chunk_id) GROUP BY model")
        self.assertEqual(left, [("stub-model", len(gone_ids))])

    def test_prune_keeps_a_vector_the_next_embed_would_reuse(self):
        menu = "The cafeteria menu changes every monday; soup is served at noon.\n"
        self.put("keep.txt", KEEP_TEXT)
        self.put("menu.txt", menu)
        self.assertEqual(self.sweep()[0], 0)
        (self.docs / "menu.txt").unlink()
        self.assertEqual(self.sweep()[0], 0)  # menu's vectors are stale now
        self.put("menu.txt", menu)
        for stage in ("extract", "sanitize", "chunk"):  # chunks.jsonl has menu again, vectors.db not yet
            self.assertEqual(self.cli(stage, self.manifest, "--out", self.out)[0], 0)
        code, out, err = self.cli("prune", self.manifest, "--out", self.out, "--json")
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["removed"], 0)
        self.assertEqual(self.sweep()[0], 0)
        summary = json.loads(self.layout.summary_path("embed").read_text(encoding="utf-8"))
        self.assertEqual(summary["embedded"], 0)  # every vector was still there to reuse

    def test_prune_with_nothing_stale_removes_nothing_and_says_so(self):
        self.put("keep.txt", KEEP_TEXT)
        self.assertEqual(self.sweep()[0], 0)
        before = self.db_rows("SELECT chunk_id, model, vec FROM vectors ORDER BY 1, 2")
        code, out, err = self.cli("prune", self.manifest, "--out", self.out)
        self.assertEqual(code, 0, err)
        self.assertIn("0 stale vectors", err)
        self.assertEqual(self.db_rows("SELECT chunk_id, model, vec FROM vectors ORDER BY 1, 2"), before)

    def test_a_bad_manifest_or_a_missing_store_is_one_line_and_changes_nothing(self):
        self.put("keep.txt", KEEP_TEXT)
        code, out, err = self.cli("prune", self.manifest, "--out", self.out)
        self.assertNotEqual(code, 0)
        self.assertEqual(out, "")
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("no vector store", err)
        self.assertFalse(self.out.exists())
        self.assertEqual(self.sweep()[0], 0)
        before = {name: data for name, data in files_outside_extract(self.out).items()}
        bad = self.tmp / "bad.toml"
        bad.write_text('[source]\nroot = "docs"\n[embed]\nmodel = "m"\ndim = "many"\n', encoding="utf-8")
        code, out, err = self.cli("prune", bad, "--out", self.out)
        self.assertNotEqual(code, 0)
        self.assertEqual(out, "")
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertTrue(err.startswith("bastion_agent prune: "), err)
        self.assertEqual(files_outside_extract(self.out), before)

    def test_prune_help_names_what_it_erases(self):
        import contextlib
        import io

        from bastion_agent.commands.cli import main

        stream = io.StringIO()
        with contextlib.redirect_stdout(stream), self.assertRaises(SystemExit) as exit_:
            main(["prune", "--help"])
        self.assertEqual(exit_.exception.code, 0)
        self.assertIn("--model", stream.getvalue())
        self.assertIn("stale", stream.getvalue())


if __name__ == "__main__":
    unittest.main()


class PublishedErasureTests(EraseCase):
    """Read only on ``publishing/``: what the next publish does with a superseded document (the i26 branch owns it)."""

    @classmethod
    def setUpClass(cls):
        from bastion_agent.testing import pgtest

        reason = pgtest.unavailable_reason()
        if reason:
            raise unittest.SkipTest(reason)
        cls.postgres = pgtest.ThrowawayPostgres().start()
        import psycopg

        with psycopg.connect(cls.postgres.dsn(), autocommit=True) as conn:  # the superuser's part of the set-up
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")

    @classmethod
    def tearDownClass(cls):
        cls.postgres.stop()

    def publish(self) -> None:
        with clean_env(BASTION_PUBLISH_DSN=self.postgres.dsn()):
            code, _, err = run_cli("publish", self.manifest, "--out", self.out)
        self.assertEqual(code, 0, err)

    def published(self) -> set[tuple[str, str]]:
        import psycopg

        with psycopg.connect(self.postgres.dsn(), autocommit=True) as conn:
            windows = conn.execute("SELECT doc, chunk_id FROM bastion_agent.windows").fetchall()
            documents = conn.execute("SELECT doc, doc FROM bastion_agent.documents").fetchall()
        return set(windows) | set(documents)

    def test_the_next_publish_deletes_the_superseded_documents_rows(self):
        publish = '\n[publish]\nbastion = "fs-01"\n'
        write_manifest(self.tmp, size=SIZE, overlap=OVERLAP, dim=DIM, extra=publish)
        self.put("hr.txt", HR_TEXT)
        self.assertEqual(self.sweep()[0], 0)
        old_ids = {row["chunk_id"] for row in self.windows()} | {sha(HR_TEXT)}
        self.publish()
        self.assertTrue(old_ids & {value for row in self.published() for value in row})
        write_manifest(self.tmp, size=SIZE, overlap=OVERLAP, dim=DIM, extra=publish + RULE)
        self.assertEqual(self.sweep()[0], 0)
        self.publish()
        left = {value for row in self.published() for value in row}
        self.assertIn(sha(HR_TEXT.replace(EMPLOYEE, PLACEHOLDER)), left)
        self.assertEqual(old_ids & left, set())
