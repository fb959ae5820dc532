"""Sweep a folder stage by stage and print what each stage took, as JSON.

    python3 bench/extract/sweep.py [FOLDER] [--dim 384] [--size 256 --overlap 32]

FOLDER defaults to ../shared/data/ir/cranfield/docs (read in place, never
copied). The model server is the loopback stub (bag of words), so the
figures are the agent's own cost; the model's cost is what your server adds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bastion_agent.config import manifest as manifest_module  # noqa: E402
from bastion_agent.core.layout import Layout  # noqa: E402
from bastion_agent.commands.pipeline import STAGES  # noqa: E402
from bastion_agent.testing.stub_server import StubServer  # noqa: E402

SHARED = Path(os.environ.get("BASTION_SHARED_DATA", REPO.parent / "shared" / "data"))


def folder_size(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", type=Path, default=SHARED / "ir" / "cranfield" / "docs")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--overlap", type=int, default=32)
    args = parser.parse_args()
    files, size = folder_size(args.folder)
    with tempfile.TemporaryDirectory() as tmp, StubServer(dim=args.dim) as stub:
        manifest_path = Path(tmp) / "manifest.toml"
        manifest_path.write_text(
            f'[source]\nroot = "{args.folder.resolve()}"\n[embed]\nmodel = "stub"\ndim = {args.dim}\n'
            f"[embed.chunk]\nsize_tokens = {args.size}\noverlap_tokens = {args.overlap}\n"
        )
        os.environ["EMBED_URL"] = stub.url
        manifest = manifest_module.load(manifest_path)
        layout = Layout(Path(tmp) / "out")
        seconds, summaries = {}, {}
        for name, stage in STAGES.items():
            started = time.perf_counter()
            summaries[name] = stage(manifest, layout)
            seconds[name] = round(time.perf_counter() - started, 3)
    print(json.dumps({
        "folder": str(args.folder),
        "files": files,
        "megabytes": round(size / 1e6, 2),
        "documents": summaries["sanitize"].get("documents"),
        "findings": summaries["sanitize"].get("findings"),
        "chunks": summaries["chunk"]["chunks"],
        "embedded": summaries["embed"]["embedded"],
        "seconds": seconds,
        "seconds_total": round(sum(seconds.values()), 3),
    }, indent=2))


if __name__ == "__main__":
    main()
