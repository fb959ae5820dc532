"""The model server's endpoint, from the environment: ``EMBED_URL``, ``EMBED_API`` and the batch settings.

The endpoint is a property of the machine, never of the manifest: the
environment names it, and the manifest only pins the model name and
dimension. Everything here is validated once, with a one-line error that
names the variable and never echoes a value that could be a secret.
"""

from __future__ import annotations

import math
import os
import re
import urllib.parse
from dataclasses import dataclass
from typing import Mapping

from bastion_agent.core.errors import ConfigError
from bastion_agent.core.loopback import is_loopback
from bastion_agent.embedding.wire_formats import WIRE_FORMATS, WireFormat, wire_format

DEFAULT_URL = "http://127.0.0.1:11434"
DEFAULT_BATCH = 32
DEFAULT_TIMEOUT = 300.0
DEFAULT_CONCURRENCY = 1
DEFAULT_RETRY_DEADLINE = 600.0
MAX_CONCURRENCY = 64
# Routes a user may paste into EMBED_URL from a server's docs; the agent adds them itself.
# Longest first, so the message names the whole route pasted (/api/embed before a format's /embed).
ROUTE_SUFFIXES = tuple(sorted({fmt.embed_path for fmt in WIRE_FORMATS.values()} | {"/api/embeddings"},
                              key=lambda route: (-len(route), route)))


@dataclass(frozen=True)
class EndpointConfig:
    """``EMBED_URL``, ``EMBED_API``, ``EMBED_BATCH``, ``EMBED_TIMEOUT``,
    ``EMBED_CONCURRENCY``, ``EMBED_RETRY_DEADLINE`` and ``EMBED_BATCH_FIXED``, validated."""

    url: str = DEFAULT_URL
    wire_format: WireFormat | None = None  # EMBED_API's (a name given here is looked up); None: the probe detects it
    batch: int = DEFAULT_BATCH
    timeout: float = DEFAULT_TIMEOUT
    concurrency: int = DEFAULT_CONCURRENCY
    retry_deadline: float = DEFAULT_RETRY_DEADLINE
    batch_fixed: bool = False  # EMBED_BATCH_FIXED=1: no tuning (batch_tuner.py), EMBED_BATCH and EMBED_CONCURRENCY as given
    batch_set: bool = False  # EMBED_BATCH was given: the tuner's ceiling (a server that refuses larger batches)

    def __post_init__(self) -> None:
        if self.wire_format is not None:  # a name (a test's, init's) becomes its format, or a one-line ConfigError
            object.__setattr__(self, "wire_format", wire_format(self.wire_format))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "EndpointConfig":
        env = os.environ if environ is None else environ
        concurrency = _positive(env, "EMBED_CONCURRENCY", DEFAULT_CONCURRENCY, int)
        if concurrency > MAX_CONCURRENCY:
            raise ConfigError(f"EMBED_CONCURRENCY must be at most {MAX_CONCURRENCY}; got {concurrency}")
        return cls(
            url=_base_url(env.get("EMBED_URL") or DEFAULT_URL),
            wire_format=env.get("EMBED_API") or None,  # checked by wire_format(), which never echoes it
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
