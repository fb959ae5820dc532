"""A loopback model server that misbehaves on purpose, the way real ones do.

``FaultStub`` is the ``StubServer`` (same deterministic bag-of-words
vectors, both wire formats) with a ``Fault`` chosen for each embedding
request: first from ``plan`` (one per request, in order, the probe
included), then from ``rule(n, texts, body)``. A fault can delay the answer,
answer an error status with the body of Ollama, llama.cpp, TEI or an
OpenAI-style server (and ``Retry-After``), reset the connection, cut the
JSON short, or answer 200 with the wrong number of vectors, a NaN, an
all-zero vector or the wrong dimension. ``go_away()`` and ``come_back()``
close and reopen the listening port, as a restarting server does.

``crash_over=N`` makes it a server that one input brings down, as
llama.cpp's does with a large ``--n_batch`` (``GGML_ASSERT``): a request
holding an input of more than N tokens (``model_tokens``) resets every
connection in flight and closes the port, until the test calls
``come_back()`` or, with ``restart_after``, that many seconds later.

Tests and the benchmarks use it; it never listens beyond loopback unless told.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from bastion_agent.core.httpthread import make_server
from bastion_agent.testing.stub_server import (
    StubFormat,
    StubServer,
    _handler_for,
    bag_of_words,
)

ERROR_SHAPES = ("ollama", "llama.cpp", "tei", "openai-style")  # how each words an error (Fault.imitates)
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
SUBWORD_CHARS = 4


def model_tokens(text: str) -> int:
    """Tokens as a subword model counts them, roughly: a word of k characters is ceil(k / 4) tokens,
    a punctuation mark one (a long identifier or a base64 blob is many tokens, as in a real model)."""
    return sum(max(1, math.ceil(len(token) / SUBWORD_CHARS)) for token in _TOKEN_RE.findall(text))


@dataclass(frozen=True)
class Fault:
    """What to do to one request (the default, ``Fault()``, answers it normally)."""

    delay: float = 0.0
    status: int | None = None  # answer this error status instead of vectors
    message: str = "injected failure"
    imitates: str = "ollama"  # the server whose error body it answers (ERROR_SHAPES)
    retry_after: str | None = None
    reset: bool = False  # close the connection with a TCP reset, answering nothing
    truncated: bool = False  # a 200 whose JSON is cut in half
    wrong_count: bool = False  # one vector fewer than inputs
    nan: bool = False  # the first vector holds a NaN
    zero: bool = False  # the first vector is all zeros
    wrong_dim: bool = False  # every vector one value short


# Errors as the real servers word them: status, message, and the server imitated.
def ollama_too_long() -> Fault:
    return Fault(status=400, message="the input length exceeds the context length", imitates="ollama")


def llamacpp_too_large(tokens: int = 600) -> Fault:
    return Fault(status=500, imitates="llama.cpp",
                 message=f"input ({tokens} tokens) is too large to process. increase the physical batch size")


def tei_batch_limit(size: int, limit: int = 32) -> Fault:
    return Fault(status=422, imitates="tei", message=f"batch size {size} > maximum allowed batch size {limit}")


def tei_body_too_large() -> Fault:
    return Fault(status=413, imitates="tei", message="Failed to buffer the request body: length limit exceeded")


def overloaded(status: int = 503, retry_after: str | None = None, imitates: str = "ollama") -> Fault:
    return Fault(status=status, retry_after=retry_after, imitates=imitates, message="server busy, please retry")


class FaultStub(StubServer):
    """``with FaultStub(plan=[...], rule=...) as stub:``; ``stub.faults_served`` counts faults by kind.

    ``float_only`` answers floats even when asked for base64 (as servers
    that ignore ``encoding_format`` do); ``reject_base64`` answers 400 to a
    base64 request (as servers that refuse it do).
    """

    def __init__(self, dim: int = 64, plan: Sequence[Fault] = (), rule: Callable | None = None,
                 float_only: bool = False, reject_base64: bool = False, crash_over: int | None = None,
                 restart_after: float | None = None, **kwargs):
        super().__init__(dim=dim, **kwargs)
        self.plan = list(plan)
        self.rule = rule
        self.float_only = float_only
        self.reject_base64 = reject_base64
        self.crash_over = crash_over
        self.restart_after = restart_after
        self.crashes = 0
        self.down = False
        self.posts = 0
        self.faults_served: dict[str, int] = {}
        self.in_flight = self.max_in_flight = 0
        self._connections: set = set()  # handlers answering now: a crash resets them all
        self._port_lock = threading.Lock()
        self._quiet(self.httpd)

    # -- the port going away and coming back --------------------------------

    def go_away(self) -> None:
        """Close the listening socket: new connections are refused until ``come_back``."""
        with self._port_lock:
            if not self.down:
                self.down = True
                super().stop()

    def come_back(self) -> None:
        """Listen again on the same port (nothing to do when it listens)."""
        with self._port_lock:
            if not self.down:
                return
            host, port = self.httpd.server_address[:2]
            self.httpd = make_server(host, port, _handler_for(self))
            self._quiet(self.httpd)
            self.start()
            self.down = False

    def stop(self) -> None:
        """Stop for good (the end of a ``with`` block): no restart after it."""
        self.restart_after = None
        self.go_away()

    def crash(self, handler) -> None:
        """Die as a crashing server does: the port closed first (nothing more is accepted), then every
        connection in flight reset; back after ``restart_after`` seconds, or when the test says."""
        with self.lock:
            self.crashes += 1
            others = [other for other in self._connections if other is not handler]
            restart = self.restart_after
        self.go_away()
        _reset(handler)
        for other in others:
            _reset(other)
        if restart is not None:
            timer = threading.Timer(restart, self._restart)
            timer.daemon = True
            timer.start()

    def _restart(self) -> None:
        if self.restart_after is not None:  # the test is not over
            self.come_back()

    @staticmethod
    def _quiet(httpd) -> None:
        httpd.handle_error = lambda request, address: None  # resets are on purpose

    # -- answering ----------------------------------------------------------

    def next_fault(self, texts: list[str], body: dict) -> Fault:
        with self.lock:
            number = self.posts
            self.posts += 1
            if self.plan:
                return self.plan.pop(0)
        return (self.rule(number, texts, body) if self.rule else None) or Fault()

    def intercept(self, handler, fmt: StubFormat, body: dict) -> bool:
        texts = [text for text in fmt.texts(body) if isinstance(text, str)]
        fault = self.next_fault(texts, body)
        self._count(fault)
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self._connections.add(handler)
        try:
            if self.crash_over is not None and any(model_tokens(text) > self.crash_over for text in texts):
                self.crash(handler)
                return True
            return self._answer(handler, fmt, body, texts, fault)
        finally:
            with self.lock:
                self.in_flight -= 1
                self._connections.discard(handler)

    def _answer(self, handler, fmt: StubFormat, body: dict, texts: list[str], fault: Fault) -> bool:
        if fault.delay:
            time.sleep(fault.delay)
        if fault.reset:
            _reset(handler)
            return True
        if fault.status is not None:
            _send(handler, fault.status, _error_body(fault), fault.retry_after)
            return True
        encoding = fmt.encoding(body)
        if encoding == "base64" and self.reject_base64:
            _send(handler, 400, {"error": {"code": 400, "message": "encoding_format base64 is not supported",
                                           "type": "invalid_request_error"}})
            return True
        vectors = self._vectors(texts, fault)
        value = fmt.answer(body.get("model"), vectors, "float" if self.float_only else encoding, None)
        data = json.dumps(value).encode("utf-8")  # NaN is written as the bare token NaN
        if fault.truncated:
            data = data[: len(data) // 2]
        _send_bytes(handler, 200, data)
        return True

    def _vectors(self, texts: list[str], fault: Fault) -> list[list[float]]:
        dim = self.dim - 1 if fault.wrong_dim else self.dim
        vectors = [bag_of_words(text, dim) for text in texts]
        if fault.wrong_count:
            vectors = vectors[:-1]
        if vectors and fault.nan:
            vectors[0][0] = float("nan")
        if vectors and fault.zero:
            vectors[0] = [0.0] * dim
        return vectors

    def _count(self, fault: Fault) -> None:
        kind = _kind(fault)
        if kind:
            with self.lock:
                self.faults_served[kind] = self.faults_served.get(kind, 0) + 1


def random_faults(rate: float, seed: int = 0, delay: float = 0.0, timeout_delay: float = 0.0) -> Callable:
    """A ``rule`` that spoils ``rate`` of the requests at random: 429, 503, a reset,
    or (when ``timeout_delay`` is given) an answer slower than the client waits."""
    generator = random.Random(seed)
    lock = threading.Lock()
    kinds = [overloaded(429), overloaded(503), Fault(reset=True)]
    if timeout_delay:
        kinds.append(Fault(delay=timeout_delay))

    def rule(number: int, texts: list[str], body: dict) -> Fault:
        if number == 0:
            return Fault(delay=delay)  # the probe fails fast by design: never spoil it
        with lock:
            spoil = generator.random() < rate
            fault = generator.choice(kinds)
        return fault if spoil else Fault(delay=delay)

    return rule


def _kind(fault: Fault) -> str | None:
    if fault.reset:
        return "reset"
    if fault.status is not None:
        return f"http_{fault.status}"
    for name in ("truncated", "wrong_count", "nan", "zero", "wrong_dim"):
        if getattr(fault, name):
            return name
    return "slow" if fault.delay >= 1.0 else None


def _error_body(fault: Fault) -> dict:
    if fault.imitates == "llama.cpp":
        kind = "server_error" if fault.status >= 500 else "invalid_request_error"
        return {"error": {"code": fault.status, "message": fault.message, "type": kind}}
    if fault.imitates == "tei":
        return {"error": fault.message, "error_type": "Validation" if fault.status in (413, 422) else "Backend"}
    if fault.imitates == "openai-style":
        return {"message": fault.message, "code": fault.status, "type": "Validation"}
    return {"error": fault.message}


def _send(handler, status: int, value, retry_after: str | None = None) -> None:
    _send_bytes(handler, status, json.dumps(value).encode("utf-8"), retry_after)


def _send_bytes(handler, status: int, data: bytes, retry_after: str | None = None) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    if retry_after is not None:
        handler.send_header("Retry-After", retry_after)
    handler.end_headers()
    handler.wfile.write(data)


def nested_answer(handler) -> None:
    """A route (``StubServer(routes=...)``): 200 with JSON nested past any parser's recursion limit."""
    handler.rfile.read(int(handler.headers.get("Content-Length") or 0))  # all of it: unread, the close is a reset
    _send_bytes(handler, 200, b"[" * 200_000 + b"]" * 200_000)


def endless(handler, piece: bytes = b"[" * 65536) -> None:
    """A route (``StubServer(routes=...)``): an answer with no length that never ends (until the client hangs up)."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.end_headers()
    with contextlib.suppress(OSError):
        for _ in range(1 << 14):  # 1 GiB at most, should the client never hang up
            handler.wfile.write(piece)


def _reset(handler) -> None:
    """Drop the connection with an RST, as a crashing server does."""
    handler.close_connection = True
    try:
        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        handler.connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    handler.connection.close()


def main(argv=None) -> None:
    """``python3 -m bastion_agent.testing.fault_stub --delay 0.03 --fail-rate 0.1``: a faulty stub in its own
    process (the benchmarks run it apart so it never competes with the stage for the GIL)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python3 -m bastion_agent.testing.fault_stub", description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds added to every answer")
    parser.add_argument("--fail-rate", type=float, default=0.0, help="share of requests spoiled at random")
    parser.add_argument("--timeout-delay", type=float, default=0.0, help="also spoil with answers this slow")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--crash-over", type=int, default=None,
                        help="crash (reset every connection, close the port) on an input of more tokens")
    parser.add_argument("--restart-after", type=float, default=1.0, help="seconds until it listens again after a crash")
    args = parser.parse_args(argv)
    rule = random_faults(args.fail_rate, args.seed, args.delay, args.timeout_delay)
    stub = FaultStub(dim=args.dim, rule=rule, host=args.host, port=args.port, crash_over=args.crash_over,
                     restart_after=args.restart_after if args.crash_over is not None else None)
    stub.requests = _Discard()  # a long benchmark keeps no request bodies
    print(stub.url, flush=True)
    stub.start()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        stub.stop()
        print(json.dumps({"posts": stub.posts, "faults": stub.faults_served, "crashes": stub.crashes}), flush=True)


class _Discard(list):
    def append(self, item) -> None:
        pass


if __name__ == "__main__":
    main()
