"""Helpers the test modules share: manifests, a clean environment, hand-made stores."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import socket
import subprocess
import sys
import tempfile
import unittest
from dataclasses import replace
from pathlib import Path
from unittest import mock

from bastion_agent.core import catalogue

from bastion_agent.core.layout import (
    Layout,
    ensure_private_dir,
    write_jsonl,
    write_private,
)
from bastion_agent.core.records import Document, ListingRow

ENV_PREFIXES = ("EMBED_", "BASTION_")
PROJECT = Path(__file__).resolve().parents[2]


def write_manifest(folder: Path, *, model: str = "stub-model", dim: int = 64, size: int = 16,
                   overlap: int = 4, root: str = "docs", extra: str = "", name: str = "manifest.toml") -> Path:
    """A valid TOML manifest in ``folder`` whose source root exists."""
    (folder / root).mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(
        f'[source]\nroot = "{root}"\n\n[embed]\nmodel = "{model}"\ndim = {dim}\n\n'
        f"[embed.chunk]\nsize_tokens = {size}\noverlap_tokens = {overlap}\n{extra}",
        encoding="utf-8",
    )
    return path


@contextlib.contextmanager
def clean_env(**values: str):
    """An environment without stray ``EMBED_*``/``BASTION_*`` variables, plus ``values``."""
    kept = {key: value for key, value in os.environ.items() if not key.startswith(ENV_PREFIXES)}
    kept.update(values)
    with mock.patch.dict(os.environ, kept, clear=True):
        yield


def run_python_limited(code: str, limit: int, timeout: float = 300) -> subprocess.CompletedProcess:
    """``code`` in a fresh Python under an address-space limit of ``limit`` bytes, which its children inherit.

    What the hostile tests use to show that memory stays bounded: an
    allocation past the limit fails in the child, not on the machine. It runs
    from the project's root, in ``clean_env()``.
    """
    limited = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))\n{code}"
    with clean_env():
        return subprocess.run([sys.executable, "-c", limited], cwd=PROJECT, capture_output=True, text=True,
                              timeout=timeout)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sanitize_as_extracted(layout: Layout, manifest: Path, documents: dict[str, str]) -> tuple[int, str, str]:
    """Write ``{path: text}`` into the extract store as extract would (each text one raw file), then run
    ``sanitize`` through the CLI; returns its exit status, stdout and stderr."""
    from bastion_agent.commands import cli

    ensure_private_dir(layout.extract_dir)
    rows = []
    for path, text in documents.items():
        key = sha256_hex("raw bytes of " + text)
        write_private(layout.doc_text_path(layout.extract_dir, key), text)
        rows.append(ListingRow(path, key, len(text), "text", "extracted"))
    catalogue.write_extract_listing(layout.extract_listing, rows)
    stdout, stderr = io.StringIO(), io.StringIO()
    with clean_env(), contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = cli.main(["sanitize", str(manifest), "--out", str(layout.root)])
    return code, stdout.getvalue(), stderr.getvalue()


def write_sanitized_store(layout: Layout, documents: dict[str, list[str]]) -> dict[str, str]:
    """Stand in for extract + sanitize: ``{text: [paths]}`` -> both listings and texts.

    Returns ``{text: doc}``: the doc id is the sha256 of the (sanitized)
    text. Each text stands for one raw file, whose private extract key (here
    the sha256 of "raw " + text) the private map sends to the document.
    """
    ensure_private_dir(layout.extract_dir)
    ensure_private_dir(layout.sanitized_dir)
    ids = {text: sha256_hex(text) for text in documents}
    extract_rows, sanitized_rows, mapped = [], [], []
    for text, paths in documents.items():
        doc, key = ids[text], sha256_hex("raw " + text)
        write_private(layout.doc_text_path(layout.sanitized_dir, doc), text)
        for path in paths:
            extract_rows.append(ListingRow(path, key, len(text.encode()), "text", "extracted"))
        sanitized_rows.append(Document(doc, paths=sorted(paths), kind="text", modified=[None] * len(paths)))
        mapped.append({"key": key, "doc": doc, "sanitizer": "", "findings": {}, "bytes_in": len(text.encode())})
    catalogue.write_extract_listing(layout.extract_listing, sorted(extract_rows, key=lambda row: row.path))
    write_jsonl(layout.extract_dir / "sanitized.jsonl", mapped)
    catalogue.write_documents(layout.sanitized_listing, sanitized_rows)
    return ids


def label_documents(layout: Layout, groups_by_path: dict[str, list[str]]) -> None:
    """Stand in for sanitize's access labels: each listed document gets the union of its paths' groups."""
    catalogue.write_documents(layout.sanitized_listing, [
        replace(document, groups=sorted({name for path in document.paths for name in groups_by_path.get(path, [])}))
        for document in catalogue.read_documents(layout.sanitized_listing)])


def start_mcp_http(case: unittest.TestCase, manifest, out, env: dict, *extra: str, wait: float = 60.0) -> str:
    """``mcp MANIFEST --out OUT --http --port 0`` in a child process: its URL once it listens.

    The process is stopped at the end of ``case``; a server that exits before
    it listens fails the test, and nothing waits longer than ``wait`` seconds.
    """
    import re

    process = subprocess.Popen(
        [sys.executable, "-m", "bastion_agent", "mcp", str(manifest), "--out", str(out), "--http", "--port", "0",
         *extra], cwd=Path(__file__).resolve().parents[2], env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def stop():
        process.terminate()
        process.wait(timeout=wait)
        process.stderr.close()

    case.addCleanup(stop)
    for line in process.stderr:
        found = re.search(r"(http://\S+/mcp) ", line)
        if found:
            return found.group(1)
    case.fail(f"the server stopped before listening (exit {process.wait(timeout=wait)})")


def closed_port_url() -> str:
    """A loopback URL where nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def run_cli(*argv: str) -> tuple[int, str, str]:
    """``cli.main(argv)`` with stdout and stderr captured."""
    from bastion_agent.commands.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(arg) for arg in argv])
    return code, out.getvalue(), err.getvalue()


class TempFolder:
    """Mixin: ``self.tmp`` is a fresh folder removed after the test."""

    def make_tmp(self) -> Path:
        holder = tempfile.TemporaryDirectory()
        self.addCleanup(holder.cleanup)
        return Path(holder.name)


class SanitizedStoreCase(TempFolder, unittest.TestCase):
    """A manifest, an output folder and a sanitized store of ``docs`` (``{text: [paths]}``)."""

    docs: dict[str, list[str]] = {}
    size, overlap = 8, 2

    def setUp(self):
        self.tmp = self.make_tmp()
        self.manifest_path = write_manifest(self.tmp, size=self.size, overlap=self.overlap)
        self.out = self.tmp / "out"
        self.layout = Layout(self.out)
        self.ids = write_sanitized_store(self.layout, self.docs)

    def manifest(self, **changes):
        """The manifest, loaded; ``changes`` rewrite it first (``model=``, ``dim=``...)."""
        from bastion_agent.config import manifest

        if changes:
            write_manifest(self.tmp, **{"size": self.size, "overlap": self.overlap, **changes})
        with clean_env():
            return manifest.load(self.manifest_path)

    def restock(self, docs: dict[str, list[str]]) -> None:
        """Replace the sanitized store by one of ``docs`` (a later sweep)."""
        for path in self.layout.sanitized_dir.iterdir():
            path.unlink()
        self.ids = write_sanitized_store(self.layout, docs)

    def chunk(self):
        from bastion_agent.chunking import chunker

        return chunker.run_chunk(self.manifest(), self.layout)

    def embed_with(self, stub, manifest=None, **env):
        from bastion_agent.embedding import embed_stage

        with clean_env(EMBED_URL=stub.url, **env):
            return embed_stage.run_embed(manifest or self.manifest(), self.layout)


def pdf_file(objects: list[bytes]) -> bytes:
    """A PDF of these numbered objects (object 1 the catalog), with a correct cross-reference table.

    The PDF and OCR tests build their files object by object, so each test
    says exactly what the page holds (a text layer, an image, both).
    """
    import io

    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n%s\nendobj\n" % (number, body))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()
