"""``serve MANIFEST``: the search of ``search``, over HTTP, with a page for people.

One process keeps the manifest's vectors warm (``searcher.SearchIndex``) and
answers ``/search`` from many threads at once. Everything it returns comes
from ``vectors.db``'s sanitized windows; the extract store is never opened.

Exposure is opt-in: it binds 127.0.0.1 unless told otherwise, and any other
address needs ``BASTION_SERVE_TOKEN``, which every request except ``/`` (a
static page holding no data) and ``/healthz`` must then carry as
``Authorization: Bearer TOKEN``. On loopback, a request whose ``Host`` is not
a loopback name is refused (421), so a web page cannot reach the index by
rebinding its own domain name to 127.0.0.1.

Each request lives at most ``request_time_limit`` seconds: a watchdog
answers 408 (request not received in time) or 503 (answer not ready in time)
and closes the connection, so a slow or stalled client holds one thread for a
bounded time and never blocks the others. HTTP/1.1 connections stay open
between requests (keep-alive: a client saves a TCP handshake and a thread
start per query), but an open connection holds no thread between them: after
each answer it goes back to the intake, which gives it the same head deadline
(the idle timeout) and per-client cap as a new one. A connection is closed
after an answer whenever reading on could misread the stream: an error the
base class raised, a body not read whole, ``Transfer-Encoding``, a time limit
reached, ``Connection: close`` or HTTP/1.0 without ``keep-alive``.

Under a flood of connections: a connection gets a thread only once
its request line and headers have arrived (``intake``: one thread reads every
waiting head, with a short deadline and a cap per client), and
``RESERVED_SLOTS`` of the ``MAX_CONNECTIONS`` threads are kept for requests
that carry the right token, so idle or half-sent requests from anyone without
it can never take the slots a user needs.

The access log (stderr) names the method, the route, the status and the
milliseconds, never the query string or an unknown path, which can hold what
someone searched for.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import io
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, TextIO

from bastion_agent import __version__
from bastion_agent.config.manifest import SEARCH_MODES
from bastion_agent.core import audit
from bastion_agent.core.errors import (
    BastionError,
    ConfigError,
    DatabaseError,
    ModelServerError,
    StoreError,
)
from bastion_agent.core.loopback import is_loopback, is_loopback_host_header
from bastion_agent.embedding.client import EmbedClient
from bastion_agent.embedding.endpoint import EndpointConfig
from bastion_agent.searching import searcher
from bastion_agent.serving import intake, serve_openapi, tokens
from bastion_agent.serving.serve_openapi import PUBLIC_ROUTES, ROUTES

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
TOKEN_ENV = "BASTION_SERVE_TOKEN"
MIN_TOKEN_CHARS = 16

# Routes and the methods each answers; /openapi.json documents exactly these.
KNOWN_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT")
SEARCH_PARAMETERS = ("q", "k", "mode")
SEARCH_BODY_KEYS = ("query", "k", "mode")
DRAIN_LIMIT_BYTES = 1024 * 1024  # read at most this much of a refused body, so the client sees the answer
DRAIN_SECONDS = 1.0
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


@dataclass(frozen=True)
class ServeSettings:
    """How the server listens and what it accepts; the limits are documented in /openapi.json."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    token: str | None = None
    tokens_file: Path | None = None  # BASTION_SERVE_TOKENS: named tokens with their groups (tokens.py)
    default_k: int = searcher.DEFAULT_K
    max_k: int = 100
    max_query_chars: int = 2000
    max_body_bytes: int = 64 * 1024
    request_time_limit: float = 30.0
    reload_check_seconds: float = 1.0
    reload_quiet_seconds: float = 60.0
    reprobe_seconds: float = 5.0
    model_concurrency: int = 4  # queries embedded at once; the others wait their turn (within the time limit)

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    @property
    def guarded(self) -> bool:
        """Whether every request but the public routes must carry a token."""
        return self.token is not None or self.tokens_file is not None


class RequestError(Exception):
    """A request the server refuses: its HTTP status and one line for the client."""

    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


# --- settings from the command line and the environment ----------------------


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    from bastion_agent.config.arguments import add_manifest_arguments

    add_manifest_arguments(parser)
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"address to listen on (default {DEFAULT_HOST}; any other needs {TOKEN_ENV} or {tokens.TOKENS_ENV})")
    parser.add_argument("--port", type=port_number, default=DEFAULT_PORT,
                        help=f"port to listen on (default {DEFAULT_PORT}; 0 picks a free one)")
    from bastion_agent.config.arguments import add_remote_arguments

    add_remote_arguments(parser)


def port_number(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,5}", text) or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"must be a whole number from 0 to 65535; got {text!r}")
    return int(text)


def settings_from(host: str, port: int, environ=None) -> ServeSettings:
    """Check the exposure rules before anything is bound: a token for any non-loopback address."""
    env = os.environ if environ is None else environ
    token = env.get(TOKEN_ENV) or None
    if token is not None:
        if len(token) < MIN_TOKEN_CHARS or token != token.strip() or not token.isprintable():
            raise ConfigError(
                f"{TOKEN_ENV} must be at least {MIN_TOKEN_CHARS} printable characters without surrounding spaces; "
                "make one with: python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
            )
    tokens_file = tokens.tokens_path(env)
    if not is_loopback(host) and token is None and tokens_file is None:
        raise ConfigError(
            f"--host {host} would expose the search beyond this machine: set {TOKEN_ENV} or {tokens.TOKENS_ENV} "
            f"(every client then sends 'Authorization: Bearer TOKEN'), or keep the default --host {DEFAULT_HOST}"
        )
    return ServeSettings(host=host, port=port, token=token, tokens_file=tokens_file)


# --- the warm index and the model server --------------------------------------


class ModelLink:
    """The model server as serve sees it: one probed client, or the reason there is none.

    A failed probe or query never stops the server; ``/search`` answers 503
    with the reason, and a probe is tried again at most every
    ``reprobe_seconds`` (by the next query, or by the watcher thread).
    """

    def __init__(self, manifest, config: EndpointConfig, reprobe_seconds: float, concurrency: int = 4,
                 client_factory: Callable[[EndpointConfig, str], EmbedClient] = EmbedClient,
                 clock: Callable[[], float] = time.monotonic):
        self.manifest = manifest
        self.slots = threading.BoundedSemaphore(concurrency)
        self.config = config
        self.reprobe_seconds = reprobe_seconds
        self.client_factory = client_factory
        self.clock = clock
        self.client: EmbedClient | None = None
        self.error: str | None = "not probed yet"
        self.last_probe: float | None = None
        self._probe_lock = threading.Lock()

    @property
    def reachable(self) -> bool:
        return self.client is not None and self.error is None

    def probe(self) -> bool:
        """Probe with a fresh client; keep it when the model answers with the pinned dimension."""
        if not self._probe_lock.acquire(blocking=False):
            return self.reachable  # another thread is probing; do not stampede the model server
        try:
            self.last_probe = self.clock()
            client = self.client_factory(self.config, self.manifest.embed.model)
            try:
                client.probe(self.manifest.embed.dim)
            except ModelServerError as exc:
                self.error = str(exc)
                return False
            self.client, self.error = client, None
            return True
        finally:
            self._probe_lock.release()

    def probe_due(self) -> bool:
        return self.last_probe is None or self.clock() - self.last_probe >= self.reprobe_seconds

    def embed_query(self, query: str) -> list[float]:
        """The query's vector, or ``RequestError(503)`` saying why there is none."""
        if self.client is None and self.probe_due():
            self.probe()
        client = self.client
        if client is None:
            raise RequestError(503, f"the model server is unavailable: {self.error}; try again later")
        # a burst of queries must not become a burst of connections to the model server; nor may a slow
        # model server keep the queries waiting for a slot (each holding one of serve's connections) for
        # longer than one request to it may take
        if not self.slots.acquire(timeout=self.config.timeout):
            raise RequestError(503, "the model server is busy with other queries; try again later")
        try:
            vector = searcher.embed_query(self.manifest, query, client)
        except ModelServerError as exc:
            self.error = str(exc)
            raise RequestError(503, f"the model server is unavailable: {exc}; try again later") from None
        finally:
            self.slots.release()
        self.error = None
        return vector


class SearchService:
    """What every request thread shares: the warm index, the model link, their health.

    The index is swapped as one reference: a request takes the current one
    and uses it to the end, and a new one is loaded fully (one SQLite
    snapshot) before it replaces the old, so no answer mixes two sweeps.
    """

    def __init__(self, manifest, layout, settings: ServeSettings, model: ModelLink,
                 log: Callable[[str], None] = lambda line: None, clock: Callable[[], float] = time.monotonic,
                 remote=None):
        self.manifest = manifest
        self.layout = layout
        self.settings = settings
        self.model = model
        self.log = log
        self.clock = clock
        self.summary_seen = summary_stamp(layout)  # taken before the load: a later summary means a later sweep
        self.local_caller = tokens.local_caller(manifest)  # who asks when no token is needed (loopback, stdio)
        self.remote = remote is not None
        # remote: a remote_search.RemoteIndex (serve --remote), always current, never reloaded
        self.index = remote if remote is not None else searcher.SearchIndex.load(manifest, layout)
        self.index_error: str | None = None  # what /healthz says (no local path)
        self._reload_failure: str | None = None  # what the log said
        self.default_mode = searcher.resolve_mode(manifest, None)  # the manifest's, else the index's default
        self._seen_version: tuple | None = None
        self._seen_since = 0.0
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="bastion-serve-watcher", daemon=True)

    def start(self) -> None:
        self._watcher.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watcher.is_alive():
            self._watcher.join()

    def _watch(self) -> None:
        while not self._stop.wait(self.settings.reload_check_seconds):
            self.check_reload()
            if not self.model.reachable and self.model.probe_due():
                self.model.probe()

    def check_reload(self) -> bool:
        """Load the new index when ``vectors.db`` changed and the change has settled; True if swapped.

        Settled means embed has written a new summary since the index was
        loaded (embed writes it when a run ends), or nothing has changed for
        ``reload_quiet_seconds`` (a store replaced some other way). Until
        then the old index keeps answering, so a store that an embed run is
        still filling is not loaded while it keeps changing.
        """
        if self.index.is_current():
            self._seen_version = None
            return False
        version = searcher.store_version(self.layout)
        now = self.clock()
        if version != self._seen_version:
            self._seen_version, self._seen_since = version, now
        quiet = now - self._seen_since >= self.settings.reload_quiet_seconds
        summary = summary_stamp(self.layout)
        if summary == self.summary_seen and not quiet:
            return False
        try:
            fresh = searcher.SearchIndex.load(self.manifest, self.layout)
        except Exception as exc:  # keep answering from the old index; say why once
            message = f"could not reload the index ({exc}); still answering from the one loaded at {self.index.loaded_at}"
            if message != self._reload_failure:
                self.log(f"bastion_agent serve: {message}")  # the operator's log may name local paths
            self._reload_failure = message
            # /healthz needs no token: it says what failed, never where on this machine.
            self.index_error = (f"could not reload the index ({without_paths(str(exc))}); still answering from the one "
                                f"loaded at {self.index.loaded_at}")
            return False
        # The old index is not closed here: requests may still be using it; it closes when the last one drops it.
        self.index, self.index_error, self.summary_seen, self._reload_failure = fresh, None, summary, None
        self.log(f"bastion_agent serve: reloaded the index: {len(fresh)} chunks")
        return True

    def health(self, caller: tokens.Caller | None) -> dict:
        """The server's state as ``caller`` may see it: ``chunks`` counts only its windows (None: no caller)."""
        index = self.index
        return {
            "status": "ok" if self.model.reachable else "degraded",
            "model": self.manifest.embed.model,
            "dim": self.manifest.embed.dim,
            "chunks": None if caller is None else self.visible_count(index, caller),
            "caller": None if caller is None else caller.name,
            "loaded_at": index.loaded_at,
            "index_error": self.index_error,
            "model_server": "ok" if self.model.reachable else "unreachable",
            "fallback": None if self.model.reachable else "keyword",  # /search answers by keyword meanwhile
            "search_mode": self.default_mode,
            "auth": "bearer" if self.settings.guarded else "none",
            "limits": {"max_k": self.settings.max_k, "max_query_chars": self.settings.max_query_chars},
            "version": __version__,
        }

    def search(self, query: str, k: int, mode: str, caller: tokens.Caller | None = None, via: str = "serve") -> dict:
        """What ``search --json`` would print for ``caller``'s groups, in an envelope; audited before it is returned.

        ``caller`` None is the local user (``local_caller``); ``via`` names
        the way in for the audit log (serve, mcp).
        """
        caller = caller or self.local_caller
        index = self.index
        vectors = searcher.needs_vector(mode)  # keyword search works while the model server is down
        hits = []
        notice = None
        asked = mode
        if not vectors or self.visible_count(index, caller) != 0:  # none to see: no hits, no model call (as the CLI)
            vector = None
            if vectors:
                try:
                    vector = self.model.embed_query(query)
                except RequestError as exc:  # the model server is down: keyword search answers, and says so
                    if exc.status != 503:
                        raise
                    mode, notice = "keyword", f"{exc.message.removesuffix('; try again later')}; answered with keyword search instead of {asked} search"
            try:
                hits = self._search_as(caller, index, query, vector, k, mode)
            except ConfigError as exc:
                raise RequestError(400, str(exc)) from None
            except ModelServerError as exc:
                raise RequestError(503, str(exc)) from None
            except DatabaseError as exc:  # serve --remote: the details go to the log, not to the client
                self.log(f"bastion_agent serve: {exc}")
                raise RequestError(503, "the central index is unavailable; try again later") from None
        self._audit(caller, via, mode, k, hits, query)
        envelope = {
            "query": query,
            "model": self.manifest.embed.model,
            "mode": mode,
            "k": k,
            "hits": [hit.as_dict() for hit in hits],
        }
        if notice:
            envelope.update(fallback="keyword", notice=notice)
        return envelope

    def _search_as(self, caller: tokens.Caller, index, query: str, vector, k: int, mode: str) -> list:
        """The index's top k among the windows ``caller`` may see (filtered before ranking, by the index)."""
        if not self.remote:
            return index.search(query, vector, k, mode, groups=caller.groups)
        if caller.groups is None:
            return index.search(query, vector, k, mode)
        if caller.reader is None:  # fail closed: the DSN's own role reads every group centrally
            raise RequestError(403, "this token has no reader role for the central index; "
                                    "give it one with `token add NAME --groups G --reader ROLE`")
        return index.search(query, vector, k, mode, groups=caller.groups, reader=caller.reader)

    def visible_count(self, index, caller: tokens.Caller) -> int | None:
        """How many windows ``caller`` may search.

        Centrally (``--remote``) a named token's rows are counted as its
        reader; a token without one is refused there, and is told no count
        (None), never the total.
        """
        if caller.groups is None:
            return len(index)
        if not self.remote:
            return index.visible_count(caller.groups)
        return None if caller.reader is None else index.visible_count(caller.groups, reader=caller.reader)

    def _audit(self, caller: tokens.Caller, via: str, mode: str, k: int, hits: list, query: str) -> None:
        try:
            audit.record_search(self.layout, caller=caller.name, via=via, mode=mode, k=k,
                                docs=[hit.doc for hit in hits], query=query if self.manifest.audit_queries else None)
        except StoreError as exc:
            self.log(f"bastion_agent {via}: {exc}")
            raise RequestError(503, "the audit log cannot be written, so the search is not answered; "
                                    "see the server's log") from None


_PATH_RE = re.compile(r"""(?:[A-Za-z]:)?(?:~|\.{1,2})?[/\\][^\s'"()\[\],;]*""")


def without_paths(text: str) -> str:
    """``text`` with every file-system path in it replaced by ``<path>`` (for answers anyone may read)."""
    return _PATH_RE.sub("<path>", text)


def summary_stamp(layout) -> tuple | None:
    """What changes when embed writes ``embed.summary.json`` (at the end of every run)."""
    try:
        stat = layout.summary_path("embed").stat()
    except FileNotFoundError:
        return None
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino)


# --- validating a query ------------------------------------------------------


@dataclass(frozen=True)
class Query:
    text: str
    k: int
    mode: str


def query_from_string(query_string: str, settings: ServeSettings, default_mode: str) -> Query:
    """``q``, ``k`` and ``mode`` of ``GET /search``, each given at most once."""
    try:
        pairs = urllib.parse.parse_qsl(query_string, keep_blank_values=True, encoding="utf-8", errors="strict",
                                       max_num_fields=len(SEARCH_PARAMETERS) * 2)
    except UnicodeDecodeError:
        raise RequestError(400, "the query string is not valid UTF-8 after percent-decoding") from None
    except ValueError:
        raise RequestError(400, f"too many parameters; allowed: {', '.join(SEARCH_PARAMETERS)}") from None
    values: dict[str, str] = {}
    for name, value in pairs:
        if name not in SEARCH_PARAMETERS:
            raise RequestError(400, f"unknown parameter {name[:40]!r}; allowed: {', '.join(SEARCH_PARAMETERS)}")
        if name in values:
            raise RequestError(400, f"parameter {name!r} is given more than once")
        values[name] = value
    if "k" in values and not re.fullmatch(r"[0-9]{1,6}", values["k"]):
        raise RequestError(400, f"k must be a whole number from 1 to {settings.max_k}")
    k = int(values["k"]) if "k" in values else None
    return checked_query(values.get("q"), k, values.get("mode"), settings, default_mode, name="q")


def query_from_body(body: bytes, settings: ServeSettings, default_mode: str) -> Query:
    """``{"query": "...", "k": N, "mode": "..."}`` of ``POST /search``."""
    try:
        value = json.loads(body.decode("utf-8"), object_pairs_hook=_object_without_duplicates)
    except _DuplicateKey as exc:
        raise RequestError(400, f"key {str(exc)[:40]!r} is given more than once in the body") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):  # nested past the parser's depth: not a query
        raise RequestError(400, 'the body must be JSON such as {"query": "budget review", "k": 5}') from None
    if not isinstance(value, dict):
        raise RequestError(400, 'the body must be a JSON object such as {"query": "budget review", "k": 5}')
    unknown = [key for key in value if key not in SEARCH_BODY_KEYS]
    if unknown:
        raise RequestError(400, f"unknown key {unknown[0][:40]!r} in the body; allowed: {', '.join(SEARCH_BODY_KEYS)}")
    k = value.get("k")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int)):
        raise RequestError(400, f"k must be a whole number from 1 to {settings.max_k}")
    query, mode = value.get("query"), value.get("mode")
    if query is not None and not isinstance(query, str):
        raise RequestError(400, "query must be a string")
    if mode is not None and not isinstance(mode, str):
        raise RequestError(400, f"mode must be one of {', '.join(SEARCH_MODES)}")
    return checked_query(query, k, mode, settings, default_mode, name="query")


class _DuplicateKey(ValueError):
    pass


def _object_without_duplicates(pairs: list) -> dict:
    """A JSON object whose keys are each given once (two "query" keys: which one would count?)."""
    value = {}
    for key, item in pairs:
        if key in value:
            raise _DuplicateKey(key)
        value[key] = item
    return value


def checked_query(text: str | None, k: int | None, mode: str | None, settings: ServeSettings,
                  default_mode: str, name: str) -> Query:
    if text is None or not text.strip():
        raise RequestError(400, f"{name} is missing or empty: say what to look for")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate ("\ud800" in JSON): not text
        raise RequestError(400, f"{name} is not valid Unicode text (a lone surrogate)") from None
    if len(text) > settings.max_query_chars:
        raise RequestError(400, f"{name} is longer than {settings.max_query_chars} characters")
    if k is None:
        k = settings.default_k
    if not 1 <= k <= settings.max_k:
        raise RequestError(400, f"k must be a whole number from 1 to {settings.max_k}")
    mode = default_mode if mode is None else mode
    if mode not in SEARCH_MODES:
        raise RequestError(400, f"mode must be one of {', '.join(SEARCH_MODES)}")
    return Query(text, k, mode)


# --- HTTP --------------------------------------------------------------------


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
        except BlockingIOError:  # a non-blocking look for what was pipelined (Handler.unread): nothing yet
            return None


def address_family(host: str) -> int:
    return socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET


class Handler(BaseHTTPRequestHandler):
    """One request of a connection (the intake hands a kept-alive connection's next one to a new handler); every answer is JSON except the page."""

    server: BastionHTTPServer
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

    def __getattr__(self, name: str):
        """Every method (``do_GET``, ``do_DELETE``, ``do_BREW``...) goes to one dispatcher."""
        if name.startswith("do_"):
            return self.dispatch
        raise AttributeError(name)

    # -- the answers

    def dispatch(self) -> None:
        path, _, query_string = self.path.partition("?")
        self.route = path if path in ROUTES else None
        try:
            self.check_host()
            if path != "/":
                self.check_site()
            if path not in PUBLIC_ROUTES:
                self.check_token()
            else:
                self.caller = self.optional_caller()
            if path not in ROUTES:
                raise RequestError(404, f"no such path; this server answers {', '.join(ROUTES)}")
            if self.command not in ROUTES[path]:
                allowed = ", ".join(ROUTES[path])
                raise RequestError(405, f"{path} answers {allowed} only", {"Allow": allowed})
            self.answer(path, query_string)
        except RequestError as exc:
            self.send_json(exc.status, {"error": exc.message}, exc.headers)
        except (ConnectionError, TimeoutError):
            pass  # the client went away, or the watchdog closed the connection: nobody to answer
        except Exception as exc:  # a bug: say so without details that could hold the query
            self.server.log(f"bastion_agent serve: internal error: {type(exc).__name__}")
            self.send_json(500, {"error": "internal error; see the server's log"})
        finally:
            self.drain_unread_body()

    def answer(self, path: str, query_string: str) -> None:
        service = self.server.service
        if path == "/":
            self.request_read = True
            self.send_bytes(200, self.server.page, "text/html; charset=utf-8", {"Content-Security-Policy": self.server.page_csp})
        elif path == "/healthz":
            self.request_read = True
            self.send_json(200, service.health(self.caller))
        elif path == "/openapi.json":
            self.request_read = True
            self.send_bytes(200, self.server.openapi, "application/json")
        elif self.command == "GET":
            self.request_read = True
            query = query_from_string(query_string, self.server.settings, service.default_mode)
            self.send_json(200, service.search(query.text, query.k, query.mode, self.caller))
        else:
            body = self.read_body()
            query = query_from_body(body, self.server.settings, service.default_mode)
            self.send_json(200, service.search(query.text, query.k, query.mode, self.caller))

    def check_host(self) -> None:
        host = self.headers.get("Host")
        if self.server.settings.loopback and host is not None and not is_loopback_host_header(host):
            raise RequestError(421, "this server answers only to a loopback Host (127.0.0.1, localhost, [::1])")

    def check_site(self) -> None:
        """Refuse (403) what a page on another site makes the browser send; only ``/`` (static) may be linked.

        A page on any site can POST text/plain to /search (no CORS preflight)
        or GET it as an image: it cannot read the answer, but the search runs
        and its duration says how many windows hold a word (a cross-site
        search leak). Browsers say where a request comes from:
        ``Sec-Fetch-Site`` (cross-site, or same-site from another port); a
        browser too old to send it sends ``Origin``, which must then be this
        server as its ``Host`` names it (not compared when ``Sec-Fetch-Site``
        is there: a reverse proxy may rewrite ``Host``). Clients that are not
        browsers send neither.
        """
        site = (self.headers.get("Sec-Fetch-Site") or "").strip().lower()
        origin = self.headers.get("Origin")
        host = (self.headers.get("Host") or "").strip().lower()
        if site:
            foreign = site in ("cross-site", "same-site")
        else:
            foreign = origin is not None and origin.strip().lower() not in (f"http://{host}", f"https://{host}")
        if foreign:
            raise RequestError(403, "requests from a web page on another site are refused; open this server's own page")

    def check_token(self) -> None:
        """Who is asking (``self.caller``), from the ``Authorization`` header only; 401 for anyone else.

        Never from the query string or a cookie: a token in a URL ends up in
        histories, proxies' logs and ``Referer`` headers, and a cookie is sent
        by the browser on requests other sites make.
        """
        self.caller = self.optional_caller()
        if self.caller is None:
            raise RequestError(401, f"send 'Authorization: Bearer TOKEN' with a token of the server's {TOKEN_ENV} "
                                    f"or {tokens.TOKENS_ENV}", {"WWW-Authenticate": 'Bearer realm="bastion"'})

    def optional_caller(self) -> tokens.Caller | None:
        """The caller a valid token names; the local user when the server needs none; else None."""
        book = self.server.tokens
        if not book.enabled:
            return self.server.service.local_caller
        return book.caller(self.headers.get("Authorization"))

    def read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            raise RequestError(400, "send the body with a Content-Length header, not Transfer-Encoding")
        length_text = self.headers.get("Content-Length")
        if length_text is None or not re.fullmatch(r"[0-9]{1,18}", length_text.strip()):
            raise RequestError(400, "send the JSON body with a Content-Length header")
        length = int(length_text)
        if length > self.server.settings.max_body_bytes:
            raise RequestError(413, f"the body is larger than {self.server.settings.max_body_bytes} bytes")
        body = self.rfile.read(length)
        self.body_read = True
        if len(body) != length:
            raise RequestError(400, "the body ended before Content-Length bytes")
        self.request_read = True
        return body

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


# --- running it ----------------------------------------------------------------


class RunningServer:
    """``with RunningServer(server):`` serve from a thread until the block ends (tests, the bench)."""

    def __init__(self, server: BastionHTTPServer):
        self.server = server
        self.thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return self.server.url

    def __enter__(self) -> "RunningServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.thread.join()
        self.server.server_close()


def build_server(manifest, layout, settings: ServeSettings, log_stream: TextIO | None = None,
                 endpoint: EndpointConfig | None = None, probe: bool = True, remote=None) -> BastionHTTPServer:
    """Load the index, bind, and probe the model server (a failed probe is reported, not fatal)."""
    stream = log_stream or sys.stderr
    config = endpoint or EndpointConfig.from_env()
    config = dataclasses.replace(config, timeout=min(config.timeout, settings.request_time_limit))
    model = ModelLink(manifest, config, settings.reprobe_seconds, settings.model_concurrency)
    log = lambda line: print(line, file=stream, flush=True)  # noqa: E731
    check = None if remote is None else readers_check(remote)
    book = tokens.TokenBook(settings.tokens_file, settings.token, log=log, check=check)  # a bad file stops here
    service = SearchService(manifest, layout, settings, model, log=log, remote=remote)
    try:
        server = BastionHTTPServer(service, settings, stream, book)
    except OSError as exc:
        raise listen_error(settings.host, settings.port, exc) from None
    if probe and not model.probe():
        log(f"bastion_agent serve: the model server is unavailable ({model.error}); /search answers 503 "
            f"until it answers (checked every {settings.reprobe_seconds:g} s)")
    return server


def readers_check(remote):
    """serve --remote: refuse a tokens file in which a token's reader role reads a group the token lacks.

    Asked of the central database (``remote_search.reader_groups``) at start
    and at every reload of the file, so a token never reads more centrally
    than it may locally.
    """
    from bastion_agent.publishing import remote_search

    def check(entries) -> None:
        for entry in entries:
            if entry.reader is not None:
                groups_of_reader = remote_search.reader_groups(remote.dsn, entry.reader)
                remote_search.check_reader(entry.name, frozenset(entry.groups), entry.reader, groups_of_reader)

    return check


def listen_error(host: str, port: int, exc: OSError) -> BastionError:
    """Why the port cannot be bound, with the way out; exit status 1, as model-server's."""
    hint = ""
    if exc.errno == errno.EADDRINUSE:
        hint = " (another serve may be running there: stop it, or choose another --port; --port 0 picks a free one)"
    return BastionError(f"cannot listen on {host}:{port}: {exc.strerror or exc}{hint}")


MATH_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def limit_math_threads(environ=None) -> None:
    """One BLAS thread per request unless the operator says otherwise (before numpy is imported).

    Concurrency comes from the request threads; a matrix-vector product is
    memory-bound, and BLAS threads spinning against the request threads made
    a 10k-chunk search 15x slower on 2 CPUs (bench/serve_latency.py).
    """
    env = os.environ if environ is None else environ
    for name in MATH_THREAD_VARIABLES:
        env.setdefault(name, "1")


def run_serve(args: argparse.Namespace) -> int:
    from bastion_agent.config.arguments import load_manifest_and_layout

    limit_math_threads()
    settings = settings_from(args.host, args.port)
    manifest, layout = load_manifest_and_layout(args)
    remote = None
    if args.bastion and not args.remote:
        raise ConfigError("--bastion filters a --remote search; add --remote")
    if args.remote:
        from bastion_agent.publishing import remote_search

        remote = remote_search.open_index(manifest, args.bastion)
    try:
        server = build_server(manifest, layout, settings, remote=remote)
    except BaseException:  # a refused tokens file: close the database link, so the one line is all stderr says
        if remote is not None:
            remote.close()
        raise
    print(f"bastion_agent serve: {server.url} (model {manifest.embed.model}, {len(server.service.index)} chunks; "
          "Ctrl-C stops)", flush=True)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.server_close()
        if remote is not None:
            remote.close()
    return 0


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
