"""OCR quality and cost: character accuracy, pages per second, extract time with and without OCR.

Real scans nobody here made: OCRmyPDF's ``tests/resources/linn.png`` with its
transcript ``linn.txt``, read at run time from the bare mirror the ``fetch``
tool leaves under /work/.mirror (never copied into the project; pass
``--mirror`` for another place). Rendered scans: the first lines of three
licences from /usr/share/common-licenses drawn at 150 and 300 dpi, clean
and degraded (noise, 1.5 degree skew, JPEG quality 35).

Accuracy is the share of the reference's characters that the recognised text
matches in order (difflib's matching blocks, whitespace collapsed), a close
stand-in for 1 - CER. Prints JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from PIL import Image, ImageDraw, ImageFilter, ImageFont  # noqa: E402

from bastion_agent.extracting.formats import ocr  # noqa: E402

MIRROR = Path("/work/.mirror/ocrmypdf+OCRmyPDF/repo")
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf"
LICENCES = ["/usr/share/common-licenses/Apache-2.0", "/usr/share/common-licenses/GPL-3",
            "/usr/share/common-licenses/MPL-2.0"]


def accuracy(reference: str, recognised: str) -> float:
    ref, got = " ".join(reference.split()), " ".join(recognised.split())
    matcher = difflib.SequenceMatcher(None, ref, got, autojunk=False)
    return sum(block.size for block in matcher.get_matching_blocks()) / max(1, len(ref))


def render(lines: list[str], dpi: int):
    """Lines at 11 pt on a page-wide image at ``dpi``."""
    size = round(11 * dpi / 72)
    font = ImageFont.truetype(FONT, size)
    width = round(8.27 * dpi)
    image = Image.new("L", (width, round(size * 1.5 * (len(lines) + 2))), 255)
    draw = ImageDraw.Draw(image)
    for number, line in enumerate(lines):
        draw.text((round(0.8 * dpi), round(size * 1.5 * (number + 1))), line, font=font, fill=0)
    return image


def degrade(image, seed: int):
    rng = random.Random(seed)
    noisy = image.copy()
    pixels = noisy.load()
    for _ in range(noisy.width * noisy.height // 50):
        pixels[rng.randrange(noisy.width), rng.randrange(noisy.height)] = rng.choice((0, 255))
    noisy = noisy.filter(ImageFilter.GaussianBlur(0.6)).rotate(1.5, expand=True, fillcolor=255)
    buffer = io.BytesIO()
    noisy.save(buffer, format="JPEG", quality=35)
    return Image.open(io.BytesIO(buffer.getvalue()))


def timed(image) -> tuple[str, float]:
    started = time.perf_counter()
    text = ocr.recognise(image)
    return text, time.perf_counter() - started


def real_scans(mirror: Path) -> dict:
    def show(path):
        return subprocess.run(["git", "-C", str(mirror), "show", f"HEAD:{path}"], capture_output=True, check=True).stdout

    image = Image.open(io.BytesIO(show("tests/resources/linn.png")))
    text, seconds = timed(image)
    return {"linn.png": {"accuracy": round(accuracy(show("tests/resources/linn.txt").decode(), text), 4),
                         "pixels": image.width * image.height, "seconds": round(seconds, 2)}}


def rendered(lines_per_page: int) -> tuple[dict, int, float]:
    results, pages, seconds = {}, 0, 0.0
    for dpi in (150, 300):
        for state in ("clean", "degraded"):
            scores = []
            for seed, path in enumerate(LICENCES):
                lines = [line for line in Path(path).read_text().splitlines() if line.strip()][:lines_per_page]
                image = render(lines, dpi)
                if state == "degraded":
                    image = degrade(image, seed)
                text, spent = timed(image)
                pages, seconds = pages + 1, seconds + spent
                scores.append(accuracy("\n".join(lines), text))
            results[f"{dpi}dpi_{state}"] = round(sum(scores) / len(scores), 4)
    return results, pages, seconds


def extract_ratio(files: int) -> dict:
    """Extract of a folder with 10 % scans, with OCR against without (ocr = false), same run."""
    from bastion_agent.core.layout import Layout
    from bastion_agent.extracting import extract
    from bastion_agent.testing.folders import make_manifest

    docs = sorted(p for p in Path("/usr/share/common-licenses").iterdir() if p.is_file())
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "docs"
        root.mkdir()
        scans = files // 10
        for number in range(files - scans):
            source = docs[number % len(docs)]
            (root / f"text{number}.txt").write_text(f"{number}\n" + source.read_text())
        for number in range(scans):
            lines = Path(LICENCES[number % 3]).read_text().splitlines()[number * 3:number * 3 + 40]
            render([line for line in lines if line.strip()] or ["blank"], 300).save(root / f"scan{number}.png")
        times = {}
        for label, enabled in (("without", False), ("with", True)):
            started = time.perf_counter()
            with contextlib.redirect_stderr(io.StringIO()):
                extract.run(make_manifest(root, ocr=enabled), Layout(Path(tmp) / f"out-{label}"))
            times[label] = time.perf_counter() - started
    return {"files": files, "scans": scans, "seconds_without": round(times["without"], 2),
            "seconds_with": round(times["with"], 2), "ratio": round(times["with"] / times["without"], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mirror", type=Path, default=MIRROR)
    parser.add_argument("--lines", type=int, default=30, help="lines of each licence on a rendered page")
    parser.add_argument("--files", type=int, default=40, help="files in the 10 %% scans folder")
    args = parser.parse_args()
    if not ocr.available():
        sys.exit("bench/extract/ocr.py: tesseract not installed")
    scores, pages, seconds = rendered(args.lines)
    report = {
        "tesseract": ocr.tesseract_version(), "languages": ocr.active().language_arg(),
        "real_scans": real_scans(args.mirror) if args.mirror.exists() else "mirror missing",
        "rendered_licences": scores,
        "pages_per_second": round(pages / seconds, 3),
        "extract_with_10pct_scans": extract_ratio(args.files),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
