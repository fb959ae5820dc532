"""Shared by the embed benchmarks: a synthetic sanitized store, chunked, and a stub in its own process.

No real documents: seeded random words, so every run embeds the same windows.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bastion_agent import embed
from bastion_agent.config import manifest as manifest_module  # noqa: E402
from bastion_agent.core.layout import Layout  # noqa: E402
from bastion_agent.testing.testsupport import clean_env, write_manifest, write_sanitized_store  # noqa: E402

WINDOW = 64  # tokens a window
WINDOWS_PER_DOC = 10


def synthetic_store(folder: Path, chunks: int, dim: int, seed: int = 7):
    """A manifest, a layout and ``chunks`` windows of ``WINDOW`` random words, chunked."""
    rng = random.Random(seed)
    vocabulary = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9)))
                  for _ in range(5000)]
    documents = {}
    remaining = chunks
    while remaining > 0:
        windows = min(WINDOWS_PER_DOC, remaining)
        text = " ".join(rng.choice(vocabulary) for _ in range(windows * WINDOW))
        documents[text] = [f"synthetic/doc{len(documents):05d}.txt"]
        remaining -= windows
    manifest_path = write_manifest(folder, model="bench-model", dim=dim, size=WINDOW, overlap=0)
    layout = Layout(folder / "out")
    write_sanitized_store(layout, documents)
    with clean_env():
        manifest = manifest_module.load(manifest_path)
    summary = embed.run_chunk(manifest, layout)
    assert summary["unique_chunks"] == chunks, summary
    return manifest_path, manifest, layout


def window_texts(layout: Layout) -> list[str]:
    """The windows in the order the embed stage sends them (by document, then index; first of a repeat)."""
    rows, _ = embed.current_windows(layout)
    seen, texts = set(), []
    for row in sorted(rows, key=lambda row: (row.doc, row.idx)):
        if row.chunk_id not in seen:
            seen.add(row.chunk_id)
            texts.append(row.text)
    return texts


@contextlib.contextmanager
def stub_process(*args: str):
    """``python3 -m bastion_agent.testing.fault_stub ARGS`` in its own process; yields (url, stats dict filled at exit)."""
    process = subprocess.Popen([sys.executable, "-m", "bastion_agent.testing.fault_stub", *args], cwd=ROOT,
                               stdout=subprocess.PIPE, text=True)
    stats: dict = {}
    try:
        url = process.stdout.readline().strip()
        yield url, stats
    finally:
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=30)
        for line in out.splitlines():
            with contextlib.suppress(ValueError):
                stats.update(json.loads(line))


def temp_folder():
    return tempfile.TemporaryDirectory(prefix="bastion-bench-")
