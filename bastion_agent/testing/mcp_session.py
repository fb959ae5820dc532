"""A folder with planted secrets, swept, and an MCP session against it as an assistant would open one.

The MCP tests and the scanned-page tests both drive ``mcp`` over the SDK's
stdio client; the planted secrets are what no answer may carry.
"""

from __future__ import annotations

import json
import sys
import tempfile
import unittest
from pathlib import Path

from bastion_agent.core.layout import Layout
from bastion_agent.commands import search_cli
from bastion_agent.serving import mcp_server
from bastion_agent.testing.testsupport import TempFolder, clean_env, run_cli, write_manifest

try:
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client
except ImportError:  # the [mcp] extra is missing: only the tests that need no SDK run
    anyio = None

NEEDS_SDK = unittest.skipIf(anyio is None, f"the mcp extra is not installed ({mcp_server.INSTALL_HINT})")
ROOT = Path(__file__).resolve().parents[2]  # the folder holding the package: the subprocess's cwd
WAIT_SECONDS = 60.0  # the longest a session may take; a hang fails the test instead of blocking the suite

PLANTED_KEY = "AKIAQ3EGRZ7PLX4WTN5B"
PLANTED_PASSWORD = "Tr0ub4dor&3-horse-battery"
PLANTED_EMAIL = "margaret.hollis@northbarn-farm.co.uk"
PLANTED = (PLANTED_KEY, PLANTED_PASSWORD, PLANTED_EMAIL)

FILES = {
    "notes/roof.txt": "The roof of the north barn leaks when the wind blows from the west. "
    "A carpenter will replace the cedar shingles before the autumn rains, and the hay stays dry.\n",
    "recipes/bread.md": "# Sourdough\n\nMix flour, water and salt with a lively starter; "
    "let the dough rise overnight and bake it in a hot iron pot.\n",
    "ops/deploy.txt": "Deploy notes for the billing service.\n"
    f"aws_access_key_id = {PLANTED_KEY}\npassword = \"{PLANTED_PASSWORD}\"\n"
    f"Questions about the billing deploy go to {PLANTED_EMAIL} before Friday.\n"
    "Restart the workers after the migration and watch the billing queue drain.\n",
}


class SweptFolder(TempFolder):
    """A folder with planted secrets, swept through the CLI against the stub model server."""

    def make_folder(self, files: dict[str, str] = FILES, sweep: bool = True) -> None:
        self.tmp = self.make_tmp()
        self.manifest = write_manifest(self.tmp, size=16, overlap=4)
        self.out = self.tmp / "out"
        self.layout = Layout(self.out)
        self.write_files(files)
        if sweep:
            self.sweep()

    def write_files(self, files: dict[str, str]) -> None:
        for rel, text in files.items():
            path = self.tmp / "docs" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")

    def sweep(self) -> None:
        with clean_env(EMBED_URL=self.stub.url):
            code, _, err = run_cli("sweep", self.manifest, "--out", self.out, "--quiet")
        self.assertEqual((code, err), (0, ""))

    def cli_search(self, query: str, k: int, mode: str) -> list[dict]:
        with clean_env(EMBED_URL=self.stub.url):
            code, out, err = run_cli("search", self.manifest, query, "--out", self.out, "--json", "-k", k, "--mode", mode)
        self.assertEqual((code, err), (0, ""))
        hits = json.loads(out)
        if mode != "keyword":  # the CLI also says how the vector side answered; the MCP hit is the Hit alone
            self.assertTrue(all(set(search_cli.HOW_FIELDS) <= set(hit) for hit in hits))
        return [{key: value for key, value in hit.items() if key not in search_cli.HOW_FIELDS} for hit in hits]

    def serve(self, body, embed_url: str | None = None) -> None:
        """Start ``mcp MANIFEST`` as an assistant would and run ``await body(session)`` against it."""
        errlog = tempfile.TemporaryFile("w+", encoding="utf-8")
        self.addCleanup(errlog.close)
        self.errlog = errlog
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "bastion_agent", "mcp", str(self.manifest), "--out", str(self.out)],
            env={"EMBED_URL": embed_url or self.stub.url},
            cwd=str(ROOT),
        )

        async def session_then_body():
            with anyio.fail_after(WAIT_SECONDS):
                async with stdio_client(params, errlog=errlog) as (read_stream, write_stream):
                    async with ClientSession(read_stream, write_stream) as session:
                        await session.initialize()
                        await body(session)

        anyio.run(session_then_body)

    def server_stderr(self) -> str:
        self.errlog.seek(0)
        return self.errlog.read()

    def assert_nothing_planted(self, *results) -> None:
        """No planted secret in any part of any result: its text blocks or its structured content."""
        for result in results:
            dumped = result.model_dump_json(by_alias=True) + "".join(block.text for block in result.content)
            for secret in PLANTED:
                self.assertNotIn(secret, dumped)

    def assert_tool_error(self, result, *fragments: str) -> None:
        self.assertTrue(result.is_error, result)
        self.assertIsNone(result.structured_content)
        (block,) = result.content
        self.assertNotIn("\n", block.text)  # one line an assistant can read and act on
        for fragment in fragments:
            self.assertIn(fragment, block.text)
