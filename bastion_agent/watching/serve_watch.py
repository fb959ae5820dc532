"""``serve MANIFEST [--watch [--polling]]``: serve, and with ``--watch`` keep the store current in the same process.

Without ``--watch`` this is ``serving.serve.run_serve`` unchanged. With it, a
``Watcher`` (the loop of ``watch``: same lock, same cycles, same lines on
stderr) runs in a thread beside the HTTP server, and tells the server's
search service when to load the index again, instead of leaving it to guess
from the files:

- once a cycle's windows are chunked, the service loads the index at the
  next commit to ``vectors.db``: embed writes every window of the cycle (and
  the keyword index, by its triggers) in one transaction before it sends
  anything, so keyword search finds them, for every caller as their groups
  allow, while their vectors are made, and ``windows_pending`` counts them;
- when the cycle ends (embed done, failed or interrupted), once more, after
  embed has brought the vector file and the ANN graph up to date, so the
  load finds them current and costs one memory map, not a rebuild.

A cycle that changed nothing leaves ``vectors.db`` alone, and the index is
then not loaded at all (``SearchIndex.is_current``).

It lives in ``watching`` (above ``serving``): the serve command takes the
watcher as a companion (``run_serve(args, companion)``), so the server knows
nothing of watching.
"""

from __future__ import annotations

import argparse
import sys
import threading

from bastion_agent.serving.serve_settings import add_serve_arguments as add_plain_serve_arguments


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    add_plain_serve_arguments(parser)
    parser.add_argument("--watch", action="store_true",
                        help="also keep the index current as files change, as `watch` does (one process; "
                             "one line per cycle on stderr; OUT/watch.lock: one watcher per output folder)")
    parser.add_argument("--polling", action="store_true",
                        help="with --watch: look every [watch] poll_seconds instead of using inotify (watchfiles)")


def run_serve(args: argparse.Namespace) -> int:
    from bastion_agent.core.errors import ConfigError
    from bastion_agent.serving import serve

    if args.polling and not args.watch:
        raise ConfigError("--polling says how --watch looks for changes; add --watch")
    if not args.watch:
        return serve.run_serve(args)
    if args.remote:
        raise ConfigError("--watch keeps this bastion's own store current, --remote answers from the central index: "
                          "use one or the other")
    return serve.run_serve(args, companion=WatchCompanion(args))


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class WatchCompanion:
    """The watcher's thread beside the server: refused at once when another watcher holds the output folder."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.stop = threading.Event()
        self.watcher = None
        self.service = None
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def prepare(self, manifest, layout) -> None:
        """Refuse a second watcher before anything is bound; make an empty store for a folder never swept."""
        from bastion_agent.core import progress
        from bastion_agent.core.layout import claim_out_dir
        from bastion_agent.embedding import vectorstore
        from bastion_agent.watching import lock

        claim_out_dir(layout.root)
        trial = lock.WatchLock(layout.root)  # taken and let go: the watcher's thread holds it for good
        trial.acquire()  # another watcher: its one line (exit 4) before anything is bound
        trial.release()
        progress.set_quiet(True)  # one line per cycle, not the stages' progress
        if not layout.vectors_db.exists():  # serve answers (nothing yet) from the start; the first cycle fills it
            vectorstore.connect(layout.vectors_db, create=True).close()

    def start(self, server) -> None:
        from bastion_agent.config import manifest as manifests
        from bastion_agent.config.arguments import load_manifest_and_layout
        from bastion_agent.watching.watcher import Watcher

        self.service = server.service
        _, layout = load_manifest_and_layout(self.args)
        self.watcher = Watcher(load=lambda: manifests.load(self.args.manifest, require_signed=self.args.require_signed),
                               layout=layout, say=say, stop=self.stop, cycle=self.cycle, polling=self.args.polling)
        self._thread = threading.Thread(target=self._run, args=(server,), name="bastion-serve-watch", daemon=True)
        self._thread.start()

    def _run(self, server) -> None:
        """The watcher until stopped; a failure that stops it (a full disk, a refused manifest) stops serve too."""
        try:
            self.watcher.run()
        except BaseException as exc:  # re-raised by close(), in the main thread: the command's one line and status
            self.error = exc
            server.shutdown()

    def cycle(self, manifest, layout, on_stage, hints=None) -> dict:
        """One sweep cycle, telling the service when to load the index (see the module's docstring).

        It takes the watcher's ``hints`` (``takes_hints``) as ``watch``'s own cycle does: the files
        that changed and the kept worker pool. Without them every cycle of ``serve --watch`` opened
        every file again and started its workers afresh, and a new file's words came a whole-folder
        cycle later than under ``watch``.
        """
        from bastion_agent.watching.watcher import NO_HINTS, sweep_cycle

        self._check_model(manifest)

        def staged(name: str, summary: dict) -> None:
            on_stage(name, summary)
            if name == "chunk":
                self.service.reload_on_next_change()

        try:
            return sweep_cycle(manifest, layout, staged, hints or NO_HINTS)
        finally:
            self.service.reload_now()

    cycle.takes_hints = True

    def _check_model(self, manifest) -> None:
        """A manifest reloaded with another model or dimension: the server still answers with the first, so stop."""
        from bastion_agent.core.errors import ConfigError

        served = self.service.manifest.embed
        if (manifest.embed.vector_key, manifest.embed.dim) != (served.vector_key, served.dim):
            raise ConfigError("the manifest's [embed] model or dim changed while serving: serve answers with the one "
                              "it started with, so it stopped; start serve --watch again")

    def close(self) -> None:
        """Let the current cycle finish, then the line watch ends with; the error that stopped the watcher, if any."""
        self.stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.watcher is not None:
            say(f"watch: stopped after {self.watcher.state.cycles} cycle(s)")
        if self.error is not None:
            raise self.error
