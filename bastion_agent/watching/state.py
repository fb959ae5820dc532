"""The last cycle, as ``status`` shows it: ``OUT/watch.state.json``.

Written after every cycle of ``watch`` (and read by ``status``): when it ran,
what changed (counts), which files were skipped and why (sanitized paths,
from the stage summaries), how many windows were embedded, and, while the
model server or the central database fails, since when and the last error.
Counts and sanitized paths only: no raw path, text or hash of either.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from bastion_agent.core.layout import write_json

STATE_FILE = "watch.state.json"


def state_path(out: Path) -> Path:
    return Path(out) / STATE_FILE


def iso(wall: float) -> str:
    """A wall-clock time as ISO 8601 UTC, to the second."""
    return datetime.fromtimestamp(wall, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Cycle:
    """One cycle's outcome: what changed, what it skipped, what it embedded, how long it took."""

    ended: str
    seconds: float
    added: int = 0
    changed: int = 0
    renamed: int = 0
    removed: int = 0
    skipped: int = 0
    skipped_files: list = field(default_factory=list)
    embedded: int = 0
    windows: int = 0
    outcome: str = "done"  # done | done, with skipped files | embed failed, will retry | publish failed, will retry
    error: str | None = None


@dataclass
class WatchState:
    """What ``status`` reads: the last cycle, how many ran, and the failure still unresolved (since when)."""

    cycles: int = 0
    last_cycle: Cycle | None = None
    failing_since: str | None = None
    last_error: str | None = None

    def save(self, out: Path) -> None:
        write_json(state_path(out), asdict(self))


def load_state(out: Path) -> WatchState | None:
    """The saved state, or None when no watcher has finished a cycle here (or the file is unreadable)."""
    try:
        data = json.loads(state_path(out).read_text(encoding="utf-8"))
        cycle = data.get("last_cycle")
        return WatchState(cycles=int(data.get("cycles", 0)),
                          last_cycle=Cycle(**cycle) if isinstance(cycle, dict) else None,
                          failing_since=data.get("failing_since"), last_error=data.get("last_error"))
    except (OSError, ValueError, TypeError, AttributeError):
        return None
