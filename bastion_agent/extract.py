"""The ``extract`` stage: every file under ``source.root`` into text in the private store.

The walk sees each file once, in path order. Each file's bytes are read
once; their sha256 is the document id and the name of its text,
``<out>/extract/<doc>.txt``. Identical content at several paths is one
document, read once. Nothing that cannot be read stops the stage: it gets a
row in ``extract/listing.jsonl`` with the reason, and the reason is counted
in ``extract.summary.json``. Documents that left the source are removed from
both the extract and the sanitized store, so a deleted file leaves no text
behind.

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
from dataclasses import asdict, dataclass
from pathlib import Path

from . import readers
from .errors import ManifestError, StoreError
from .layout import Layout, ensure_private_dir, read_jsonl, sync_to_disk, write_jsonl, write_private, write_summary
from .progress import Progress

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

_DOC_TEXT = re.compile(r"[0-9a-f]{64}\.txt")
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True)
class Row:
    """One file seen: a line of ``extract/listing.jsonl``."""

    path: str
    doc: str | None
    size: int
    kind: str
    status: str
    reason: str | None = None


# ---------------------------------------------------------------- globs

class GlobSet:
    """Include/exclude patterns, relative to the source root, ``/``-separated.

    - ``*`` matches within one path segment, ``?`` one character, ``[abc]``
      and ``[!abc]`` a character class; ``**`` as a whole segment matches any
      number of segments, including none (``**/x`` is ``x`` at any depth,
      ``a/**`` is ``a`` and everything below it).
    - A pattern without ``/`` matches a name at any depth, as if it began
      with ``**/`` (``*.pdf`` is every PDF); a pattern with a ``/`` matches
      the whole path from the root (``reports/*.pdf`` only directly in
      ``reports``). A leading ``/`` anchors a name at the root (``/todo.txt``);
      a trailing ``/`` means the folder and everything below it (``build/``
      is every folder named build, ``/build/`` only the top one).
    - Matching is case-sensitive. An exclude pattern that matches a folder
      excludes the folder: it is not entered at all.
    """

    def __init__(self, patterns) -> None:
        self.patterns = tuple(patterns)
        self._compiled = [_compile(pattern) for pattern in self.patterns]

    def matches(self, path: str) -> bool:
        return any(regex.fullmatch(path) for regex in self._compiled)


def _compile(pattern: str) -> re.Pattern:
    text = pattern.strip()
    if not text or text == "/":
        raise ManifestError(f"[source] glob {pattern!r} is empty; use \"**\" for everything")
    if "/" not in text.rstrip("/") and text != "**":
        text = "**/" + text  # a bare name matches at any depth
    text = text.lstrip("/")
    if text.endswith("/"):
        text += "**"
    segments = [segment for segment in text.split("/") if segment]
    regex = ""
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            if not last:
                regex += "(?:[^/]+/)*"
            elif regex.endswith("/") and not regex.endswith(")*"):
                regex = regex[:-1] + "(?:/.*)?"  # "a/**": a itself and everything below
            else:
                regex += ".*"
        else:
            regex += _segment_regex(segment) + ("" if last else "/")
    return re.compile(regex, re.DOTALL)


def _segment_regex(segment: str) -> str:
    out, i = [], 0
    while i < len(segment):
        char = segment[i]
        if char == "*":
            while i + 1 < len(segment) and segment[i + 1] == "*":
                i += 1
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = segment.find("]", i + 2 if segment[i + 1:i + 2] in ("!", "]") else i + 1)
            if end < 0:
                out.append(re.escape(char))
            else:
                body = segment[i + 1:end]
                negate = body.startswith("!")
                body = body[1:] if negate else body
                escaped = "".join(c if c == "-" else re.escape(c) for c in body)
                out.append("[" + ("^/" if negate else "") + escaped + "]")
                i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


# ---------------------------------------------------------------- walk

@dataclass(frozen=True)
class _Entry:
    """Something the walk found: a file to read, or a row already decided."""

    rel: str
    path: Path
    row: Row | None = None


class Selection:
    """Which paths under the (real) root the stage reads: the globs, minus the output folder."""

    def __init__(self, root_real: str, include: GlobSet, exclude: GlobSet, out: Path | None = None):
        self.root_real = root_real
        self.include, self.exclude = include, exclude
        self.out_real = os.path.realpath(out) if out is not None else None

    def enters(self, rel: str, path: str) -> bool:
        """Whether the walk goes into the folder ``rel``."""
        return not self.exclude.matches(rel) and not self._is_out(path)

    def selects(self, rel: str) -> bool:
        """Whether the file ``rel`` is read (its folders are assumed entered)."""
        return self.include.matches(rel) and not self.exclude.matches(rel)

    def reaches(self, target_real: str) -> bool:
        """Whether a link may be read through to ``target_real``: inside the root, and
        a file the walk itself would read (so a link cannot get round the globs)."""
        if not _inside(target_real, self.root_real) or target_real == self.root_real:
            return False
        rel = Path(os.path.relpath(target_real, self.root_real)).as_posix()
        parts = rel.split("/")
        folders_ok = all(
            self.enters("/".join(parts[:depth]), os.path.join(self.root_real, *parts[:depth]))
            for depth in range(1, len(parts))
        )
        return folders_ok and self.selects(rel)

    def _is_out(self, path: str) -> bool:
        return self.out_real is not None and os.path.realpath(path) == self.out_real


def walk(selection: Selection) -> tuple[list[_Entry], int]:
    """Entries under the root that the selection reads, in path order, and how many files it excluded.

    The output folder is never entered, even when it lies inside the root,
    so the agent never reads its own stores.
    """
    entries: list[_Entry] = []
    excluded = 0
    seen_dirs: set[tuple[int, int]] = set()
    pending = [(Path(selection.root_real), "")]
    while pending:
        folder, prefix = pending.pop()
        try:
            info = os.stat(folder)
            if (info.st_dev, info.st_ino) in seen_dirs:  # a bind-mount loop
                continue
            seen_dirs.add((info.st_dev, info.st_ino))
            with os.scandir(folder) as scan:
                children = sorted(scan, key=lambda item: item.name)
        except OSError:
            rel = prefix.rstrip("/") or "."
            entries.append(_Entry(rel, folder, Row(rel, None, 0, "folder", STATUS_SKIPPED, REASON_UNREADABLE)))
            continue
        for child in children:
            rel = prefix + _display(child.name)
            try:
                is_dir = child.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            if is_dir:
                if selection.enters(rel, child.path):
                    pending.append((Path(child.path), rel + "/"))
            elif selection.selects(rel):
                entries.append(_Entry(rel, Path(child.path)))
            else:
                excluded += 1
    entries.sort(key=lambda entry: entry.rel)
    return entries, excluded


def _display(name: str) -> str:
    """A name as text: bytes that are not UTF-8 are shown as \\xNN escapes."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


# ---------------------------------------------------------------- reading one file

@dataclass(frozen=True)
class _Loaded:
    """A file's bytes, or the row that says why they were not read."""

    data: bytes | None
    row: Row | None = None


def load(entry: _Entry, selection: Selection, max_bytes: int) -> _Loaded:
    """Read a file's bytes once, following a link only to a file the walk would read itself."""
    rel = entry.rel
    try:
        info = os.lstat(entry.path)
    except OSError:
        return _Loaded(None, Row(rel, None, 0, "file", STATUS_SKIPPED, REASON_UNREADABLE))
    target = entry.path
    if stat.S_ISLNK(info.st_mode):
        target_text = os.path.realpath(entry.path)
        if not _inside(target_text, selection.root_real):
            return _Loaded(None, Row(rel, None, 0, "link", STATUS_SKIPPED, REASON_LINK_OUTSIDE))
        try:
            info = os.stat(target_text, follow_symlinks=False)
        except OSError:
            return _Loaded(None, Row(rel, None, 0, "link", STATUS_SKIPPED, REASON_BROKEN_LINK))
        if stat.S_ISDIR(info.st_mode):
            return _Loaded(None, Row(rel, None, 0, "link", STATUS_SKIPPED, REASON_FOLDER_LINK))
        if not selection.reaches(target_text):
            return _Loaded(None, Row(rel, None, 0, "link", STATUS_SKIPPED, REASON_LINK_EXCLUDED))
        target = Path(target_text)
    if not stat.S_ISREG(info.st_mode):
        return _Loaded(None, Row(rel, None, 0, "special", STATUS_SKIPPED, REASON_SPECIAL))
    if info.st_size > max_bytes:
        return _Loaded(None, Row(rel, None, info.st_size, _kind_by_name(rel), STATUS_SKIPPED, REASON_TOO_LARGE))
    try:
        fd = os.open(target, _OPEN_FLAGS)
    except OSError:
        return _Loaded(None, Row(rel, None, info.st_size, _kind_by_name(rel), STATUS_SKIPPED, REASON_UNREADABLE))
    with os.fdopen(fd, "rb") as handle:
        opened = os.fstat(handle.fileno())
        if not stat.S_ISREG(opened.st_mode):  # swapped between the check and the open
            return _Loaded(None, Row(rel, None, 0, "special", STATUS_SKIPPED, REASON_SPECIAL))
        try:
            data = handle.read(max_bytes + 1)
        except OSError:
            return _Loaded(None, Row(rel, None, opened.st_size, _kind_by_name(rel), STATUS_SKIPPED, REASON_UNREADABLE))
    if len(data) > max_bytes:  # it grew after the check
        return _Loaded(None, Row(rel, None, len(data), _kind_by_name(rel), STATUS_SKIPPED, REASON_TOO_LARGE))
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


class _Previous:
    """What the last run left: which docs it extracted, as which kind, with which reader."""

    def __init__(self, layout: Layout):
        self.kinds: dict[str, str] = {}
        self.versions: dict[str, str] = {}
        try:
            for row in read_jsonl(layout.extract_listing):
                if row.get("status") == STATUS_EXTRACTED and row.get("doc"):
                    self.kinds[row["doc"]] = row.get("kind")
            summary = json.loads(layout.summary_path("extract").read_text(encoding="utf-8"))
            self.versions = dict(summary.get("readers") or {})
        except (OSError, ValueError, TypeError, AttributeError):
            self.kinds, self.versions = {}, {}

    def reusable(self, doc: str, kind: str, version: str | None, text_path: Path) -> bool:
        return (
            version is not None
            and self.kinds.get(doc) == kind
            and self.versions.get(kind) == version
            and text_path.is_file()
        )


def run(manifest, layout: Layout) -> dict:
    """Extract every selected file under ``manifest.source.root``; return the summary."""
    source = manifest.source
    selection = Selection(os.path.realpath(source.root), GlobSet(source.include), GlobSet(source.exclude), layout.root)
    entries, excluded = walk(selection)
    store = ensure_private_dir(layout.extract_dir)
    previous = _Previous(layout)
    versions = {kind: readers.version(kind) for kind in sorted(readers.KINDS)}
    outcomes: dict[str, _Outcome] = {}
    rows: list[Row] = []
    bytes_read = 0
    with Progress("extract", len(entries), "files") as progress:
        for entry in entries:
            row, size = _process(entry, selection, source.max_file_bytes, store, previous, versions, outcomes)
            rows.append(row)
            bytes_read += size
            progress.advance()
    kept = {doc for doc, outcome in outcomes.items() if outcome.status == STATUS_EXTRACTED}
    removed = _drop_stale(layout, kept)
    sync_to_disk()
    write_jsonl(layout.extract_listing, [asdict(row) for row in rows])
    counts = _counts(rows, outcomes, kept, removed, excluded, bytes_read, source.max_file_bytes, versions)
    _note_missing_extra(counts)
    return write_summary(layout, "extract", counts, manifest.signature)


def _process(entry, selection, max_bytes, store, previous, versions, outcomes) -> tuple[Row, int]:
    """The listing row of one entry, and how many bytes were read for it."""
    if entry.row is not None:
        return entry.row, 0
    loaded = load(entry, selection, max_bytes)
    if loaded.row is not None:
        return loaded.row, 0
    data = loaded.data
    doc = hashlib.sha256(data).hexdigest()
    outcome = outcomes.get(doc)
    if outcome is None:
        kind = readers.kind_for(entry.rel, data[:8])
        outcome = outcomes[doc] = _extract_doc(doc, kind, data, store, previous, versions.get(kind), max_bytes)
    return Row(entry.rel, doc, len(data), outcome.kind, outcome.status, outcome.reason), len(data)


def _extract_doc(doc: str, kind: str, data: bytes, store: Path, previous: _Previous, version,
                 max_bytes: int) -> _Outcome:
    """Read one content as ``kind`` and store its text (or reuse the stored one)."""
    if not data:
        return _Outcome(kind, STATUS_SKIPPED, REASON_EMPTY)
    text_path = Layout.doc_text_path(store, doc)
    if previous.reusable(doc, kind, version, text_path):
        return _Outcome(kind, STATUS_EXTRACTED, None, reused=True)
    reading = readers.read(kind, data, max_bytes)  # max_bytes also bounds what a .gz may unpack to
    if reading.text is None:
        if reading.reason == readers.REASON_BINARY:
            kind = "binary"  # a file without a telling name that turned out not to be text
        return _Outcome(kind, STATUS_SKIPPED, reading.reason)
    try:
        write_private(text_path, reading.text, durable=False)
    except OSError as exc:
        raise StoreError(f"cannot write the extract store {store}: {exc.strerror or exc}") from None
    return _Outcome(kind, STATUS_EXTRACTED, None)


def _drop_stale(layout: Layout, kept: set[str]) -> int:
    """Remove the texts of documents no longer extracted, from both stores; return how many docs."""
    removed: set[str] = set()
    for store in (layout.extract_dir, layout.sanitized_dir):
        try:
            names = os.listdir(store)
        except FileNotFoundError:
            continue
        for name in names:
            doc = name[:-4]
            if _DOC_TEXT.fullmatch(name) and doc not in kept:
                _unlink(store / name)
                removed.add(doc)
            elif store == layout.extract_dir and name.startswith(".") and name.endswith(".tmp"):
                _unlink(store / name)  # left by a run that was killed mid-write
    return len(removed)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise StoreError(f"cannot remove {path} from the store: {exc.strerror or exc}") from None


def _counts(rows, outcomes, kept, removed, excluded, bytes_read, max_bytes, versions) -> dict:
    by_kind: dict[str, Counter] = {}
    for row in rows:
        tally = by_kind.setdefault(row.kind, Counter())
        tally["files"] += 1
        tally[row.status] += 1
        tally["bytes"] += row.size
    return {
        "files": len(rows),
        "extracted": sum(row.status == STATUS_EXTRACTED for row in rows),
        "skipped": sum(row.status == STATUS_SKIPPED for row in rows),
        "skipped_by_reason": dict(sorted(Counter(row.reason for row in rows if row.reason).items())),
        "by_kind": {
            kind: {key: tally.get(key, 0) for key in ("files", STATUS_EXTRACTED, STATUS_SKIPPED, "bytes")}
            for kind, tally in sorted(by_kind.items())
        },
        "bytes_read": bytes_read,
        "documents": len(kept),
        "reused": sum(1 for doc in kept if outcomes[doc].reused),
        "removed": removed,
        "excluded": excluded,
        "max_file_bytes": max_bytes,
        "readers": {kind: version for kind, version in versions.items() if version is not None},
    }


def _note_missing_extra(counts: dict) -> None:
    """Say once on stderr that PDFs were skipped for want of the extra: easy to miss in a sweep."""
    from .pdf import REASON_NOT_INSTALLED

    missing = counts["skipped_by_reason"].get(REASON_NOT_INSTALLED)
    if missing:
        print(f"bastion_agent extract: note: {missing} PDF file(s) skipped: {REASON_NOT_INSTALLED}", file=sys.stderr)


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
    from .sanitize import sanitize_path

    rows = [{**row, "path": sanitize_path(row["path"], settings)} for row in rows]
    mb = summary.get("bytes_read", 0) / 1e6
    lines = [
        f"extract: {summary.get('files', len(rows))} files seen, {summary.get('extracted', 0)} extracted "
        f"({summary.get('documents', 0)} documents), {summary.get('skipped', 0)} skipped; {mb:.1f} MB read; "
        f"{summary.get('excluded', 0)} excluded by globs; {summary.get('removed', 0)} stale documents removed",
        "",
        "By kind",
    ]
    kinds = summary.get("by_kind", {})
    lines += _table(
        ["kind", "files", "extracted", "skipped", "MB"],
        [[kind, t["files"], t["extracted"], t["skipped"], f"{t['bytes'] / 1e6:.1f}"] for kind, t in kinds.items()],
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
    """One line per folder, at the deepest level that fits in REPORT_MAX_FOLDERS lines."""
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
