"""A watcher run in a thread of the test's process: its lines in a queue, what it raised kept for the test."""

from __future__ import annotations

import queue
import threading

WAIT = 120  # seconds a test waits for a cycle line, or for the watcher to end, before it fails (never a measured figure)


def run_watcher(case, watcher, lines: queue.Queue, errors: list) -> threading.Thread:
    """Start ``watcher.run()`` in a daemon thread: what it says goes to ``lines`` (its ``say`` should put
    there) and None once it ends; an exception it raises goes to ``errors``. At the test's cleanup it is
    stopped and joined (up to ``WAIT``)."""

    def run():
        try:
            watcher.run()
        except BaseException as exc:  # handed to the test
            errors.append(exc)
        finally:
            lines.put(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    case.addCleanup(thread.join, WAIT)
    case.addCleanup(watcher.stop.set)
    return thread
