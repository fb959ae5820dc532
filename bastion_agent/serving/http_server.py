"""The HTTP server of ``serve``: connections, threads and time limits around the request handler.

Each request lives at most ``request_time_limit`` seconds: a watchdog
answers 408 (request not received in time) or 503 (answer not ready in time)
and closes the connection, so a slow or stalled client holds one thread for a
bounded time and never blocks the others. An open keep-alive connection
holds no thread between requests: after each answer it goes back to the
intake, which gives it the same head deadline (the idle timeout) and
per-client cap as a new one.

Under a flood of connections, a connection gets a thread only once its
request line and headers have arrived (``intake``: one thread reads every
waiting head, with a short deadline and a cap per client), and
``RESERVED_SLOTS`` of the ``MAX_CONNECTIONS`` threads are kept for requests
that carry the right token, so idle or half-sent requests from anyone without
it can never take the slots a user needs.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from typing import TextIO

from bastion_agent.serving import intake, serve_openapi, tokens
from bastion_agent.serving.http_handler import Handler
from bastion_agent.serving.search_service import SearchService
from bastion_agent.serving.serve_settings import ServeSettings

STOP_GRACE_SECONDS = 5.0  # how long a stopping server lets the requests in flight finish
MAX_CONNECTIONS = 64  # requests served at once (one thread each); more are answered 503 at once
RESERVED_SLOTS = 16  # of those, kept for requests with the right token (BASTION_SERVE_TOKEN)
_BUSY_ANSWER = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\n"
    b"Content-Length: 52\r\nRetry-After: 1\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
    b"X-Frame-Options: DENY\r\nContent-Security-Policy: default-src 'none'; frame-ancestors 'none'\r\n"
    b"Connection: close\r\n\r\n"
    b'{"error": "too many connections; try again shortly"}'
)


class Watchdog:
    """One thread that ends every connection still open ``limit`` seconds after it was accepted."""

    def __init__(self, limit: float):
        self.limit = limit
        self._cond = threading.Condition()
        self._due: dict[int, tuple[float, "Handler"]] = {}
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="bastion-serve-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()

    def watch(self, handler: "Handler") -> None:
        with self._cond:
            self._due[id(handler)] = (time.monotonic() + self.limit, handler)
            self._cond.notify_all()

    def forget(self, handler: "Handler") -> None:
        with self._cond:
            self._due.pop(id(handler), None)
            self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no connection is open (a graceful stop); False when some still are."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._due:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                now = time.monotonic()
                expired = [handler for due, handler in self._due.values() if due <= now]
                for handler in expired:
                    del self._due[id(handler)]
                if not expired:
                    nearest = min((due for due, _ in self._due.values()), default=None)
                    self._cond.wait(None if nearest is None else nearest - now)
                    continue
            for handler in expired:
                try:
                    handler.expire()
                except Exception:  # the watchdog must outlive any one connection
                    pass


class BastionHTTPServer(ThreadingHTTPServer):
    """A thread per connection (daemon threads), the shared service, the watchdog, the access log."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, service: SearchService, settings: ServeSettings, log_stream: TextIO,
                 book: tokens.TokenBook | None = None):
        from bastion_agent.serving import serve_page

        self.service = service
        self.settings = settings
        self.tokens = book or tokens.TokenBook(settings.tokens_file, settings.token, log=service.log)
        self.log_stream = log_stream
        self.log_lock = threading.Lock()
        self.watchdog = Watchdog(settings.request_time_limit)
        self.page = serve_page.PAGE.encode("utf-8")
        self.page_csp = serve_page.content_security_policy()
        self.address_family = address_family(settings.host)
        self.open_slots = threading.BoundedSemaphore(MAX_CONNECTIONS - RESERVED_SLOTS)
        self.reserved_slots = threading.BoundedSemaphore(RESERVED_SLOTS)
        self.intake = intake.Intake(self._head_ready, self._refuse,
                                    deadline=min(intake.HEAD_SECONDS, settings.request_time_limit))
        self._heads = threading.local()
        super().__init__((settings.host, settings.port), Handler)  # on a bind error it calls server_close
        self.openapi = json.dumps(serve_openapi.document(settings, self.url), indent=2).encode("utf-8")

    def process_request(self, request, client_address) -> None:
        """The accepting thread hands every connection to the intake, which reads its head without a thread."""
        self.intake.add(request, client_address)

    def _head_ready(self, request, client_address, head: bytes) -> None:
        """A whole head arrived (on the intake's thread): a slot and a thread, or 503 at once.

        A request with the right token may take a reserved slot when the
        others are taken; any other request (no token, a wrong one, the
        public routes) only the open ones.
        """
        slot = self.open_slots if self.open_slots.acquire(blocking=False) else None
        if slot is None and self.authenticated_head(head) and self.reserved_slots.acquire(blocking=False):
            slot = self.reserved_slots
        if slot is None:
            self._refuse(request, 503, "too many connections; try again shortly")
            return
        try:
            request.setblocking(True)
            threading.Thread(target=self._serve_connection, args=(request, client_address, head, slot),
                             daemon=True).start()
        except BaseException:
            slot.release()
            self.shutdown_request(request)
            raise

    def authenticated_head(self, head: bytes) -> bool:
        """Whether a request head carries a valid token (always, when the server needs none)."""
        if not self.tokens.enabled:
            return True
        for line in head.split(b"\n")[1:]:
            name, colon, value = line.partition(b":")
            if not line.strip():
                break
            if colon and name.strip().lower() == b"authorization":
                return self.tokens.caller(value.decode("latin-1")) is not None
        return False

    def _serve_connection(self, request, client_address, head: bytes, slot) -> None:
        """One request on its own thread; then the connection closes, or goes back to the intake to wait for the next."""
        kept = None
        try:
            self._heads.head, self._heads.kept = head, None
            self.finish_request(request, client_address)
            kept = self._heads.kept
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self._heads.head, self._heads.kept = b"", None
            slot.release()
            if kept is None:
                self.shutdown_request(request)
            else:
                self.intake.add(request, client_address, kept, returning=True)

    def take_head(self) -> bytes:
        """The head the intake read for the connection this thread serves."""
        head, self._heads.head = getattr(self._heads, "head", b""), b""
        return head

    def keep_connection(self, unread: bytes) -> None:
        """The handler answered in full and the connection may carry another request (``unread``: its start)."""
        self._heads.kept = unread

    def _refuse(self, request, status: int, message: str) -> None:
        """Answer without reading further, in one non-blocking write, then close."""
        try:
            request.setblocking(False)
            request.send(_BUSY_ANSWER if status == 503 and message.startswith("too many connections;")
                         else short_answer(status, message))
        except OSError:
            pass
        self.shutdown_request(request)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/"

    def serve_forever(self, poll_interval: float = 0.1) -> None:
        self.watchdog.start()
        self.intake.start()
        self.service.start()
        super().serve_forever(poll_interval)

    def server_close(self) -> None:
        """Stop listening, let the requests in flight finish (bounded), then stop the helpers."""
        super().server_close()
        self.intake.stop()
        self.watchdog.wait_idle(STOP_GRACE_SECONDS)
        self.watchdog.stop()
        self.service.stop()

    def handle_error(self, request, client_address) -> None:
        """A connection that broke (client gone, time limit): one line, no traceback, no request data."""
        kind = sys.exc_info()[0]
        if kind is not None and issubclass(kind, (ConnectionError, TimeoutError)):
            return
        self.log(f"bastion_agent serve: error while answering a request: {kind.__name__ if kind else 'unknown'}")

    def log(self, line: str) -> None:
        with self.log_lock:
            print(line, file=self.log_stream, flush=True)


def short_answer(status: int, message: str) -> bytes:
    """A whole HTTP/1.0 answer with a JSON error, for a connection no handler serves."""
    from http import HTTPStatus

    body = json.dumps({"error": message}).encode("utf-8")
    return (f"HTTP/1.0 {status} {HTTPStatus(status).phrase}\r\nContent-Type: application/json; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
            "X-Frame-Options: DENY\r\nContent-Security-Policy: default-src 'none'; frame-ancestors 'none'\r\n"
            "Connection: close\r\n\r\n").encode("ascii") + body


def address_family(host: str) -> int:
    return socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
