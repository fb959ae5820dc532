"""The network below the client: one JSON exchange, bounded in bytes and time, through no proxy.

This is the cut between the API and the network (the client and
``server_info`` hand a URL and a body in, and get parsed JSON or an
exception out). Below it: no HTTP proxy from the environment (the text is
the bastion's, and goes to the server named or nowhere), no redirect
followed, every answer read in pieces up to a limit, every exchange on a
thread joined with a deadline whose sockets are shut when it gives up.

::

    HTTPFailure     a non-2xx answer (status, the server's message, Retry-After)
    BadAnswer       a 2xx answer that is not JSON, or too large
    TimeoutError    no whole answer within the deadline
    OSError         the connection failed, was reset or cut
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from email.utils import parsedate_to_datetime
from typing import Callable

# The largest answer read: 256 vectors of 8,192 dimensions as JSON floats are
# ~50 MB, so a legitimate answer is far below; an endless one stops here.
MAX_ANSWER_BYTES = 256 << 20
# An answer is also bounded by what it answers (answer_limit): parsed, JSON
# numbers take up to 8 times their bytes ("1e0," is a 32-byte float), so 256 MiB
# of answer to one query would be 2 GiB of memory.
ANSWER_BASE_BYTES = 1 << 20
ANSWER_DIM_BYTES = 32  # one value of a vector as JSON, generously
ANSWER_DIMS = 8192  # the widest vector a model serves, unless the manifest pins more
MAX_ERROR_BYTES = 64 << 10  # of an error answer: enough for any server's message
MAX_LISTING_BYTES = 1 << 20


class HTTPFailure(Exception):
    """A non-2xx answer, with the server's own error message and ``Retry-After`` when it gave them."""

    def __init__(self, status: int, message: str, retry_after: float | None = None):
        super().__init__(f"HTTP {status}: {message}" if message else f"HTTP {status}")
        self.status = status
        self.message = message
        self.retry_after = retry_after


class BadAnswer(Exception):
    """A 2xx answer that is not JSON (cut short, or not an API server) or too large to read: worth another try."""


class _RedirectsRefused(urllib.request.HTTPRedirectHandler):
    """A redirect is the server's answer (an ``HTTPFailure``), never followed.

    urllib follows a 301/302/303 to any host, as a GET: the vectors would then
    come from a server ``EMBED_URL`` never named, and the agent would fetch
    whatever address the model server chose.
    """

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


# The sockets the exchange running on this thread has opened, so that ``within`` can cut them when it
# gives up: a server that trickles its headers a byte at a time would otherwise keep the abandoned
# thread (and its connection) for as long as it liked.
_exchange_sockets = threading.local()


class _Tracked:
    def connect(self):
        super().connect()
        sockets = getattr(_exchange_sockets, "list", None)
        if sockets is not None:
            sockets.append(self.sock)


class _TrackedHTTPConnection(_Tracked, http.client.HTTPConnection):
    pass


class _TrackedHTTPSConnection(_Tracked, http.client.HTTPSConnection):
    pass


class _TrackedHTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req):
        return self.do_open(_TrackedHTTPConnection, req)


class _TrackedHTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req):
        return self.do_open(_TrackedHTTPSConnection, req, context=self._context)


NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _RedirectsRefused(),
                                               _TrackedHTTPHandler(), _TrackedHTTPSHandler())


def read_bounded(response, limit: int, deadline: float | None = None) -> bytes:
    """The answer's body, refused past ``limit`` bytes (``BadAnswer``) or, when given, the ``deadline``
    (``TimeoutError``, what a socket timeout raises too: the caller cannot tell, nor need to, which came first).

    A server is trusted with the agent's memory no more than with its data:
    an answer that declares or sends more than a legitimate one could hold
    is dropped as it arrives, never read whole first.
    """
    declared = response.headers.get("Content-Length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BadAnswer(f"an answer of {int(declared)} bytes (over {limit})")
    chunks, size = [], 0
    while True:
        chunk = response.read1(65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise BadAnswer(f"an answer over {limit} bytes")
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError("the answer is too slow")
        chunks.append(chunk)


def answer_limit(inputs: int, dim: int | None = None) -> int:
    """The most bytes an answer with ``inputs`` vectors may take: a few hundred KB each, MAX_ANSWER_BYTES at most.

    Bounding by the request, not only by MAX_ANSWER_BYTES, keeps the parsed
    answer to what the request could need; the widest vector served
    (not only the pinned ``dim``) still fits, so a server whose model changed
    is told apart by its dimension (``wrong_dim``), not by its size.
    """
    per_vector = ANSWER_DIM_BYTES * max(ANSWER_DIMS, dim or 0)
    return min(MAX_ANSWER_BYTES, ANSWER_BASE_BYTES + max(1, inputs) * per_vector)


def post_json(url: str, body: dict, timeout: float, opener=NO_PROXY_OPENER,
              limit: int = MAX_ANSWER_BYTES) -> object:
    """POST ``body`` as JSON; return the parsed answer, whole within ``timeout`` seconds.

    Raises ``HTTPFailure`` for a non-2xx answer, ``BadAnswer`` for a 2xx
    answer that is not JSON or is over ``limit`` bytes, ``TimeoutError``
    when the whole answer has not arrived within ``timeout``, and ``OSError``
    for a connection that failed, was reset or timed out
    (``urllib.error.URLError`` is one; a cut ``http.client`` exchange is
    turned into ``ConnectionError``).

    The exchange runs on a daemon thread joined with ``timeout``: a socket
    timeout bounds each read only, so a server that sends a byte every few
    seconds would otherwise hold the request (and, in ``serve``, a model
    slot) for as long as it kept sending.
    """
    data = json.dumps(body).encode("utf-8")
    return within(timeout, _exchange, url, data, timeout, opener, limit)


def within(seconds: float, function: Callable, *args):
    """``function(*args)`` on a daemon thread: its value or its exception, or ``TimeoutError`` after ``seconds``.

    A socket timeout bounds each read only; this bounds the whole exchange.
    When it gives up, the connections the exchange opened (through
    ``NO_PROXY_OPENER``) are shut down, so the abandoned thread ends at once.
    """
    outcome: dict = {}
    sockets: list = []

    def run() -> None:
        _exchange_sockets.list = sockets
        try:
            outcome["value"] = function(*args)
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=run, name="bounded-request", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        for sock in list(sockets):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        raise TimeoutError(f"no whole answer within {seconds:g}s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _exchange(url: str, data: bytes, timeout: float, opener, limit: int) -> object:
    deadline = time.monotonic() + timeout  # so an abandoned exchange ends soon after, too
    request = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    try:
        with opener.open(request, timeout=timeout) as response:
            payload = read_bounded(response, limit, deadline)
    except urllib.error.HTTPError as exc:
        try:  # only what a message needs: an error body can be endless too
            text = exc.read(MAX_ERROR_BYTES)
        except (OSError, http.client.HTTPException):
            text = b""
        finally:
            exc.close()
        raise HTTPFailure(exc.code, _error_message(text, exc.headers.get("Content-Type")),
                          parse_retry_after(exc.headers.get("Retry-After"))) from None
    except http.client.HTTPException as exc:  # IncompleteRead, BadStatusLine: the exchange was cut
        raise ConnectionResetError(f"{type(exc).__name__}: {exc}") from None
    try:
        return json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):  # nested past the parser's depth, too
        kind = _content_type(response.headers.get("Content-Type"))
        raise BadAnswer(f"the answer is not JSON ({kind})" if kind else "the answer is not JSON") from None


def _content_type(value: str | None) -> str:
    """The media type of a ``Content-Type`` header, as a message may show it (``text/html``), or ""."""
    media = (value or "").split(";", 1)[0].strip().lower()
    return media if re.fullmatch(r"[a-z0-9][a-z0-9.+\-]{0,40}/[a-z0-9][a-z0-9.+\-]{0,60}", media) else ""


def parse_retry_after(value: str | None, now: Callable[[], float] = time.time) -> float | None:
    """``Retry-After`` in seconds (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - now()
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _error_message(body: bytes, content_type: str | None = None) -> str:
    """The message of Ollama's ``{"error": "..."}``, llama.cpp's ``{"error": {"message"}}`` or TEI's ``{"error"|"message"}``.

    An answer that is not JSON is shown by its content type, never its body:
    an ordinary web server's HTML page printed 17 lines as the "one line"
    once. A short plain-text body (a proxy's "404 page not found")
    is kept, on one line.
    """
    try:
        value = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        kind = _content_type(content_type)
        text = " ".join(body[:200].decode("utf-8", "replace").split())
        if kind in ("", "text/plain") and text and "<" not in text:
            return text[:120]
        return f"a {kind or 'non-JSON'} answer, not an embedding API's"
    error = value.get("error") if isinstance(value, dict) else None
    if isinstance(error, dict):
        error = error.get("message")
    if isinstance(error, str):
        return error[:300]
    if isinstance(value, dict) and isinstance(value.get("message"), str):
        return value["message"][:300]
    return ""


def get_json(url: str, timeout: float) -> object:
    deadline = time.monotonic() + timeout
    request = urllib.request.Request(url, method="GET", headers={"Accept": "application/json"})
    with NO_PROXY_OPENER.open(request, timeout=timeout) as response:
        return json.loads(read_bounded(response, MAX_LISTING_BYTES, deadline))
