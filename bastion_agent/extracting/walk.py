"""The walk of the source root: which files the extract stage reads, and each file's bytes.

Every folder is opened from the root descriptor, one name at a time, so a
link is never entered by accident; the output folder, and any folder or
file that is one of our stores, is never read. Each file's bytes are read
once (``load``), and its extract key (``extract_key``) names its text.

Links: a link to a file is read when its target resolves inside the root; a
link whose target is outside the root, a broken link and a link to a folder
are never followed (a folder inside the root is walked at its real path
anyway, so following folder links would only add duplicates and loops).
Fifos, sockets and devices are listed as "special file" and never opened.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from bastion_agent.core.confine import NotRegular, SourceRoot
from bastion_agent.core.globs import GlobSet
from bastion_agent.core.layout import OUT_MARKER
from bastion_agent.core.records import ListingRow as Row  # a line of extract/listing.jsonl
from bastion_agent.extracting import readers

STATUS_EXTRACTED = "extracted"
STATUS_SKIPPED = "skipped"

REASON_TOO_LARGE = "too large"
REASON_UNREADABLE = "unreadable"
REASON_LINK_OUTSIDE = "link outside root"
REASON_FOLDER_LINK = "folder link"
REASON_BROKEN_LINK = "broken link"
REASON_LINK_EXCLUDED = "link to excluded file"
REASON_SPECIAL = "special file"
REASON_TOO_DEEP = "too deep"
REASON_STORE = "output folder"  # a bastion output folder below the root (a copied project, a backup)
REASON_STORE_FILE = "file of the output folder"  # a hard link to, or a copy of, a file of a store

# What marks a folder as one of our output folders, made by any version: the
# marker, a stage summary, a store with its listing, or an extract store on its
# own (its listing beside texts named by their key, or its private map).
_STORE_SUMMARIES = tuple(f"{stage}.summary.json" for stage in ("extract", "sanitize", "chunk", "embed"))
_STORE_LISTINGS = ("extract/listing.jsonl", "sanitized/listing.jsonl")
_EXTRACT_STORE_FILES = ("sanitized.jsonl", "costly.json", "extract.figures.json", "sanitize.figures.json")

# Folders nested deeper than this below the root are not entered (listed
# "too deep"). Every path, listing row and open from the root grows with the
# depth, so a chain of 20,000 nested folders (seconds to make) cost the walk
# the square of that in time and memory; real trees stay far above this
# (PATH_MAX alone stops ordinary tools near 2,000 levels of short names).
MAX_DEPTH = 256

# The name of a text in an extract store: its key and ".txt" (the stage removes stale ones by it).
DOC_TEXT_NAME = re.compile(r"[0-9a-f]{64}\.txt")
_KEY = re.compile(r"[0-9a-f]{64}")


# ---------------------------------------------------------------- walk

@dataclass(frozen=True)
class _Entry:
    """Something the walk found: a file to read (its names from the root), or a row already decided."""

    rel: str
    parts: tuple[str, ...]
    row: Row | None = None


class Selection:
    """Which paths under the root the stage reads: the globs, minus the output folder."""

    def __init__(self, root_real: str, include: GlobSet, exclude: GlobSet, out: Path | None = None,
                 known_links: set | None = None):
        self.root_real = root_real
        self.include, self.exclude = include, exclude
        try:
            info = os.stat(out) if out is not None else None
            self.out_id = (info.st_dev, info.st_ino) if info else None
        except OSError:
            self.out_id = None
        self.out_files = _files_of(out) | set(known_links or ())
        self.links_seen: set[tuple[int, int]] = set()

    def is_out_file(self, info: os.stat_result) -> bool:
        """Whether a file is one of the output folder's, under another name (a hard link), now or
        at an earlier run (the store replaces its files, leaving the link with the old content)."""
        found = (info.st_dev, info.st_ino) in self.out_files
        if found:
            self.links_seen.add((info.st_dev, info.st_ino))
        return found

    def enters(self, rel: str) -> bool:
        """Whether the walk goes into the folder ``rel`` (the output folder is checked once opened)."""
        return not self.exclude.matches(rel)

    def is_out(self, info: os.stat_result) -> bool:
        return self.out_id is not None and (info.st_dev, info.st_ino) == self.out_id

    def selects(self, rel: str) -> bool:
        """Whether the file ``rel`` is read (its folders are assumed entered)."""
        return self.include.matches(rel) and not self.exclude.matches(rel)

    def reaches(self, root: SourceRoot, parts: list[str]) -> bool:
        """Whether a link may be read through to ``parts`` (resolved below the root): a file
        the walk itself would read, so a link cannot get round the globs or into the output folder."""
        if not parts:
            return False
        names = [_display(name) for name in parts]
        for depth in range(1, len(parts)):
            if not self.enters("/".join(names[:depth])):
                return False
            try:
                fd = root.open_dir(parts[:depth])
            except OSError:
                return False
            try:
                if self.is_out(os.fstat(fd)):
                    return False
            finally:
                os.close(fd)
        return self.selects("/".join(names))


def _files_of(out: Path | None) -> set[tuple[int, int]]:
    """``(st_dev, st_ino)`` of every regular file in the output folder, so that no other name of one is read."""
    found: set[tuple[int, int]] = set()
    if out is None:
        return found
    for folder, _, names in os.walk(out):
        for name in names:
            try:
                info = os.stat(os.path.join(folder, name), follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                found.add((info.st_dev, info.st_ino))
    return found


def is_store_folder(fd: int, children: list[tuple[str, bool]]) -> bool:
    """Whether the open folder ``fd`` (whose entries are ``children``) is a bastion output folder or
    an extract store: its marker, a stage summary, a store listing, or an extract store's own files.

    Such a folder below the root (a copied older project, a backup) holds raw text keyed by raw
    hashes, raw paths and raw figures; read as documents, they would carry all of it out.
    """
    names = {name: is_dir for name, is_dir in children}
    if any(names.get(name) is False for name in (OUT_MARKER,) + _STORE_SUMMARIES):
        return True
    for listing in _STORE_LISTINGS:
        folder = listing.split("/")[0]
        if names.get(folder):
            try:
                if stat.S_ISREG(os.stat(listing, dir_fd=fd, follow_symlinks=False).st_mode):
                    return True
            except OSError:
                pass
    if names.get("vectors.db") is False and names.get("chunks.jsonl") is False:
        return True
    if names.get("listing.jsonl") is False:
        return any(names.get(name) is False for name in _EXTRACT_STORE_FILES) or any(
            DOC_TEXT_NAME.fullmatch(name) and is_dir is False for name, is_dir in children)
    return False


_STORE_FILE_MAX = 1 << 18  # parsed whole in the parent (no budget there): only files as small as these are


def looks_like_store_file(data: bytes) -> bool:
    """Whether bytes read from the root are a private file of an extract store (a copy, or a hard
    link whose inode the store has since replaced): its listing or map (raw paths, keys computed
    from raw bytes), ``costly.json`` (keys) or a figures file (raw byte totals)."""
    first = data[:4096].split(b"\n", 1)[0]
    if not first.lstrip().startswith(b"{"):
        return False
    try:
        row = json.loads(first)
    except (ValueError, UnicodeDecodeError):
        row = None
    if isinstance(row, dict) and ({"path", "key", "status"} <= row.keys() or {"key", "doc", "sanitizer"} <= row.keys()):
        return True
    if len(data) > _STORE_FILE_MAX:
        return False
    try:
        whole = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False
    if not isinstance(whole, dict) or not whole:
        return False
    if whole.get("stage") in ("extract", "sanitize") and ({"bytes_read", "bytes_in", "texts"} & whole.keys()):
        return True
    return all(_KEY.fullmatch(str(key)) and isinstance(value, dict) and "budget" in value
               for key, value in whole.items())


def walk(root: SourceRoot, selection: Selection) -> tuple[list[_Entry], int]:
    """Entries under the root that the selection reads, in path order, and how many files it excluded.

    Every folder is opened from the root descriptor, one name at a time with
    O_NOFOLLOW, so a link is never entered. The output folder is never
    entered, even when it lies inside the root, so the agent never reads its
    own stores.
    """
    entries: list[_Entry] = []
    excluded = 0
    seen_dirs: set[tuple[int, int]] = set()
    pending: list[tuple[str, ...]] = [()]
    while pending:
        parts = pending.pop()
        prefix = "".join(_display(name) + "/" for name in parts)
        try:
            fd = root.open_dir(parts)
        except OSError:
            rel = prefix.rstrip("/") or "."
            entries.append(_Entry(rel, parts, Row(rel, None, 0, "folder", STATUS_SKIPPED, REASON_UNREADABLE)))
            continue
        try:
            info = os.fstat(fd)
            if (info.st_dev, info.st_ino) in seen_dirs or (parts and selection.is_out(info)):
                continue  # a bind-mount loop, or our own output folder
            seen_dirs.add((info.st_dev, info.st_ino))
            with os.scandir(fd) as scan:
                children = sorted(((item.name, _is_dir(item)) for item in scan))
            if parts and is_store_folder(fd, children):
                rel = prefix.rstrip("/")
                entries.append(_Entry(rel, parts, Row(rel, None, 0, "folder", STATUS_SKIPPED, REASON_STORE)))
                continue
        except OSError:
            rel = prefix.rstrip("/") or "."
            entries.append(_Entry(rel, parts, Row(rel, None, 0, "folder", STATUS_SKIPPED, REASON_UNREADABLE)))
            continue
        finally:
            os.close(fd)
        for name, is_dir in children:
            rel = prefix + _display(name)
            if is_dir:
                if not selection.enters(rel):
                    continue
                if len(parts) >= MAX_DEPTH:
                    entries.append(_Entry(rel, parts + (name,),
                                          Row(rel, None, 0, "folder", STATUS_SKIPPED, REASON_TOO_DEEP)))
                    continue
                pending.append(parts + (name,))
            elif selection.selects(rel):
                entries.append(_Entry(rel, parts + (name,)))
            else:
                excluded += 1
    entries.sort(key=lambda entry: entry.rel)
    return entries, excluded


def extract_key(parts: tuple[str, ...], data: bytes) -> str:
    """The private key of one file's text: sha256 of its raw path (from the root) and its bytes.

    The path is in it so that equal bytes at two paths are never one text:
    what the agent does with a file (reads it, reuses it, counts it, how long
    that takes) then never depends on whether another file holds the same
    bytes, which a planted copy could otherwise test.
    """
    path = b"/".join(os.fsencode(name) for name in parts)
    return hashlib.sha256(b"bastion extract key 2\0" + path + b"\0" + data).hexdigest()


def _is_dir(item: os.DirEntry) -> bool:
    try:
        return item.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _display(name: str) -> str:
    """A name as text: its bytes read as UTF-8, else as Latin-1 (every byte one character).

    Decoded before anything else sees it, so sanitize reads the name a person
    reads: ``jos\\xe9.garc\\xeda@corp-mail.es.txt`` (escaped first) kept half
    of the address from the detectors. Outputs escape control characters
    afterwards (``progress.escape_name``), never before sanitize.
    """
    data = os.fsencode(name)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


# ---------------------------------------------------------------- reading one file

@dataclass(frozen=True)
class _Loaded:
    """A file's bytes, or the row that says why they were not read."""

    data: bytes | None
    row: Row | None = None
    modified: str | None = None  # the file's modification time (``modified_time``), read with its bytes


def load(entry: _Entry, root: SourceRoot, selection: Selection, max_bytes: int) -> _Loaded:
    """Read a file's bytes once, opened from the root descriptor; a link is followed (by hand,
    below the root) only to a file the walk would read itself."""
    rel = entry.rel
    try:
        info = root.lstat(entry.parts)
    except OSError:
        return _Loaded(None, Row(rel, None, 0, "file", STATUS_SKIPPED, REASON_UNREADABLE))
    target = list(entry.parts)
    if stat.S_ISLNK(info.st_mode):
        try:
            resolved = root.resolve(entry.parts)
            if resolved is None:
                return _Loaded(None, Row(rel, None, 0, "link", STATUS_SKIPPED, REASON_LINK_OUTSIDE))
            info = root.lstat(resolved) if resolved else os.fstat(root.fd)
        except OSError:
            return _Loaded(None, Row(rel, None, 0, "link", STATUS_SKIPPED, REASON_BROKEN_LINK))
        if stat.S_ISDIR(info.st_mode):
            return _Loaded(None, Row(rel, None, 0, "link", STATUS_SKIPPED, REASON_FOLDER_LINK))
        if not selection.reaches(root, resolved):
            return _Loaded(None, Row(rel, None, 0, "link", STATUS_SKIPPED, REASON_LINK_EXCLUDED))
        target = resolved
    if not stat.S_ISREG(info.st_mode):
        return _Loaded(None, Row(rel, None, 0, "special", STATUS_SKIPPED, REASON_SPECIAL))
    if selection.is_out_file(info):
        return _Loaded(None, Row(rel, None, 0, "file", STATUS_SKIPPED, REASON_STORE_FILE))
    if info.st_size > max_bytes:
        return _Loaded(None, Row(rel, None, info.st_size, _kind_by_name(rel), STATUS_SKIPPED, REASON_TOO_LARGE))
    try:
        fd = root.open_file(target)
    except NotRegular:  # swapped between the check and the open
        return _Loaded(None, Row(rel, None, 0, "special", STATUS_SKIPPED, REASON_SPECIAL))
    except OSError:
        return _Loaded(None, Row(rel, None, info.st_size, _kind_by_name(rel), STATUS_SKIPPED, REASON_UNREADABLE))
    if selection.is_out_file(os.fstat(fd)):  # linked between the check and the open
        os.close(fd)
        return _Loaded(None, Row(rel, None, 0, "file", STATUS_SKIPPED, REASON_STORE_FILE))
    modified = modified_time(os.fstat(fd).st_mtime)
    with os.fdopen(fd, "rb") as handle:
        os.set_blocking(fd, True)
        try:
            data = handle.read(max_bytes + 1)
        except OSError:
            return _Loaded(None, Row(rel, None, info.st_size, _kind_by_name(rel), STATUS_SKIPPED, REASON_UNREADABLE))
    if len(data) > max_bytes:  # it grew after the check
        return _Loaded(None, Row(rel, None, len(data), _kind_by_name(rel), STATUS_SKIPPED, REASON_TOO_LARGE))
    if looks_like_store_file(data):
        return _Loaded(None, Row(rel, None, 0, "file", STATUS_SKIPPED, REASON_STORE_FILE))
    return _Loaded(data, modified=modified)


def modified_time(seconds: float) -> str:
    """A file's modification time as every output shows it: ISO 8601 in UTC, to the second (``…Z``).

    A date is no content: it is read from the file's inode, never from its
    bytes, so it may leave the extract store with the document it dates.
    A time outside what a date can hold (a forged inode) is the epoch.
    """
    try:
        moment = datetime.fromtimestamp(int(seconds), tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        moment = datetime.fromtimestamp(0, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _kind_by_name(rel: str) -> str:
    return readers.kind_for(rel, b"")
