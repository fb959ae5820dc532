"""The stage contract's tests for chunk, embed and search (docs/contract.md), against the loopback stub."""

from __future__ import annotations

import json
import math
import sqlite3
import struct
import unittest

from bastion_agent import embed
from bastion_agent.core.errors import ConfigError, ModelServerError, StoreError
from bastion_agent.core.layout import read_jsonl
from bastion_agent.embedding import vectorstore
from bastion_agent.embedding.endpoint import EndpointConfig
from bastion_agent.testing.stub_server import StubServer, bag_of_words
from bastion_agent.testing.testsupport import (
    SanitizedStoreCase,
    clean_env,
    closed_port_url,
    run_cli,
    sha256_hex,
    write_manifest,
    write_sanitized_store,
)

PROSE = (
    "The committee met on Tuesday to review the budget. Revenue rose, costs fell, "
    "and the reserve fund grew by four percent. Members asked about the new roof; "
    "the treasurer answered that bids would arrive in spring."
)


def window_texts(text: str, size: int, overlap: int) -> list[str]:
    return [text[w.start : w.end] for w in embed.windows(text, size, overlap)]


class WindowTests(unittest.TestCase):
    def test_windows_have_size_tokens_and_advance_by_size_minus_overlap(self):
        tokens = embed.TOKEN_RE.findall(PROSE)
        spans = embed.windows(PROSE, 10, 3)
        token_starts = [m.start() for m in embed.TOKEN_RE.finditer(PROSE)]
        for i, window in enumerate(spans[1:], start=1):
            self.assertEqual(window.start, token_starts[i * 7])
        self.assertTrue(all(w.tokens == 10 for w in spans[:-1]))
        self.assertLessEqual(spans[-1].tokens, 10)
        self.assertEqual(sum(w.tokens for w in spans) - 3 * (len(spans) - 1), len(tokens))

    def test_with_overlap_every_character_is_inside_a_window(self):
        text = "  Leading space, a tab\there.\n\nTrailing newline\n"
        for size, overlap in [(2, 1), (3, 1), (5, 4), (4, 2)]:
            with self.subTest(size=size, overlap=overlap):
                covered = set()
                for w in embed.windows(text, size, overlap):
                    covered.update(range(w.start, w.end))
                self.assertEqual(covered, set(range(len(text))))

    def test_without_overlap_windows_meet_only_at_whitespace(self):
        text = "one two three four five six seven"
        self.assertEqual(window_texts(text, 2, 0), ["one two", "three four", "five six", "seven"])

    def test_consecutive_windows_share_overlap_tokens(self):
        texts = window_texts("a b c d e f g h i j", 4, 2)
        self.assertEqual(texts, ["a b c d", "c d e f", "e f g h", "g h i j"])

    def test_empty_and_whitespace_texts_have_no_window(self):
        self.assertEqual(embed.windows("", 8, 2), [])
        self.assertEqual(embed.windows(" \n\t ", 8, 2), [])

    def test_short_text_is_one_window_of_the_whole_text(self):
        self.assertEqual(window_texts("Hello, world!", 8, 2), ["Hello, world!"])

    def test_tokens_are_words_and_punctuation_marks(self):
        self.assertEqual(embed.TOKEN_RE.findall("Grüße, o'clock!"), ["Grüße", ",", "o", "'", "clock", "!"])

    def test_overlap_not_below_size_is_refused(self):
        with self.assertRaises(ValueError):
            embed.windows("a b", 2, 2)


class ChunkIdTests(unittest.TestCase):
    def test_chunk_id_is_sha256_of_doc_nul_text(self):
        doc = "ab" * 32
        expected = sha256_hex(doc + "\0" + "window text")
        self.assertEqual(embed.chunk_id(doc, "window text"), expected)

    def test_same_window_in_same_document_keeps_its_id_another_document_does_not(self):
        doc_a, doc_b = "a" * 64, "b" * 64
        self.assertEqual(embed.chunk_id(doc_a, "x y"), embed.chunk_id(doc_a, "x y"))
        self.assertNotEqual(embed.chunk_id(doc_a, "x y"), embed.chunk_id(doc_b, "x y"))

    def test_repeated_windows_in_one_document_share_an_id(self):
        text = "alpha beta gamma delta alpha beta gamma delta"
        rows = embed.chunk_document("c" * 64, text, 4, 0)
        self.assertEqual(len(rows), 2)
        self.assertEqual(rows[0].chunk_id, rows[1].chunk_id)
        self.assertEqual([row.idx for row in rows], [0, 1])


class PackingTests(unittest.TestCase):
    def test_pack_is_little_endian_float32(self):
        blob = vectorstore.pack([1.0, -2.5, 0.1])
        self.assertEqual(len(blob), 12)
        self.assertEqual(blob, struct.pack("<3f", 1.0, -2.5, 0.1))
        self.assertEqual(list(vectorstore.unpack(blob))[:2], [1.0, -2.5])
        self.assertAlmostEqual(vectorstore.unpack(blob)[2], 0.1, places=6)

    def test_cosine_edge_cases(self):
        q = [1.0, 0.0]
        qn = 1.0
        self.assertAlmostEqual(embed.cosine(q, qn, [2.0, 0.0]), 1.0)
        self.assertAlmostEqual(embed.cosine(q, qn, [-3.0, 0.0]), -1.0)
        self.assertAlmostEqual(embed.cosine(q, qn, [0.0, 5.0]), 0.0)
        self.assertEqual(embed.cosine(q, qn, [0.0, 0.0]), 0.0)  # zero vector: no division by zero
        self.assertEqual(embed.cosine([0.0, 0.0], 0.0, [1.0, 1.0]), 0.0)


class StageCase(SanitizedStoreCase):
    """A manifest, an output folder and a hand-made sanitized store."""

    docs = {
        "The rocket engine burns liquid oxygen and kerosene in its combustion chamber.": ["space/engine.txt"],
        "Sourdough bread needs flour, water, salt and a lively starter culture.": ["kitchen/bread.txt", "copy/bread.txt"],
        "The violin has four strings tuned in fifths and is played with a bow.": ["music/violin.md"],
    }

    def vector_rows(self):
        with sqlite3.connect(self.layout.vectors_db) as db:
            return db.execute("SELECT chunk_id, model, dim, length(vec) FROM vectors ORDER BY chunk_id, model").fetchall()


class ChunkStageTests(StageCase):
    def test_rows_are_sorted_by_doc_and_idx_with_all_fields(self):
        summary = self.chunk()
        rows = read_jsonl(self.layout.chunks_path)
        self.assertEqual([(r["doc"], r["idx"]) for r in rows], sorted((r["doc"], r["idx"]) for r in rows))
        self.assertEqual(set(rows[0]), {"chunk_id", "doc", "idx", "start", "end", "chars", "tokens", "v"})
        self.assertTrue(all(r["v"] == 1 and r["chars"] == r["end"] - r["start"] for r in rows))
        self.assertEqual(summary["chunks"], len(rows))
        self.assertEqual(json.loads(self.layout.summary_path("chunk").read_text())["documents"], 3)

    def test_duplicate_documents_are_chunked_once(self):
        self.chunk()
        docs = {r["doc"] for r in read_jsonl(self.layout.chunks_path)}
        self.assertEqual(docs, set(self.ids.values()))  # bread.txt at two paths: one doc

    def test_chunking_is_deterministic(self):
        self.chunk()
        first = self.layout.chunks_path.read_bytes()
        self.chunk()
        self.assertEqual(self.layout.chunks_path.read_bytes(), first)

    def test_refuses_without_a_sanitized_store(self):
        for path in self.layout.sanitized_dir.iterdir():
            path.unlink()
        self.layout.sanitized_dir.rmdir()
        with self.assertRaisesRegex(StoreError, "run sanitize first"):
            self.chunk()
        self.assertFalse(self.layout.chunks_path.exists())

    def test_refuses_when_extract_has_a_document_sanitize_has_not_seen(self):
        rows = read_jsonl(self.layout.extract_listing)
        rows.append({"path": "new.txt", "doc": "f" * 64, "size": 3, "kind": "text", "status": "extracted", "reason": None})
        self.layout.extract_listing.write_text("".join(json.dumps(r) + "\n" for r in rows))
        code, out, err = run_cli("chunk", self.manifest_path, "--out", self.out)
        self.assertNotEqual(code, 0)
        self.assertIn("run sanitize first", err)
        self.assertEqual(len(err.strip().splitlines()), 1)
        self.assertFalse(self.layout.chunks_path.exists())

    def test_never_reads_the_extract_store_text(self):
        doc = next(iter(self.ids.values()))
        (self.layout.extract_dir / f"{doc}.txt").write_text("RAW SECRET hunter2")
        self.chunk()
        self.assertNotIn("hunter2", self.layout.chunks_path.read_text())


class EmbedStageTests(StageCase):
    def setUp(self):
        super().setUp()
        self.chunk()

    def test_probe_refuses_a_wrong_dimension_before_the_store_exists(self):
        with StubServer(dim=32) as stub:
            with self.assertRaisesRegex(ModelServerError, "32-dimensional.*dim = 64"):
                self.embed_with(stub)
            self.assertEqual(len(stub.requests), 1)  # the probe only
        self.assertFalse(self.layout.vectors_db.exists())

    def test_unreachable_endpoint_fails_closed(self):
        with clean_env(EMBED_URL=closed_port_url()):
            code, out, err = run_cli("embed", self.manifest_path, "--out", self.out)
        self.assertEqual(code, ModelServerError.exit_code)
        self.assertIn("cannot reach the model server", err)
        self.assertNotIn("Traceback", err)
        self.assertEqual(out, "")
        self.assert_windows_without_vectors()

    def assert_windows_without_vectors(self):
        """No answer at all leaves nothing in doubt: the windows are stored (keyword search finds them), no vector."""
        import sqlite3

        with sqlite3.connect(self.layout.vectors_db) as db:
            self.assertGreater(db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0], 0)
            self.assertEqual(db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0], 0)

    def test_batches_follow_embed_batch(self):
        with StubServer() as stub:
            summary = self.embed_with(stub, EMBED_BATCH="2")
            sizes = [len(body["input"]) for _, body in stub.requests[1:]]
        self.assertEqual(sum(sizes), summary["embedded"])
        self.assertTrue(all(size <= 2 for size in sizes))
        self.assertEqual(summary["batches"], math.ceil(summary["embedded"] / 2))

    def test_vectors_are_float32_of_the_pinned_dimension(self):
        with StubServer() as stub:
            self.embed_with(stub)
        rows = self.vector_rows()
        self.assertTrue(rows)
        self.assertTrue(all(dim == 64 and size == 4 * 64 for _, _, dim, size in rows))

    def test_a_rerun_reuses_every_vector(self):
        with StubServer() as stub:
            first = self.embed_with(stub)
            second = self.embed_with(stub)
            texts = stub.inputs()
        self.assertEqual(second["embedded"], 0)
        self.assertEqual(second["reused"], first["chunks"])
        self.assertEqual(len(texts), 1 + first["chunks"])  # one probe, each window once: nothing to embed, no probe
        self.assertEqual((first["probed"], second["probed"]), (True, False))

    def test_another_form_of_the_model_name_reembeds_nothing(self):
        """``init`` wrote ``x`` without a server and ``x:latest`` with one: the switch re-embedded a whole folder."""
        with StubServer(models=["multilingual-e5-small", "multilingual-e5-small:latest"]) as stub:
            first = self.embed_with(stub, self.manifest(model="multilingual-e5-small", size=self.size, overlap=2))
            for other in ("multilingual-e5-small:latest", "intfloat/Multilingual-E5-Small"):
                with self.subTest(other=other):
                    again = self.embed_with(stub, self.manifest(model=other, size=self.size, overlap=2))
                    self.assertEqual((again["embedded"], again["reused"]), (0, first["chunks"]))

    def test_a_store_keyed_by_another_form_of_the_name_is_migrated(self):
        """A store written before canonical keys: its ``:latest`` vectors serve the canonical key."""
        with StubServer() as stub:
            first = self.embed_with(stub, self.manifest(model="stub-model", size=self.size, overlap=2))
        with sqlite3.connect(self.layout.vectors_db) as db:  # as an older agent keyed them
            db.execute("UPDATE vectors SET model = 'stub-model:latest'")
            db.execute("PRAGMA user_version = 4")
        db = vectorstore.connect(self.layout.vectors_db, create=False)
        try:
            keys = {row[0] for row in db.execute("SELECT DISTINCT model FROM vectors")}
        finally:
            db.close()
        self.assertEqual(keys, {"stub-model"})
        with StubServer() as stub:
            again = self.embed_with(stub, self.manifest(model="stub-model:latest", size=self.size, overlap=2))
        self.assertEqual((again["embedded"], again["reused"]), (0, first["chunks"]))

    def test_repeated_windows_are_embedded_once(self):
        text = "echo echo echo echo echo echo echo echo echo echo echo echo echo echo echo echo"
        write_sanitized_store(self.layout, {text: ["echo.txt"]})
        self.chunk()
        with StubServer() as stub:
            summary = self.embed_with(stub)
        windows = read_jsonl(self.layout.chunks_path)
        self.assertGreater(len(windows), summary["chunks"])
        self.assertEqual(summary["embedded"], len({w["chunk_id"] for w in windows}))

    def test_a_second_model_adds_rows_and_the_first_models_rows_stay(self):
        with StubServer() as stub:
            first = self.embed_with(stub)
            before = self.vector_rows()
            second = self.embed_with(stub, self.manifest(model="other-model"))
        after = self.vector_rows()
        self.assertEqual(second["embedded"], first["chunks"])
        self.assertEqual(len(after), 2 * len(before))
        self.assertTrue(set(before) <= set(after))
        self.assertEqual({model for _, model, _, _ in after}, {"stub-model", "other-model"})

    def test_stale_vectors_are_kept_and_counted_after_a_document_changes(self):
        with StubServer() as stub:
            first = self.embed_with(stub)
            changed = dict(self.docs)
            del changed["The violin has four strings tuned in fifths and is played with a bow."]
            changed["The cello has four strings tuned in fifths and is played with a bow."] = ["music/violin.md"]
            self.restock(changed)
            self.chunk()
            second = self.embed_with(stub)
        violin_chunks = len(embed.windows("The violin has four strings tuned in fifths and is played with a bow.", 8, 2))
        self.assertEqual(second["stale_vectors"], violin_chunks)
        self.assertEqual(len(self.vector_rows()), first["chunks"] + second["embedded"])
        self.assertEqual(second["reused"], first["chunks"] - violin_chunks)

    def test_summary_holds_the_fields_scripts_read(self):
        with StubServer() as stub:
            self.embed_with(stub)
        summary = json.loads(self.layout.summary_path("embed").read_text())
        for key in ("model", "dim", "api", "chunks", "embedded", "reused", "stale_vectors"):
            self.assertIn(key, summary)
        self.assertEqual((summary["model"], summary["dim"], summary["api"]), ("stub-model", 64, "ollama"))

    def test_embed_refuses_without_chunks(self):
        self.layout.chunks_path.unlink()
        with StubServer() as stub:
            with self.assertRaisesRegex(StoreError, "run chunk first"):
                self.embed_with(stub)
            self.assertEqual(stub.requests, [])

    def test_embed_refuses_when_the_sanitized_store_changed_since_chunk(self):
        self.restock({"something else entirely here": ["a.txt"]})  # sanitize ran again: new text, new doc id
        with StubServer() as stub:
            with self.assertRaisesRegex(StoreError, "run chunk again"):
                self.embed_with(stub)

    def test_embed_refuses_a_sanitized_text_that_is_not_its_id(self):
        doc = next(iter(self.ids.values()))
        self.layout.doc_text_path(self.layout.sanitized_dir, doc).write_text("something else entirely here")
        with StubServer() as stub:
            with self.assertRaisesRegex(StoreError, "run sanitize again"):
                self.embed_with(stub)


class WireFormatTests(StageCase):
    def setUp(self):
        super().setUp()
        self.chunk()

    def test_openai_style_server_is_detected(self):
        with StubServer(wire_formats=("openai",)) as stub:
            summary = self.embed_with(stub)
            paths = {path for path, _ in stub.requests}
        self.assertEqual(summary["api"], "openai")
        self.assertIn("/v1/embeddings", paths)
        self.assertGreater(summary["embedded"], 0)

    def test_openai_results_are_matched_by_index(self):
        with StubServer(wire_formats=("openai",)) as stub:  # the stub lists data in reverse order
            self.embed_with(stub)
        with sqlite3.connect(self.layout.vectors_db) as db:
            rows = db.execute("SELECT c.text, v.vec FROM chunks c JOIN vectors v USING (chunk_id)").fetchall()
        for text, blob in rows:
            self.assertEqual(list(vectorstore.unpack(blob)), bag_of_words(text, 64))

    def test_a_forced_wrong_api_is_refused(self):
        with StubServer(wire_formats=("openai",)) as stub:
            with self.assertRaisesRegex(ModelServerError, "did not answer as an embedding server"):
                self.embed_with(stub, EMBED_API="ollama")
        self.assertFalse(self.layout.vectors_db.exists())

    def test_a_model_the_server_lacks_is_named(self):
        with StubServer(models=["nomic-embed-text"]) as stub:
            with self.assertRaisesRegex(ModelServerError, "has no model 'stub-model'; it serves 'nomic-embed-text'"):
                self.embed_with(stub)

    def test_bad_environment_values_are_refused(self):
        cases = {"EMBED_API": "grpc", "EMBED_BATCH": "0", "EMBED_TIMEOUT": "soon", "EMBED_URL": "ftp://x"}
        for name, value in cases.items():
            with self.subTest(name=name), clean_env(**{name: value}):
                with self.assertRaisesRegex(ConfigError, name):
                    EndpointConfig.from_env()

    def test_credentials_in_embed_url_never_reach_the_summary(self):
        config = EndpointConfig.from_env({"EMBED_URL": "http://user:pw@127.0.0.1:9/v1"})
        self.assertEqual(config.display_url, "http://127.0.0.1:9")

    def test_plain_http_to_another_machine_is_warned_of_and_loopback_or_https_is_not(self):
        warning = EndpointConfig.from_env({"EMBED_URL": "http://user:pw@10.1.2.3:11434/v1"}).cleartext_warning
        self.assertIn("http://10.1.2.3:11434 is plain http to another machine", warning)
        self.assertIn("unencrypted", warning)
        self.assertNotIn("pw", warning)
        for url in ("http://127.0.0.1:11434", "http://127.8.0.1:9", "http://localhost:8080/v1", "http://[::1]:8080",
                    "https://gpu.example.org"):
            with self.subTest(url=url):
                self.assertIsNone(EndpointConfig.from_env({"EMBED_URL": url}).cleartext_warning)
        for url in ("http://gpu.example.org", "http://localhost.example.org:80", "http://0.0.0.0:11434"):
            with self.subTest(url=url):
                self.assertIsNotNone(EndpointConfig.from_env({"EMBED_URL": url}).cleartext_warning)


class SearchTests(StageCase):
    def setUp(self):
        super().setUp()
        self.chunk()

    def test_search_ranks_the_right_document_first(self):
        with StubServer() as stub:
            self.embed_with(stub)
            with clean_env(EMBED_URL=stub.url):
                hits = embed.search(self.manifest(), self.layout, "flour water salt starter", k=3)
        self.assertEqual(hits[0].doc, self.ids["Sourdough bread needs flour, water, salt and a lively starter culture."])
        self.assertEqual(hits[0].paths, ["copy/bread.txt", "kitchen/bread.txt"])
        self.assertEqual([h.score for h in hits], sorted((h.score for h in hits), reverse=True))
        self.assertLessEqual(len(hits), 3)

    def test_search_json_through_the_cli(self):
        with StubServer() as stub:
            self.embed_with(stub)
            with clean_env(EMBED_URL=stub.url):
                code, out, err = run_cli("search", self.manifest_path, "violin four strings tuned in fifths", "-k", "2", "--out", self.out, "--json")
        self.assertEqual((code, err), (0, ""))
        hits = json.loads(out)
        self.assertEqual(len(hits), 2)
        for key in ("score", "doc", "idx", "chunk_id", "text", "paths"):
            self.assertIn(key, hits[0])
        self.assertEqual(hits[0]["paths"], ["music/violin.md"])

    def test_a_model_with_no_vectors_gives_an_empty_list(self):
        with StubServer() as stub:
            self.embed_with(stub)
        write_manifest(self.tmp, model="never-embedded", size=8, overlap=2)
        with clean_env(EMBED_URL=closed_port_url()):  # no server needed for no vectors
            code, out, err = run_cli("search", self.manifest_path, "anything", "--out", self.out, "--json")
        self.assertEqual((code, json.loads(out)), (0, []))
        # never silently stale: the windows this model has no vector for are counted on stderr, in one line
        self.assertRegex(err, r"^bastion_agent search: \d+ of your windows still wait for vectors[^\n]*\n$")

    def test_stale_vectors_never_appear_in_results(self):
        with StubServer() as stub:
            self.embed_with(stub)
            bread = "Sourdough bread needs flour, water, salt and a lively starter culture."
            bread_doc = self.ids[bread]
            self.restock({t: p for t, p in self.docs.items() if t != bread})
            self.chunk()
            self.embed_with(stub)
            with clean_env(EMBED_URL=stub.url):
                hits = embed.search(self.manifest(), self.layout, "flour water salt starter", k=10)
        self.assertNotIn(bread_doc, {hit.doc for hit in hits})

    def test_search_before_any_embed_says_what_to_do(self):
        with clean_env():
            code, out, err = run_cli("search", self.manifest_path, "anything", "--out", self.out)
        self.assertNotEqual(code, 0)
        self.assertIn("run embed (or sweep) first", err)

    def test_an_empty_query_is_refused(self):
        with StubServer() as stub:
            self.embed_with(stub)
        code, out, err = run_cli("search", self.manifest_path, "   ", "--out", self.out)
        self.assertEqual(code, ConfigError.exit_code)
        self.assertIn("query is empty", err)


if __name__ == "__main__":
    unittest.main()
