"""Embed stage wall time against a bare serial client over the same stub and batches.

The stub runs in its own process and adds a fixed delay to every answer, so
the server dominates, as a real model does. The bare client sends the same
batches one after another and only parses the answers (no database, no
checks); the stage does everything it does for real (probe, checks, SQLite
commits per batch), with EMBED_CONCURRENCY 1, 2 and 4. Prints JSON.

    python3 bench/embed/embed_throughput.py [--chunks 4096] [--delay 0.03] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared helpers

from _synthetic import clean_env, stub_process, synthetic_store, temp_folder, window_texts  # noqa: E402

from bastion_agent import embed  # noqa: E402
from bastion_agent.embedding.transport import post_json  # noqa: E402
from bastion_agent.embedding.wire_formats import WIRE_FORMATS  # noqa: E402


def bare_serial(url: str, wire_format: str, model: str, texts: list[str], batch: int) -> float:
    """Seconds for one request per batch, in order, parsing each answer: the floor the stage is held to.

    In the encoding the stage's probe settles on (the format's first probe
    encoding: base64 where the format has it), read by the format's own parser.
    """
    fmt = WIRE_FORMATS[wire_format]
    started = time.perf_counter()
    for first in range(0, len(texts), batch):
        part = texts[first : first + batch]
        answer = post_json(url + fmt.embed_path, fmt.request_body(model, part, fmt.probe_encodings[0], False), 300.0)
        vectors = fmt.vectors(answer)
        assert vectors is not None and len(vectors) == len(part)
    return time.perf_counter() - started


def stage(manifest, layout, url: str, wire_format: str, batch: int, concurrency: int) -> float:
    layout.vectors_db.unlink(missing_ok=True)
    for suffix in ("-wal", "-shm"):
        layout.vectors_db.with_name(layout.vectors_db.name + suffix).unlink(missing_ok=True)
    with clean_env(EMBED_URL=url, EMBED_API=wire_format, EMBED_BATCH=str(batch), EMBED_CONCURRENCY=str(concurrency),
                   EMBED_BATCH_FIXED="1"):  # the same batches as the bare client
        started = time.perf_counter()
        summary = embed.run_embed(manifest, layout)
        seconds = time.perf_counter() - started
    assert summary["embedded"] == summary["chunks"] and summary["failed"] == 0, summary
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--delay", type=float, default=0.03, help="seconds the stub adds to every answer")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrency", default="1,2,4")
    args = parser.parse_args()
    levels = [int(level) for level in args.concurrency.split(",")]
    result = {"chunks": args.chunks, "batch": args.batch, "dim": args.dim, "server_delay_s": args.delay,
              "repeat": args.repeat, "figures": "median seconds of --repeat interleaved runs", "load_average_1m": round(__import__("os").getloadavg()[0], 2), "apis": {}}
    with temp_folder() as folder:
        _, manifest, layout = synthetic_store(__import__("pathlib").Path(folder), args.chunks, args.dim)
        texts = window_texts(layout)
        with stub_process("--dim", str(args.dim), "--delay", str(args.delay)) as (url, _):
            for wire_format in WIRE_FORMATS:
                times: dict[str, list[float]] = {"bare": [], **{f"c{level}": [] for level in levels}}
                for _ in range(args.repeat):  # interleaved, so a busy machine weighs on both alike
                    times["bare"].append(bare_serial(url, wire_format, manifest.embed.model, texts, args.batch))
                    for level in levels:
                        times[f"c{level}"].append(stage(manifest, layout, url, wire_format, args.batch, level))
                bare = statistics.median(times["bare"])
                row = {"bare_serial_s": round(bare, 3)}
                for level in levels:
                    seconds = statistics.median(times[f"c{level}"])
                    row[f"stage_c{level}_s"] = round(seconds, 3)
                    row[f"stage_c{level}_over_bare"] = round(seconds / bare, 3)
                result["apis"][wire_format] = row  # "apis": the key earlier figures were recorded under
    result["target"] = "stage_c1_over_bare <= 1.1; c2+ below 1 when the server runs requests in parallel"
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
