"""The embed stage against servers that fail: retries, limits, bad vectors, kills, readers.

Every test runs against ``fault_stub.FaultStub`` on loopback with an
injected sleep and clock (``fault_case.FakeTime``), so no test waits out a backoff.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from unittest import mock

from bastion_agent.core.errors import ConfigError, ModelServerError
from bastion_agent.core.layout import read_jsonl
from bastion_agent.embedding import vectorstore
from bastion_agent.embedding.client import EmbedClient
from bastion_agent.embedding.endpoint import EndpointConfig
from bastion_agent.embedding.failures import (
    BATCH_TOO_LARGE,
    FATAL,
    INPUT_TOO_LONG,
    REJECTED,
    TRANSIENT,
    classify_http,
)
from bastion_agent.embedding.transport import HTTPFailure, parse_retry_after, post_json
from bastion_agent.testing.fault_case import POISON, FaultCase, has_poison
from bastion_agent.testing.fault_stub import (
    Fault,
    FaultStub,
    endless,
    llamacpp_too_large,
    nested_answer,
    ollama_too_long,
    overloaded,
    tei_batch_limit,
    tei_body_too_large,
)
from bastion_agent.core.httpthread import ServesInBackground, make_server
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import (
    clean_env,
    closed_port_url,
    run_cli,
    run_python_limited,
)

class ProbeGateTests(FaultCase):
    def test_a_busy_server_at_the_probe_stops_at_once_without_retrying(self):
        with FaultStub(plan=[overloaded(503)]) as stub:
            with self.assertRaisesRegex(ModelServerError, "HTTP 503"):
                self.embed_with(stub)
            self.assertEqual(stub.posts, 1)
        self.assertEqual(self.time.sleeps, [])
        self.assertFalse(self.layout.vectors_db.exists())

    def test_a_wrong_answer_to_the_probe_stops_before_the_store(self):
        with FaultStub(plan=[Fault(zero=True)], wire_formats=("ollama",)) as stub:
            with self.assertRaisesRegex(ModelServerError, "all-zero"):
                self.embed_with(stub)
        self.assertFalse(self.layout.vectors_db.exists())

    def test_connection_refused_fails_fast_through_the_cli(self):
        with clean_env(EMBED_URL=closed_port_url()):
            code, out, err = run_cli("embed", self.manifest_path, "--out", self.layout.root)
        self.assertEqual(code, ModelServerError.exit_code)
        self.assertIn("cannot reach the model server", err)
        # no answer at all: the windows are stored for keyword search, without a vector
        with sqlite3.connect(self.layout.vectors_db) as db:
            self.assertGreater(db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0], 0)
            self.assertEqual(db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0], 0)


class OrdinaryWebServer(ServesInBackground):
    """A web server that is not a model server: an HTML page of many lines for any GET, an HTML 404 for any POST."""

    PAGE = "<!DOCTYPE html>\n<html>\n<head><title>Welcome</title></head>\n<body>\n" + "<p>line</p>\n" * 15 + "</body></html>\n"

    def __init__(self):
        page = self.PAGE.encode()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, status):
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def do_GET(self):
                self.answer(200)

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.answer(404)

        self.httpd = make_server("127.0.0.1", 0, Handler)


class ErrorsThatSayTheFixTests(FaultCase):
    """Regression: each of these printed something that misled a newcomer; now one line that says the fix."""

    def embed_cli(self, url: str) -> tuple[int, str, str]:
        with clean_env(EMBED_URL=url):
            return run_cli("embed", self.manifest_path, "--out", self.layout.root)

    def assert_one_line(self, code: int, err: str, *expected: str) -> None:
        self.assertEqual(code, ModelServerError.exit_code, err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        for text in expected:
            self.assertIn(text, err)
        self.assertNotIn("Traceback", err)
        self.assertFalse(self.layout.vectors_db.exists())

    def test_a_mistyped_model_lists_the_names_the_server_has(self):
        with StubServer(models=["stub-model-large:latest", "nomic-embed-text:latest"]) as stub:
            code, out, err = self.embed_cli(stub.url)
        self.assert_one_line(code, err, "has no model 'stub-model'", "'stub-model-large:latest'",
                             "'nomic-embed-text:latest'", "init --update")
        self.assertNotIn("pulling", err)

    def test_an_ordinary_web_server_is_one_line_with_status_and_content_type_never_its_body(self):
        with OrdinaryWebServer() as web:
            code, out, err = self.embed_cli(web.url)
        self.assert_one_line(code, err, "HTTP 404", "text/html", "did not answer as an embedding server")
        self.assertNotIn("<", err)
        self.assertNotIn("line", err.replace("one line", ""))

    def test_a_route_in_embed_url_says_which_part_to_drop(self):
        with StubServer() as stub:
            for route in ("/api/embed", "/v1/embeddings/"):
                with self.subTest(route=route):
                    code, out, err = self.embed_cli(stub.url + route)
                    self.assertEqual(code, ConfigError.exit_code, err)
                    self.assertIn(f"drop {route.rstrip('/')} (EMBED_URL={stub.url})", err)
                    self.assertEqual(len(err.strip().splitlines()), 1, err)
            self.assertEqual(stub.requests, [])

    def test_https_to_a_plain_http_server_says_so(self):
        with StubServer() as stub:
            code, out, err = self.embed_cli("https" + stub.url[len("http"):])
        self.assert_one_line(code, err, "answers plain HTTP", f"EMBED_URL={stub.url}")
        self.assertNotIn("start one", err)


class RetryTests(FaultCase):
    def test_transient_failures_are_retried_and_nothing_is_lost(self):
        plan = [Fault(), overloaded(503), overloaded(429, retry_after="7"), Fault(reset=True), Fault(truncated=True),
                overloaded(502, imitates="llama.cpp"), overloaded(504, imitates="tei")]
        with FaultStub(plan=plan) as stub:
            summary = self.embed_with(stub)
        self.assertEqual(summary["retries"], 6)
        self.assertEqual(summary["failed"], 0)
        self.assertEqual(summary["embedded"], summary["chunks"])
        self.assert_every_vector_right()
        # backoff with jitter fixed at 0.5: 3/4 of 0.5 * 2**attempt; Retry-After honoured as given
        self.assertEqual(self.time.sleeps, [0.375, 7.0, 1.5, 3.0, 6.0, 12.0])

    def test_a_timeout_is_retried(self):
        with FaultStub(plan=[Fault(), Fault(delay=0.6)]) as stub:
            summary = self.embed_with(stub, EMBED_TIMEOUT="0.2")
        self.assertEqual((summary["retries"], summary["failed"]), (1, 0))
        self.assert_every_vector_right()

    def test_retries_stop_at_the_deadline_with_the_server_and_last_status_named(self):
        with FaultStub(rule=lambda n, texts, body: overloaded(503) if n else None) as stub:
            with self.assertRaises(ModelServerError) as caught:
                self.embed_with(stub, deadline=30.0)
        message = str(caught.exception)
        self.assertIn(stub.url, message)
        self.assertIn("HTTP 503", message)
        self.assertIn("EMBED_RETRY_DEADLINE=30s", message)
        self.assertLessEqual(sum(self.time.sleeps), 30.0)
        summary = self.summary()
        self.assertEqual((summary["embedded"], summary["stopped"]), (0, "retry_deadline"))
        self.assertEqual(self.stored(), {})

    def test_the_server_going_away_and_coming_back_is_waited_for(self):
        stub = FaultStub(plan=[Fault(), Fault(), overloaded(503)])

        def on_sleep(count):
            if count == 1:
                stub.go_away()  # the next tries meet a closed port
            elif count == 3:
                stub.come_back()

        self.time.on_sleep = on_sleep
        with stub:
            summary = self.embed_with(stub, EMBED_BATCH="4")
        self.assertEqual(summary["retries"], 3)
        self.assertEqual(summary["embedded"], summary["chunks"])
        self.assert_every_vector_right()


class BatchLimitTests(FaultCase):
    def test_tei_batch_limit_splits_and_the_size_is_remembered(self):
        rule = lambda n, texts, body: tei_batch_limit(len(texts), 4) if len(texts) > 4 else None
        with FaultStub(rule=rule, wire_formats=("openai",)) as stub:
            summary = self.embed_with(stub, EMBED_BATCH="8")
            sizes = [len(body["input"]) for _, body in stub.requests[1:]]
        self.assertEqual(stub.faults_served, {"http_422": 1})
        self.assertEqual(summary["batch_size_final"], 4)
        self.assertTrue(all(size <= 4 for size in sizes[1:]))
        self.assertEqual(summary["failed"], 0)
        self.assert_every_vector_right()

    def test_a_413_without_a_limit_halves_the_batch(self):
        rule = lambda n, texts, body: tei_body_too_large() if len(texts) > 2 else None
        with FaultStub(rule=rule, wire_formats=("openai",)) as stub:
            summary = self.embed_with(stub, EMBED_BATCH="8")
        self.assertEqual(summary["batch_size_final"], 2)
        self.assertEqual(summary["embedded"], summary["chunks"])
        self.assert_every_vector_right()


class PoisonCase(FaultCase):
    poison_in = 1

    def poison_text(self) -> str:
        (text,) = [text for text in self.chunk_texts() if POISON in text]
        return text


class TooLongInputTests(PoisonCase):
    def test_llamacpp_too_large_input_is_isolated_and_recorded_as_failed(self):
        rule = lambda n, texts, body: llamacpp_too_large() if has_poison(texts) else None
        with FaultStub(rule=rule, wire_formats=("openai",)) as stub:
            with self.assertRaisesRegex(ModelServerError, r"refused 1 of \d+ chunks \(too_long: 1\)"):
                self.embed_with(stub, EMBED_BATCH="8")
        summary = self.summary()
        self.assertEqual((summary["failed"], summary["failed_by_reason"]), (1, {"too_long": 1}))
        self.assertEqual(summary["batch_size_final"], 8)  # one long input does not shrink the batches
        self.assertEqual(summary["embedded"], summary["chunks"] - 1)
        self.assert_every_vector_right(except_texts={self.poison_text()})
        self.assertNotIn(POISON, self.layout.summary_path("embed").read_text())

    def test_ollama_too_long_input_is_retried_truncated(self):
        def rule(n, texts, body):
            return ollama_too_long() if has_poison(texts) and not body.get("truncate") else None

        with FaultStub(rule=rule, wire_formats=("ollama",)) as stub:
            summary = self.embed_with(stub, EMBED_BATCH="8")
            truncated = [body["input"] for _, body in stub.requests if body.get("truncate")]
        self.assertEqual((summary["failed"], summary["truncated"]), (0, 1))
        self.assertEqual(truncated, [[self.poison_text()]])
        self.assert_every_vector_right()

    def test_a_rerun_retries_only_the_failed_chunk(self):
        rule = lambda n, texts, body: llamacpp_too_large() if has_poison(texts) else None
        with FaultStub(rule=rule, wire_formats=("openai",)) as stub:
            with self.assertRaises(ModelServerError):
                self.embed_with(stub)
        with FaultStub(wire_formats=("openai",)) as stub:
            summary = self.embed_with(stub)
            texts = stub.inputs()
        self.assertEqual(texts[1:], [self.poison_text()])  # after the probe: the failed chunk only
        self.assertEqual((summary["embedded"], summary["retried_failures"], summary["failed"]), (1, 1, 0))
        self.assert_every_vector_right()
        with sqlite3.connect(self.layout.vectors_db) as db:
            self.assertEqual(db.execute("SELECT COUNT(*) FROM embed_failures").fetchone()[0], 0)

    def test_the_cli_exits_non_zero_after_writing_the_summary(self):
        rule = lambda n, texts, body: llamacpp_too_large() if has_poison(texts) else None
        with FaultStub(rule=rule) as stub, clean_env(EMBED_URL=stub.url):
            code, out, err = run_cli("embed", self.manifest_path, "--out", self.layout.root)
        self.assertEqual(code, ModelServerError.exit_code)
        self.assertIn("re-run embed to retry only those", err)
        self.assertEqual(self.summary()["failed"], 1)


class BadVectorTests(PoisonCase):
    cases = {
        "non_finite": Fault(nan=True),
        "zero_vector": Fault(zero=True),
        "wrong_count": Fault(wrong_count=True),
        "http_500": Fault(status=500, message="failed to decode batch", imitates="llama.cpp"),
        "http_424": Fault(status=424, message="backend error", imitates="tei"),
    }

    def test_a_bad_answer_is_never_stored_and_only_its_input_fails(self):
        for reason, fault in self.cases.items():
            with self.subTest(reason=reason):
                if self.layout.vectors_db.exists():
                    self.layout.vectors_db.unlink()
                rule = lambda n, texts, body, fault=fault: fault if has_poison(texts) else None
                with FaultStub(rule=rule, wire_formats=("openai",)) as stub:
                    with self.assertRaises(ModelServerError):
                        self.embed_with(stub, EMBED_BATCH="8")
                summary = self.summary()
                self.assertEqual(summary["failed_by_reason"], {reason: 1})
                self.assert_every_vector_right(except_texts={self.poison_text()})

    def test_a_wrong_dimension_mid_run_stops_the_stage(self):
        with FaultStub(plan=[Fault(), Fault(), Fault(wrong_dim=True)]) as stub:
            with self.assertRaisesRegex(ModelServerError, "63-dimensional vector, expected 64"):
                self.embed_with(stub, EMBED_BATCH="4")
        summary = self.summary()
        self.assertEqual((summary["embedded"], summary["stopped"]), (4, "refused_wrong_dim"))
        self.assertEqual(len(self.stored()), 4)
        self.assert_every_vector_right(except_texts=set(self.chunk_texts()) - set(self.stored()))

    def test_a_model_removed_mid_run_stops_at_once(self):
        gone = Fault(status=404, message='model "stub-model" not found, try pulling it first')
        with FaultStub(plan=[Fault(), gone]) as stub:
            with self.assertRaisesRegex(ModelServerError, "not found"):
                self.embed_with(stub, EMBED_BATCH="4")
            self.assertEqual(stub.posts, 2)


class FailureStreakTests(FaultCase):
    doc_count = 30  # 90 windows

    def test_a_server_refusing_everything_stops_after_a_streak(self):
        with FaultStub(rule=lambda n, texts, body: Fault(status=500) if n else None) as stub:
            with self.assertRaisesRegex(ModelServerError, "refused each of the last 64 chunks"):
                self.embed_with(stub, EMBED_BATCH="2")
        summary = self.summary()
        self.assertEqual((summary["stopped"], summary["failed"], summary["embedded"]), ("failure_streak", 64, 0))


class EncodingTests(FaultCase):
    def test_base64_is_used_when_the_server_answers_it(self):
        with FaultStub(wire_formats=("openai",)) as stub:
            summary = self.embed_with(stub)
            formats = {body.get("encoding_format") for _, body in stub.requests}
        self.assertEqual((summary["api"], summary["encoding"]), ("openai", "base64"))
        self.assertEqual(formats, {"base64"})
        self.assert_every_vector_right()

    def test_floats_are_used_when_base64_is_ignored_or_refused(self):
        for option in ("float_only", "reject_base64"):
            with self.subTest(option=option):
                if self.layout.vectors_db.exists():
                    self.layout.vectors_db.unlink()
                with FaultStub(wire_formats=("openai",), **{option: True}) as stub:
                    summary = self.embed_with(stub)
                self.assertEqual(summary["encoding"], "float")
                self.assertEqual(summary["failed"], 0)
                self.assert_every_vector_right()


class ConcurrencyTests(FaultCase):
    doc_count = 8

    def test_concurrent_requests_store_every_vector_once(self):
        with FaultStub(rule=lambda n, texts, body: Fault(delay=0.1)) as stub:
            summary = self.embed_with(stub, EMBED_BATCH="2", EMBED_CONCURRENCY="3", EMBED_BATCH_FIXED="1")
        self.assertGreater(stub.max_in_flight, 1)
        self.assertEqual((summary["embedded"], summary["concurrency"]), (summary["chunks"], 3))
        self.assert_every_vector_right()

    def test_a_fatal_answer_in_one_worker_stops_the_others_with_that_error(self):
        first_doc = min(row["doc"] for row in read_jsonl(self.layout.chunks_path))
        first_words = set(self.doc_words[first_doc])

        def rule(n, texts, body):
            if n and first_words & set(" ".join(texts).split()):
                return Fault(status=503, delay=0.3)  # the batch the stage waits on first: still failing
            if n:
                return Fault(status=404, message='model "stub-model" not found, try pulling it first')
            return None

        with FaultStub(rule=rule) as stub:
            with self.assertRaisesRegex(ModelServerError, "not found"):
                self.embed_with(stub, EMBED_BATCH="3", EMBED_CONCURRENCY="2", EMBED_BATCH_FIXED="1")
        self.assertEqual(self.summary()["stopped"], "refused_http_404")

    def test_bad_settings_are_refused(self):
        for name, value in {"EMBED_CONCURRENCY": "0", "EMBED_RETRY_DEADLINE": "never"}.items():
            with self.subTest(name=name), clean_env(**{name: value}):
                with self.assertRaisesRegex(ConfigError, name):
                    EndpointConfig.from_env()


class InterruptTests(FaultCase):
    def test_ctrl_c_writes_the_summary_of_what_was_stored(self):
        real = vectorstore.store_batch
        calls = []

        def interrupted_second_time(*args, **kwargs):
            calls.append(1)
            if len(calls) == 2:
                raise KeyboardInterrupt
            return real(*args, **kwargs)

        with FaultStub() as stub, mock.patch.object(vectorstore, "store_batch", interrupted_second_time):
            with clean_env(EMBED_URL=stub.url, EMBED_BATCH="4"):
                code, out, err = run_cli("embed", self.manifest_path, "--out", self.layout.root)
        self.assertEqual(code, 130)
        summary = self.summary()
        self.assertEqual((summary["interrupted"], summary["embedded"]), (True, 4))
        self.assertEqual(len(self.stored()), 4)


class ClassifyTests(unittest.TestCase):
    def test_each_servers_errors_are_understood(self):
        cases = [
            (400, "the input length exceeds the context length", INPUT_TOO_LONG),
            (500, "input (600 tokens) is too large to process. increase the physical batch size", INPUT_TOO_LONG),
            (400, "input is too large to process. increase the context size", INPUT_TOO_LONG),
            (413, "Input validation error: `inputs` must have less than 512 tokens. Given: 600", INPUT_TOO_LONG),
            (422, "batch size 64 > maximum allowed batch size 32", BATCH_TOO_LARGE),
            (413, "Failed to buffer the request body: length limit exceeded", BATCH_TOO_LARGE),
            (429, "model is overloaded", TRANSIENT),
            (503, "server busy, please try again. maximum pending requests exceeded", TRANSIENT),
            (404, 'model "x" not found, try pulling it first', FATAL),
            (401, "unauthorized", FATAL),
            (424, "backend error", REJECTED),
            (400, "failed to encode response: json: unsupported value: NaN", REJECTED),
        ]
        for status, message, kind in cases:
            with self.subTest(message=message):
                self.assertEqual(classify_http(HTTPFailure(status, message), "x").kind, kind)
        self.assertEqual(classify_http(HTTPFailure(422, "batch size 64 > maximum allowed batch size 32"), "x").limit, 32)

    def test_retry_after_in_seconds_or_as_a_date(self):
        self.assertEqual(parse_retry_after("7"), 7.0)
        self.assertEqual(parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=lambda: 1445412480.0), 10.0)
        self.assertIsNone(parse_retry_after("soon"))
        self.assertIsNone(parse_retry_after(None))


class EndlessAnswerTests(unittest.TestCase):
    """A model server that answers without end cannot take the agent's memory."""

    def post_under_a_limit(self, url: str, caught: str, shown: str) -> str:
        """What ``print(shown)`` says of the ``caught`` error of one ``post_json`` to ``url``, within 768 MiB."""
        code = (
            f"from bastion_agent.embedding.transport import {caught}, post_json\n"
            "try:\n"
            f"    post_json({url!r}, {{'model': 'm', 'input': ['a']}}, 60)\n"
            f"except {caught} as exc:\n"
            f"    print({shown})\n"
        )
        result = run_python_limited(code, 768 << 20)
        self.assertEqual(result.returncode, 0, result.stderr)
        return result.stdout.strip()

    def test_an_endless_embedding_answer_is_dropped_under_an_address_space_limit(self):
        from bastion_agent.testing.stub_server import StubServer

        with StubServer(routes={"/v1/embeddings": endless}) as stub:
            shown = self.post_under_a_limit(stub.url + "/v1/embeddings", "BadAnswer", "exc")
        self.assertEqual(shown, "an answer over 268435456 bytes")

    def test_an_endless_error_answer_is_dropped_under_an_address_space_limit(self):
        """A 500 whose body never ends: its message is read to a bound, not whole (it took all memory)."""
        from bastion_agent.testing.stub_server import StubServer

        def endless_error(handler):
            handler.rfile.read(int(handler.headers.get("Content-Length") or 0))  # all of it: unread, the close is a reset
            handler.send_response(500)
            handler.send_header("Content-Type", "text/plain")
            handler.end_headers()
            with contextlib.suppress(OSError):
                for _ in range(1 << 14):  # 1 GiB at most, should the client never hang up
                    handler.wfile.write(b"x" * 65536)

        with StubServer(routes={"/v1/embeddings": endless_error}) as stub:
            shown = self.post_under_a_limit(stub.url + "/v1/embeddings", "HTTPFailure", "exc.status, len(exc.message)")
        status, length = shown.split()
        self.assertEqual(status, "500")
        self.assertLessEqual(int(length), 300)

    def test_a_huge_answer_to_one_text_is_refused_before_it_is_parsed(self):
        """200 MB of ``1e0,`` for one input: within MAX_ANSWER_BYTES, but parsed it is 50M floats (1.6 GB).

        A legitimate answer is a few hundred KB per input, so the bound is
        per input: the probe (and every query of search and serve) refuses it
        under an address-space limit where it used to raise MemoryError.
        """
        from bastion_agent.testing.stub_server import StubServer

        piece = b"1e0," * 16384
        count = (200 << 20) // len(piece)

        def huge(handler):
            handler.rfile.read(int(handler.headers.get("Content-Length") or 0))  # all of it: unread, the close is a reset
            head, tail = b'{"embeddings": [[', b"1e0]]}"
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(head) + len(piece) * count + len(tail)))
            handler.end_headers()
            with contextlib.suppress(OSError):
                handler.wfile.write(head)
                for _ in range(count):
                    handler.wfile.write(piece)
                handler.wfile.write(tail)

        with StubServer(routes={"/api/embed": huge}) as stub:
            code = (
                "from bastion_agent.core.errors import ModelServerError\n"
                "from bastion_agent.embedding.client import EmbedClient\n"
                "from bastion_agent.embedding.endpoint import EndpointConfig\n"
                "try:\n"
                f"    EmbedClient(EndpointConfig(url={stub.url!r}, wire_format='ollama', timeout=60), 'm').probe(64)\n"
                "except ModelServerError as exc:\n"
                "    print(exc)\n"
            )
            result = run_python_limited(code, 768 << 20)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("an answer of", result.stdout)

    def test_a_redirect_is_not_followed_to_another_server(self):
        """A model server that answers 302 elsewhere: urllib followed it (as a GET), so the vectors came from a host
        EMBED_URL never named. Now the redirect is the answer: the probe fails in one line, the other host sees nothing."""
        from bastion_agent.testing.stub_server import StubServer

        elsewhere_hits = []

        def elsewhere(handler):
            handler.rfile.read(int(handler.headers.get("Content-Length") or 0))  # all of it: unread, the close is a reset
            elsewhere_hits.append(handler.command)
            body = json.dumps({"embeddings": [[1.0] * 64], "data": [{"index": 0, "embedding": [1.0] * 64}]}).encode()
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)

        with StubServer(routes={"/api/embed": elsewhere, "/v1/embeddings": elsewhere}) as other:
            def redirect(handler):
                handler.rfile.read(int(handler.headers.get("Content-Length") or 0))  # all of it: unread, the close is a reset
                handler.send_response(302)
                handler.send_header("Location", other.url + handler.path)
                handler.send_header("Content-Length", "0")
                handler.end_headers()

            with StubServer(routes={"/api/embed": redirect, "/v1/embeddings": redirect}) as stub:
                for api in ("ollama", "openai"):
                    with self.subTest(api=api), self.assertRaises(ModelServerError) as caught:
                        EmbedClient(EndpointConfig(url=stub.url, wire_format=api, timeout=10), "m").probe(64)
                    self.assertIn("302", str(caught.exception))
        self.assertEqual(elsewhere_hits, [])

    def test_a_deeply_nested_answer_is_a_bad_answer_not_a_crash(self):
        """JSON nested past the parser's recursion limit: the probe fails with one line (it raised RecursionError)."""
        from bastion_agent.testing.stub_server import StubServer

        with StubServer(routes={"/v1/embeddings": nested_answer, "/api/embed": nested_answer}) as stub:
            client = EmbedClient(EndpointConfig(url=stub.url, timeout=10), "m")
            with self.assertRaises(ModelServerError) as caught:
                client.probe(64)
        self.assertIn("not JSON", str(caught.exception))

    def test_an_answer_trickled_past_the_timeout_is_abandoned(self):
        """One byte at a time, each within the socket timeout: the whole answer is still bounded by EMBED_TIMEOUT.

        Before, a server that kept trickling held the request (and, in serve, a model slot) for as long as it liked.
        """
        from bastion_agent.testing.stub_server import StubServer

        release = threading.Event()
        self.addCleanup(release.set)

        def trickle(handler):
            handler.rfile.read(int(handler.headers.get("Content-Length") or 0))  # all of it: unread, the close is a reset
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.end_headers()
            with contextlib.suppress(OSError):
                for _ in range(600):  # 60 s of spaces, then a valid answer
                    if release.wait(0.1):
                        return
                    handler.wfile.write(b" ")
                    handler.wfile.flush()
                handler.wfile.write(json.dumps({"data": [{"index": 0, "embedding": [1.0] * 64}]}).encode())

        with StubServer(routes={"/v1/embeddings": trickle}) as stub:
            with self.assertRaises(TimeoutError):
                post_json(stub.url + "/v1/embeddings", {"model": "m", "input": ["a"]}, 1)


    def test_a_server_that_trickles_its_headers_leaves_no_thread_behind(self):
        """The status line a byte at a time: the caller gets its TimeoutError, and the request's thread ends too.

        Before, the abandoned thread (and its connection) lived for as long as the server kept trickling:
        one more for every timed-out query serve sent it.
        """
        from bastion_agent.testing.stub_server import StubServer

        release = threading.Event()
        self.addCleanup(release.set)

        def trickle_headers(handler):
            handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
            with contextlib.suppress(OSError):
                for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"x" * 600:  # 60 s of header, never ended
                    if release.wait(0.1):
                        return
                    handler.wfile.write(bytes([byte]))
                    handler.wfile.flush()

        before = set(threading.enumerate())
        with StubServer(routes={"/v1/embeddings": trickle_headers}) as stub:
            with self.assertRaises(TimeoutError):
                post_json(stub.url + "/v1/embeddings", {"model": "m", "input": ["a"]}, 1)
            abandoned = [thread for thread in threading.enumerate() if thread not in before
                         and thread.name == "bounded-request"]
            for thread in abandoned:
                thread.join(15)  # the server would go on for 60 s
            self.assertEqual([thread for thread in abandoned if thread.is_alive()], [], "the request's thread lives on")


def slow_after_the_first_batches(n: int, texts, body) -> Fault:
    """Quick answers for the first batches, then a second each: the run is still midway when the test
    signals it, however long a loaded machine keeps the test from sending the signal."""
    return Fault(delay=0.05 if n < 4 else 1.0)


class CrashSafetyTests(FaultCase):
    doc_count = 40  # 120 windows, 30 batches of 4

    def test_sigkill_midway_leaves_whole_batches_and_a_rerun_completes(self):
        with FaultStub(rule=slow_after_the_first_batches) as stub:
            process = self.start_embed(stub)
            try:
                stored = self.wait_for_vectors(process, at_least=8)
                os.kill(process.pid, signal.SIGKILL)
            finally:
                process.wait(timeout=30)
                process.stderr.close()
        self.assertEqual(process.returncode, -signal.SIGKILL)
        with sqlite3.connect(self.layout.vectors_db) as db:
            self.assertEqual(db.execute("PRAGMA integrity_check").fetchone()[0], "ok")
            count = db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0]
        self.assertGreaterEqual(count, stored)
        self.assertLess(count, 120)  # killed midway
        self.assertEqual(count % 4, 0)  # whole batches only
        with FaultStub() as stub:
            summary = self.embed_with(stub, EMBED_BATCH="4")
        self.assertEqual(summary["embedded"], 120 - count)
        with sqlite3.connect(self.layout.vectors_db) as db:
            per_chunk = db.execute("SELECT COUNT(*) FROM vectors GROUP BY chunk_id").fetchall()
        self.assertEqual(len(per_chunk), 120)
        self.assertEqual({n for (n,) in per_chunk}, {1})
        self.assert_every_vector_right()

    def test_sigint_midway_exits_130_with_a_summary_of_what_was_stored(self):
        with FaultStub(rule=slow_after_the_first_batches) as stub:
            process = self.start_embed(stub, EMBED_CONCURRENCY="2")
            try:
                self.wait_for_vectors(process, at_least=8)
                process.send_signal(signal.SIGINT)
                _, err = process.communicate(timeout=30)
            finally:
                process.kill()
        self.assertEqual(process.returncode, 130)
        self.assertIn("interrupted", err.decode())
        summary = self.summary()
        with sqlite3.connect(self.layout.vectors_db) as db:
            count = db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0]
        self.assertTrue(summary["interrupted"])
        self.assertEqual(summary["embedded"], count)
        self.assertEqual(summary["still_missing"], 120 - count)
        self.assertLess(count, 120)

    def start_embed(self, stub, **env_values) -> subprocess.Popen:
        root = Path(__file__).resolve().parents[2]
        env = {key: value for key, value in os.environ.items() if not key.startswith(("EMBED_", "BASTION_"))}
        env.update(EMBED_URL=stub.url, EMBED_BATCH="4", EMBED_BATCH_FIXED="1", PYTHONPATH=str(root), **env_values)
        # A shell starts its background jobs with SIGINT ignored, and Python keeps an ignored SIGINT: the
        # embed would never see the test's signal when the suite itself runs in the background.
        with_sigint = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                       "runpy.run_module('bastion_agent', run_name='__main__', alter_sys=True)")
        return subprocess.Popen(
            [sys.executable, "-c", with_sigint, "embed", str(self.manifest_path), "--out", str(self.layout.root)],
            cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )

    def wait_for_vectors(self, process, at_least: int) -> int:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                self.fail(f"embed ended before it was killed: {process.stderr.read().decode()[-500:]}")
            if self.layout.vectors_db.exists():
                try:
                    with sqlite3.connect(self.layout.vectors_db, timeout=5) as db:
                        count = db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0]
                except sqlite3.OperationalError:  # the schema is being created
                    count = 0
                if count >= at_least:
                    return count
            time.sleep(0.02)
        self.fail("embed stored nothing within a minute")


class ConcurrentReaderTests(FaultCase):
    doc_count = 16  # 48 windows, 12 batches of 4

    def test_a_reader_never_sees_half_a_batch_nor_a_locked_database(self):
        errors, seen = [], []
        done = threading.Event()

        def reader():
            while not done.is_set():
                if not self.layout.vectors_db.exists():
                    time.sleep(0.005)
                    continue
                try:
                    db = vectorstore.connect(self.layout.vectors_db, create=False)
                    try:
                        with vectorstore.transaction(db, write=False):
                            rows = list(vectorstore.searchable(db, self.manifest.embed.vector_key))
                    finally:
                        db.close()
                except Exception as exc:  # any error at all is a failure of the store
                    errors.append(repr(exc))
                    return
                seen.append(len(rows))

        thread = threading.Thread(target=reader)
        thread.start()
        try:
            with FaultStub(rule=lambda n, texts, body: Fault(delay=0.02)) as stub:
                summary = self.embed_with(stub, EMBED_BATCH="4", EMBED_BATCH_FIXED="1")
        finally:
            done.set()
            thread.join()
        self.assertEqual(errors, [])
        self.assertEqual(summary["embedded"], 48)
        self.assertGreater(len(set(seen)), 2)  # it read while embed wrote
        self.assertTrue(all(n % 4 == 0 for n in seen), sorted(set(seen)))


if __name__ == "__main__":
    unittest.main()
