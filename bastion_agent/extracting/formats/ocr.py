"""Text of scans: images and PDF pages without a text layer, through Tesseract (extra ``ocr``).

Recognition is the ``tesseract`` command (Debian's ``tesseract-ocr`` 5.x and
its language packs), fed a PNG on its standard input and read from its
standard output, so no pixel of a scan is ever written outside the extract
store (no temporary file). It runs inside the budgeted worker that reads the
file, and inherits its address-space limit; it dies with the worker
(``PR_SET_PDEATHSIG``), so a worker killed over its time leaves no orphan.

What it costs is bounded before anything is decoded: the pixel count of
every page comes from the image's header (Pillow opens lazily) or from the
PDF page's size and its images' declared sizes (PDFium), and a file with
more than ``MAX_PAGES`` pages to recognise, or a page of more than
``MAX_PAGE_PIXELS``, is refused as ``too_costly: pixels`` without decoding
it. Only pixels are read: EXIF, XMP and every other metadata block are
never looked at, so a camera owner or a GPS position cannot reach the text.

Settings come from ``[source]`` (``ocr``, ``ocr_languages``): the extract
stage calls ``configure`` in the parent and passes the same settings to the
worker, where ``active`` holds them while one file is read (one reader runs
at a time per worker, as with ``OutputMeter``).
"""

from __future__ import annotations

import functools
import io
import os
import re
import shutil
import signal
import subprocess
import warnings
from dataclasses import dataclass

from bastion_agent.core.budget import REASON_PIXELS
from bastion_agent.core.extras import optional
from bastion_agent.extracting.formats.base import REASON_DAMAGED, Paged, Refused, spend_output
from bastion_agent.sanitizing.pages import PAGE_BREAK

OCR_VERSION = "2"  # bump when this module's output changes; 2: a TIFF's pages apart by PAGE_BREAK
DPI = 300  # PDF pages are rendered at this resolution (Tesseract's sweet spot for body text)
MAX_PAGES = 500  # pages to recognise in one file
MAX_PAGE_PIXELS = 60_000_000  # one page: A4 at 600 dpi is 35 million; a 10,000 x 10,000 image is 100
MAX_PAGE_SECONDS = 120.0  # one run of tesseract; the worker's budget bounds the file
NEEDS_OCR = "needs OCR"  # every reason a scan is left unread for want of a part starts so (``not_installed``)
REASON_OFF = "ocr off ([source] ocr = false)"
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class OcrSettings:
    """``[source] ocr`` and ``ocr_languages`` (None: every installed language)."""

    enabled: bool = True
    languages: tuple[str, ...] | None = None

    def language_arg(self) -> str:
        return "+".join(self.languages or installed_languages() or ("eng",))


class _State:
    settings = OcrSettings()


def configure(settings: OcrSettings) -> None:
    """The settings ``version`` and the readers use in this process."""
    _State.settings = settings


def active() -> OcrSettings:
    return _State.settings


def settings_of(source) -> OcrSettings:
    languages = getattr(source, "ocr_languages", None)
    return OcrSettings(bool(getattr(source, "ocr", True)), tuple(languages) if languages else None)


@functools.lru_cache(maxsize=1)
def tesseract() -> str | None:
    return shutil.which("tesseract")


@functools.lru_cache(maxsize=1)
def installed_languages() -> tuple[str, ...]:
    """The language packs Tesseract has (``osd`` is orientation data, not a language)."""
    if tesseract() is None:
        return ()
    try:
        done = subprocess.run([tesseract(), "--list-langs"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    lines = done.stdout.decode("utf-8", "replace").splitlines()[1:]
    return tuple(sorted(line.strip() for line in lines if re.fullmatch(r"[A-Za-z0-9_]+", line.strip())
                        and line.strip() != "osd"))


@functools.lru_cache(maxsize=1)
def tesseract_version() -> str:
    try:
        done = subprocess.run([tesseract(), "--version"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    first = (done.stdout or done.stderr).decode("utf-8", "replace").split("\n", 1)[0]
    return first.replace("tesseract", "").strip() or "unknown"


def available() -> bool:
    """Tesseract on PATH, with a language, and Pillow (to hand it clean pixels)."""
    return tesseract() is not None and bool(installed_languages()) and optional("PIL") is not None


def unavailable() -> str | None:
    """Why scans cannot be read now, or None."""
    if not active().enabled:
        return REASON_OFF
    if not available():
        return not_installed()
    return None


def not_installed(pdf: bool = False) -> str:
    """What exactly is missing to read a scan (``pdf``: a PDF page, which PDFium renders), and how to get it.

    An operator who has Tesseract but not the pip extra must not be told to
    install Tesseract: each part is named only when it is the one missing.
    """
    parts = []
    if tesseract() is None:
        parts.append("Tesseract is not installed (Debian: apt-get install tesseract-ocr tesseract-ocr-eng)")
    elif not installed_languages():
        parts.append("Tesseract has no language pack (Debian: apt-get install tesseract-ocr-eng)")
    extras = [name for name, module in (("Pillow", "PIL"), ("pypdfium2", "pypdfium2")) if (pdf or module == "PIL")
              and optional(module) is None]
    if extras:
        parts.append(f"{' and '.join(extras)} missing (pip install 'bastion-agent[ocr]')")
    return f"{NEEDS_OCR}: {'; '.join(parts) or 'unavailable'}"


def is_missing_reason(reason: str | None) -> bool:
    """Whether a listing's reason says a scan was left unread for want of OCR (``not_installed``)."""
    return isinstance(reason, str) and reason.startswith(NEEDS_OCR)


def version() -> str | None:
    """What recognised text depends on besides the bytes; None when OCR cannot run."""
    if unavailable() is not None:
        return None
    pil = optional("PIL")
    return (f"ocr{OCR_VERSION}+tesseract-{tesseract_version()}+{active().language_arg()}"
            f"+pil-{pil.__version__}+dpi-{DPI}+pages-{MAX_PAGES}+px-{MAX_PAGE_PIXELS}")


def check_pixels(width: int, height: int) -> None:
    if width <= 0 or height <= 0:
        raise Refused(REASON_DAMAGED)
    if width * height > MAX_PAGE_PIXELS:
        raise Refused(REASON_PIXELS)


def check_pages(count: int) -> None:
    if count > MAX_PAGES:
        raise Refused(REASON_PIXELS)


def recognise(image) -> str:
    """Text of one Pillow image: grey pixels only, as a fresh PNG on Tesseract's stdin."""
    check_pixels(*image.size)
    grey = image.convert("L")
    buffer = io.BytesIO()
    grey.save(buffer, format="PNG")  # a new image: no metadata of the original travels
    command = [tesseract(), "stdin", "stdout", "-l", active().language_arg(), "--psm", "3"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OMP_THREAD_LIMIT": "1", "LC_ALL": "C"}
    try:
        done = subprocess.run(command, input=buffer.getvalue(), capture_output=True, env=env,
                              timeout=MAX_PAGE_SECONDS, check=False, preexec_fn=_die_with_parent)
    except subprocess.TimeoutExpired:
        raise Refused("too_costly: time") from None
    except OSError:
        raise Refused(REASON_DAMAGED) from None
    if done.returncode != 0:
        raise Refused(REASON_DAMAGED)
    text = done.stdout.decode("utf-8", "replace").replace("\f", "\n")
    text = "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")
    spend_output(len(text))
    return text


def _die_with_parent() -> None:
    """In the child, before exec: be killed when the worker is (it may be killed over its budget)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


# ---------------------------------------------------------------- images

# Only the first frame of these is a page: the others are animation.
_FIRST_FRAME_ONLY = frozenset({"GIF", "WEBP", "PNG"})


def read_image(data: bytes) -> Paged:
    """Text of an image file: every page of a TIFF (apart by ``PAGE_BREAK``), the first frame of anything else."""
    pil = optional("PIL")
    if pil is None or unavailable() is not None:
        raise Refused(unavailable() or not_installed())
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = MAX_PAGE_PIXELS  # Pillow's own bomb check, at our cap
    warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # refused below, by our own check
    try:
        image = Image.open(io.BytesIO(data))  # reads the header only
        frames = 1 if image.format in _FIRST_FRAME_ONLY else int(getattr(image, "n_frames", 1) or 1)
        check_pages(frames)
        pages = []
        for frame in range(frames):
            if frame:
                image.seek(frame)  # the next directory's header, not its pixels
            check_pixels(*image.size)
            pages.append(recognise(image))
    except Refused:
        raise
    except Image.DecompressionBombError:
        raise Refused(REASON_PIXELS) from None
    except MemoryError:
        raise
    except Exception:  # Pillow on hostile input may raise anything
        raise Refused(REASON_DAMAGED) from None
    return Paged(PAGE_BREAK.join(pages), tuple(number for number, text in enumerate(pages, start=1) if text.strip()))


# ---------------------------------------------------------------- PDF pages

def pdf_pages(data: bytes, indexes: list[int]) -> dict[int, str]:
    """Recognised text of the PDF pages at ``indexes`` (0-based), rendered by PDFium."""
    pdfium = optional("pypdfium2")
    if pdfium is None or optional("PIL") is None:
        raise Refused(not_installed(pdf=True))
    check_pages(len(indexes))
    import pypdfium2.raw as pdfium_c

    document = pdfium.PdfDocument(data)
    try:
        texts = {}
        for index in indexes:
            page = document[index]
            width, height = page.get_size()  # points
            scale = DPI / 72
            check_pixels(max(1, int(width * scale)), max(1, int(height * scale)))
            for obj in page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE], max_depth=4):
                check_pixels(*obj.get_px_size())  # what decoding it would cost, from its dictionary
            bitmap = page.render(scale=scale, grayscale=True)
            texts[index] = recognise(bitmap.to_pil())
        return texts
    finally:
        document.close()


def pdf_available() -> bool:
    return unavailable() is None and optional("pypdfium2") is not None


_WORD = re.compile(r"[^\W_]{2,}")


def needs_ocr(text: str) -> bool:
    """A page whose text layer is empty or garbage (no word of two letters, or mostly not letters)."""
    visible = "".join(text.split())
    if not visible:
        return True
    letters = sum(ch.isalnum() for ch in visible)
    return not _WORD.search(text) or letters < 0.5 * len(visible)
