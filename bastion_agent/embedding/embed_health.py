"""Whether the last embed finished, and if not since when: ``OUT/embed.health.json``.

Search must never be silently stale. When embed fails (the model server
unreachable, refusing, or gone mid-run) or is interrupted, windows already
chunked wait for their vectors; every search answer then says how many of the
caller's windows wait (``SearchIndex.pending``) and, from this file, since
when and why. The file holds the time of the first failure in a row and the
last error's line (no text, no path); a run that leaves nothing missing
removes it.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

from bastion_agent.core.layout import Layout, write_json

HEALTH_FILE = "embed.health.json"
MAX_ERROR_CHARS = 500


def health_path(layout: Layout):
    return layout.root / HEALTH_FILE


def record_failure(layout: Layout, error: str, wall=time.time) -> None:
    """Note that embed did not finish; the first failure of a row keeps its time (``failing_since``)."""
    previous = read_health(layout) or {}
    since = previous.get("failing_since") or datetime.fromtimestamp(wall(), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        write_json(health_path(layout), {"failing_since": since, "error": str(error)[:MAX_ERROR_CHARS]})
    except OSError:
        pass  # the store cannot be written (a full disk): the error itself is what the caller reports


def record_success(layout: Layout) -> None:
    try:
        health_path(layout).unlink()
    except FileNotFoundError:
        pass


def read_health(layout: Layout) -> dict | None:
    """``{"failing_since", "error"}`` while embed has not finished since it last failed; None otherwise."""
    try:
        data = json.loads(health_path(layout).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("failing_since"), str):
        return None
    return {"failing_since": data["failing_since"], "error": str(data.get("error") or "")}
