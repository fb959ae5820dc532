"""HTML as the text a reader sees: no script or style, blocks as lines, entities decoded."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from bastion_agent.extracting.formats.base import decode_text

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)

_SKIPPED_ELEMENTS = frozenset({"script", "style", "template", "noscript"})
# Elements that end a paragraph (a blank line) and those that only end a line.
_PARAGRAPH_ELEMENTS = frozenset(
    "article aside blockquote caption figure footer h1 h2 h3 h4 h5 h6 header hr main nav ol p pre section "
    "table title ul dl details fieldset form address".split()
)
_LINE_ELEMENTS = frozenset("body dd div dt figcaption legend li option summary tr dialog tbody thead tfoot".split())
_PARAGRAPH = "\x0c"
_CELL_ELEMENTS = frozenset({"td", "th"})
_VOID_ELEMENTS = frozenset("area base br col embed hr img input link meta param source track wbr".split())


# A newline inside <pre>, kept apart from the line breaks of the layout.
_PRE_NEWLINE = "\x0b"
# Starts a line that is a table row: its cells' tabs are kept as they are.
_ROW = "\x0e"
MAX_SPAN = 1024  # columns one cell's colspan may stand for


class _Table:
    """The rows of one table being read: cells of the row and the text of the cell being read.

    Tables are emitted in the normal form sanitize reads by header
    (sanitizing/columns.py): a paragraph break around the table, one line
    per row, one tab between cells, the header row first. Inside a cell,
    blocks and line breaks are spaces, so a cell never splits its row; a
    ``colspan`` of N is followed by N-1 empty cells, so later cells stay
    under their header. A table inside a cell is text of that cell.
    """

    def __init__(self) -> None:
        self.row: list[str] | None = None
        self.cell: list[str] | None = None
        self.span = 1

    def open_row(self, parts: list[str]) -> None:
        self.close_row(parts)
        self.row = []

    def open_cell(self, parts: list[str], span: int) -> None:
        self.close_cell()
        if self.row is None:
            self.row = []
        self.cell, self.span = [], span

    def close_cell(self) -> None:
        if self.cell is not None and self.row is not None:
            self.row.append(" ".join("".join(self.cell).split()))
            self.row.extend([""] * (self.span - 1))
        self.cell, self.span = None, 1

    def close_row(self, parts: list[str]) -> None:
        self.close_cell()
        if self.row is not None:
            cells = self.row
            while cells and not cells[-1]:
                cells.pop()
            if cells:
                parts.append("\n" + _ROW + "\t".join(cells) + "\n")
        self.row = None


class _HTMLText(HTMLParser):
    """Collects visible text: script/style dropped, blocks as line breaks."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0
        self.pre = 0
        self.tables: list[_Table] = []  # open tables, outermost first; only the outermost has rows
        self.nested = 0  # tables open inside a cell of the outermost one

    def _in_cell(self) -> bool:
        return bool(self.tables) and self.tables[0].cell is not None

    def _table_tag(self, tag, attrs, start: bool) -> bool:
        """Handle a table element; True when it was one (then nothing else is done with it)."""
        if tag not in ("table", "tr", "td", "th"):
            return False
        if tag == "table":
            if start:
                if self._in_cell():
                    self.nested += 1
                elif not self.tables:
                    self.tables.append(_Table())
                    self.parts.append(_PARAGRAPH)
                else:
                    return False
            elif self.nested:
                self.nested -= 1
            elif self.tables:
                self.tables.pop().close_row(self.parts)
                self.parts.append(_PARAGRAPH)
            if self.nested or self._in_cell():
                self.tables[0].cell.append(" ")
            return True
        if not self.tables:
            return False
        table = self.tables[0]
        if self.nested:
            table.cell.append(" ")
        elif tag == "tr":
            table.open_row(self.parts) if start else table.close_row(self.parts)
        elif start:
            span = dict(attrs).get("colspan") or "1"
            table.open_cell(self.parts, min(max(int(span) if span.strip().isdigit() else 1, 1), MAX_SPAN))
        else:
            table.close_cell()
        return True

    def handle_starttag(self, tag, attrs):
        if not self.skipping and self._table_tag(tag, attrs, True):
            return
        if self._in_cell() and tag not in _SKIPPED_ELEMENTS:
            self.tables[0].cell.append(" ")
            return
        if tag in _SKIPPED_ELEMENTS:
            self.skipping += 1
        elif tag == "br":
            self.parts.append("\n")
        elif tag in _CELL_ELEMENTS:
            self.parts.append("\t")
        else:
            self._boundary(tag)
        if tag == "pre":
            self.pre += 1

    def handle_startendtag(self, tag, attrs):
        if tag not in _SKIPPED_ELEMENTS:
            self.handle_starttag(tag, attrs)
            if tag not in _VOID_ELEMENTS:
                self.handle_endtag(tag)

    def handle_endtag(self, tag):
        if not self.skipping and self._table_tag(tag, (), False):
            return
        if self._in_cell() and tag not in _SKIPPED_ELEMENTS:
            self.tables[0].cell.append(" ")
            return
        if tag in _SKIPPED_ELEMENTS:
            self.skipping = max(0, self.skipping - 1)
        else:
            self._boundary(tag)
        if tag == "pre":
            self.pre = max(0, self.pre - 1)

    def _boundary(self, tag):
        if tag in _PARAGRAPH_ELEMENTS:
            self.parts.append(_PARAGRAPH)
        elif tag in _LINE_ELEMENTS:
            self.parts.append("\n")

    def handle_data(self, data):
        if self.skipping:
            return
        if self._in_cell():
            self.tables[0].cell.append(data)
        elif self.pre:
            self.parts.append(data.replace("\n", _PRE_NEWLINE))
        else:
            self.parts.append(re.sub(r"\s+", " ", data))


def _close_open_tags(html: str) -> str:
    """The markup with every ``<`` that no ``>`` follows written as ``&lt;``.

    ``html.parser`` retries an unfinished construct (``</``, ``<!``, ``<a``)
    by scanning for a ``>`` to the end of the input, once per ``<``: a
    document made of ``</`` repeated costs the square of its length. After
    the last ``>`` no construct can finish, so those ``<`` are text anyway
    (as a browser shows them), and escaping them keeps the parse linear.
    Inside one ``<...>`` the parser is linear already.
    """
    last = html.rfind(">")
    tail = html[last + 1:]
    if "<" not in tail:
        return html
    return html[:last + 1] + tail.replace("&", "&amp;").replace("<", "&lt;")


def _escape_unclosed_comments(html: str) -> str:
    """``<!--`` with no ``-->`` after it is text: escaped, for the same reason as above."""
    last = html.rfind("-->")
    start = html.find("<!--", last + 3 if last >= 0 else 0)
    if start < 0:
        return html
    return html[:start] + html[start:].replace("&", "&amp;").replace("<", "&lt;")


def html_to_text(html: str) -> str:
    """Visible text of an HTML document, one block per line, entities decoded.

    Paragraph-like elements (p, headings, lists, tables, ...) are separated
    by one blank line, other blocks (div, li, tr, br) by a line break; the
    empty lines of the markup itself are dropped.
    """
    parser = _HTMLText()
    try:
        parser.feed(_escape_unclosed_comments(_close_open_tags(html)))
        parser.close()
    except (AssertionError, ValueError):  # malformed markup the parser gives up on
        pass
    for table in parser.tables:  # a table the markup never closed
        table.close_row(parser.parts)
    joined = "".join(parser.parts).replace("\xa0", " ").replace(_PARAGRAPH, "\n" + _PARAGRAPH + "\n")
    lines: list[str] = []
    blank_wanted = False
    for line in joined.split("\n"):
        if line == _PARAGRAPH:
            blank_wanted = bool(lines)
            continue
        line = line[1:].rstrip(" \t") if line.startswith(_ROW) else line.strip(" \t")
        line = line.replace(_PRE_NEWLINE, "\n")
        if line:
            if blank_wanted:
                lines.append("")
            lines.append(line)
            blank_wanted = False
    return "\n".join(lines)


def read_html(data: bytes) -> str:
    match = _META_CHARSET.search(data[:4096])
    declared = match.group(1).decode("ascii") if match else None
    return html_to_text(decode_text(data, declared))
