"""A serve under test: a store built through the real stages, a server on a free port, a client.

Serve's own tests, its hostile-request tests, the flood, token, browser,
access and remote-search tests all talk to the same kind of server; one
definition here keeps them from importing each other's test modules.
"""

from __future__ import annotations

import http.client
import io
import json
import socket
import tempfile
import unittest
import urllib.parse
from pathlib import Path

from bastion_agent import embed
from bastion_agent.config import manifest as manifest_module
from bastion_agent.core.layout import Layout
from bastion_agent.embedding.endpoint import EndpointConfig
from bastion_agent.serving import serve, serve_settings
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import clean_env, write_manifest, write_sanitized_store

DOCS = {
    "The rocket engine burns liquid oxygen and kerosene in its combustion chamber.": ["space/engine.txt"],
    "Sourdough bread needs flour, water, salt and a lively starter culture.": ["kitchen/bread.txt", "copy/bread.txt"],
    "The violin has four strings tuned in fifths and is played with a bow.": ["music/violin.md"],
    "Quarterly budget review: revenue rose, costs fell, the reserve fund grew.": ["finance/budget.txt"],
}
TOKEN = "correct-horse-battery-staple-42"
WAIT_SECONDS = 15.0  # the longest any test waits for something that should happen at once


class Store:
    """A manifest and an output folder with chunks and vectors, built through the real stages."""

    def __init__(self, tmp: Path, stub: StubServer, docs: dict[str, list[str]] = DOCS):
        self.tmp = tmp
        self.manifest_path = write_manifest(tmp, size=8, overlap=2)
        self.layout = Layout(tmp / "out")
        self.stub = stub
        self.ids = write_sanitized_store(self.layout, docs)
        self.sweep()

    def manifest(self):
        with clean_env():
            return manifest_module.load(self.manifest_path)

    def sweep(self, docs: dict[str, list[str]] | None = None) -> None:
        if docs is not None:
            for path in self.layout.sanitized_dir.glob("*.txt"):
                path.unlink()
            self.ids = write_sanitized_store(self.layout, docs)
        manifest = self.manifest()
        with clean_env(EMBED_URL=self.stub.url):
            embed.run_chunk(manifest, self.layout)
            embed.run_embed(manifest, self.layout)


def start(store: Store, testcase: unittest.TestCase, endpoint_url: str | None = None, **settings) -> serve.RunningServer:
    """A serve on a free loopback port for the rest of the test; its log goes to ``testcase.log``."""
    values = {"port": 0, "reload_check_seconds": 3600.0, **settings}
    testcase.log = io.StringIO()
    config = EndpointConfig(url=endpoint_url or store.stub.url)
    server = serve.build_server(store.manifest(), store.layout, serve_settings.ServeSettings(**values), testcase.log, endpoint=config)
    running = serve.RunningServer(server).__enter__()
    testcase.addCleanup(running.__exit__, None, None, None)
    return running


def request(url: str, method: str = "GET", path: str = "/", body=None, headers: dict | None = None):
    """``(status, headers, value)``; ``value`` is parsed JSON for JSON answers, else bytes."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=WAIT_SECONDS)
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode("utf-8")
    try:
        connection.request(method, path, body=body, headers=headers or {})
        answer = connection.getresponse()
        data = answer.read()
        value = json.loads(data) if answer.getheader("Content-Type", "").startswith("application/json") and data else data
        return answer.status, answer, value
    finally:
        connection.close()


def raw_exchange(url: str, payload: bytes) -> bytes:
    """Send ``payload`` as is, then read until the server closes the connection (or, kept alive, until the idle deadline)."""
    parts = urllib.parse.urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=WAIT_SECONDS) as sock:
        sock.sendall(payload)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def status_of(raw: bytes) -> int:
    return int(raw.split(b" ", 2)[1])


class StoreCase(unittest.TestCase):
    """One stub model server and one store for the whole class; a fresh server per test."""

    @classmethod
    def setUpClass(cls):
        cls.holder = tempfile.TemporaryDirectory()
        cls.stub = StubServer().start()
        cls.store = Store(Path(cls.holder.name), cls.stub)

    @classmethod
    def tearDownClass(cls):
        cls.stub.stop()
        cls.holder.cleanup()
