"""Document ids: the sha256 of the sanitized text, and nothing computed from raw bytes outside the extract store."""

from __future__ import annotations

import hashlib
import json
import unittest

from .embed import chunk_id
from .layout import Layout, read_jsonl
from .stub_server import StubServer
from .testsupport import TempFolder, clean_env, run_cli, write_manifest

AWS_KEY = "AKIA" + "QZ7RT2XW4PLM6VBN"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class IdCase(TempFolder, unittest.TestCase):
    def setUp(self):
        self.tmp = self.make_tmp()
        self.manifest = write_manifest(self.tmp, size=8, overlap=2)
        self.docs = self.tmp / "docs"
        self.out = self.tmp / "out"
        self.layout = Layout(self.out)

    def put(self, name: str, text: str) -> bytes:
        data = text.encode("utf-8")
        (self.docs / name).write_bytes(data)
        return data

    def stage(self, *stages: str, **env) -> dict:
        for name in stages:
            with clean_env(**env):
                code, out, err = run_cli(name, self.manifest, "--out", self.out)
            self.assertEqual(code, 0, err)
        last = "embed" if stages[-1] == "sweep" else stages[-1]
        return json.loads(self.layout.summary_path(last).read_text(encoding="utf-8"))

    def listing(self) -> dict[str, dict]:
        return {row["doc"]: row for row in read_jsonl(self.layout.sanitized_listing)}


class SanitizedIdTests(IdCase):
    def test_doc_is_the_sha256_of_the_sanitized_text_in_every_store(self):
        raw = self.put("deploy.txt", f"deploy with key {AWS_KEY} on friday\n")
        self.stage("extract", "sanitize", "chunk")
        (doc,) = self.listing()
        clean = self.layout.doc_text_path(self.layout.sanitized_dir, doc).read_bytes()
        self.assertIn(b"[REDACTED:aws-access-key]", clean)
        self.assertEqual(doc, sha(clean))
        self.assertNotEqual(doc, sha(raw))
        rows = read_jsonl(self.layout.chunks_path)
        self.assertTrue(rows)
        text = clean.decode("utf-8")
        for row in rows:
            self.assertEqual(row["doc"], doc)
            self.assertEqual(row["chunk_id"], chunk_id(doc, text[row["start"]:row["end"]]))

    def test_files_equal_once_sanitized_are_one_document_with_both_paths(self):
        self.put("a.txt", f"the key is {AWS_KEY}\n")
        self.put("b.txt", "the key is AKIA" + "B3MX7TQ2LW5RZ4NK\n")
        self.put("c.txt", "something else\n")
        summary = self.stage("extract", "sanitize")
        listing = self.listing()
        self.assertEqual((summary["texts"], summary["documents"]), (3, 2))
        self.assertEqual(sorted(row["paths"] for row in listing.values()), [["a.txt", "b.txt"], ["c.txt"]])

    def test_an_unchanged_text_is_not_sanitized_again_unless_the_settings_change(self):
        self.put("a.txt", f"the key is {AWS_KEY}\n")
        self.put("b.txt", "plain words\n")
        first = self.stage("extract", "sanitize")
        again = self.stage("sanitize")
        self.assertEqual((first["reused"], again["reused"], again["texts"]), (0, 2, 2))
        self.assertEqual(again["findings_by_rule"], first["findings_by_rule"])  # counts kept for reused texts
        write_manifest(self.tmp, size=8, overlap=2, extra='\n[sanitize]\ndisable = ["email"]\n')
        changed = self.stage("sanitize")
        self.assertEqual(changed["reused"], 0)

    def test_a_removed_or_changed_file_leaves_the_sanitized_store_on_the_next_sanitize(self):
        self.put("keep.txt", "kept words\n")
        gone = self.docs / "gone.txt"
        gone.write_text("removed later\n")
        edited = self.docs / "edited.txt"
        edited.write_text("first version\n")
        self.stage("extract", "sanitize")
        before = set(self.listing())
        gone.unlink()
        edited.write_text("second version\n")
        summary = self.stage("extract", "sanitize")
        after = set(self.listing())
        self.assertEqual(summary["removed_stale"], 2)
        self.assertEqual(len(before - after), 2)
        stored = {path.stem for path in self.layout.sanitized_dir.glob("*.txt")}
        self.assertEqual(stored, after)

    def test_chunk_refuses_a_sanitized_store_named_by_anything_but_its_text(self):
        self.put("a.txt", "some words here\n")
        self.stage("extract", "sanitize")
        (doc,) = self.listing()
        self.layout.doc_text_path(self.layout.sanitized_dir, doc).write_text("changed by hand\n")
        with clean_env():
            code, out, err = run_cli("chunk", self.manifest, "--out", self.out)
        self.assertEqual((code, out), (4, ""))
        self.assertIn("run sanitize again", err)

    def test_chunk_refuses_when_extract_read_a_text_sanitize_has_not_seen(self):
        self.put("a.txt", "some words here\n")
        self.stage("extract", "sanitize")
        self.put("b.txt", "a new file\n")
        self.stage("extract")
        with clean_env():
            code, _, err = run_cli("chunk", self.manifest, "--out", self.out)
        self.assertEqual(code, 4)
        self.assertIn("run sanitize first", err)

    def test_hits_carry_the_sanitized_id_and_no_raw_hash(self):
        raw = self.put("deploy.txt", f"rotate the backup key {AWS_KEY} every friday\n")
        with StubServer(dim=64) as stub:
            self.stage("sweep", EMBED_URL=stub.url)
            with clean_env(EMBED_URL=stub.url):
                code, out, err = run_cli("search", self.manifest, "backup key", "--json", "--out", self.out)
        self.assertEqual(code, 0, err)
        hits = json.loads(out)
        self.assertTrue(hits)
        (doc,) = self.listing()
        self.assertEqual({hit["doc"] for hit in hits}, {doc})
        self.assertNotIn(sha(raw), out + err)
        self.assertNotIn(sha(raw.decode("utf-8").encode("utf-8")), out)


if __name__ == "__main__":
    unittest.main()


def output_bytes(out, *, skip_extract: bool = True) -> dict[str, bytes]:
    """Every file of the output folder (vectors.db, its -wal/-shm, index/...) as raw bytes."""
    found = {}
    for path in sorted(out.rglob("*")):
        rel = path.relative_to(out).as_posix()
        if path.is_file() and not (skip_extract and rel.startswith("extract/")):
            found[rel] = path.read_bytes()
    return found


REMOVED_TEXT = ("The quokkazanzibar ledger lists marmaladeflux payments to xylophonequest partners "
                "and the brontowhistle accounts.\n")
REMOVED_WORDS = ("quokkazanzibar", "marmaladeflux", "xylophonequest", "brontowhistle")


class RemovedTextTests(IdCase):
    def test_a_removed_files_words_leave_every_byte_of_the_output_folder(self):
        self.put("keep.txt", "Backups are rotated every friday by the operations team.\n" * 3)
        gone = self.docs / "ledger.txt"
        gone.write_text(REMOVED_TEXT * 3, encoding="utf-8")
        with StubServer(dim=64) as stub:
            self.stage("sweep", EMBED_URL=stub.url)
            before = output_bytes(self.out)
            self.assertTrue(any(b"quokkazanzibar" in data for name, data in before.items() if name.startswith("vectors.db")))
            gone.unlink()
            self.stage("sweep", EMBED_URL=stub.url)
            with clean_env(EMBED_URL=stub.url):
                code, out, err = run_cli("search", self.manifest, "backups friday", "--json", "--out", self.out)
        self.assertEqual(code, 0, err)
        self.assertTrue(json.loads(out))
        after = output_bytes(self.out, skip_extract=False)
        self.assertIn("vectors.db", after)
        for name, data in after.items():
            for word in REMOVED_WORDS:
                with self.subTest(file=name, word=word):
                    self.assertFalse(word.encode() in data or word.encode("utf-16-le") in data, f"{word} in {name}")
