"""``watch MANIFEST``: keep the index current as files change, one line per cycle, until SIGTERM.

Top-level imports stay in the standard library (``--help`` needs no extra);
the loop is ``watcher.py``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from bastion_agent.config.arguments import add_manifest_arguments


def add_watch_arguments(parser: argparse.ArgumentParser) -> None:
    add_manifest_arguments(parser)
    parser.add_argument("--polling", action="store_true",
                        help="look every [watch] poll_seconds instead of using inotify (watchfiles), e.g. on a network share")


def run_watch(args: argparse.Namespace) -> int:
    from bastion_agent.config import manifest
    from bastion_agent.config.arguments import load_manifest_and_layout
    from bastion_agent.core import progress
    from bastion_agent.watching.watcher import Watcher

    progress.set_quiet(True)  # one line per cycle, not the stages' progress
    _, layout = load_manifest_and_layout(args)
    stop = threading.Event()

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    watcher = Watcher(load=lambda: manifest.load(args.manifest, require_signed=args.require_signed),
                      layout=layout, say=say, stop=stop, polling=args.polling)
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set()) if in_main else None
    try:
        status = watcher.run()
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
    say(f"watch: stopped after {watcher.state.cycles} cycle(s)")
    return status
