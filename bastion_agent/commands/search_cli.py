"""``search MANIFEST "QUERY"``: the command-line face of ``searcher.search``."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from dataclasses import asdict

from bastion_agent.config.arguments import (
    add_manifest_arguments,
    add_remote_arguments,
    load_manifest_and_layout,
)
from bastion_agent.core import audit
from bastion_agent.core.errors import ConfigError
from bastion_agent.core.progress import escape_name, for_terminal
from bastion_agent.core.records import Hit
from bastion_agent.searching import searcher

SNIPPET_CHARS = 400
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
    add_remote_arguments(parser)


def run_search(args: argparse.Namespace) -> int:
    manifest, layout = load_manifest_and_layout(args)
    if args.bastion and not args.remote:
        raise ConfigError("--bastion filters a --remote search; add --remote")
    extra = {}  # what --json adds to each hit: how the vector side answered (local search)
    if args.remote:
        from bastion_agent.publishing import remote_search

        hits = remote_search.search(manifest, args.query, args.k, mode=args.mode, bastions=args.bastion,
                                    exact=args.exact)
        mode = searcher.resolve_mode(manifest, args.mode)
    else:
        # The local user sees what [access] local_groups gives (absent: every group, as before labels).
        result = searcher.answer(manifest, layout, args.query, args.k, mode=args.mode, exact=args.exact,
                                 groups=manifest.access.local_groups)
        if result.notice:
            print(f"bastion_agent search: {result.notice}", file=sys.stderr)
        if result.vector_search is not None and result.vector_search.notice:
            print(f"bastion_agent search: {result.vector_search.notice}", file=sys.stderr)
        hits, mode = result.hits, result.mode
        extra = result.vector_search.hit_fields() if result.vector_search is not None and mode != "keyword" else {}
    # recorded before anything is printed: a search the log cannot hold is not answered
    audit.record_search(layout, caller=audit.local_caller(), via="cli", mode=mode, k=args.k,
                        docs=[hit.doc for hit in hits], query=args.query if manifest.audit_queries else None)
    if args.json:
        print(json.dumps([{**asdict(hit), **extra} for hit in hits], ensure_ascii=False, indent=2))
    else:
        print(format_hits(hits))
    return 0


def format_hits(hits: list[Hit]) -> str:
    """Hits for a person: rank, relevance (0-100), path(s), document and window, then the text.

    The relevance, not the fused score, is what a person can compare
    between queries (``fusion``); ``--json`` keeps every score.
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
        head = f"{rank}. {strength}  {where}  [doc {hit.doc[:12]} window {hit.idx}{page}]{scanned}"
        text = for_terminal(" ".join(hit.text.split()))
        if len(text) > SNIPPET_CHARS:
            text = text[: SNIPPET_CHARS - 1] + "…"
        blocks.append(head + "\n" + textwrap.indent(textwrap.fill(text, 96), "    "))
    return "\n\n".join(blocks)
