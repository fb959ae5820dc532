"""``serve MANIFEST``: the search of ``search``, over HTTP, with a page for people.

This module is the command: it reads the settings, loads the index, binds
and serves until stopped. The work is done by one module per concept, and a
newcomer finds each part there:

- ``serve_settings``: how the server listens and what it accepts (address,
  port, tokens from the environment, limits), and the exposure rule that any
  address but loopback needs ``BASTION_SERVE_TOKEN`` or a tokens file;
- ``search_service``: the warm index and the model server, answering a
  search for a caller (local or ``--remote``, limited to its groups,
  audited); the MCP server answers through it too;
- ``query_params``: the parameters of ``/search`` made a checked query, or a
  one-line 400;
- ``http_server``, ``http_protocol``, ``http_guard`` and ``http_handler``:
  uvicorn and Starlette (the ``serve`` extra) with the wire's checks
  (framing, head deadline, waiting caps), the guard (slots with the token
  first, time limits, the access log), and one request checked (Host, site,
  token), routed and answered;
- ``request_error``: a refusal, with its status and one line for the client.

Everything it returns comes from ``vectors.db``'s sanitized windows; the
extract store is never opened. Callers import each name from the module
that defines it; this one names only the command's own.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import signal
import sys
import threading
from typing import TextIO

from bastion_agent.core.errors import BastionError, ConfigError
from bastion_agent.embedding.endpoint import EndpointConfig
from bastion_agent.serving import tokens
from bastion_agent.serving.search_service import ModelLink, SearchService
from bastion_agent.serving.serve_settings import (  # add_serve_arguments: the CLI's hook for this command
    ServeSettings,
    add_serve_arguments,
    limit_math_threads,
    settings_from,
)

__all__ = ["RunningServer", "add_serve_arguments", "build_server", "http_stack", "listen_error", "readers_check",
           "run_serve"]


# --- running it --------------------------------------------------------------


class RunningServer:
    """``with RunningServer(server):`` serve from a thread until the block ends (tests, the bench)."""

    def __init__(self, server):
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
                 endpoint: EndpointConfig | None = None, probe: bool = True, remote=None):
    """Load the index, bind, and probe the model server (a failed probe is reported, not fatal)."""
    http_server = http_stack()
    stream = log_stream or sys.stderr
    config = endpoint or EndpointConfig.from_env()
    config = dataclasses.replace(config, timeout=min(config.timeout, settings.request_time_limit))
    model = ModelLink(manifest, config, settings.reprobe_seconds, settings.model_concurrency)
    log = lambda line: print(line, file=stream, flush=True)  # noqa: E731
    check = None if remote is None else readers_check(remote)
    book = tokens.TokenBook(settings.tokens_file, settings.token, log=log, check=check)  # a bad file stops here
    service = SearchService(manifest, layout, settings, model, log=log, remote=remote)
    try:
        server = http_server.BastionHTTPServer(service, settings, stream, book)
    except OSError as exc:
        raise listen_error(settings.host, settings.port, exc) from None
    if probe and not model.probe():
        log(f"bastion_agent serve: the model server is unavailable ({model.error}); /search answers 503 "
            f"until it answers (checked every {settings.reprobe_seconds:g} s)")
    return server


SERVE_EXTRA_HINT = "serve needs the serve extra (Starlette and uvicorn): pip install 'bastion-agent[serve]'"


def http_stack():
    """The HTTP server module, or one line saying which extra to install."""
    try:
        from bastion_agent.serving import http_server
    except ImportError as exc:
        if (exc.name or "").split(".")[0] not in ("starlette", "uvicorn", "h11", "anyio"):
            raise
        raise ConfigError(SERVE_EXTRA_HINT) from None
    return http_server


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


def run_serve(args: argparse.Namespace, companion=None) -> int:
    """Serve until SIGTERM or Ctrl-C; ``companion`` runs beside the server (``serve --watch``'s watcher).

    A companion is given the manifest and output folder before the index is
    loaded (``prepare``), the built server once it is bound (``start``), and
    is closed after the server has drained (``close``: it may finish its own
    work first, and raise the error that stopped it, which is then the
    command's). It lives above this module (``watching``), so it is passed in.
    """
    from bastion_agent.config.arguments import load_manifest_and_layout

    http_stack()  # without the serve extra: one line, before anything is loaded
    limit_math_threads()
    settings = settings_from(args.host, args.port)
    manifest, layout = load_manifest_and_layout(args)
    remote = None
    if args.bastion and not args.remote:
        raise ConfigError("--bastion filters a --remote search; add --remote")
    if companion is not None:
        companion.prepare(manifest, layout)
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
        if companion is not None:
            companion.start(server)
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        try:
            if companion is not None:
                companion.close()
        finally:
            server.server_close()
            if remote is not None:
                remote.close()
    return 0


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
