"""The stages in order, and ``sweep``, which runs them one after another.

Each stage is a function ``(manifest, layout, hints) -> summary dict`` that
reads only what the stage before it wrote and writes its own
``STAGE.summary.json``. ``hints`` (``SweepHints``) is what a caller that
keeps watching the folder knows ahead of the sweep; the result is the same
with or without them, only cheaper with.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable, Collection

from bastion_agent.core.budget import KeptPool
from bastion_agent.core.layout import Layout, remove_stale_temps


@dataclass(frozen=True)
class SweepHints:
    """What the watcher knows before a cycle, so that the cycle costs what changed.

    ``pool``: worker processes kept between cycles (extract's reading and
    sanitize's scans run in them instead of in processes started for one
    cycle). ``reread``: the files (raw paths from the root, ``/``-joined)
    that may differ from extract's listing, from the watcher's ``stat``
    snapshots; None when the watcher cannot vouch for the rest (its first
    cycle, a manifest loaded again, a cycle that ended before extract did),
    and then every file is read.
    """

    pool: KeptPool | None = None
    reread: Collection[str] | None = None


NO_HINTS = SweepHints()


def _extract(manifest, layout: Layout, hints: SweepHints = NO_HINTS) -> dict:
    from bastion_agent.extracting import extract

    return extract.run(manifest, layout, pool=hints.pool, reread=hints.reread)


def _sanitize(manifest, layout: Layout, hints: SweepHints = NO_HINTS) -> dict:
    from bastion_agent.sanitizing import sanitize

    return sanitize.run(manifest, layout, pool=hints.pool)


def _chunk(manifest, layout: Layout, hints: SweepHints = NO_HINTS) -> dict:
    from bastion_agent.chunking import chunker

    remove_stale_temps(layout.root, ("chunks.jsonl", "chunk.summary.json"))  # left by a killed run

    return chunker.run_chunk(manifest, layout)


def _embed(manifest, layout: Layout, hints: SweepHints = NO_HINTS) -> dict:
    from bastion_agent.embedding import embed_stage

    remove_stale_temps(layout.root, ("embed.summary.json",))

    return embed_stage.run_embed(manifest, layout)


STAGES = {"extract": _extract, "sanitize": _sanitize, "chunk": _chunk, "embed": _embed}


def run_timed(name: str, manifest, layout: Layout, hints: SweepHints = NO_HINTS) -> dict:
    """Run one stage; its summary, with ``seconds`` added when the stage did not time itself."""
    started = time.monotonic()
    summary = STAGES[name](manifest, layout, hints)
    summary.setdefault("seconds", round(time.monotonic() - started, 3))
    return summary


def run_sweep(manifest, layout: Layout, on_stage: Callable[[str, dict], None] | None = None,
              hints: SweepHints = NO_HINTS) -> dict[str, dict]:
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
            summaries[name] = run_timed(name, manifest, layout, hints)
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
