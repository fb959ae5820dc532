#!/usr/bin/env python3
"""The peers table: bastion beside detect-secrets on the peers' own test strings, per family.

The labelled corpus ``../shared/data/secrets`` (``BASTION_SECRETS_DATA``)
holds the public test strings of detect-secrets (``tests/plugins`` cases and
``test_data/``) and of gitleaks (the true- and false-positive examples of
each rule in ``cmd/generate/config/rules``), each record naming its
``source`` and ``ref`` (the file of the peer it came from); they are read in
place, never copied here. For each source this prints, as JSON:

- ``recall``: share of positives caught (no 8-character piece of the value
  left; ``bench/sanitize/sanitize.py``'s ``caught``), overall and per family;
- ``false_positives``: share of the clear negatives changed;
- the same two for detect-secrets itself (its default plugins, run through
  its Python API on the same strings, when ``detect_secrets`` imports: install
  it in a bench-only venv, ``/work/benchenv-*``, and pass its site-packages
  with ``--peer-path``); a positive counts as caught by it when a secret it
  reports shares 8 characters with the value, a negative as a false positive
  when it reports anything;
- ``placeholders``: the misses whose value is a placeholder by our own test
  (``validators.is_placeholder``: ``AKIAZZZZZZZZZZZZZZZZ``, ``xxxx…``), left
  on purpose since a run of one character is a stand-in, not a key;
- ``placeholders_kept``: the look-alikes of the corpus that hold a
  placeholder (marked ambiguous; some, such as ``AKIAZZZZZZZZZZZZZZZZ``, are
  positives in detect-secrets' own tests), how many we keep unchanged and
  how many detect-secrets reports.

``bench/sanitize/sanitize.py`` prints this table too (``peers``), so one command gives
every figure of the sanitizer.

``--code DIR`` measures another checkout's ``bastion_agent`` (main's, for the
"before" column).

Usage: python3 bench/sanitize/peers.py [--code DIR] [--peer-path SITE_PACKAGES]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # bench/, beside the package
if "--code" in sys.argv:
    sys.path.insert(0, str(Path(sys.argv[sys.argv.index("--code") + 1]).resolve()))
else:
    sys.path.insert(0, str(HERE.parent))

from bastion_agent.sanitizing.scanner import Sanitizer  # noqa: E402
from bastion_agent.sanitizing.validators import is_placeholder  # noqa: E402

DATA = Path(os.environ.get("BASTION_SECRETS_DATA", HERE.parent.parent / "shared" / "data" / "secrets"))
PIECE = 8


def load(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def caught(value: str, context: str, clean: str) -> bool:
    """No piece of the value (PIECE characters) is left, beyond the copies the context had without it."""
    clean = re.sub(r"\[REDACTED:[a-z0-9\-]+\]", "\0", clean)
    rest = context.replace(value, "\0")
    if len(value) < PIECE:
        return clean.count(value) <= rest.count(value)
    pieces = {value[i:i + PIECE] for i in range(len(value) - PIECE + 1)}
    return all(clean.count(piece) <= rest.count(piece) for piece in pieces)


def family(record: dict) -> str:
    return record["rule"].split("-")[0] if record["source"] == "gitleaks" else record["rule"]


def detect_secrets_scanner():
    """A function text -> reported secret values, or None when detect-secrets is not importable."""
    try:
        from detect_secrets.core.scan import scan_line
        from detect_secrets.settings import default_settings
    except ImportError:
        return None

    def scan(text: str) -> list[str]:
        found = []
        with default_settings():
            for line in text.splitlines() or [text]:
                for secret in scan_line(line):
                    if secret.secret_value:
                        found.append(secret.secret_value)
        return found

    return scan


def shares_piece(value: str, reported: list[str]) -> bool:
    if len(value) < PIECE:
        return any(value in item or item in value for item in reported if item)
    pieces = {value[i:i + PIECE] for i in range(len(value) - PIECE + 1)}
    return any(any(piece in item for piece in pieces) or (len(item) >= PIECE and item in value) for item in reported)


def table(source: str, positives: list[dict], negatives: list[dict], sanitizer: Sanitizer, peer) -> dict:
    total, ours, theirs = collections.Counter(), collections.Counter(), collections.Counter()
    misses, placeholders = [], []
    for record in positives:
        fam = family(record)
        total[fam] += 1
        if caught(record["value"], record["context"], sanitizer.redact(record["context"])[0]):
            ours[fam] += 1
        else:
            misses.append(record["id"])
            if is_placeholder(record["value"]):
                placeholders.append(record["id"])
        if peer is not None and shares_piece(record["value"], peer(record["context"])):
            theirs[fam] += 1
    clear = [r for r in negatives if not r.get("ambiguous")]
    ours_fp = [r["id"] for r in clear if sanitizer.redact(r["text"])[0] != r["text"]]
    theirs_fp = [r["id"] for r in clear if peer is not None and peer(r["text"])]
    n = len(positives)
    report = {
        "positives": n,
        "negatives": len(clear),
        "bastion": {"recall": round(sum(ours.values()) / n, 4) if n else None,
                    "false_positives": round(len(ours_fp) / len(clear), 4) if clear else None},
        "per_family": {fam: {"n": total[fam], "bastion": round(ours[fam] / total[fam], 4),
                             **({"detect_secrets": round(theirs[fam] / total[fam], 4)} if peer else {})}
                       for fam in sorted(total)},
        "misses": misses,
        "placeholders_among_misses": placeholders,
        "false_positive_ids": ours_fp,
    }
    if peer is not None:
        report["detect_secrets"] = {"recall": round(sum(theirs.values()) / n, 4) if n else None,
                                    "false_positives": round(len(theirs_fp) / len(clear), 4) if clear else None}
    return report


def placeholders_kept(negatives: list[dict], sanitizer: Sanitizer, peer) -> dict:
    """The look-alikes holding a placeholder (``AKIAZZZZZZZZZZZZZZZZ``, ``ghp_xxxx…``): kept by us, on purpose.

    The corpus marks them ambiguous; some are positives in the peer's own
    tests (detect-secrets' AWS plugin test matches ``AKIAZZZZZZZZZZZZZZZZ``).
    A run of one character is a stand-in a document uses to show a key's
    shape, so we keep it: these are the misses the peers would count.
    """
    ids = [r["id"] for r in negatives if r.get("ambiguous") and any(
        len(part) >= 8 and is_placeholder(part) for part in re.split(r"[\s=:\"'`,;()<>]+", r["text"]))]
    by_id = {r["id"]: r for r in negatives}
    kept = [i for i in ids if sanitizer.redact(by_id[i]["text"])[0] == by_id[i]["text"]]
    report = {"n": len(ids), "kept_by_bastion": len(kept), "ids": ids}
    if peer is not None:
        report["reported_by_detect_secrets"] = sum(1 for i in ids if peer(by_id[i]["text"]))
    return report


def peers_report(sanitizer: Sanitizer, peer_path: str | None = None) -> dict:
    """The peers table of both corpora; detect-secrets beside us when ``peer_path`` (or the path) has it."""
    if peer_path and peer_path not in sys.path:
        sys.path.append(peer_path)
    peer = detect_secrets_scanner()
    positives, negatives = load(DATA / "secrets.jsonl"), load(DATA / "negatives.jsonl")
    report = {"data": str(DATA), "detect_secrets": peer is not None}
    for source in ("detect-secrets", "gitleaks"):
        ours = [r for r in negatives if r["source"] == source]
        report[source] = table(source, [r for r in positives if r["source"] == source], ours, sanitizer, peer)
        report[source]["placeholders_kept"] = placeholders_kept(ours, sanitizer, peer)
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", help="root of another checkout whose bastion_agent to measure")
    parser.add_argument("--peer-path", help="a site-packages holding detect_secrets (a bench-only venv)")
    args = parser.parse_args(argv)
    print(json.dumps(peers_report(Sanitizer(), args.peer_path), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
