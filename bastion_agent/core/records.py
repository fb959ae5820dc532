"""The records that cross stages, each defined once: what one stage writes and a later one reads.

A row handed from one stage (or one store) to another is a frozen
dataclass here, never a positional tuple, so that adding a field is one
change of its record (plus the column that stores it) and every reader and
writer follows by name:

- ``ListingRow``: one line of ``extract/listing.jsonl``; extract writes it,
  sanitize and the extract report read it.
- ``Document``: one sanitized document, a line of ``sanitized/listing.jsonl``;
  sanitize merges it from the files whose text it is (``core/catalogue.py``,
  by each field's declared rule), chunk and embed read it.
- ``DocumentRow``: one row of vectors.db's ``documents``, made from the
  fields of ``Document`` that declare a column (``stored_row``); embed makes
  it from a ``Document`` (``document_row``), the vector store writes it (and
  adds a declared column it lacks), publish reads it.
- ``ChunkRow``: one line of ``chunks.jsonl``; chunk writes it, embed reads it.
- ``StoredChunk``: one row of vectors.db's ``chunks`` (a window and its
  sanitized text); embed makes it from ``chunks.jsonl``, the vector store
  writes it, publish reads it.
- ``Hit``: one search result; local search (``searching/searcher.py``) and
  remote search (``publishing/remote_search.py``) build it, the CLI, the
  HTTP server and the MCP server show it.

The SQL that stores a record names its columns from the record's fields
(``insert_sql``, ``select_sql``, ``values``), and the JSON schema of a record
that leaves through an API is made from its fields (``json_schema``): a
field's ``metadata["schema"]`` adds its description and bounds. Standard
library only.

A per-document field is declared once, on ``Document``: its merge rule,
and whether vectors.db keeps it (``column``), a hit shows it (``hit``:
``core/document_hits.py``) and publish sends it to the central index
(``published``: a key of the document's ``meta``). docs/architecture.md,
"The catalogue", has the steps.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import operator
import typing
from dataclasses import dataclass, field

# --- the records -------------------------------------------------------------


@dataclass(frozen=True)
class ListingRow:
    """One file extract saw: a line of ``extract/listing.jsonl`` (private: raw paths and keys).

    Extract writes one per file and folder it met, read or skipped; sanitize
    reads the ``extracted`` ones to know which texts to sanitize under which
    paths, and ``extract --report`` counts them.
    """

    path: str
    key: str | None  # sha256 of the file's raw path and bytes (``extract_key``): private to the extract store
    size: int
    kind: str
    status: str
    reason: str | None = None
    # A PDF's or an image's pages that OCR read (numbers from 1); None for a text without pages. Private
    # like the whole listing; sanitize turns it into the page map of the sanitized text (sanitizing/pages.py).
    ocr_pages: list[int] | None = None
    modified: str | None = None  # the file's modification time, ISO 8601 UTC; None where it was not read

    @classmethod
    def from_line(cls, line: dict) -> "ListingRow":
        """A listing line read back, as its reader must take it: a line of an older agent names the key
        ``doc``, and a missing field is empty. Values are taken as they are: ``core/catalogue.py`` then
        checks each against its type."""
        return cls(path=line.get("path", ""), key=line.get("key") or line.get("doc"), size=line.get("size", 0),
                   kind=line.get("kind", ""), status=line.get("status", ""), reason=line.get("reason"),
                   ocr_pages=line.get("ocr_pages"), modified=line.get("modified"))

    def listed(self) -> dict:
        """The listing's line: ``ocr_pages`` only where the text has pages, ``modified`` where the file was read."""
        row = dataclasses.asdict(self)
        for optional in ("ocr_pages", "modified"):
            if row[optional] is None:
                del row[optional]
        return row


# How the values of a document's files make the document's value (``catalogue.merge``): the rule is
# declared beside each field of ``Document``, so a new per-document field is that one declaration.
MERGE_RULES = ("same", "first", "union", "latest per path", "union per path")


# How vectors.db's ``documents`` keeps a field (``Document`` metadata ``column``): not at all (""), as
# its value ("value": a nullable column of the field's SQL type), or as a JSON list in text ("json": None
# is stored as ``[]``, the column's default). The table's columns and its row record follow the fields.
COLUMN_KINDS = ("", "value", "json")
# How a hit gets a field from its document's columns (``Document`` metadata ``hit``, the rules in
# ``core/document_hits.py``): "" not at all, "as is" (a field of ``Hit`` of the same name), "shown paths"
# (the paths the caller may see), "latest shown" (the latest time of those paths).
HIT_RULES = ("", "as is", "shown paths", "latest shown")


def _merged(rule: str, check: str = "", column: str = "", hit: str = "", published: bool = False, **schema) -> dict:
    """A ``Document`` field's metadata: its merge rule, the name of a fail-closed check
    (``catalogue.CHECKS``) for a value read back that its type alone does not vouch for, how
    vectors.db keeps it (``COLUMN_KINDS``), how a hit shows it (``HIT_RULES``) and whether publish
    sends it to the central index (``published``: a key of the document's ``meta``, a scalar kept as
    its value; docs/publish.md)."""
    assert rule in MERGE_RULES, rule
    assert column in COLUMN_KINDS and hit in HIT_RULES, (column, hit)
    assert column or not hit, "a hit is filled from a column"
    assert not published or (column == "value" and hit == "as is"), "a published field is a value a hit shows"
    return {"merge": rule, "check": check, "column": column, "hit": hit, "published": published, "schema": schema}


@dataclass(frozen=True)
class Document:
    """What the agent knows of one sanitized document: a line of ``sanitized/listing.jsonl``.

    Sanitize makes one per file whose text it sanitized (paths and per-path
    values of one element) and merges those of one text into the document
    (``catalogue.merge``), each field by the rule its metadata declares:

    - ``same``: every file has the same value (the id);
    - ``first``: the value of the first file, in the order given (sanitize gives raw-path order);
    - ``union``: the sorted union (the paths, the groups);
    - ``latest per path`` / ``union per path``: a list aligned with ``paths``, merged where two files
      are listed under one path (two raw names can sanitize to one).

    A field that is None is not written, so an older listing (without it)
    and a newer one read alike. Every value here was computed from
    sanitized text or from sanitized paths, never from raw bytes: the raw
    size, key and OCR page numbers stay in the extract listing (``ListingRow``).
    """

    doc: str = field(metadata=_merged("same", column="value"))  # sha256 of the sanitized text
    # sanitized, escaped, sorted
    paths: list[str] = field(default_factory=list, metadata=_merged("union", column="json", hit="shown paths"))
    kind: str = field(default="", metadata=_merged("first"))  # the kind of the first raw path
    # One per path of ``paths``: that file's modification time (ISO 8601 UTC), None where unknown.
    modified: list[str | None] = field(default_factory=list, metadata=_merged(
        "latest per path", "times", column="json", hit="latest shown"))
    # Who may read the document (None: the listing was written without labels, which reads as no group).
    groups: list[str] | None = field(default=None, metadata=_merged("union", "groups", column="json"))
    # One per path: who may see that path in a hit (None: no labels).
    path_groups: list[list[str]] | None = field(default=None, metadata=_merged(
        "union per path", "path_groups", column="json"))
    # The page map of a PDF or an image (``sanitizing/pages.py``): None for a text without pages.
    pages: list[list] | None = field(default=None, metadata=_merged("first", "page_map"))
    size: int | None = field(default=None, metadata=_merged("first"))  # bytes of the sanitized text
    # Why the document's text was not sanitized (over its budget), where a catalogue lists a skipped file.
    skipped: str | None = field(default=None, metadata=_merged("first"))

    @property
    def latest_modified(self) -> str | None:
        """The latest modification time of its paths (times in ISO 8601 UTC order as text)."""
        return max((when for when in self.modified if when is not None), default=None)

    @property
    def text_source(self) -> str:
        """Where the text came from: ``ocr`` when any page of it was recognised, else ``typed``."""
        return "ocr" if any(entry[2] is True for entry in self.pages or ()) else "typed"


# --- vectors.db's documents, made from the document record ---------------------

# The SQL type of a field vectors.db keeps as its value (a nullable column: an older row reads as NULL).
_SQL_TYPES = {str: "TEXT", int: "INTEGER", float: "REAL", bool: "INTEGER"}


def document_record() -> type:
    """The document record the stages use, looked up when called: ``Document`` (a test may stand a
    subclass in its place to show that a field declared there travels on its own)."""
    return Document


@functools.cache
def stored_fields(record: type) -> tuple:
    """The fields of a document record that vectors.db's ``documents`` keeps (metadata ``column``)."""
    return tuple(item for item in dataclasses.fields(record) if item.metadata.get("column"))


@functools.cache
def published_fields(record: type) -> tuple:
    """The fields of a document record that publish sends in the document's ``meta`` (metadata ``published``)."""
    return tuple(item for item in dataclasses.fields(record) if item.metadata.get("published"))


def column_sql(record: type, name: str) -> str:
    """The column's declaration for ``ALTER TABLE ... ADD COLUMN``: its type and default from the field."""
    item = next(item for item in stored_fields(record) if item.name == name)
    if item.metadata["column"] == "json":
        return "TEXT NOT NULL DEFAULT '[]'"
    return _SQL_TYPES[scalar_type(typing.get_type_hints(record)[name])]


def scalar_type(annotation) -> type:
    """``X`` of a field typed ``X`` or ``X | None`` (a column kept as its value holds one scalar)."""
    args = [arg for arg in typing.get_args(annotation) if arg is not type(None)] or [annotation]
    assert len(args) == 1 and args[0] in _SQL_TYPES, f"a value column holds one scalar, not {annotation}"
    return args[0]


@functools.cache
def stored_row(record: type) -> type:
    """The record of one row of vectors.db's ``documents`` for a document record: its stored fields, in
    order, a JSON list as text (default ``[]``) or the value (default None). Made once per record."""
    hints = typing.get_type_hints(record)
    specs: list = []
    for item in stored_fields(record):
        if item.name == "doc":
            specs.append(("doc", str))
        elif item.metadata["column"] == "json":
            specs.append((item.name, str, field(default="[]")))
        else:
            specs.append((item.name, scalar_type(hints[item.name]) | None, field(default=None)))
    row = dataclasses.make_dataclass(f"{record.__name__}Row", specs, frozen=True)
    row.__module__ = __name__
    row.document_record = record  # not a field: which record's columns the row's table takes (vectorstore)
    row.__doc__ = (f"One row of vectors.db's ``documents``: the fields of ``{record.__name__}`` it keeps"
                   " (``records.stored_row``); embed makes it (``document_row``), the vector store writes it.")
    return row


def document_row(document) -> object:
    """A document as vectors.db keeps it (``stored_row`` of its record), each stored field by name: a
    JSON list as text (None is ``[]``, which labels nothing: the catalogue fails closed on a bad label)."""
    given = {}
    for item in stored_fields(type(document)):
        value = getattr(document, item.name)
        if item.metadata["column"] == "json":
            value = json.dumps(value if value is not None else [])
        given[item.name] = value
    return stored_row(type(document))(**given)


# One row of vectors.db's ``documents`` (doc, paths, modified, groups, path_groups: JSON text): embed
# makes it from a ``Document`` (``document_row``), ``vectorstore.replace_chunks`` writes it, publish reads it.
DocumentRow = stored_row(Document)


@dataclass(frozen=True)
class ChunkRow:
    """One window as ``chunks.jsonl`` lists it: its span in the sanitized text, not the text itself.

    The chunk stage writes these (sorted keys, one JSON object a line); embed
    reads them back and cuts each window's text from the sanitized store.
    """

    chunk_id: str  # sha256 of the document id and the window's text
    doc: str
    idx: int  # the window's position in its document, from 0
    start: int  # character offsets in the sanitized text, [start, end)
    end: int
    chars: int
    tokens: int
    v: int  # the chunker's version (``chunker.CHUNKER_VERSION``)


@dataclass(frozen=True)
class StoredChunk:
    """One window with its sanitized text: a row of vectors.db's ``chunks``.

    Embed makes these from ``chunks.jsonl`` and the sanitized store
    (``embed_stage.current_windows``); ``vectorstore.replace_chunks`` writes
    them; publish reads them to send each window with its vector.
    """

    chunk_id: str
    doc: str
    idx: int
    start: int
    end: int
    text: str


def _described(description: str, **bounds) -> dict:
    """A field's metadata: the description (and bounds) its JSON schema carries besides its type."""
    return {"schema": {**bounds, "description": description} if description else bounds}


@dataclass(frozen=True)
class Hit:
    """One search result: a sanitized window and where it comes from.

    Local search and remote search build it; the CLI prints it, and the
    HTTP and MCP servers send it as JSON (``as_dict``), described by
    ``json_schema(Hit)``. docs/search.md has the table of its fields.
    """

    score: float = field(metadata=_described("The ranking score (fused in hybrid mode), higher is better."))
    doc: str = field(metadata=_described("The document id: sha256 of its sanitized text."))
    idx: int = field(metadata=_described("The window's position in its document."))
    chunk_id: str = field(metadata=_described(""))
    text: str = field(metadata=_described("The sanitized window."))
    paths: list[str] = field(metadata=_described("Source paths, relative to the source root."))
    start: int = field(metadata=_described(""))
    end: int = field(metadata=_described(""))
    # 0-100, the evidence the order was made by: never rises down the list (fusion.py)
    relevance: int = field(default=0, metadata=_described(
        "How close a match, 0-100, on the same scale for every query: the evidence the order was made by"
        " (fused in hybrid), never rising down the list.", minimum=0, maximum=100))
    vector_score: float | None = field(default=None, metadata=_described(
        "Cosine similarity, if the vector side returned the window."))
    vector_rank: int | None = field(default=None, metadata=_described("Its rank on the vector side, from 1."))
    keyword_score: float | None = field(default=None, metadata=_described(
        "BM25, if the keyword side returned the window."))
    keyword_rank: int | None = field(default=None, metadata=_described("Its rank on the keyword side, from 1."))
    vector_relevance: int | None = field(default=None, metadata=_described("The vector side's evidence, 0-100."))
    keyword_relevance: int | None = field(default=None, metadata=_described("The keyword side's evidence, 0-100."))
    mode: str = field(default="", metadata=_described("The mode that answered: vector, keyword or hybrid."))
    fallback: bool = field(default=False, metadata=_described(
        "True when the model server was down and keyword search answered."))
    ocr: bool = field(default=False, metadata=_described(
        "True when the window starts on a scanned page that OCR read: its text may hold recognition errors."))
    page: int | None = field(default=None, metadata=_described(
        "The page (from 1) the window starts on, in a PDF or an image; null elsewhere.", minimum=1))
    modified: str | None = field(default=None, metadata=_described(
        "When the document's file was last modified (ISO 8601, UTC): the latest of the paths shown;"
        " null when unknown (a store swept by an older agent).", format="date-time"))

    def as_dict(self) -> dict:
        """The fields by name (a subclass's too), for JSON: ``dataclasses.asdict`` without its deep copy of every value."""
        return {name.name: getattr(self, name.name) for name in dataclasses.fields(self)}


def hit_record() -> type:
    """The hit record local search builds, looked up when called: ``Hit`` (a test may stand a subclass with
    a new per-document field in its place, beside ``document_record``'s)."""
    return Hit


# --- SQL by column name ------------------------------------------------------


@functools.cache
def column_names(record: type) -> tuple[str, ...]:
    """The record's fields in order: the columns that store it (a class's fields never change: kept)."""
    return tuple(item.name for item in dataclasses.fields(record))


def _quoted(names) -> str:
    """Column names for SQL, each double-quoted (``end`` is a keyword in both SQLite and PostgreSQL)."""
    return ", ".join(f'"{name}"' for name in names)


def insert_sql(table: str, record: type, verb: str = "INSERT", mark: str = "?", only=None) -> str:
    """``INSERT INTO table ("a", "b") VALUES (?, ?)`` for the record's fields; pass rows through ``values``.

    ``verb`` may be ``INSERT OR IGNORE`` and the like; ``mark`` is the
    driver's placeholder (``?`` for sqlite3, ``%s`` for psycopg); ``only``
    keeps those of the fields a table has (an older store lacks the newer
    columns: ``values`` must be given the same).
    """
    names = _chosen(record, only)
    return f"{verb} INTO {table} ({_quoted(names)}) VALUES ({', '.join(mark for _ in names)})"


def select_sql(table: str, record: type, alias: str = "") -> str:
    """``SELECT "a", "b" FROM table``: the record's columns in field order, so ``record(*row)`` builds it."""
    prefix = f"{alias}." if alias else ""
    columns = ", ".join(f'{prefix}"{name}"' for name in column_names(record))
    return f"SELECT {columns} FROM {table}{' ' + alias if alias else ''}"


def values(record: type, only=None):
    """A function from one record to its column values, in ``insert_sql``'s order (a tuple)."""
    names = _chosen(record, only)
    if len(names) == 1:
        get = operator.attrgetter(names[0])
        return lambda row: (get(row),)
    return operator.attrgetter(*names)


def _chosen(record: type, only) -> tuple[str, ...]:
    names = column_names(record)
    return names if only is None else tuple(name for name in names if name in only)


def filled(record: type, fields: dict):
    """``record(**fields)``, the same record, made by filling its fields' dict at once.

    A frozen dataclass's generated ``__init__`` sets its fields one
    ``object.__setattr__`` at a time: about a microsecond a field, paid for
    every ranked window and every hit of a search. A dataclass without slots,
    default factories or a ``__post_init__`` is exactly its fields' dict once
    that ``__init__`` has run, so such a record is made by writing the dict;
    any other goes through its ``__init__``. ``fields`` must name every field
    (defaults included) and nothing else: the caller's tests hold it so.
    """
    if not _plain(record):
        return record(**fields)
    made = object.__new__(record)
    made.__dict__.update(fields)
    return made


@functools.lru_cache(maxsize=None)
def _plain(record: type) -> bool:
    return (not hasattr(record, "__slots__") and not hasattr(record, "__post_init__")
            and all(field.default_factory is dataclasses.MISSING for field in dataclasses.fields(record)))


def build(record: type, *sources, **given):
    """A record whose fields are taken by name: from ``given``, else from the first source that has the name.

    A source is a mapping (a ``dict``, a ``sqlite3.Row``) or a record; a field
    no source has keeps its default, and a name that is no field is left
    out. So a column a query selects under a field's name, or a ranking's
    attribute of that name, fills the field without another line. (Copied
    into one dict, C's loops do the work: a search builds ten hits or more a
    query, and asking each source field by field took twice as long.)
    """
    chosen: dict = {}
    for source in reversed(sources):  # the first source's values are written last, so they win
        chosen.update(_as_dict(source))
    chosen.update(given)
    names = _name_set(record)
    if not names.issuperset(chosen):
        chosen = {name: value for name, value in chosen.items() if name in names}
    return record(**chosen)


def _as_dict(source) -> dict:
    if dataclasses.is_dataclass(source):
        held = getattr(source, "__dict__", None)  # a record without slots: its fields, as Python keeps them
        return held if held is not None else {name: getattr(source, name) for name in column_names(type(source))}
    if hasattr(source, "keys"):
        return dict(source)  # keys() and [name]: a dict, or a sqlite3.Row
    raise TypeError(f"not a record or a mapping: {type(source).__name__}")


@functools.cache
def _name_set(record: type) -> frozenset:
    return frozenset(column_names(record))


# --- JSON schema from the fields ---------------------------------------------


def json_type(annotation) -> dict:
    """The JSON schema of a field's type (float, int, str, bool, list[X], X | None)."""
    simple = {float: "number", int: "integer", str: "string", bool: "boolean"}
    if annotation in simple:
        return {"type": simple[annotation]}
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list:
        return {"type": "array", "items": json_type(args[0]) if args else {}}
    if args and type(None) in args:
        others = [json_type(arg) for arg in args if arg is not type(None)]
        if len(others) == 1 and "type" in others[0] and isinstance(others[0]["type"], str):
            return {**others[0], "type": [others[0]["type"], "null"]}
        return {"anyOf": others + [{"type": "null"}]}
    return {}


def json_schema(record: type, described: bool = True) -> dict:
    """The JSON schema of a record: each field's type, and with ``described`` its description and bounds.

    ``required`` lists the fields without a default, in field order.
    """
    hints = typing.get_type_hints(record)
    properties = {}
    for item in dataclasses.fields(record):
        properties[item.name] = json_type(hints[item.name])
        if described:
            properties[item.name].update(item.metadata.get("schema", {}))
    required = [item.name for item in dataclasses.fields(record)
                if item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING]
    return {"type": "object", "required": required, "properties": properties}
