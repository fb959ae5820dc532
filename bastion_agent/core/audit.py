"""The audit log: one JSON line per search, whoever asked and however (CLI, serve, MCP).

``OUT/audit.jsonl`` (0600) holds, per search: the time (UTC), the caller (a
token's name, or ``local:USER``), ``via`` (cli, serve, mcp), the mode, k,
how many hits and the hits' document ids. The query itself is written only
when the manifest says ``[serve] audit_queries = true``: what someone
searched for can be as sensitive as what they found ("dismissal of J.
Smith"), and the log outlives the search.

Each record is one ``write`` on a descriptor opened with O_APPEND, under a
lock (one per log in this process, and an ``flock`` on ``audit.jsonl.lock``
for the other processes: a CLI search beside a running serve), so lines from
concurrent searches never interleave and rotation never loses one. When a
record would take the file past ``max_bytes`` the file is rotated first:
``audit.jsonl`` becomes ``audit.jsonl.1``, ``.1`` becomes ``.2`` … and the
oldest (``.KEEP``) is dropped, so the log never takes more than
``(KEEP + 1) * max_bytes``.

A search whose record cannot be written is not answered (``StoreError``):
an audit that silently stops is worse than a search that says why it failed.

Document ids in the log are keyed. A document's id is the sha256 of its
sanitized text, and a value redacted after the fact (a new rule, then
sweep and prune) leaves the old id computed from text that held it: with
the new text and its placeholder, trying every 6-digit value gives the old
id back in seconds. So the log holds ``audit_id(doc)`` instead, an
HMAC-SHA256 of the id under a per-installation secret (``OUT/audit.key``,
32 random bytes, mode 0600, made once and atomically: written under a
temporary name, then linked into place, so two processes starting together
agree on one key and no reader sees half of one). The same document has
the same audit id in every record, so ``audit`` still counts the documents
hit most; without the key no id can be tested against a guess. When
sanitize supersedes a document, its audit id is taken out of every record
(``forget_documents``, run where the vectors are erased), like its windows.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import threading
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from bastion_agent.core.errors import StoreError
from bastion_agent.core.layout import PRIVATE_FILE_MODE, Layout, ensure_private_dir, open_private_append

MAX_BYTES = 10 * 1024 * 1024
KEEP = 5
MAX_LINE_BYTES = 1024 * 1024  # a line longer than this when reading is not ours; skipped, counted
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
PLAIN_ID = re.compile(r"[0-9a-f]{64}")  # a document id as an older agent wrote it: the sha256 itself
KEY_FILE = "audit.key"
KEY_BYTES = 32
ID_CHARS = 32  # 128 bits of the HMAC: no collision among any folder's documents, and not a sha256's length

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


@dataclass(frozen=True)
class AuditRecord:
    """One search as the log keeps it."""

    time: str
    caller: str
    via: str
    mode: str
    k: int
    hits: int
    docs: list[str]
    query: str | None = field(default=None)

    def as_row(self) -> dict:
        row = asdict(self)
        if self.query is None:
            del row["query"]
        return row


def local_caller() -> str:
    """``local:USER`` for a search run by this machine's user (the CLI, stdio MCP, serve without tokens)."""
    import getpass

    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = f"uid{os.geteuid()}"
    return f"local:{name}"


def now_utc() -> str:
    return datetime.now(timezone.utc).strftime(TIME_FORMAT)


def record_search(layout: Layout, *, caller: str, via: str, mode: str, k: int, docs: list[str],
                  query: str | None = None, max_bytes: int = MAX_BYTES, keep: int = KEEP) -> AuditRecord:
    """Append one search; ``query`` is None unless the manifest asks for query texts; ids keyed (``audit_id``)."""
    key = installation_key(layout)
    entry = AuditRecord(time=now_utc(), caller=caller, via=via, mode=mode, k=k, hits=len(docs),
                        docs=list(dict.fromkeys(audit_id(key, doc) for doc in docs)), query=query)
    append(layout.audit_log, entry.as_row(), max_bytes=max_bytes, keep=keep)
    return entry


def audit_id(key: bytes, doc: str) -> str:
    """A document's id as the audit log writes it: keyed, so it cannot be tested against guesses without ``key``."""
    return hmac.new(key, doc.encode("utf-8"), hashlib.sha256).hexdigest()[:ID_CHARS]


def key_path(layout: Layout) -> Path:
    return Path(layout.root) / KEY_FILE


def installation_key(layout: Layout) -> bytes:
    """The per-installation secret of the audit ids, made on first use (see the module's docstring)."""
    path = key_path(layout)
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    except OSError as exc:  # a link planted as the key (O_NOFOLLOW), a folder, no permission
        raise StoreError(f"cannot read the audit key {path} ({exc.strerror or exc}); "
                         "the search was not answered, since it could not be recorded") from None
    ensure_private_dir(path.parent)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), PRIVATE_FILE_MODE)
        try:
            os.write(fd, secrets.token_bytes(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temporary, path)  # fails if another process made it first: then theirs is the key
            made = True
        except FileExistsError:
            made = False
    except OSError as exc:
        raise StoreError(f"cannot make the audit key {path} ({exc.strerror or exc}); "
                         "the search was not answered, since it could not be recorded") from None
    finally:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
    key = _read_key(path)
    if made:  # a log written before ids were keyed holds plain ones: key them, once, with the new key
        _rewrite_log(layout, lambda doc: audit_id(key, doc) if PLAIN_ID.fullmatch(doc) else doc)
    return key


def _read_key(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        info = os.fstat(fd)
        data = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) != KEY_BYTES or info.st_mode & 0o077:
        raise StoreError(f"the audit key {path} is not {KEY_BYTES} bytes of mode 0600: "
                         "move it away (a new one is made) only if the old audit ids need not match new ones")
    return data


def forget_documents(layout: Layout, docs, keep: int = KEEP) -> int:
    """Take the audit ids of ``docs`` (superseded documents) out of every record; returns how many records changed.

    A record keeps its time, caller and hit count, and loses only the ids
    (keyed, or plain as an older agent wrote them). Nothing to do without a
    log; a key is made if there is none yet (it keys any plain ids first).
    """
    docs = set(docs)
    if not docs or not log_files(layout.audit_log, keep):
        return 0
    key = installation_key(layout)
    gone = {audit_id(key, doc) for doc in docs} | docs
    return _rewrite_log(layout, lambda doc: None if doc in gone else doc, keep)


def _rewrite_log(layout: Layout, change, keep: int = KEEP) -> int:
    """Apply ``change`` (an id -> its new form, or None to drop it) to every record's ids; how many records changed.

    Each log file that changes is rewritten whole (a temporary file, then a
    rename) under the log's locks, so no search's line is lost meanwhile.
    """
    path = layout.audit_log
    changed = 0
    with _lock_for(path):
        lock_fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            for file in log_files(path, keep):
                changed += _rewrite_file(file, change)
        finally:
            os.close(lock_fd)
    return changed


def _rewrite_file(file: Path, change) -> int:
    from bastion_agent.core.layout import write_private

    lines, changed = [], 0
    with open(file, "rb") as handle:
        for line in handle:
            try:
                row = json.loads(line)
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
                lines.append(line)
                continue
            if isinstance(row, dict) and isinstance(row.get("docs"), list):
                new = [change(doc) if isinstance(doc, str) else doc for doc in row["docs"]]
                new = [doc for doc in new if doc is not None]
                if new != row["docs"]:
                    changed += 1
                    row["docs"] = new
                    line = (json.dumps(row, ensure_ascii=True, sort_keys=True) + "\n").encode("ascii")
            lines.append(line)
    if changed:
        write_private(file, b"".join(lines))
    return changed


def append(path: Path, row: dict, *, max_bytes: int = MAX_BYTES, keep: int = KEEP) -> None:
    # ASCII only: a query's U+2028 or control characters arrive escaped, so every tool sees one line per record
    data = (json.dumps(row, ensure_ascii=True, sort_keys=True) + "\n").encode("ascii")
    with _lock_for(path):
        try:
            if not path.parent.is_dir():
                ensure_private_dir(path.parent)
            lock_fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
                _append_locked(path, data, max_bytes, keep)
            finally:
                os.close(lock_fd)
        except OSError as exc:
            raise StoreError(f"cannot write the audit log {path} ({exc.strerror or exc}); "
                             "the search was not answered, since it could not be recorded") from None


def _lock_for(path: Path) -> threading.Lock:
    key = os.path.abspath(path)
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


def _append_locked(path: Path, data: bytes, max_bytes: int, keep: int) -> None:
    fd = open_private_append(path)
    try:
        size = os.fstat(fd).st_size
        if size and size + len(data) > max_bytes:
            os.close(fd)
            fd = -1
            rotate(path, keep)
            fd = open_private_append(path)
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(f"wrote {written} of {len(data)} bytes")
    finally:
        if fd >= 0:
            os.close(fd)


def rotate(path: Path, keep: int) -> None:
    """``path`` → ``path.1`` → … → ``path.KEEP``; the oldest is dropped."""
    for number in range(keep, 0, -1):
        older = path.with_name(f"{path.name}.{number}")
        newer = path if number == 1 else path.with_name(f"{path.name}.{number - 1}")
        try:
            os.replace(newer, older)
        except FileNotFoundError:
            pass


def log_files(path: Path, keep: int = KEEP) -> list[Path]:
    """The log's files, oldest first."""
    rotated = [path.with_name(f"{path.name}.{number}") for number in range(keep, 0, -1)]
    return [candidate for candidate in (*rotated, path) if candidate.is_file()]


def read_records(path: Path, keep: int = KEEP) -> Iterator[dict | None]:
    """Every record, oldest first; None for a line that is not one (a crash mid-write, an edit)."""
    for file in log_files(path, keep):
        with open(file, "rb") as handle:
            while True:
                line = handle.readline(MAX_LINE_BYTES + 1)
                if not line:
                    break
                if len(line) > MAX_LINE_BYTES:
                    while line and not line.endswith(b"\n"):  # skip the rest of a runaway line
                        line = handle.readline(MAX_LINE_BYTES)
                    yield None
                    continue
                if not line.strip():
                    continue
                try:
                    value = json.loads(line.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
                    yield None
                    continue
                yield value if _looks_like_record(value) else None


def _looks_like_record(value) -> bool:
    return (isinstance(value, dict) and isinstance(value.get("time"), str) and isinstance(value.get("caller"), str)
            and isinstance(value.get("via"), str) and isinstance(value.get("mode"), str)
            and isinstance(value.get("docs"), list) and isinstance(value.get("hits"), int))


def parse_time(text: str) -> datetime | None:
    try:
        return datetime.strptime(text, TIME_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return None
