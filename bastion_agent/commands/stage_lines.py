"""One summary line per stage, for people: what it read, skipped, found, embedded, and how long.

A stage's summary (``STAGE.summary.json``) holds counts for scripts; the CLI
prints ``summary_line(stage, summary)`` on stderr when the stage ends, so a
sweep run from a script or cron leaves a readable trace, and a terminal shows
more than the last progress line. Counts and settings only, never a
document's text or a finding; the one exception is the files extract or
sanitize skipped, named by their sanitized paths (``sanitizing.skipped``) so
the operator learns which file cost what. A stage this module does not know (a newer one)
gets a generic line of its whole-number counts.
"""

from __future__ import annotations

from bastion_agent.sanitizing import skipped

TOP_RULES = 3  # how many redaction rules the sanitize line names


def summary_line(stage: str, summary: dict, seconds: float | None = None) -> str:
    """``STAGE: ...`` for ``summary``; ``seconds`` when the summary does not say how long."""
    seconds = summary.get("seconds", seconds)
    body = _LINES.get(stage, _generic)(summary)
    return f"{stage}: {body}" + (f" in {_duration(seconds)}" if isinstance(seconds, (int, float)) else "")


def sweep_line(seconds: float, could_not_read: int = 0) -> str:
    """The sweep's last line; it says so when files could not be read or sanitized (the sweep went on without them)."""
    if could_not_read:
        return (f"sweep: done, {could_not_read} file(s) skipped because they could not be read or sanitized "
                f"(listed above; every other file is searchable) in {_duration(seconds)}")
    return f"sweep: done in {_duration(seconds)}"


def _extract(summary: dict) -> str:
    kinds = summary.get("by_kind", {})
    read = ", ".join(f"{kind} {tally.get('extracted', 0)}" for kind, tally in kinds.items() if tally.get("extracted"))
    reasons = summary.get("skipped_by_reason", {})
    reasons_text = ", ".join(f"{reason} {count}" for reason, count in sorted(reasons.items(), key=lambda item: -item[1]))
    text = f"{summary.get('extracted', 0)} of {summary.get('files', 0)} files read" + (f" ({read})" if read else "")
    text += f", {summary.get('skipped', 0)} skipped" + (f" ({reasons_text})" if reasons_text else "")
    return text + skipped.line_part(summary)  # no bytes and no contents: figures measured from raw bytes stay in extract/ (layout.write_figures)


def _sanitize(summary: dict) -> str:
    rules = summary.get("findings_by_rule", {})
    top = sorted(((count, rule) for rule, count in rules.items() if count), key=lambda item: (-item[0], item[1]))
    named = ", ".join(f"{rule} {count}" for count, rule in top[:TOP_RULES])
    if len(top) > TOP_RULES:
        named += f", {len(top) - TOP_RULES} more rules"
    # Every count is of files (each extracted path) or of sanitized documents, never of distinct raw
    # contents: files that are equal once sanitized are one document, so there may be fewer documents.
    files = summary.get("files", summary.get("documents", 0))
    text = f"{summary.get('findings', 0)} findings redacted in {summary.get('files_changed', 0)} of " \
           f"{files} files ({summary.get('documents', 0)} documents)"
    text += f" ({named})" if named else ""
    if summary.get("skipped"):
        text += f", {summary['skipped']} skipped" + skipped.line_part(summary)
    return text


def _chunk(summary: dict) -> str:
    return (f"{summary.get('chunks', 0)} windows of up to {summary.get('size_tokens', '?')} tokens "
            f"from {summary.get('documents', 0)} documents")


def _embed(summary: dict) -> str:
    windows = summary.get("chunks", 0)
    text = f"{windows} windows: {summary.get('embedded', 0)} embedded, {summary.get('reused', 0)} reused"
    if summary.get("failed"):
        text += f", {summary['failed']} failed"
    if summary.get("truncated"):  # cut by the server to its context (window_fit)
        text += f", {summary['truncated']} truncated ({summary.get('tokens_lost', 0)} tokens lost)"
    if summary.get("probed") is False:
        return text + " (nothing to embed: the model server was not probed)"
    seconds = summary.get("seconds") or 0
    rate = f"{summary['embedded'] / seconds:.1f} windows/s, " if seconds and summary.get("embedded") else ""
    if summary.get("embedded") and summary.get("batch_settled"):
        fixed = " (fixed)" if summary.get("batch_tuning") == "fixed" else ""
        rate += f"batch {summary['batch_settled']}{fixed}, {summary.get('concurrency_settled', 1)} in flight, "
    return text + f" ({rate}{summary.get('model', '?')} via {summary.get('api', '?')}, {summary.get('dim', '?')} dims)"


def _generic(summary: dict) -> str:
    counts = [f"{key} {value}" for key, value in summary.items()
              if isinstance(value, int) and not isinstance(value, bool) and key != "seconds"]
    return ", ".join(counts) or "done"


_LINES = {"extract": _extract, "sanitize": _sanitize, "chunk": _chunk, "embed": _embed}


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds + 0.5), 60)
    return f"{minutes} min {rest:02d} s"
