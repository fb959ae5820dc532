"""Named tokens: who is asking serve and ``mcp --http``, and which groups they may search.

``BASTION_SERVE_TOKENS`` names a JSON file::

    {"version": 1, "tokens": [{"name": "hr-portal", "hash": "sha256:<hex>",
                               "groups": ["hr"], "reader": null, "created": "2026-12-02T02:00:00Z"}]}

Only hashes are stored: a copy of the file (a backup, a support bundle)
opens nothing. A token is ``bst_`` and 43 URL-safe base64 characters (32
random bytes), so hashing it without a salt loses nothing: there is no
guessing 256 random bits from their hash. A presented token is hashed once
and compared in constant time against every stored hash (no early exit), so
the time of a refusal says nothing about how close a guess came or which
name it was near.

The file guards who reads what, so it is refused (one line) unless it is a
regular file owned by the user running the agent with no group or other
permission bits (0600), at most ``MAX_FILE_BYTES`` (read no further than
that), with valid names and group names. ``TokenBook`` stats it on every
request and reloads it when it changed, so ``token revoke`` takes effect at
the next request without a restart. A reload that fails (the file made
0644, broken JSON, removed) refuses every named token until the file is
right again, rather than serving with the tokens it held before: a revoke
made by hand that left a typo must not keep the revoked token working.
The single ``BASTION_SERVE_TOKEN`` comes from the environment, not the file,
and keeps working as the caller ``serve-token`` with every group.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from bastion_agent.core import access
from bastion_agent.core.errors import BastionError, ConfigError

TOKENS_ENV = "BASTION_SERVE_TOKENS"
SINGLE_TOKEN_ENV = "BASTION_SERVE_TOKEN"
SINGLE_TOKEN_NAME = "serve-token"  # the caller BASTION_SERVE_TOKEN authenticates, with every group
TOKEN_PREFIX = "bst_"
TOKEN_BYTES = 32
FILE_VERSION = 1
MAX_FILE_BYTES = 4 << 20  # MAX_TOKENS tokens take about 2.6 MiB; a bigger file is not a tokens file, and is not read
MAX_TOKENS = 10_000
HASH_PREFIX = "sha256:"
TOKEN_NAME_RE = access.GROUP_RE  # the group names' rule: no ":", so no token can pass for a local user ("local:NAME") in the audit log
READER_RE = re.compile(r"[a-z_][a-z0-9_]{0,62}")  # a PostgreSQL role name that needs no quoting
_HASH_RE = re.compile(r"sha256:[0-9a-f]{64}")
_ENTRY_KEYS = {"name", "hash", "groups", "reader", "created"}


@dataclass(frozen=True)
class Caller:
    """Who a request comes from: a name for the audit log and the groups it may search.

    ``groups`` None means every group (the single token, a local user the
    manifest does not limit); otherwise a document is visible iff its groups
    and these intersect. ``reader`` is the PostgreSQL role ``serve --remote``
    reads as for this caller (None: the DSN's own).
    """

    name: str
    groups: frozenset[str] | None = None
    reader: str | None = None


@dataclass(frozen=True)
class TokenEntry:
    """One row of the tokens file; never holds the token itself."""

    name: str
    hash: str
    groups: tuple[str, ...]
    reader: str | None
    created: str

    def caller(self) -> Caller:
        return Caller(self.name, frozenset(self.groups), self.reader)

    def as_row(self) -> dict:
        return {"name": self.name, "hash": self.hash, "groups": list(self.groups), "reader": self.reader,
                "created": self.created}


def local_caller(manifest) -> Caller:
    """The user of this machine (CLI search, stdio MCP, loopback serve without tokens).

    Every group, unless the manifest's ``[access] local_groups`` names the
    groups local searches see.
    """
    from bastion_agent.core.audit import local_caller as local_name

    return Caller(local_name(), manifest.access.local_groups)


def new_token() -> str:
    """A fresh token: ``bst_`` + 43 URL-safe base64 characters of 32 random bytes."""
    return TOKEN_PREFIX + base64.urlsafe_b64encode(secrets.token_bytes(TOKEN_BYTES)).rstrip(b"=").decode("ascii")


def hash_token(token: str) -> str:
    return HASH_PREFIX + hashlib.sha256(token.encode("utf-8")).hexdigest()


def now_utc() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- names ----------------------------------------------------------------------


def _shown(text) -> str:
    """A refused name as an error may show it: quoted and cut at 70 characters, or the type of a non-string."""
    return repr(text)[:70] if isinstance(text, str) else type(text).__name__


def group_name(text) -> str:
    """``text`` if it is a group name (``core.access``'s rule), else ``ConfigError``."""
    if not access.is_group_name(text):
        raise ConfigError(f"group {_shown(text)} is not a group name: {access.GROUP_RULE}")
    return text


def group_list(text: str) -> tuple[str, ...]:
    """``hr,staff`` as sorted, distinct group names; at least one."""
    names = sorted({group_name(part.strip()) for part in text.split(",") if part.strip()})
    if not names:
        raise ConfigError("--groups needs at least one group name, e.g. --groups hr,staff")
    return tuple(names)


def token_name(text) -> str:
    if not isinstance(text, str) or not TOKEN_NAME_RE.fullmatch(text):
        raise ConfigError(f"token name {_shown(text)} is not allowed: 1-63 lowercase letters, digits, '-' and '_', "
                          "starting with a letter or digit")
    return text


def reader_name(text) -> str:
    if not isinstance(text, str) or not READER_RE.fullmatch(text):
        raise ConfigError(f"reader {_shown(text)} is not a role name: 1-63 lowercase letters, digits and underscores, "
                          "not starting with a digit")
    return text


# --- the file --------------------------------------------------------------------


def tokens_path(environ=None) -> Path | None:
    env = os.environ if environ is None else environ
    value = env.get(TOKENS_ENV)
    return Path(value) if value else None


def required_tokens_path(environ=None) -> Path:
    path = tokens_path(environ)
    if path is None:
        raise ConfigError(f"set {TOKENS_ENV} to the tokens file's path (it is created 0600 by `token add`)")
    return path


def read_tokens(path: Path) -> list[TokenEntry]:
    """The tokens of the file at ``path``, checked; ``ConfigError`` (one line) for anything wrong."""
    return parse_tokens(path, read_checked(path))


def read_checked(path: Path) -> bytes:
    """The file's bytes, once it is known to be ours, private, regular and small."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise ConfigError(f"{TOKENS_ENV} {path}: no such file; create it with `token add NAME --groups G`") from None
    except OSError as exc:
        why = "is a symbolic link; name the file itself" if exc.errno == errno.ELOOP else f"cannot open it ({exc.strerror})"
        raise ConfigError(f"{TOKENS_ENV} {path}: {why}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{TOKENS_ENV} {path}: not a regular file")
        if info.st_uid != os.geteuid():
            raise ConfigError(f"{TOKENS_ENV} {path}: belongs to another user (uid {info.st_uid}); "
                              "it decides who reads what, so it must be the agent's own")
        if info.st_mode & 0o077:
            raise ConfigError(f"{TOKENS_ENV} {path}: mode {stat.S_IMODE(info.st_mode):04o} lets other users read or "
                              f"change it; run: chmod 600 {path}")
        if info.st_size > MAX_FILE_BYTES:
            raise ConfigError(f"{TOKENS_ENV} {path}: larger than {MAX_FILE_BYTES // 1024} KiB; not a tokens file")
        os.set_blocking(fd, True)
        data = os.read(fd, MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:  # it grew after fstat
        raise ConfigError(f"{TOKENS_ENV} {path}: larger than {MAX_FILE_BYTES // 1024} KiB; not a tokens file")
    return data


def parse_tokens(path: Path, data: bytes) -> list[TokenEntry]:
    where = f"{TOKENS_ENV} {path}"
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise ConfigError(f"{where}: not a tokens file (expected JSON {{\"version\": 1, \"tokens\": [...]}})") from None
    if not isinstance(value, dict) or value.get("version") != FILE_VERSION or set(value) != {"version", "tokens"}:
        raise ConfigError(f"{where}: not a tokens file (expected exactly {{\"version\": 1, \"tokens\": [...]}})")
    rows = value["tokens"]
    if not isinstance(rows, list) or len(rows) > MAX_TOKENS:
        raise ConfigError(f"{where}: \"tokens\" must be a list of at most {MAX_TOKENS} tokens")
    entries, names, hashes = [], set(), set()
    for number, row in enumerate(rows, start=1):
        try:
            entry = parse_entry(row)
        except ConfigError as exc:
            raise ConfigError(f"{where}: token {number}: {exc}") from None
        if entry.name in names:
            raise ConfigError(f"{where}: token {number}: the name {entry.name!r} is used twice")
        if entry.hash in hashes:
            raise ConfigError(f"{where}: token {number}: the same token is stored twice")
        names.add(entry.name)
        hashes.add(entry.hash)
        entries.append(entry)
    return entries


def parse_entry(row) -> TokenEntry:
    if not isinstance(row, dict) or not {"name", "hash", "groups"} <= set(row) or not set(row) <= _ENTRY_KEYS:
        raise ConfigError(f"each token is an object with {', '.join(sorted(_ENTRY_KEYS))}")
    name = token_name(row["name"])
    if name == SINGLE_TOKEN_NAME:
        raise ConfigError(f"the name {SINGLE_TOKEN_NAME!r} is {SINGLE_TOKEN_ENV}'s; choose another")
    if not isinstance(row["hash"], str) or not _HASH_RE.fullmatch(row["hash"]):
        raise ConfigError("hash must be sha256: and 64 lowercase hexadecimal digits")
    groups = row["groups"]
    if not isinstance(groups, list) or not groups or len(groups) > 1000:
        raise ConfigError("groups must be a list of group names (at least one)")
    names = tuple(sorted({group_name(group) for group in groups}))
    reader = row.get("reader")
    if reader is not None:
        reader = reader_name(reader)
    created = row.get("created") or ""
    if not isinstance(created, str) or len(created) > 40 or not created.isprintable():
        raise ConfigError("created must be a short time stamp")
    return TokenEntry(name, row["hash"], names, reader, created)


def write_tokens(path: Path, entries: list[TokenEntry]) -> None:
    """Replace the file atomically, 0600 (its folder created 0700 when missing)."""
    from bastion_agent.core.layout import write_private

    document = {"version": FILE_VERSION, "tokens": [entry.as_row() for entry in entries]}
    try:
        write_private(Path(path), json.dumps(document, indent=2) + "\n")
    except OSError as exc:
        raise ConfigError(f"{TOKENS_ENV} {path}: cannot write it ({exc.strerror or exc})") from None


# --- the tokens serve accepts ----------------------------------------------------


class TokenBook:
    """The tokens a server accepts: the file's, reloaded when it changes, and the single token.

    ``caller(authorization)`` is called once per request: one ``stat`` of the
    file, a reload when its identity changed, then one hash and a
    constant-time comparison with every stored hash.
    """

    def __init__(self, path: Path | None, single_token: str | None = None,
                 log=lambda line: None, check=None):
        self.path = Path(path) if path is not None else None
        self.single_token = single_token
        self.log = log
        # check(entries): raises a BastionError when a loaded file must not be used as it is (serve --remote: a
        # token whose reader reads a group the token lacks, or a reader the database cannot vouch for); it fails
        # the load like a malformed file
        self.check = check
        self._lock = threading.Lock()
        self._stamp: tuple | None = None
        self._entries: list[tuple[bytes, Caller]] = []  # (stored hash as bytes, its caller), made once per load
        self.error: str | None = None  # why the file's tokens are refused right now
        if self.path is not None:
            self._entries = _prepared(self._read())  # at start a bad file stops the server, in one line
            self._stamp = self._stat()

    @property
    def enabled(self) -> bool:
        """Whether requests must carry a token at all."""
        return self.path is not None or self.single_token is not None

    def _stat(self) -> tuple | None:
        try:
            info = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return None
        return (info.st_ino, info.st_dev, info.st_mtime_ns, info.st_ctime_ns, info.st_size, info.st_mode, info.st_uid)

    def refresh(self) -> None:
        """Reload when the file changed (mode and owner included); a failed reload refuses every named token."""
        if self.path is None:
            return
        stamp = self._stat()
        if stamp == self._stamp and stamp is not None:
            return
        with self._lock:
            stamp = self._stat()
            if stamp == self._stamp and stamp is not None:
                return
            try:
                entries = self._read()
            except BastionError as exc:  # a bad file, or a check that could not be made (the database down)
                self._entries, self._stamp = [], stamp
                if str(exc) != self.error:
                    self.log(f"bastion_agent serve: {exc}; every named token is refused until it is fixed")
                self.error = str(exc)
                return
            self._entries, self._stamp, self.error = _prepared(entries), stamp, None

    def _read(self) -> list[TokenEntry]:
        entries = read_tokens(self.path)
        if self.check is not None:
            self.check(entries)
        return entries

    def caller(self, authorization: str | None) -> Caller | None:
        """The caller an ``Authorization: Bearer TOKEN`` header value names, or None."""
        scheme, _, given = (authorization or "").strip().partition(" ")
        given = given.strip()
        if scheme.lower() != "bearer" or not given:
            return None
        self.refresh()
        presented = given.encode("utf-8", "surrogateescape")
        found: Caller | None = None
        if self.single_token is not None and hmac.compare_digest(presented, self.single_token.encode("utf-8")):
            found = Caller(SINGLE_TOKEN_NAME, None, None)
        digest = (HASH_PREFIX + hashlib.sha256(presented).hexdigest()).encode("ascii")
        for stored, caller in self._entries:  # every hash, no early exit
            if hmac.compare_digest(digest, stored) and found is None:
                found = caller
        return found


def _prepared(entries: list[TokenEntry]) -> list[tuple[bytes, Caller]]:
    return [(entry.hash.encode("ascii"), entry.caller()) for entry in entries]
