"""The model server client: the ``EMBED_*`` environment, requests and their failures, the probe.

The endpoint is a property of the machine, never of the manifest: the
environment names it (``EMBED_URL``), and the manifest only pins the model
name and dimension. What each API sends and answers is its wire format
(``wire_formats.py``: Ollama's ``/api/embed``, the OpenAI-style
``/v1/embeddings``); this module asks the format in use and never branches
on its name.

Every failure of a request is classified (``RequestFailure.kind``) so the
embed stage can tell what to do: wait and retry, split the batch, retry one
input truncated, record one chunk as failed, or stop. Requests never go
through an HTTP proxy from the environment: the text sent is the bastion's,
and it goes to the server named, or nowhere.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import http.client
import json
import math
import os
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from array import array
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Callable, Mapping, Sequence

from bastion_agent.core.errors import ConfigError, ModelServerError
from bastion_agent.core.loopback import is_loopback
from bastion_agent.embedding.wire_formats import WIRE_FORMATS, WireFormat, listed_names, listing_routes, wire_format

DEFAULT_URL = "http://127.0.0.1:11434"
DEFAULT_BATCH = 32
DEFAULT_TIMEOUT = 300.0
DEFAULT_CONCURRENCY = 1
DEFAULT_RETRY_DEADLINE = 600.0
MAX_CONCURRENCY = 64
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
PROBE_TEXT = "bastion agent probe: is this the pinned model?"
# Routes a user may paste into EMBED_URL from a server's docs; the agent adds them itself.
# Longest first, so the message names the whole route pasted (/api/embed before a format's /embed).
ROUTE_SUFFIXES = tuple(sorted({fmt.embed_path for fmt in WIRE_FORMATS.values()} | {"/api/embeddings"},
                              key=lambda route: (-len(route), route)))
MAX_LISTING_BYTES = 1 << 20
START_HINT = ("start one (the embedded model: python3 -m bastion_agent model-server; or ollama serve) "
              "or point EMBED_URL at yours")

# Request failure kinds (RequestFailure.kind).
TRANSIENT = "transient"  # connection refused/reset, timeout, 429/502/503/504, a cut answer: wait and retry
BATCH_TOO_LARGE = "batch_too_large"  # the server's batch or body limit: split, remember the smaller size
INPUT_TOO_LONG = "input_too_long"  # one input over the context or physical batch: isolate, truncate or fail
REJECTED = "rejected"  # another refusal of this content (400, 500, 424, a bad vector): isolate, then fail
FATAL = "fatal"  # the server cannot serve this run at all (auth, model gone, dimension changed): stop
WRONG_API = "wrong_api"  # this path does not speak this wire format (another may)
CONNECTION_LOST = "connection_lost"  # reason of a TRANSIENT failure: the server dropped a request it had taken

RETRY_STATUSES = frozenset({408, 429, 502, 503, 504})
FATAL_STATUSES = frozenset({401, 403, 404, 405, 501})
_BATCH_LIMIT_RE = re.compile(r"batch size (\d+) > maximum allowed batch size (\d+)", re.I)
_TOO_LONG_RE = re.compile(
    r"context length|context size|exceeds? the (?:maximum )?context|too large to process|"
    r"must have less than \d+ tokens|input is too large|too many tokens|input \(\d+ tokens\)",
    re.I,
)
_BATCH_WORDS_RE = re.compile(r"batch|payload|body|length limit|request entity|too large", re.I)


@dataclass(frozen=True)
class EndpointConfig:
    """``EMBED_URL``, ``EMBED_API``, ``EMBED_BATCH``, ``EMBED_TIMEOUT``,
    ``EMBED_CONCURRENCY``, ``EMBED_RETRY_DEADLINE`` and ``EMBED_BATCH_FIXED``, validated."""

    url: str = DEFAULT_URL
    api: str | None = None
    batch: int = DEFAULT_BATCH
    timeout: float = DEFAULT_TIMEOUT
    concurrency: int = DEFAULT_CONCURRENCY
    retry_deadline: float = DEFAULT_RETRY_DEADLINE
    batch_fixed: bool = False  # EMBED_BATCH_FIXED=1: no tuning (batch_tuner.py), EMBED_BATCH and EMBED_CONCURRENCY as given
    batch_set: bool = False  # EMBED_BATCH was given: the tuner's ceiling (a server that refuses larger batches)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "EndpointConfig":
        env = os.environ if environ is None else environ
        concurrency = _positive(env, "EMBED_CONCURRENCY", DEFAULT_CONCURRENCY, int)
        if concurrency > MAX_CONCURRENCY:
            raise ConfigError(f"EMBED_CONCURRENCY must be at most {MAX_CONCURRENCY}; got {concurrency}")
        return cls(
            url=_base_url(env.get("EMBED_URL") or DEFAULT_URL),
            api=_api(env.get("EMBED_API") or None),
            batch=_positive(env, "EMBED_BATCH", DEFAULT_BATCH, int),
            timeout=_positive(env, "EMBED_TIMEOUT", DEFAULT_TIMEOUT, float),
            concurrency=concurrency,
            retry_deadline=_positive(env, "EMBED_RETRY_DEADLINE", DEFAULT_RETRY_DEADLINE, float),
            batch_fixed=_switch(env, "EMBED_BATCH_FIXED"),
            batch_set=bool(env.get("EMBED_BATCH")),
        )

    @property
    def display_url(self) -> str:
        """``scheme://host:port`` of the URL, for messages and summaries.

        Never the credentials, the path or the query: a reverse proxy's path
        (``/v1/<api key>/``) can be a secret as much as ``user:password@``.
        """
        return shown_url(self.url)

    @property
    def cleartext_warning(self) -> str | None:
        """A warning when the windows would cross a network unencrypted: plain http to another machine.

        Sanitized windows may leave the bastion, but a careful user still
        wants to know that anyone on the path can read them (and the user's
        queries); on loopback, or over https, there is nothing to say.
        """
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme != "http" or is_loopback(parts.hostname or ""):
            return None
        return (f"warning: EMBED_URL {self.display_url} is plain http to another machine: the sanitized windows"
                " and queries cross the network unencrypted (use https, or an ssh tunnel to a loopback port)")


def shown_url(value: str) -> str:
    """What a message may say of a URL: ``scheme://host:port`` at most (never userinfo, path or query)."""
    try:
        parts = urllib.parse.urlsplit(value.strip())
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return ""
    if not parts.scheme or not re.fullmatch(r"[A-Za-z0-9.\-:\[\]]{1,255}", host or "-"):
        return ""
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{port}" if port else "")


def _base_url(value: str) -> str:
    parts = urllib.parse.urlsplit(value.strip())
    shown = shown_url(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        got = f"; got {shown}" if shown and "://" in value else ""
        raise ConfigError(f"EMBED_URL must be an http:// or https:// URL such as {DEFAULT_URL}{got}")
    try:
        parts.port
    except ValueError:
        raise ConfigError(f"EMBED_URL has an invalid port (host {parts.hostname})") from None
    if any(char.isspace() or not char.isprintable() for char in value.strip()):
        raise ConfigError(f"EMBED_URL {shown} must not contain spaces or control characters")
    path = parts.path.rstrip("/")
    for route in ROUTE_SUFFIXES:  # the route itself: the agent adds it, and asked for /api/embed/api/embed
        if path.lower().endswith(route):
            base = shown + path[: -len(route)]
            raise ConfigError(f"EMBED_URL ends in {route}, the route the agent adds itself: drop {route} "
                              f"(EMBED_URL={base})")
    if path.endswith("/v1"):  # an OpenAI "base URL": the paths below add /v1 themselves
        path = path[: -len("/v1")]
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _api(value: str | None) -> str | None:
    """``EMBED_API``'s wire format name, checked (``wire_format`` lists the names, never echoes the value)."""
    return None if value is None else wire_format(value).name


def _switch(env: Mapping[str, str], name: str) -> bool:
    """A yes/no setting: 1/true/yes/on or 0/false/no/off (unset or empty: no)."""
    text = (env.get(name) or "").strip().lower()
    if text in ("", "0", "false", "no", "off"):
        return False
    if text in ("1", "true", "yes", "on"):
        return True
    raise ConfigError(f"{name} must be 1 or 0")


def _positive(env: Mapping[str, str], name: str, default, kind):
    text = env.get(name)
    if text is None or text == "":
        return default
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not value > 0 or (kind is float and not math.isfinite(value)):
        noun = "a whole number" if kind is int else "a number of seconds"
        got = f"; got {text!r}" if re.fullmatch(r"[-+0-9.eE]{1,24}", text.strip()) else ""  # echo numbers only
        raise ConfigError(f"{name} must be {noun} > 0{got}")
    return value


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


_NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _RedirectsRefused(),
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


def post_json(url: str, body: dict, timeout: float, opener=_NO_PROXY_OPENER,
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
    ``_NO_PROXY_OPENER``) are shut down, so the abandoned thread ends at once.
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
    (issue 27). A short plain-text body (a proxy's "404 page not found")
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


class RequestFailure(Exception):
    """One request that did not give usable vectors, and what kind of failure it was.

    ``reason`` is the short label failed chunks are counted under in the
    summary (``http_500``, ``too_long``, ``non_finite``...); ``limit`` is the
    server's batch limit when its message names one; ``retry_after`` is the
    server's ``Retry-After`` in seconds.
    """

    def __init__(self, kind: str, reason: str, detail: str, status: int | None = None,
                 retry_after: float | None = None, limit: int | None = None):
        super().__init__(detail)
        self.kind = kind
        self.reason = reason
        self.detail = detail
        self.status = status
        self.retry_after = retry_after
        self.limit = limit


def classify_http(exc: HTTPFailure, model: str) -> RequestFailure:
    """What an HTTP error answer means for the stage (see the module docstring)."""
    status, message = exc.status, exc.message
    reason = f"http_{status}"
    detail = str(exc)
    if status in RETRY_STATUSES:
        return RequestFailure(TRANSIENT, reason, detail, status, exc.retry_after)
    if status in (404, 405, 501) and not _names_the_model(message, model):
        return RequestFailure(WRONG_API, reason, detail, status)
    if status in FATAL_STATUSES:
        return RequestFailure(FATAL, reason, detail, status)
    limit = _BATCH_LIMIT_RE.search(message)
    if limit:
        return RequestFailure(BATCH_TOO_LARGE, reason, detail, status, limit=int(limit.group(2)))
    if _TOO_LONG_RE.search(message):
        return RequestFailure(INPUT_TOO_LONG, "too_long", detail, status)
    if status == 413 or (status == 422 and _BATCH_WORDS_RE.search(message)) or "too large" in message.lower():
        return RequestFailure(BATCH_TOO_LARGE, reason, detail, status)
    return RequestFailure(REJECTED, reason, detail, status)


def _names_the_model(message: str, model: str) -> bool:
    """Ollama answers 404 "model ... not found" on the right path: that is final."""
    lowered = message.lower()
    return "model" in lowered and ("not found" in lowered or model.lower() in lowered)


def _connection_kind(exc: BaseException) -> str:
    """``connection_lost`` when the server took the request and then dropped it (reset, closed, cut short:
    what a crashing server does), else ``connection`` (refused, unreachable: a server that is not there)."""
    reason = getattr(exc, "reason", None)
    cause = reason if isinstance(reason, BaseException) else exc
    lost = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
    return CONNECTION_LOST if isinstance(cause, lost) else "connection"


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or exc
    return str(reason) or type(reason).__name__


class EmbedClient:
    """Embeds texts with ``model`` at the endpoint of ``config``.

    ``probe(dim)`` must be called first: it settles the wire format (the
    configured one, or the one that answers), the vector encoding, and
    refuses a server whose vectors do not have the pinned dimension. The
    probe fails fast (no retries): a server that is not there, or not the
    pinned model, stops the stage before anything is opened.
    """

    def __init__(self, config: EndpointConfig, model: str, post: Callable = post_json):
        self.config = config
        self.model = model
        self.wire_format: WireFormat | None = wire_format(config.api) if config.api else None
        self.dim: int | None = None
        self.encoding = "float"
        self.probe_tokens: int | None = None  # the server's token count of the probe text, when it gave one
        self._post = post

    @property
    def api(self) -> str | None:
        """The name of the wire format in use (the summary's ``api``), once known."""
        return self.wire_format.name if self.wire_format else None

    @property
    def can_truncate(self) -> bool:
        """Whether one too-long input can be resent asking the server to truncate it (see ``WireFormat``)."""
        return self.wire_format is not None and self.wire_format.can_truncate

    def probe(self, dim: int) -> str:
        """Embed the probe text; return the name of the wire format in use. Raises ``ModelServerError``."""
        candidates = [self.wire_format] if self.wire_format else list(WIRE_FORMATS.values())
        failures = []
        for fmt in candidates:
            try:
                vectors, encoding = self._probe_with(fmt)
            except RequestFailure as exc:
                if exc.kind == WRONG_API:
                    failures.append(f"{fmt.embed_path}: {exc.detail}")
                    continue
                raise ModelServerError(self._failure_message(fmt, exc)) from None
            served = len(vectors[0])
            if served != dim:
                raise ModelServerError(
                    f"model {self.model!r} at {self.config.display_url} ({fmt.name}) serves {served}-dimensional "
                    f"vectors but the manifest pins dim = {dim}; nothing was stored"
                )
            self.wire_format, self.dim, self.encoding = fmt, dim, encoding
            return fmt.name
        raise ModelServerError(
            f"{self.config.display_url} did not answer as an embedding server ({'; '.join(failures)}); "
            "check EMBED_URL and EMBED_API"
        )

    def measure(self, fmt: WireFormat | str) -> int:
        """The dimension of the probe text's vector in wire format ``fmt`` (``init`` learns it; no pinned dim yet).

        Raises ``RequestFailure`` when this wire format does not answer with a vector.
        """
        vectors, _ = self._probe_with(wire_format(fmt))
        return len(vectors[0]) if vectors else 0

    def _probe_with(self, fmt: WireFormat) -> tuple[list, str]:
        """The probe text's vector (as floats) and the encoding that gave it: each of the format's
        ``probe_encodings`` in turn, the next one when the server refuses this one (400, 422)."""
        encodings = fmt.probe_encodings
        for number, encoding in enumerate(encodings):
            try:
                answer = self._request(fmt, [PROBE_TEXT], encoding, False)
            except RequestFailure as exc:
                if exc.status in (400, 422) and number + 1 < len(encodings):
                    continue  # this encoding refused: the next
                raise
            self.probe_tokens = fmt.prompt_tokens(answer)
            vectors = fmt.vectors(answer)
            if vectors is None:
                raise RequestFailure(WRONG_API, "bad_response", "the answer does not have the shape of this API")
            sent = "base64" if vectors and isinstance(vectors[0], str) else "float"
            packed = pack_all(vectors, 1, self.config.display_url)
            return [unpack_floats(blob) for blob in packed], sent
        raise AssertionError("a wire format has at least one probe encoding")

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One request for ``texts``; vectors in input order, checked. Raises ``ModelServerError``.

        For a query (``search``, ``serve``): no retries, any failure is final.
        """
        self._require_probe()
        try:
            blobs = self.embed_packed(texts)
        except RequestFailure as exc:
            raise ModelServerError(self._failure_message(self.wire_format, exc)) from None
        return [list(unpack_floats(blob)) for blob in blobs]

    def embed_packed(self, texts: Sequence[str], truncate: bool = False) -> list[bytes]:
        """One request; each vector as checked little-endian float32 bytes. Raises ``RequestFailure``.

        The answer is checked whole before anything is returned: one vector
        per input, the pinned dimension, finite values, a non-zero norm
        (llama.cpp answers all-zero vectors when it cannot read an embedding).
        """
        self._require_probe()
        answer = self._request(self.wire_format, list(texts), self.encoding, truncate)
        vectors = self.wire_format.vectors(answer)
        if vectors is None:
            raise RequestFailure(REJECTED, "bad_response", "the answer does not have the shape of this API")
        blobs = pack_all(vectors, len(texts), self.config.display_url)
        for blob in blobs:
            if len(blob) != 4 * self.dim:
                raise RequestFailure(
                    FATAL, "wrong_dim",
                    f"{self.config.display_url} returned a {len(blob) // 4}-dimensional vector, expected {self.dim} "
                    "(was the model on the server changed?)",
                )
        return blobs

    def _require_probe(self) -> None:
        if self.wire_format is None or self.dim is None:
            raise RuntimeError("probe() must succeed before embed()")

    def _request(self, fmt: WireFormat, texts: list[str], encoding: str, truncate: bool) -> object:
        """POST one batch; the parsed answer, or a classified ``RequestFailure``."""
        url = self.config.url + fmt.embed_path
        body = fmt.request_body(self.model, texts, encoding, truncate)
        try:
            return self._post(url, body, self.config.timeout, limit=answer_limit(len(texts), self.dim))
        except HTTPFailure as exc:
            raise classify_http(exc, self.model) from None
        except BadAnswer as exc:
            raise RequestFailure(TRANSIENT, "bad_response", str(exc)) from None
        except (OSError, TimeoutError) as exc:
            if _plain_http_answered(exc):
                plain = "http" + self.config.display_url[len("https"):]
                raise RequestFailure(FATAL, "tls_to_plain_http",
                                     f"EMBED_URL says https:// but the server there answers plain HTTP, without TLS: "
                                     f"use EMBED_URL={plain} (or put TLS in front of it)") from None
            kind = "timeout" if isinstance(exc, TimeoutError) or "timed out" in _reason(exc) else _connection_kind(exc)
            raise RequestFailure(TRANSIENT, kind, f"cannot reach the model server: {_reason(exc)}") from None

    def _failure_message(self, fmt: WireFormat | None, exc: RequestFailure) -> str:
        where = self.config.display_url
        route = fmt.embed_path if fmt else ""
        if exc.reason == "tls_to_plain_http":
            return f"{where}: {exc.detail}"
        if exc.status == 404 and _names_the_model(exc.detail, self.model):
            return self._not_served(route)
        if exc.reason in ("connection", CONNECTION_LOST, "timeout"):
            return (f"cannot reach the model server at {where} (EMBED_URL): {exc.detail.split(': ', 1)[-1]}; "
                    f"{START_HINT}")
        if exc.status is not None:
            return f"{where}{route} refused the request: {exc.detail}"
        return f"{where}{route}: {exc.detail}"

    def _not_served(self, route: str) -> str:
        """Model not found: the names the server has (Ollama said "try pulling it first": nothing to pull)."""
        where = self.config.display_url
        names = served_names(self.config.url, min(self.config.timeout, 10.0))
        if names:
            shown = ", ".join(repr(name) for name in names[:12]) + (" ..." if len(names) > 12 else "")
            has = f"it serves {shown}: set [embed] model to one of them (init --update MANIFEST does it)"
        else:
            has = "it does not list the models it has"
        return f"{where}{route} has no model {self.model!r}; {has}, or serve that model"


def _plain_http_answered(exc: BaseException) -> bool:
    """Whether a TLS handshake failed because the server answered in plain HTTP (OpenSSL's WRONG_VERSION_NUMBER)."""
    import ssl

    reason = getattr(exc, "reason", None)
    cause = reason if isinstance(reason, BaseException) else exc
    if not isinstance(cause, ssl.SSLError):
        return False
    text = f"{getattr(cause, 'reason', '')} {cause}".upper()
    return "WRONG_VERSION_NUMBER" in text or "HTTP_REQUEST" in text or "RECORD_LAYER_FAILURE" in text


def served_names(base: str, timeout: float) -> list[str]:
    """The model names the server lists (each format's ``listing_routes``: ``/api/tags``, then ``/v1/models``),
    bounded; [] when none answer."""
    for path in listing_routes():
        try:
            answer = within(timeout, _get_json, base + path, timeout)
        except (TimeoutError, OSError, http.client.HTTPException, ValueError, BadAnswer, RecursionError):
            continue
        names = [name for name in listed_names(path, answer) if 0 < len(name) <= 200 and name.isprintable()]
        if names:
            return names
    return []


def _get_json(url: str, timeout: float) -> object:
    deadline = time.monotonic() + timeout
    request = urllib.request.Request(url, method="GET", headers={"Accept": "application/json"})
    with _NO_PROXY_OPENER.open(request, timeout=timeout) as response:
        return json.loads(read_bounded(response, MAX_LISTING_BYTES, deadline))


def pack_all(vectors: list, expected: int, where: str) -> list[bytes]:
    """Every vector as float32 bytes, checked; ``RequestFailure`` names the first problem."""
    if len(vectors) != expected:
        raise RequestFailure(REJECTED, "wrong_count", f"{where} returned {len(vectors)} vectors for {expected} inputs")
    return [pack_one(vector, where) for vector in vectors]


def pack_one(vector: object, where: str) -> bytes:
    if isinstance(vector, str):
        try:
            blob = base64.b64decode(vector, validate=True)
        except (binascii.Error, ValueError):
            raise RequestFailure(REJECTED, "bad_response", f"{where} returned a vector that is not base64") from None
        if not blob or len(blob) % 4:
            raise RequestFailure(REJECTED, "bad_response", f"{where} returned a base64 vector of {len(blob)} bytes")
        values = array("f")
        values.frombytes(blob)
        if sys.byteorder != "little":
            values.byteswap()
    elif isinstance(vector, list) and vector:
        if not all(type(value) in (int, float) for value in vector):
            raise RequestFailure(REJECTED, "bad_response", f"{where} returned a vector with a non-numeric value")
        values = array("f", vector)  # a value beyond float32 becomes inf and is caught below
    else:
        raise RequestFailure(REJECTED, "bad_response", f"{where} returned an empty or malformed vector")
    if not math.isfinite(sum(values)):  # any NaN or infinity makes the sum non-finite
        raise RequestFailure(REJECTED, "non_finite", f"{where} returned a vector with a non-finite value")
    if not any(values):
        raise RequestFailure(REJECTED, "zero_vector", f"{where} returned an all-zero vector")
    if sys.byteorder != "little":
        values.byteswap()
    return values.tobytes()


def unpack_floats(blob: bytes) -> list[float]:
    """Little-endian float32 bytes as a list of floats."""
    values = array("f")
    values.frombytes(blob)
    if sys.byteorder != "little":
        values.byteswap()
    return values.tolist()
