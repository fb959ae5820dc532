"""PDF text through the optional ``pypdf`` extra (``pip install 'bastion-agent[pdf]'``).

pypdf is pure Python, well kept and has its own decompression limits, so a
bastion can read PDFs without a compiled parser. It is imported here, lazily,
never at the top of a core module: without it a PDF is skipped with a reason
that says what to install.

Text is read page by page in the order pypdf gives, with ``PAGE_BREAK`` (a
form feed on a line of its own) between pages, so that a window never glues
the last words of a page to the first of the next and a hit can say its page
(``sanitizing/pages.py``); a page without text is an empty page between two
breaks, so the pages keep their numbers. Which pages OCR read is in
``PdfReading.ocr_pages``. Every failure is a reason, never an exception:

- ``encrypted``: a password is needed (an empty user password, common on
  "protected" PDFs that only restrict printing, is tried and works);
- ``no text layer``: no page has any text (a scan: it would need OCR);
- ``damaged: WHY``: pypdf cannot parse it, with why in a few fixed words
  (``truncated``, ``no cross-reference table``, ``empty``, else the kind of
  pypdf's error) and how many pages were read before it failed, if any:
  never pypdf's own message, which can quote the file's bytes;
- ``too many pages``, ``too large unpacked``, ``timed out``: the limits
  below, against PDF bombs.
"""

from __future__ import annotations

import contextlib
import io
import logging
import signal
import threading
import time
import warnings
from dataclasses import dataclass

from bastion_agent.core.extras import optional
from bastion_agent.extracting.formats.base import Refused
from bastion_agent.sanitizing.pages import FORM_FEED, PAGE_BREAK

PDF_VERSION = "2"  # bump when this module's output changes; 2: pages apart by PAGE_BREAK, blank ones kept
MAX_PAGES = 5_000
MAX_TEXT_CHARS = 64 * 1024 * 1024
MAX_SECONDS = 120.0
# One decompressed stream is capped by pypdf itself (75 MB by default, raised
# as LimitReachedError), which we count as "too large unpacked".

REASON_NOT_INSTALLED = "pdf support not installed (pip install 'bastion-agent[pdf]')"
REASON_ENCRYPTED = "encrypted"
REASON_NO_TEXT = "no text layer"
REASON_DAMAGED = "damaged"
REASON_PAGES = "too many pages"
REASON_UNPACKED = "too large unpacked"
REASON_TIME = "timed out"


@dataclass(frozen=True)
class PdfReading:
    text: str | None
    reason: str | None = None
    ocr_pages: tuple[int, ...] = ()  # the pages (numbers from 1) whose text OCR recognised


def _pypdf():
    """The pypdf module, or None when the extra is not installed."""
    return optional("pypdf")


def available() -> bool:
    return _pypdf() is not None


def version() -> str | None:
    """What PDF text depends on besides the bytes: pypdf's version and our limits."""
    pypdf = _pypdf()
    if pypdf is None:
        return None
    from bastion_agent.extracting.formats import ocr

    scans = ocr.version() if ocr.pdf_available() else None  # installing OCR reads image-only pages again
    return f"{PDF_VERSION}+pypdf-{pypdf.__version__}+pages-{MAX_PAGES}+chars-{MAX_TEXT_CHARS}" + (
        f"+{scans}+pdfium-{optional('pypdfium2.version').PYPDFIUM_INFO}" if scans else "")


def read_pdf(data: bytes, *, max_seconds: float = MAX_SECONDS, clock=time.monotonic) -> PdfReading:
    """Text of a PDF, or the reason there is none; never raises on bad input."""
    pypdf = _pypdf()
    if pypdf is None:
        return PdfReading(None, REASON_NOT_INSTALLED)
    try:
        with _quiet(pypdf), _deadline(max_seconds):
            return _read(pypdf, data, max_seconds, clock)
    except _TimedOut:
        return PdfReading(None, REASON_TIME)


def _read(pypdf, data: bytes, max_seconds: float, clock) -> PdfReading:
    from pypdf import errors

    encrypted = (errors.FileNotDecryptedError, errors.DependencyError)
    limited = getattr(errors, "LimitReachedError", ())  # pypdf >= 5 names its decompression caps
    started = clock()
    pages, count = [], 0
    try:
        reader = pypdf.PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted and reader.decrypt("") == pypdf.PasswordType.NOT_DECRYPTED:
            return PdfReading(None, REASON_ENCRYPTED)
        count = len(reader.pages)
        if count > MAX_PAGES:
            return PdfReading(None, REASON_PAGES)
        chars = 0
        from bastion_agent.extracting.formats import ocr

        scans = ocr.pdf_available()
        for page in reader.pages:
            if clock() - started > max_seconds:
                return PdfReading(None, REASON_TIME)
            text = (page.extract_text() or "").replace(FORM_FEED, "\n").strip("\n").rstrip()
            chars += len(text)
            if chars > MAX_TEXT_CHARS:
                return PdfReading(None, REASON_UNPACKED)
            pages.append(text)
        recognised = _recognise(data, pages, ocr) if scans else []
    except encrypted:
        return PdfReading(None, REASON_ENCRYPTED)
    except limited:
        return PdfReading(None, REASON_UNPACKED)
    except Refused as refused:  # OCR's limits (too_costly: pixels), or a page PDFium cannot render
        return PdfReading(None, refused.reason)
    except _TimedOut:
        raise
    except (Exception, RecursionError) as exc:  # a parser on hostile input may raise anything
        return PdfReading(None, damaged(exc, len(pages), count))
    if count == 0:
        return PdfReading(None, f"{REASON_DAMAGED}: no pages")
    if not any(pages):
        return PdfReading(None, REASON_NO_TEXT)
    return PdfReading(PAGE_BREAK.join(pages), ocr_pages=tuple(index + 1 for index in recognised if pages[index]))


# pypdf's words for a damage, and ours: only these fixed phrases leave, never the message itself.
_DAMAGES = (("ended unexpectedly", "truncated"), ("eof marker", "truncated"), ("xref", "no cross-reference table"),
            ("empty file", "empty"), ("header", "no PDF header"))


def damaged(error: BaseException, read: int, count: int) -> str:
    """``damaged: WHY`` in a few fixed words, and the pages read before the failure when there were some.

    pypdf's message can quote bytes of the file (an object it could not
    parse), and the reason is printed and summarised outside the extract
    store: so it is matched to a phrase of ours, else named by the error's
    class alone.
    """
    message = str(error).lower()
    why = next((phrase for words, phrase in _DAMAGES if words in message), None)
    why = why or ("too deeply nested" if isinstance(error, RecursionError) else type(error).__name__)
    pages = f" ({read} of {count} pages read)" if read and count else ""
    return f"{REASON_DAMAGED}: {why}{pages}"


def _recognise(data: bytes, pages: list[str], ocr) -> list[int]:
    """Put OCR's text in place of each page whose text layer is empty or garbage (formats/ocr.py).

    Returns the indexes of the pages recognised.
    """
    scanned = [index for index, text in enumerate(pages) if ocr.needs_ocr(text)]
    if scanned:
        for index, text in ocr.pdf_pages(data, scanned).items():
            pages[index] = text.replace(FORM_FEED, "\n").strip("\n")
    return scanned


class _TimedOut(BaseException):
    """Raised by the alarm; a BaseException so that pypdf's ``except Exception`` cannot swallow it."""


@contextlib.contextmanager
def _deadline(seconds: float):
    """Interrupt a single slow page too, where a signal can be used (the main thread).

    Elsewhere only the check between pages applies.
    """
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable or seconds <= 0:
        yield
        return

    def alarm(signum, frame):
        raise _TimedOut()

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def _quiet(pypdf):
    """pypdf logs and warns about every quirk of a file; the reason is what counts here."""
    logger = logging.getLogger("pypdf")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)
