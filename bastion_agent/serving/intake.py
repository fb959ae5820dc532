"""Reading each connection's request head before it gets a thread, so idle sockets hold no slot.

A thread per accepted connection let 70 idle half-requests take every one of
serve's slots: a connection held its thread while it sent
nothing. Here one thread reads the request line and headers of every new
connection at once (non-blocking sockets, one ``selectors`` loop), and only
a complete head is handed on, to a thread of its own (``BastionHTTPServer``),
where an authenticated request can always get a slot. So:

- **A short deadline for the head**: a connection that has not sent its
  request line and headers within ``deadline`` seconds gets 408 and is
  closed (``HEAD_SECONDS``, or the request time limit when shorter).
- **A cap per client and in all**: at most ``per_client`` connections of one
  address, and ``total`` of all, may be waiting to send their head; past
  that the oldest waiting one is closed (503) to make room. A real client
  sends its head at once, so the newest connection is the one that matters:
  one address opening sockets for ever only keeps closing its own oldest
  ones, never another address's (its cap is reached first), and a client
  that sends its request right away still gets through.

A waiting connection costs a file descriptor and a buffer of at most
``max_head`` bytes, never a thread.

A kept-alive connection comes back here after each answer (``returning``),
with whatever of the next request its thread had already read: between
requests it holds no thread and no slot, and the same deadline and caps
apply. An idle returning connection that reaches the deadline, or is
pushed out, is closed without an answer: it asked for nothing, and a 408
there could be read as the answer to a request crossing it on the wire.
"""

from __future__ import annotations

import collections
import re
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

HEAD_SECONDS = 5.0
MAX_WAITING_PER_CLIENT = 128
MAX_WAITING = 2048
MAX_HEAD_BYTES = 64 * 1024 + 8 * 1024  # the request line and headers the handler accepts, and a little more
HEAD_END = re.compile(rb"\r?\n\r?\n")


@dataclass(eq=False)
class Waiting:
    """A connection whose head is not complete yet."""

    sock: socket.socket
    address: tuple
    accepted: float
    buffer: bytearray = field(default_factory=bytearray)
    returning: bool = False  # kept alive after an answer: when idle, it is closed without one

    @property
    def idle(self) -> bool:
        """A kept-alive connection that has sent nothing of its next request."""
        return self.returning and not self.buffer

    @property
    def client(self) -> str:
        return str(self.address[0]) if self.address else "-"


def head_complete(buffer: bytes) -> bool:
    """Whether ``buffer`` holds a whole request head (or a request line that has no headers to wait for)."""
    if HEAD_END.search(buffer):
        return True
    line, newline, _ = bytes(buffer).partition(b"\n")
    return bool(newline) and len(line.split()) < 3  # HTTP/0.9, or garbage: the handler answers 400 at once


class Intake:
    """One thread that collects request heads; ``ready(sock, address, head)`` gets each complete one.

    ``refuse(sock, status, message)`` answers and closes a connection that
    waited too long (408) or was pushed out by newer ones (503).
    """

    def __init__(self, ready: Callable[[socket.socket, tuple, bytes], None],
                 refuse: Callable[[socket.socket, int, str], None], deadline: float = HEAD_SECONDS,
                 per_client: int = MAX_WAITING_PER_CLIENT, total: int = MAX_WAITING, max_head: int = MAX_HEAD_BYTES):
        self.ready, self.refuse = ready, refuse
        self.deadline, self.per_client, self.total, self.max_head = deadline, per_client, total, max_head
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._added: list[Waiting] = []
        self._waiting: dict[Waiting, None] = {}  # in order of acceptance: the first is the oldest
        self._by_client: dict[str, collections.deque] = {}
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._wake_write.setblocking(False)
        self._selector.register(self._wake_read, selectors.EVENT_READ, None)
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="bastion-serve-intake", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and close every connection still waiting (once; a second call does nothing)."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._wake()
        if self._thread.is_alive():
            self._thread.join()
        for waiting in list(self._waiting) + self._added:
            self._close(waiting)
        self._selector.close()
        self._wake_read.close()
        self._wake_write.close()

    def add(self, sock: socket.socket, address: tuple, buffer: bytes = b"", returning: bool = False) -> None:
        """Take an accepted connection, or a kept-alive one back with the bytes already read of it (never blocks)."""
        sock.setblocking(False)
        with self._lock:
            if self._stopped:
                self._close(Waiting(sock, address, 0.0))
                return
            self._added.append(Waiting(sock, address, time.monotonic(), bytearray(buffer), returning))
        self._wake()

    def waiting(self) -> int:
        with self._lock:
            return len(self._waiting) + len(self._added)

    def _wake(self) -> None:
        try:
            self._wake_write.send(b"\0")
        except OSError:  # the pipe is full: the thread is awake anyway
            pass

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._stopped:
                    return
                added, self._added = self._added, []
            for waiting in added:
                self._admit(waiting)
            self._expire(time.monotonic())
            oldest = next(iter(self._waiting), None)
            timeout = None if oldest is None else max(0.0, oldest.accepted + self.deadline - time.monotonic())
            for key, _ in self._selector.select(timeout):
                if key.data is None:
                    self._drain_wake()
                else:
                    self._read(key.data)

    def _admit(self, waiting: Waiting) -> None:
        mine = self._by_client.setdefault(waiting.client, collections.deque())
        while len(mine) >= self.per_client:
            self._push_out(mine[0])
        while len(self._waiting) >= self.total:
            self._push_out(next(iter(self._waiting)))
        mine = self._by_client.setdefault(waiting.client, collections.deque())
        mine.append(waiting)
        self._waiting[waiting] = None
        try:
            self._selector.register(waiting.sock, selectors.EVENT_READ, waiting)
        except (OSError, ValueError):
            self._forget(waiting)
            self._close(waiting)
            return
        if waiting.buffer and (head_complete(waiting.buffer) or len(waiting.buffer) > self.max_head):
            self._forget(waiting)  # a pipelined request already read whole: on at once
            self.ready(waiting.sock, waiting.address, bytes(waiting.buffer))

    def _push_out(self, waiting: Waiting) -> None:
        """Make room: the connection goes on if its head has arrived meanwhile (unread yet), else it gets 503."""
        if self._read(waiting):
            return
        self._forget(waiting)
        if waiting.idle:
            self._close(waiting)
            return
        self.refuse(waiting.sock, 503, "too many connections are waiting to send a request; try again shortly")

    def _expire(self, now: float) -> None:
        while self._waiting:
            oldest = next(iter(self._waiting))
            if oldest.accepted + self.deadline > now:
                return
            self._forget(oldest)
            if oldest.idle:
                self._close(oldest)
            else:
                self.refuse(oldest.sock, 408, f"the request was not received within {self.deadline:g} s")

    def _read(self, waiting: Waiting) -> bool:
        """Read what arrived; True when the connection left the intake (its head handed on, or it closed)."""
        while True:
            try:
                data = waiting.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return False
            except OSError:
                data = b""
            if not data:  # the client closed (or reset) before sending a whole head
                self._forget(waiting)
                self._close(waiting)
                return True
            waiting.buffer += data
            if head_complete(waiting.buffer) or len(waiting.buffer) > self.max_head:
                self._forget(waiting)
                self.ready(waiting.sock, waiting.address, bytes(waiting.buffer))
                return True

    def _forget(self, waiting: Waiting) -> None:
        self._waiting.pop(waiting, None)
        mine = self._by_client.get(waiting.client)
        if mine is not None:
            try:
                mine.remove(waiting)
            except ValueError:
                pass
            if not mine:
                del self._by_client[waiting.client]
        try:
            self._selector.unregister(waiting.sock)
        except (KeyError, ValueError, OSError):
            pass

    def _drain_wake(self) -> None:
        try:
            while self._wake_read.recv(4096):
                pass
        except (BlockingIOError, InterruptedError, OSError):
            pass

    @staticmethod
    def _close(waiting: Waiting) -> None:
        try:
            waiting.sock.close()
        except OSError:
            pass
