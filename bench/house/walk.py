"""The walk a sweep takes through the house: the rooms handed the layout, climbs back up, parses per stage.

Runs a real sweep (extract, sanitize, chunk, embed) of real text (SciFact
and Cranfield documents from the shared data, two folders under two access
labels) against the loopback stub model server, traced by
``bastion_agent/testing/house_walk.py``, and prints its ``Walk`` as JSON:

- ``rooms``: the modules handed the layout, in each stage in the order first
  entered, each with its floor (``core/layers.py``: 0 = core);
- ``climbs`` and ``climb_count``: the steps of the layout's walk, in call
  order inside a stage, from the module it was last handed to up to a higher
  floor (target: at most 3 in a sweep);
- ``calls_up``: calls from a lower floor into a higher one (a generator or
  function handed down), by call site;
- ``parses``: how many times each JSON-lines file was parsed in each stage
  (target: each listing once a stage at most).

    BASTION_SHARED_DATA=/work/shared/data python3 bench/house/walk.py [--docs 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bastion_agent.config import manifest as manifests  # noqa: E402
from bastion_agent.core.layout import Layout  # noqa: E402
from bastion_agent.testing.house_walk import traced_sweep  # noqa: E402
from bastion_agent.testing.stub_server import StubServer  # noqa: E402

IR = Path(os.environ.get("BASTION_SHARED_DATA") or ROOT.parent / "shared" / "data") / "ir"


def build_folder(folder: Path, per_collection: int) -> Path:
    root = folder / "docs"
    for name in ("scifact", "cranfield"):
        for path in sorted((IR / name / "docs").glob("*.txt"))[:per_collection]:
            target = root / name / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    manifest = folder / "manifest.toml"
    manifest.write_text('[source]\nroot = "docs"\n\n[embed]\nmodel = "stub"\ndim = 64\n\n'
                        '[access]\ndefault = ["staff"]\n\n[[access.rules]]\npaths = ["cranfield/**"]\n'
                        'groups = ["eng"]\n', encoding="utf-8")
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20, help="documents of each collection (default 20)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="walk-") as work, StubServer(dim=64) as stub:
        manifest_path = build_folder(Path(work), args.docs)
        os.environ["EMBED_URL"] = stub.url
        walk = traced_sweep(manifests.load(manifest_path), Layout(Path(work) / "out"))
    report = walk.report()
    report["files"] = 2 * args.docs
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
