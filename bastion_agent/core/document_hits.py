"""A hit's per-document fields, filled from its document's columns by one mapping declared on the record.

Each field of the document record (``records.Document``) says in its
metadata whether vectors.db keeps it (``column``) and how a hit shows it
(``hit``, one of ``records.HIT_RULES``). Search selects the document's
columns under one prefix (``select_list``) in the statement that reads the
windows, and ``hit_values`` turns that row into the hit's fields:

- ``shown paths``: the paths the caller may read (``access.visible_positions``), escaped for a terminal;
- ``latest shown``: the latest time of those paths (``dates.latest``), so a caller is dated by what it sees;
- ``as is``: the column's value (a JSON list decoded), under the field's own name.

So a new per-document field on a hit is its declaration on ``Document``
(``column`` and ``hit``) and its field on ``Hit`` (the description the
HTTP and MCP schemas show); local search, the document view and remote
search (which gets the same names back from the central index) follow.
The access labels (``groups``, ``path_groups``) decide what is shown and
are never shown themselves.
"""

from __future__ import annotations

import functools
import json
import typing

from bastion_agent.core import dates, records
from bastion_agent.core.access import visible_positions
from bastion_agent.core.progress import escape_name

PREFIX = "document_"  # a document column selected as ``document_<field>``: no window column or hit field is so named


def select_list(alias: str = "d", record: type | None = None) -> str:
    """``d."paths" AS "document_paths", ...``: the document's stored columns (but its id), for a SELECT."""
    return _select_list(alias, record or records.document_record())


@functools.cache
def _select_list(alias: str, record: type) -> str:
    """Made once per record (a search asks for it every query)."""
    return ", ".join(f'{alias}."{item.name}" AS "{PREFIX}{item.name}"'
                     for item in records.stored_fields(record) if item.name != "doc")


def selected_names(record: type | None = None) -> tuple[str, ...]:
    """The names ``select_list`` gives the document's columns, in its order (a positional row's part)."""
    return _selected_names(record or records.document_record())


@functools.cache
def _selected_names(record: type) -> tuple[str, ...]:
    return tuple(PREFIX + item.name for item in records.stored_fields(record) if item.name != "doc")


def hit_values(row, groups: frozenset | None, record: type | None = None) -> dict:
    """The hit's fields from a row holding ``select_list``'s columns (a mapping: ``sqlite3.Row``, a dict),
    as a caller with ``groups`` (None: every group) may see them. A row without a document (a left join
    that found none) shows no path."""
    named = _list(row[PREFIX + "paths"])
    shown = visible_positions(groups, named, _list(row[PREFIX + "path_groups"]), _list(row[PREFIX + "groups"]))
    return {name: rule(row[column], kind, named, shown)
            for name, column, kind, rule in _mapping(record or records.document_record())}


@functools.cache
def _mapping(record: type) -> tuple:
    """``(hit field, selected column, column kind, rule)`` of each field a hit shows, made once per record."""
    return tuple((item.name, PREFIX + item.name, item.metadata["column"], _RULES[item.metadata["hit"]])
                 for item in records.stored_fields(record) if item.metadata.get("hit"))


def _shown_paths(value, kind: str, named: list, shown: list[int]) -> list[str]:
    return [escape_name(str(named[position])) for position in shown]


def _latest_shown(value, kind: str, named: list, shown: list[int]) -> str | None:
    return dates.latest(value, len(named), shown=shown)


def _as_is(value, kind: str, named: list, shown: list[int]):
    return _list(value) if kind == "json" else value


_RULES = {"shown paths": _shown_paths, "latest shown": _latest_shown, "as is": _as_is}
assert set(_RULES) == set(records.HIT_RULES) - {""}


def _list(value) -> list:
    """A JSON list column (text, or already decoded by a driver); anything unreadable is an empty list."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    return value if isinstance(value, list) else []


def meta_values(meta, record: type | None = None) -> dict:
    """The hit's fields from a document's ``meta`` in the central index (remote search): each published
    field of the record, under its name, where the object has a value of the field's type (another
    bastion's agent may publish keys this one does not declare, or another type: those are left out)."""
    record = record or records.document_record()
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except ValueError:
            return {}
    if not isinstance(meta, dict):
        return {}
    values = {}
    for item in records.published_fields(record):
        value = meta.get(item.name)
        if value is not None and _fits_scalar(value, records.scalar_type(typing.get_type_hints(record)[item.name])):
            values[item.name] = value
    return values


def _fits_scalar(value, kind: type) -> bool:
    if kind is float:
        return type(value) in (int, float)
    return type(value) is kind
