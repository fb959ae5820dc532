"""Hostile requests to serve: HTTP/0.9, lone surrogates, duplicate JSON keys, hundreds of idle sockets."""

from __future__ import annotations

import socket
import threading
import unittest

from bastion_agent.serving import http_server
from bastion_agent.testing.serve_store import StoreCase, raw_exchange, request, start, status_of


class ServeHostileTests(StoreCase):
    def setUp(self):
        self.server = start(self.store, self)
        self.url = self.server.url

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


if __name__ == "__main__":
    unittest.main()
