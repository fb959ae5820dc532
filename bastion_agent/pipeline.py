"""The stages in order, and ``sweep``, which runs them one after another.

Each stage is a function ``(manifest, layout) -> summary dict`` that reads
only what the stage before it wrote and writes its own ``STAGE.summary.json``.
"""

from __future__ import annotations

import os

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


def run_sweep(manifest, layout: Layout) -> dict[str, dict]:
    """Run every stage in order; the first failure propagates and stops the sweep.

    Publish runs last when the manifest has a ``[publish]`` table and
    ``BASTION_PUBLISH_DSN`` is set (a bastion that does not publish never needs psycopg).
    """
    from . import legacy_ids

    with legacy_ids.once():  # an old-id folder is said once, not by every stage that rebuilds
        summaries = {name: stage(manifest, layout) for name, stage in STAGES.items()}
    if getattr(manifest, "publish_bastion", None) and os.environ.get("BASTION_PUBLISH_DSN", "").strip():
        from . import publish

        summaries["publish"] = publish.run(manifest, layout)
    return summaries
