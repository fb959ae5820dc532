"""The string values a Go test file spells out, read without Go: literals, ``+``, ``fmt.Sprintf``.

trufflehog's detector tests and gitleaks' rule files hold their sample
secrets as Go string expressions: a raw or quoted literal, a package
variable, a concatenation, a ``fmt.Sprintf`` of those, a
``strings.Repeat``. The peer-suite bench reads them at run time from a
checkout, so this evaluates that small part of Go and gives ``None`` for
anything else (a generated secret, a function call it does not know): a
case whose text cannot be known is left out and counted, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TOKEN = re.compile(r"""
    (?P<space>\s+|//[^\n]*|/\*.*?\*/)
  | (?P<raw>`[^`]*`)
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<rune>'(?:[^'\\\n]|\\.)+')
  | (?P<num>\d[\w.]*)
  | (?P<ident>[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*)
  | (?P<op>:=|\.\.\.|[-+*/%=:,;(){}\[\]<>!&|^.])
""", re.S | re.X)
ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "a": "\a", "b": "\b", "f": "\f",
           "v": "\v", "0": "\0"}
VERB = re.compile(r"%([-+# 0]*\d*(?:\.\d+)?)([svdqxX%])")


@dataclass
class Token:
    kind: str
    text: str
    at: int


def tokens(source: str) -> list[Token]:
    out, at = [], 0
    while at < len(source):
        match = TOKEN.match(source, at)
        if not match:
            at += 1  # a character Go has and this reader does not need
            continue
        if match.lastgroup != "space":
            out.append(Token(match.lastgroup, match.group(), at))
        at = match.end()
    return out


def unquote(token: Token) -> str:
    if token.kind == "raw":
        return token.text[1:-1].replace("\r", "")
    body, out, i = token.text[1:-1], [], 0
    while i < len(body):
        char = body[i]
        if char != "\\" or i + 1 >= len(body):
            out.append(char)
            i += 1
            continue
        code = body[i + 1]
        if code in ESCAPES:
            out.append(ESCAPES[code])
            i += 2
        elif code in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[code]
            out.append(chr(int(body[i + 2:i + 2 + width], 16)))
            i += 2 + width
        else:
            out.append(code)
            i += 2
    return "".join(out)


def sprintf(template: str, args: list) -> str | None:
    """Go's ``fmt.Sprintf`` for the verbs test tables use (%s %v %d %q %x); None when an argument is unknown."""
    values = iter(args)
    failed = False

    def one(match):
        nonlocal failed
        if match.group(2) == "%":
            return "%"
        value = next(values, None)
        if value is None:
            failed = True
            return ""
        text = str(value)
        return f'"{text}"' if match.group(2) == "q" else text

    result = VERB.sub(one, template)
    return None if failed else result


class Reader:
    """Evaluates expressions over the token list of one file, with its string variables as they are found."""

    def __init__(self, source: str):
        self.toks = tokens(source)
        self.env: dict[str, object] = {}
        self._collect()

    def _collect(self) -> None:
        """Every ``NAME = expr`` / ``NAME := expr`` of the file whose value is known, in file order."""
        for i in range(len(self.toks) - 2):
            name, op = self.toks[i], self.toks[i + 1]
            if name.kind == "ident" and op.text in ("=", ":=") and "." not in name.text:
                value, _ = self.expr(i + 2)
                if isinstance(value, (str, int, list)) and name.text not in self.env:
                    self.env[name.text] = value

    def expr(self, i: int):
        """(value or None, index after the expression): operands joined by ``+``."""
        value, i = self.operand(i)
        while i < len(self.toks) and self.toks[i].text == "+":
            right, i = self.operand(i + 1)
            if isinstance(value, str) and isinstance(right, str):
                value = value + right
            elif isinstance(value, int) and isinstance(right, int):
                value = value + right
            else:
                value = None
        return value, i

    def operand(self, i: int):
        if i >= len(self.toks):
            return None, i
        tok = self.toks[i]
        if tok.kind in ("raw", "str"):
            return unquote(tok), i + 1
        if tok.kind == "num":
            return (int(tok.text), i + 1) if tok.text.isdigit() else (None, i + 1)
        if tok.text == "(":
            value, i = self.expr(i + 1)
            return value, self.close(i, ")")
        if tok.text == "[":
            return self.composite(i)
        if tok.kind != "ident":
            return None, i + 1
        if i + 1 < len(self.toks) and self.toks[i + 1].text == "(":
            return self.call(tok.text, i + 2)
        if tok.text == "nil":
            return [], i + 1
        return self.env.get(tok.text), i + 1

    def call(self, name: str, i: int):
        args = []
        while i < len(self.toks) and self.toks[i].text != ")":
            value, i = self.expr(i)
            args.append(value)
            if i < len(self.toks) and self.toks[i].text in (",", "..."):
                i += 1
            elif i < len(self.toks) and self.toks[i].text != ")":
                i = self.close(i, ")") - 1
                args.append(None)
                break
        i += 1
        if name == "fmt.Sprintf" and args and isinstance(args[0], str):
            return sprintf(args[0], args[1:]), i
        if name == "strings.Repeat" and len(args) == 2 and isinstance(args[0], str) and isinstance(args[1], int):
            return args[0] * min(args[1], 10_000), i
        if name in ("string", "strings.TrimSpace") and len(args) == 1 and isinstance(args[0], str):
            return (args[0].strip() if name != "string" else args[0]), i
        return None, i

    def composite(self, i: int):
        """``[]string{a, b}`` -> [a, b] (an element unknown stays None); any other type -> None."""
        j = i
        while j < len(self.toks) and self.toks[j].text != "{":
            j += 1
        type_text = "".join(t.text for t in self.toks[i:j])
        items, k = [], j + 1
        while k < len(self.toks) and self.toks[k].text != "}":
            start = k
            value, k = self.expr(k)
            if k == start:
                k = self.skip(k)
                value = None
            items.append(value)
            if k < len(self.toks) and self.toks[k].text == ",":
                k += 1
        return (items if type_text == "[]string" else None), k + 1

    def skip(self, i: int) -> int:
        """The index after one element that is not an expression (a nested literal): to its ``,`` or ``}``."""
        return self._level_end(i, commas=True)

    def close(self, i: int, closer: str) -> int:
        """The index after the ``closer`` that ends the bracket open before ``i`` (at another closer: that one)."""
        i = self._level_end(i, commas=False)
        return i + 1 if i < len(self.toks) and self.toks[i].text == closer else i

    def _level_end(self, i: int, *, commas: bool) -> int:
        """The first closing bracket (or, with ``commas``, ``,``) at the bracket depth of ``i``, or the end."""
        depth = 0
        while i < len(self.toks):
            text = self.toks[i].text
            if text in "({[":
                depth += 1
            elif text in ")}]":
                if depth == 0:
                    return i
                depth -= 1
            elif commas and text == "," and depth == 0:
                return i
            i += 1
        return i
