"""The HTTP/1.1 wire of ``serve``: uvicorn's h11 protocol, stricter about framing and about waiting heads.

uvicorn parses requests with h11 (pinned: ``http=`` is this class, never
``auto``, which would switch to httptools when that happens to be
installed). h11 alone still accepts three things that let a request hide in
another's body (RFC 9112 §6.3 says to refuse them), so each request head is
checked here, on the raw bytes, before h11 sees it, and refused with 400 and
a closed connection:

- ``Content-Length`` more than once (h11 merges equal copies silently);
- ``Transfer-Encoding`` at all (serve reads bodies by ``Content-Length``
  only; beside a ``Content-Length`` it is the classic smuggling pair);
- a header line folded onto the next (obs-fold: h11 unfolds it).

To know where the next head starts, the check follows the framing the same
way h11 does, which is unambiguous once those three are refused: a head,
then exactly ``Content-Length`` bytes of body.

A connection that has not sent a whole head within ``deadline`` seconds gets
408 and is closed (a kept-alive connection that sent nothing of its next
request is closed silently: a 408 there could be read as the answer to a
request crossing it on the wire). At most ``per_client`` connections of one
address, and ``total`` in all, may be waiting for their heads; past that the
oldest waiting one of that address is pushed out (503), so one address
opening sockets for ever only closes its own oldest ones. A waiting
connection costs a file descriptor and its buffered bytes, never a thread.
"""

from __future__ import annotations

import collections
import re
import socket

from uvicorn.protocols.http.h11_impl import H11Protocol

from bastion_agent.serving.http_guard import short_answer

HEAD_SECONDS = 5.0
MAX_WAITING_PER_CLIENT = 128
MAX_WAITING = 2048
MAX_HEAD_BYTES = 64 * 1024 + 8 * 1024  # the request line and headers accepted, and a little more
HEAD_END = re.compile(rb"\r?\n\r?\n")
HEADERS_WITH_FRAMING = (b"content-length", b"transfer-encoding")


class FramingError(ValueError):
    """A request head that could make two parsers disagree on where the next request starts."""


def check_head(head: bytes) -> int:
    """The body length a head announces (0 without ``Content-Length``); ``FramingError`` for an ambiguous one."""
    lines = re.split(rb"\r?\n", head)
    lengths = []
    for line in lines[1:]:
        if not line:
            continue
        if line[:1] in (b" ", b"\t"):
            raise FramingError("a header folded onto the next line (obs-fold) is refused; send each header on one line")
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"transfer-encoding":
            raise FramingError("send the body with a Content-Length header, not Transfer-Encoding")
        if name == b"content-length":
            lengths.append(value.strip())
    if len(lengths) > 1:
        raise FramingError("Content-Length was sent more than once; send it once")
    if not lengths:
        return 0
    if not re.fullmatch(rb"[0-9]{1,18}", lengths[0]):
        raise FramingError("Content-Length must be one whole number of bytes")
    return int(lengths[0])


class Framing:
    """Where the stream is: in a head (bytes so far) or in a body (bytes left)."""

    def __init__(self):
        self.head = bytearray()
        self.body_left = 0

    def feed(self, data: bytes) -> bool:
        """Follow ``data``; True when a head completed in it. ``FramingError`` for a refused head."""
        completed = False
        view = memoryview(data)
        while view:
            if self.body_left:
                taken = min(self.body_left, len(view))
                self.body_left -= taken
                view = view[taken:]
                continue
            start = max(0, len(self.head) - 3)
            self.head += view
            view = view[len(view):]
            if self.head[:1] in (b"\r", b"\n"):  # blank lines before a request line are no head (nor its end)
                self.head = bytearray(self.head.lstrip(b"\r\n"))
                start = 0
            found = HEAD_END.search(self.head, start)
            if found is None:
                if len(self.head) > MAX_HEAD_BYTES:
                    return completed  # h11 refuses an oversized head itself
                continue
            rest = bytes(self.head[found.end():])
            self.body_left = check_head(bytes(self.head[:found.end()]))
            self.head = bytearray()
            completed = True
            view = memoryview(rest)
        return completed

    @property
    def in_head(self) -> bool:
        return not self.body_left

    @property
    def started(self) -> bool:
        return bool(self.head.strip(b"\r\n"))


class Waiting:
    """The connections waiting for a head, oldest first, per client and in all; ``add`` pushes out past the caps."""

    def __init__(self, per_client: int = MAX_WAITING_PER_CLIENT, total: int = MAX_WAITING):
        self.per_client, self.total = per_client, total
        self._all: dict[object, None] = {}
        self._by_client: dict[str, collections.deque] = {}

    def add(self, connection, client: str) -> list:
        """Wait for ``connection``'s head; returns the connections pushed out to make room (oldest first)."""
        pushed = []
        mine = self._by_client.setdefault(client, collections.deque())
        while len(mine) >= self.per_client:
            pushed.append(mine[0])
            self.remove(mine[0], client)
            mine = self._by_client.setdefault(client, collections.deque())
        while len(self._all) >= self.total:
            oldest = next(iter(self._all))
            pushed.append(oldest)
            self.remove(oldest, getattr(oldest, "client_name", client))
        mine = self._by_client.setdefault(client, collections.deque())
        mine.append(connection)
        self._all[connection] = None
        return pushed

    def remove(self, connection, client: str) -> None:
        if connection not in self._all:
            return
        del self._all[connection]
        mine = self._by_client.get(client)
        if mine is not None:
            try:
                mine.remove(connection)
            except ValueError:
                pass
            if not mine:
                del self._by_client[client]

    def __len__(self) -> int:
        return len(self._all)


class GuardedH11Protocol(H11Protocol):
    """h11 with the framing checks, the head deadline and the waiting caps; ``guard`` is set per server."""

    guard = None  # a http_server.Guard: settings, the waiting registry, the log (set by a subclass per server)

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:  # an answer's head and body are two writes: neither may wait for the other's ACK
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.client_name = str(self.client[0]) if self.client else "-"
        self.framing = Framing()
        self.head_timer = None
        self.returning = False
        self._wait_for_head()

    def connection_lost(self, exc) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        try:
            completed = self.framing.feed(data)
        except FramingError as exc:
            self._stop_waiting()
            self.guard.refused(self.client_name, 400)
            self.refuse(400, str(exc))
            return
        if completed:
            self._stop_waiting()
        super().data_received(data)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.framing.in_head:
            self.returning = True
            self._wait_for_head()

    def send_400_response(self, msg: str) -> None:
        """h11 could not parse the request (HTTP/0.9, a bad header): our JSON answer, security headers, closed."""
        self._stop_waiting()
        self.guard.refused(self.client_name, 400)
        self.refuse(400, "not a valid request: send a request line with its HTTP version (1.0 or 1.1) and well-formed headers")

    def refuse(self, status: int, message: str) -> None:
        """Answer at once without reading further, then close."""
        if not self.transport.is_closing():
            self.transport.write(short_answer(status, message))
            self.transport.close()

    # -- waiting for a head

    def _wait_for_head(self) -> None:
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a pipelined request already parsed is being answered
        for pushed in self.guard.waiting.add(self, self.client_name):
            pushed._push_out()
        self.head_timer = self.loop.call_later(self.guard.head_deadline, self._head_late)

    def _stop_waiting(self) -> None:
        self.guard.waiting.remove(self, self.client_name)
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _push_out(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None
        if self.returning and not self.framing.started:
            self.transport.close()
        else:
            self.refuse(503, "too many connections are waiting to send a request; try again shortly")

    def _head_late(self) -> None:
        self.head_timer = None
        self.guard.waiting.remove(self, self.client_name)
        if self.returning and not self.framing.started:
            self.transport.close()
        else:
            self.refuse(408, f"the request was not received within {self.guard.head_deadline:g} s")
