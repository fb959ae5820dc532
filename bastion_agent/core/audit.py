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

A drop is never silent: each one appends a line to ``audit.jsonl.dropped``
(0600; when, how many records, the first and last record's time) which
``audit`` shows, and a drop of records younger than the manifest's
``[serve] audit_retention_days`` is also said on stderr. Someone who may
search could otherwise flood the log until its own earlier records fall out
of the oldest file; serve's per-token limit makes that slow, and this makes
it seen.

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
import sys
import threading
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

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
RETENTION_DAYS = 90  # the manifest's [serve] audit_retention_days when it says nothing
DROPPED_SUFFIX = ".dropped"  # audit.jsonl.dropped: one line per rotated file that was dropped

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


@dataclass(frozen=True)
class Retention:
    """How long records must survive rotation, and where to say so when they do not."""

    days: int = RETENTION_DAYS
    warn: Callable[[str], None] | None = None  # None: stderr

    def say(self, line: str) -> None:
        if self.warn is None:
            print(line, file=sys.stderr, flush=True)
        else:
            self.warn(line)


@dataclass(frozen=True)
class Drop:
    """One rotated file dropped: when, how many records, their first and last time."""

    time: str
    records: int
    first: str | None
    last: str | None
    retention_days: int
    within_retention: bool  # its newest record was younger than the retention period

    def what(self) -> str:
        young = f", younger than the {self.retention_days}-day retention" if self.within_retention else ""
        return f"{self.records} records from {self.first or '?'} to {self.last or '?'}{young}"


def record_search(layout: Layout, *, caller: str, via: str, mode: str, k: int, docs: list[str],
                  query: str | None = None, max_bytes: int = MAX_BYTES, keep: int = KEEP,
                  retention: Retention | None = None) -> AuditRecord:
    """Append one search; ``query`` is None unless the manifest asks for query texts; ids keyed (``audit_id``)."""
    key = installation_key(layout)
    entry = AuditRecord(time=now_utc(), caller=caller, via=via, mode=mode, k=k, hits=len(docs),
                        docs=list(dict.fromkeys(audit_id(key, doc) for doc in docs)), query=query)
    append(layout.audit_log, entry.as_row(), max_bytes=max_bytes, keep=keep, retention=retention)
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


def append(path: Path, row: dict, *, max_bytes: int = MAX_BYTES, keep: int = KEEP,
           retention: Retention | None = None) -> None:
    # ASCII only: a query's U+2028 or control characters arrive escaped, so every tool sees one line per record
    data = (json.dumps(row, ensure_ascii=True, sort_keys=True) + "\n").encode("ascii")
    with _lock_for(path):
        try:
            if not path.parent.is_dir():
                ensure_private_dir(path.parent)
            lock_fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
                _append_locked(path, data, max_bytes, keep, retention or Retention())
            finally:
                os.close(lock_fd)
        except OSError as exc:
            raise StoreError(f"cannot write the audit log {path} ({exc.strerror or exc}); "
                             "the search was not answered, since it could not be recorded") from None


def _lock_for(path: Path) -> threading.Lock:
    key = os.path.abspath(path)
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


def _append_locked(path: Path, data: bytes, max_bytes: int, keep: int, retention: Retention) -> None:
    fd = open_private_append(path)
    try:
        size = os.fstat(fd).st_size
        if size and size + len(data) > max_bytes:
            os.close(fd)
            fd = -1
            note_drop(path, keep, retention)
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


def note_drop(path: Path, keep: int, retention: Retention, now: datetime | None = None) -> Drop | None:
    """Before a rotation: record what the oldest file (about to be dropped) held; say so if it is too young.

    The note is written before the file goes, so a crash between the two
    leaves a note too many, never a silent drop.
    """
    oldest = path.with_name(f"{path.name}.{keep}")
    try:
        records, first, last = _span(oldest)
    except FileNotFoundError:
        return None
    now = now or datetime.now(timezone.utc)
    newest = parse_time(last) if last else None
    young = newest is None or (now - newest).total_seconds() < retention.days * 86400
    drop = Drop(time=now.strftime(TIME_FORMAT), records=records, first=first, last=last,
                retention_days=retention.days, within_retention=young)
    line = (json.dumps(asdict(drop), ensure_ascii=True, sort_keys=True) + "\n").encode("ascii")
    fd = open_private_append(dropped_log(path))
    try:
        if os.write(fd, line) != len(line):
            raise OSError("short write to the audit log's drop notes")
    finally:
        os.close(fd)
    if young:
        retention.say(f"bastion_agent audit: rotation of {path} dropped {drop.what()}; "
                      f"raise the rotation size or keep copies of {path.name}.* elsewhere")
    return drop


def _span(file: Path) -> tuple[int, str | None, str | None]:
    """How many lines a log file holds and the times of its first and last record (read in blocks)."""
    count, first_line, last_line, tail = 0, None, None, b""
    with open(file, "rb") as handle:
        while block := handle.read(1 << 20):
            count += block.count(b"\n")
            lines = (tail + block).split(b"\n")
            tail = lines.pop()[-MAX_LINE_BYTES:]
            complete = [line for line in lines if line.strip()]
            if complete:
                first_line = first_line if first_line is not None else complete[0][:MAX_LINE_BYTES]
                last_line = complete[-1][-MAX_LINE_BYTES:]
    if tail.strip():
        count += 1
        first_line = first_line if first_line is not None else tail
        last_line = tail
    return count, _time_of(first_line), _time_of(last_line)


def _time_of(line: bytes | None) -> str | None:
    try:
        value = json.loads(line) if line else None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    when = value.get("time") if isinstance(value, dict) else None
    return when if isinstance(when, str) and parse_time(when) is not None else None


def dropped_log(path: Path) -> Path:
    return path.with_name(path.name + DROPPED_SUFFIX)


def read_drops(path: Path) -> Iterator[Drop | None]:
    """Every drop note, oldest first; None for a line that is not one."""
    try:
        handle = open(dropped_log(path), "rb")
    except FileNotFoundError:
        return
    with handle:
        for line in handle:
            try:
                value = json.loads(line[:MAX_LINE_BYTES])
                yield Drop(**value) if isinstance(value, dict) else None
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, TypeError):
                yield None


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
