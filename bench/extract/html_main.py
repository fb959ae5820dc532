"""How much site chrome the HTML main-content reader leaves, and how much prose it loses.

Real saved sites of this machine, read in place: the Rust books and
rustdoc pages (``rust-doc``), the Python documentation (``python3-doc``,
Sphinx) and Debian's HTML documentation (DocBook, gtk-doc, Node's API
pages). Each page is read twice in the same run: the whole visible text
(``htmltext.read_html``, the baseline: what was indexed before) and the
main content (``htmlmain.read_html_main``, what is indexed now).

Ground truth without labels, per site:

* **chrome** is a line that appears on at least ``CHROME_SHARE`` of the
  site's sampled pages (and on 3 or more): the menus, theme lists and
  "previous | next" bars a site repeats. *Chrome left* is the share of
  those characters still in the main text.
* **prose** is a line of 60 characters or more that appears on one page
  only: the page's own sentences. *Prose lost* is the share of those
  characters missing from the main text.

Prints one JSON object: per site, pages read, the text kept (main / whole),
chrome left and prose lost, and the time of both readers.

    python bench/extract/html_main.py [--pages N]
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bastion_agent.extracting.formats import htmlmain, htmltext  # noqa: E402

CHROME_SHARE = 0.3
PROSE_CHARS = 60

SITES = {
    "Rust book (mdBook)": "/usr/share/doc/rust-doc/html/book/*.html",
    "Rust nomicon + reference (mdBook)": "/usr/share/doc/rust-doc/html/{nomicon,reference}/*.html",
    "Rust std (rustdoc)": "/usr/share/doc/rust-doc/html/std/*/index.html",
    "Python library (Sphinx)": "/usr/share/doc/python3-doc/html/library/*.html",
    "Python tutorial + howto (Sphinx)": "/usr/share/doc/python3-doc/html/{tutorial,howto}/*.html",
    "Node.js API (Debian)": "/usr/share/doc/nodejs/api/*.html",
    "Valgrind manual (DocBook)": "/usr/share/doc/valgrind/html/*.html",
    "libxslt (gtk-doc + hand-written)": "/usr/share/doc/libxslt1-dev/**/*.html",
}


def _expand(pattern: str) -> list[str]:
    if "{" in pattern:
        head, rest = pattern.split("{", 1)
        names, tail = rest.split("}", 1)
        return sorted(path for name in names.split(",") for path in _expand(head + name + tail))
    return sorted(glob.glob(pattern, recursive=True))


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.split("\n") if line.strip()]


def measure_site(paths: list[str]) -> dict:
    whole, main = {}, {}
    timing = {"whole": 0.0, "main": 0.0}
    for path in paths:
        data = Path(path).read_bytes()
        started = time.perf_counter()
        whole[path] = htmltext.read_html(data)
        timing["whole"] += time.perf_counter() - started
        started = time.perf_counter()
        main[path] = htmlmain.read_html_main(data)
        timing["main"] += time.perf_counter() - started
    pages_with = collections.Counter()
    for path in paths:
        pages_with.update(set(_lines(whole[path])))
    threshold = max(3, CHROME_SHARE * len(paths))
    chrome_all = chrome_left = prose_all = prose_lost = 0
    for path in paths:
        kept = main[path]
        kept_lines = set(_lines(kept))
        for line in set(_lines(whole[path])):
            if pages_with[line] >= threshold:
                chrome_all += len(line)
                chrome_left += len(line) if line in kept_lines else 0
            elif pages_with[line] == 1 and len(line) >= PROSE_CHARS:
                prose_all += len(line)
                prose_lost += 0 if (line in kept_lines or line in kept) else len(line)
    whole_chars = sum(len(text) for text in whole.values())
    main_chars = sum(len(text) for text in main.values())
    return {
        "pages": len(paths),
        "text_kept": round(main_chars / whole_chars, 3) if whole_chars else None,
        "chrome_chars_whole": chrome_all,
        "chrome_left": round(chrome_left / chrome_all, 3) if chrome_all else None,
        "prose_lost": round(prose_lost / prose_all, 4) if prose_all else None,
        "main_time_vs_whole": round(timing["main"] / timing["whole"], 2) if timing["whole"] else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=60, help="pages sampled per site (default 60)")
    arguments = parser.parse_args()
    random.seed(27)
    result = {}
    for site, pattern in SITES.items():
        paths = _expand(pattern)
        if not paths:
            result[site] = "not on this machine"
            continue
        if len(paths) > arguments.pages:
            paths = sorted(random.sample(paths, arguments.pages))
        result[site] = measure_site(paths)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
