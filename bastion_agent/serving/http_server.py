"""The HTTP server of ``serve``: uvicorn running the guarded ASGI app on a socket bound before it starts.

The layers, from the wire up: ``http_protocol`` (h11, pinned, with the
framing checks, the head deadline and the caps on waiting connections),
``http_guard`` (slots with the token first, the time limit, one answer, the
access log) and ``http_handler`` (Host, site and token checks, the routes).
The socket is bound here, before uvicorn runs, so a port that cannot be had
is one line at start (``serve.listen_error``) and ``--port 0`` knows its
port at once.

uvicorn's own logging is silenced: it would print request data, and every
line serve writes goes through ``log``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from typing import TextIO

import uvicorn

from bastion_agent.serving import serve_openapi, tokens
from bastion_agent.serving.http_guard import MAX_CONNECTIONS, RESERVED_SLOTS, GuardedApp, short_answer
from bastion_agent.serving.http_handler import Handler
from bastion_agent.serving.http_protocol import HEAD_SECONDS, MAX_HEAD_BYTES, GuardedH11Protocol, Waiting
from bastion_agent.serving.search_service import SearchService
from bastion_agent.serving.serve_settings import ServeSettings, address_family

__all__ = ["MAX_CONNECTIONS", "RESERVED_SLOTS", "BastionHTTPServer", "address_family", "short_answer"]

STOP_GRACE_SECONDS = 5.0  # how long a stopping server lets the requests in flight finish
BACKLOG = 128


class Guard:
    """What every connection's protocol shares: the head deadline, the waiting connections, the log."""

    def __init__(self, head_deadline: float, log):
        self.head_deadline = head_deadline
        self.waiting = Waiting()
        self.log = log

    def refused(self, client: str, status: int) -> None:
        """A request refused on the wire (bad framing, not HTTP): logged like any answer, without its data."""
        self.log(f"{_stamp()} {client} - - {status} 0.0ms")


class BastionHTTPServer:
    """The bound socket, the service, the tokens, the page; ``serve_forever`` runs uvicorn until ``shutdown``."""

    def __init__(self, service: SearchService, settings: ServeSettings, log_stream: TextIO,
                 book: tokens.TokenBook | None = None):
        from bastion_agent.serving import serve_page

        self.service = service
        self.settings = settings
        self.tokens = book or tokens.TokenBook(settings.tokens_file, settings.token, log=service.log)
        self.log_stream = log_stream
        self.log_lock = threading.Lock()
        self.page = serve_page.PAGE.encode("utf-8")
        self.page_csp = serve_page.content_security_policy()
        self.socket = bind(settings.host, settings.port)
        self.server_address = self.socket.getsockname()
        self.openapi = json.dumps(serve_openapi.document(settings, self.url), indent=2).encode("utf-8")
        self.guard = Guard(min(HEAD_SECONDS, settings.request_time_limit), self.log)
        self.app = GuardedApp(Handler(self), settings, self.tokens, self.log)
        protocol = type("ServeProtocol", (GuardedH11Protocol,), {"guard": self.guard})
        logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL + 1)
        config = uvicorn.Config(self.app, http=protocol, ws="none", lifespan="off", loop="asyncio",
                                access_log=False, log_config=None, server_header=False, date_header=False,
                                timeout_keep_alive=int(self.guard.head_deadline) or 1,
                                timeout_graceful_shutdown=int(STOP_GRACE_SECONDS),
                                h11_max_incomplete_event_size=MAX_HEAD_BYTES, backlog=BACKLOG)
        self.uvicorn = uvicorn.Server(config)
        self._stopped = threading.Event()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/"

    def waiting(self) -> int:
        """Connections that have not sent a whole head yet."""
        return len(self.guard.waiting)

    def serve_forever(self, poll_interval: float | None = None) -> None:
        self.service.start()
        try:
            asyncio.run(self.uvicorn.serve(sockets=[self.socket]))
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Ask the server to stop: it stops listening, lets the requests in flight finish (bounded), returns."""
        self.uvicorn.should_exit = True

    def server_close(self) -> None:
        try:
            self.socket.close()
        except OSError:
            pass
        self.service.stop()

    def log(self, line: str) -> None:
        with self.log_lock:
            print(line, file=self.log_stream, flush=True)


def bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(address_family(host), socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _stamp() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
