"""serve under a connection flood: idle and half-sent requests cannot take a user's slot.

Hostile first: one client opens hundreds of idle sockets, half-sent request
heads and half-sent bodies without the token, and keeps reopening what the
server closes; a ``/search`` with the right token from the same address
still gets its answer, and the server's threads stay bounded. Then the wait
for heads (``http_protocol``): the cap per client pushes out that client's
oldest waiting connection (not another client's), and a head that never
completes gets 408.
No timing thresholds: every wait is bounded by ``WAIT_SECONDS``.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import unittest
import urllib.parse

from bastion_agent.serving import http_protocol, http_server
from bastion_agent.testing.serve_store import TOKEN, WAIT_SECONDS, StoreCase, request, start

IDLE = 200
HALF_HEADS = 100
HALF_BODIES = http_server.MAX_CONNECTIONS + 10
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def address(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    return parts.hostname, parts.port


class Flood:
    """Sockets from one client: idle, half-sent heads, half-sent bodies; optionally reopened for as long as it runs."""

    def __init__(self, url: str):
        self.address = address(url)
        self.sockets: list[socket.socket] = []
        self.stop = threading.Event()
        self.reopened = 0

    def open(self, payload: bytes = b"") -> None:
        sock = socket.create_connection(self.address, timeout=WAIT_SECONDS)
        if payload:
            sock.sendall(payload)
        self.sockets.append(sock)

    def fill(self) -> None:
        for _ in range(IDLE):
            self.open()
        for number in range(HALF_HEADS):
            self.open(f"GET /search?q=flood{number} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ".encode())
        for _ in range(HALF_BODIES):  # whole heads without the token, bodies that never finish
            self.open(b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 4000\r\n\r\n{\"query\": \"")

    def keep_reopening(self, limit: int = 2000) -> None:
        """Open a new idle socket for every one the server closed, until stopped (at most ``limit``)."""
        while not self.stop.is_set() and self.reopened < limit:
            self.open(b"GET /search HTTP/1.1\r\n")
            self.reopened += 1

    def close(self) -> None:
        self.stop.set()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.close()


class FloodTests(StoreCase):
    def setUp(self):
        self.server = start(self.store, self, token=TOKEN)
        self.url = self.server.url
        self.flood = Flood(self.url)
        self.addCleanup(self.flood.close)

    def test_a_search_with_the_token_answers_while_one_client_floods_the_server(self):
        before = threading.active_count()
        self.flood.fill()
        status, _, value = request(self.url, path="/search?q=bread&k=1", headers=AUTH)
        self.assertEqual(status, 200, value)
        self.assertIn("Sourdough", value["hits"][0]["text"])
        self.assertLessEqual(threading.active_count() - before, http_server.MAX_CONNECTIONS + 4)
        status, _, value = request(self.url, "POST", "/search", {"query": "violin", "k": 1}, AUTH)
        self.assertEqual(status, 200, value)

    def test_a_search_with_the_token_answers_while_the_flood_keeps_reopening(self):
        self.flood.fill()
        reopening = threading.Thread(target=self.flood.keep_reopening, daemon=True)
        reopening.start()
        try:
            answers = [self.search_as_a_client_would() for _ in range(5)]
        finally:
            self.flood.stop.set()
            reopening.join(WAIT_SECONDS)
        self.assertEqual(answers, [200] * 5)

    def search_as_a_client_would(self) -> int:
        """A search that, refused with 503 ("try again shortly"), tries once more, as a client does.

        The flood shares the test's address, and one address's waiting
        connections push out its own oldest: on a loaded machine the flood can
        open a hundred sockets between this client's connect and the moment
        the server reads its head. A second refusal in a row fails the test.
        """
        status, _, value = request(self.url, path="/search?q=rocket&k=1", headers=AUTH)
        if status == 503:
            self.assertIn("try again", json.dumps(value))
            status = request(self.url, path="/search?q=rocket&k=1", headers=AUTH)[0]
        return status

    def test_without_the_token_the_flood_gets_nothing_and_the_search_still_answers(self):
        self.flood.fill()
        status, _, value = request(self.url, path="/search?q=bread&k=1")
        self.assertIn(status, (401, 503))  # no token: never an answer, at most a refusal
        self.assertNotIn("hits", value)
        self.assertEqual(request(self.url, path="/search?q=bread&k=1", headers=AUTH)[0], 200)

    def test_the_idle_sockets_are_closed_once_the_head_deadline_passes(self):
        server = start(self.store, self, token=TOKEN, request_time_limit=0.5)
        flood = Flood(server.url)
        self.addCleanup(flood.close)
        for _ in range(20):
            flood.open(b"GET /search?q=x HTTP/1.1\r\n")
        answers = []
        for sock in flood.sockets:
            with contextlib.suppress(OSError):
                answers.append(sock.recv(200))
        self.assertTrue(all(answer.startswith(b"HTTP/1.0 408") for answer in answers), answers[:2])
        self.assertEqual(len(answers), 20)
        deadline = time.monotonic() + WAIT_SECONDS
        while server.server.waiting() and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(server.server.waiting(), 0)


class WaitingTests(unittest.TestCase):
    """The registry of connections waiting for their heads, with addresses chosen by the test."""

    def test_the_cap_per_client_pushes_out_that_clients_oldest_and_spares_the_others(self):
        waiting = http_protocol.Waiting(per_client=3, total=100)
        self.assertEqual(waiting.add("other-0", "10.0.0.2"), [])
        pushed = [waiting.add(f"flood-{n}", "10.0.0.1") for n in range(6)]
        self.assertEqual(pushed, [[], [], [], ["flood-0"], ["flood-1"], ["flood-2"]])
        self.assertEqual(len(waiting), 4)
        waiting.remove("flood-5", "10.0.0.1")
        self.assertEqual(waiting.add("flood-6", "10.0.0.1"), [])  # a head that arrived made room

    def test_the_cap_in_all_pushes_out_the_oldest_of_anyone(self):
        waiting = http_protocol.Waiting(per_client=10, total=3)
        for n in range(3):
            waiting.add(f"c{n}", f"10.0.0.{n}")
        self.assertEqual(waiting.add("c3", "10.0.0.3"), ["c0"])
        waiting.remove("c0", "10.0.0.0")  # already gone: nothing happens
        self.assertEqual(len(waiting), 3)


class WireWaitTests(StoreCase):
    """Heads over real sockets: sent a byte at a time, never ended, too long, pipelined, kept alive and idle."""

    def setUp(self):
        self.server = start(self.store, self, request_time_limit=0.5)
        self.address = address(self.server.url)

    def connect(self) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=WAIT_SECONDS)
        self.addCleanup(sock.close)
        return sock

    def read_all(self, sock: socket.socket) -> bytes:
        received = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                received += chunk
        return received

    def answered(self, sock: socket.socket) -> bytes:
        """One whole answer (head and Content-Length body) from a kept-alive connection."""
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
        while len(body) < length:
            body += sock.recv(65536)
        return head

    def test_a_head_sent_a_byte_at_a_time_is_answered(self):
        sock = self.connect()
        for byte in b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n":
            sock.sendall(bytes([byte]))
        self.assertTrue(self.read_all(sock).startswith(b"HTTP/1.1 200"))

    def test_a_head_that_never_ends_gets_408_and_an_oversized_one_is_refused(self):
        stalled, oversized = self.connect(), self.connect()
        stalled.sendall(b"GET / HTTP/1.1\r\nX: ")
        oversized.sendall(b"GET / HTTP/1.1\r\nX: " + b"a" * (http_protocol.MAX_HEAD_BYTES + 1024))
        self.assertTrue(self.read_all(stalled).startswith(b"HTTP/1.0 408"))
        self.assertTrue(self.read_all(oversized).startswith(b"HTTP/1.0 400"))
        self.assertEqual(self.server.server.waiting(), 0)

    def test_blank_lines_alone_are_no_head_and_never_hold_the_connection(self):
        sock = self.connect()
        sock.sendall(b"\r\n\r\n\n\n\r\n")
        self.assertRegex(self.read_all(sock), rb"^HTTP/1\.0 40[08] ")  # refused at once, or at the deadline

    def test_a_pipelined_partial_request_waits_for_the_rest(self):
        sock = self.connect()
        whole = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        sock.sendall(whole + whole[:10])
        self.assertTrue(self.answered(sock).startswith(b"HTTP/1.1 200"))
        sock.sendall(whole[10:])
        self.assertTrue(self.answered(sock).startswith(b"HTTP/1.1 200"))

    def test_a_kept_alive_connection_that_started_a_request_and_stalled_gets_408_an_idle_one_nothing(self):
        stalled, idle = self.connect(), self.connect()
        for sock in (stalled, idle):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            self.assertTrue(self.answered(sock).startswith(b"HTTP/1.1 200"))
        stalled.sendall(b"GET / HTTP/1.1\r\nX: ")
        self.assertTrue(self.read_all(stalled).startswith(b"HTTP/1.0 408"))
        self.assertEqual(self.read_all(idle), b"")  # closed at the same deadline, with no answer

    def test_over_the_cap_kept_alive_idle_ones_close_silently_and_new_waiting_ones_get_503(self):
        self.server.server.guard.waiting.per_client = 3
        idle = []
        for _ in range(3):
            sock = self.connect()
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            self.assertTrue(self.answered(sock).startswith(b"HTTP/1.1 200"))
            idle.append(sock)
        newest = self.connect()  # over the cap: the oldest idle one makes room, silently
        self.assertEqual(self.read_all(idle[0]), b"")
        waiting = [self.connect() for _ in range(3)]  # three more new ones: the older waiting ones get 503
        self.assertTrue(self.read_all(idle[1]) == b"" and self.read_all(idle[2]) == b"")
        self.assertTrue(self.read_all(newest).startswith(b"HTTP/1.0 503"))
        waiting[-1].sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        self.assertTrue(self.read_all(waiting[-1]).startswith(b"HTTP/1.1 200"))


if __name__ == "__main__":
    unittest.main()
