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
import unicodedata

from bastion_agent.extracting.formats.base import decode_text, spend_output, tidy_lines

# Names of man pages: section 1-9 and a short suffix (.3pm, .1ssl, .3perl), or the troff names.
_PAGE_SUFFIX = re.compile(r"\.(?:[1-9][a-z]{0,8}|man|mdoc|roff|troff)\Z", re.IGNORECASE)
# What the first bytes of a man page look like (a comment, the title, an mdoc date).
_HEADS = (b'.\\"', b"'\\\"", b".TH ", b".Dd ", b".Dd\n", b".so ", b"'\\\" ", b".de ")
# A control line of the first kilobytes marks troff; plain text rarely starts lines with these.
_TROFF_LINE = re.compile(r"^[.'][ \t]*(?:\\\"|TH|SH|Sh|Dd|Dt|PP|LP|TP|IP|Nm|so|de|ds|nr|ig|if|ie)\b", re.MULTILINE)
_SNIFF = 8192

STRING_LIMIT = 4096  # characters a string or register keeps: interpolation never grows past it
_NAME_LIMIT = 256  # characters of a bracketed escape name, \[...] or \*[...]
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


# ----------------------------------------------------------------- escapes

_SPECIAL = {
    "aq": "'", "dq": '"', "em": "\u2014", "en": "\u2013", "hy": "-", "bu": "\u2022", "lq": "\u201c",
    "rq": "\u201d", "oq": "\u2018", "cq": "\u2019", "co": "\u00a9", "rg": "\u00ae", "tm": "\u2122",
    "mu": "\u00d7", "di": "\u00f7", "de": "\u00b0", "->": "\u2192", "<-": "\u2190", "<=": "\u2264",
    ">=": "\u2265", "!=": "\u2260", "==": "\u2261", "ti": "~", "ha": "^", "rs": "\\", "sl": "/",
    "ba": "|", "bv": "|", "br": "|", "pl": "+", "mi": "\u2212", "eq": "=", "lB": "[", "rB": "]",
    "lC": "{", "rC": "}", "la": "\u27e8", "ra": "\u27e9", "Fo": "\u00ab", "Fc": "\u00bb",
    "fo": "\u2039", "fc": "\u203a", "sc": "\u00a7", "ps": "\u00b6", "ct": "\u00a2", "Eu": "\u20ac",
    "eu": "\u20ac", "Po": "\u00a3", "Ye": "\u00a5", "ss": "\u00df", "12": "\u00bd", "14": "\u00bc",
    "34": "\u00be", "ga": "`", "aa": "\u00b4", "at": "@", "sh": "#", "Do": "$", "dg": "\u2020",
    "dd": "\u2021", "pc": "\u00b7", "md": "\u22c5", "+-": "\u00b1", "no": "\u00ac", "if": "\u221e",
    "ul": "_", "ru": "_", "rn": "\u203e", "ci": "\u25cb", "sq": "\u25a1", "OK": "\u2713",
    "rh": "\u261e", "lh": "\u261c", "ae": "\u00e6", "AE": "\u00c6", "o/": "\u00f8", "O/": "\u00d8",
    "tf": "\u2234", "ap": "~", "Bq": "\u201e", "bq": "\u201a", "r!": "\u00a1",
    "r?": "\u00bf", "hA": "\u21d4", "rA": "\u21d2", "lA": "\u21d0",
}
_ACCENTS = {":": "\u0308", "'": "\u0301", "`": "\u0300", "^": "\u0302", "~": "\u0303", ",": "\u0327",
            "o": "\u030a", "v": "\u030c"}
_GREEK = dict(zip("abgdezyhiklmncoprstufxqw", "\u03b1\u03b2\u03b3\u03b4\u03b5\u03b6\u03b7\u03b8\u03b9\u03ba"
                  "\u03bb\u03bc\u03bd\u03be\u03bf\u03c0\u03c1\u03c3\u03c4\u03c5\u03c6\u03c7\u03c8\u03c9"))
# Escapes whose argument is delimited by the character after them and yields no text.
_DELIMITED = frozenset("bhvlLDoxXZRABSHwC")
# Escapes followed by a name (one character, (xx or [name]) that yield no text here.
_NAMED_SILENT = frozenset("fFgkmMVY$")
_SIMPLE = {"&": "", "^": "", "|": "", "%": "", ":": "", ",": "", "/": "", ")": "", "{": "", "}": "",
           "a": "", "d": "", "u": "", "r": "", "p": "", "z": "", "c": "", "E": "\\", "e": "\\",
           "\\": "\\", "-": "-", " ": " ", "~": " ", "0": " ", "t": "\t", "'": "\u00b4", "`": "`",
           ".": ".", "!": "", "?": "", "\n": ""}


def _special(name: str) -> str:
    """Text of a special character: ``em``, ``:a``, ``*a``, ``u00E9``, ``char65``."""
    if name in _SPECIAL:
        return _SPECIAL[name]
    if len(name) == 2 and name[0] in _ACCENTS and name[1].isalpha():
        return unicodedata.normalize("NFC", name[1] + _ACCENTS[name[0]])
    if len(name) == 2 and name[0] == "*" and name[1].lower() in _GREEK:
        letter = _GREEK[name[1].lower()]
        return letter.upper() if name[1].isupper() else letter
    match = re.fullmatch(r"u([0-9A-Fa-f]{4,6})(?:_([0-9A-Fa-f]{4,6}))*", name)
    if match:
        try:
            return unicodedata.normalize("NFC", "".join(chr(int(code, 16)) for code in name[1:].split("_")))
        except (ValueError, OverflowError):
            return ""
    match = re.fullmatch(r"char(\d{1,3})", name)
    if match and int(match.group(1)) < 256:
        return chr(int(match.group(1)))
    return ""


def _safe_char(code: str) -> str:
    try:
        number = int(code)
    except ValueError:
        return ""
    if 32 <= number < 0x110000 and not 0xD800 <= number < 0xE000:
        return chr(number)
    return ""


_SIZE = re.compile(r"[+-]?(?:\d{1,2}|\(\d\d|\[[^\]]{0,32}\]|'[^']{0,32}')")


class _Escapes:
    """Renders the escapes of one piece of text in one left-to-right pass."""

    def __init__(self) -> None:
        self.strings: dict[str, str] = {}
        self.registers: dict[str, str] = {}

    def _name(self, text: str, at: int) -> tuple[str, int]:
        """The name starting at ``at`` (x, (xx or [name]) and the index after it."""
        if at >= len(text):
            return "", at
        first = text[at]
        if first == "(":
            return text[at + 1:at + 3], at + 3
        if first == "[":
            end = text.find("]", at + 1, at + 2 + _NAME_LIMIT)
            if end < 0:
                return "", at + 1
            return text[at + 1:end], end + 1
        return first, at + 1

    def render(self, text: str) -> str:
        if "\\" not in text:
            return text
        out: list[str] = []
        at, size = 0, len(text)
        while at < size:
            slash = text.find("\\", at)
            if slash < 0:
                out.append(text[at:])
                break
            out.append(text[at:slash])
            if slash + 1 >= size:
                break
            kind = text[slash + 1]
            at = slash + 2
            if kind == "(" or kind == "[":
                name, at = self._name(text, slash + 1)
                out.append(_special(name))
            elif kind == "*":
                name, at = self._name(text, at)
                value = self.strings.get(name.split(" ", 1)[0], "")
                spend_output(len(value))  # a line of interpolations is counted as it grows
                out.append(value)
            elif kind == "n":
                if at < size and text[at] in "+-":
                    at += 1
                name, at = self._name(text, at)
                out.append(self.registers.get(name, ""))
            elif kind == "s":
                match = _SIZE.match(text, at)
                at = match.end() if match else at
            elif kind == "N":
                argument, at = self._delimited(text, at)
                out.append(_safe_char(argument))
            elif kind in _DELIMITED:
                argument, at = self._delimited(text, at)
                if kind == "C":
                    out.append(_special(argument))
            elif kind in _NAMED_SILENT:
                _, at = self._name(text, at)
            elif kind in _SIMPLE:
                out.append(_SIMPLE[kind])
            elif kind == '"' or kind == "#":  # a comment: the rest is not text
                break
            else:
                out.append(kind)  # as troff does: an unknown escape prints its character
        return "".join(out)

    @staticmethod
    def _delimited(text: str, at: int) -> tuple[str, int]:
        if at >= len(text):
            return "", at
        delimiter = text[at]
        end = text.find(delimiter, at + 1)
        if end < 0:
            return "", len(text)
        return text[at + 1:end], end + 1


_COMMENT = re.compile(r'\\(?:["#]|.)', re.DOTALL)


def strip_comment(line: str) -> str:
    """The line without its ``\\"`` or ``\\#`` comment (escaped backslashes respected)."""
    if '\\"' not in line and "\\#" not in line:
        return line
    for match in _COMMENT.finditer(line):
        if match.group() in ('\\"', "\\#"):
            return line[:match.start()]
    return line


_ARGUMENT = re.compile(r'"((?:[^"]|"")*)"?|((?:\\.|[^ \t\\]|\\\Z)+)')


def split_arguments(text: str) -> list[str]:
    """Macro arguments: separated by blanks, ``"quoted with spaces"``, ``""`` a quote inside quotes."""
    arguments = []
    for match in _ARGUMENT.finditer(text):
        if match.group(1) is not None:
            arguments.append(match.group(1).replace('""', '"'))
        elif match.group(2):
            arguments.append(match.group(2))
    return arguments


# ----------------------------------------------------------------- the page

# Requests and macros that break the line (a new paragraph) and show nothing themselves.
_PARAGRAPH = frozenset("PP LP P sp Pp Lp HP br ne bp Sp".split())
_IGNORED = frozenset(
    "ad na hy nh ft ps vs ll lt in ti ta ce ul cu ev cc c2 ec eo lf pl po pn ns rs rm rn als chop tr "
    "IX PD RS RE Os UC AT DT Bl El Ed Ek Bk Ud Dx hw pc ss cs bd fp fam nop mso mk rt fl ab tm tm1 tmc "
    "nx ch it wh dt em vpt cp do kern lg sty fschar fchar char schar rchar return shift substring "
    "length asciify unformat backtrace pnr pev pm ptr blm lsm rj hcode hla hlm hpf hpfa hym hys shc "
    "linetabs warn warnscale defcolor gcolor fcolor ME UE MT UR".split()
)
_FONT_ALTERNATING = frozenset("BI IB RB BR IR RI".split())
_FONT_JOINED = frozenset("B I SM SB".split())
# mdoc macros that may be called inside another's arguments; their names are not text.
_MDOC_CALLABLE = frozenset(
    "Ad An Ar At Bsx Bx Cd Cm Dv Dx Em Er Ev Fa Fl Fn Fr Ft Fx Ic Li Lk Ms Mt Nm No Ns Nx Ox Pa Pf "
    "Sx Sy Tn Ux Va Vt Xr Ao Ac Aq Bo Bc Bq Bro Brc Brq Do Dc Dq Eo Ec Oo Oc Op Po Pc Pq Qo Qc Ql Qq "
    "So Sc Sq Ta Eq St Lb In Fd Ot Bf Ef".split()
)
_MDOC_QUOTES = {"Aq": ("\u27e8", "\u27e9"), "Bq": ("[", "]"), "Brq": ("{", "}"), "Dq": ("\u201c", "\u201d"),
                "Op": ("[", "]"), "Pq": ("(", ")"), "Qq": ('"', '"'), "Sq": ("\u2018", "\u2019"),
                "Ql": ("\u2018", "\u2019")}
_MDOC_OPEN = {"Ao": "\u27e8", "Bo": "[", "Bro": "{", "Do": "\u201c", "Oo": "[", "Po": "(", "Qo": '"', "So": "\u2018"}
_MDOC_CLOSE = {"Ac": "\u27e9", "Bc": "]", "Brc": "}", "Dc": "\u201d", "Oc": "]", "Pc": ")", "Qc": '"', "Sc": "\u2019"}
_PUNCTUATION = frozenset(". , : ; ) ] ? ! ".split())
_MDOC_STANDARDS = {"-p1003.1": "IEEE Std 1003.1 (\u201cPOSIX.1\u201d)", "-ansiC": "ANSI X3.159-1989 (\u201cANSI C89\u201d)",
                   "-isoC": "ISO/IEC 9899:1990 (\u201cISO C90\u201d)", "-isoC-99": "ISO/IEC 9899:1999 (\u201cISO C99\u201d)"}


class _Page:
    """One pass over the lines of a page; ``render`` gives its text."""

    def __init__(self, text: str) -> None:
        self.lines = text.split("\n")
        self.escapes = _Escapes()
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
        elif name in _PARAGRAPH:
            self.paragraph()
        elif name in _FONT_ALTERNATING:
            self._font(rest, joined=False)
        elif name in _FONT_JOINED:
            self._font(rest, joined=True)
        elif name in _MDOC_CALLABLE:
            self._mdoc(name + " " + rest)
        elif name in _IGNORED:
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
        if arguments and not self.mdoc_name and arguments[0] not in _MDOC_CALLABLE:
            self.mdoc_name = self.escapes.render(arguments[0])
        if self.section == "SYNOPSIS":
            self.flush()  # each synopsis form starts its own line
        self._mdoc("Nm " + rest)

    def _mdoc(self, line: str) -> None:
        """A line of callable mdoc macros and words: ``Op Fl v Ar file`` is ``[-v file]``."""
        words = _MdocLine(self.escapes, self.mdoc_name)
        for token in split_arguments(line):
            words.token(token)
        self.text(words.finish())


class _MdocLine:
    """The words of one mdoc line as they are built: flags, quotes that close at the end, punctuation."""

    def __init__(self, escapes: _Escapes, name: str) -> None:
        self.escapes, self.name = escapes, name
        self.pieces: list[str] = []
        self.closers: list[str] = []
        self.punctuation = ""  # trailing punctuation, held until it is known to be inside or after the quotes
        self.glue = False  # the next word joins the previous one
        self.flag = False  # the next word is a flag (Fl)
        self.xref: list[str] | None = None
        self.wants = ""  # the macro whose default shows when no word follows it (Ar, Nm)

    def word(self, word: str) -> None:
        if self.punctuation:
            self._attach(self.punctuation)
            self.punctuation = ""
        if self.flag:
            word, self.flag = "-" + word, False
        if self.glue and self.pieces:
            self.pieces[-1] += word
        else:
            self.pieces.append(word)
        self.glue = False

    def _attach(self, text: str) -> None:
        if self.pieces:
            self.pieces[-1] += text
        else:
            self.pieces.append(text)

    def _defaults(self) -> None:
        if self.wants == "Ar":
            self.word("file ...")
        elif self.wants == "Nm" and self.name:
            self.word(self.name)
        self.wants = ""

    def token(self, token: str) -> None:
        if token in _MDOC_CALLABLE:
            self._defaults()
            self._macro(token)
            return
        if token in _PUNCTUATION:
            self.punctuation += token
            return
        self.wants = ""
        word = self.escapes.render(token)
        word = _MDOC_STANDARDS.get(word, word)
        if self.xref is not None:
            self.xref.append(word)
            if len(self.xref) < 2:
                return
            word, self.xref = f"{self.xref[0]}({self.xref[1]})", None
        self.word(word)

    def _macro(self, token: str) -> None:
        if self.flag:
            self.word("")
        if token == "Fl":
            self.flag = True
        elif token == "Ns":
            self.glue = True
        elif token in _MDOC_QUOTES:
            opening, closing = _MDOC_QUOTES[token]
            self.word(opening)
            self.glue = True
            self.closers.append(closing)
        elif token in _MDOC_OPEN:
            self.word(_MDOC_OPEN[token])
            self.glue = True
        elif token in _MDOC_CLOSE:
            self._attach(self.punctuation + _MDOC_CLOSE[token])
            self.punctuation = ""
        elif token == "Xr":
            self.xref = []
        elif token == "Ta":
            self._attach("\t")
            self.glue = True
        elif token in ("Ar", "Nm"):
            self.wants = token

    def finish(self) -> str:
        self._defaults()
        if self.flag:
            self.word("")
        if self.xref:
            self.word(self.xref[0])
        text = " ".join(piece for piece in self.pieces)
        return text + "".join(reversed(self.closers)) + self.punctuation


def _condition(rest: str, escapes: _Escapes) -> tuple[bool, str]:
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
