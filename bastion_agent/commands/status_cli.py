"""``status MANIFEST [--json]``: is this bastion current, and if not, why.

One look at the output folder and the services it depends on: the last
cycle of ``watch`` (or the last sweep's stage summaries), the files skipped
and why (sanitized paths, from the summaries), how many windows wait for
vectors and since when embed fails, whether the model server and the
central database answer, and whether a watcher runs (its lock's pid).
Everything it prints is already in the output folder's summaries or counts
over it: no text, and paths only as sanitize wrote them.
"""

from __future__ import annotations

import argparse
import json
import os


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    from bastion_agent.config.arguments import add_manifest_arguments

    add_manifest_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the status as one JSON object")
    parser.add_argument("--offline", action="store_true", help="do not contact the model server or the central database")


def run_status(args: argparse.Namespace) -> int:
    from bastion_agent.config.arguments import load_manifest_and_layout

    manifest, layout = load_manifest_and_layout(args)
    report = gather(manifest, layout, offline=args.offline)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print("\n".join(status_lines(report)))
    return 0


def gather(manifest, layout, offline: bool = False) -> dict:
    """The status as one dict (what ``--json`` prints)."""
    from bastion_agent.embedding import embed_health
    from bastion_agent.watching import lock
    from bastion_agent.watching.state import load_state

    state = load_state(layout.root)
    health = embed_health.read_health(layout) or {}
    pid = lock.holder(layout.root)
    return {
        "watcher": {"running": pid is not None, "pid": pid if pid and pid > 0 else None},
        "last_cycle": _as_dict(state.last_cycle) if state and state.last_cycle else None,
        "cycles": state.cycles if state else 0,
        "last_sweep": _last_sweep(layout),
        "skipped_files": _skipped(layout),
        **_windows(manifest, layout),
        "embed_failing_since": health.get("failing_since"),
        "embed_error": health.get("error"),
        "model_server": "not checked" if offline else _model_server(manifest),
        "central_database": "not checked" if offline else _central(manifest),
    }


def _as_dict(record) -> dict:
    from dataclasses import asdict

    return asdict(record)


def _summary(layout, stage: str) -> dict:
    try:
        return json.loads(layout.summary_path(stage).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _last_sweep(layout) -> dict | None:
    """When each stage last ended (its summary's time), for a bastion swept by hand or by cron."""
    from bastion_agent.watching.state import iso

    ended = {}
    for stage in ("extract", "sanitize", "chunk", "embed", "publish"):
        try:
            ended[stage] = iso(layout.summary_path(stage).stat().st_mtime)
        except OSError:
            continue
    return ended or None


def _skipped(layout) -> list[dict]:
    """The files extract and sanitize skipped, by sanitized path and reason, with the stage that skipped them."""
    rows = []
    for stage in ("extract", "sanitize"):
        for row in _summary(layout, stage).get("skipped_files", []):
            if isinstance(row, dict):
                rows.append({"stage": stage, "path": str(row.get("path", "")), "reason": str(row.get("reason", ""))})
    return rows


def _windows(manifest, layout) -> dict:
    """``windows`` (the local user's, in vectors.db) and ``windows_pending`` (of those, still without a vector)."""
    from bastion_agent.core.errors import BastionError
    from bastion_agent.searching.searcher import SearchIndex

    if not layout.vectors_db.exists():
        return {"windows": 0, "windows_pending": 0}
    groups = manifest.access.local_groups
    try:
        index = SearchIndex.load(manifest, layout, vectors=False)
    except (BastionError, OSError) as exc:
        return {"windows": None, "windows_pending": None, "store_error": str(exc)}
    try:
        windows = index.visible(groups).windows
        return {"windows": windows, "windows_pending": index.pending(groups)}
    finally:
        index.close()


def _model_server(manifest) -> str:
    """``ok``, ``not configured`` or ``unreachable: <the error line>``, from one probe."""
    from bastion_agent.core.errors import BastionError
    from bastion_agent.embedding.client import EmbedClient
    from bastion_agent.embedding.endpoint import EndpointConfig

    if not os.environ.get("EMBED_URL", "").strip():
        return "not configured (EMBED_URL is not set)"
    try:
        EmbedClient(EndpointConfig.from_env(), manifest.embed.model).probe(manifest.embed.dim)
    except BastionError as exc:
        return f"unreachable: {exc}"
    return "ok"


def _central(manifest) -> str:
    """``ok``, ``not configured`` or ``unreachable: <the error line>`` for the central PostgreSQL."""
    from bastion_agent.core.errors import BastionError

    if not getattr(manifest, "publish_bastion", None):
        return "not configured (no [publish] table)"
    if not os.environ.get("BASTION_PUBLISH_DSN", "").strip():
        return "not configured (BASTION_PUBLISH_DSN is not set)"
    try:
        from bastion_agent.publishing import connection

        connection.connect(connection.dsn_from_env()).close()
    except BastionError as exc:
        return f"unreachable: {exc}"
    return "ok"


def status_lines(report: dict) -> list[str]:
    """The status for a person, one fact a line."""
    from bastion_agent.core.progress import for_terminal

    watcher = report["watcher"]
    lines = [f"watcher: running (pid {watcher['pid']})" if watcher["running"] else "watcher: not running"]
    cycle = report["last_cycle"]
    if cycle:
        lines.append(f"last cycle: {cycle['ended']}: {cycle['added']} added, {cycle['changed']} changed, "
                     f"{cycle['renamed']} renamed, {cycle['removed']} removed, {cycle['skipped']} skipped; "
                     f"{cycle['embedded']} windows embedded in {cycle['seconds']:.1f} s ({cycle['outcome']})")
    elif report["last_sweep"]:
        lines.append("last sweep: " + ", ".join(f"{stage} {when}" for stage, when in report["last_sweep"].items()))
    else:
        lines.append("last sweep: never (run sweep or watch)")
    skipped = report["skipped_files"]
    lines.append(f"skipped files: {len(skipped)}" if skipped else "skipped files: none")
    lines.extend(f"  {row['path']} ({row['reason']}; {row['stage']})" for row in skipped)
    lines.append(f"windows: {report['windows']}, {report['windows_pending']} waiting for vectors")
    if report["embed_failing_since"]:
        lines.append(f"embed: failing since {report['embed_failing_since']}: {for_terminal(report['embed_error'] or '')}")
    lines.append(f"model server: {report['model_server']}")
    lines.append(f"central database: {report['central_database']}")
    return lines

