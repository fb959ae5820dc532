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

Which files are read, and their bytes, is the walk's (``walk.py``); which
reader reads a file, the format registry's (``formats/registry.py``, through
``readers.py``); reading runs in budgeted workers (``reading.py``); the
``--report`` is ``report.py``'s. This module runs the stage: what to read
again or reuse, what each read became, the store, the listing and the counts.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Collection

from bastion_agent.core.budget import (
    COSTLY_REASONS,
    Budget,
    Call,
    KeptPool,
    Task,
    budget_of,
    pool_for,
)
from bastion_agent.core import catalogue
from bastion_agent.core.confine import SourceRoot
from bastion_agent.core.errors import ManifestError, StoreError
from bastion_agent.core.globs import GlobSet
from bastion_agent.core.layout import (
    Layout,
    claim_out_dir,
    ensure_private_dir,
    remove_stale_temps,
    sync_to_disk,
    write_private,
    write_figures,
    write_summary,
)
from bastion_agent.core.progress import Progress, for_terminal
from bastion_agent.core.records import ListingRow as Row  # a line of extract/listing.jsonl
from bastion_agent.extracting import pdf as pdf_reasons, readers
from bastion_agent.extracting.formats import ocr
from bastion_agent.extracting.report import print_report, report_lines  # noqa: F401  (the stage's --report)
from bastion_agent.extracting.walk import (
    DOC_TEXT_NAME,
    STATUS_EXTRACTED,
    STATUS_SKIPPED,
    Selection,
    extract_key,
    load,
    walk,
)

REASON_EMPTY = readers.REASON_EMPTY


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
        self.by_path: dict[str, Row | None] = {}  # extracted rows by path; None where two rows share a shown path
        try:
            for row in catalogue.read_extract_listing(layout.extract_listing):  # an older agent's "doc" is read as the key
                if row.status == STATUS_EXTRACTED and row.key:
                    self.kinds[row.key] = row.kind
                    self.ocr_pages[row.key] = row.ocr_pages
                    self.by_path[row.path] = None if row.path in self.by_path else row
            summary = json.loads(layout.summary_path("extract").read_text(encoding="utf-8"))
            self.versions = dict(summary.get("readers") or {})
        except (OSError, ValueError, TypeError, AttributeError, StoreError):
            self.kinds, self.versions, self.ocr_pages, self.by_path = {}, {}, {}, {}

    def reusable(self, key: str, kind: str, version: str | None, text_path: Path) -> bool:
        return (
            version is not None
            and self.kinds.get(key) == kind
            and self.versions.get(kind) == version
            and text_path.is_file()
        )

    def unchanged_row(self, rel: str, versions: dict, store: Path) -> Row | None:
        """The last run's row of a file its caller knows unchanged, when it can stand without reading the file:
        a text extracted by the same reader version and still in the store (anything else is read again)."""
        row = self.by_path.get(rel)
        if row is None or not DOC_TEXT_NAME.fullmatch(f"{row.key}.txt"):
            return None
        return row if self.reusable(row.key, row.kind, versions.get(row.kind), Layout.doc_text_path(store, row.key)) else None


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


def run(manifest, layout: Layout, workers: int | None = None, pool: KeptPool | None = None,
        reread: Collection[str] | None = None) -> dict:
    """Extract every selected file under ``manifest.source.root``; return the summary.

    Files are read in ``workers`` budgeted processes (default: one per core),
    or in ``pool`` when it serves this budget (the watcher keeps one between
    cycles); their texts are written here, in path order, so the store and the
    listing do not depend on which worker finished first.

    ``reread``: the files (their raw paths from the root, ``/``-joined) that
    may have changed since the listing was written, when the caller knows
    (the watcher, from its ``stat`` snapshots); every other file whose last
    row says it was extracted, by the current reader, into a text still in
    the store keeps that row without being opened. None: every file is read.
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
        costly = _Costly(layout, budget)  # before the listing is read: the walk goes down once, not back up
        sweep = _Sweep(store, _Previous(layout), costly,
                       readers.versions(),
                       getattr(manifest, "sanitize", None))
        sweep.ocr_settings = scans
        sweep.reread = None if reread is None else set(reread)
        with Progress("extract", len(entries), "files") as progress, pool_for(budget, pool, workers) as pool:
            for job, answer in pool.ordered(sweep.jobs(entries, root, selection, source.max_file_bytes)):
                sweep.settle(job, answer)
                progress.advance()
    outcomes, rows, bytes_read, versions = sweep.outcomes, sweep.rows(), sweep.bytes_read, sweep.versions
    kept = {key for key, outcome in outcomes.items() if outcome.status == STATUS_EXTRACTED}
    removed = _drop_stale(store, kept)
    sweep.costly.save()
    links.save(selection.links_seen)
    sync_to_disk()
    catalogue.write_extract_listing(layout.extract_listing, rows)
    counts, figures = _counts(rows, outcomes, kept, removed, excluded, bytes_read, source.max_file_bytes, versions,
                              sweep.files_read)
    write_figures(layout, "extract", figures)
    counts["skipped_files"] = _skipped_files(rows, getattr(manifest, "sanitize", None))
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
    modified: str | None = None  # the file's modification time, ISO 8601 UTC


class _Sweep:
    """The documents of one run: what to read, and what each read became."""

    def __init__(self, store: Path, previous: "_Previous", costly: _Costly, versions: dict, settings=None):
        self.store, self.previous, self.costly, self.versions = store, previous, costly, versions
        self.settings = settings  # [sanitize], for the byte-level scan the worker runs after reading
        self.outcomes: dict[str, _Outcome] = {}
        self.jobs_done: list[_Job] = []
        self.bytes_read = 0
        self.files_read = 0  # files opened and read (the rest were settled by the walk or kept unchanged)
        self.ocr_settings = None  # [source] ocr, ocr_languages, for the worker (formats/ocr.py)
        self.reread: set[str] | None = None  # run(reread=...): only these may have changed

    def jobs(self, entries, root, selection, max_bytes):
        """``(job, call)`` per entry; the call is None when nothing needs reading."""
        for entry in entries:
            if entry.row is not None:
                yield _Job(entry.rel, row=entry.row), None
                continue
            kept = self._unchanged(entry)
            if kept is not None:
                self.outcomes[kept.key] = _Outcome(kept.kind, STATUS_EXTRACTED, None, reused=True,
                                                   ocr_pages=kept.ocr_pages)
                yield _Job(entry.rel, key=kept.key, size=kept.size, modified=kept.modified), None
                continue
            self.files_read += 1
            loaded = load(entry, root, selection, max_bytes)
            if loaded.row is not None:
                yield _Job(entry.rel, row=loaded.row), None
                continue
            data = loaded.data
            self.bytes_read += len(data)
            key = extract_key(entry.parts, data)
            job = _Job(entry.rel, key=key, size=len(data), modified=loaded.modified)
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

    def _unchanged(self, entry) -> Row | None:
        """The last row of a file the caller said is unchanged, when it can be kept without reading the file.

        Only for a path whose names are text (``rel`` is its raw names): the watcher's globs and a listing's
        shown path could take a name of other bytes otherwise, so such a file is read every time."""
        raw = "/".join(entry.parts)
        if self.reread is None or raw in self.reread or raw != entry.rel:
            return None
        return self.previous.unchanged_row(entry.rel, self.versions, self.store)

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
                                outcome.ocr_pages, job.modified))
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
    return Call(Task.READ, (kind, data, settings, max_bytes, ocr_settings), len(data))  # max_bytes also bounds what a .gz unpacks to


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


def _drop_stale(store: Path, kept: set[str]) -> int:
    """Remove the texts of contents no longer extracted from the extract ``store``; return how many.

    The sanitized store is keyed by the sanitized text, which only the
    sanitize stage knows: it removes its own stale documents.
    """
    removed = 0
    for name in os.listdir(store):
        if DOC_TEXT_NAME.fullmatch(name) and name[:-4] not in kept:
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


def _skipped_files(rows, settings) -> list[dict]:
    """The skipped files by sanitized path and reason (``sanitizing.skipped``), as ``extract --report --files`` shows them."""
    from bastion_agent.sanitizing import scanner, skipped

    return skipped.shown(((row.path, row.reason) for row in rows if row.status == STATUS_SKIPPED),
                         lambda name: scanner.sanitize_path(name, settings))


def _counts(rows, outcomes, kept, removed, excluded, bytes_read, max_bytes, versions, files_read) -> tuple[dict, dict]:
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
        "files_read": files_read,
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
    return sum(1 for row in rows if ocr.is_missing_reason(row.reason)
               or (row.reason == pdf_reasons.REASON_NO_TEXT and ocr.is_missing_reason(ocr.unavailable())))


def _note_missing_extra(counts: dict) -> None:
    """Say once on stderr that PDFs were skipped for want of the extra: easy to miss in a sweep."""
    from bastion_agent.extracting.pdf import REASON_NOT_INSTALLED

    missing = counts["skipped_by_reason"].get(REASON_NOT_INSTALLED)
    if missing:
        print(f"bastion_agent extract: note: {missing} PDF file(s) skipped: {REASON_NOT_INSTALLED}", file=sys.stderr)
    if counts.get("unread_for_ocr"):
        print(f"bastion_agent extract: note: {counts['unread_for_ocr']} scanned file(s) left unread: "
              f"{ocr.not_installed(pdf=True)}", file=sys.stderr)
