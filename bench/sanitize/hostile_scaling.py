#!/usr/bin/env python3
"""Hostile scaling: which input shapes make the sanitizer slow per character, or slower than linear.

A document the sanitizer cannot finish inside its time budget is skipped, so
nothing hangs; but one quadratic path lets a small file cost a whole budget.
This bench builds hostile texts from shapes: every key or label stem the
scanner reacts to (``context.STEMS``, the rules' keywords, column header
words, name markers, call signatures' triggers) followed by a long run of one
character class (blanks, quotes, backslashes, brackets, separators, letters,
digits, base64, ``%xx``, ``&#34;``, combining marks, newlines...), and
repeated forms (``KEY="`` times N, ``<k>`` times N, ``| k |`` times N...).

Each shape is timed (process time, best of ``--repeat``) at ``n`` and ``4n``
characters, first at a small screening size over every shape, then the worst
``--top`` again at ``--n``. It prints one JSON object: per shape the
microseconds per character at 4n and the 4n/n ratio, worst first. A ratio
over ~6 is superlinear; a rate over ~50 us/char is slow (prose: ~0.1).

Usage: python3 bench/sanitize/hostile_scaling.py [--n 8000] [--screen 1000] [--top 40] [--repeat 2]
       [--per-source 6 | 0 for every stem] [--stems a,b]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# One unit of each character class, repeated to length.
CLASSES = {
    "blanks": " ", "tabs": "\t", "dquotes": '"', "squotes": "'", "backticks": "`", "backslashes": "\\",
    "dollar-paren": "$(", "braces": "{", "brackets": "[", "parens": "(", "equals": "=", "colons": ":",
    "amps": "&", "semis": ";", "commas": ",", "pipes": "|", "letters": "abcdefghij", "digits": "0123456789",
    "base64": "QmFzZTY0K/x=", "percent": "%2F", "entity": "&#34;", "combining": "a\u0332", "newlines": "\n",
    "crlf": "\r\n", "dashes": "-", "dots": ".", "angles": "<", "hashes": "#", "at": "@", "mixed-seps": "=:&;,|",
    "blank-colon": " :", "quote-blank": '" ', "blank-tab": " \t", "quote-tab": '"\t',
}
# Forms repeated as a whole; ``{k}`` is the stem.
REPEATED = {
    "KEY=\"": '{K}="', "KEY: ": "{k}: ", "<k>": "<{k}>", "| k |": "| {k} |", "k,": "{k},", "k\\t": "{k}\t",
    "k=v&": "{k}=v&", "\"k\":": '"{k}":', "k=${": "{k}=${{", "k  ": "{k}  ", "k\\n": "{k}\n", "k(": "{k}(",
    "k='": "{k}='", "<k>v</k>": "<{k}>v</{k}>", "k: k": "{k}: {k} ", "k a,": "{k} a,",
}


def stems(per_source: int = 0) -> dict[str, str]:
    """Every stem the scanner knows, each with where it comes from (first source wins).

    ``per_source`` > 0 keeps that many of each source, evenly spaced (the paths found so far depend on the
    character run, not on which stem leads it, so a sample covers them in minutes rather than an hour)."""
    from bastion_agent.sanitizing import columns, context, names, rules, signatures
    found: dict[str, str] = {}
    sources = (
        ("context", context.STEMS), ("prose", sorted(context.PROSE_WORDS)),
        ("signatures", [t for s in signatures.SIGNATURES for t in s.triggers]),
        ("name-labels", sorted(names.COLON_LABELS | names.BARE_LABELS | names._FIRST_WORDS)),
        ("columns", sorted(columns.FIRST_WORDS)),
        ("rules", sorted({k for r in rules.RULES for k in r.keywords})),
    )
    for source, words in sources:
        words = list(dict.fromkeys(words))
        if per_source and len(words) > per_source:
            words = [words[i * len(words) // per_source] for i in range(per_source)]
        for word in words:
            found.setdefault(word, source)
    return found


def shapes(stem: str) -> dict[str, callable]:
    """Name -> a function of a length giving the hostile text of that length."""
    made = {}
    for name, unit in CLASSES.items():
        for sep in ("", "="):
            lead = stem + sep
            made[f"{name}{'/=' if sep else ''}"] = (lambda n, lead=lead, unit=unit:
                                                 lead + (unit * (n // len(unit) + 1))[:max(0, n - len(lead))])
    for name, form in REPEATED.items():
        one = form.format(k=stem, K=stem.upper())
        made[f"x{name}"] = lambda n, one=one: (one * (n // len(one) + 1))[:n]
    return made


def timed(sanitizer, text: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        sanitizer.redact(text)
        best = min(best, time.process_time() - start)
    return best


def measure(sanitizer, make, n: int, repeat: int, cap: float = 0.0) -> dict:
    """Times at n and 4n; over ``cap`` seconds at n, 4n is not run (a superlinear shape would take minutes)
    and is estimated as 16 times n, flagged ``estimated``."""
    small = timed(sanitizer, make(n), repeat)
    if cap and small > cap:
        return {"us_per_char": round(small / n * 1e6, 3), "ratio": 16.0, "seconds_4n": None, "estimated": True}
    big = timed(sanitizer, make(4 * n), repeat)
    return {"us_per_char": round(big / (4 * n) * 1e6, 3), "ratio": round(big / max(small, 1e-6), 2),
            "seconds_4n": round(big, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=8000, help="confirming size (timed at n and 4n)")
    parser.add_argument("--screen", type=int, default=1000, help="screening size over every shape")
    parser.add_argument("--top", type=int, default=40, help="how many of the worst to time again at --n")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--cap", type=float, default=10.0, help="seconds at n over which 4n is estimated, not run")
    parser.add_argument("--per-source", type=int, default=6, help="stems per source, evenly spaced (0: all)")
    parser.add_argument("--stems", default="", help="comma-separated stems instead of every known one")
    args = parser.parse_args()
    from bastion_agent.sanitizing.scanner import Sanitizer
    sanitizer = Sanitizer()
    known = stems(args.per_source)
    chosen = {s: known.get(s, "given") for s in args.stems.split(",")} if args.stems else known
    started = time.process_time()
    screened = []
    for stem, source in chosen.items():
        for name, make in shapes(stem).items():
            row = measure(sanitizer, make, args.screen, 1, cap=0.5)
            screened.append(({"stem": stem, "source": source, "shape": name, **row}, make))
        print(f"{stem}: {time.process_time() - started:.0f} s", file=sys.stderr, flush=True)
    screen_seconds = time.process_time() - started
    # Worst by either measure: the steepest growth, then the slowest per character.
    by_ratio = sorted(screened, key=lambda r: -r[0]["ratio"])[: args.top]
    by_rate = sorted(screened, key=lambda r: -r[0]["us_per_char"])[: args.top]
    picked = {id(make): (row, make) for row, make in by_ratio + by_rate}.values()
    confirmed = []
    for row, make in picked:
        again = measure(sanitizer, make, args.n, args.repeat, cap=args.cap)
        confirmed.append({"stem": row["stem"], "source": row["source"], "shape": row["shape"],
                          "screen_ratio": row["ratio"], "screen_us_per_char": row["us_per_char"], **again})
    confirmed.sort(key=lambda r: (-(r["ratio"] > 6), -r["ratio"] * max(r["us_per_char"], 1)))
    print(json.dumps({
        "stems": len(chosen), "shapes_per_stem": len(shapes("k")), "shapes": len(screened),
        "screen_n": args.screen, "n": args.n, "screen_seconds": round(screen_seconds, 1),
        "superlinear": sum(r["ratio"] > 6 for r in confirmed),
        "slow": sum(r["us_per_char"] > 50 for r in confirmed),
        "worst": confirmed,
    }, indent=1))


if __name__ == "__main__":
    main()
