"""The escapes and argument lists of troff lines, rendered flat for the man page reader.

Apart from the page (``troff.py``) because an escape is read the same way
in every request, macro and text line: one left-to-right pass over a line,
with strings and registers interpolated from values already flat and capped.
"""

from __future__ import annotations

import re
import unicodedata

from bastion_agent.extracting.formats.base import spend_output
from bastion_agent.extracting.formats.troff_tables import ACCENTS, DELIMITED, GREEK, NAMED_SILENT, SIMPLE, SPECIAL

NAME_LIMIT = 256  # characters of a bracketed escape name, \[...] or \*[...]


def _special(name: str) -> str:
    """Text of a special character: ``em``, ``:a``, ``*a``, ``u00E9``, ``char65``."""
    if name in SPECIAL:
        return SPECIAL[name]
    if len(name) == 2 and name[0] in ACCENTS and name[1].isalpha():
        return unicodedata.normalize("NFC", name[1] + ACCENTS[name[0]])
    if len(name) == 2 and name[0] == "*" and name[1].lower() in GREEK:
        letter = GREEK[name[1].lower()]
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


class Escapes:
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
            end = text.find("]", at + 1, at + 2 + NAME_LIMIT)
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
            elif kind in DELIMITED:
                argument, at = self._delimited(text, at)
                if kind == "C":
                    out.append(_special(argument))
            elif kind in NAMED_SILENT:
                _, at = self._name(text, at)
            elif kind in SIMPLE:
                out.append(SIMPLE[kind])
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
