"""How ``serve`` listens and what it accepts: its settings, from the command line and the environment.

Exposure is checked here, before anything is bound: any address but
loopback needs ``BASTION_SERVE_TOKEN`` or a tokens file. ``mcp --http``
takes its listening settings from the same place, so both servers follow
one rule.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path

from bastion_agent.core.errors import ConfigError
from bastion_agent.core.loopback import is_loopback
from bastion_agent.searching import searcher
from bastion_agent.serving import tokens

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
TOKEN_ENV = "BASTION_SERVE_TOKEN"
MIN_TOKEN_CHARS = 16


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


MATH_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def limit_math_threads(environ=None) -> None:
    """One BLAS thread per request unless the operator says otherwise (before numpy is imported).

    Concurrency comes from the request threads; a matrix-vector product is
    memory-bound, and BLAS threads spinning against the request threads made
    a 10k-chunk search 15x slower on 2 CPUs (bench/serve/serve_latency.py).
    """
    env = os.environ if environ is None else environ
    for name in MATH_THREAD_VARIABLES:
        env.setdefault(name, "1")


def address_family(host: str) -> int:
    """The socket family of a listening address: IPv6 when it holds a colon."""
    return socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
