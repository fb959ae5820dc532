#!/usr/bin/env python3
"""A legitimate ``/search`` while one client floods ``serve`` with idle sockets.

Builds a store of real text (``bench/_realtext.py``: 10,000 windows by
default, the loopback stub's vectors), starts ``python3 -m bastion_agent
serve`` with ``BASTION_SERVE_TOKEN`` in its own process and the stub in
another, then measures ``GET /search?k=10`` with the right token, one at a
time, in three phases of the same run:

- ``none``: no flood (the baseline);
- ``idle``: ``--idle`` (500) sockets open from the same address, half of
  them silent, half with a request line and headers cut short;
- ``reopening``: the same, and an attacker process that opens a new socket
  for every one the server closes, for as long as the phase lasts.

The attacker runs in its own process, so it does not share this process's
GIL. Figures: p50, p95 and max of each phase, every status, and the ratios
of the flood phases' p50 and max to the baseline's. The target: an
answer within 1 s with 500 idle sockets open.

Usage: python3 bench/serve/serve_flood.py [--keep DIR] [--windows 10000] [--idle 500] [--queries 40]
Prints JSON on stdout (progress on stderr).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import _realtext  # noqa: E402
from search.search_latency import questions  # noqa: E402
from serve.serve_latency import start_serve, stub_process  # noqa: E402

from bastion_agent.core.layout import Layout  # noqa: E402

TOKEN = "bench-flood-token-0123456789abcdef"

ATTACKER = r"""
import selectors, socket, sys, time
host, port, count, reopen = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
half = b"GET /search?q=flood HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: "
selector = selectors.DefaultSelector()
def open_one(number):
    sock = socket.create_connection((host, port))
    if number % 2:
        sock.sendall(half)
    sock.setblocking(False)
    selector.register(sock, selectors.EVENT_READ, number)
for number in range(count):
    open_one(number)
print("ready", flush=True)
opened = count
while True:
    for key, _ in selector.select(0.5):
        selector.unregister(key.fileobj)
        key.fileobj.close()  # the server answered (408, 503) or closed it
        if reopen:
            open_one(key.data)
            opened += 1
"""


def search(base: str, query: str) -> tuple[int, float]:
    parts = urllib.parse.urlsplit(base)
    started = time.perf_counter()
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        connection.request("GET", "/search?" + urllib.parse.urlencode({"q": query, "k": "10"}),
                           headers={"Authorization": f"Bearer {TOKEN}"})
        answer = connection.getresponse()
        answer.read()
        return answer.status, time.perf_counter() - started
    except OSError:
        return 0, time.perf_counter() - started
    finally:
        connection.close()


def phase(base: str, queries: list[str]) -> dict:
    results = [search(base, query) for query in queries]
    seconds = sorted(s for _, s in results)
    statuses: dict[str, int] = {}
    for status, _ in results:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    return {"p50_ms": round(1000 * statistics.median(seconds), 1),
            "p95_ms": round(1000 * seconds[int(0.95 * (len(seconds) - 1))], 1),
            "max_ms": round(1000 * seconds[-1], 1), "statuses": statuses}


def attacker(base: str, idle: int, reopen: bool) -> subprocess.Popen:
    parts = urllib.parse.urlsplit(base)
    process = subprocess.Popen([sys.executable, "-c", ATTACKER, parts.hostname, str(parts.port), str(idle),
                                "1" if reopen else "0"], stdout=subprocess.PIPE, text=True)
    if process.stdout.readline().strip() != "ready":
        raise SystemExit("the attacker could not open its sockets")
    return process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="build the store here and reuse it (default: a temporary folder)")
    parser.add_argument("--windows", type=int, default=10_000)
    parser.add_argument("--idle", type=int, default=500)
    parser.add_argument("--queries", type=int, default=40)
    args = parser.parse_args()
    holder = None if args.keep else tempfile.TemporaryDirectory(prefix="bastion-flood-")
    folder = (args.keep or Path(holder.name)) / str(args.windows)
    folder.mkdir(parents=True, exist_ok=True)
    built = _realtext.build(folder, args.windows, log=_realtext.stderr)
    manifest, layout = _realtext.write_manifest(folder), Layout(folder / "out")
    with open(manifest, "a", encoding="utf-8") as handle:  # this bench floods connections, not the token's searches
        handle.write("\n[serve]\nsearches_per_minute = 60000\nsearch_burst = 10000\n")
    asked = questions(args.queries)
    result: dict = {"windows": built["windows"], "idle_sockets": args.idle, "queries": len(asked)}
    with stub_process() as stub_url:
        process, base, _ = start_serve_with_token(manifest, layout, stub_url)
        try:
            phase(base, asked[:5])  # warm-up
            result["none"] = phase(base, asked)
            for name, reopen in (("idle", False), ("reopening", True)):
                flood = attacker(base, args.idle, reopen)
                try:
                    result[name] = phase(base, asked)
                finally:
                    flood.kill()
                    flood.wait(30)
                time.sleep(1)
        finally:
            process.terminate()
            process.wait(30)
    for name in ("idle", "reopening"):
        result[f"ratio_{name}_p50"] = round(result[name]["p50_ms"] / result["none"]["p50_ms"], 2)
        result[f"ratio_{name}_max"] = round(result[name]["max_ms"] / result["none"]["max_ms"], 2)
    result["within_1s"] = all(result[name]["max_ms"] < 1000 and set(result[name]["statuses"]) == {"200"}
                              for name in ("idle", "reopening"))
    print(json.dumps(result, indent=2))
    if holder is not None:
        holder.cleanup()


def start_serve_with_token(manifest: Path, layout: Layout, stub_url: str):
    """``serve_latency.start_serve`` drops BASTION_* from the environment; put the token back for this run."""
    from serve import serve_latency

    original = serve_latency.subprocess.Popen

    def popen(argv, **kwargs):
        kwargs["env"] = {**kwargs.get("env", {}), "BASTION_SERVE_TOKEN": TOKEN}
        return original(argv, **kwargs)

    serve_latency.subprocess.Popen = popen
    try:
        return start_serve(manifest, layout, stub_url)
    finally:
        serve_latency.subprocess.Popen = original


if __name__ == "__main__":
    main()
