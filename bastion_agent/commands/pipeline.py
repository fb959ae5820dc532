"""The stages in order, and ``sweep``, which runs them one after another.

Each stage is a function ``(manifest, layout) -> summary dict`` that reads
only what the stage before it wrote and writes its own ``STAGE.summary.json``.
"""

from __future__ import annotations

import os
import time
from typing import Callable

from bastion_agent.core.layout import Layout, remove_stale_temps


def _extract(manifest, layout: Layout) -> dict:
    from bastion_agent.extracting import extract

    return extract.run(manifest, layout)


def _sanitize(manifest, layout: Layout) -> dict:
    from bastion_agent.sanitizing import sanitize

    return sanitize.run(manifest, layout)


def _chunk(manifest, layout: Layout) -> dict:
    from bastion_agent.chunking import chunker

    remove_stale_temps(layout.root, ("chunks.jsonl", "chunk.summary.json"))  # left by a killed run

    return chunker.run_chunk(manifest, layout)


def _embed(manifest, layout: Layout) -> dict:
    from bastion_agent.embedding import embed_stage

    remove_stale_temps(layout.root, ("embed.summary.json",))

    return embed_stage.run_embed(manifest, layout)


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
    so a long sweep says what it has done so far). Publish runs last when the manifest has
    a ``[publish]`` table and ``BASTION_PUBLISH_DSN`` is set (a bastion that does not
    publish never needs psycopg).
    """
    from bastion_agent.core import legacy_ids

    summaries = {}
    with legacy_ids.once():  # an old-id folder is said once, not by every stage that rebuilds
        for name in STAGES:
            summaries[name] = run_timed(name, manifest, layout)
            if on_stage is not None:
                on_stage(name, summaries[name])
    if getattr(manifest, "publish_bastion", None) and os.environ.get("BASTION_PUBLISH_DSN", "").strip():
        from bastion_agent.publishing import publish

        started = time.monotonic()
        summaries["publish"] = publish.run(manifest, layout)
        summaries["publish"].setdefault("seconds", round(time.monotonic() - started, 3))
        if on_stage is not None:
            on_stage("publish", summaries["publish"])
    return summaries
