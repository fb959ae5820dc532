"""The embed stage against the real model server ``EMBED_URL`` names, on a folder of real text.

Prints JSON: how many windows are over the model's context and the tokens
lost (from ``embed.summary.json`` when the stage reports them: the
``truncated``/``tokens_lost``/``context_tokens`` fields), where the batch
tuner settled from ``EMBED_BATCH=32``, and windows/s at that batch against
batch 1 and batch 32 (``EMBED_BATCH_FIXED=1``), measured in this run,
interleaved round by round so a busy machine weighs on each alike; and
whether the stored vectors are the same at every batch size.

    EMBED_URL=http://127.0.0.1:11434 python3 bench/embed/real_server.py [--windows 600] [--rounds 2]
        [--size-tokens 128] [--model multilingual-e5-small] [--passage-prefix "passage: "]

Text: the licence texts (``/usr/share/common-licenses``), SciFact abstracts
(``../shared/data/ir``) and ``/usr/share/doc`` files, taken in turn, cut by
the product's own chunker.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # the shared helpers

from _realtext import IR, read_prose  # noqa: E402

from bastion_agent import embed
from bastion_agent.config import manifest as manifest_module  # noqa: E402
from bastion_agent.embedding.client import EmbedClient  # noqa: E402
from bastion_agent.embedding.endpoint import EndpointConfig  # noqa: E402
from bastion_agent.embedding.wire_formats import WIRE_FORMATS  # noqa: E402
from bastion_agent.core.errors import ModelServerError  # noqa: E402
from bastion_agent.core.layout import Layout  # noqa: E402
from bastion_agent.testing.testsupport import clean_env, write_sanitized_store  # noqa: E402

CONTEXT_FIELDS = ("context_tokens", "truncated", "tokens_lost", "served_model")


def sources() -> list[list[Path]]:
    """Three lists of real text files: licences, SciFact abstracts, package documentation."""
    licences = sorted(p for p in Path("/usr/share/common-licenses").iterdir() if p.is_file())
    scifact = sorted((IR / "scifact" / "docs").glob("*.txt"))
    docs = []
    for root, dirs, names in os.walk("/usr/share/doc"):
        dirs.sort()
        docs += [Path(root, name) for name in sorted(names) if name.endswith((".gz", ".txt", "README", ".md"))
                 and not Path(root, name).is_symlink()]
    return [licences, scifact, docs]


def real_documents(windows_wanted: int, size: int, overlap: int) -> dict[str, list[str]]:
    """``{text: [path]}`` of whole files, taken from each source in turn, until ``windows_wanted`` windows."""
    documents: dict[str, list[str]] = {}
    count = 0
    iterators = [iter(files) for files in sources()]
    while count < windows_wanted and iterators:
        for source in list(iterators):
            path = next(source, None)
            if path is None:
                iterators.remove(source)
                continue
            text = read_prose(path)
            if not text or text in documents:
                continue
            spans = embed.windows(text, size, overlap)
            if count + len(spans) > windows_wanted:  # the file's first windows only
                keep = spans[: windows_wanted - count]
                if not keep:
                    continue
                text = text[: keep[-1].end]
                spans = keep
            documents[text] = [str(path)]
            count += len(spans)
            if count >= windows_wanted:
                break
    return documents


def make_store(folder: Path, args, dim: int):
    manifest_path = folder / "manifest.toml"
    (folder / "docs").mkdir()
    manifest_path.write_text(
        f'[source]\nroot = "docs"\n\n[embed]\nmodel = {json.dumps(args.model)}\ndim = {dim}\n'
        f'passage_prefix = {json.dumps(args.passage_prefix)}\nquery_prefix = {json.dumps(args.query_prefix)}\n\n'
        f"[embed.chunk]\nsize_tokens = {args.size_tokens}\noverlap_tokens = {args.overlap_tokens}\n",
        encoding="utf-8")
    layout = Layout(folder / "out")
    write_sanitized_store(layout, real_documents(args.windows, args.size_tokens, args.overlap_tokens))
    with clean_env():
        manifest = manifest_module.load(manifest_path)
    chunked = embed.run_chunk(manifest, layout)
    return manifest, layout, chunked


def run(manifest, layout: Layout, env: dict) -> tuple[dict, float, dict[str, bytes]]:
    """One embed run from an empty store: its summary, windows/s over the wall time, the vectors."""
    for path in layout.root.glob("vectors.db*"):
        path.unlink()
    passed = ("EMBED_URL", "EMBED_API", "EMBED_TIMEOUT", "EMBED_CONTEXT")
    base = {key: value for key, value in os.environ.items() if key in passed}
    with clean_env(**{**base, **env}):
        started = time.perf_counter()
        try:
            summary = embed.run_embed(manifest, layout)
        except ModelServerError:  # failed chunks (too long...): the summary says which
            summary = json.loads(layout.summary_path("embed").read_text(encoding="utf-8"))
        seconds = time.perf_counter() - started
    import sqlite3

    with sqlite3.connect(layout.vectors_db) as db:
        vectors = dict(db.execute("SELECT chunk_id, vec FROM vectors"))
    return summary, summary["embedded"] / seconds, vectors


def max_difference(a: dict[str, bytes], b: dict[str, bytes]) -> float | None:
    """The largest absolute difference between the two runs' vectors of the same windows."""
    worst = 0.0
    common = a.keys() & b.keys()
    if not common:
        return None
    for chunk in common:
        if a[chunk] != b[chunk]:
            x, y = array("f", a[chunk]), array("f", b[chunk])
            worst = max(worst, max(abs(p - q) for p, q in zip(x, y)))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of fixed batches 1, 32, settled (0: the tuned run only)")
    parser.add_argument("--size-tokens", type=int, default=128)
    parser.add_argument("--overlap-tokens", type=int, default=16)
    parser.add_argument("--model", default="multilingual-e5-small")
    parser.add_argument("--passage-prefix", default="passage: ")
    parser.add_argument("--query-prefix", default="query: ")
    parser.add_argument("--concurrency", type=int, default=1, help="EMBED_CONCURRENCY for the tuned run")
    args = parser.parse_args()
    config = EndpointConfig.from_env()
    client = EmbedClient(config, args.model)
    dims = {}
    for candidate in ([config.wire_format.name] if config.wire_format else list(WIRE_FORMATS)):
        try:
            dims[candidate] = client.measure(candidate)
            break
        except Exception:  # this wire format does not answer: try the other
            continue
    if not dims:
        raise SystemExit(f"no embedding server answers at {config.display_url}")
    api, dim = next(iter(dims.items()))
    result = {"url": config.display_url, "api": api, "model": args.model, "dim": dim,
              "load_average_1m": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory(prefix="bench-real-server-") as folder:
        manifest, layout, chunked = make_store(Path(folder), args, dim)
        result.update(windows=chunked["chunks"], documents=chunked["documents"], size_tokens=args.size_tokens,
                      overlap_tokens=args.overlap_tokens)
        env = {"EMBED_API": api}
        tuned, tuned_rate, tuned_vectors = run(manifest, layout, {**env, "EMBED_BATCH": "32",
                                                                  "EMBED_CONCURRENCY": str(args.concurrency)})
        result["context"] = ({field: tuned.get(field) for field in CONTEXT_FIELDS}
                             if any(field in tuned for field in CONTEXT_FIELDS)
                             else "not reported by this version of the embed stage")
        result["failed_by_reason"] = tuned["failed_by_reason"]
        settled = tuned["batch_settled"]
        result["tuned"] = {"start": 32, "batch_settled": settled, "concurrency_settled": tuned["concurrency_settled"],
                           "batch_tuning": tuned["batch_tuning"], "batch_trials": tuned["batch_trials"],
                           "windows_per_s_whole_run": round(tuned_rate, 2)}
        if args.rounds == 0:  # the tuned run only
            print(json.dumps(result, indent=2))
            return
        sizes = sorted({1, 32, settled})
        rates: dict[int, list[float]] = {size: [] for size in sizes}
        vectors: dict[int, dict] = {}
        for _ in range(args.rounds):  # interleaved: each round runs every size once
            for size in sizes:
                _, rate, stored = run(manifest, layout, {**env, "EMBED_BATCH": str(size), "EMBED_BATCH_FIXED": "1"})
                rates[size].append(rate)
                vectors.setdefault(size, stored)
        median = {size: statistics.median(values) for size, values in rates.items()}
        result["fixed_windows_per_s"] = {f"batch_{size}": {"median": round(median[size], 2),
                                                           "runs": [round(r, 2) for r in rates[size]]}
                                         for size in sizes}
        result["settled_over_batch_1"] = round(median[settled] / median[1], 3)
        result["settled_over_batch_32"] = round(median[settled] / median[32], 3)
        differences = {f"batch_{size}_vs_1": max_difference(vectors[1], vectors[size]) for size in sizes if size != 1}
        differences["tuned_vs_1"] = max_difference(vectors[1], tuned_vectors)
        result["vectors_max_abs_difference"] = differences
        result["vectors_identical"] = all(value == 0.0 for value in differences.values())
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
