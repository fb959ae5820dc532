"""Time from starting ``mcp MANIFEST`` to its first search answer, against a one-shot ``search --json``.

Sweeps a copy of ``/usr/share/common-licenses`` (real text) against the
loopback stub model server, then, ``--runs`` times each, measures:

- ``mcp_first_answer_s``: spawn the server, ``initialize``, one
  ``tools/call search``: until its answer arrives (what an assistant waits
  for when it calls the tool right after launching the server);
- ``mcp_initialized_s``: spawn until the ``initialize`` answer;
- ``mcp_warm_call_s``: one more ``tools/call search`` on a running server;
- ``cli_search_s`` (the baseline): ``python3 -m bastion_agent search --json``
  for the same query, from start to exit.

The client speaks JSON-RPC over the pipes itself (no SDK on the client side),
so only the server is measured. Prints JSON (medians, and ratios to the
baseline); ``--exchange`` prints one real request and its result instead.

    python3 bench/serve/mcp_startup.py [--runs 7] [--exchange]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bastion_agent.testing.stub_server import StubServer  # noqa: E402

LICENSES = Path("/usr/share/common-licenses")
QUERY = "permission to redistribute modified copies of the software"
PROTOCOL_VERSION = "2025-11-25"


class Session:
    """``mcp MANIFEST`` as a child process, spoken to line by line."""

    def __init__(self, manifest: Path, env: dict):
        self.started = time.perf_counter()
        self.process = subprocess.Popen([sys.executable, "-m", "bastion_agent", "mcp", str(manifest)], cwd=REPO,
                                        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True, encoding="utf-8")
        self.next_id = 1

    def request(self, method: str, params: dict) -> tuple[dict, dict]:
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.next_id += 1
        self.send(message)
        while True:
            answer = json.loads(self.process.stdout.readline())
            if answer.get("id") == message["id"]:
                return message, answer

    def send(self, message: dict) -> None:
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def initialize(self) -> tuple[dict, dict]:
        exchange = self.request("initialize", {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                                               "clientInfo": {"name": "bench", "version": "0"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return exchange

    def search(self, query: str, k: int = 3) -> tuple[dict, dict]:
        return self.request("tools/call", {"name": "search", "arguments": {"query": query, "k": k}})

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


def sweep(folder: Path, env: dict) -> Path:
    shutil.copytree(LICENSES, folder / "docs", symlinks=False)
    manifest = folder / "manifest.toml"
    manifest.write_text('[source]\nroot = "docs"\n\n[embed]\nmodel = "stub-model"\ndim = 64\n\n'
                        "[embed.chunk]\nsize_tokens = 256\noverlap_tokens = 32\n", encoding="utf-8")
    subprocess.run([sys.executable, "-m", "bastion_agent", "sweep", str(manifest)], cwd=REPO, env=env,
                   check=True, capture_output=True)
    return manifest


def first_answer(manifest: Path, env: dict) -> dict:
    session = Session(manifest, env)
    try:
        session.initialize()
        initialized = time.perf_counter() - session.started
        _, answer = session.search(QUERY)
        first = time.perf_counter() - session.started
        assert not answer["result"].get("isError"), answer
        warm_started = time.perf_counter()
        session.search("the warranty is disclaimed")
        warm = time.perf_counter() - warm_started
    finally:
        session.close()
    return {"initialized": initialized, "first": first, "warm": warm}


def cli_search(manifest: Path, env: dict) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bastion_agent", "search", str(manifest), QUERY, "-k", "3", "--json"],
                   cwd=REPO, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def exchange(manifest: Path, env: dict) -> dict:
    session = Session(manifest, env)
    try:
        session.initialize()
        search_request, search_answer = session.search(QUERY, k=2)
        chunk = search_answer["result"]["structuredContent"]["hits"][0]["chunk_id"]
        fetch_request, fetch_answer = session.request("tools/call", {"name": "fetch", "arguments": {"chunk_id": chunk}})
    finally:
        session.close()
    return {"search": {"request": search_request, "result": search_answer},
            "fetch": {"request": fetch_request, "result": fetch_answer}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--exchange", action="store_true", help="print one real search and fetch exchange")
    args = parser.parse_args()
    with StubServer(dim=64) as stub, tempfile.TemporaryDirectory() as tmp:
        env = {key: value for key, value in os.environ.items() if not key.startswith(("EMBED_", "BASTION_"))}
        env["EMBED_URL"] = stub.url
        manifest = sweep(Path(tmp), env)
        if args.exchange:
            print(json.dumps(exchange(manifest, env), indent=2, ensure_ascii=False))
            return
        runs = [first_answer(manifest, env) for _ in range(args.runs)]
        baseline = [cli_search(manifest, env) for _ in range(args.runs)]
    median = {name: statistics.median(run[name] for run in runs) for name in ("initialized", "first", "warm")}
    cli = statistics.median(baseline)
    print(json.dumps({
        "runs": args.runs,
        "corpus": str(LICENSES),
        "mcp_initialized_s": round(median["initialized"], 3),
        "mcp_first_answer_s": round(median["first"], 3),
        "mcp_first_answer_all_s": [round(run["first"], 3) for run in runs],
        "mcp_warm_call_s": round(median["warm"], 4),
        "cli_search_s": round(cli, 3),
        "first_answer_vs_cli_search": round(median["first"] / cli, 2),
        "warm_call_vs_cli_search": round(median["warm"] / cli, 4),
    }, indent=2))


if __name__ == "__main__":
    main()
