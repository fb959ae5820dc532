"""Where one watch cycle's time goes after a one-file change: prints JSON figures.

    python3 bench/watch/watch_cycle.py [--files 100] [--rounds 6] [--profile]

On a folder of ``--files`` Cranfield texts (real prose, read in place from
the shared collections and copied to a temporary folder), swept once, each
round writes one new one-page file and runs one cycle in this process, the
two ways in turn (so that a machine whose load drifts weighs on both alike):

- ``sweep``: the cycle as a plain sweep (what a watch cycle was): every
  file read again, worker processes started for the cycle;
- ``hinted``: the cycle as the watcher runs it now (``SweepHints``): extract
  reads the changed file only, the workers kept from the cycle before, the
  paths sanitize redacted in earlier cycles remembered (``path_memo``).

It prints, for each way, the median seconds of each stage and of the whole
cycle, the files extract read, and the ratio of the two medians; with
``--profile``, the functions where one cycle of each way spent the most
(cumulative seconds). The model server is the loopback stub (a one-page file
is two or three windows).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bastion_agent.commands.pipeline import SweepHints, run_sweep  # noqa: E402
from bastion_agent.config import manifest as manifests  # noqa: E402
from bastion_agent.core.budget import KeptPool, budget_of  # noqa: E402
from bastion_agent.core.layout import Layout, figures_path  # noqa: E402
from bastion_agent.sanitizing import path_memo  # noqa: E402
from bastion_agent.testing.stub_server import StubServer  # noqa: E402

SHARED = Path(os.environ.get("BASTION_SHARED_DATA") or REPO.parent / "shared" / "data")
CRANFIELD = SHARED / "ir" / "cranfield" / "docs"
MANIFEST = ('[source]\nroot = "docs"\n[embed]\nmodel = "stub-model"\ndim = 64\n'
            '[embed.chunk]\nsize_tokens = 128\noverlap_tokens = 16\n')
STAGES = ("extract", "sanitize", "chunk", "embed")


def make_folder(base: Path, files: int) -> Path:
    docs = base / "docs"
    docs.mkdir(parents=True)
    sources = sorted(CRANFIELD.glob("*.txt"), key=lambda p: int(p.stem))
    for number in range(files):
        shutil.copyfile(sources[number % len(sources)], docs / f"{number}.txt")
    (base / "bastion.toml").write_text(MANIFEST, encoding="utf-8")
    return base / "bastion.toml"


def one_cycle(manifest, layout: Layout, hints: SweepHints, profiler: cProfile.Profile | None) -> dict:
    """Seconds of each stage and of the whole cycle, and the files extract read."""
    stamps = {}
    started = last = time.monotonic()

    def ended(name: str, _summary: dict) -> None:
        nonlocal last
        now = time.monotonic()
        stamps[name], last = now - last, now

    if profiler is not None:
        profiler.enable()
    run_sweep(manifest, layout, on_stage=ended, hints=hints)
    if profiler is not None:
        profiler.disable()
    stamps["cycle"] = time.monotonic() - started
    stamps["files_read"] = json.loads(figures_path(layout, "extract").read_text())["files_read"]
    return stamps


def top(profiler: cProfile.Profile, count: int = 15) -> list[str]:
    stats = pstats.Stats(profiler)
    rows = sorted(stats.stats.items(), key=lambda item: item[1][3], reverse=True)
    shown = []
    for (filename, line, name), (_, _, _, cumulative, _) in rows[:count]:
        where = filename.replace(str(REPO) + "/", "")
        shown.append(f"{cumulative:.3f} s  {where}:{line}({name})")
    return shown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=6, help="cycles of each way")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    page = (CRANFIELD / "1.txt").read_text(encoding="utf-8")
    runs: dict[str, list[dict]] = {"sweep": [], "hinted": []}
    profiles: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp, StubServer() as stub, path_memo.remembered():
        os.environ["EMBED_URL"] = stub.url
        manifest_path = make_folder(Path(tmp), args.files)
        manifest = manifests.load(manifest_path)
        layout = Layout.for_manifest(manifest_path, None)
        run_sweep(manifest, layout)
        pool = KeptPool(budget_of(manifest.source))
        try:
            for number in range(2 * args.rounds + 2):
                way = ("sweep", "hinted")[number % 2]
                name = f"new{number}.txt"
                (manifest_path.parent / "docs" / name).write_text(f"zq{number}x {page}", encoding="utf-8")
                hints = SweepHints(pool=pool, reread={name}) if way == "hinted" else SweepHints()
                last = number >= 2 * args.rounds
                profiler = cProfile.Profile() if args.profile and last else None
                plain = mock.patch.object(path_memo, "active", lambda: False) if way == "sweep" else nullcontext()
                with plain:
                    figures = one_cycle(manifest, layout, hints, profiler)
                if profiler is not None:
                    profiles[way] = top(profiler)
                elif number >= 2:  # the first of each way warms the kept pool and the caches
                    runs[way].append(figures)
        finally:
            pool.close()
    result: dict = {"files": args.files, "rounds": args.rounds}
    for way, rows in runs.items():
        result[way] = {key: round(statistics.median(row[key] for row in rows), 3) for key in (*STAGES, "cycle")}
        result[way]["files_read"] = rows[-1]["files_read"]
    result["hinted_over_sweep"] = round(result["hinted"]["cycle"] / result["sweep"]["cycle"], 3)
    if profiles:
        result["profile"] = profiles
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
