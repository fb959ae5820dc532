"""Hostile requests to serve: smuggling heads, HTTP/0.9, lone surrogates, duplicate JSON keys, idle sockets."""

from __future__ import annotations

import socket
import threading
import unittest

from bastion_agent.serving import http_protocol, http_server
from bastion_agent.testing.serve_store import StoreCase, raw_exchange, request, start, status_of


class ServeHostileTests(StoreCase):
    def setUp(self):
        self.server = start(self.store, self)
        self.url = self.server.url

    def test_heads_that_could_hide_a_request_in_a_body_get_400_and_the_hidden_one_no_answer(self):
        hidden = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        body = b'{"query": "x"}'
        post = b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        cases = {
            "two different Content-Length": b"Content-Length: %d\r\nContent-Length: %d\r\n" % (len(body), len(body + hidden)),
            "the same order swapped": b"Content-Length: %d\r\nContent-Length: %d\r\n" % (len(body + hidden), len(body)),
            "two equal Content-Length": b"Content-Length: %d\r\nContent-Length: %d\r\n" % ((len(body + hidden),) * 2),
            "Content-Length listed twice in one": b"Content-Length: %d, %d\r\n" % (len(body), len(body + hidden)),
            "Transfer-Encoding beside Content-Length": b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n" % len(body + hidden),
            "Transfer-Encoding first": b"Transfer-Encoding: chunked\r\nContent-Length: %d\r\n" % len(body + hidden),
            "a folded header": b"Content-Length: %d\r\nX-Note: one\r\n  Content-Length: %d\r\n" % (len(body + hidden), len(body)),
            "a folded Content-Length": b"Content-Length:\r\n\t%d\r\n" % len(body + hidden),
        }
        for name, headers in cases.items():
            with self.subTest(name):
                raw = raw_exchange(self.url, post + headers + b"\r\n" + body + hidden)
                self.assertEqual(status_of(raw), 400, raw[:200])
                self.assertEqual(raw.count(b"HTTP/1."), 1, "the hidden request was answered: " + repr(raw[:300]))
                self.assertNotIn(b'"status"', raw)
                self.assertIn(b"X-Content-Type-Options: nosniff", raw)
        log = self.log.getvalue()
        self.assertNotIn("/healthz", log)  # never routed
        self.assertEqual(log.count(" 400 "), len(cases))

    def test_a_clean_body_is_answered_and_the_next_request_on_the_connection_too(self):
        body = b'{"query": "bread", "k": 1}'
        raw = raw_exchange(self.url, b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s"
                           b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n" % (len(body), body))
        self.assertEqual(raw.count(b"HTTP/1.1 200"), 2, raw[:300])

    def test_the_wire_is_h11_never_httptools(self):
        from uvicorn.protocols.http.h11_impl import H11Protocol

        config = self.server.server.uvicorn.config
        self.assertTrue(isinstance(config.http, type) and issubclass(config.http, H11Protocol), config.http)

    def test_http_09_request_gets_a_status_line_and_security_headers(self):
        raw = raw_exchange(self.url, b"GET /search?q=x\r\n\r\n")
        self.assertTrue(raw.startswith(b"HTTP/1.0 400 "), raw[:80])
        self.assertIn(b"X-Content-Type-Options: nosniff", raw)
        self.assertEqual(status_of(raw), 400)

    def test_lone_surrogate_in_the_query_is_a_400(self):
        status, _, answer = request(self.url, path="/search?q=%ED%A0%80")
        self.assertEqual(status, 400, answer)
        status, _, answer = request(self.url, "POST", "/search", b'{"query": "\\ud800 budget"}',
                                    {"Content-Type": "application/json"})
        self.assertEqual(status, 400, answer)

    def test_duplicate_json_keys_are_a_400(self):
        status, _, answer = request(self.url, "POST", "/search", b'{"query": "flour", "query": "secret"}',
                                    {"Content-Type": "application/json"})
        self.assertEqual(status, 400)
        self.assertIn("more than once", answer["error"])

    def test_hundreds_of_idle_sockets_do_not_make_hundreds_of_threads(self):
        from urllib.parse import urlsplit

        parts = urlsplit(self.url)
        before = threading.active_count()
        idle = []
        try:
            for _ in range(300):
                idle.append(socket.create_connection((parts.hostname, parts.port), timeout=5))
            # every connection has been accepted (or refused) once a request gets its answer
            status, _, _ = request(self.url, path="/healthz")
            self.assertIn(status, (200, 503))
            self.assertLessEqual(threading.active_count() - before, http_server.MAX_CONNECTIONS + 2)
        finally:
            for sock in idle:
                sock.close()
        status, _, _ = request(self.url, path="/healthz")
        deadline_status = status
        for _ in range(100):
            if deadline_status == 200:
                break
            import time

            time.sleep(0.05)
            deadline_status, _, _ = request(self.url, path="/healthz")
        self.assertEqual(deadline_status, 200)


class FramingTests(unittest.TestCase):
    """The wire's own framing (``http_protocol.Framing``): where each head starts, however the bytes arrive."""

    BODY = b'{"query": "x\r\n\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"}'  # a body that reads like heads

    def stream(self, second: bytes) -> bytes:
        first = b"POST /search HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n%s" % (len(self.BODY), self.BODY)
        return first + second

    def test_a_body_that_reads_like_a_head_is_skipped_whole_and_a_bad_next_head_is_caught(self):
        bad = b"GET / HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n"
        for size in (1, 2, 3, 7, 64, 10_000):  # the same bytes in pieces of each size
            with self.subTest(size=size):
                framing, data, heads = http_protocol.Framing(), self.stream(bad), 0
                with self.assertRaises(http_protocol.FramingError) as caught:
                    for start in range(0, len(data), size):
                        heads += framing.feed(data[start:start + size])
                self.assertIn("more than once", str(caught.exception))
                self.assertEqual(heads, 1 if size < len(data) else 0)

    def test_a_clean_stream_gives_one_head_per_request(self):
        good = b"GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n"
        data = self.stream(good) + good
        for size in (1, 5, len(data)):
            with self.subTest(size=size):
                framing = http_protocol.Framing()
                completed = [framing.feed(data[start:start + size]) for start in range(0, len(data), size)]
                self.assertEqual(sum(completed), 3 if size < len(data) else 1)
                self.assertTrue(framing.in_head and not framing.started)


if __name__ == "__main__":
    unittest.main()
