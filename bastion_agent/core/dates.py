"""Dates as every part reads and writes them: a point in time from a user, and a range of them.

A user gives a point as a UTC date (``2026-12-01``), a time
(``2026-12-01T09:00:00Z``) or an age counted back from now (``30m``,
``24h``, ``7d``, ``2w``); ``audit --since`` and the date filters of search
(``--since``/``--before``, the HTTP and MCP parameters of the same names)
read it here, so the forms and the error are the same everywhere. Every
stored time is ISO 8601 in UTC to the second (``…Z``), which orders as
text, so a range is compared without parsing what it filters.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from bastion_agent.core.errors import ConfigError

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")  # a time as ``TIME_FORMAT`` writes it
_AGE = re.compile(r"([0-9]{1,6})([mhdw])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
FORMS = "a UTC date (2026-12-01), a time (2026-12-01T09:00:00Z) or an age (30m, 24h, 7d, 2w)"


def point_in_time(text: str, name: str = "--since", now: datetime | None = None) -> datetime:
    """The moment ``text`` names; a ``ConfigError`` naming ``name`` and the accepted forms otherwise."""
    if not isinstance(text, str):
        raise ConfigError(f"{name} must be {FORMS}")
    stripped = text.strip()
    age = _AGE.fullmatch(stripped)
    if age:
        return (now or datetime.now(timezone.utc)) - timedelta(**{_UNITS[age.group(2)]: int(age.group(1))})
    for pattern in ("%Y-%m-%d", TIME_FORMAT, "%Y-%m-%dT%H:%M:%S"):
        try:
            return datetime.strptime(stripped, pattern).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    raise ConfigError(f"{name} must be {FORMS}; got {text[:40]!r}")


def stamp(moment: datetime) -> str:
    """A moment as stored times are written (ISO 8601, UTC, to the second)."""
    return moment.astimezone(timezone.utc).strftime(TIME_FORMAT)


@dataclass(frozen=True)
class DateRange:
    """Documents modified at ``since`` or later and before ``before`` (each None: unbounded).

    A document whose date is unknown (a store swept by an older agent) is
    outside every range: a filter that asks for dates keeps only what is dated.
    """

    since: str | None = None
    before: str | None = None

    def holds(self, modified: str | None) -> bool:
        if modified is None:
            return False
        return (self.since is None or modified >= self.since) and (self.before is None or modified < self.before)

    def as_dict(self) -> dict:
        return {"since": self.since, "before": self.before}


def date_range(since: str | None, before: str | None, now: datetime | None = None) -> DateRange | None:
    """The range a search's ``since`` and ``before`` ask for; None when neither is given.

    A range that holds no moment (``since`` not before ``before``) is refused:
    it can only be a mistake, and an empty answer would hide it.
    """
    if since is None and before is None:
        return None
    now = now or datetime.now(timezone.utc)
    start = stamp(point_in_time(since, "since", now)) if since is not None else None
    end = stamp(point_in_time(before, "before", now)) if before is not None else None
    if start is not None and end is not None and start >= end:
        raise ConfigError(f"since ({start}) must be earlier than before ({end})")
    return DateRange(start, end)


def latest(times: str | None, count: int, shown=None) -> str | None:
    """The latest of a document's per-path modification times (``documents.modified``, JSON), or None.

    ``shown`` are the positions of the paths a caller is shown (None: all of
    them), so a caller is dated only by the files it may see. A list of
    another length than the paths (a hand edit) dates nothing.
    """
    try:
        listed = json.loads(times or "[]")
    except ValueError:
        return None
    if not isinstance(listed, list) or len(listed) != count:
        return None
    chosen = listed if shown is None else [listed[position] for position in shown]
    return max((when for when in chosen if isinstance(when, str) and STAMP.fullmatch(when)), default=None)
