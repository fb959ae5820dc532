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

Under a flood of connections (issue 25): a connection gets a thread only once
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
from bastion_agent.serving.http_handler import Handler
from bastion_agent.serving.http_server import MAX_CONNECTIONS, BastionHTTPServer, address_family  # noqa: F401
from bastion_agent.serving.query_params import checked_query, query_from_body, query_from_string  # noqa: F401
from bastion_agent.serving.request_error import RequestError
from bastion_agent.serving.search_service import ModelLink, SearchService, summary_stamp, without_paths  # noqa: F401
from bastion_agent.serving.serve_openapi import PUBLIC_ROUTES, ROUTES
from bastion_agent.serving.serve_settings import (  # noqa: F401 (serve's names, as callers know them)
    DEFAULT_HOST,
    DEFAULT_PORT,
    MIN_TOKEN_CHARS,
    TOKEN_ENV,
    ServeSettings,
    add_serve_arguments,
    limit_math_threads,
    port_number,
    settings_from,
)


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
