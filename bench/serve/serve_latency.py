#!/usr/bin/env python3
"""Warm latency of ``serve``'s ``/search`` on REAL prose (up to 1M windows), against in-process search.

For each size it uses ``bench/_realtext.py``'s store (windows of real text
with the loopback stub's bag-of-words vectors at dim 384, built once into
``--keep DIR/SIZE`` and reused), and real questions (SciFact's and
Cranfield's queries, as ``bench/search/search_latency.py`` asks). Then it starts ``python3 -m bastion_agent serve`` in its own process (and the
stub in another), waits for it, warms it up and measures:

- ``http_ms``: p50 / p95 of one ``GET /search?k=10`` at a time, per mode,
  and of ``GET /healthz`` (the HTTP floor: a new connection, no search);
- ``http_keepalive_ms``: the same over one kept-alive connection (what a
  client with a session pays), and ``serve_memory_mb``: serve's resident
  set (anonymous and file-backed) beside the size of each derived file it
  maps and how much of that is resident, after the measurement;
- ``burst``: 16 clients sending ``--burst`` queries together (default mode):
  every answer's status, the wall time, queries per second, p50 / p95;
- ``in_process_ms``: the baseline, measured in the same run on the same
  queries: ``embed_query`` through the same stub plus ``SearchIndex.search``
  on an index opened in this process, no HTTP; and ``http_over_in_process``,
  the ratio of the p50s (what serving over HTTP costs on top of the search).

The three ways are interleaved per query and mode (the order rotated), so
load on a shared machine stretches them alike. With ``--before TREE`` a
second serve runs from that source tree (``PYTHONPATH=TREE``: the HTTP stack
before a change) on the same store, measured in the same interleaved loop
(``before_http_ms``, ``before_http_keepalive_ms``), and ``over_in_process_ms``
gives, for each serve, what HTTP adds to the in-process p50 and p95.

Usage: python3 bench/serve/serve_latency.py --keep /work/cache/search-latency [--sizes 1000000] [--queries 200] [--burst 400]
       [--before /work/main]
Prints JSON on stdout (progress on stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
if "--blas-threads-default" not in sys.argv:  # the in-process baseline runs as serve does (before numpy loads)
    for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, "1")

import _realtext  # noqa: E402
from bastion_agent import embed
from bastion_agent.config import manifest as manifest_module  # noqa: E402
from bastion_agent.embedding.client import EmbedClient  # noqa: E402
from bastion_agent.embedding.endpoint import EndpointConfig  # noqa: E402
from bastion_agent.core.layout import Layout  # noqa: E402
from search.search_latency import questions  # noqa: E402

DIM = _realtext.DIM
CLIENTS = 16
MODES = ("vector", "keyword", "hybrid")


def percentiles(seconds: list[float]) -> dict:
    ordered = sorted(seconds)
    return {"p50": round(1000 * statistics.median(ordered), 2),
            "p95": round(1000 * ordered[int(0.95 * (len(ordered) - 1))], 2)}


def get(base: str, path: str) -> tuple[int, float]:
    """One request on a new connection (as the server answers one per connection): status and seconds."""
    parts = urllib.parse.urlsplit(base)
    started = time.perf_counter()
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    try:
        connection.request("GET", path)
        answer = connection.getresponse()
        answer.read()
    finally:
        connection.close()
    return answer.status, time.perf_counter() - started


class KeptAlive:
    """One connection for every request (HTTP/1.1 keep-alive), as a client library with a session does."""

    def __init__(self, base: str):
        parts = urllib.parse.urlsplit(base)
        self.connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)

    def get(self, path: str) -> tuple[int, float]:
        started = time.perf_counter()
        self.connection.request("GET", path)
        answer = self.connection.getresponse()
        answer.read()
        return answer.status, time.perf_counter() - started

    def close(self) -> None:
        self.connection.close()


def search_path(query: str, mode: str | None) -> str:
    params = {"q": query, "k": "10", **({"mode": mode} if mode else {})}
    return "/search?" + urllib.parse.urlencode(params)


def timed_requests(base: str, paths: list[str], session: KeptAlive | None = None) -> list[float]:
    times = []
    for path in paths:
        status, seconds = session.get(path) if session else get(base, path)
        if status != 200:
            raise SystemExit(f"serve answered {status} to {path.split('?')[0]}")
        times.append(seconds)
    return times


def start_serve(manifest: Path, layout: Layout, stub_url: str, tree: Path = REPO) -> tuple[subprocess.Popen, str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBED_", "BASTION_"))}
    env.update(EMBED_URL=stub_url, PYTHONPATH=str(tree))  # only that tree: the serve measured is that tree's
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "bastion_agent", "serve", str(manifest), "--out", str(layout.root),
                                "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=tree)
    line = process.stdout.readline()
    found = re.search(r"http://127\.0\.0\.1:\d+/", line)
    if not found:
        process.kill()
        raise SystemExit(f"serve did not start: {line.strip()!r}")
    return process, found.group(0), time.perf_counter() - started


class InProcess:
    """The baseline: the same search without HTTP (query embedding through the same stub included)."""

    def __init__(self, manifest_path: Path, layout: Layout, stub_url: str):
        self.manifest = manifest_module.load(manifest_path)
        self.client = EmbedClient(EndpointConfig(url=stub_url), self.manifest.embed.model)
        self.client.probe(self.manifest.embed.dim)
        self.index = embed.SearchIndex.load(self.manifest, layout)

    def search(self, query: str, mode: str) -> float:
        started = time.perf_counter()
        vector = embed.embed_query(self.manifest, query, self.client) if mode != "keyword" else None
        self.index.search(query, vector, 10, mode)
        return time.perf_counter() - started

    def close(self) -> None:
        self.index.close()


@contextlib.contextmanager
def stub_process():
    """The loopback stub in its own process, so neither serve nor the baseline shares a GIL with it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "bastion_agent.testing.stub_server", "--port", str(port), "--dim", str(DIM)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO)
    try:
        process.stdout.readline()  # "stub model server on ..." once it listens
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(30)


def measure(folder: Path, n: int, queries: int, burst: int, stub_url: str, before: Path | None = None) -> dict:
    """serve over new connections, over one kept-alive connection, and in process: interleaved per query and mode."""
    asked = questions(queries)
    built = _realtext.build(folder, n, log=_realtext.stderr)
    manifest, layout = _realtext.write_manifest(folder), Layout(folder / "out")
    result: dict = {"windows": built["windows"], "dim": DIM, "load_before": [round(x, 2) for x in os.getloadavg()]}
    process, base, start_seconds = start_serve(manifest, layout, stub_url)
    local = InProcess(manifest, layout, stub_url)
    session = KeptAlive(base)
    ways = {"http_ms": lambda q, mode: _ok(get(base, search_path(q, mode))),
            "http_keepalive_ms": lambda q, mode: _ok(session.get(search_path(q, mode))),
            "in_process_ms": local.search}
    old = None
    if before is not None:
        old, old_base, _ = start_serve(manifest, layout, stub_url, before)
        old_session = KeptAlive(old_base)
        ways["before_http_ms"] = lambda q, mode: _ok(get(old_base, search_path(q, mode)))
        ways["before_http_keepalive_ms"] = lambda q, mode: _ok(old_session.get(search_path(q, mode)))
    try:
        result["serve_start_s"] = round(start_seconds, 2)  # launch to "listening": the index is loaded
        _check_ready(base)
        result["default_mode"] = json.loads(_body(base, "/healthz"))["search_mode"]
        for q in asked:  # warm-up: pages mapped, words counted, in both processes
            for mode in MODES:
                for way in ways:
                    if "keepalive" in way or way == "in_process_ms":
                        ways[way](q, mode)
        runs = [(way, mode) for way in ways for mode in MODES]
        samples: dict = {run: [] for run in runs}
        for number, q in enumerate(asked):  # interleaved, the order rotated: load stretches every way alike
            shift = number % len(runs)
            for way, mode in runs[shift:] + runs[:shift]:
                samples[(way, mode)].append(ways[way](q, mode))
        for way in ways:
            result[way] = {mode: percentiles(samples[(way, mode)]) for mode in MODES}
        result["http_ms"]["healthz"] = percentiles(timed_requests(base, ["/healthz"] * queries))
        result["http_keepalive_ms"]["healthz"] = percentiles(timed_requests(base, ["/healthz"] * queries, session))
        result["serve_memory_mb"] = _rss_mb(process.pid, layout.root / "index")
        result["burst"] = run_burst(base, [asked[i % len(asked)] for i in range(burst)])
    finally:
        session.close()
        local.close()
        for serving in filter(None, (process, old)):
            serving.terminate()
            serving.wait(60)
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    baseline = result["in_process_ms"]
    result["http_over_in_process"] = {mode: round(result["http_ms"][mode]["p50"] / baseline[mode]["p50"], 2)
                                      for mode in MODES}
    result["keepalive_minus_in_process_p50_ms"] = {
        mode: round(result["http_keepalive_ms"][mode]["p50"] - baseline[mode]["p50"], 2) for mode in MODES}
    result["over_in_process_ms"] = {
        way: {mode: {p: round(result[way][mode][p] - baseline[mode][p], 2) for p in ("p50", "p95")} for mode in MODES}
        for way in ways if way != "in_process_ms"}
    result["p95_over_p50"] = {f"{way}_{mode}": round(result[way][mode]["p95"] / result[way][mode]["p50"], 2)
                              for way in ways for mode in MODES}
    return result


def _ok(answer: tuple[int, float]) -> float:
    status, seconds = answer
    if status != 200:
        raise SystemExit(f"serve answered {status}")
    return seconds


def _rss_mb(pid: int, index_folder: Path) -> dict:
    """serve's memory after the measurement, from /proc: its resident set beside what it maps.

    ``VmRSS`` splits into ``RssAnon`` (Python's own heap: caches, the
    keyword vocabulary, the floor sample) and ``RssFile`` (pages of mapped
    files that are in memory). Each derived file serve maps (the float32
    vector file, the ANN index, the ids) is listed with its mapped size and
    how much of it is resident: a memory map costs memory only for the
    pages a query touched, so the resident share is the part of the store
    the queries reached, not the store's size. ``VmSize`` (every mapping,
    thread stacks and reserved heap included) is shown for completeness.
    """
    found: dict = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon", "RssFile", "VmSize"):
                found[name] = round(int(value.split()[0]) / 1024, 1)
        found["maps"] = _mapped_files(Path(f"/proc/{pid}/smaps").read_text(), index_folder)
    except OSError:
        pass
    return found


def _mapped_files(smaps: str, folder: Path) -> dict:
    """``{kind: {"mapped_mb", "resident_mb"}}`` of each file under ``folder`` in an smaps listing."""
    totals: dict = {}
    kind = None
    for line in smaps.splitlines():
        fields = line.split()
        if len(fields) >= 5 and "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's first line
            path = fields[5] if len(fields) >= 6 else ""
            kind = path.rsplit(".", 1)[-1] if path.startswith(str(folder)) else None
        elif kind is not None and fields and fields[0] in ("Size:", "Rss:"):
            entry = totals.setdefault(kind, {"mapped_mb": 0.0, "resident_mb": 0.0})
            entry["mapped_mb" if fields[0] == "Size:" else "resident_mb"] += int(fields[1]) / 1024
    return {kind: {name: round(value, 1) for name, value in entry.items()} for kind, entry in totals.items()}


def _body(base: str, path: str) -> bytes:
    parts = urllib.parse.urlsplit(base)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    try:
        connection.request("GET", path)
        return connection.getresponse().read()
    finally:
        connection.close()


def _check_ready(base: str) -> None:
    status, _ = get(base, "/healthz")
    if status != 200:
        raise SystemExit(f"/healthz answered {status}")


def run_burst(base: str, queries: list[str]) -> dict:
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        answers = list(pool.map(lambda q: get(base, search_path(q, None)), queries))
    wall = time.perf_counter() - started
    statuses: dict[str, int] = {}
    for status, _ in answers:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    return {"clients": CLIENTS, "queries": len(queries), "statuses": statuses, "wall_s": round(wall, 2),
            "qps": round(len(queries) / wall, 1), **percentiles([seconds for _, seconds in answers])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", metavar="DIR", type=Path, required=True,
                        help="the real-prose store of each size lives in DIR/SIZE (built once, outside the repository)")
    parser.add_argument("--sizes", default="1000000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--burst", type=int, default=400)
    parser.add_argument("--before", metavar="TREE", type=Path,
                        help="also measure serve from this source tree (e.g. /work/main), in the same run")
    parser.add_argument("--blas-threads-default", action="store_true",
                        help="leave BLAS its default thread count in the baseline (serve itself always sets 1)")
    args = parser.parse_args()
    results = []
    with stub_process() as stub_url:
        for size in (int(text) for text in args.sizes.split(",")):
            results.append(measure(args.keep / str(size), size, args.queries, args.burst, stub_url, args.before))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"cpus": os.cpu_count(), "python": sys.version.split()[0],
                      "baseline_blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"), "sizes": results}, indent=2))


if __name__ == "__main__":
    main()
