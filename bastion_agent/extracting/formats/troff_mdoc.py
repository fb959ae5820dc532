"""One line of mdoc macros as the words ``man`` shows: ``Op Fl v Ar file`` is ``[-v file]``.

Apart from the page (``troff.py``) because an mdoc line is a small language
of its own: callable macros inside another's arguments, quotes that close
at the end of the line, punctuation held until it is known where it goes.
"""

from __future__ import annotations

from bastion_agent.extracting.formats.troff_escapes import Escapes
from bastion_agent.extracting.formats.troff_tables import (
    MDOC_CALLABLE, MDOC_CLOSE, MDOC_OPEN, MDOC_QUOTES, MDOC_STANDARDS, PUNCTUATION,
)

class MdocLine:
    """The words of one mdoc line as they are built: flags, quotes that close at the end, punctuation."""

    def __init__(self, escapes: Escapes, name: str) -> None:
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
        if token in MDOC_CALLABLE:
            self._defaults()
            self._macro(token)
            return
        if token in PUNCTUATION:
            self.punctuation += token
            return
        self.wants = ""
        word = self.escapes.render(token)
        word = MDOC_STANDARDS.get(word, word)
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
        elif token in MDOC_QUOTES:
            opening, closing = MDOC_QUOTES[token]
            self.word(opening)
            self.glue = True
            self.closers.append(closing)
        elif token in MDOC_OPEN:
            self.word(MDOC_OPEN[token])
            self.glue = True
        elif token in MDOC_CLOSE:
            self._attach(self.punctuation + MDOC_CLOSE[token])
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
