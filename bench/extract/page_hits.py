#!/usr/bin/env python3
"""What it costs for a hit to say its page and whether OCR read it.

Cranfield's 1,400 abstracts (``../shared/data/ir/cranfield``, read, never
copied) are bound into "PDFs" of ``--pages`` pages each, apart by
``pages.PAGE_BREAK``, every other page marked as read by OCR; the store is
built through the real chunk and embed stages against the loopback stub.

Measured in one run, on one open ``SearchIndex``, rounds alternating:

- ``search_ms``: p50 of keyword and vector search (k 10) over Cranfield's
  queries with the page maps in ``vectors.db`` and with the table emptied
  (what search read before pages were kept: the baseline); ``ratios`` is
  with / without.
- ``page_map_vs_sanitize``: the time to make every document's page map
  from its text, over the time ``Sanitizer.redact`` takes on the same texts
  (the map is made once per sanitize run, after sanitizing).

Usage: python3 bench/extract/page_hits.py [--pages 10] [--rounds 5] [--queries 100]. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bastion_agent import embed  # noqa: E402
from bastion_agent.config import manifest as manifest_module  # noqa: E402
from bastion_agent.core.layout import Layout, read_jsonl, write_jsonl  # noqa: E402
from bastion_agent.embedding import vectorstore  # noqa: E402
from bastion_agent.sanitizing.pages import PAGE_BREAK, page_map  # noqa: E402
from bastion_agent.sanitizing.scanner import Sanitizer  # noqa: E402
from bastion_agent.sanitizing.settings import SanitizeSettings  # noqa: E402
from bastion_agent.testing.stub_server import StubServer  # noqa: E402
from bastion_agent.testing.testsupport import clean_env, write_manifest, write_sanitized_store  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "ir" / "cranfield"


def bound_documents(pages: int) -> list[str]:
    files = sorted((DATA / "docs").glob("*.txt"), key=lambda path: int(path.stem))
    texts = [path.read_text(encoding="utf-8").strip() for path in files]
    return [PAGE_BREAK.join(texts[at:at + pages]) for at in range(0, len(texts), pages)]


def build(folder: Path, documents: list[str], stub: StubServer):
    manifest_path = write_manifest(folder, size=256, overlap=32)
    layout = Layout(folder / "out")
    ids = write_sanitized_store(layout, {text: [f"scan-{n}.pdf"] for n, text in enumerate(documents)})
    rows = read_jsonl(layout.sanitized_listing)
    by_doc = {doc: text for text, doc in ids.items()}
    for row in rows:
        row["pages"] = page_map(by_doc[row["doc"]], range(2, 1000, 2))
    write_jsonl(layout.sanitized_listing, rows)
    with clean_env():
        manifest = manifest_module.load(manifest_path)
    with clean_env(EMBED_URL=stub.url):
        embed.run_chunk(manifest, layout)
        embed.run_embed(manifest, layout)
    return manifest, layout


def timed_queries(index, queries, vectors, mode: str) -> list[float]:
    spent = []
    for query, vector in zip(queries, vectors):
        started = time.perf_counter()
        index.search(query, vector, 10, mode)
        spent.append((time.perf_counter() - started) * 1000)
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    documents = bound_documents(args.pages)
    queries = [json.loads(line)["text"] for line in (DATA / "queries.jsonl").read_text().splitlines()][:args.queries]
    with tempfile.TemporaryDirectory() as tmp, StubServer(dim=64) as stub:
        manifest, layout = build(Path(tmp), documents, stub)
        with clean_env(EMBED_URL=stub.url):
            vectors = [embed.embed_query(manifest, query) for query in queries]
        saved = vectorstore.connect(layout.vectors_db, create=False)
        maps = saved.execute("SELECT doc, pages FROM document_pages").fetchall()
        times = {(mode, kept): [] for mode in ("keyword", "vector") for kept in (True, False)}
        for round_number in range(args.rounds):
            for kept in ((True, False) if round_number % 2 else (False, True)):  # each goes first as often
                with vectorstore.transaction(saved):
                    saved.execute("DELETE FROM document_pages")
                    if kept:
                        saved.executemany("INSERT INTO document_pages VALUES (?, ?)", maps)
                index = embed.SearchIndex.load(manifest, layout, use_ann=False)
                try:
                    hits = index.search(queries[0], vectors[0], 10, "keyword")
                    assert all(hit.page is not None for hit in hits) == kept
                    for mode in ("keyword", "vector"):
                        times[mode, kept] += timed_queries(index, queries, vectors, mode)
                finally:
                    index.close()
        saved.close()
        windows = sum(1 for _ in read_jsonl(layout.chunks_path))
    sanitizer = Sanitizer(SanitizeSettings())
    started = time.perf_counter()
    for text in documents:
        sanitizer.redact(text)
    redact_s = time.perf_counter() - started
    started = time.perf_counter()
    for text in documents:
        page_map(text, range(2, 1000, 2))
    map_s = time.perf_counter() - started
    p50 = {f"{mode}_{'with' if kept else 'without'}_pages": round(statistics.median(spent), 3)
           for (mode, kept), spent in times.items()}
    print(json.dumps({
        "documents": len(documents), "pages_per_document": args.pages, "windows": windows,
        "queries": len(queries), "rounds": args.rounds,
        "search_ms_p50": p50,
        "ratios": {mode: round(statistics.median(times[mode, True]) / statistics.median(times[mode, False]), 3)
                   for mode in ("keyword", "vector")},
        "page_map_vs_sanitize": {"page_map_s": round(map_s, 4), "redact_s": round(redact_s, 3),
                                 "ratio": round(map_s / redact_s, 5)},
    }, indent=2))


if __name__ == "__main__":
    main()
