#!/usr/bin/env python3
"""What named tokens and the audit log cost serve, against the single token, in the same run.

Three figures, each a ratio to a baseline measured beside it:

- ``auth``: one ``TokenBook.caller`` (a ``stat`` of the tokens file, one
  sha256, a constant-time comparison with every stored hash) with 1, 1,000
  and 10,000 named tokens, against the single ``BASTION_SERVE_TOKEN``
  compared alone (what serve did before);
- ``audit``: one ``audit.record_search`` line (lock, ``flock``, O_APPEND
  write), against one warm keyword search of the same store in process
  (and, to tell the shares apart, that search with a group filter that
  keeps every window, the cost of which belongs to search, not tokens);
- ``http``: ``GET /search`` (keyword and hybrid, k=10) through ``serve``
  started with a 10,000-token file, asked with a named token whose group
  labels every document, against the same server process asked with the
  single token (both pay the audit line; the difference is the named
  token's lookup and the group filter that keeps every window).

The store is ``bench/_realtext.py``'s real prose (2,000 windows by default),
vectors from the loopback stub in its own process.

Usage: python3 bench/serve/serve_tokens.py [--keep DIR] [--windows 2000] [--queries 60]
Prints JSON on stdout (progress on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import _realtext  # noqa: E402
import serve_latency  # noqa: E402
from search.search_latency import questions  # noqa: E402

from bastion_agent import embed  # noqa: E402
from bastion_agent.commands import token_cli  # noqa: E402
from bastion_agent.config import manifest as manifest_module  # noqa: E402
from bastion_agent.core import audit  # noqa: E402
from bastion_agent.core.layout import Layout  # noqa: E402
from bastion_agent.serving import tokens  # noqa: E402

SINGLE = "bench-single-token-0123456789abcdef"


def median_us(function, runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        function()
        samples.append(time.perf_counter() - started)
    return round(1e6 * statistics.median(samples), 2)


def tokens_file(folder: Path, count: int) -> tuple[Path, str]:
    """A tokens file of ``count`` named tokens (hashes written directly: ``token add`` per token is slow) and the last token."""
    path = folder / f"tokens-{count}.json"
    entries, last = [], ""
    for number in range(count):
        last = tokens.new_token()
        entries.append(tokens.TokenEntry(f"t{number}", tokens.hash_token(last), ("staff",), None, tokens.now_utc()))
    tokens.write_tokens(path, entries)
    return path, last


def measure_auth(folder: Path, runs: int) -> dict:
    single = tokens.TokenBook(None, SINGLE)
    base = median_us(lambda: single.caller(f"Bearer {SINGLE}"), runs)
    result = {"single_token_us": base}
    for count in (1, 1000, 10_000):
        path, token = tokens_file(folder, count)
        book = tokens.TokenBook(path, SINGLE)
        header = f"Bearer {token}"
        assert book.caller(header).name == f"t{count - 1}"
        us = median_us(lambda: book.caller(header), runs if count < 10_000 else max(50, runs // 10))
        result[f"named_{count}_us"] = us
        result[f"ratio_named_{count}"] = round(us / base, 1)
    return result


def measure_audit(folder: Path, manifest_path: Path, layout: Layout, queries: list[str], runs: int) -> dict:
    manifest = manifest_module.load(manifest_path)
    index = embed.SearchIndex.load(manifest, layout)
    try:
        for query in queries:
            index.search(query, None, 10, "keyword")
        search_us = statistics.median(
            [median_us(lambda q=query: index.search(q, None, 10, "keyword"), 1) for query in queries])
        staff = frozenset({"staff"})
        for query in queries:
            index.search(query, None, 10, "keyword", groups=staff)
        filtered_us = statistics.median(
            [median_us(lambda q=query: index.search(q, None, 10, "keyword", groups=staff), 1) for query in queries])
    finally:
        index.close()
    target = Layout(folder / "audit-bench")
    docs = [f"{n:064x}" for n in range(10)]
    audit_us = median_us(lambda: audit.record_search(target, caller="t1", via="serve", mode="keyword", k=10, docs=docs),
                         runs)
    return {"record_us": audit_us, "keyword_search_us": round(search_us, 1),
            "ratio_record_to_search": round(audit_us / search_us, 3),
            # what the group filter alone costs (a filter that keeps every window): not the tokens' share
            "keyword_search_filtered_us": round(filtered_us, 1),
            "ratio_filtered_to_search": round(filtered_us / search_us, 2)}


def measure_http(folder: Path, manifest_path: Path, layout: Layout, stub_url: str, queries: list[str]) -> dict:
    path, named = tokens_file(folder, 10_000)
    original = serve_latency.subprocess.Popen

    def popen(argv, **kwargs):
        kwargs["env"] = {**kwargs.get("env", {}), "BASTION_SERVE_TOKEN": SINGLE, "BASTION_SERVE_TOKENS": str(path)}
        return original(argv, **kwargs)

    serve_latency.subprocess.Popen = popen
    try:
        process, base, _ = serve_latency.start_serve(manifest_path, layout, stub_url)
    finally:
        serve_latency.subprocess.Popen = original
    result = {}
    try:
        for mode in ("keyword", "hybrid"):
            paths = [serve_latency.search_path(query, mode) for query in queries]
            timed(base, paths, SINGLE)  # warm-up: every query once, so neither token meets a cold one
            single, named_ms = [], []
            for path_ in paths:  # interleaved, so drift on this shared machine hits both alike
                single.extend(timed(base, [path_], SINGLE))
                named_ms.extend(timed(base, [path_], named))
            result[mode] = {"single_p50_ms": round(1000 * statistics.median(single), 2),
                            "named_p50_ms": round(1000 * statistics.median(named_ms), 2)}
            result[mode]["ratio_p50"] = round(result[mode]["named_p50_ms"] / result[mode]["single_p50_ms"], 3)
    finally:
        process.terminate()
        process.wait(30)
    return result


def timed(base: str, paths: list[str], token: str) -> list[float]:
    import http.client
    import urllib.parse

    parts = urllib.parse.urlsplit(base)
    seconds = []
    for path in paths:
        started = time.perf_counter()
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        try:
            connection.request("GET", path, headers={"Authorization": f"Bearer {token}"})
            answer = connection.getresponse()
            answer.read()
            if answer.status != 200:
                raise SystemExit(f"serve answered {answer.status} to {path}")
        finally:
            connection.close()
        seconds.append(time.perf_counter() - started)
    return seconds


def label_everything(layout: Layout, group: str) -> None:
    """Every document in ``group`` (as sanitize would label them), so a named token of it sees the whole store."""
    import sqlite3

    with sqlite3.connect(layout.vectors_db) as db:
        db.execute("UPDATE documents SET groups = ?", (json.dumps([group]),))
    db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="build the store here and reuse it (default: a temporary folder)")
    parser.add_argument("--windows", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--runs", type=int, default=2000, help="calls per in-process figure")
    args = parser.parse_args()
    os.umask(0o077)
    holder = None if args.keep else tempfile.TemporaryDirectory(prefix="bastion-tokens-")
    folder = (args.keep or Path(holder.name)) / str(args.windows)
    folder.mkdir(parents=True, exist_ok=True)
    built = _realtext.build(folder, args.windows, log=_realtext.stderr)
    manifest_path, layout = _realtext.write_manifest(folder), Layout(folder / "out")
    with open(manifest_path, "a", encoding="utf-8") as handle:  # it times tokens, not the per-token search limit
        handle.write("\n[serve]\nsearches_per_minute = 60000\nsearch_burst = 10000\n")
    label_everything(layout, "staff")
    asked = questions(args.queries)
    result: dict = {"windows": built["windows"], "queries": len(asked)}
    print("auth…", file=sys.stderr, flush=True)
    result["auth"] = measure_auth(folder, args.runs)
    print("audit…", file=sys.stderr, flush=True)
    result["audit"] = measure_audit(folder, manifest_path, layout, asked, args.runs)
    print("http…", file=sys.stderr, flush=True)
    with serve_latency.stub_process() as stub_url:
        result["http"] = measure_http(folder, manifest_path, layout, stub_url, asked)
    print(json.dumps(result, indent=2))
    if holder is not None:
        holder.cleanup()


if __name__ == "__main__":
    main()
