"""Tolerance for text that OCR recognised: a misread character must not let a value through.

A degraded scan reads ``AKIANS57SP7.2TXWY7ON3`` for a key (a speck became a
dot) and an IBAN with one digit wrong, whose checksum then fails. Typed text
keeps its strict checks (a failed checksum there means it is not an IBAN);
only on the pages extract recognised by OCR (its listing's ``ocr_pages``,
``pages.py``) are these read with tolerance:

- an IBAN-shaped value (a country that uses IBANs, two check digits, 11 to
  30 letters or digits in groups) is removed whatever its checksum says;
- one stray punctuation character inside a token is bridged: the page is
  also scanned with it taken out, and what the rules find across it goes.

Cost: two passes over the OCR pages, each a regular expression led by a
character class, with bounded repetitions.
"""

from __future__ import annotations

import bisect
import re

from bastion_agent.sanitizing.disguises import view_of
from bastion_agent.sanitizing.pages import FORM_FEED

# The version of what this module finds or how it replaces it (detection_version.py).
DETECTION_VERSION = 1

# Countries that issue IBANs (ISO 13616 registry), for the shape without its checksum.
IBAN_COUNTRIES = frozenset("""AD AE AL AT AZ BA BE BG BH BI BR BY CH CR CY CZ DE DJ DK DO EE EG ES FI FK FO FR GB GE
GI GL GR GT HR HU IE IL IQ IS IT JO KW KZ LB LC LI LT LU LV LY MC MD ME MK MN MR MT MU NI NL NO OM PK PL PS PT QA RO RS
RU SA SC SD SE SI SK SM SO ST SV TL TN TR UA VA VG XK YE""".split())
IBAN_SHAPE = re.compile(r"(?<![A-Za-z0-9])([A-Z]{2})\d{2}(?:[ \-]?[A-Z0-9]){11,30}(?![A-Za-z0-9])")
# One stray character between two runs of a token of at least 16 letters and digits in all.
STRAY = re.compile(r"(?<![A-Za-z0-9])(?=[A-Za-z0-9.,:;'`|!_\-]{17,})[A-Za-z0-9]{3,64}([.,:;'`|!_\-])[A-Za-z0-9]{3,64}"
                   r"(?![A-Za-z0-9])")


def page_spans(text: str, ocr_pages) -> list[tuple[int, int]]:
    """The (start, end) of each page of ``text`` that OCR read (pages counted from 1, split at form feeds)."""
    wanted = {page for page in ocr_pages or () if isinstance(page, int) and not isinstance(page, bool) and page > 0}
    if not wanted:
        return []
    spans, start = [], 0
    for number, page in enumerate(text.split(FORM_FEED), start=1):
        if number in wanted:
            spans.append((start, start + len(page)))
        start += len(page) + 1
    return spans


def findings(text: str, spans: list[tuple[int, int]], scan, iban_order: int | None) -> list[tuple[int, int, int, str]]:
    """(start, end, order, rule) of the values the OCR pages ``spans`` hold under the tolerant reading.

    ``scan(piece)`` returns what the rules find in a piece of text, as
    ``(start, end, order, rule)``; ``iban_order`` is the order of the IBAN
    rule (None when it is disabled).
    """
    found = []
    for first, last in spans:
        if iban_order is not None:
            found.extend((m.start(), m.end(), iban_order, "iban") for m in IBAN_SHAPE.finditer(text, first, last)
                         if m.group(1) in IBAN_COUNTRIES)
        edits = [(m.start(1), m.end(1), "") for m in STRAY.finditer(text, first, last)]
        if not edits:
            continue
        view = view_of(text[first:last], [(s - first, e - first, r) for s, e, r in edits])
        starts = [s for s, _, _ in edits]
        for start, end, order, rule in scan(view.text):
            s, e = view.span(start, end)
            s, e = s + first, e + first
            index = bisect.bisect_left(starts, e) - 1
            if index >= 0 and edits[index][1] > s:
                found.append((s, e, order, rule))
    return found
