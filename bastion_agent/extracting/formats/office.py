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
            spend_output(len(data))
            self.sink.append(data)

    def emit(self, text: str) -> None:
        spend_output(len(text))
        self.sink.append(text)

    def end_cell(self) -> None:
        """A table cell ends with a tab (its paragraphs were joined by spaces)."""
        if self.sink and self.sink[-1] == " ":
            self.sink[-1] = "\t"
        else:
            self.sink.append("\t")

    def text(self) -> str:
        return "".join(self.sink)


def _docx_start(xml, tag, attrs):
    if tag == "tab":
        xml.emit("\t")
    elif tag in ("br", "cr"):
        xml.emit("\n")


def _docx_end(xml, tag):
    if tag == "p":
        xml.emit(" " if "tc" in xml.stack else "\n")
    elif tag == "tc":
        xml.end_cell()
    elif tag == "tr":
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


def _odf_start(xml, tag, attrs):
    if tag == "s":
        xml.emit(" " * min(_int(attrs.get("c"), 1), 100))
    elif tag == "tab":
        xml.emit("\t")
    elif tag == "line-break":
        xml.emit("\n")


def _odf_end(xml, tag):
    if tag in ("p", "h"):
        xml.emit(" " if "table-cell" in xml.stack else "\n")
    elif tag == "table-cell":
        xml.end_cell()
    elif tag == "table-row":
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
    cell = {"type": None}

    def start(xml, tag, attrs):
        if tag == "row":
            cells.clear()
        elif tag == "c":
            cell["type"] = attrs.get("t")
            xml.sink.clear()

    def end(xml, tag):
        if tag == "c":
            value = _xlsx_value(cell["type"], xml.text(), shared)
            spend_output(len(value))  # a shared string is stored once but shown in every cell using it
            cells.append(value)
            xml.sink.clear()
        elif tag == "row":
            rows.append("\t".join(cells).rstrip("\t"))

    xml = _XMLText(start, end, frozenset({"v", "t"}))
    xml.parse(_member_chunks(archive, name, budget))
    return rows


def _xlsx_value(cell_type, raw: str, shared: list[str]) -> str:
    if cell_type == "s":
        index = _int(raw.strip(), -1)
        return shared[index] if 0 <= index < len(shared) else ""
    if cell_type == "b":
        return "TRUE" if raw.strip() == "1" else "FALSE"
    return raw.replace("\t", " ").replace("\n", " ")
