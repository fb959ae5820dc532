"""Document ids: the sha256 of the sanitized text, and nothing computed from raw bytes outside the extract store."""

from __future__ import annotations

import hashlib
import json
import unittest

from bastion_agent.core.layout import Layout, figures_path, read_jsonl
from bastion_agent.core.records import DocumentRow, StoredChunk
from bastion_agent.embed import chunk_id
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import (
    TempFolder,
    clean_env,
    run_cli,
    write_manifest,
)

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

    def figures(self, stage: str) -> dict:
        """A stage's private raw-side figures (inside extract/)."""
        return json.loads(figures_path(self.layout, stage).read_text(encoding="utf-8"))

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
        self.assertEqual((summary["files"], summary["documents"]), (3, 2))
        self.assertEqual(sorted(row["paths"] for row in listing.values()), [["a.txt", "b.txt"], ["c.txt"]])

    def test_an_unchanged_text_is_not_sanitized_again_unless_the_settings_change(self):
        self.put("a.txt", f"the key is {AWS_KEY}\n")
        self.put("b.txt", "plain words\n")
        first = self.stage("extract", "sanitize")
        first_figures = self.figures("sanitize")
        again = self.stage("sanitize")
        again_figures = self.figures("sanitize")
        self.assertEqual((first_figures["reused"], again_figures["reused"], again["files"]), (0, 2, 2))
        self.assertEqual(again["findings_by_rule"], first["findings_by_rule"])  # counts kept for reused texts
        write_manifest(self.tmp, size=8, overlap=2, extra='\n[sanitize]\ndisable = ["email"]\n')
        self.stage("sanitize")
        self.assertEqual(self.figures("sanitize")["reused"], 0)

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


def write_old_format_folder(layout: Layout, files: dict[str, bytes], size: int, overlap: int, dim: int) -> set[str]:
    """An output folder as the agent before sanitized ids wrote it; returns every old id it holds.

    There the doc id was the sha256 of the raw file, and the extract
    listing, both stores, ``chunks.jsonl`` and ``vectors.db`` (schema
    version 3) all used it.
    """
    from unittest import mock

    from bastion_agent.core.layout import ensure_private_dir, write_jsonl, write_private
    from bastion_agent.embed import chunk_document
    from bastion_agent.embedding import vectorstore
    from bastion_agent.sanitizing.scanner import redact
    from bastion_agent.testing.stub_server import bag_of_words

    ensure_private_dir(layout.extract_dir)
    old_ids, extract_rows, sanitized_rows, chunk_rows, db_chunks = set(), [], [], [], []
    for path, data in sorted(files.items()):
        doc = sha(data)
        old_ids.add(doc)
        text = data.decode("utf-8")
        write_private(layout.doc_text_path(layout.extract_dir, doc), text)
        clean = redact(text)
        write_private(layout.doc_text_path(layout.sanitized_dir, doc), clean)
        extract_rows.append({"path": path, "doc": doc, "size": len(data), "kind": "text", "status": "extracted",
                             "reason": None})
        sanitized_rows.append({"doc": doc, "paths": [path], "kind": "text"})
        for row in chunk_document(doc, clean, size, overlap):
            old_ids.add(row.chunk_id)
            chunk_rows.append(row.__dict__)
            db_chunks.append(StoredChunk(row.chunk_id, doc, row.idx, row.start, row.end, clean[row.start:row.end]))
    write_jsonl(layout.extract_listing, extract_rows)
    write_jsonl(layout.sanitized_listing, sanitized_rows)
    write_jsonl(layout.chunks_path, chunk_rows)
    with mock.patch.object(vectorstore, "MIGRATIONS", vectorstore.MIGRATIONS[:3]):
        db = vectorstore.connect(layout.vectors_db, create=True)
    vectorstore.replace_chunks(db, db_chunks, [DocumentRow(row["doc"], json.dumps(row["paths"])) for row in sanitized_rows])
    vectorstore.store_batch(db, "stub-model", dim,
                            [(row.chunk_id, vectorstore.pack(bag_of_words(row.text, dim))) for row in db_chunks[1:]],
                            [(db_chunks[0].chunk_id, "http_500")], "2026-01-01T00:00:00+00:00")
    vectorstore.add_vectors(db, "stub-model", dim, [(sha(b"a vector of an older sweep"), vectorstore.pack([1.0] * dim))],
                            "2026-01-01T00:00:00+00:00")
    old_ids.add(sha(b"a vector of an older sweep"))
    db.close()
    return old_ids


class OldFolderTests(IdCase):
    FILES = {
        "deploy.txt": f"Deploy on friday with key {AWS_KEY} and rotate the backup tapes afterwards.\n".encode(),
        "notes.txt": b"The cafeteria menu changes every monday; soup is served at noon.\n",
    }

    def setUp(self):
        super().setUp()
        for name, data in self.FILES.items():
            (self.docs / name).write_bytes(data)
        self.old_ids = write_old_format_folder(self.layout, self.FILES, size=8, overlap=2, dim=64)
        self.old_texts = {row[5] for row in self._old_windows()}

    def _old_windows(self):
        import sqlite3

        db = sqlite3.connect(self.layout.vectors_db)
        try:
            return db.execute('SELECT chunk_id, doc, idx, start, "end", text FROM chunks').fetchall()
        finally:
            db.close()

    def test_search_on_an_old_folder_says_run_sweep(self):
        with StubServer(dim=64) as stub, clean_env(EMBED_URL=stub.url):
            code, out, err = run_cli("search", self.manifest, "backup tapes", "--json", "--out", self.out)
        self.assertEqual((code, out), (4, ""))
        self.assertIn("run sweep", err)

    def test_sweep_rebuilds_an_old_folder_reusing_vectors_by_text_and_leaves_no_old_id(self):
        (self.docs / "new.txt").write_text("A brand new file about penguins and glaciers.\n", encoding="utf-8")
        with StubServer(dim=64) as stub:
            with clean_env(EMBED_URL=stub.url):
                code, out, err = run_cli("sweep", self.manifest, "--out", self.out, "--quiet")
                self.assertEqual(code, 0, err)
                search_code, hits_json, search_err = run_cli("search", self.manifest, "backup tapes", "--json",
                                                             "--out", self.out)
            inputs = stub.inputs()
        self.assertEqual([line for line in err.splitlines() if "raw files" in line], err.splitlines()[:1])
        self.assertEqual(err.count("raw files"), 1)
        summary = json.loads(self.layout.summary_path("embed").read_text(encoding="utf-8"))
        reusable = len(self.old_texts) - 1  # the first window had failed: it never had a vector
        self.assertEqual(summary["reused_by_text"], reusable)
        asked = set(inputs)
        failed_text = self._first_old_text()
        self.assertFalse((self.old_texts - {failed_text}) & asked, "a reused window was sent to the model server")
        self.assertIn(failed_text, asked)
        self.assertTrue(any("penguins" in text for text in asked))
        self.assertEqual(search_code, 0, search_err)
        hits = json.loads(hits_json)
        self.assertTrue(hits)
        listing = self.listing()
        self.assertTrue({hit["doc"] for hit in hits} <= set(listing))
        for doc in listing:
            self.assertEqual(doc, sha(self.layout.doc_text_path(self.layout.sanitized_dir, doc).read_bytes()))
        current = set(listing) | {row["chunk_id"] for row in read_jsonl(self.layout.chunks_path)}
        gone = self.old_ids - current  # a text with nothing redacted has the same id either way
        self.assertGreater(len(gone), 3)
        for name, data in output_bytes(self.out).items():
            for old in gone:
                with self.subTest(file=name, old=old[:12]):
                    self.assertFalse(old.encode() in data, f"old id {old[:12]} in {name}")

    def test_sanitize_alone_rebuilds_an_old_sanitized_store_and_says_so_once(self):
        old_docs = {sha(data) for data in self.FILES.values()}
        with clean_env():
            code, out, err = run_cli("sanitize", self.manifest, "--out", self.out, "--quiet")
        self.assertEqual((code, out, err.count("\n"), err.count("raw files")), (0, "", 1, 1), err)
        listing = self.listing()
        self.assertEqual(len(listing), 2)
        for doc in listing:
            self.assertEqual(doc, sha(self.layout.doc_text_path(self.layout.sanitized_dir, doc).read_bytes()))
        stored = {path.stem for path in self.layout.sanitized_dir.glob("*.txt")}
        self.assertEqual(stored, set(listing))
        self.assertTrue(old_docs - set(listing))  # the file with a secret got a new id; its old one is gone
        self.assertFalse((old_docs - set(listing)) & stored)
        with clean_env():
            again = run_cli("sanitize", self.manifest, "--out", self.out, "--quiet")
        self.assertEqual(again[:3], (0, "", ""))  # rebuilt: nothing more to say

    def _first_old_text(self) -> str:
        from bastion_agent.embed import chunk_document
        from bastion_agent.sanitizing.scanner import redact

        first = sorted(self.FILES.items(), key=lambda item: sha(item[1]))[0][1].decode("utf-8")
        clean = redact(first)
        row = chunk_document(sha(first.encode()), clean, 8, 2)[0]
        return clean[row.start:row.end]


PATH_SECRET = "tok-9f2Kq7XvLm3Rw8Zp"


class PrefixedStub(StubServer):
    """The stub behind a path prefix, as a reverse proxy that keys on a secret path would serve it."""

    def __init__(self, prefix: str, **kwargs):
        super().__init__(**kwargs)
        base = self.httpd.RequestHandlerClass

        class Prefixed(base):
            def parse_request(self):
                ok = super().parse_request()
                if ok and self.path.startswith(prefix):
                    self.path = self.path[len(prefix):]
                return ok

        self.httpd.RequestHandlerClass = Prefixed


class EchoTests(IdCase):
    def test_an_invalid_embed_url_is_not_echoed_whole(self):
        self.put("a.txt", "words to embed\n")
        self.stage("extract", "sanitize", "chunk")
        for url in ("ftp://user:s3cretPw@host:1/path?key=q1uery", "s3cretPw", "http://user:s3cretPw@host:notaport/",
                    "http://host:1/sec ret?key=q1uery"):
            with self.subTest(url=url), clean_env(EMBED_URL=url):
                code, out, err = run_cli("embed", self.manifest, "--out", self.out)
                self.assertEqual((code, out, err.count("\n")), (2, "", 1), err)
                for secret in ("s3cretPw", "user", "q1uery", "path", "ret"):
                    self.assertNotIn(secret, err)
        with clean_env(EMBED_URL="ftp://user:s3cretPw@host:1/path"):
            err = run_cli("embed", self.manifest, "--out", self.out)[2]
        self.assertIn("ftp://host:1", err)

    def test_embed_api_and_numbers_are_not_echoed_when_they_look_like_keys(self):
        self.put("a.txt", "words to embed\n")
        self.stage("extract", "sanitize", "chunk")
        for name in ("EMBED_API", "EMBED_BATCH", "EMBED_TIMEOUT"):
            with self.subTest(name=name), clean_env(**{name: "sk-live-" + PATH_SECRET}):
                code, _, err = run_cli("embed", self.manifest, "--out", self.out)
                self.assertEqual(code, 2)
                self.assertIn(name, err)
                self.assertNotIn(PATH_SECRET, err)

    def test_a_secret_in_the_url_path_reaches_no_summary_or_output(self):
        self.put("a.txt", "words to embed through a proxy\n")
        with PrefixedStub("/" + PATH_SECRET, dim=64) as stub:
            url = f"{stub.url}/{PATH_SECRET}/"
            with clean_env(EMBED_URL=url):
                code, out, err = run_cli("sweep", self.manifest, "--out", self.out)
                self.assertEqual(code, 0, err)
                search = run_cli("search", self.manifest, "proxy", "--json", "--out", self.out)
            self.assertTrue(stub.requests)  # the path was used to reach the server
        self.assertEqual(search[0], 0)
        summary = json.loads(self.layout.summary_path("embed").read_text(encoding="utf-8"))
        self.assertEqual(summary["url"], stub.url)
        for name, data in output_bytes(self.out, skip_extract=False).items():
            self.assertFalse(PATH_SECRET.encode() in data, name)
        self.assertNotIn(PATH_SECRET, out + err + search[1] + search[2])

    def test_an_unreachable_server_behind_a_secret_path_is_named_by_host_only(self):
        self.put("a.txt", "words to embed\n")
        self.stage("extract", "sanitize", "chunk")
        from bastion_agent.testing.testsupport import closed_port_url

        with clean_env(EMBED_URL=f"{closed_port_url()}/{PATH_SECRET}"):
            code, out, err = run_cli("embed", self.manifest, "--out", self.out)
        self.assertEqual(code, 5)
        self.assertIn("127.0.0.1", err)
        self.assertNotIn(PATH_SECRET, err)
