"""One HTTP connection's request, as ``serve`` keeps it: an answer written once, kept alive or closed, logged.

The request handler (``http_handler``) decides what to answer; this base
class decides how an answer goes out. Exactly one answer is written per
request, by the handler or by the watchdog when the time limit is up,
whichever comes first. HTTP/1.1 connections stay open between requests
(keep-alive), but a connection is closed after an answer whenever reading on
could misread the stream: an error the base class raised, a body not read
whole, ``Transfer-Encoding``, a time limit reached, ``Connection: close`` or
HTTP/1.0 without ``keep-alive``.

The access log (stderr) names the method, the route, the status and the
milliseconds, never the query string or an unknown path, which can hold what
someone searched for.
"""

from __future__ import annotations

import io
import json
import socket
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bastion_agent.serving import tokens

# Methods the access log names; any other is logged as <other>, since a made-up method could hold anything.
KNOWN_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT")
DRAIN_LIMIT_BYTES = 1024 * 1024  # read at most this much of a refused body, so the client sees the answer
DRAIN_SECONDS = 1.0


class _HeadFirst(io.RawIOBase):
    """The connection as a raw stream: the head the intake already read, then the socket."""

    def __init__(self, head: bytes, sock: socket.socket):
        self.head = memoryview(head)
        self.sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int | None:
        if self.head:
            n = min(len(buffer), len(self.head))
            buffer[:n] = self.head[:n]
            self.head = self.head[n:]
            return n
        try:
            return self.sock.recv_into(buffer)
        except BlockingIOError:  # a non-blocking look for what was pipelined (ConnectionHandler.unread): nothing yet
            return None


class ConnectionHandler(BaseHTTPRequestHandler):
    """One request of a connection (the intake hands a kept-alive connection's next one to a new handler)."""

    server: ThreadingHTTPServer  # a BastionHTTPServer (http_server.py), which makes a handler per request
    server_version = "bastion-agent"
    sys_version = ""
    protocol_version = "HTTP/1.1"  # keep-alive for clients that want it (parse_request reads Connection)
    default_request_version = "HTTP/1.0"  # so that even an error answer has a status line and headers

    def handle(self) -> None:
        """Exactly one request: between requests the connection waits in the intake, not on this thread."""
        self.handle_one_request()

    def parse_request(self) -> bool:
        """HTTP/1.0 and later only: a request line without a version (HTTP/0.9) gets a 400."""
        words = self.raw_requestline.split()
        if len(words) == 2:
            self.request_version = "HTTP/1.0"
            self.protocol_version = "HTTP/1.0"  # the status line of an answer to a client older than HTTP/1.1
            self.command = None
            self.send_error(400, "HTTP/0.9 requests are not served; send HTTP/1.0 or later")
            return False
        return super().parse_request()

    def version_string(self) -> str:
        return self.server_version  # no Python version in the Server header

    def setup(self) -> None:
        self.timeout = self.server.settings.request_time_limit + 1  # the watchdog acts first
        super().setup()
        head = self.server.take_head()
        if head:  # what the intake read comes first (the socket's own file closed, or it would keep it open)
            self.rfile.close()
            self.rfile = io.BufferedReader(_HeadFirst(head, self.connection))
        try:  # the header and the body are two writes: send each at once
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        # What the base class sets only once a request line parses; the watchdog may answer before.
        self.command, self.request_version, self.requestline = None, "HTTP/1.0", ""
        self.close_connection = True
        self.started = time.monotonic()
        self.send_lock = threading.Lock()
        self.responded = False
        self.sent_whole = False  # the whole answer was written by the handler (not cut short by the watchdog)
        self.expired = False
        self.handed_on = False  # kept alive: the connection went back to the intake for its next request
        self.request_read = False
        self.body_read = False
        self.status: int | None = None
        self.route: str | None = None
        self.caller: tokens.Caller | None = None
        self.server.watchdog.watch(self)

    def finish(self) -> None:
        try:
            if self.sent_whole and not self.close_connection and self._hand_on():
                unread = self.unread()
                if unread is not None:
                    self.server.keep_connection(unread)
            super().finish()
        finally:
            if self.status is not None:
                self._access_log()
            self.server.watchdog.forget(self)

    def _hand_on(self) -> bool:
        """Claim the connection for its next request, unless the watchdog has expired this one (then it closes)."""
        with self.send_lock:
            self.handed_on = not self.expired
            return self.handed_on

    def keeps_alive(self) -> bool:
        """Whether this connection may carry another request after this answer.

        Only when the client asked for it (HTTP/1.1, or ``Connection:
        keep-alive``) and the request was read exactly to its end: a body
        refused or half read, or one sent with ``Transfer-Encoding``, would
        leave bytes that the next request's parser would take for a request.
        """
        if self.close_connection or self.expired or self.command is None or self.headers.get("Transfer-Encoding"):
            return False
        if self.command in ("POST", "PUT", "PATCH"):
            return self.body_read
        return (self.headers.get("Content-Length") or "0").strip() == "0"

    def unread(self) -> bytes | None:
        """What the client already sent of its next request (pipelined), read without waiting; None when broken."""
        try:
            self.connection.setblocking(False)
            return bytes(self.rfile.peek())
        except (OSError, ValueError):
            return None

    def drain_unread_body(self) -> None:
        """Read (a bounded part of) a body we refused, so the client can read our answer."""
        if self.command not in ("POST", "PUT", "PATCH") or self.body_read:
            return
        try:
            remaining = min(int(self.headers.get("Content-Length") or 0), DRAIN_LIMIT_BYTES)
        except ValueError:
            return
        try:
            self.connection.settimeout(DRAIN_SECONDS)
            while remaining > 0:
                chunk = self.rfile.read1(min(remaining, 65536))
                if not chunk:
                    break
                remaining -= len(chunk)
        except OSError:
            pass

    def send_json(self, status: int, value, headers: dict | None = None) -> None:
        data = json.dumps(value, ensure_ascii=False).encode("utf-8")
        self.send_bytes(status, data, "application/json; charset=utf-8", headers)

    def send_bytes(self, status: int, data: bytes, content_type: str, headers: dict | None = None) -> None:
        """Send one answer; whichever of the handler and the watchdog comes first wins."""
        with self.send_lock:
            self._write_once(status, data, content_type, headers)

    def _write_once(self, status: int, data: bytes, content_type: str, headers: dict | None) -> None:
        if self.responded:
            return
        self.responded = True
        keep = self.keeps_alive()
        self.close_connection = not keep
        self.send_response(status)
        merged = {
            "Content-Type": content_type,
            "Content-Length": str(len(data)),
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
            "X-Frame-Options": "DENY",
            "Cross-Origin-Resource-Policy": "same-origin",
            "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
            "Connection": "keep-alive" if keep else "close",
            **(headers or {}),
        }
        for name, value in merged.items():
            self.send_header(name, value)
        self._headers_buffer.append(b"\r\n")
        if self.command != "HEAD":
            self._headers_buffer.append(data)
        self.flush_headers()  # head and body in one write: no second segment for the client to wait for
        self.sent_whole = True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The base class's errors (bad request line, headers too long...) as JSON too."""
        self.close_connection = True
        self.send_json(code, {"error": message or self.responses.get(code, ("error",))[0]})

    def expire(self) -> None:
        """Called by the watchdog when the time limit is up: answer if nothing was sent yet, then close.

        It never waits: when the handler is busy writing its own answer, the
        connection is simply shut down. A connection already handed on to its
        next request (keep-alive) is that request's now, and is left alone.
        """
        if self.send_lock.acquire(blocking=False):
            try:
                if self.handed_on:
                    return
                self.expired = True  # this connection carries no further request
                limit = self.server.settings.request_time_limit
                if self.request_read:
                    status, message = 503, f"the answer took longer than {limit:g} s; try again"
                else:
                    status, message = 408, f"the request was not received within {limit:g} s"
                data = json.dumps({"error": message}).encode("utf-8")
                self._write_once(status, data, "application/json; charset=utf-8", None)
            except OSError:
                pass
            finally:
                self.send_lock.release()
        else:
            self.expired = True
            if self.handed_on:
                return
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # -- the access log

    def log_request(self, code="-", size="-") -> None:
        self.status = int(code) if isinstance(code, int) or str(code).isdigit() else None

    def log_message(self, format: str, *args) -> None:
        """Silenced: the base class would log the request line, query string included."""

    def _access_log(self) -> None:
        method = self.command if self.command in KNOWN_METHODS else ("-" if not self.command else "<other>")
        path = self.route or ("-" if not self.command else "<other>")
        client = self.client_address[0] if self.client_address else "-"
        millis = (time.monotonic() - self.started) * 1000
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.server.log(f"{stamp} {client} {method} {path} {self.status} {millis:.1f}ms")
