"""The guard around ``serve``'s answers (ASGI middleware): slots, the time limit, one answer each, the access log.

- **Slots, the token first.** ``MAX_CONNECTIONS`` requests are answered at
  once; ``RESERVED_SLOTS`` of them only for a request that carries a valid
  token, checked before a slot is given, so requests from anyone without one
  can never take the slots a user needs. Past that: 503 with
  ``Retry-After: 1`` at once. (Idle and half-sent connections never reach
  here: they wait in the protocol, ``http_protocol``, without a slot.)
- **A time limit.** Each request is answered within ``request_time_limit``
  seconds: 408 when its body had not arrived by then, 503 when the answer
  was not ready, and the connection is closed.
- **One answer, and a stream never misread.** The connection is closed after
  an answer whenever the request's body was not read whole (refused, or cut
  by the time limit), so no byte of it can be taken for a request.
- **The access log** (stderr) names the method, the route, the status and
  the milliseconds, never the query string or an unknown path, which can
  hold what someone searched for.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from starlette.datastructures import Headers

from bastion_agent.serving import tokens

MAX_CONNECTIONS = 64  # requests answered at once; more are answered 503 at once
RESERVED_SLOTS = 16  # of those, kept for requests with a valid token
# Methods the access log names; any other is logged as <other>, since a made-up method could hold anything.
KNOWN_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT")
SECURITY_HEADERS = {
    "Server": "bastion-agent",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
}


@dataclass
class Exchange:
    """One request and what became of it: the route, the status, whether its body was read."""

    scope: dict
    receive: Callable
    send: Callable
    headers: Headers = field(init=False)
    route: str | None = None
    status: int | None = None
    body_read: bool = False
    responded: bool = False
    close: bool = False  # the connection ends after this answer

    def __post_init__(self):
        self.headers = Headers(scope=self.scope)

    @property
    def body_expected(self) -> bool:
        return (self.headers.get("content-length") or "0").strip() not in ("", "0")


async def send_answer(exchange: Exchange, status: int, data: bytes, content_type: str,
                      headers: dict | None = None) -> None:
    """Send the one answer of ``exchange`` (a second is ignored), closing when its body was not read whole."""
    if exchange.responded:
        return
    exchange.responded, exchange.status = True, status
    if exchange.body_expected and not exchange.body_read:
        exchange.close = True
    merged = {"Content-Type": content_type, "Content-Length": str(len(data)), **SECURITY_HEADERS,
              "Connection": "close" if exchange.close else "keep-alive", **(headers or {})}
    raw = [(name.encode("latin-1"), str(value).encode("latin-1")) for name, value in merged.items()]
    await exchange.send({"type": "http.response.start", "status": status, "headers": raw})
    await exchange.send({"type": "http.response.body", "body": data, "more_body": False})


class Slots:
    """How many requests are being answered, open and reserved; a reserved slot only for a valid token."""

    def __init__(self, book: tokens.TokenBook, total: int = MAX_CONNECTIONS, reserved: int = RESERVED_SLOTS):
        self.book = book
        self.open_left, self.reserved_left = total - reserved, reserved

    def take(self, authorization: str | None) -> str | None:
        """``"open"``, ``"reserved"`` or None (none free); the token is checked only when the open ones are taken."""
        if self.open_left > 0:
            self.open_left -= 1
            return "open"
        if self.reserved_left > 0 and self.authenticated(authorization):
            self.reserved_left -= 1
            return "reserved"
        return None

    def give_back(self, slot: str) -> None:
        if slot == "open":
            self.open_left += 1
        else:
            self.reserved_left += 1

    def authenticated(self, authorization: str | None) -> bool:
        """Whether a request carries a valid token (always, when the server needs none)."""
        return not self.book.enabled or self.book.caller(authorization) is not None


class GuardedApp:
    """ASGI: a slot, the time limit, one answer, the access log; then ``handler(exchange)`` answers."""

    def __init__(self, handler, settings, book: tokens.TokenBook, log: Callable[[str], None]):
        self.handler, self.settings, self.log = handler, settings, log
        self.slots = Slots(book)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        started = time.monotonic()
        exchange = Exchange(scope, receive, send)
        slot = self.slots.take(exchange.headers.get("authorization"))
        try:
            if slot is None:
                exchange.close = True
                await send_answer(exchange, 503, b'{"error": "too many connections; try again shortly"}',
                                  "application/json; charset=utf-8", {"Retry-After": "1"})
                return
            await self._answer_in_time(exchange)
        finally:
            if slot is not None:
                self.slots.give_back(slot)
            self._access_log(exchange, started)

    async def _answer_in_time(self, exchange: Exchange) -> None:
        limit = self.settings.request_time_limit
        try:
            await asyncio.wait_for(self.handler(exchange), limit)
        except (asyncio.TimeoutError, TimeoutError):
            exchange.close = True
            if exchange.body_expected and not exchange.body_read:
                status, message = 408, f"the request was not received within {limit:g} s"
            else:
                status, message = 503, f"the answer took longer than {limit:g} s; try again"
            await send_answer(exchange, status, json.dumps({"error": message}).encode("utf-8"),
                              "application/json; charset=utf-8")
        except Exception as exc:  # a bug: say so without details that could hold the query
            self.log(f"bastion_agent serve: internal error: {type(exc).__name__}")
            exchange.close = True
            await send_answer(exchange, 500, b'{"error": "internal error; see the server\'s log"}',
                              "application/json; charset=utf-8")

    def _access_log(self, exchange: Exchange, started: float) -> None:
        if exchange.status is None:
            return
        method = exchange.scope["method"]
        method = method if method in KNOWN_METHODS else "<other>"
        client = exchange.scope.get("client")
        millis = (time.monotonic() - started) * 1000
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.log(f"{stamp} {client[0] if client else '-'} {method} {exchange.route or '<other>'} "
                 f"{exchange.status} {millis:.1f}ms")


def short_answer(status: int, message: str) -> bytes:
    """A whole HTTP/1.0 answer with a JSON error, for a connection no request cycle serves."""
    from http import HTTPStatus

    body = json.dumps({"error": message}).encode("utf-8")
    head = "".join(f"{name}: {value}\r\n" for name, value in SECURITY_HEADERS.items())
    return (f"HTTP/1.0 {status} {HTTPStatus(status).phrase}\r\nContent-Type: application/json; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\n{head}Connection: close\r\n\r\n").encode("ascii") + body
