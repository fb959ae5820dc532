"""``extract --report``: what the stage read and skipped, and why, by kind, reason and folder.

Every path it shows is sanitized first (``scanner.sanitize_path``): a
folder or file name can itself be personal data.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import replace

from bastion_agent.core import catalogue
from bastion_agent.core.errors import StoreError
from bastion_agent.core.layout import Layout
from bastion_agent.core.records import ListingRow
from bastion_agent.extracting.walk import STATUS_EXTRACTED, STATUS_SKIPPED
from bastion_agent.sanitizing import scanner


REPORT_MAX_FOLDERS = 40


def print_report(layout: Layout, stream=None, settings=None, files: bool = False) -> None:
    """Print what extract read and skipped, and why: by kind, by reason, by folder (and, with
    ``files``, each skipped file). Every path shown passes through ``scanner.sanitize_path``
    with the manifest's ``settings``: a folder or file name can itself be personal data."""
    stream = stream if stream is not None else sys.stdout
    try:
        rows = catalogue.read_extract_listing(layout.extract_listing)
        summary = json.loads(layout.summary_path("extract").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StoreError(f"no extract listing in {layout.root}: run extract first") from None
    except (OSError, ValueError) as exc:
        raise StoreError(f"cannot read the extract listing in {layout.root}: {exc}") from None
    for line in report_lines(rows, summary, settings, files):
        print(line, file=stream)


def report_lines(rows: list[ListingRow], summary: dict, settings=None, files: bool = False) -> list[str]:
    """The report as lines of text (kept apart from printing so it is easy to test); sanitized paths only."""
    rows = [replace(row, path=scanner.sanitize_path(row.path, settings)) for row in rows]
    lines = [
        f"extract: {summary.get('files', len(rows))} files seen, {summary.get('extracted', 0)} extracted, "
        f"{summary.get('skipped', 0)} skipped; {summary.get('excluded', 0)} excluded by globs",
        "",
        "By kind",
    ]
    kinds = summary.get("by_kind", {})
    lines += _table(
        ["kind", "files", "extracted", "skipped"],
        [[kind, t["files"], t["extracted"], t["skipped"]] for kind, t in kinds.items()],
    )
    reasons = summary.get("skipped_by_reason", {})
    lines += ["", "Skipped, by reason"]
    lines += _table(["reason", "files"], [[reason, count] for reason, count in reasons.items()]) if reasons else ["(nothing skipped)"]
    lines += ["", "By folder"] + _table(["folder", "files", "extracted", "skipped", "skipped because"], _folder_rows(rows))
    if files:
        skipped = [[row.path, row.kind, row.reason or "-"] for row in rows if row.status == STATUS_SKIPPED]
        lines += ["", "Skipped files"]
        lines += _table(["path", "kind", "reason"], sorted(skipped)) if skipped else ["(nothing skipped)"]
    return lines


def _folder_rows(rows: list[ListingRow]) -> list[list]:
    """One line per folder, at the deepest level that fits in REPORT_MAX_FOLDERS lines.

    ``rows`` hold sanitized paths already (``report_lines``), so the folders cut from them are too."""
    depth = max((row.path.count("/") for row in rows), default=0)
    while depth > 0 and len({_folder(row.path, depth) for row in rows}) > REPORT_MAX_FOLDERS:
        depth -= 1
    groups: dict[str, list[ListingRow]] = {}
    for row in rows:
        groups.setdefault(_folder(row.path, depth), []).append(row)
    table = []
    for folder, members in sorted(groups.items()):
        reasons = Counter(row.reason for row in members if row.status == STATUS_SKIPPED)
        why = ", ".join(f"{reason} {count}" for reason, count in sorted(reasons.items(), key=lambda item: (-item[1], item[0])))
        extracted = sum(row.status == STATUS_EXTRACTED for row in members)
        table.append([folder, len(members), extracted, len(members) - extracted, why or "-"])
    return table


def _folder(path: str, depth: int) -> str:
    parts = path.split("/")[:-1][:depth]
    return "/".join(parts) + "/" if parts else "./"


def _table(header: list[str], body: list[list]) -> list[str]:
    cells = [[str(value) for value in row] for row in [header] + body]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]

    def fmt(row):
        return "  ".join(value.ljust(widths[i]) if i == 0 or i == len(row) - 1 else value.rjust(widths[i])
                         for i, value in enumerate(row)).rstrip()

    return [fmt(cells[0]), fmt(["-" * w for w in widths])] + [fmt(row) for row in cells[1:]]
