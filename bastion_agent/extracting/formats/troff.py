"""Man pages (troff with the man or mdoc macros) as the text ``man`` shows.

A man page indexed as its source reads ``.\\" DO NOT MODIFY THIS FILE!``
and ``\\fB\\-\\-help\\fR``: the licence header ranks for unrelated
questions and every option is split by escapes. This reader keeps what a
reader of the page sees: the title, section headings, paragraphs (filled
lines joined), tagged paragraphs as a tag line then its text, tables cell
by cell with tabs, and no-fill blocks (``.nf``, ``.EX``) line by line.

It is a reader, not a typesetter, and it is built to stay linear on any
input: it never expands user macros (``.de`` bodies are skipped; the few
that pod2man defines for every page are known by name), never follows
``.so`` (a page never reads another file), interpolates strings and
number registers from values that are already flat and capped in length,
and walks conditional blocks with a depth counter instead of recursion.
Comments, requests and the bodies of ``.de``/``.ig`` are not part of the
text; the byte-level scan of extract reads the raw bytes as well
(``reading.py``), so a secret hidden there is still seen.

A file named like a man page that is not troff (a rotated log,
``messages.1``) is read as plain text.
"""

from __future__ import annotations

import re

from bastion_agent.extracting.formats.base import decode_text, spend_output, tidy_lines
from bastion_agent.extracting.formats.troff_escapes import Escapes, split_arguments, strip_comment
from bastion_agent.extracting.formats.troff_mdoc import MdocLine
from bastion_agent.extracting.formats.troff_tables import (
    FONT_ALTERNATING, FONT_JOINED, IGNORED, MDOC_CALLABLE, PARAGRAPH,
)

# Names of man pages: section 1-9 and a short suffix (.3pm, .1ssl, .3perl), or the troff names.
_PAGE_SUFFIX = re.compile(r"\.(?:[1-9][a-z]{0,8}|man|mdoc|roff|troff)\Z", re.IGNORECASE)
# What the first bytes of a man page look like (a comment, the title, an mdoc date).
_HEADS = (b'.\\"', b"'\\\"", b".TH ", b".Dd ", b".Dd\n", b".so ", b"'\\\" ", b".de ")
# A control line of the first kilobytes marks troff; plain text rarely starts lines with these.
_TROFF_LINE = re.compile(r"^[.'][ \t]*(?:\\\"|TH|SH|Sh|Dd|Dt|PP|LP|TP|IP|Nm|so|de|ds|nr|ig|if|ie)\b", re.MULTILINE)
_SNIFF = 8192

STRING_LIMIT = 4096  # characters a string or register keeps: interpolation never grows past it
NESTING_LIMIT = 16  # conditionals nested on one line (real pages: 3); deeper ones are dropped


def is_page_name(suffix: str) -> bool:
    """Does a file suffix (``.1``, ``.3pm``, ``.man``) name a man page?"""
    return bool(_PAGE_SUFFIX.match(suffix))


def looks_like_page(head: bytes) -> bool:
    """Do the first bytes of a file without a suffix start a man page?"""
    return head.startswith(_HEADS)


def read_troff(data: bytes) -> str:
    text = decode_text(data)
    if not _TROFF_LINE.search(text[:_SNIFF]):
        spend_output(len(text))
        return text  # named like a page, but plain text
    return tidy_lines(_Page(text).render())


class _Page:
    """One pass over the lines of a page; ``render`` gives its text."""

    def __init__(self, text: str) -> None:
        self.lines = text.split("\n")
        self.escapes = Escapes()
        self.out: list[str] = []  # finished lines
        self.words: list[str] = []  # the filled line being built
        self.fill = True
        self.table: str | None = None  # None, "format" (reading the format lines) or "data"
        self.table_block: list[str] | None = None  # inside T{ ... T}
        self.skip_until: str | None = None  # end of a .de/.ig body or an .EQ/.PS block
        self.skip_depth = 0  # open \{ of a false conditional being skipped
        self.pending_tag = False  # the next text line is a .TP tag
        self.pending_heading = 0  # the next text line is a heading (.SH, .SS without arguments)
        self.conditions: list[bool] = []
        self.mdoc_name = ""
        self.no_space = False  # mdoc .Ns or \c: the next words join the last one
        self.section = ""
        self.nesting = 0  # conditionals inside conditionals on the line being read

    # -- output

    def emit(self, line: str) -> None:
        spend_output(len(line) + 1)
        self.out.append(line)

    def text(self, words: str) -> None:
        """Text in the current mode: filled into the paragraph, or a line of its own."""
        if not self.fill:
            self.emit(words)
            return
        if not words.strip():
            return
        if self.no_space and self.words:
            self.words[-1] += words.lstrip()
        else:
            self.words.append(words.strip())
        self.no_space = False
        spend_output(len(words) + 1)

    def flush(self) -> None:
        if self.words:
            self.out.append(" ".join(self.words))
            self.words = []

    def paragraph(self) -> None:
        self.flush()
        if self.out and self.out[-1] != "":
            self.out.append("")

    def render(self) -> str:
        pending: list[str] = []
        for raw in self.lines:
            if raw.endswith("\\") and not raw.endswith("\\\\"):  # continued on the next line
                pending.append(raw[:-1])
                continue
            if pending:
                pending.append(raw)
                raw = "".join(pending)
                pending = []
            self.line(raw)
        if pending:
            self.line("".join(pending))
        self.flush()
        return "\n".join(self.out)

    # -- one input line

    def line(self, raw: str) -> None:
        if self.skip_until is not None:
            if self._ends_skip(raw):
                self.skip_until = None
            return
        if self.skip_depth:
            self._skip_block(raw)
            return
        line = strip_comment(raw)
        if line.startswith((".", "'")):
            self.request(line[1:])
            return
        if self.table is not None:
            self._table_line(line)
            return
        if not line.strip():
            if raw.strip() and not line.strip():
                return  # a comment-only line is not a blank line
            if self.fill:
                self.paragraph()
            else:
                self.emit("")
            return
        rendered = self.escapes.render(line)
        if self.pending_heading:
            self._heading(rendered)
            return
        if line.startswith((" ", "\t")) and self.fill:
            self.flush()
        joins = line.rstrip().endswith("\\c")
        self.text(rendered)
        if self.pending_tag:
            self.flush()
            self.pending_tag = False
        self.no_space = joins

    def _ends_skip(self, raw: str) -> bool:
        """Is this line the end of the .de/.ig/.EQ body being skipped (``..`` or ``.END``)?"""
        line = strip_comment(raw)
        if not line.startswith((".", "'")):
            return False
        words = line[1:].split(None, 1)
        return bool(words) and words[0] == self.skip_until

    def _skip_block(self, raw: str) -> None:
        self.skip_depth += raw.count("\\{") - raw.count("\\}")
        if self.skip_depth < 0:
            self.skip_depth = 0

    def _heading(self, text: str) -> None:
        self.paragraph()
        self.section = text.strip()
        self.emit(self.section)  # the heading sits on its section's first line, as man shows it
        self.pending_heading = 0

    # -- requests and macros

    def request(self, body: str) -> None:
        body = body.lstrip(" \t")
        match = re.match(r"(\S{1,40})", body)
        if not match:
            return
        name = match.group(1)
        rest = body[match.end():].lstrip(" \t")
        if name.startswith("\\}") or name.startswith("\\{"):
            return
        handler = _HANDLERS.get(name)
        if handler is not None:
            handler(self, rest)
        elif name in PARAGRAPH:
            self.paragraph()
        elif name in FONT_ALTERNATING:
            self._font(rest, joined=False)
        elif name in FONT_JOINED:
            self._font(rest, joined=True)
        elif name in MDOC_CALLABLE:
            self._mdoc(name + " " + rest)
        elif name in IGNORED:
            pass
        # any other request or user macro: not expanded, not shown

    def _font(self, rest: str, joined: bool) -> None:
        arguments = [self.escapes.render(a) for a in split_arguments(rest)]
        if not arguments:
            return  # the font applies to the next line, which is text anyway
        words = " ".join(arguments) if joined else "".join(arguments)
        self.text(words)
        if self.pending_tag:
            self.flush()
            self.pending_tag = False

    def _title(self, rest: str) -> None:
        arguments = [self.escapes.render(a) for a in split_arguments(rest)]
        if arguments:
            section = f"({arguments[1]})" if len(arguments) > 1 else ""
            self.paragraph()
            self.emit(arguments[0] + section)
            self.emit("")

    def _section(self, rest: str) -> None:
        self.pending_tag = False
        if rest.strip():
            self._heading(" ".join(self.escapes.render(a) for a in split_arguments(rest)))
        else:
            self.paragraph()
            self.pending_heading = 1

    def _tagged(self, rest: str) -> None:
        self.paragraph()
        self.pending_tag = True

    def _indented(self, rest: str) -> None:
        self.paragraph()
        arguments = split_arguments(rest)
        tag = self.escapes.render(arguments[0]).strip() if arguments else ""
        if tag:  # the tag (a bullet, an option) begins the paragraph
            self.text(tag)

    def _nofill(self, rest: str) -> None:
        self.flush()
        self.fill = False

    def _dofill(self, rest: str) -> None:
        self.fill = True

    def _define_string(self, rest: str) -> None:
        name, _, value = rest.partition(" ")
        if value.startswith('"'):
            value = value[1:]
        self.escapes.strings[name] = self.escapes.render(value)[:STRING_LIMIT]

    def _append_string(self, rest: str) -> None:
        name, _, value = rest.partition(" ")
        if value.startswith('"'):
            value = value[1:]
        joined = self.escapes.strings.get(name, "") + self.escapes.render(value)
        self.escapes.strings[name] = joined[:STRING_LIMIT]

    def _register(self, rest: str) -> None:
        arguments = rest.split()
        if len(arguments) >= 2:
            value = self.escapes.render(arguments[1])
            self.escapes.registers[arguments[0]] = value if re.fullmatch(r"[+-]?\d{1,12}", value) else "0"

    def _define_macro(self, rest: str) -> None:
        arguments = rest.split()
        self.skip_until = arguments[1] if len(arguments) > 1 else "."
        self.flush()

    def _ignore_block(self, rest: str) -> None:
        arguments = rest.split()
        self.skip_until = arguments[0] if arguments else "."

    def _if(self, rest: str) -> None:
        truth, body = _condition(rest, self.escapes)
        self._branch(truth, body)

    def _ifelse(self, rest: str) -> None:
        truth, body = _condition(rest, self.escapes)
        self.conditions.append(truth)
        del self.conditions[:-64]
        self._branch(truth, body)

    def _else(self, rest: str) -> None:
        truth = not self.conditions.pop() if self.conditions else False
        self._branch(truth, rest)

    def _branch(self, truth: bool, body: str) -> None:
        body = body.lstrip(" \t")
        opens = body.startswith("\\{")
        if opens:
            body = body[2:].lstrip(" \t")
        if not truth:
            if opens:
                self.skip_depth = 1
                self._skip_block(body)
            return
        if body.strip() and self.nesting < NESTING_LIMIT:
            # the body is a line of its own: a request (maybe another .if) or text
            self.nesting += 1
            try:
                self.line(body)
            finally:
                self.nesting -= 1

    def _table(self, rest: str) -> None:
        self.flush()
        self.table = "format"

    def _table_end(self, rest: str) -> None:
        self.table = None
        self.table_block = None
        self.paragraph()

    def _table_format(self, rest: str) -> None:
        self.table = "format"

    def _table_line(self, line: str) -> None:
        if self.table == "format":
            if line.rstrip().endswith("."):
                self.table = "data"
            return
        if self.table_block is not None:
            if line.startswith("T}"):
                self.table_block.append(line[2:])
                self.emit(self.escapes.render(" ".join(self.table_block)).strip())
                self.table_block = None
            else:
                self.table_block.append(line)
            return
        if line.strip() in ("_", "=", ""):
            return
        if line.rstrip().endswith("T{"):
            self.table_block = [line.rstrip()[:-2]]
            return
        self.emit(self.escapes.render(line).rstrip())

    def _link(self, rest: str) -> None:
        arguments = split_arguments(rest)
        if arguments:
            self.text("<" + self.escapes.render(arguments[0]) + ">")

    def _synopsis(self, rest: str) -> None:
        self.paragraph()
        self.text(" ".join(self.escapes.render(a) for a in split_arguments(rest)))

    def _option(self, rest: str) -> None:
        arguments = [self.escapes.render(a) for a in split_arguments(rest)]
        if arguments:
            self.text("[" + " ".join(arguments) + "]")

    # -- mdoc

    def _mdoc_title(self, rest: str) -> None:
        arguments = [self.escapes.render(a) for a in split_arguments(rest)]
        if arguments:
            self.paragraph()
            self.emit(arguments[0] + (f"({arguments[1]})" if len(arguments) > 1 else ""))
            self.emit("")

    def _mdoc_section(self, rest: str) -> None:
        self._heading(" ".join(self.escapes.render(a) for a in split_arguments(rest)))

    def _mdoc_item(self, rest: str) -> None:
        self.paragraph()
        if rest.strip():
            self._mdoc(rest)
            self.flush()

    def _mdoc_description(self, rest: str) -> None:
        self.text("\u2014 " + " ".join(self.escapes.render(a) for a in split_arguments(rest)))

    def _mdoc_display(self, rest: str) -> None:
        self.paragraph()
        if "-literal" in rest or "-unfilled" in rest:
            self.fill = False

    def _mdoc_display_end(self, rest: str) -> None:
        self.fill = True
        self.paragraph()

    def _mdoc_one_line(self, rest: str) -> None:
        self.flush()
        self._mdoc(rest)
        self.flush()

    def _mdoc_name(self, rest: str) -> None:
        arguments = split_arguments(rest)
        if arguments and not self.mdoc_name and arguments[0] not in MDOC_CALLABLE:
            self.mdoc_name = self.escapes.render(arguments[0])
        if self.section == "SYNOPSIS":
            self.flush()  # each synopsis form starts its own line
        self._mdoc("Nm " + rest)

    def _mdoc(self, line: str) -> None:
        """A line of callable mdoc macros and words: ``Op Fl v Ar file`` is ``[-v file]``."""
        words = MdocLine(self.escapes, self.mdoc_name)
        for token in split_arguments(line):
            words.token(token)
        self.text(words.finish())


def _condition(rest: str, escapes: Escapes) -> tuple[bool, str]:
    """A conditional's truth as ``man`` (nroff) sees it, and the rest of the line."""
    rest = rest.lstrip(" \t")
    negate = rest.startswith("!")
    if negate:
        rest = rest[1:]
    truth = False
    match = re.match(r"([ntoevh])(?=[\s\\]|\Z)", rest)
    if match:
        truth = match.group(1) in "no"
        rest = rest[1:]
    elif rest[:1] in ("'", '"', "/", "|"):  # 'a'b': a string comparison
        delimiter = rest[0]
        first = rest.find(delimiter, 1)
        second = rest.find(delimiter, first + 1) if first >= 0 else -1
        if second < 0:
            return False, ""
        truth = escapes.render(rest[1:first]) == escapes.render(rest[first + 1:second])
        rest = rest[second + 1:]
    elif rest[:2] in ("d ", "r ", "c ", "m ", "F ", "S "):
        parts = rest.split(None, 2)
        name = parts[1] if len(parts) > 1 else ""
        truth = rest[0] == "d" and name in escapes.strings or rest[0] == "r" and name in escapes.registers
        rest = parts[2] if len(parts) > 2 else ""
    else:
        match = re.match(r"\(?([^\s]*?)\)?(?=\s|\\\{|\Z)", rest)
        expression = escapes.render(match.group(1)) if match else ""
        rest = rest[match.end():] if match else ""
        truth = _number_true(expression)
    return truth != negate, rest


def _number_true(expression: str) -> bool:
    """A numeric condition: true when it starts with a positive number (groff's ``.g`` is 0 here)."""
    match = re.match(r"[+-]?\d{1,12}", expression.strip("()"))
    if not match:
        return False
    value = int(match.group())
    rest = expression[match.end():]
    comparison = re.match(r"\)?\s*(<=|>=|==|=|<|>)\s*\(?([+-]?\d{1,12})", rest)
    if comparison:
        other = int(comparison.group(2))
        return {"<=": value <= other, ">=": value >= other, "==": value == other, "=": value == other,
                "<": value < other, ">": value > other}[comparison.group(1)]
    return value > 0


_HANDLERS = {
    "TH": _Page._title, "SH": _Page._section, "SS": _Page._section, "TP": _Page._tagged, "TQ": _Page._tagged,
    "IP": _Page._indented, "nf": _Page._nofill, "fi": _Page._dofill, "EX": _Page._nofill, "EE": _Page._dofill,
    "ds": _Page._define_string, "as": _Page._append_string, "nr": _Page._register, "de": _Page._define_macro,
    "am": _Page._define_macro, "de1": _Page._define_macro, "am1": _Page._define_macro,
    "dei": _Page._define_macro, "ami": _Page._define_macro, "dei1": _Page._define_macro, "ami1": _Page._define_macro,
    "ds1": _Page._define_string, "as1": _Page._append_string, "ig": _Page._ignore_block, "if": _Page._if, "ie": _Page._ifelse,
    "el": _Page._else, "TS": _Page._table, "TE": _Page._table_end, "T&": _Page._table_format,
    "UR": lambda page, rest: None, "UE": lambda page, rest: None, "MT": lambda page, rest: None,
    "ME": lambda page, rest: None, "SY": _Page._synopsis, "OP": _Page._option, "YS": _Page._tagged,
    "EQ": lambda page, rest: setattr(page, "skip_until", "EN"),
    "PS": lambda page, rest: setattr(page, "skip_until", "PE"),
    "so": lambda page, rest: None,  # never read another file
    "Dt": _Page._mdoc_title, "Sh": _Page._mdoc_section, "Ss": _Page._mdoc_section, "It": _Page._mdoc_item,
    "Nd": _Page._mdoc_description, "Bd": _Page._mdoc_display, "Ed": _Page._mdoc_display_end,
    "D1": _Page._mdoc_one_line, "Dl": _Page._mdoc_one_line, "Nm": _Page._mdoc_name,
    "Dd": lambda page, rest: None, "Rs": lambda page, rest: page.paragraph(), "Vb": _Page._nofill, "Ve": _Page._dofill, "Re": lambda page, rest: page.paragraph(),
}
