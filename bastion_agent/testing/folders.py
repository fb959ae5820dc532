"""Temporary folders for the extract tests: a source root and an output folder, and what leaked out of ``extract/``.

``make_manifest`` gives extract what it reads of a manifest without the
manifest machinery, so a test sets a source option in one argument.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
import unittest
from pathlib import Path
from types import SimpleNamespace

from bastion_agent.config import signing
from bastion_agent.config.manifest import SourceSettings
from bastion_agent.core import catalogue
from bastion_agent.core.layout import Layout, figures_path
from bastion_agent.extracting import extract
from bastion_agent.testing.testsupport import clean_env


def make_manifest(root: Path, **source) -> SimpleNamespace:
    """What extract.run reads of a manifest, without the rest of the manifest machinery."""
    return SimpleNamespace(source=SourceSettings(root=root, **source), signature=signing.SignatureStatus())


class TempCase(unittest.TestCase):
    """A temp folder with ``docs/`` (the source root) and ``out/`` (the output folder)."""

    def setUp(self) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)
        env = clean_env()
        env.__enter__()
        self.addCleanup(env.__exit__, None, None, None)
        self.base = Path(self._tmp.name)
        self.root = self.base / "docs"
        self.root.mkdir()
        self.layout = Layout(self.base / "out")

    def put(self, rel: str, data: bytes | str) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
        return path

    def run_stage(self, layout: Layout | None = None, **source) -> dict:
        with contextlib.redirect_stderr(io.StringIO()):
            return extract.run(make_manifest(self.root, **source), layout or self.layout)

    def listing(self, layout: Layout | None = None) -> dict[str, dict]:
        """The extract listing by path, each row as its line on disk (``ListingRow.listed``)."""
        return {row.path: row.listed() for row in catalogue.read_extract_listing((layout or self.layout).extract_listing)}

    def figures(self, layout: Layout | None = None) -> dict:
        """The private raw-side figures (extract/extract.figures.json)."""
        layout = layout or self.layout
        return json.loads(figures_path(layout, "extract").read_text(encoding="utf-8"))

    def text_of(self, rel: str) -> str:
        row = self.listing()[rel]
        self.assertEqual(row["status"], "extracted", row)
        return Layout.doc_text_path(self.layout.extract_dir, row["key"]).read_text(encoding="utf-8")


def bytes_outside_extract(out: Path) -> bytes:
    """Every byte the agent wrote outside ``extract/`` (SQLite's files included)."""
    blob = b""
    for path in sorted(out.rglob("*")):
        if path.is_file() and "extract" not in path.relative_to(out).parts:
            blob += path.read_bytes()
    return blob
