"""The ``extract`` stage: every file under ``source.root`` into text in the private store.

The walk sees each file once, in path order. Each file's bytes are read
once; the sha256 of its raw path and its bytes is the file's **extract key**
and the name of its text, ``<out>/extract/<key>.txt``. The key is private to
the extract store: it is computed from unsanitized bytes, so it never leaves
``extract/`` (the document id that the later stages see is the sha256 of the
*sanitized* text, given by the sanitize stage).

No oracle of raw equality: the key holds the path, so two paths with the
same bytes are two texts, each read, timed, counted and kept like any other
file, and a file is reused from the last run only at its own path with its
own bytes. Someone who plants a guess of a victim's file in the root and
reads what the agent prints (summaries, ``--json``, stage lines, progress,
the report, how long it took) sees the same thing whether the guess holds
the victim's exact bytes or not. Summaries hold counts of files only; the
raw-side figures an operator may want (bytes read, contents reused, texts
dropped) go to ``extract/extract.figures.json`` (0600), never outside the
extract store.

Nothing that cannot be read stops the stage: it gets a row in
``extract/listing.jsonl`` with the reason, and the reason is counted in
``extract.summary.json``. Texts of files that left the source are removed
from the extract store; the sanitize stage removes its own stale documents.

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
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bastion_agent.core.budget import (
    COSTLY_REASONS,
    Budget,
    Call,
    WorkerPool,
    budget_of,
)
from bastion_agent.core.confine import NotRegular, SourceRoot
from bastion_agent.core.errors import ManifestError, StoreError
from bastion_agent.core.globs import GlobSet
from bastion_agent.core.layout import (
    OUT_MARKER,
    Layout,
    claim_out_dir,
    ensure_private_dir,
    read_jsonl,
    remove_stale_temps,
    sync_to_disk,
    write_jsonl,
    write_private,
    write_figures,
    write_summary,
)
from bastion_agent.core.progress import Progress, for_terminal
from bastion_agent.core.records import ListingRow as Row  # a line of extract/listing.jsonl
from bastion_agent.extracting import pdf as pdf_reasons, readers
from bastion_agent.extracting.formats import ocr
from bastion_agent.sanitizing import sanitize

STATUS_EXTRACTED = "extracted"
STATUS_SKIPPED = "skipped"

REASON_TOO_LARGE = "too large"
REASON_UNREADABLE = "unreadable"
REASON_EMPTY = readers.REASON_EMPTY
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

_DOC_TEXT = re.compile(r"[0-9a-f]{64}\.txt")
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
            _DOC_TEXT.fullmatch(name) and is_dir is False for name, is_dir in children)
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
    return _Loaded(data)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _kind_by_name(rel: str) -> str:
    return readers.kind_for(rel, b"")


# ---------------------------------------------------------------- the stage

@dataclass
class _Outcome:
    """What one document (one content) became; shared by every path holding it."""

    kind: str
    status: str
    reason: str | None
    reused: bool = False
    ocr_pages: list[int] | None = None


class _Previous:
    """What the last run left: which docs it extracted, as which kind, with which reader."""

    def __init__(self, layout: Layout):
        self.kinds: dict[str, str] = {}
        self.versions: dict[str, str] = {}
        self.ocr_pages: dict[str, list[int] | None] = {}
        try:
            for row in read_jsonl(layout.extract_listing):
                key = row.get("key") or row.get("doc")  # "doc": a listing written before the key was named so
                if row.get("status") == STATUS_EXTRACTED and key:
                    self.kinds[key] = row.get("kind")
                    self.ocr_pages[key] = row.get("ocr_pages")
            summary = json.loads(layout.summary_path("extract").read_text(encoding="utf-8"))
            self.versions = dict(summary.get("readers") or {})
        except (OSError, ValueError, TypeError, AttributeError):
            self.kinds, self.versions, self.ocr_pages = {}, {}, {}

    def reusable(self, key: str, kind: str, version: str | None, text_path: Path) -> bool:
        return (
            version is not None
            and self.kinds.get(key) == kind
            and self.versions.get(kind) == version
            and text_path.is_file()
        )


COSTLY_FILE = "costly.json"


class _Costly:
    """Contents that overran their budget: not tried again until their bytes (or the budget) change.

    Kept in the private extract store (``extract/costly.json``), keyed like
    the store itself, because the key is computed from unsanitized bytes.
    """

    def __init__(self, layout: Layout, budget: Budget):
        self.path = layout.extract_dir / COSTLY_FILE
        self.budget_key = budget.key()
        try:
            found = json.loads(self.path.read_text(encoding="utf-8"))
            self.known = {key: entry for key, entry in found.items()
                          if entry.get("budget") == self.budget_key and entry.get("reason") in COSTLY_REASONS}
        except (OSError, ValueError, AttributeError):
            self.known = {}
        self.seen: dict[str, dict] = {}

    def reason(self, key: str) -> str | None:
        entry = self.known.get(key)
        if entry is not None:
            self.seen[key] = entry
        return entry and entry["reason"]

    def remember(self, key: str, reason: str) -> None:
        self.seen[key] = {"reason": reason, "budget": self.budget_key}

    def save(self) -> None:
        """Only the contents still in the source are kept; nothing costly: no file."""
        if self.seen:
            write_private(self.path, json.dumps(self.seen, sort_keys=True, indent=1) + "\n")
        elif self.path.exists():
            _unlink(self.path)


LINKS_FILE = "linked.json"


class _Links:
    """Files of the output folder found under another name in the root (hard links), by inode.

    Kept in ``extract/linked.json`` so that such a file is still skipped after
    the store has replaced its own file (a new inode), leaving the link with
    the old content: a listing of raw paths and keys, say.
    """

    def __init__(self, layout: Layout):
        self.path = layout.extract_dir / LINKS_FILE
        try:
            self.known = {(int(dev), int(ino)) for dev, ino in json.loads(self.path.read_text(encoding="utf-8"))}
        except (OSError, ValueError, TypeError):
            self.known = set()

    def save(self, seen: set[tuple[int, int]]) -> None:
        """Only the links still in the root are kept; none: no file."""
        if seen:
            write_private(self.path, json.dumps(sorted(seen)) + "\n")
        elif self.path.exists():
            _unlink(self.path)


def run(manifest, layout: Layout, workers: int | None = None) -> dict:
    """Extract every selected file under ``manifest.source.root``; return the summary.

    Files are read in ``workers`` budgeted processes (default: one per core);
    their texts are written here, in path order, so the store and the
    listing do not depend on which worker finished first.
    """
    source = manifest.source
    claim_out_dir(layout.root)
    remove_stale_temps(layout.extract_dir)
    budget = budget_of(source)
    scans = _configure_ocr(source)
    links = _Links(layout)
    with SourceRoot(source.root) as root:
        selection = Selection(root.real, GlobSet(source.include), GlobSet(source.exclude), layout.root, links.known)
        entries, excluded = walk(root, selection)
        store = ensure_private_dir(layout.extract_dir)
        sweep = _Sweep(store, _Previous(layout), _Costly(layout, budget),
                       {kind: readers.version(kind) for kind in sorted(readers.KINDS)},
                       getattr(manifest, "sanitize", None))
        sweep.ocr_settings = scans
        with Progress("extract", len(entries), "files") as progress, WorkerPool(budget, workers) as pool:
            for job, answer in pool.ordered(sweep.jobs(entries, root, selection, source.max_file_bytes)):
                sweep.settle(job, answer)
                progress.advance()
    outcomes, rows, bytes_read, versions = sweep.outcomes, sweep.rows(), sweep.bytes_read, sweep.versions
    kept = {key for key, outcome in outcomes.items() if outcome.status == STATUS_EXTRACTED}
    removed = _drop_stale(layout, kept)
    sweep.costly.save()
    links.save(selection.links_seen)
    sync_to_disk()
    write_jsonl(layout.extract_listing, [row.listed() for row in rows])
    counts, figures = _counts(rows, outcomes, kept, removed, excluded, bytes_read, source.max_file_bytes, versions)
    write_figures(layout, "extract", figures)
    _note_missing_extra(counts)
    return write_summary(layout, "extract", counts, manifest.signature)


@dataclass
class _Job:
    """One entry of the walk on its way through the pool: its row, or the content (extract key) it holds."""

    rel: str
    row: Row | None = None
    key: str | None = None
    size: int = 0
    kind: str | None = None  # set when this job reads the content (the first path holding it)


class _Sweep:
    """The documents of one run: what to read, and what each read became."""

    def __init__(self, store: Path, previous: "_Previous", costly: _Costly, versions: dict, settings=None):
        self.store, self.previous, self.costly, self.versions = store, previous, costly, versions
        self.settings = settings  # [sanitize], for the byte-level scan the worker runs after reading
        self.outcomes: dict[str, _Outcome] = {}
        self.jobs_done: list[_Job] = []
        self.bytes_read = 0
        self.ocr_settings = None  # [source] ocr, ocr_languages, for the worker (formats/ocr.py)

    def jobs(self, entries, root, selection, max_bytes):
        """``(job, call)`` per entry; the call is None when nothing needs reading."""
        for entry in entries:
            if entry.row is not None:
                yield _Job(entry.rel, row=entry.row), None
                continue
            loaded = load(entry, root, selection, max_bytes)
            if loaded.row is not None:
                yield _Job(entry.rel, row=loaded.row), None
                continue
            data = loaded.data
            self.bytes_read += len(data)
            key = extract_key(entry.parts, data)
            job = _Job(entry.rel, key=key, size=len(data))
            kind = readers.kind_for(entry.rel, data[:8])
            decided = _extract_doc(key, kind, data, self.store, self.previous, self.versions.get(kind), self.costly,
                                   self.settings, max_bytes, self.ocr_settings)
            if isinstance(decided, _Outcome):
                self.outcomes[key] = decided
                yield job, None
            else:
                self.outcomes[key] = _Outcome(kind, STATUS_SKIPPED, None)  # a place holder until the answer
                job.kind = kind
                yield job, decided

    def settle(self, job: _Job, answer) -> None:
        self.jobs_done.append(job)
        if answer is not None:
            self.outcomes[job.key] = _stored(job.key, job.kind, answer, self.store, self.costly)

    def rows(self) -> list[Row]:
        rows = []
        for job in self.jobs_done:
            if job.row is not None:
                rows.append(job.row)
            else:
                outcome = self.outcomes[job.key]
                rows.append(Row(job.rel, job.key, job.size, outcome.kind, outcome.status, outcome.reason,
                                outcome.ocr_pages))
        return rows


def _extract_doc(key: str, kind: str, data: bytes, store: Path, previous: "_Previous", version, costly: _Costly,
                 settings=None, max_bytes: int | None = None, ocr_settings=None):
    """What to do with one content: an ``_Outcome`` when it is settled without reading
    (empty, reused, known too costly), else the budgeted ``Call`` that reads it."""
    if not data:
        return _Outcome(kind, STATUS_SKIPPED, REASON_EMPTY)
    text_path = Layout.doc_text_path(store, key)
    if previous.reusable(key, kind, version, text_path):
        return _Outcome(kind, STATUS_EXTRACTED, None, reused=True, ocr_pages=previous.ocr_pages.get(key))
    known = costly.reason(key) or readers.unavailable(kind)
    if known:
        return _Outcome(kind, STATUS_SKIPPED, known)
    return Call("read", (kind, data, settings, max_bytes, ocr_settings), len(data))  # max_bytes also bounds what a .gz unpacks to


def _stored(key: str, kind: str, answer, store: Path, costly: _Costly) -> _Outcome:
    """Store what the worker read (or count why it could not)."""
    if answer.reason is not None:  # over budget: remembered, so the next sweep does not pay again
        costly.remember(key, answer.reason)
        return _Outcome(kind, STATUS_SKIPPED, answer.reason)
    reason = answer.header.get("reason") or (readers.REASON_DAMAGED if "error" in answer.header else None)
    if reason is not None:
        if reason == readers.REASON_BINARY:
            kind = "binary"  # a file without a telling name that turned out not to be text
        return _Outcome(kind, STATUS_SKIPPED, str(reason))
    try:
        write_private(Layout.doc_text_path(store, key), answer.data, durable=False)
    except OSError as exc:
        raise StoreError(f"cannot write the extract store {store}: {exc.strerror or exc}") from None
    pages = answer.header.get("ocr_pages")
    return _Outcome(kind, STATUS_EXTRACTED, None, ocr_pages=pages if isinstance(pages, list) else None)


def _drop_stale(layout: Layout, kept: set[str]) -> int:
    """Remove the texts of contents no longer extracted from the extract store; return how many.

    The sanitized store is keyed by the sanitized text, which only the
    sanitize stage knows: it removes its own stale documents.
    """
    removed = 0
    store = layout.extract_dir
    for name in os.listdir(store):
        if _DOC_TEXT.fullmatch(name) and name[:-4] not in kept:
            _unlink(store / name)
            removed += 1
    return removed  # temp files of a killed run went at the start (layout.remove_stale_temps)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise StoreError(f"cannot remove {path} from the store: {exc.strerror or exc}") from None


def _counts(rows, outcomes, kept, removed, excluded, bytes_read, max_bytes, versions) -> tuple[dict, dict]:
    """``(summary counts, private figures)``.

    The summary counts files (seen, read, skipped, by kind and reason) and
    nothing measured from raw bytes: a byte total, with the sanitized texts
    and the placeholders' lengths, gives back the length of what sanitize
    removed. Those figures, and the ones keyed by raw contents (reused,
    dropped), are the private figures, written inside ``extract/``.
    """
    by_kind: dict[str, Counter] = {}
    for row in rows:
        tally = by_kind.setdefault(row.kind, Counter())
        tally["files"] += 1
        tally[row.status] += 1
        tally["bytes"] += row.size
    counts = {
        "files": len(rows),
        "extracted": sum(row.status == STATUS_EXTRACTED for row in rows),
        "skipped": sum(row.status == STATUS_SKIPPED for row in rows),
        "skipped_by_reason": dict(sorted(Counter(row.reason for row in rows if row.reason).items())),
        "by_kind": {
            kind: {key: tally.get(key, 0) for key in ("files", STATUS_EXTRACTED, STATUS_SKIPPED)}
            for kind, tally in sorted(by_kind.items())
        },
        "excluded": excluded,
        "max_file_bytes": max_bytes,
        "readers": {kind: version for kind, version in versions.items() if version is not None},
        "unread_for_ocr": _unread_for_ocr(rows),
    }
    figures = {
        "bytes_read": bytes_read,
        "bytes_by_kind": {kind: tally.get("bytes", 0) for kind, tally in sorted(by_kind.items())},
        "texts": len(kept),
        "reused": sum(1 for key in kept if outcomes[key].reused),
        "removed": removed,
    }
    return counts, figures


def _configure_ocr(source):
    """``[source] ocr`` and ``ocr_languages`` for this run; a language Tesseract lacks is refused by name."""
    settings = ocr.settings_of(source)
    ocr.configure(settings)
    if settings.enabled and settings.languages and ocr.available():
        missing = [name for name in settings.languages if name not in ocr.installed_languages()]
        if missing:
            raise ManifestError(f"[source] ocr_languages: {', '.join(missing)} not installed for Tesseract "
                                f"(installed: {', '.join(ocr.installed_languages())}; "
                                f"Debian: apt-get install tesseract-ocr-{missing[0]})")
    return settings


def _unread_for_ocr(rows) -> int:
    """Files left unread because OCR is missing: images, and PDFs with no page of text (a count of files)."""
    return sum(1 for row in rows if row.reason == ocr.REASON_NOT_INSTALLED
               or (row.reason == pdf_reasons.REASON_NO_TEXT and ocr.unavailable() == ocr.REASON_NOT_INSTALLED))


def _note_missing_extra(counts: dict) -> None:
    """Say once on stderr that PDFs were skipped for want of the extra: easy to miss in a sweep."""
    from bastion_agent.extracting.pdf import REASON_NOT_INSTALLED

    missing = counts["skipped_by_reason"].get(REASON_NOT_INSTALLED)
    if missing:
        print(f"bastion_agent extract: note: {missing} PDF file(s) skipped: {REASON_NOT_INSTALLED}", file=sys.stderr)
    if counts.get("unread_for_ocr"):
        print(f"bastion_agent extract: note: {counts['unread_for_ocr']} scanned file(s) left unread: "
              f"{ocr.REASON_NOT_INSTALLED}", file=sys.stderr)


# ---------------------------------------------------------------- report

REPORT_MAX_FOLDERS = 40


def print_report(layout: Layout, stream=None, settings=None, files: bool = False) -> None:
    """Print what extract read and skipped, and why: by kind, by reason, by folder (and, with
    ``files``, each skipped file). Every path shown passes through ``sanitize.sanitize_path``
    with the manifest's ``settings``: a folder or file name can itself be personal data."""
    stream = stream if stream is not None else sys.stdout
    try:
        rows = read_jsonl(layout.extract_listing)
        summary = json.loads(layout.summary_path("extract").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StoreError(f"no extract listing in {layout.root}: run extract first") from None
    except (OSError, ValueError) as exc:
        raise StoreError(f"cannot read the extract listing in {layout.root}: {exc}") from None
    for line in report_lines(rows, summary, settings, files):
        print(line, file=stream)


def report_lines(rows: list[dict], summary: dict, settings=None, files: bool = False) -> list[str]:
    """The report as lines of text (kept apart from printing so it is easy to test); sanitized paths only."""
    rows = [{**row, "path": sanitize.sanitize_path(row["path"], settings)} for row in rows]
    lines = [
        f"extract: {summary.get('files', len(rows))} files seen, {summary.get('extracted', 0)} extracted, "
        f"{summary.get('skipped', 0)} skipped; {summary.get('excluded', 0)} excluded by globs",
        "",
        "By kind",
    ]
    kinds = summary.get("by_kind", {})
    lines += _table(
        ["kind", "files", "extracted", "skipped"],
        [[kind, t["files"], t["extracted"], t["skipped"]] for kind, t in kinds.items()],
    )
    reasons = summary.get("skipped_by_reason", {})
    lines += ["", "Skipped, by reason"]
    lines += _table(["reason", "files"], [[reason, count] for reason, count in reasons.items()]) if reasons else ["(nothing skipped)"]
    lines += ["", "By folder"] + _table(["folder", "files", "extracted", "skipped", "skipped because"], _folder_rows(rows))
    if files:
        skipped = [[row["path"], row["kind"], row["reason"] or "-"] for row in rows if row["status"] == STATUS_SKIPPED]
        lines += ["", "Skipped files"]
        lines += _table(["path", "kind", "reason"], sorted(skipped)) if skipped else ["(nothing skipped)"]
    return lines


def _folder_rows(rows: list[dict]) -> list[list]:
    """One line per folder, at the deepest level that fits in REPORT_MAX_FOLDERS lines.

    ``rows`` hold sanitized paths already (``report_lines``), so the folders cut from them are too."""
    depth = max((row["path"].count("/") for row in rows), default=0)
    while depth > 0 and len({_folder(row["path"], depth) for row in rows}) > REPORT_MAX_FOLDERS:
        depth -= 1
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(_folder(row["path"], depth), []).append(row)
    table = []
    for folder, members in sorted(groups.items()):
        reasons = Counter(row["reason"] for row in members if row["status"] == STATUS_SKIPPED)
        why = ", ".join(f"{reason} {count}" for reason, count in sorted(reasons.items(), key=lambda item: (-item[1], item[0])))
        extracted = sum(row["status"] == STATUS_EXTRACTED for row in members)
        table.append([folder, len(members), extracted, len(members) - extracted, why or "-"])
    return table


def _folder(path: str, depth: int) -> str:
    parts = path.split("/")[:-1][:depth]
    return "/".join(parts) + "/" if parts else "./"


def _table(header: list[str], body: list[list]) -> list[str]:
    cells = [[str(value) for value in row] for row in [header] + body]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]

    def fmt(row):
        return "  ".join(value.ljust(widths[i]) if i == 0 or i == len(row) - 1 else value.rjust(widths[i])
                         for i, value in enumerate(row)).rstrip()

    return [fmt(cells[0]), fmt(["-" * w for w in widths])] + [fmt(row) for row in cells[1:]]
