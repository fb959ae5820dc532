#!/usr/bin/env python3
"""What it costs to make a removed document's text leave ``vectors.db``.

Builds a ``vectors.db`` whose ``chunks`` (and so the keyword index) hold
the windows of a test collection in ``../shared/data/ir`` (SciFact by
default), then removes one document's windows as a sweep after a deleted
file does (``vectorstore.replace_chunks``) and runs ``vectorstore.scrub``
(FTS5 'optimize' and a TRUNCATE checkpoint). The baseline, in the same run,
is writing the same windows into the table and its keyword index the first
time; ``ratio`` is scrub over that build. (Whether the words are gone is
tested, with distinctive words, in ``test_ids.RemovedTextTests``: FTS5
stores terms prefix-compressed, so grepping ordinary words proves little.)

Usage: python3 bench/embed/scrub.py [--collection scifact] [--windows 20000]
``BASTION_SHARED_DATA`` overrides ``../shared/data``. Prints JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bastion_agent import embed
from bastion_agent.core.records import StoredChunk  # noqa: E402
from bastion_agent.embedding import vectorstore  # noqa: E402


def shared_data() -> Path:
    return Path(os.environ.get("BASTION_SHARED_DATA") or REPO.parent / "shared" / "data")


def windows_of(collection: Path, limit: int, size: int) -> list[StoredChunk]:
    rows = []
    for path in sorted((collection / "docs").glob("*.txt")):
        text = path.read_text(encoding="utf-8", errors="replace")
        doc = hashlib.sha256(text.encode("utf-8")).hexdigest()
        for row in embed.chunk_document(doc, text, size, size // 8):
            rows.append(StoredChunk(row.chunk_id, doc, row.idx, row.start, row.end, text[row.start:row.end]))
        if len(rows) >= limit:
            break
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--collection", default="scifact")
    parser.add_argument("--windows", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=64, help="window size in tokens (small: more windows from one collection)")
    args = parser.parse_args()
    rows = windows_of(shared_data() / "ir" / args.collection, args.windows, args.size)
    by_doc: dict[str, int] = {}
    for row in rows:
        by_doc[row.doc] = by_doc.get(row.doc, 0) + 1
    victim = max(by_doc, key=lambda doc: (by_doc[doc], doc))  # the longest document: most words to lose
    kept = [row for row in rows if row.doc != victim]
    with tempfile.TemporaryDirectory(prefix="bastion-scrub-") as tmp:
        path = Path(tmp) / "vectors.db"
        db = vectorstore.connect(path, create=True)
        started = time.perf_counter()
        vectorstore.replace_chunks(db, rows, [])
        vectorstore.checkpoint(db)
        build = time.perf_counter() - started
        started = time.perf_counter()
        vectorstore.replace_chunks(db, kept, [])
        delete = time.perf_counter() - started
        vectorstore.checkpoint(db)
        started = time.perf_counter()
        vectorstore.scrub(db)
        scrub = time.perf_counter() - started
        size = path.stat().st_size
        db.close()
    print(json.dumps({
        "collection": args.collection,
        "windows": len(rows),
        "removed_windows": len(rows) - len(kept),
        "db_mb": round(size / 1e6, 1),
        "build_seconds": round(build, 3),
        "delete_seconds": round(delete, 3),
        "scrub_seconds": round(scrub, 3),
        "ratio_scrub_to_build": round(scrub / build, 3),
    }, indent=2))


if __name__ == "__main__":
    main()
