"""``prune MANIFEST [--out DIR] [--model NAME] [--json]``: erase the stale vectors, on the operator's request.

The stage contract (docs/contract.md) keeps vectors whose window left the sweep (a document
removed or changed, an older chunk size), so going back costs nothing. But an
embedding can be inverted (a bag-of-words vector gives back its words, and
published attacks recover much of a real model's input), so a stale vector
still says what a removed document said. ``prune`` erases them, with their
bytes, from ``vectors.db`` and ``index/`` (``embedding.erase``), and prints
what it removed: counts only.
"""

from __future__ import annotations

import argparse
import json
import sys

HELP = ("erase stale vectors (whose window is not in this sweep) of every model, or --model's, "
        "from vectors.db and index/; prints the counts")


def add_prune_arguments(parser: argparse.ArgumentParser) -> None:
    from bastion_agent.config.arguments import add_manifest_arguments

    parser.description = (
        "Erase the stale vectors of vectors.db: those whose window is neither in the last embed's windows nor in "
        "chunks.jsonl (a removed or changed document, an older chunk size), of every model or of --model, with "
        "their bytes gone from vectors.db, its WAL and index/. Also erases the windows of documents a sanitizer "
        "change superseded, if an embed has not yet. Stale vectors otherwise stay, as the specification says; an "
        "embedding can be inverted, so a stale vector still reveals what its window said (docs/embedding.md)."
    )
    add_manifest_arguments(parser)
    parser.add_argument("--model", metavar="NAME",
                        help="only this model's stale vectors (its vector key, as embed.summary.json names it)")
    parser.add_argument("--json", action="store_true", help="print what was removed as JSON on stdout")


def run_prune(args: argparse.Namespace) -> int:
    from bastion_agent.config.arguments import load_manifest_and_layout
    from bastion_agent.embedding.erase import prune

    _, layout = load_manifest_and_layout(args)
    result = prune(layout, args.model)
    report = {
        "removed": result.stale_vectors,
        "removed_by_model": result.stale_by_model,
        "superseded_erased": result.superseded_documents,
        "kept": result.kept_vectors,
        "model": args.model,
    }
    by_model = ", ".join(f"{name}: {n}" for name, n in result.stale_by_model.items())
    line = f"prune: removed {result.stale_vectors} stale vectors" + (f" ({by_model})" if by_model else "")
    if result.superseded_documents:
        line += f", erased {result.superseded_documents} superseded documents"
    print(f"{line}; {result.kept_vectors} vectors kept", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(report, indent=2))
    return 0
