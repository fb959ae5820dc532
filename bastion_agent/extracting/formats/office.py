"""Office documents that are zip + XML: .docx, .pptx, .xlsx (OOXML) and .odt/.ods/.odp (ODF).

Against zip bombs: at most ``ZIP_MAX_MEMBERS`` members, and the parts read
may unpack to ``ZIP_MAX_UNPACKED_BYTES`` in all, counted on the bytes really
decompressed. XML is streamed through expat, and a document type
declaration (the way in for entity-expansion bombs, used by none of these
formats) is refused.
"""

from __future__ import annotations

import io
import re
import zipfile
from xml.parsers import expat

from bastion_agent.extracting.formats.base import (
    REASON_DAMAGED,
    REASON_ENCRYPTED,
    REASON_UNPACKED,
    Refused,
    spend_output,
    tidy_lines,
)

ZIP_MAX_MEMBERS = 10_000
ZIP_MAX_UNPACKED_BYTES = 256 * 1024 * 1024
_READ_CHUNK = 1024 * 1024


def _open_zip(data: bytes) -> zipfile.ZipFile:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError):
        raise Refused(REASON_DAMAGED) from None
    if len(infos) > ZIP_MAX_MEMBERS:
        raise Refused(REASON_UNPACKED)
    return archive


_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


def _open_ooxml(data: bytes) -> zipfile.ZipFile:
    """A .docx/.pptx/.xlsx: a password-protected one is an OLE file, not a zip."""
    if data.startswith(_OLE_MAGIC):
        raise Refused(REASON_ENCRYPTED)
    return _open_zip(data)


class _Budget:
    """Unpacked bytes left for one container; shared by all its parts."""

    def __init__(self) -> None:
        self.left = ZIP_MAX_UNPACKED_BYTES

    def spend(self, count: int) -> None:
        self.left -= count
        if self.left < 0:
            raise Refused(REASON_UNPACKED)


def _member_chunks(archive: zipfile.ZipFile, name: str, budget: _Budget):
    """Yield a member's bytes in chunks, counting them against the budget.

    The declared size is checked first, but the count is of the bytes really
    unpacked, so a member that lies about its size cannot get past the cap.
    """
    try:
        info = archive.getinfo(name)
    except KeyError:
        raise Refused(REASON_DAMAGED) from None
    if info.file_size > budget.left:
        raise Refused(REASON_UNPACKED)
    try:
        with archive.open(info) as member:
            while chunk := member.read(_READ_CHUNK):
                budget.spend(len(chunk))
                yield chunk
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, RuntimeError, ValueError):
        raise Refused(REASON_DAMAGED) from None


class _XMLText:
    """Streams one XML part through expat and calls the format's handlers.

    Names are reduced to their local part (namespaces ignored). Character
    data is kept inside ``text_tags`` only, and nothing at all inside
    ``skip_tags`` (e.g. Word's fallback copies of text boxes). A document
    type declaration is refused: none of these formats uses one, and it is
    the door to entity-expansion bombs.
    """

    def __init__(self, start, end, text_tags: frozenset[str], skip_tags: frozenset[str] = frozenset()):
        self.start, self.end = start, end
        self.text_tags, self.skip_tags = text_tags, skip_tags
        self.stack: list[str] = []
        self.sink: list[str] = []
        self.skipping = 0
        self.span = 1  # columns the table cell being read covers (a merged cell)
        self.pending = 0  # empty cells owed before the next content (never written at a row's end)
        self.row_start = 0  # where the table row being read began in the sink

    def parse(self, chunks) -> None:
        parser = expat.ParserCreate(namespace_separator="}")
        parser.StartDoctypeDeclHandler = self._refuse_doctype
        parser.StartElementHandler = self._start
        parser.EndElementHandler = self._end
        parser.CharacterDataHandler = self._data
        parser.buffer_text = True
        try:
            for chunk in chunks:
                parser.Parse(chunk, False)
            parser.Parse(b"", True)
        except expat.ExpatError:
            raise Refused(REASON_DAMAGED) from None

    def _refuse_doctype(self, *args):
        raise Refused(REASON_DAMAGED)

    def _start(self, name, attrs):
        local = name.rsplit("}", 1)[-1]
        self.stack.append(local)
        if local in self.skip_tags:
            self.skipping += 1
        if not self.skipping:
            self.start(self, local, {key.rsplit("}", 1)[-1]: value for key, value in attrs.items()})

    def _end(self, name):
        local = self.stack.pop()
        if not self.skipping:
            self.end(self, local)
        if local in self.skip_tags:
            self.skipping -= 1

    def _data(self, data):
        if not self.skipping and self.stack and self.stack[-1] in self.text_tags:
            self._owed()
            spend_output(len(data))
            self.sink.append(data)

    def emit(self, text: str) -> None:
        self._owed()
        spend_output(len(text))
        self.sink.append(text)

    def _owed(self) -> None:
        if self.pending:
            count, self.pending = self.pending, 0
            spend_output(count)
            self.sink.append("\t" * count)

    def end_cell(self) -> None:
        """A table cell ends with a tab (its paragraphs were joined by spaces)."""
        if self.sink and self.sink[-1] == " " and not self.pending:
            self.sink[-1] = "\t"
        else:
            self._owed()
            self.sink.append("\t")

    def end_row(self) -> None:
        """A table row ends with a line break; the empty cells still owed are dropped."""
        self.pending = 0
        self.emit("\n")

    def pad_span(self) -> None:
        """The empty cells a merged or repeated cell stands for, so later cells stay under their header.

        They are owed, not written: written only when content follows in the
        row, so a sheet's trailing thousand repeated empty cells cost nothing.
        """
        self.pending += self.span - 1
        self.span = 1

    def text(self) -> str:
        return "".join(self.sink)


# Tables are emitted in one normal form that sanitize reads by its header
# (sanitizing/columns.py): a blank line before and after the table, one line
# per row, cells separated by one tab each, the header row first. Inside a
# cell, paragraphs, tabs and line breaks become spaces, so a cell never
# splits a row; a cell spanning N columns is followed by N-1 empty ones, so
# the cells below a header stay under it. A table inside a cell is text of
# that cell.
MAX_SPAN = 1024  # columns one merged cell may stand for


def _table_depth(xml, table_tag: str) -> int:
    return xml.stack.count(table_tag)


def _docx_start(xml, tag, attrs):
    in_cell = "tc" in xml.stack
    if tag == "tab":
        xml.emit(" " if in_cell else "\t")
    elif tag in ("br", "cr"):
        xml.emit(" " if in_cell else "\n")
    elif tag == "tbl" and _table_depth(xml, "tbl") == 1:
        xml.emit("\n\n")
    elif tag == "gridSpan" and _table_depth(xml, "tbl") == 1:
        xml.span = min(max(_int(attrs.get("val"), 1), 1), MAX_SPAN)


def _docx_end(xml, tag):
    depth = _table_depth(xml, "tbl")
    if tag == "p":
        xml.emit(" " if "tc" in xml.stack else "\n")
    elif tag == "tc" and depth == 1:
        xml.end_cell()
        xml.pad_span()
    elif tag == "tr" and depth == 1:
        xml.end_row()
    elif tag in ("tc", "tr"):
        xml.emit(" ")
    elif tag == "tbl" and depth == 0:
        xml.emit("\n")


_DOCX_PART = re.compile(r"word/(header|footer)\d*\.xml|word/(footnotes|endnotes|comments)\.xml")


def read_docx(data: bytes) -> str:
    """Body text, then headers, footers, footnotes, endnotes and comments.

    Deleted text of tracked changes (``w:delText``) and field codes
    (``w:instrText``) are not shown by Word and are left out.
    """
    archive = _open_ooxml(data)
    budget = _Budget()
    names = ["word/document.xml"] + sorted(n for n in archive.namelist() if _DOCX_PART.fullmatch(n))
    texts = []
    for name in names:
        xml = _XMLText(_docx_start, _docx_end, frozenset({"t"}), frozenset({"Fallback", "delText", "instrText"}))
        xml.parse(_member_chunks(archive, name, budget))
        texts.append(tidy_lines(xml.text()))
    return "\n\n".join(t for t in texts if t)


_ODF_CELLS = ("table-cell", "covered-table-cell")


def _odf_start(xml, tag, attrs):
    in_cell = "table-cell" in xml.stack or "covered-table-cell" in xml.stack
    depth = _table_depth(xml, "table")
    if tag == "s":
        xml.emit(" " * min(_int(attrs.get("c"), 1), 100))
    elif tag == "tab":
        xml.emit(" " if in_cell else "\t")
    elif tag == "line-break":
        xml.emit(" " if in_cell else "\n")
    elif tag == "table" and depth == 1:
        xml.emit("\n\n")
    elif tag in _ODF_CELLS and depth == 1:
        xml.span = min(max(_int(attrs.get("number-columns-repeated"), 1), 1), MAX_SPAN)
    elif tag == "table-row" and depth == 1:
        xml.row_start = len(xml.sink)


def _odf_end(xml, tag):
    depth = _table_depth(xml, "table")
    if tag in ("p", "h"):
        xml.emit(" " if "table-cell" in xml.stack else "\n")
    elif tag in _ODF_CELLS and depth == 1:
        xml.end_cell()
        xml.pad_span()
    elif tag == "table-row" and depth == 1:
        if not "".join(xml.sink[xml.row_start:]).strip(" \t"):
            del xml.sink[xml.row_start:]  # an empty row (a sheet's million repeated ones) is no line
        else:
            xml.end_row()
        xml.pending = 0
    elif tag in (*_ODF_CELLS, "table-row"):
        xml.emit(" ")
    elif tag == "table" and depth == 0:
        xml.emit("\n")
    elif tag == "page":  # a presentation slide
        xml.emit("\n\n")


def _int(value, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


_ODF_TEXT_TAGS = frozenset({"p", "h", "span", "a", "note-citation", "bookmark-ref", "reference-ref"})


def read_odf(data: bytes) -> str:
    """content.xml of an OpenDocument text, spreadsheet or presentation."""
    archive = _open_zip(data)
    xml = _XMLText(_odf_start, _odf_end, _ODF_TEXT_TAGS)
    xml.parse(_member_chunks(archive, "content.xml", _Budget()))
    return tidy_lines(xml.text())


def _pptx_start(xml, tag, attrs):
    if tag == "br":
        xml.emit("\n")


def _pptx_end(xml, tag):
    if tag == "p":
        xml.emit("\n")


def _numbered(names, pattern: str) -> list[str]:
    """Members matching ``pattern`` (one number group), in numeric order."""
    regex = re.compile(pattern)
    found = [(int(m.group(1)), n) for n in names if (m := regex.fullmatch(n))]
    return [name for _, name in sorted(found)]


def read_pptx(data: bytes) -> str:
    """Slide text in slide-file order, slides separated by a blank line (notes not read)."""
    archive = _open_ooxml(data)
    slides = _numbered(archive.namelist(), r"ppt/slides/slide(\d+)\.xml")
    if not slides:
        raise Refused(REASON_DAMAGED)
    budget = _Budget()
    texts = []
    for name in slides:
        xml = _XMLText(_pptx_start, _pptx_end, frozenset({"t"}))
        xml.parse(_member_chunks(archive, name, budget))
        texts.append(tidy_lines(xml.text()))
    return "\n\n".join(t for t in texts if t)


def read_xlsx(data: bytes) -> str:
    """Each sheet as its name then one line per row, cells separated by tabs.

    Cell values are shown as stored (shared and inline strings, numbers as
    written in the file, formula results); formulas themselves are not read.
    """
    archive = _open_ooxml(data)
    budget = _Budget()
    names = set(archive.namelist())
    shared = _xlsx_shared_strings(archive, budget) if "xl/sharedStrings.xml" in names else []
    sheets = _numbered(names, r"xl/worksheets/sheet(\d+)\.xml")
    if not sheets:
        raise Refused(REASON_DAMAGED)
    texts = []
    for number, name in enumerate(sheets, start=1):
        rows = _xlsx_rows(archive, name, shared, budget)
        body = "\n".join(row for row in rows if row.strip())
        if body:
            texts.append(f"Sheet {number}\n{body}")
    return "\n\n".join(texts)


def _xlsx_shared_strings(archive, budget) -> list[str]:
    strings: list[str] = []
    state = {"parts": None}

    def start(xml, tag, attrs):
        if tag == "si":
            state["parts"] = []
        elif tag == "rPh":  # phonetic guide, not part of the value
            state["skip"] = True

    def end(xml, tag):
        if tag == "t" and state["parts"] is not None and not state.get("skip"):
            state["parts"].append(xml.text())
        if tag in ("t", "rPh"):
            xml.sink.clear()
        if tag == "rPh":
            state["skip"] = False
        if tag == "si":
            strings.append("".join(state["parts"] or []))
            state["parts"] = None

    xml = _XMLText(start, end, frozenset({"t"}))
    xml.parse(_member_chunks(archive, "xl/sharedStrings.xml", budget))
    return strings


def _xlsx_rows(archive, name, shared, budget) -> list[str]:
    rows: list[str] = []
    cells: list[str] = []
    cell = {"type": None, "column": None}

    def start(xml, tag, attrs):
        if tag == "row":
            cells.clear()
        elif tag == "c":
            cell["type"] = attrs.get("t")
            cell["column"] = _xlsx_column(attrs.get("r"))
            xml.sink.clear()

    def end(xml, tag):
        if tag == "c":
            value = _xlsx_value(cell["type"], xml.text(), shared)
            column = cell["column"]
            if column is not None and column > len(cells):  # cells left empty are not stored: keep the columns
                spend_output(column - len(cells))
                cells.extend([""] * (column - len(cells)))
            spend_output(len(value))  # a shared string is stored once but shown in every cell using it
            cells.append(value)
            xml.sink.clear()
        elif tag == "row":
            rows.append("\t".join(cells).rstrip("\t"))

    xml = _XMLText(start, end, frozenset({"v", "t"}))
    xml.parse(_member_chunks(archive, name, budget))
    return rows


XLSX_MAX_COLUMN = 16_384  # Excel's last column, XFD
_CELL_REF = re.compile(r"([A-Za-z]{1,3})\d*")


def _xlsx_column(reference) -> int | None:
    """The 0-based column of a cell reference (``C7`` is 2), None when there is none or it is past XFD."""
    match = _CELL_REF.fullmatch(reference or "")
    if match is None:
        return None
    column = 0
    for letter in match.group(1).upper():
        column = column * 26 + ord(letter) - 64
    return column - 1 if column <= XLSX_MAX_COLUMN else None


def _xlsx_value(cell_type, raw: str, shared: list[str]) -> str:
    """A cell's value on one line: its tabs and line breaks as spaces, so it never splits its row."""
    if cell_type == "s":
        index = _int(raw.strip(), -1)
        raw = shared[index] if 0 <= index < len(shared) else ""
    elif cell_type == "b":
        return "TRUE" if raw.strip() == "1" else "FALSE"
    return raw.replace("\t", " ").replace("\r", " ").replace("\n", " ")
