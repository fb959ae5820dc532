"""The files a sweep skipped, by sanitized path and reason: what the operator is told, and what the guard accepts.

A hostile, damaged or too costly file costs the agent that file only: extract
or sanitize skips it, and every later stage goes on with the rest. The
operator still has to learn which file it was and why, so each stage's
summary carries ``skipped_files`` (at most ``SHOWN`` of them, the count in
``skipped``), its stage line names the first few, and ``status`` repeats
them. A path is a name a user chose and may hold personal data: it is shown
only through the sanitizer (the same as the listing's paths), then with its
control characters escaped.

Sanitize also keeps, privately in the extract store, the keys of the texts it
skipped (``SKIPPED_KEYS``): the sanitize-first guard of the later stages
counts them as handled, so a skipped text no longer reads as "sanitize has
not run since extract" and stops every sweep.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable

from bastion_agent.core import layout as store

SHOWN = 100         # skipped files a summary lists (the count covers them all)
IN_LINE = 3         # skipped files a stage line names
SKIPPED_KEYS = "sanitize.skipped.jsonl"  # private: extract keys are hashes of raw bytes

# Reasons that mean a file was meant to be read and could not be: hostile, over its budget,
# damaged or unreadable. A sweep that skipped one ends "done, with skipped files" (its own exit
# status); files that hold no text by nature (empty, binary, a link, an excluded kind, a PDF
# without its extra) are listed too, but a sweep that skipped only those simply succeeded.
_COULD_NOT_READ = ("too_costly", "damaged", "unreadable", "timed out", "too large unpacked")


@dataclass(frozen=True)
class SkippedFile:
    """One skipped file as shown to people: its sanitized path and why it was skipped."""

    path: str
    reason: str


def shown(pairs: Iterable[tuple[str, str]], clean_path: Callable[[str], str]) -> list[dict]:
    """``[{path, reason}]`` for ``(raw path, reason)`` pairs, sanitized, sorted, at most ``SHOWN``."""
    rows = sorted({SkippedFile(clean_path(path), str(reason or "skipped")) for path, reason in pairs},
                  key=lambda row: (row.path, row.reason))
    return [asdict(row) for row in rows[:SHOWN]]


def could_not_read(reason: str) -> bool:
    """Whether a skip reason means the file could not be read or sanitized (``_COULD_NOT_READ``)."""
    return str(reason or "").startswith(_COULD_NOT_READ)


def attention(summaries: dict[str, dict]) -> int:
    """How many files extract and sanitize skipped because they could not read or sanitize them."""
    count = 0
    for stage in ("extract", "sanitize"):
        reasons = (summaries.get(stage) or {}).get("skipped_by_reason") or {}
        count += sum(int(n) for reason, n in reasons.items() if could_not_read(reason) or stage == "sanitize")
    return count


def line_part(summary: dict) -> str:
    """``": a.txt (too_costly: time), b.bin (damaged) and 3 more"`` for a stage line, or ``""``."""
    files = [row for row in summary.get("skipped_files", []) if isinstance(row, dict)]
    if not files:
        return ""
    named = ", ".join(f"{row.get('path', '?')} ({row.get('reason', '?')})" for row in files[:IN_LINE])
    more = int(summary.get("skipped", len(files)) or 0) - min(len(files), IN_LINE)
    return f": {named}" + (f" and {more} more" if more > 0 else "")


def keys_path(layout) -> Path:
    return Path(layout.extract_dir) / SKIPPED_KEYS


def write_keys(layout, skipped: dict[str, str]) -> None:
    """Remember which extract keys sanitize skipped, and why (no file when none was)."""
    path = keys_path(layout)
    if skipped:
        store.write_jsonl(path, [{"key": key, "reason": reason} for key, reason in sorted(skipped.items())])
    elif path.exists():
        path.unlink()


def read_keys(layout) -> set[str]:
    """The extract keys the last sanitize skipped (an unreadable list counts none: the guard stays strict)."""
    try:
        return {row["key"] for row in store.read_jsonl(keys_path(layout)) if isinstance(row.get("key"), str)}
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        return set()
