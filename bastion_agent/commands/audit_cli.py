"""``audit MANIFEST [--since 2026-12-01|24h] [--json]``: who searched what, from the audit log.

Reads ``OUT/audit.jsonl`` and its rotated files (``core/audit.py``) and
prints, for the searches since ``--since``: how many, per caller, per mode,
per way in (cli, serve, mcp), the documents hit most and the first and last
time. A line that is not a record (a crash mid-write, a hand edit) is
counted as unreadable, never fatal.

It also says when rotation dropped records (``audit.jsonl.dropped``): how
many, of which period; a drop of records younger than the manifest's
``[serve] audit_retention_days`` is said on stderr too, since the summary
then misses searches it should hold.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime

from bastion_agent.config.arguments import add_manifest_arguments, load_manifest_and_layout
from bastion_agent.core import audit, dates
from bastion_agent.core.errors import ConfigError
from bastion_agent.core.progress import escape_name

TOP_DOCUMENTS = 10


@dataclass
class AuditSummary:
    searches: int = 0
    unreadable: int = 0
    first: str | None = None
    last: str | None = None
    callers: dict[str, int] = field(default_factory=dict)
    modes: dict[str, int] = field(default_factory=dict)
    via: dict[str, int] = field(default_factory=dict)
    documents: list[dict] = field(default_factory=list)  # [{"doc", "searches"}], most hit first
    dropped: list[dict] = field(default_factory=list)  # rotations that dropped records of this period, oldest first


def add_audit_arguments(parser: argparse.ArgumentParser) -> None:
    add_manifest_arguments(parser)
    parser.add_argument("--since",
                        help=f"only searches from then on: {dates.FORMS}")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.description = ("Summarise the audit log (OUT/audit.jsonl and its rotated files): searches per caller, "
                          "per mode and per way in, the documents hit most, the first and last time.")


def run_audit(args: argparse.Namespace) -> int:
    since = dates.point_in_time(args.since) if args.since is not None else None
    _, layout = load_manifest_and_layout(args)
    if not audit.log_files(layout.audit_log):
        raise ConfigError(f"no audit log in {layout.root} yet: searches are recorded there once they run")
    summary = summarise(audit.read_records(layout.audit_log), since)
    summary.dropped = dropped_since(audit.read_drops(layout.audit_log), since)
    for drop in summary.dropped:
        if drop["within_retention"]:
            print(f"bastion_agent audit: warning: rotation dropped {audit.Drop(**drop).what()} at "
                  f"{drop['time']}; this summary misses them", file=sys.stderr)
    print(json.dumps(asdict(summary), indent=2) if args.json else format_summary(summary))
    return 0


def summarise(records, since: datetime | None = None) -> AuditSummary:
    summary = AuditSummary()
    callers, modes, via, documents = Counter(), Counter(), Counter(), Counter()
    first = last = None
    for record in records:
        when = audit.parse_time(record["time"]) if record is not None else None
        if when is None:
            summary.unreadable += 1
            continue
        if since is not None and when < since:
            continue
        summary.searches += 1
        callers[record["caller"]] += 1
        modes[record["mode"]] += 1
        via[record["via"]] += 1
        documents.update({doc for doc in record["docs"] if isinstance(doc, str)})
        first = when if first is None or when < first else first
        last = when if last is None or when > last else last
    summary.callers, summary.modes, summary.via = dict(callers.most_common()), dict(modes.most_common()), dict(via.most_common())
    summary.documents = [{"doc": doc, "searches": count} for doc, count in documents.most_common(TOP_DOCUMENTS)]
    summary.first = first.strftime(audit.TIME_FORMAT) if first else None
    summary.last = last.strftime(audit.TIME_FORMAT) if last else None
    return summary


def dropped_since(drops, since: datetime | None) -> list[dict]:
    """The drop notes whose records reach into the period (all of them without ``--since``)."""
    kept = []
    for drop in drops:
        if drop is None or not isinstance(drop.records, int) or not isinstance(drop.within_retention, bool):
            continue
        last = audit.parse_time(drop.last) if isinstance(drop.last, str) else None
        if since is None or last is None or last >= since:
            kept.append(asdict(drop))
    return kept


def format_summary(summary: AuditSummary) -> str:
    if not summary.searches:
        lines = ["no searches in this period"]
    else:
        lines = [f"{summary.searches} searches from {summary.first} to {summary.last}"]
        for title, counts in (("by caller", summary.callers), ("by mode", summary.modes), ("by way in", summary.via)):
            lines.append(f"{title}:")
            lines.extend(f"  {count:>7}  {escape_name(name)}" for name, count in counts.items())
        lines.append("documents hit most:")
        lines.extend(f"  {row['searches']:>7}  {escape_name(row['doc'])}" for row in summary.documents)
    if summary.unreadable:
        lines.append(f"{summary.unreadable} unreadable lines skipped")
    if summary.dropped:
        lines.append("dropped by rotation:")
        lines.extend(f"  {escape_name(str(drop['time']))}: {escape_name(audit.Drop(**drop).what())}"
                     for drop in summary.dropped)
    return "\n".join(lines)
