"""The command line: argument parsing and the one error boundary.

``main(argv) -> int`` parses, runs one command and turns every
``BastionError`` into one line on stderr, ``PROG COMMAND: message`` (PROG as
invoked: ``bastion-agent`` or ``bastion_agent``),
with the exit status of the error's class (no traceback: the message says
what to do). Tests call ``main`` directly.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Sequence

from bastion_agent import __version__
from bastion_agent.config.arguments import (
    add_manifest_arguments,
    load_manifest_and_layout,
)
from bastion_agent.core.errors import BastionError, ConfigError

EXIT_INTERRUPTED = 130

PIPELINE_STAGES = {
    "extract": "turn each file under source.root into text in the private extract store",
    "sanitize": "remove secrets and personal data; write the sanitized store",
    "chunk": "split sanitized text into overlapping windows (chunks.jsonl)",
    "embed": "embed each window through EMBED_URL into vectors.db",
    "sweep": "extract, sanitize, chunk and embed, stopping at the first failure",
}

DESCRIPTION = """\
Make a folder of sensitive documents searchable by meaning. The manifest names
the folder, the embedding model and its dimension; the model server comes from
the environment (EMBED_URL, EMBED_API, EMBED_BATCH, EMBED_TIMEOUT, EMBED_CONCURRENCY,
EMBED_RETRY_DEADLINE; see docs/embedding.md). Nothing that
has not been sanitized leaves the private extract store."""


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Run one command; return its exit status. ``prog`` is the name messages use (default: as invoked)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    prog = prog or program_name()
    parser = build_parser(argv[0] if argv else None, prog)
    args = parser.parse_args(argv)
    os.umask(0o077)  # every file and SQLite side file we create is private
    try:
        return args.run(args)
    except BastionError as exc:
        print(f"{prog} {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{prog} {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def program_name(argv0: str | None = None) -> str:
    """``bastion-agent`` when run as the console script, else ``bastion_agent`` (``python3 -m``)."""
    name = os.path.basename(sys.argv[0] if argv0 is None else argv0)
    return "bastion-agent" if name.startswith("bastion-agent") else "bastion_agent"


def build_parser(command: str | None = None, prog: str = "bastion_agent") -> argparse.ArgumentParser:
    """The parser; when ``command`` is known, only its own module is imported (a faster start)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{prog} {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, summary in PIPELINE_STAGES.items():
        stage = commands.add_parser(name, help=summary, description=_stage_description(name))
        add_manifest_arguments(stage)
        add_output_arguments(stage, name)
        stage.set_defaults(run=run_stage)
    known = {name for name, _, _ in EXTRA_COMMANDS} | set(PIPELINE_STAGES)
    for name, module_name, summary in EXTRA_COMMANDS:
        sub = commands.add_parser(name, help=summary, description=summary)
        if command in known and command != name:
            continue  # another command runs: its arguments are never parsed
        module = importlib.import_module(f"bastion_agent.{module_name}")
        attr = name.replace("-", "_")
        getattr(module, f"add_{attr}_arguments")(sub)
        sub.set_defaults(run=getattr(module, f"run_{attr}"))
    return parser


# Commands whose module adds its own arguments and runs itself: (name, module,
# help). The module defines ``add_NAME_arguments(parser)`` and
# ``run_NAME(args) -> int`` (NAME with "-" as "_"); keep its top-level imports
# to the standard library so ``--help`` never needs an optional extra.
EXTRA_COMMANDS = [
    ("init", "commands.init_manifest", "write a commented manifest for FOLDER that fits the model server at EMBED_URL"),
    ("search", "commands.search_cli", "answer a query by meaning from vectors.db"),
    ("sign", "commands.signing_cli", "sign a manifest with your SSH key (writes MANIFEST.sig)"),
    ("verify", "commands.signing_cli", "check MANIFEST.sig against BASTION_ALLOWED_SIGNERS; print who signed it"),
    ("serve", "watching.serve_watch", "answer search over HTTP (loopback by default); --watch also keeps the index current as files change"),
    ("publish", "publishing.publish", "send this bastion's sanitized windows and vectors to PostgreSQL (BASTION_PUBLISH_DSN)"),
    ("admin", "publishing.admin", "set up the central PostgreSQL: add-bastion (--own-graph), set-bastion, remove-bastion, add-searcher (--groups: a reader), add-gateway, add-model, migrate (BASTION_ADMIN_DSN)"),
    ("model-server", "model.modelserver", "serve the embedded model (multilingual-e5-small) on loopback, Ollama and OpenAI style"),
    ("demo", "commands.demo", "the main job on the bundled sample: start the embedded model, sweep, search, stop"),
    ("mcp", "serving.mcp_server", "let AI assistants search over the Model Context Protocol (stdio; needs the [mcp] extra)"),
    ("prune", "commands.prune_cli", "erase stale vectors (every model, or --model) from vectors.db and index/; print the counts"),
    ("token", "commands.token_cli", "add, list or revoke the named tokens of serve and mcp --http (BASTION_SERVE_TOKENS)"),
    ("watch", "watching.watch_cli", "keep the index current as files change: one incremental cycle per change, one line each (SIGTERM stops)"),
    ("status", "commands.status_cli", "is this bastion current: last cycle, skipped files and why, windows waiting for vectors, model server, central database, watcher"),
    ("audit", "commands.audit_cli", "summarise the audit log: searches per caller, mode and way in, documents hit most"),
]


def add_output_arguments(parser: argparse.ArgumentParser, stage: str) -> None:
    """``--quiet``, ``--json`` (and extract's ``--report``, ``--files``): what a stage prints when it ends."""
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true",
                       help="print the summary as JSON on stdout" + (" (an object of every stage's summary)" if stage == "sweep" else ""))
    if stage == "extract":
        shown.add_argument("--report", action="store_true", help="print a table of what was read and skipped, by kind and by folder")
        parser.add_argument("--files", action="store_true", help="with --report: also list each skipped file and why (sanitized paths)")
    parser.add_argument("--quiet", action="store_true", help="no summary line or progress on stderr")


def run_stage(args: argparse.Namespace) -> int:
    import json
    import time

    from bastion_agent.commands.pipeline import run_sweep, run_timed
    from bastion_agent.commands.stage_lines import summary_line, sweep_line
    from bastion_agent.core import progress

    if getattr(args, "files", False) and not args.report:
        raise ConfigError("--files lists the skipped files of the report: use it with --report")
    progress.set_quiet(args.quiet)
    loaded, layout = load_manifest_and_layout(args)
    started = time.monotonic()

    def say(name: str, summary: dict) -> None:
        if not args.quiet:
            print(summary_line(name, summary), file=sys.stderr, flush=True)

    status = 0
    if args.command == "sweep":
        from bastion_agent.core.errors import EXIT_DONE_WITH_SKIPPED
        from bastion_agent.sanitizing import skipped

        result = run_sweep(loaded, layout, on_stage=say)
        could_not_read = skipped.attention(result)
        status = EXIT_DONE_WITH_SKIPPED if could_not_read else 0
        if not args.quiet:
            print(sweep_line(time.monotonic() - started, could_not_read), file=sys.stderr, flush=True)
    else:
        result = run_timed(args.command, loaded, layout)
        say(args.command, result)
    if args.json:
        print(json.dumps(result, indent=2))
    if getattr(args, "report", False):
        from bastion_agent.extracting.extract import print_report

        print_report(layout, settings=loaded.sanitize, files=args.files)
    return status


def _stage_description(name: str) -> str:
    return {
        "extract": "Walk source.root (include/exclude globs; links never leave the root) and turn each "
        "file into UTF-8 text in <out>/extract/ (0700), keyed privately by the sha256 of its bytes. Writes "
        "extract/listing.jsonl (every file seen, with its status) and extract.summary.json.",
        "sanitize": "Read only the extract store; replace secrets and personal data with typed "
        "placeholders such as [REDACTED:aws-access-key]; write <out>/sanitized/<doc>.txt (doc: the sha256 "
        "of the sanitized text) and sanitize.summary.json.",
        "chunk": "Read only the sanitized store; write chunks.jsonl (overlapping windows of "
        "embed.chunk.size_tokens tokens with content-addressed ids) and chunk.summary.json.",
        "embed": "Probe the model server named by EMBED_URL (wrong dimension or no answer: stop before "
        "the store is opened), then embed every window that has no vector for the manifest's model "
        "into vectors.db; write embed.summary.json.",
        "sweep": "Run extract, sanitize, chunk and embed in order; stop at the first failing stage. Then "
        "publish, when the manifest has a [publish] table and BASTION_PUBLISH_DSN is set.",
    }[name]


def main_entry() -> None:
    """The ``bastion-agent`` console script."""
    sys.exit(main(prog="bastion-agent"))
