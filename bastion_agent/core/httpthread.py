"""An HTTP server on a background thread: what the model servers share.

The stub (tests), the fault stub (tests, benches) and the embedded model
server all serve from a daemon thread with a deep listen queue, start and
stop the same way, and name themselves by URL.
"""

from __future__ import annotations

import socket
import threading
from http.server import ThreadingHTTPServer

POLL_SECONDS = 0.05  # how soon ``stop`` is noticed


class LoopbackServer(ThreadingHTTPServer):
    """A threading server with a listen queue deep enough for a burst of clients."""

    daemon_threads = True
    request_queue_size = 128


class LoopbackServer6(LoopbackServer):
    address_family = socket.AF_INET6


def make_server(host: str, port: int, handler) -> LoopbackServer:
    """A server on ``host`` (IPv4 or IPv6 literal, or a name) and ``port`` (0: any free one)."""
    server_class = LoopbackServer6 if ":" in host else LoopbackServer
    return server_class((host, port), handler)


class ServesInBackground:
    """Mixin: ``self.httpd`` served on a daemon thread; ``start``/``stop``, ``with``, ``url``."""

    httpd: ThreadingHTTPServer
    thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self):
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": POLL_SECONDS},
                                       daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        if self.thread is not None:
            self.thread.join()
        self.httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
