"""``search MANIFEST "QUERY"``: the command-line face of ``searcher.search``."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from dataclasses import asdict
from pathlib import Path

from bastion_agent.config.arguments import (
    add_manifest_arguments,
    add_remote_arguments,
    load_manifest_and_layout,
)
from bastion_agent.core import audit, dates
from bastion_agent.core.errors import ConfigError
from bastion_agent.core.progress import escape_name, for_terminal
from bastion_agent.core.records import Hit
from bastion_agent.searching import searcher

SNIPPET_CHARS = 400
OPENERS = ("xdg-open", "open")  # the desktop's opener: freedesktop, macOS
# What --json adds to each hit of a vector or hybrid search, beside the Hit's fields (serve's /search and MCP
# say it once, in their envelope): vector_status.VectorSearch.hit_fields.
HOW_FIELDS = ("vector_search", "vector_recall", "vector_beam")
MAX_K = 1_000_000  # more hits than any store holds windows; beyond SQLite's integers a LIMIT raised OverflowError


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1; got {text!r}")
    if value > MAX_K:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {MAX_K}; got {text[:20]!r}")
    return value


def add_search_arguments(parser: argparse.ArgumentParser) -> None:
    add_manifest_arguments(parser)
    parser.add_argument("query", help="what to look for, in your own words")
    parser.add_argument("-k", type=positive_int, default=searcher.DEFAULT_K, help="how many hits (default 5)")
    parser.add_argument("--json", action="store_true", help="print a JSON array of hits, best first")
    parser.add_argument("--mode", choices=("vector", "keyword", "hybrid"),
                        help="vector (by meaning), keyword (exact words, no model server) or hybrid (both, fused);"
                        f" default: the manifest's [search] mode, else {searcher.DEFAULT_MODE}")
    parser.add_argument("--exact", action="store_true",
                        help="scan every vector instead of asking the ANN index (slower on large stores, exact)")
    parser.add_argument("--since", help=f"only documents modified then or later: {dates.FORMS}")
    parser.add_argument("--before", help=f"only documents modified before then: {dates.FORMS}")
    parser.add_argument("--open", type=positive_int, metavar="N",
                        help="open hit N's file with the desktop's opener (xdg-open, open), on this machine")
    add_remote_arguments(parser)


def run_search(args: argparse.Namespace) -> int:
    manifest, layout = load_manifest_and_layout(args)
    if args.bastion and not args.remote:
        raise ConfigError("--bastion filters a --remote search; add --remote")
    within = dates.date_range(args.since, args.before)
    if args.remote and args.open:
        raise ConfigError("--open opens a file on this machine; a --remote hit's file is on its own bastion")
    extra = {}  # what --json adds to each hit: how the vector side answered (local search)
    if args.remote:
        from bastion_agent.publishing import remote_search

        hits = remote_search.search(manifest, args.query, args.k, mode=args.mode, bastions=args.bastion,
                                    exact=args.exact, dates=within)
        mode = searcher.resolve_mode(manifest, args.mode)
    else:
        # The local user sees what [access] local_groups gives (absent: every group, as before labels).
        result = searcher.answer(manifest, layout, args.query, args.k, mode=args.mode, exact=args.exact,
                                 groups=manifest.access.local_groups, dates=within)
        if result.notice:
            print(f"bastion_agent search: {result.notice}", file=sys.stderr)
        if result.windows_pending or result.stale_since:
            print(f"bastion_agent search: {pending_line(result)}", file=sys.stderr)
        if result.vector_search is not None and result.vector_search.notice:
            print(f"bastion_agent search: {result.vector_search.notice}", file=sys.stderr)
        hits, mode = result.hits, result.mode
        extra = result.vector_search.hit_fields() if result.vector_search is not None and mode != "keyword" else {}
    # recorded before anything is printed: a search the log cannot hold is not answered
    audit.record_search(layout, caller=audit.local_caller(), via="cli", mode=mode, k=args.k,
                        docs=[hit.doc for hit in hits], query=args.query if manifest.audit_queries else None,
                        retention=audit.Retention(manifest.serve_limits.audit_retention_days))
    if args.json:
        print(json.dumps([{**asdict(hit), **extra} for hit in hits], ensure_ascii=False, indent=2))
    else:
        print(format_hits(hits, None if args.remote else manifest.source.root))
    if args.open:
        open_hit(hits, args.open, manifest.source.root)
    return 0


def pending_line(result) -> str:
    """One line: how many of your windows wait for vectors (keyword search finds them), and since when embed fails."""
    text = (f"{result.windows_pending} of your windows still wait for vectors: keyword search (--mode keyword) "
            "finds them, vector and hybrid search do not yet")
    if result.stale_since:
        text += f"; embed has not finished since {result.stale_since} ({for_terminal(result.stale_error or 'failed')})"
    return text


def local_file(hit: Hit, root: Path) -> Path | None:
    """The first of a hit's paths that names a file under ``root`` on this machine, or None.

    A path is shown as sanitize left it: a name that held a secret was
    changed, so it names no file, and only the operator's own folder is looked in.
    """
    for path in hit.paths:
        candidate = root / path
        try:
            if candidate.resolve().is_relative_to(root.resolve()) and candidate.is_file():
                return candidate
        except (OSError, ValueError):
            continue
    return None


def open_hit(hits: list[Hit], number: int, root: Path) -> None:
    """Open hit ``number``'s file with the desktop's opener, detached, or say in one line why not."""
    if number > len(hits):
        raise ConfigError(f"--open {number}: the search gave {len(hits)} hit(s)")
    found = local_file(hits[number - 1], root)
    if found is None:
        raise ConfigError(f"--open {number}: the hit names no file under {root} (a name sanitize changed, or gone)")
    import shutil  # these three here, not at the top: only --open needs them, and every search loads this module
    import subprocess
    import threading

    opener = next((shutil.which(name) for name in OPENERS if shutil.which(name)), None)
    if opener is None:
        raise ConfigError(f"--open: no desktop opener ({', '.join(OPENERS)}) on this machine; the file is {found}")
    process = subprocess.Popen([opener, str(found)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    # Reaped when it ends (xdg-open returns once the viewer started); the command does not wait for it.
    threading.Thread(target=process.wait, daemon=True).start()


def format_hits(hits: list[Hit], root: Path | None = None) -> str:
    """Hits for a person: rank, relevance (0-100), path(s), date, document and window, then the text.

    The relevance, not the fused score, is what a person can compare
    between queries (``fusion``); ``--json`` keeps every score. With the
    source ``root`` (a local search), a hit whose file is on this machine
    also gets the line to open it by.
    """
    if not hits:
        return "no hits"
    blocks = []
    for rank, hit in enumerate(hits, start=1):
        where = ", ".join(escape_name(path) for path in hit.paths) or "(no path)"  # a name may hold a newline, ESC
        strength = f"relevance {hit.relevance:3d}"
        if getattr(hit, "bastion", None):  # the central index ranks without calibrated evidence: its score
            where = f"{hit.bastion}: {where}"
            strength = f"{hit.score:.4f}"
        page = f" page {hit.page}" if getattr(hit, "page", None) else ""
        scanned = " (scanned: OCR text, may hold errors)" if getattr(hit, "ocr", False) else ""
        modified = f"  modified {hit.modified.replace('T', ' ')}" if getattr(hit, "modified", None) else ""
        head = f"{rank}. {strength}  {where}{modified}  [doc {hit.doc[:12]} window {hit.idx}{page}]{scanned}"
        text = for_terminal(" ".join(hit.text.split()))
        if len(text) > SNIPPET_CHARS:
            text = text[: SNIPPET_CHARS - 1] + "…"
        found = local_file(hit, root) if root is not None else None
        head += f"\n    file: {escape_name(str(found))}" if found is not None else ""
        blocks.append(head + "\n" + textwrap.indent(textwrap.fill(text, 96), "    "))
    return "\n\n".join(blocks)
