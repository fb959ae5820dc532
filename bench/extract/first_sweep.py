"""A first sweep of a real folder with the embedded model: seconds per 100 files and per 1,000 windows.

    python3 bench/extract/first_sweep.py [--files 100] [--load 2]

The folder is ``--files`` abstracts of the shared Cranfield collection
(real prose, copied into a temporary folder, never into the project). The
sweep runs twice in one process, against the embedded model server
(``model-server``, extra ``model``) and against the loopback stub (the
agent's own cost, the baseline of the same run), first on a quiet machine,
then while ``--load`` busy processes keep the cores occupied. It prints
JSON: seconds, files and windows, per 100 files and per 1,000 windows, and
each figure as a ratio to the quiet stub sweep.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bastion_agent.commands.demo import BackgroundModelServer  # noqa: E402
from bastion_agent.commands.pipeline import STAGES  # noqa: E402
from bastion_agent.config import manifest as manifest_module  # noqa: E402
from bastion_agent.core.layout import Layout  # noqa: E402
from bastion_agent.testing.stub_server import StubServer  # noqa: E402

SHARED = Path(os.environ.get("BASTION_SHARED_DATA", REPO.parent / "shared" / "data"))
MODEL, DIM = "multilingual-e5-small", 384


def copy_files(count: int, into: Path) -> None:
    into.mkdir()
    sources = sorted((SHARED / "ir" / "cranfield" / "docs").iterdir())[:count]
    for source in sources:
        shutil.copyfile(source, into / source.name)


def sweep(folder: Path, url: str, model: str, work: Path) -> dict:
    manifest_path = work / "bastion.toml"
    manifest_path.write_text(f'[source]\nroot = "{folder}"\n[embed]\nmodel = "{model}"\ndim = {DIM}\n'
                             f'passage_prefix = "passage: "\nquery_prefix = "query: "\n'
                             "[embed.chunk]\nsize_tokens = 128\noverlap_tokens = 16\n")
    os.environ["EMBED_URL"] = url
    manifest = manifest_module.load(manifest_path)
    layout = Layout(work / f"out-{time.monotonic_ns()}")
    started = time.perf_counter()
    summaries = {name: stage(manifest, layout) for name, stage in STAGES.items()}
    return {"seconds": time.perf_counter() - started, "windows": summaries["chunk"]["chunks"]}


def busy(stop) -> None:
    while not stop.is_set():
        sum(range(10_000))


def measured(folder: Path, work: Path, stub_url: str, model_url: str) -> dict:
    return {"stub": sweep(folder, stub_url, "stub", work), "model": sweep(folder, model_url, MODEL, work)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--load", type=int, default=2, help="busy processes during the loaded run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, StubServer(dim=DIM) as stub, BackgroundModelServer(MODEL) as model:
        work = Path(tmp)
        folder = work / "docs"
        copy_files(args.files, folder)
        quiet = measured(folder, work, stub.url, model.url)
        stop = multiprocessing.Event()
        workers = [multiprocessing.Process(target=busy, args=(stop,)) for _ in range(args.load)]
        for worker in workers:
            worker.start()
        try:
            loaded = measured(folder, work, stub.url, model.url)
        finally:
            stop.set()
            for worker in workers:
                worker.join()
    baseline = quiet["stub"]["seconds"]
    report = {"files": args.files, "windows": quiet["model"]["windows"], "load_processes": args.load}
    for name, run in (("quiet", quiet), ("loaded", loaded)):
        for server, figures in run.items():
            seconds = figures["seconds"]
            report[f"{name}_{server}"] = {
                "seconds": round(seconds, 1),
                "per_100_files": round(seconds * 100 / args.files, 1),
                "per_1000_windows": round(seconds * 1000 / max(1, figures["windows"]), 1),
                "ratio_to_quiet_stub": round(seconds / baseline, 1),
            }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
