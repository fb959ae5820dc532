"""The catalogue: the extract listing and the sanitized listing, read and written as records.

Two JSON-lines files say what the agent knows of the files it swept:
``extract/listing.jsonl`` (private: one ``ListingRow`` per file extract met)
and ``sanitized/listing.jsonl`` (one ``Document`` per sanitized text). Every
stage reads and writes them here, as records, so no stage parses their lines
again, and a line that is not what the record says is refused in one place,
with one line that names the file and the line.

Reading is strict where a wrong value could not be used (a document id, its
paths, a size) and fails closed where the listing carries access labels or
derived maps: a group name that is not one labels nothing, a page map of the
wrong shape is no page map, an unreadable time is unknown. These are the
field's declared check (``metadata["check"]``, a name in ``CHECKS``); a field
without one is checked against its type. A key the record does not know (a
newer agent's) is ignored, and a missing one takes the field's default (an
older agent's), so stores written before either listing grew a field still
read.

``merge`` turns per-file values into a document by each field's declared rule
(``records.MERGE_RULES``): the rule sits beside the field, never here.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import types
import typing
from pathlib import Path
from typing import Iterable

from bastion_agent.core.access import is_group_name
from bastion_agent.core.dates import STAMP
from bastion_agent.core.errors import StoreError
from bastion_agent.core.layout import write_jsonl
from bastion_agent.core import records
from bastion_agent.core.records import Document, ListingRow

DOC_ID = re.compile(r"[0-9a-f]{64}")
# A page map has no more entries than this (``sanitizing/pages.py`` caps the map it makes so): a longer
# one is forged.
MAX_PAGES = 5_000
# An integer in a listing fits a signed 64-bit column (SQLite, PostgreSQL): a larger one is forged.
MAX_INT = 2**63 - 1


# --- reading and writing -----------------------------------------------------


def read_extract_listing(path: Path) -> list[ListingRow]:
    """``extract/listing.jsonl`` as records, in file order. A missing file raises ``FileNotFoundError``
    (the caller says which stage to run); a line that is no listing row raises one ``StoreError``."""
    path = Path(path)
    return _remembered(path, ListingRow, lambda: [_listing_row(line, path, number)
                                                  for number, line in _lines(path, "run extract again")])


def write_extract_listing(path: Path, rows: Iterable[ListingRow]) -> None:
    """Write the extract listing (privately, whole or not at all), a line per row as ``ListingRow.listed``."""
    rows = list(rows)
    write_jsonl(Path(path), [row.listed() for row in rows])
    _remember(Path(path), ListingRow, rows)


def read_documents(path: Path) -> list[Document]:
    """``sanitized/listing.jsonl`` as records (``records.document_record``), sorted by doc. A missing file
    raises ``FileNotFoundError``; a line that is no document raises one ``StoreError`` naming the line."""
    path = Path(path)
    record = records.document_record()
    return _remembered(path, record, lambda: sorted(
        (document_from_line(line, path, number, record) for number, line in _lines(path, "run sanitize again")),
        key=lambda document: document.doc))


def write_documents(path: Path, documents: Iterable[Document]) -> None:
    """Write the sanitized listing (privately, whole or not at all), a line per document, sorted by doc."""
    documents = sorted(documents, key=lambda document: document.doc)
    write_jsonl(Path(path), [document_line(document) for document in documents])
    _remember(Path(path), type(documents[0]) if documents else records.document_record(), documents)


# The records last read or written of each listing, by path and record type, with the file's identity then:
# a sweep's stages (and a watcher's cycles) parse a listing once, not once a stage. Records are frozen, so
# sharing them is safe; a listing replaced since (every write is a new file, renamed in) has a new identity
# and is read again, and a reader of another record type (a wider ``Document``) parses it for itself.
_KEPT: dict[tuple[str, type], tuple[tuple, tuple]] = {}
KEPT_LISTINGS = 4  # the two listings of an output folder, and of one more: a process rarely serves more


def forget() -> None:
    """Drop every kept listing: the next read parses the file (tests of parsing itself use it)."""
    _KEPT.clear()


def _identity(path: Path) -> tuple | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size


def _remembered(path: Path, record: type, read) -> list:
    """The ``record``s of ``path``: those kept when it is the file they came from, else ``read()`` (then kept)."""
    identity = _identity(path)
    kept = _KEPT.get((str(path), record))
    if identity is not None and kept is not None and kept[0] == identity:
        return list(kept[1])
    rows = read()
    _remember(path, record, rows, identity)
    return rows


def _remember(path: Path, record: type, rows: list, identity: tuple | None = None) -> None:
    identity = identity or _identity(path)
    if identity is not None:
        _KEPT.pop((str(path), record), None)
        _KEPT[(str(path), record)] = (identity, tuple(rows))
        while len(_KEPT) > KEPT_LISTINGS:  # the oldest first: a long-lived process keeps a bounded few
            del _KEPT[next(iter(_KEPT))]


def document_line(document: Document) -> dict:
    """A document's line: every field by name, those that are None left out (an older listing's form)."""
    return {name: value for name, value in _as_items(document) if value is not None}


def _as_items(document: Document):
    return ((item.name, getattr(document, item.name)) for item in dataclasses.fields(document))


def _lines(path: Path, remedy: str):
    """``(line number, parsed JSON)`` of each non-blank line; an unreadable file or line is one ``StoreError``."""
    try:
        with open(path, encoding="utf-8") as handle:
            text_lines = list(handle)
    except UnicodeDecodeError:
        raise StoreError(f"{path} is not UTF-8: {remedy}") from None
    parsed = []
    for number, text in enumerate(text_lines, start=1):
        if not text.strip():
            continue
        try:
            parsed.append((number, json.loads(text)))
        except (ValueError, RecursionError):
            raise StoreError(f"{path} line {number} is not JSON: {remedy}") from None
    return parsed


# --- a line as a record ------------------------------------------------------


def _listing_row(line, path: Path, number: int) -> ListingRow:
    """An extract listing line as a ``ListingRow`` (``from_line`` takes an older agent's ``doc`` for ``key``)."""
    if not isinstance(line, dict):
        raise StoreError(f"{path} line {number} is not a listing row: run extract again")
    row = ListingRow.from_line(line)
    for item in dataclasses.fields(ListingRow):
        if not _fits(getattr(row, item.name), _hints(ListingRow)[item.name]):
            raise StoreError(f"{path} line {number}: {item.name} is not {_type_name(ListingRow, item.name)}:"
                             " run extract again")
    return row


def document_from_line(line, path: Path | str = "sanitized listing", number: int = 0,
                       record: type = Document) -> Document:
    """A sanitized listing line as a ``Document`` (or ``record``, a subclass): each field checked (strict by
    type, or its declared fail-closed check), unknown keys ignored, missing ones defaulted."""
    if not isinstance(line, dict):
        raise StoreError(f"{path} line {number} is not a document: run sanitize again")
    doc = line.get("doc")
    if not isinstance(doc, str) or not DOC_ID.fullmatch(doc):
        raise StoreError(f"{path} line {number} names no document id: run sanitize again")
    paths = line.get("paths", [])
    if not _fits(paths, list[str]):
        raise StoreError(f"{path} line {number}: paths is not a list of names: run sanitize again")
    given = {}
    for name, check, fits in _field_tests(record):
        if name not in line:
            continue
        value = line[name]
        if check is not None:
            given[name] = check(value, paths)
        elif fits(value):
            given[name] = value
        else:
            raise StoreError(f"{path} line {number}: {name} is not {_type_name(record, name)}: run sanitize again")
    document = record(doc=doc, paths=paths, **given)
    if "modified" not in given:
        document = dataclasses.replace(document, modified=[None] * len(paths))  # an older listing: unknown
    return document


@functools.cache
def _field_tests(record: type) -> tuple:
    """``(name, fail-closed check or None, type test)`` of each field but the id and paths, made once."""
    return tuple((item.name, CHECKS[item.metadata["check"]] if item.metadata.get("check") else None,
                  _predicate(_hints(record)[item.name]))
                 for item in dataclasses.fields(record) if item.name not in ("doc", "paths"))


# --- the fail-closed checks --------------------------------------------------


def _times(value, paths) -> list[str | None]:
    """One time per path; a list of another length is no times at all, and a time not written as
    ``dates.TIME_FORMAT`` writes it is unknown."""
    if not isinstance(value, list) or len(value) != len(paths):
        return [None] * len(paths)
    return [when if isinstance(when, str) and STAMP.fullmatch(when) else None for when in value]


def _groups(value, paths) -> list[str]:
    """The document's groups, sorted; any invalid name (a hand edit) labels nothing: fail closed."""
    if not isinstance(value, list) or not all(is_group_name(name) for name in value):
        return []
    return sorted(set(value))


def _path_groups(value, paths) -> list[list[str]] | None:
    """Each path's groups, aligned with the paths; anything else is no per-path labels (the document's stand)."""
    if not isinstance(value, list) or len(value) != len(paths):
        return None
    if not all(isinstance(groups, list) and all(is_group_name(name) for name in groups) for groups in value):
        return None
    return [sorted(set(groups)) for groups in value]


def _page_map(value, paths) -> list[list] | None:
    """A bounded map of ``[start, page or None, ocr]`` entries, or none: a forged map is not trusted."""
    if isinstance(value, list) and len(value) <= MAX_PAGES and all(
            isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], int)
            and (entry[1] is None or isinstance(entry[1], int)) and isinstance(entry[2], bool) for entry in value):
        return value
    return None


CHECKS = {"times": _times, "groups": _groups, "path_groups": _path_groups, "page_map": _page_map}


# --- types -------------------------------------------------------------------


@functools.cache
def _hints(record: type) -> dict:
    return typing.get_type_hints(record)


def _type_name(record: type, name: str) -> str:
    """The field's type as its declaration reads (``int``, ``list[int] | None``), for the error line."""
    annotation = _hints(record)[name]
    return annotation.__name__ if isinstance(annotation, type) else str(annotation).replace("typing.", "")


def _fits(value, annotation) -> bool:
    """Whether a JSON value is of the field's type (str, int, bool, float, list[X], X | None);
    an int is no bool and fits 64 bits, so a forged size cannot reach a column."""
    return _predicate(annotation)(value)


@functools.cache
def _predicate(annotation):
    """The test ``_fits`` makes for one type, built once per type (a listing has a line per file)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        tests = tuple(_predicate(arg) for arg in args)
        return lambda value: any(test(value) for test in tests)
    if annotation is type(None):
        return lambda value: value is None
    if origin is list:
        item = _predicate(args[0]) if args else (lambda value: True)
        return lambda value: type(value) is list and all(item(entry) for entry in value)
    if annotation is int:
        return lambda value: type(value) is int and -MAX_INT - 1 <= value <= MAX_INT
    if annotation is float:
        return lambda value: type(value) in (int, float)
    if annotation in (str, bool):
        return lambda value: type(value) is annotation
    return lambda value: True


# --- merging -----------------------------------------------------------------


def merge(parts: Iterable[Document]) -> Document:
    """One document from the documents of its files (one path each, or more), by each field's rule.

    ``parts`` come in the order ``first`` follows (sanitize gives its files in raw-path order);
    a field whose parts are all None stays None. The result is of the parts' record (``Document``).
    """
    parts = list(parts)
    if not parts:
        raise ValueError("a document is merged from one file or more")
    record = type(parts[0])
    paths = sorted({path for part in parts for path in part.paths})
    merged = {}
    for item in dataclasses.fields(record):
        values = [getattr(part, item.name) for part in parts]
        merged[item.name] = _RULES[item.metadata["merge"]](values, parts, paths, item.name)
    return record(**merged)


def _same(values, parts, paths, name):
    if any(value != values[0] for value in values):
        raise ValueError(f"files of one document differ in {name}")
    return values[0]


def _first(values, parts, paths, name):
    return next((value for value in values if value is not None), None)


def _union(values, parts, paths, name):
    given = [value for value in values if value is not None]
    return sorted({item for value in given for item in value}) if given else None


def _per_path(parts, name):
    """``{path: [each part's value for that path]}``, for the fields aligned with ``paths``."""
    found: dict[str, list] = {}
    for part in parts:
        values = getattr(part, name)
        if values is None:
            continue
        for path, value in zip(part.paths, values):
            found.setdefault(path, []).append(value)
    return found


def _latest_per_path(values, parts, paths, name):
    found = _per_path(parts, name)
    return [max((when for when in found.get(path, ()) if when is not None), default=None) for path in paths]


def _union_per_path(values, parts, paths, name):
    if all(value is None for value in values):
        return None
    found = _per_path(parts, name)
    return [sorted({group for groups in found.get(path, ()) for group in groups}) for path in paths]


_RULES = {"same": _same, "first": _first, "union": _union,
          "latest per path": _latest_per_path, "union per path": _union_per_path}
