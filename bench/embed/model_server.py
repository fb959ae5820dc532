"""Embeddings per second of the embedded model server: 1 core vs 2, one client vs two.

Starts ``model-server`` as a child process (``OMP_NUM_THREADS`` 1, then the
machine's cores), and sends real text windows (the first ``--chars``
characters of Cranfield abstracts, about 250 model tokens each, like a
256-token window of the embed stage) in batches of ``--batch`` through
``POST /api/embed``: once from one client, once from two clients at the same
time. The baseline is one core, one client, in the same run. Prints JSON.

    python3 bench/embed/model_server.py [--texts 64] [--batch 16] [--chars 1200]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bastion_agent.embedding.transport import post_json  # noqa: E402
from bastion_agent.commands.demo import BackgroundModelServer, environment  # noqa: E402

MODEL = "multilingual-e5-small"


def texts(count: int, chars: int) -> list[str]:
    data = Path(os.environ.get("BASTION_SHARED_DATA") or REPO.parent / "shared" / "data")
    docs = sorted((data / "ir" / "cranfield" / "docs").glob("*.txt"), key=lambda path: int(path.stem))
    chosen = [path.read_text(encoding="utf-8")[:chars] for path in docs if path.stat().st_size > chars][:count]
    return ["passage: " + " ".join(text.split()) for text in chosen]


def send(url: str, items: list[str], batch: int) -> None:
    for first in range(0, len(items), batch):
        answer = post_json(url + "/api/embed", {"model": MODEL, "input": items[first : first + batch]}, 600.0)
        assert len(answer["embeddings"]) == len(items[first : first + batch])


def rate(url: str, items: list[str], batch: int, clients: int) -> float:
    """Embeddings per second with ``clients`` clients sharing ``items``."""
    parts = [items[i::clients] for i in range(clients)]
    threads = [threading.Thread(target=send, args=(url, part, batch)) for part in parts]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return round(len(items) / (time.perf_counter() - started), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--chars", type=int, default=1200)
    args = parser.parse_args()
    items = texts(args.texts, args.chars)
    cores = os.cpu_count() or 1
    result = {"texts": len(items), "batch": args.batch, "chars": args.chars, "cpu_count": cores, "embeddings_per_second": {}}
    for threads in sorted({1, cores}):
        with environment(OMP_NUM_THREADS=str(threads)), BackgroundModelServer(MODEL) as server:
            send(server.url, items[:2], args.batch)  # warm up
            for clients in (1, 2):
                result["embeddings_per_second"][f"{threads}_core(s)_{clients}_client(s)"] = rate(server.url, items, args.batch, clients)
    figures = result["embeddings_per_second"]
    baseline = figures["1_core(s)_1_client(s)"]
    result["ratio_vs_1_core_1_client"] = {name: round(value / baseline, 2) for name, value in figures.items()}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
