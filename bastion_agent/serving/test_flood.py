"""serve under a connection flood: idle and half-sent requests cannot take a user's slot.

Hostile first: one client opens hundreds of idle sockets, half-sent request
heads and half-sent bodies without the token, and keeps reopening what the
server closes; a ``/search`` with the right token from the same address
still gets its answer, and the server's threads stay bounded. Then the
intake itself: the cap per client pushes out that client's oldest waiting
connection (not another client's), and a head that never completes gets 408.
No timing thresholds: every wait is bounded by ``WAIT_SECONDS``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import unittest
import urllib.parse

from bastion_agent.serving import http_server, intake
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
            answers = [request(self.url, path="/search?q=rocket&k=1", headers=AUTH)[0] for _ in range(5)]
        finally:
            self.flood.stop.set()
            reopening.join(WAIT_SECONDS)
        self.assertEqual(answers, [200] * 5)

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
        while server.server.intake.waiting() and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(server.server.intake.waiting(), 0)


class IntakeTests(unittest.TestCase):
    """The intake alone, with socket pairs standing for connections and addresses chosen by the test."""

    def setUp(self):
        self.ready: list[tuple[tuple, bytes]] = []
        self.refused: list[tuple[int, str]] = []
        self.done = threading.Condition()

    def make(self, **limits) -> intake.Intake:
        def ready(sock, address, head):
            with self.done:
                self.ready.append((address, head))
                self.done.notify_all()
            sock.close()

        def refuse(sock, status, message):
            with self.done:
                self.refused.append((address_of[sock], status))
                self.done.notify_all()
            sock.close()

        address_of: dict = {}
        self.address_of = address_of
        gate = intake.Intake(ready, refuse, **limits)
        gate.start()
        self.addCleanup(gate.stop)
        return gate

    def connect(self, gate: intake.Intake, client: str, number: int, returning: bytes | None = None) -> socket.socket:
        """A new connection; with ``returning``, a kept-alive one coming back with those bytes of its next request."""
        ours, theirs = socket.socketpair()
        ours.settimeout(WAIT_SECONDS)
        self.addCleanup(ours.close)
        self.address_of[theirs] = (client, number)
        if returning is None:
            gate.add(theirs, (client, number))
        else:
            gate.add(theirs, (client, number), returning, returning=True)
        return ours

    def test_kept_alive_connections_meet_the_cap_and_idle_ones_are_closed_without_an_answer(self):
        gate = self.make(per_client=3, deadline=WAIT_SECONDS * 4)
        idle = [self.connect(gate, "10.0.0.1", number, returning=b"") for number in range(3)]
        newest = self.connect(gate, "10.0.0.1", 3)  # over the cap: the oldest idle one makes room, silently
        self.assertEqual(idle[0].recv(100), b"")
        self.assertEqual(self.refused, [])
        newest.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
        self.wait(lambda: len(self.ready) == 1)
        self.assertEqual(self.ready[0][0], ("10.0.0.1", 3))

    def test_a_pipelined_request_already_read_is_handed_on_at_once_and_a_partial_one_waits_for_the_rest(self):
        gate = self.make()
        whole = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        self.connect(gate, "10.0.0.1", 0, returning=whole)
        partial = self.connect(gate, "10.0.0.1", 1, returning=whole[:10])
        self.wait(lambda: len(self.ready) == 1)
        partial.sendall(whole[10:])
        self.wait(lambda: len(self.ready) == 2)
        self.assertEqual(self.ready, [(("10.0.0.1", 0), whole), (("10.0.0.1", 1), whole)])

    def test_a_kept_alive_connection_that_started_a_request_and_stalled_gets_408(self):
        gate = self.make(deadline=0.3)
        self.connect(gate, "10.0.0.1", 0, returning=b"GET / HTTP/1.1\r\nX: ")
        idle = self.connect(gate, "10.0.0.1", 1, returning=b"")
        self.wait(lambda: self.refused)
        self.assertEqual(self.refused, [(("10.0.0.1", 0), 408)])
        self.assertEqual(idle.recv(100), b"")  # the idle one is closed at the same deadline, with no answer

    def wait(self, condition) -> None:
        with self.done:
            self.assertTrue(self.done.wait_for(condition, WAIT_SECONDS))

    def test_the_cap_per_client_pushes_out_that_clients_oldest_and_spares_the_others(self):
        gate = self.make(per_client=3, deadline=WAIT_SECONDS * 4)
        other = self.connect(gate, "10.0.0.2", 0)
        flood = [self.connect(gate, "10.0.0.1", number) for number in range(6)]
        self.wait(lambda: len(self.refused) == 3)
        self.assertEqual(sorted(self.refused), [(("10.0.0.1", n), 503) for n in range(3)])
        newest = flood[-1]
        newest.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        other.sendall(b"GET / HTTP/1.0\r\n\r\n")
        self.wait(lambda: len(self.ready) == 2)
        self.assertEqual(sorted(address for address, _ in self.ready), [("10.0.0.1", 5), ("10.0.0.2", 0)])

    def test_a_head_sent_a_byte_at_a_time_is_whole_when_handed_on(self):
        gate = self.make()
        sock = self.connect(gate, "10.0.0.1", 0)
        head = b"GET /search?q=bread HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer x\r\n\r\n"
        for byte in head:
            sock.sendall(bytes([byte]))
        self.wait(lambda: self.ready)
        self.assertEqual(self.ready, [(("10.0.0.1", 0), head)])

    def test_a_head_that_never_ends_gets_408_and_an_oversized_one_is_handed_on_to_be_refused(self):
        gate = self.make(deadline=0.3, max_head=1024)
        self.connect(gate, "10.0.0.1", 0).sendall(b"GET / HTTP/1.1\r\nX: ")
        self.connect(gate, "10.0.0.1", 1).sendall(b"GET / HTTP/1.1\r\nX: " + b"a" * 2048)
        self.wait(lambda: self.refused and self.ready)
        self.assertEqual(self.refused, [(("10.0.0.1", 0), 408)])
        self.assertEqual(self.ready[0][0], ("10.0.0.1", 1))
        self.assertEqual(gate.waiting(), 0)


if __name__ == "__main__":
    unittest.main()
