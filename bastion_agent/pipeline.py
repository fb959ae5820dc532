"""The stages in order, and ``sweep``, which runs them one after another.

Each stage is a function ``(manifest, layout) -> summary dict`` that reads
only what the stage before it wrote and writes its own ``STAGE.summary.json``.
"""

from __future__ import annotations

import time
from typing import Callable

from .layout import Layout


def _extract(manifest, layout: Layout) -> dict:
    from . import extract

    return extract.run(manifest, layout)


def _sanitize(manifest, layout: Layout) -> dict:
    from . import sanitize

    return sanitize.run(manifest, layout)


def _chunk(manifest, layout: Layout) -> dict:
    from . import embed

    return embed.run_chunk(manifest, layout)


def _embed(manifest, layout: Layout) -> dict:
    from . import embed

    return embed.run_embed(manifest, layout)


STAGES = {"extract": _extract, "sanitize": _sanitize, "chunk": _chunk, "embed": _embed}


def run_timed(name: str, manifest, layout: Layout) -> dict:
    """Run one stage; its summary, with ``seconds`` added when the stage did not time itself."""
    started = time.monotonic()
    summary = STAGES[name](manifest, layout)
    summary.setdefault("seconds", round(time.monotonic() - started, 3))
    return summary


def run_sweep(manifest, layout: Layout, on_stage: Callable[[str, dict], None] | None = None) -> dict[str, dict]:
    """Run every stage in order; the first failure propagates and stops the sweep.

    ``on_stage(name, summary)`` is called as each stage ends (the CLI prints its line then,
    so a long sweep says what it has done so far).
    """
    summaries = {}
    for name in STAGES:
        summaries[name] = run_timed(name, manifest, layout)
        if on_stage is not None:
            on_stage(name, summaries[name])
    return summaries
