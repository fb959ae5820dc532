"""``serve``: the HTTP API, its limits and exposure rules, reloads, bursts, the log, OpenAPI."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bastion_agent import embed
from bastion_agent.core import loopback
from bastion_agent.core.errors import ConfigError
from bastion_agent.embedding import vectorstore
from bastion_agent.embedding.endpoint import EndpointConfig
from bastion_agent.serving import http_handler, http_server, request_error, search_service, serve_openapi, serve_page, serve_settings
from bastion_agent.serving.search_limits import SearchLimits
from bastion_agent.testing.serve_store import (
    DOCS,
    TOKEN,
    WAIT_SECONDS,
    Store,
    StoreCase,
    raw_exchange,
    request,
    start,
    status_of,
)
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import clean_env, closed_port_url, run_cli, write_manifest

BREAD = "Sourdough bread needs flour, water, salt and a lively starter culture."


def wait_for(condition, what: str):
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"gave up waiting for {what}")


class SearchApiTests(StoreCase):
    def setUp(self):
        self.server = start(self.store, self)
        self.url = self.server.url

    def search(self, query: str, **params):
        return request(self.url, path="/search?" + urllib.parse.urlencode({"q": query, **params}))

    def test_get_search_answers_the_hits_search_json_prints(self):
        status, _, answer = self.search("flour water salt starter", k=3)
        self.assertEqual(status, 200)
        with clean_env(EMBED_URL=self.stub.url):
            code, out, err = run_cli("search", self.store.manifest_path, "flour water salt starter", "-k", "3",
                                     "--out", self.store.layout.root, "--json")
        self.assertEqual(code, 0, err)
        printed = json.loads(out)
        how = {"vector_search": "exact", "vector_recall": 1.0, "vector_beam": None}  # the CLI's hits also say how
        self.assertEqual([{key: hit.pop(key) for key in how} for hit in printed], [how] * 3)
        self.assertEqual(answer["hits"], printed)
        self.assertEqual(answer["vector_search"], {"method": "exact", "recall": 1.0, "beam": None, "target": 0.95,
                                                   "notice": None})  # the envelope says it once
        self.assertEqual((answer["query"], answer["model"], answer["k"]), ("flour water salt starter", "stub-model", 3))
        self.assertEqual(answer["hits"][0]["doc"], self.store.ids[BREAD])
        self.assertEqual(answer["hits"][0]["paths"], ["copy/bread.txt", "kitchen/bread.txt"])

    def test_post_search_answers_the_same_as_get(self):
        _, _, by_get = self.search("violin four strings tuned in fifths", k=2)
        status, _, by_post = request(self.url, "POST", "/search", {"query": "violin four strings tuned in fifths", "k": 2})
        self.assertEqual(status, 200)
        self.assertEqual(by_post, by_get)
        self.assertEqual(by_post["hits"][0]["paths"], ["music/violin.md"])

    def test_k_defaults_to_the_cli_default_and_caps_the_hits(self):
        _, _, answer = self.search("the")
        self.assertEqual(answer["k"], embed.DEFAULT_K)
        _, _, answer = self.search("the", k=1)
        self.assertEqual(len(answer["hits"]), 1)

    def test_healthz_names_the_model_the_chunks_and_the_load_time(self):
        status, answer, health = request(self.url, path="/healthz")
        self.assertEqual(status, 200)
        self.assertEqual(health["status"], "ok")
        self.assertEqual((health["model"], health["dim"], health["model_server"]), ("stub-model", 64, "ok"))
        self.assertEqual(health["chunks"], len(embed.SearchIndex.load(self.store.manifest(), self.store.layout)))
        self.assertGreater(health["chunks"], 0)
        self.assertRegex(health["loaded_at"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
        self.assertEqual(answer.getheader("Cache-Control"), "no-store")

    def test_each_bad_input_gets_its_status_and_the_server_stays_healthy(self):
        long_query = "x" * 2001
        cases = [
            ("no q", "GET", "/search", None, {}, 400, "missing or empty"),
            ("empty q", "GET", "/search?q=", None, {}, 400, "missing or empty"),
            ("blank q", "GET", "/search?q=%20%20", None, {}, 400, "missing or empty"),
            ("k zero", "GET", "/search?q=bread&k=0", None, {}, 400, "k must be"),
            ("k 101", "GET", "/search?q=bread&k=101", None, {}, 400, "k must be"),
            ("k word", "GET", "/search?q=bread&k=ten", None, {}, 400, "k must be"),
            ("k fraction", "GET", "/search?q=bread&k=2.5", None, {}, 400, "k must be"),
            ("k negative", "GET", "/search?q=bread&k=-1", None, {}, 400, "k must be"),
            ("k underscore", "GET", "/search?q=bread&k=1_0", None, {}, 400, "k must be"),
            ("q twice", "GET", "/search?q=a&q=b", None, {}, 400, "more than once"),
            ("unknown parameter", "GET", "/search?query=bread", None, {}, 400, "unknown parameter"),
            ("bad utf-8", "GET", "/search?q=%ff%fe", None, {}, 400, "UTF-8"),
            ("unknown mode", "GET", "/search?q=bread&mode=psychic", None, {}, 400, "mode must be"),
            ("long q", "GET", "/search?q=" + long_query, None, {}, 400, "longer than 2000"),
            ("body not json", "POST", "/search", b"query=bread", {}, 400, "must be JSON"),
            ("body not utf-8", "POST", "/search", b'{"query": "\xff"}', {}, 400, "must be JSON"),
            ("body a list", "POST", "/search", ["bread"], {}, 400, "JSON object"),
            ("body nested past the parser", "POST", "/search", b"[" * 30000 + b"]" * 30000, {}, 400, "must be JSON"),
            ("body without query", "POST", "/search", {"k": 3}, {}, 400, "missing or empty"),
            ("query not a string", "POST", "/search", {"query": 7}, {}, 400, "must be a string"),
            ("k a string", "POST", "/search", {"query": "bread", "k": "3"}, {}, 400, "k must be"),
            ("k a float", "POST", "/search", {"query": "bread", "k": 3.0}, {}, 400, "k must be"),
            ("k a bool", "POST", "/search", {"query": "bread", "k": True}, {}, 400, "k must be"),
            ("k too big", "POST", "/search", {"query": "bread", "k": 1000}, {}, 400, "k must be"),
            ("unknown key", "POST", "/search", {"query": "bread", "top": 3}, {}, 400, "unknown key"),
            ("long query", "POST", "/search", {"query": long_query}, {}, 400, "longer than 2000"),
            ("body too large", "POST", "/search", b"{" + b" " * (64 * 1024) + b"}", {}, 413, "larger than"),
            ("unknown path", "GET", "/search/bread", None, {}, 404, "no such path"),
            ("index.html", "GET", "/index.html", None, {}, 404, "no such path"),
            ("wrong method", "DELETE", "/search", None, {}, 405, "answers GET, POST"),
            ("post to healthz", "POST", "/healthz", b"{}", {}, 405, "answers GET"),
            ("invented method", "BREW", "/search", None, {}, 405, "answers GET, POST"),
        ]
        for name, method, path, body, headers, expected, words in cases:
            with self.subTest(name):
                status, answer, value = request(self.url, method, path, body, headers)
                self.assertEqual(status, expected)
                self.assertIn(words, value["error"])
                self.assertEqual(answer.getheader("Content-Type"), "application/json; charset=utf-8")
                health = request(self.url, path="/healthz")
                self.assertEqual((health[0], health[2]["status"]), (200, "ok"))
        self.assertEqual(self.search("flour water")[0], 200)

    def test_405_says_which_methods_are_allowed(self):
        status, answer, _ = request(self.url, "PUT", "/search", b"{}")
        self.assertEqual((status, answer.getheader("Allow")), (405, "GET, POST"))

    def test_a_mode_the_index_refuses_is_a_400_with_its_reason(self):
        class Refusing(type(self.server.server.service.index)):
            def search(self, query, vector, k, mode="vector", groups=None, dates=None):
                raise ConfigError(f"search mode {mode!r} is not available here")

        service = self.server.server.service
        service.index.__class__ = Refusing
        status, _, value = self.search("bread", mode="hybrid")
        self.assertEqual(status, 400)
        self.assertIn("'hybrid' is not available", value["error"])

    def test_the_search_default_mode_is_used_when_none_is_asked(self):
        seen = []
        service = self.server.server.service
        original = service.index.search
        service.index.search = (lambda query, vector, k, mode=None, groups=None, dates=None:
                                seen.append(mode) or original(query, vector, k, mode, groups=groups, dates=dates))
        expected = embed.resolve_mode(self.store.manifest(), None)
        _, _, answer = self.search("bread")
        self.assertEqual((seen, answer["mode"]), ([expected], expected))
        _, _, answer = self.search("bread", mode="vector")
        self.assertEqual((seen[-1], answer["mode"]), ("vector", "vector"))

    def test_never_serves_text_from_the_extract_store(self):
        for doc in self.store.ids.values():
            self.store.layout.doc_text_path(self.store.layout.extract_dir, doc).write_text(
                "RAW hunter2 AKIAABCDEFGHIJKLMNOP flour water salt", encoding="utf-8")
        everything = b""
        for path in ("/search?q=flour+water+salt&k=100", "/search?q=RAW+AKIA&k=100", "/search?q=RAW&k=100&mode=keyword",
                     "/healthz", "/", "/openapi.json"):
            status, _, value = request(self.url, path=path)
            if isinstance(value, dict):
                value.pop("query", None)  # the query itself is echoed back
            everything += value if isinstance(value, bytes) else json.dumps(value).encode()
        self.assertNotIn(b"hunter2", everything)
        self.assertNotIn(b"AKIAABCDEFGHIJKLMNOP", everything)

    def test_a_doubled_leading_slash_reaches_the_route(self):
        status, _, value = request(self.url, path="//search?q=bread&k=1")
        self.assertEqual(status, 200, value)
        self.assertEqual(request(self.url, path="//nope")[0], 404)

    def test_api_answers_carry_the_security_headers(self):
        for path in ("/healthz", "/search?q=bread", "/nope"):
            with self.subTest(path):
                _, answer, _ = request(self.url, path=path)
                self.assertEqual(answer.getheader("Cache-Control"), "no-store")
                self.assertEqual(answer.getheader("X-Content-Type-Options"), "nosniff")
                self.assertEqual(answer.getheader("Referrer-Policy"), "no-referrer")
                self.assertIn("default-src 'none'", answer.getheader("Content-Security-Policy"))
                self.assertIsNone(answer.getheader("Access-Control-Allow-Origin"))
                self.assertNotIn("Python", answer.getheader("Server"))

    def test_a_foreign_host_header_is_refused_on_loopback(self):
        for host in ("evil.example", "evil.example:8765", "10.0.0.5"):
            with self.subTest(host):
                status, _, value = request(self.url, path="/search?q=bread", headers={"Host": host})
                self.assertEqual(status, 421)
                self.assertIn("loopback Host", value["error"])
        for host in ("localhost:9000", "127.0.0.1", "[::1]:8080", "LOCALHOST"):  # an SSH tunnel may change the port
            with self.subTest(host):
                self.assertEqual(request(self.url, path="/healthz", headers={"Host": host})[0], 200)

    def test_a_web_page_on_another_site_cannot_run_a_search(self):
        """Any page the user opens could POST text/plain to /search (no CORS preflight) or GET it as an image.

        It could not read the answer, but it ran, and its time says how many
        windows hold a word (a cross-site search leak). Browsers say where a
        request comes from (Sec-Fetch-Site, Origin): a request from another
        site is refused (403) before anything is searched; the page itself,
        links to it, and clients that are not browsers are served.
        """
        host = urllib.parse.urlsplit(self.url).netloc
        keyword = json.dumps({"query": "bread", "mode": "keyword"}).encode()
        refused = [
            ("POST", "/search", keyword, {"Origin": "http://attacker.example", "Sec-Fetch-Site": "cross-site",
                                          "Content-Type": "text/plain"}),
            ("POST", "/search", keyword, {"Origin": "http://attacker.example", "Content-Type": "text/plain"}),
            ("POST", "/search", keyword, {"Origin": "null"}),
            ("POST", "/search", keyword, {"Origin": "http://127.0.0.1:1", "Sec-Fetch-Site": "same-site"}),
            ("GET", "/search?q=bread&mode=keyword", None, {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Dest": "image"}),
            ("GET", "/healthz", None, {"Sec-Fetch-Site": "cross-site"}),
        ]
        for method, path, body, headers in refused:
            with self.subTest(method=method, path=path, headers=headers):
                status, _, value = request(self.url, method, path, body, headers)
                self.assertEqual(status, 403)
                self.assertIn("another site", value["error"])
        served = [
            ("POST", "/search", keyword, {"Origin": f"http://{host}", "Sec-Fetch-Site": "same-origin"}),
            ("POST", "/search", keyword, {"Origin": "https://search.example", "Sec-Fetch-Site": "same-origin"}),  # a proxy
            ("POST", "/search", keyword, {"Origin": f"http://{host}"}),  # a browser without Sec-Fetch-Site
            ("GET", "/search?q=bread&mode=keyword", None, {"Sec-Fetch-Site": "none"}),  # typed in the address bar
            ("GET", "/?q=bread", None, {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}),  # a link
            ("POST", "/search", keyword, {}),  # curl, scripts
        ]
        for method, path, body, headers in served:
            with self.subTest(method=method, path=path, headers=headers):
                self.assertEqual(request(self.url, method, path, body, headers)[0], 200)

    def test_a_burst_of_400_queries_from_16_clients_is_all_answered(self):
        queries = ["flour water salt", "rocket oxygen kerosene", "violin strings", "budget revenue reserve"]
        expected = {q: self.search(q, k=1)[2]["hits"][0]["chunk_id"] for q in queries}

        def one(i):
            query = queries[i % len(queries)]
            if i % 2:
                status, _, value = request(self.url, "POST", "/search", {"query": query, "k": 1})
            else:
                status, _, value = self.search(query, k=1)
            return status, query, value["hits"][0]["chunk_id"] if status == 200 else value

        with ThreadPoolExecutor(max_workers=16) as pool:
            results = list(pool.map(one, range(400)))
        self.assertEqual([status for status, _, _ in results], [200] * 400)
        self.assertTrue(all(chunk == expected[query] for _, query, chunk in results))
        wait_for(lambda: self.log.getvalue().count(" /search 200 ") == 400 + len(queries), "an access log line per query")

    def test_the_access_log_has_method_route_status_and_ms_but_never_the_query(self):
        secret = "zanzibar-payroll-7731"
        exchanges = [
            lambda: self.search(secret),
            lambda: request(self.url, "POST", "/search", {"query": secret}),
            lambda: request(self.url, path="/search?q=&secret=" + secret),
            lambda: request(self.url, path=f"/reports/{secret}"),
        ]
        for count, exchange in enumerate(exchanges, start=1):
            exchange()  # the line is written just after the answer: wait for it, to keep the order
            wait_for(lambda: len(self.log.getvalue().splitlines()) == count, "the access log line")
        lines = self.log.getvalue().splitlines()
        self.assertNotIn(secret, self.log.getvalue())
        pattern = r"^\S+Z 127\.0\.0\.1 (GET|POST) (/search|<other>) (200|400|404) \d+\.\dms$"
        for line in lines:
            self.assertRegex(line, pattern)
        self.assertEqual([line.split()[2:4] for line in lines],
                         [["GET", "/search"], ["POST", "/search"], ["GET", "/search"], ["GET", "<other>"]])
        self.assertEqual([line.split()[4] for line in lines], ["200", "200", "400", "404"])


class PageTests(StoreCase):
    def setUp(self):
        self.server = start(self.store, self)

    def test_the_page_is_self_contained_and_its_policy_allows_only_its_own_blocks(self):
        status, answer, page = request(self.server.url, path="/")
        self.assertEqual(status, 200)
        self.assertEqual(answer.getheader("Content-Type"), "text/html; charset=utf-8")
        policy = answer.getheader("Content-Security-Policy")
        self.assertIn("default-src 'none'", policy)
        self.assertIn("connect-src 'self'", policy)
        self.assertNotIn("unsafe-inline", policy)
        html = page.decode("utf-8")
        blocks = serve_page.inline_blocks(html)
        self.assertEqual(len(blocks), 2)
        for block in blocks:
            digest = base64.b64encode(hashlib.sha256(block.encode("utf-8")).digest()).decode()
            self.assertIn(f"'sha256-{digest}'", policy)
        self.assertNotRegex(html, r"(?i)(src|href)=\"(https?:)?//")  # nothing fetched from elsewhere
        self.assertNotIn("innerHTML", html)
        self.assertNotIn("insertAdjacentHTML", html)
        self.assertEqual(answer.getheader("X-Content-Type-Options"), "nosniff")
        self.assertEqual(answer.getheader("Referrer-Policy"), "no-referrer")

    def test_the_page_sends_queries_in_a_post_body_never_in_the_url(self):
        self.assertIn('method: "POST"', serve_page.SCRIPT)
        # A typed query never lands in the address bar or history; only a link the user opens (/?q=) does.
        # The one entry the page adds to the history is the document view's, which holds ids alone.
        for rewrite in ("replaceState", "location.href =", "location.search ="):
            self.assertNotIn(rewrite, serve_page.SCRIPT)
        pushed = re.findall(r"history\.pushState\(([^;]*)\);", serve_page.SCRIPT)
        self.assertEqual(pushed, ['{ doc, chunk }, "", "#doc=" + doc + "&hit=" + chunk'])


class TokenTests(StoreCase):
    def setUp(self):
        self.server = start(self.store, self, token=TOKEN)
        self.url = self.server.url

    def test_search_and_openapi_need_the_bearer_token(self):
        for path in ("/search?q=bread", "/openapi.json", "/unknown"):
            with self.subTest(path):
                status, answer, value = request(self.url, path=path)
                self.assertEqual(status, 401)
                self.assertIn("Bearer", answer.getheader("WWW-Authenticate"))
                self.assertIn("BASTION_SERVE_TOKEN", value["error"])
        status, _, value = request(self.url, "POST", "/search", {"query": "bread"})
        self.assertEqual(status, 401)

    def test_a_wrong_or_malformed_token_is_refused(self):
        for header in (f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", f"Basic {TOKEN}", TOKEN, "Bearer ", f"Bearer  {TOKEN} x"):
            with self.subTest(header):
                self.assertEqual(request(self.url, path="/search?q=bread", headers={"Authorization": header})[0], 401)

    def test_the_right_token_opens_search_and_healthz_and_the_page_need_none(self):
        for scheme in ("Bearer", "bearer"):
            status, _, value = request(self.url, path="/search?q=bread", headers={"Authorization": f"{scheme} {TOKEN}"})
            self.assertEqual(status, 200)
            self.assertTrue(value["hits"])
        status, _, health = request(self.url, path="/healthz")
        self.assertEqual((status, health), (200, {"status": "ok"}))
        status, _, health = request(self.url, path="/healthz", headers={"Authorization": f"Bearer {TOKEN}"})
        self.assertEqual((status, health["auth"]), (200, "bearer"))
        self.assertEqual(request(self.url, path="/")[0], 200)

    def test_the_token_is_compared_in_constant_time(self):
        import inspect

        from bastion_agent.serving import tokens

        self.assertIn("hmac.compare_digest", inspect.getsource(tokens.TokenBook.caller))


class ExposureTests(unittest.TestCase):
    def test_a_non_loopback_address_needs_a_token(self):
        with self.assertRaisesRegex(ConfigError, "BASTION_SERVE_TOKEN"):
            serve_settings.settings_from("0.0.0.0", 8765, environ={})
        with self.assertRaisesRegex(ConfigError, "BASTION_SERVE_TOKEN"):
            serve_settings.settings_from("192.168.1.20", 8765, environ={"BASTION_SERVE_TOKEN": ""})
        settings = serve_settings.settings_from("0.0.0.0", 8765, environ={"BASTION_SERVE_TOKEN": TOKEN})
        self.assertEqual((settings.token, settings.loopback), (TOKEN, False))

    def test_loopback_needs_no_token_and_is_the_default(self):
        settings = serve_settings.settings_from(serve_settings.DEFAULT_HOST, 0, environ={})
        self.assertEqual((settings.host, settings.token, settings.loopback), ("127.0.0.1", None, True))
        for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
            with self.subTest(host):
                self.assertTrue(loopback.is_loopback(host))
        for host in ("0.0.0.0", "", "::", "10.1.2.3", "example.com", "localhost.example.com"):
            with self.subTest(host):
                self.assertFalse(loopback.is_loopback(host))

    def test_a_weak_token_is_refused(self):
        for token in ("short", " " + TOKEN, TOKEN + "\n"):
            with self.subTest(token=token), self.assertRaisesRegex(ConfigError, "at least 16"):
                serve_settings.settings_from("127.0.0.1", 0, environ={"BASTION_SERVE_TOKEN": token})

    def test_the_cli_refuses_an_exposed_address_without_a_token_in_one_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            manifest = write_manifest(Path(tmp))
            with clean_env():
                code, out, err = run_cli("serve", manifest, "--host", "0.0.0.0", "--port", "0")
        self.assertEqual((code, out), (ConfigError.exit_code, ""))
        self.assertEqual(len(err.strip().splitlines()), 1)
        self.assertIn("BASTION_SERVE_TOKEN", err)

    def test_the_cli_refuses_a_missing_store_in_one_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            manifest = write_manifest(Path(tmp))
            with clean_env():
                code, out, err = run_cli("serve", manifest, "--port", "0")
        self.assertNotEqual(code, 0)
        self.assertEqual(len(err.strip().splitlines()), 1)
        self.assertIn("run embed (or sweep) first", err)


class ModelServerTests(StoreCase):
    def test_unreachable_at_start_answers_by_keyword_and_says_so_then_recovers(self):
        url = closed_port_url()
        server = start(self.store, self, endpoint_url=url, reprobe_seconds=0.0)
        status, _, value = request(server.url, path="/search?q=sourdough+bread")
        self.assertEqual(status, 200)
        self.assertEqual((value["fallback"], value["mode"]), ("keyword", "keyword"))
        self.assertIn("model server is unavailable", value["notice"])
        self.assertEqual(len(value["notice"].splitlines()), 1)
        self.assertEqual(value["hits"][0]["doc"], self.store.ids[BREAD])
        self.assertIsNone(value["hits"][0]["vector_score"])
        health = request(server.url, path="/healthz")[2]
        self.assertEqual((health["status"], health["model_server"], health["fallback"]),
                         ("degraded", "unreachable", "keyword"))
        self.assertIn("unavailable", self.log.getvalue())
        port = urllib.parse.urlsplit(url).port
        with StubServer(port=port):
            status, _, value = request(server.url, path="/search?q=flour+water+salt")
            self.assertEqual(status, 200)
            self.assertNotIn("fallback", value)
            self.assertEqual(value["hits"][0]["doc"], self.store.ids[BREAD])
            self.assertEqual(request(server.url, path="/healthz")[2]["model_server"], "ok")

    def test_a_model_server_that_goes_away_gives_keyword_answers_and_the_server_stays_up(self):
        stub = StubServer().start()
        server = start(self.store, self, endpoint_url=stub.url, reprobe_seconds=3600.0)
        self.assertEqual(request(server.url, path="/search?q=bread")[0], 200)
        stub.stop()
        status, _, value = request(server.url, path="/search?q=bread")
        self.assertEqual((status, value["fallback"]), (200, "keyword"))
        self.assertIn("cannot reach the model server", value["notice"])
        health = request(server.url, path="/healthz")
        self.assertEqual((health[0], health[2]["model_server"]), (200, "unreachable"))

    def test_keyword_search_works_while_the_model_server_is_down(self):
        server = start(self.store, self, endpoint_url=closed_port_url(), reprobe_seconds=3600.0)
        status, _, value = request(server.url, path="/search?q=sourdough&mode=keyword&k=1")
        self.assertEqual(status, 200)
        self.assertEqual(value["hits"][0]["doc"], self.store.ids[BREAD])

    def test_a_query_waits_for_a_busy_model_server_no_longer_than_one_request_to_it(self):
        link = search_service.ModelLink(self.store.manifest(), EndpointConfig(url=self.stub.url, timeout=0.2), 3600.0,
                               concurrency=1)
        self.assertEqual(len(link.embed_query("bread")), self.store.manifest().embed.dim)
        link.slots.acquire()  # the one slot taken, as by a query the model server is slow to answer
        outcome = {}
        waiting = threading.Thread(target=lambda: outcome.update(error=self.refusal(link.embed_query, "bread")),
                                   daemon=True)
        waiting.start()
        waiting.join(WAIT_SECONDS)
        self.assertFalse(waiting.is_alive(), "the query still waits for the slot")
        self.assertEqual(outcome["error"].status, 503)
        self.assertIn("busy", outcome["error"].message)
        link.slots.release()
        self.assertEqual(len(link.embed_query("bread")), self.store.manifest().embed.dim, "the slot was given back")
        link.slots.acquire()  # and a query that failed gave its slot back too: there is still exactly one
        self.assertFalse(link.slots.acquire(blocking=False))

    @staticmethod
    def refusal(function, *args) -> request_error.RequestError | None:
        try:
            function(*args)
        except request_error.RequestError as exc:
            return exc
        return None

    def test_a_model_with_the_wrong_dimension_is_unavailable_not_fatal(self):
        with StubServer(dim=32) as wrong:
            server = start(self.store, self, endpoint_url=wrong.url, reprobe_seconds=3600.0)
            status, _, value = request(server.url, path="/search?q=bread")
        self.assertEqual((status, value["fallback"]), (200, "keyword"))
        self.assertIn("32-dimensional", value["notice"])


class ReloadTests(unittest.TestCase):
    def setUp(self):
        holder = tempfile.TemporaryDirectory()
        self.addCleanup(holder.cleanup)
        self.stub = StubServer().start()
        self.addCleanup(self.stub.stop)
        self.store = Store(Path(holder.name), self.stub)

    def test_a_finished_sweep_is_picked_up_without_a_restart(self):
        server = start(self.store, self, reload_check_seconds=0.02)
        before = request(server.url, path="/healthz")[2]
        docs = dict(DOCS)
        docs["Penguins huddle together through the antarctic winter to keep warm."] = ["nature/penguins.txt"]
        self.store.sweep(docs)
        wait_for(lambda: request(server.url, path="/healthz")[2]["chunks"] > before["chunks"], "the reload")
        _, _, value = request(server.url, path="/search?q=penguins+antarctic+winter&k=1")
        self.assertEqual(value["hits"][0]["paths"], ["nature/penguins.txt"])
        self.assertIn("reloaded the index", self.log.getvalue())

    def test_a_store_still_being_written_is_not_loaded_until_it_settles(self):
        server = start(self.store, self, reload_quiet_seconds=60.0)
        service = server.server.service
        now = [1000.0]
        service.clock = lambda: now[0]
        old = service.index
        self.add_vectors_without_a_summary()
        self.assertFalse(service.check_reload())  # changed, but embed has not finished
        self.assertIs(service.index, old)
        now[0] += 61.0  # quiet for longer than reload_quiet_seconds: an embed that stopped early
        self.assertTrue(service.check_reload())
        self.assertIsNot(service.index, old)
        self.assertFalse(service.check_reload())

    def test_a_store_that_cannot_be_read_keeps_the_old_index_answering(self):
        server = start(self.store, self, reload_quiet_seconds=0.0)
        service = server.server.service
        chunks = len(service.index)
        saved = self.store.layout.vectors_db.with_name("saved.db")
        os.replace(self.store.layout.vectors_db, saved)  # a new file in its place, as a copy or restore would do
        self.store.layout.vectors_db.write_bytes(b"this is not a database" * 100)
        self.assertFalse(service.check_reload())
        status, _, value = request(server.url, path="/search?q=flour+water+salt&k=1")
        self.assertEqual(status, 200)
        self.assertEqual(value["hits"][0]["doc"], self.store.ids[BREAD])
        health = request(server.url, path="/healthz")[2]
        self.assertEqual(health["chunks"], chunks)
        self.assertIn("could not reload the index", health["index_error"])
        self.assertNotIn(str(self.store.tmp), json.dumps(health))  # /healthz needs no token: no local path
        self.assertNotIn(os.path.realpath(self.store.tmp), json.dumps(health))
        self.assertIn(str(self.store.tmp), self.log.getvalue())  # the operator's log says where
        os.replace(saved, self.store.layout.vectors_db)
        self.store.layout.summary_path("embed").touch()
        self.assertTrue(service.check_reload())
        self.assertIsNone(request(server.url, path="/healthz")[2]["index_error"])

    def add_vectors_without_a_summary(self):
        db = vectorstore.connect(self.store.layout.vectors_db, create=False)
        try:
            with vectorstore.transaction(db):
                db.execute("INSERT INTO vectors (chunk_id, model, dim, vec, created) "
                           "SELECT chunk_id, 'other-model', dim, vec, created FROM vectors")
        finally:
            db.close()


class TimeLimitTests(StoreCase):
    def setUp(self):
        self.server = start(self.store, self, request_time_limit=0.5)
        self.url = self.server.url

    def test_a_stalled_client_gets_408_and_does_not_block_others(self):
        results = {}
        stalled = threading.Thread(target=lambda: results.update(raw=raw_exchange(
            self.url, b"GET /search?q=bread HTTP/1.1\r\nHost: 127.0.0.1\r\n")))
        stalled.start()
        status, _, value = request(self.url, path="/search?q=flour+water&k=1")  # while the other one hangs
        self.assertEqual(status, 200)
        stalled.join(WAIT_SECONDS)
        self.assertEqual(status_of(results["raw"]), 408)
        self.assertIn(b"not received within 0.5 s", results["raw"])

    def test_a_body_that_never_arrives_gets_408(self):
        raw = raw_exchange(self.url, b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 40\r\n\r\n{\"que")
        self.assertEqual(status_of(raw), 408)

    def test_an_answer_over_the_time_limit_is_a_503(self):
        service = self.server.server.service
        original = service.index.search
        release = threading.Event()
        audit_log = self.store.layout.audit_log
        lines_before = len(audit_log.read_bytes().splitlines()) if audit_log.exists() else 0

        def finish() -> None:
            # the abandoned search still ends with its audit line: let it land before the class removes the folder
            release.set()
            deadline = time.monotonic() + WAIT_SECONDS
            while time.monotonic() < deadline and (
                    not audit_log.exists() or len(audit_log.read_bytes().splitlines()) <= lines_before):
                time.sleep(0.02)

        self.addCleanup(finish)

        ended = threading.Event()

        def slow(*args, **kwargs):
            try:
                release.wait(WAIT_SECONDS)
                return original(*args, **kwargs)
            finally:
                ended.set()

        service.index.search = slow
        status, _, value = request(self.url, path="/search?q=bread")
        self.assertEqual(status, 503)
        self.assertIn("took longer than 0.5 s", value["error"])
        self.assertFalse(ended.is_set(), "the answer waited for the search to end")  # abandoned, not awaited


def read_answer(sock: socket.socket, buffered: bytearray) -> bytes:
    """One whole answer (head and ``Content-Length`` body) from ``sock``; b"" when it closed first.

    ``buffered`` holds what was read past the previous answer, and keeps what is read past this one.
    """
    while b"\r\n\r\n" not in buffered:
        chunk = sock.recv(65536)
        if not chunk:
            return b""
        buffered += chunk
    head, _, _ = bytes(buffered).partition(b"\r\n\r\n")
    length = int(re.search(rb"(?im)^content-length:\s*(\d+)", head).group(1))
    size = len(head) + 4 + length
    while len(buffered) < size:
        chunk = sock.recv(65536)
        if not chunk:
            return b""
        buffered += chunk
    answer = bytes(buffered[:size])
    del buffered[:size]
    return answer


def closed_by_server(sock: socket.socket) -> bytes | None:
    """What the server sent before closing ``sock`` (b"" for nothing); None if it was still open after ``WAIT_SECONDS``."""
    received = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return received
            received += chunk
    except socket.timeout:
        return None
    except ConnectionResetError:
        return received


class KeepAliveTests(StoreCase):
    """HTTP/1.1 keep-alive: many requests on one connection, never a thread between them, never a misread stream."""

    SEARCH = b"GET /search?q=bread&k=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

    def setUp(self):
        self.server = start(self.store, self, request_time_limit=2.0)
        self.url = self.server.url

    def connect(self) -> socket.socket:
        parts = urllib.parse.urlsplit(self.url)
        sock = socket.create_connection((parts.hostname, parts.port), timeout=WAIT_SECONDS)
        self.addCleanup(sock.close)
        return sock

    def test_one_connection_carries_many_requests_and_each_answer_is_its_own(self):
        sock, buffered = self.connect(), bytearray()
        for query, word in (("bread", b"Sourdough"), ("violin", b"violin"), ("rocket", b"rocket")):
            sock.sendall(f"GET /search?q={query}&k=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            answer = read_answer(sock, buffered)
            self.assertTrue(answer.startswith(b"HTTP/1.1 200"), answer[:80])
            self.assertIn(b"Connection: keep-alive", answer)
            self.assertIn(word, answer.partition(b"\r\n\r\n")[2])
        body = json.dumps({"query": "budget", "k": 1}).encode()
        sock.sendall(b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        self.assertIn(b"budget", read_answer(sock, buffered).lower())

    def test_pipelined_requests_are_answered_in_order(self):
        sock, buffered = self.connect(), bytearray()
        sock.sendall(self.SEARCH + b"GET /search?q=violin&k=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" + self.SEARCH)
        answers = [read_answer(sock, buffered) for _ in range(3)]
        self.assertEqual([answer[:12] for answer in answers], [b"HTTP/1.1 200"] * 3)
        self.assertIn(b"Sourdough", answers[0])
        self.assertIn(b"violin", answers[1])
        self.assertIn(b"Sourdough", answers[2])

    def test_close_and_http_1_0_end_the_connection_after_the_answer(self):
        for request_head in (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
                             b"GET /healthz HTTP/1.0\r\n\r\n"):
            with self.subTest(request_head=request_head):
                sock = self.connect()
                sock.sendall(request_head)
                received = closed_by_server(sock)
                self.assertIsNotNone(received, "the server kept the connection open")
                self.assertIn(b"Connection: close", received)

    def test_a_refused_body_is_never_read_as_the_next_request(self):
        smuggled = b"GET /search?q=bread&k=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        for head in (  # each body below is what an attacker hopes the server parses as a request of its own
                b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n" % (len(smuggled) + 1_000_000),
                b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n",
                b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n" % len(smuggled)):
            with self.subTest(head=head.split(b"\r\n")[2]):
                sock = self.connect()
                sock.sendall(head + smuggled)
                received = closed_by_server(sock)
                self.assertIsNotNone(received, "the server kept the connection open")
                self.assertEqual(received.count(b"HTTP/1."), 1, received[:200])
                self.assertNotIn(b"Sourdough", received)

    def test_an_idle_connection_holds_no_slot_and_is_closed_silently_at_the_deadline(self):
        before = threading.active_count()
        idle = []
        for _ in range(http_server.MAX_CONNECTIONS + 8):  # more kept-alive connections than there are slots
            sock, buffered = self.connect(), bytearray()
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            self.assertTrue(read_answer(sock, buffered).startswith(b"HTTP/1.1 200"))
            idle.append(sock)
        self.assertLessEqual(threading.active_count() - before, 4)  # none of them holds a thread
        status, _, value = request(self.url, path="/search?q=bread&k=1")
        self.assertEqual(status, 200, value)
        self.assertEqual([closed_by_server(sock) for sock in idle[:3]], [b""] * 3)  # closed, no 408 to misread
        wait_for(lambda: self.server.server.waiting() == 0, "the server to let the idle connections go")

    def test_the_time_limit_of_an_answered_request_never_cuts_the_next_one(self):
        # each request has its own time limit: requests on one connection, spread past the first one's limit
        server = start(self.store, self, request_time_limit=0.6)
        parts = urllib.parse.urlsplit(server.url)
        sock, buffered = socket.create_connection((parts.hostname, parts.port), timeout=WAIT_SECONDS), bytearray()
        self.addCleanup(sock.close)
        answers = []
        for _ in range(4):  # 4 x 0.3 s: the last ones arrive after the first request's limit has passed
            sock.sendall(self.SEARCH)
            answers.append(read_answer(sock, buffered)[:12])
            time.sleep(0.3)
        self.assertEqual(answers, [b"HTTP/1.1 200"] * 4)

    def test_a_slow_next_request_on_a_kept_connection_gets_408(self):
        sock, buffered = self.connect(), bytearray()
        sock.sendall(self.SEARCH)
        self.assertTrue(read_answer(sock, buffered).startswith(b"HTTP/1.1 200"))
        sock.sendall(b"GET /search?q=bread HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # the head never ends
        received = closed_by_server(sock)
        self.assertIsNotNone(received, "the server kept the connection open")
        self.assertTrue(received.startswith(b"HTTP/1.0 408"), received[:80])


class OpenApiTests(StoreCase):
    """/openapi.json lists exactly the server's routes, and every status it documents happens."""

    def provoke(self, url: str, path: str, method: str, status: str, headers: dict):
        """Make the server answer ``status`` on ``method path``; return what it answered."""
        body_path = "/search" if path == "/search" else path
        a_document = f"/doc/{next(iter(self.store.ids.values()))}"
        good = {"GET": {"/search": "/search?q=bread", serve_openapi.DOC_ROUTE: a_document}.get(path, path)}
        if status == "200":
            if method == "POST":
                return request(url, "POST", path, {"query": "bread"}, headers)[0]
            return request(url, method, good["GET"], None, headers)[0]
        if status == "400":
            if method == "POST":
                return request(url, "POST", path, b"not json", headers)[0]
            return request(url, "GET", "/search?k=3", None, headers)[0]
        if status == "401":
            return request(url, method, good["GET"] if method == "GET" else path, {"query": "bread"} if method == "POST" else None)[0]
        if status == "403":
            return request(url, method, good["GET"] if method == "GET" else path, {"query": "bread"} if method == "POST" else None,
                           {**headers, "Sec-Fetch-Site": "cross-site"})[0]
        if status == "408":
            lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
            if method == "POST":
                head = f"POST {body_path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{lines}Content-Length: 9\r\n\r\n{{"
                return status_of(raw_exchange(url, head.encode()))
            return status_of(raw_exchange(url, f"GET {good['GET']} HTTP/1.1\r\nHost: 127.0.0.1\r\n{lines}".encode()))
        if status == "404":  # a document that is not in this sweep
            return request(url, "GET", "/doc/" + "0" * 64, None, headers)[0]
        if status == "413":
            return request(url, "POST", path, b" " * (70 * 1024), headers)[0]
        if status == "421":
            return request(url, method, good["GET"] if method == "GET" else path, {"query": "bread"} if method == "POST" else None,
                           {**headers, "Host": "attacker.example"})[0]
        if status == "429":  # the token's searches spent
            service = self.servers[url].server.service
            original = service.limits
            service.limits = SearchLimits(per_minute=1, burst=1)
            try:
                answers = [request(url, method, good["GET"] if method == "GET" else path,
                                   {"query": "bread"} if method == "POST" else None, headers)[0] for _ in range(2)]
                return answers[-1] if answers[0] == 200 else answers[0]
            finally:
                service.limits = original
        if status == "503":  # an answer over the time limit (a model server that is down gets keyword answers)
            service = self.servers[url].server.service
            original, release = service.index.search, threading.Event()

            def slow(*args, **kwargs):
                release.wait(WAIT_SECONDS)
                return original(*args, **kwargs)

            service.index.search = slow
            try:
                if method == "POST":
                    return request(url, "POST", path, {"query": "bread"}, headers)[0]
                return request(url, "GET", good["GET"], None, headers)[0]
            finally:
                release.set()
                service.index.search = original
        raise AssertionError(f"no way to provoke {status} on {method} {path}: document it only if the server does it")

    def check_document(self, **settings):
        server = start(self.store, self, request_time_limit=1.0, **settings)
        self.servers = {server.url: server}
        headers = {"Authorization": f"Bearer {TOKEN}"} if settings.get("token") else {}
        status, _, doc = request(server.url, path="/openapi.json", headers=headers)
        self.assertEqual(status, 200)
        self.assertEqual(doc["openapi"], "3.1.0")
        documented = {(path, method.upper()) for path, ops in doc["paths"].items() for method in ops}
        self.assertEqual(documented, {(p, m) for p, methods in serve_openapi.ROUTES.items() for m in methods})
        seen = set()
        slow = []  # 408s wait for the time limit: provoke them all at once
        for path, operations in doc["paths"].items():
            for method, operation in operations.items():
                for code in operation["responses"]:
                    seen.add(code)
                    if code == "408":
                        slow.append((path, method))
                        continue
                    with self.subTest(path=path, method=method, status=code, **{k: bool(v) for k, v in settings.items()}):
                        self.assertEqual(self.provoke(server.url, path, method.upper(), code, headers), int(code))
            # Every other method on a documented path is a 405, and HEAD is not silently a GET.
            for other in ("PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "POST"):
                if other.lower() not in operations:
                    self.assertEqual(request(server.url, other, path, None, headers)[0], 405)
        with ThreadPoolExecutor(max_workers=len(slow)) as pool:
            timed_out = list(pool.map(lambda op: self.provoke(server.url, op[0], op[1].upper(), "408", headers), slow))
        self.assertEqual(timed_out, [408] * len(slow))
        for unknown in ("/search/", "/healthz/x", "/index.html", "/api/search", "/.env"):
            self.assertEqual(request(server.url, path=unknown, headers=headers)[0], 404)
        return doc, seen

    def test_without_a_token_every_documented_status_happens(self):
        doc, seen = self.check_document()
        self.assertEqual(seen, {"200", "400", "403", "404", "408", "413", "421", "503"})
        self.assertNotIn("securitySchemes", doc["components"])

    def test_with_a_token_401_is_documented_and_happens(self):
        doc, seen = self.check_document(token=TOKEN)
        self.assertIn("401", seen)
        self.assertIn("429", seen)
        self.assertEqual(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer")
        self.assertNotIn("401", doc["paths"]["/healthz"]["get"]["responses"])

    def test_answers_have_the_documented_required_fields(self):
        server = start(self.store, self)
        doc = request(server.url, path="/openapi.json")[2]
        schemas = doc["components"]["schemas"]
        answer = request(server.url, path="/search?q=bread")[2]
        self.assertTrue(set(schemas["SearchAnswer"]["required"]) <= set(answer))
        self.assertEqual(set(schemas["Hit"]["properties"]), set(answer["hits"][0]))
        health = request(server.url, path="/healthz")[2]
        self.assertEqual(set(schemas["Health"]["properties"]), set(health))
        limits = doc["paths"]["/search"]["get"]["parameters"]
        self.assertEqual({p["name"]: p["schema"].get("maximum") for p in limits},
                         {"q": None, "k": 100, "mode": None, "since": None, "before": None})


class CommandTests(StoreCase):
    """``python3 -m bastion_agent serve`` as a person runs it."""

    def test_without_the_serve_extra_serve_names_it_in_one_line(self):
        blocker = (
            "import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in ('uvicorn', 'starlette'):\n"
            "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "from bastion_agent.commands.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n"
        )
        env = {key: value for key, value in os.environ.items() if not key.startswith(("EMBED_", "BASTION_"))}
        done = subprocess.run([sys.executable, "-c", blocker, "serve", str(self.store.manifest_path), "--out",
                               str(self.store.layout.root), "--port", "0"],
                              capture_output=True, text=True, env=env, timeout=WAIT_SECONDS * 4)
        self.assertNotEqual(done.returncode, 0)
        self.assertEqual(done.stdout, "")
        self.assertEqual(done.stderr.count("\n"), 1, done.stderr)
        self.assertIn("pip install 'bastion-agent[serve]'", done.stderr)

    def test_serve_prints_its_url_logs_requests_and_stops_on_sigterm(self):
        env = {key: value for key, value in os.environ.items() if not key.startswith(("EMBED_", "BASTION_"))}
        env["EMBED_URL"] = self.stub.url
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
        process = subprocess.Popen(
            [sys.executable, "-m", "bastion_agent", "serve", str(self.store.manifest_path), "--out",
             str(self.store.layout.root), "--port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        try:
            line = process.stdout.readline()
            url = re.search(r"http://127\.0\.0\.1:\d+/", line).group(0)
            status, _, value = request(url, path="/search?q=violin+secret-words&k=1")
            self.assertEqual(status, 200)
            self.assertEqual(value["hits"][0]["paths"], ["music/violin.md"])
        finally:
            process.terminate()
            out, err = process.communicate(timeout=WAIT_SECONDS)
        self.assertEqual(process.returncode, 0, err)
        self.assertIn("stub-model", line)
        self.assertRegex(err, r"GET /search 200 \d+\.\dms")
        self.assertNotIn("secret-words", err)
        self.assertNotIn("Traceback", err)


if __name__ == "__main__":
    unittest.main()
