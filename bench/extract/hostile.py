"""Hostile files cost one file each: extract + sanitize of real files, with and without 20 hostile ones.

Copies up to N real text files (``/usr/share/common-licenses``,
``/usr/share/doc``, ``../shared/data/ir``) into a temporary folder, sweeps
it (extract + sanitize, each stage in a fresh process) and measures wall
time and peak RSS of the stage and its workers (``RUSAGE_CHILDREN``); then
adds 20 hostile files (decompression bombs and the like) and sweeps again. Also compares
extract with one worker against one per core on the real folder.

Prints JSON; the figures that matter are ratios against the clean run
measured in the same process.

    python bench/extract/hostile.py [--files 1000]
"""

from __future__ import annotations

import argparse
import io
import zipfile
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bastion_agent.core.budget import DEFAULT_MEMORY_MB, DEFAULT_SECONDS  # noqa: E402
from bastion_agent.testing.hostile_files import eml_header_bomb, xlsx_shared_string_bomb  # noqa: E402

SOURCES = [Path("/usr/share/common-licenses"), Path("/usr/share/doc"),
           Path(os.environ.get("BASTION_SHARED_DATA") or ROOT.parent / "shared" / "data") / "ir"]
TEXT_SUFFIXES = {"", ".txt", ".md", ".html", ".htm", ".json", ".csv", ".xml", ".rst"}


def real_files(limit: int) -> list[Path]:
    found: list[Path] = []
    for source in SOURCES:
        if not source.is_dir():
            continue
        for path in sorted(source.rglob("*")):
            if len(found) >= limit:
                return found
            if path.is_file() and not path.is_symlink() and path.suffix.lower() in TEXT_SUFFIXES \
                    and 200 <= path.stat().st_size <= 2_000_000:
                found.append(path)
    return found


def hostile_files() -> dict[str, bytes]:
    """20 hostile files: bombs and quadratic inputs, each a few hundred KB at most."""
    files = {}
    for n in range(5):  # distinct bytes (a zip comment), else five paths would be one document read once
        buffer = io.BytesIO(xlsx_shared_string_bomb())
        with zipfile.ZipFile(buffer, "a") as archive:
            archive.comment = f"variant {n}".encode()
        files[f"hostile/bomb{n}.xlsx"] = buffer.getvalue()
    for n in range(5):
        files[f"hostile/subject{n}.eml"] = eml_header_bomb() + f"\r\nvariant {n}\r\n".encode()
    for n in range(5):
        files[f"hostile/ends{n}.html"] = b"<p>x</p>" + b"</" * (500_000 + n)
    for n in range(5):
        files[f"hostile/decls{n}.html"] = b"<p>x</p>" + b"<!" * (500_000 + n)
    return files


def stage(manifest: Path, out: Path, name: str) -> dict:
    """Run one stage in a child process; its wall time and the peak RSS of it and its workers.

    A small wrapper process runs the stage and reports ``RUSAGE_CHILDREN``:
    the largest RSS among the stage and the workers it waited for.
    """
    wrapper = ("import resource, subprocess, sys; "
               "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-c", wrapper, sys.executable, "-m", "bastion_agent", name, str(manifest),
                             "--out", str(out)], check=True, cwd=ROOT, capture_output=True, text=True)
    return {"seconds": round(time.monotonic() - start, 2), "peak_rss_mb": round(int(result.stdout.split()[-1]) / 1024, 1)}


def sweep(folder: Path, label: str) -> dict:
    manifest = folder / "manifest.toml"
    out = folder / f"out-{label}"
    figures = {}
    for name in ("extract", "sanitize"):
        figures[name] = stage(manifest, out, name)
    summary = json.loads((out / "extract.summary.json").read_text())
    figures["extracted"] = summary["extracted"]
    figures["skipped_by_reason"] = summary["skipped_by_reason"]
    return figures


def extract_speedup(folder: Path) -> dict:
    """Extract with one worker, then one per core, in this process (fresh output folders)."""
    from bastion_agent.extracting import extract
    from bastion_agent.config import manifest as manifest_module
    from bastion_agent.core.layout import Layout

    manifest = manifest_module.load(folder / "manifest.toml")
    times = {}
    for workers in (1, os.cpu_count() or 1):
        out = folder / f"out-workers-{workers}"
        start = time.monotonic()
        extract.run(manifest, Layout(out), workers=workers)
        times[workers] = time.monotonic() - start
        shutil.rmtree(out)
    serial, parallel = times[1], times[max(times)]
    return {"workers": max(times), "serial_seconds": round(serial, 2), "parallel_seconds": round(parallel, 2),
            "speedup": round(serial / parallel, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bastion-hostile-bench-") as holder:
        clean, dirty = Path(holder) / "clean", Path(holder) / "dirty"
        files = real_files(args.files)
        for folder in (clean, dirty):
            docs = folder / "docs"
            for n, path in enumerate(files):
                target = docs / f"{n // 100:02d}" / f"{n:04d}-{path.name}"
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
            (folder / "manifest.toml").write_text(
                '[source]\nroot = "docs"\n\n[embed]\nmodel = "stub-model"\ndim = 64\n\n'
                "[embed.chunk]\nsize_tokens = 64\noverlap_tokens = 8\n", encoding="utf-8")
        for name, data in hostile_files().items():
            (dirty / "docs" / name).parent.mkdir(parents=True, exist_ok=True)
            (dirty / "docs" / name).write_bytes(data)
        speedup = extract_speedup(clean)
        baseline = sweep(clean, "clean")
        hostile = sweep(dirty, "hostile")
    added = {name: round(hostile[name]["seconds"] - baseline[name]["seconds"], 2) for name in ("extract", "sanitize")}
    print(json.dumps({
        "real_files": len(files),
        "hostile_files": len(hostile_files()),
        "budget": {"seconds_per_file": DEFAULT_SECONDS, "memory_mb_per_worker": DEFAULT_MEMORY_MB},
        "clean": baseline,
        "with_hostile": hostile,
        "seconds_added_by_hostile": added,
        "seconds_added_per_hostile_file": {k: round(v / 20, 3) for k, v in added.items()},
        "peak_rss_added_mb": {name: round(hostile[name]["peak_rss_mb"] - baseline[name]["peak_rss_mb"], 1)
                              for name in ("extract", "sanitize")},
        "time_ratio": {name: round(hostile[name]["seconds"] / max(baseline[name]["seconds"], 1e-9), 2)
                       for name in ("extract", "sanitize")},
        "extract_parallel": speedup,
    }, indent=2))


if __name__ == "__main__":
    main()
