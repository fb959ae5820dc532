"""``mcp``: the server as an assistant meets it, a subprocess driven by the SDK's own stdio client."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import unittest
import urllib.error
import urllib.request

from bastion_agent import embed
from bastion_agent.serving import mcp_server
from bastion_agent.testing.mcp_session import (
    FILES,
    NEEDS_SDK,
    PLANTED_EMAIL,
    PLANTED_KEY,
    PLANTED_PASSWORD,
    ROOT,
    WAIT_SECONDS,
    SweptFolder,
)
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import (
    TempFolder,
    clean_env,
    closed_port_url,
    run_cli,
    start_mcp_http,
    write_manifest,
)

try:
    import anyio
    import httpx2
    from mcp import ClientSession, MCPError
    from mcp.client.streamable_http import streamable_http_client
except ImportError:  # the [mcp] extra is missing: only the tests that need no SDK run
    anyio = None


@NEEDS_SDK
class SweptFolderTests(SweptFolder, unittest.TestCase):
    def setUp(self):
        self.stub = StubServer().__enter__()
        self.addCleanup(self.stub.__exit__, None, None, None)
        self.make_folder()

    def test_lists_search_and_fetch_with_their_schemas(self):
        async def body(session):
            self.listed = {tool.name: tool for tool in (await session.list_tools()).tools}

        self.serve(body)
        self.assertEqual(sorted(self.listed), ["fetch", "search"])
        search, fetch = self.listed["search"], self.listed["fetch"]
        self.assertEqual(search.input_schema["required"], ["query"])
        self.assertEqual(search.input_schema["properties"]["k"]["maximum"], mcp_server.MAX_K)
        self.assertEqual(search.input_schema["properties"]["mode"]["enum"], ["vector", "keyword", "hybrid"])
        self.assertEqual(search.input_schema["properties"]["mode"]["default"], embed.DEFAULT_MODE)
        self.assertEqual(fetch.input_schema["required"], ["chunk_id"])
        hit = search.output_schema["properties"]["hits"]["items"]
        for field in ("score", "doc", "idx", "chunk_id", "text", "paths", "start", "end"):
            self.assertIn(field, hit["required"])
        self.assertIn("windows", fetch.output_schema["required"])
        for tool in (search, fetch):
            self.assertTrue(tool.annotations.read_only_hint)

    def test_search_answers_what_the_cli_answers_and_no_planted_secret(self):
        queries = ["billing deploy password access key", "who to ask about the billing deploy email",
                   PLANTED_KEY, PLANTED_PASSWORD, PLANTED_EMAIL, "cedar shingles roof"]
        results = {}

        async def body(session):
            for query in queries:
                for mode in ("vector", "keyword", "hybrid"):
                    results[query, mode] = await session.call_tool("search", {"query": query, "k": 5, "mode": mode})
            hits = results["billing deploy password access key", "hybrid"].structured_content["hits"]
            self.fetched = [await session.call_tool("fetch", {"chunk_id": hit["chunk_id"], "neighbours": 2})
                            for hit in hits]

        self.serve(body)
        self.assert_nothing_planted(*results.values(), *self.fetched)
        for (query, mode), result in results.items():
            with self.subTest(query=query, mode=mode):
                self.assertFalse(result.is_error, result.content)
                self.assertEqual(json.loads(result.content[0].text), result.structured_content)
                hits = [{key: value for key, value in hit.items() if key not in ("truncated", "paths_total")}
                        for hit in result.structured_content["hits"]]
                self.assertEqual(hits, self.cli_search(query, 5, mode))
        top = results["cedar shingles roof", "hybrid"].structured_content["hits"][0]
        self.assertEqual(top["paths"], ["notes/roof.txt"])
        deploy = results["billing deploy password access key", "keyword"].structured_content["hits"]
        self.assertTrue(deploy and all(hit["paths"] == ["ops/deploy.txt"] for hit in deploy))
        self.assertTrue(any("[REDACTED:" in hit["text"] for hit in deploy))  # the secrets were there, and replaced

    def test_fetch_reads_the_windows_around_a_hit_as_one_passage(self):
        async def body(session):
            hit = (await session.call_tool("search", {"query": "restart workers migration billing queue",
                                                      "mode": "keyword", "k": 1})).structured_content["hits"][0]
            self.first = await session.call_tool("fetch", {"chunk_id": self.chunk(hit["doc"], 0)})
            self.middle = await session.call_tool("fetch", {"chunk_id": self.chunk(hit["doc"], 2)})
            self.alone = await session.call_tool("fetch", {"chunk_id": self.chunk(hit["doc"], 2).upper(),
                                                           "neighbours": 0})

        self.serve(body)
        self.assert_nothing_planted(self.first, self.middle, self.alone)
        first, middle, alone = (result.structured_content for result in (self.first, self.middle, self.alone))
        self.assertEqual([window["idx"] for window in first["windows"]], [0, 1])  # nothing before the first window
        self.assertEqual([window["idx"] for window in middle["windows"]], [1, 2, 3])
        self.assertEqual([window["idx"] for window in alone["windows"]], [2])
        self.assertEqual(middle["paths"], ["ops/deploy.txt"])
        self.assertEqual(middle["document_windows"], len(self.rows(middle["doc"])))
        sanitized = embed.read_sanitized_text(self.layout, middle["doc"])
        for value in (first, middle, alone):
            self.assertEqual(value["text"], sanitized[value["start"] : value["end"]])  # overlaps once, nothing lost
        self.assertEqual(alone["text"], self.rows(middle["doc"])[2]["text"])

    def chunk(self, doc: str, idx: int) -> str:
        return self.rows(doc)[idx]["chunk_id"]

    def rows(self, doc: str) -> list[dict]:
        from bastion_agent.core.layout import read_jsonl

        rows = [row for row in read_jsonl(self.layout.chunks_path) if row["doc"] == doc]
        text = embed.read_sanitized_text(self.layout, doc)
        return [{**row, "text": text[row["start"] : row["end"]]} for row in sorted(rows, key=lambda row: row["idx"])]

    def test_bad_arguments_are_tool_errors_and_the_server_keeps_serving(self):
        too_long = "roof " * 500
        bad = [
            ("search", {"query": ""}, "query is missing or empty"),
            ("search", {"query": "   \n"}, "query is missing or empty"),
            ("search", {}, "query is missing or empty"),
            ("search", {"query": 42}, "query must be a string"),
            ("search", {"query": too_long}, "longer than 2000 characters"),
            ("search", {"query": "roof", "k": 0}, "k must be a whole number from 1 to 20"),
            ("search", {"query": "roof", "k": 21}, "k must be a whole number from 1 to 20"),
            ("search", {"query": "roof", "k": -3}, "k must be a whole number from 1 to 20"),
            ("search", {"query": "roof", "k": "5"}, "k must be a whole number"),
            ("search", {"query": "roof", "k": True}, "k must be a whole number"),
            ("search", {"query": "roof", "k": 2.5}, "k must be a whole number"),
            ("search", {"query": "roof", "mode": "fuzzy"}, "mode must be one of vector, keyword, hybrid"),
            ("search", {"query": "roof", "mode": ["keyword"]}, "mode must be one of"),
            ("search", {"query": "roof", "limit": 3}, "unknown argument 'limit'; allowed: query, k, mode"),
            ("fetch", {}, "chunk_id must be the 64 hexadecimal characters"),
            ("fetch", {"chunk_id": "abc123"}, "chunk_id must be the 64 hexadecimal characters"),
            ("fetch", {"chunk_id": "g" * 64}, "chunk_id must be the 64 hexadecimal characters"),
            ("fetch", {"chunk_id": ["0" * 64]}, "chunk_id must be the 64 hexadecimal characters"),
            ("fetch", {"chunk_id": "../../extract/" + "0" * 50}, "chunk_id must be the 64 hexadecimal characters"),
            ("fetch", {"chunk_id": "0" * 64, "neighbours": 3}, "neighbours must be a whole number from 0 to 2"),
            ("fetch", {"chunk_id": "0" * 64, "neighbours": -1}, "neighbours must be a whole number from 0 to 2"),
            ("fetch", {"chunk_id": "0" * 64}, f"no window {'0' * 64} in this sweep", "search again"),
        ]
        results = []

        async def body(session):
            for name, arguments, *_ in bad:
                results.append(await session.call_tool(name, arguments))
            with self.assertRaises(MCPError) as caught:
                await session.call_tool("delete_everything", {})
            self.unknown_tool = str(caught.exception)
            self.after = await session.call_tool("search", {"query": "cedar shingles", "k": 1})

        self.serve(body)
        for (name, arguments, *fragments), result in zip(bad, results):
            with self.subTest(tool=name, arguments=str(arguments)[:60]):
                self.assert_tool_error(result, *fragments)
        self.assertIn("unknown tool 'delete_everything'; this server has: search, fetch", self.unknown_tool)
        self.assertFalse(self.after.is_error)
        self.assertEqual(self.after.structured_content["hits"][0]["paths"], ["notes/roof.txt"])
        self.assertNotIn("Traceback", self.server_stderr())

    def test_answers_without_the_extract_store(self):
        shutil.rmtree(self.layout.extract_dir)  # nothing the server returns may depend on the raw text

        async def body(session):
            self.found = await session.call_tool("search", {"query": "billing deploy password", "k": 3})
            self.read = await session.call_tool(
                "fetch", {"chunk_id": self.found.structured_content["hits"][0]["chunk_id"]})

        self.serve(body)
        self.assertFalse(self.found.is_error or self.read.is_error)
        self.assertEqual(self.read.structured_content["paths"], ["ops/deploy.txt"])
        self.assertFalse(self.layout.extract_dir.exists())
        self.assert_nothing_planted(self.found, self.read)

    def test_results_are_bounded(self):
        long_word = "shingle" * 1000  # one token: a window far longer than a result may carry
        copies = {f"copies/{n:02d}/roof-copy.txt": FILES["notes/roof.txt"] for n in range(15)}
        self.write_files({"long/word.txt": f"{long_word} lighthouse\n", **copies})
        self.sweep()

        async def body(session):
            self.long = await session.call_tool("search", {"query": "lighthouse", "mode": "keyword", "k": 1})
            self.copies = await session.call_tool("search", {"query": "cedar shingles autumn rains", "k": 20})
            chunk = self.long.structured_content["hits"][0]["chunk_id"]
            self.read = await session.call_tool("fetch", {"chunk_id": chunk, "neighbours": 2})

        self.serve(body)
        (hit,) = self.long.structured_content["hits"]
        self.assertTrue(hit["truncated"])
        self.assertEqual(len(hit["text"]), mcp_server.MAX_TEXT_CHARS)
        self.assertTrue(hit["text"].startswith("shingleshingle") and hit["text"].endswith("…"))
        roof = [hit for hit in self.copies.structured_content["hits"] if "cedar" in hit["text"]][0]
        self.assertEqual((len(roof["paths"]), roof["paths_total"]), (mcp_server.MAX_PATHS, 16))
        self.assertLessEqual(len(self.read.structured_content["text"]), mcp_server.MAX_PASSAGE_CHARS)

    def test_a_new_sweep_is_answered_without_a_restart(self):
        async def body(session):
            before = await session.call_tool("search", {"query": "cedar shingles", "mode": "keyword", "k": 1})
            old_chunk = before.structured_content["hits"][0]["chunk_id"]
            (self.tmp / "docs/notes/roof.txt").write_text("The greenhouse glass cracked in the frost.\n", encoding="utf-8")
            await anyio.to_thread.run_sync(self.sweep)
            self.after = await session.call_tool("search", {"query": "greenhouse glass frost", "mode": "keyword", "k": 1})
            self.gone = await session.call_tool("search", {"query": "cedar shingles", "mode": "keyword", "k": 5})
            self.stale = await session.call_tool("fetch", {"chunk_id": old_chunk})

        self.serve(body)
        self.assertEqual(self.after.structured_content["hits"][0]["paths"], ["notes/roof.txt"])
        self.assertFalse(any("cedar" in hit["text"] for hit in self.gone.structured_content["hits"]))
        self.assert_tool_error(self.stale, "in this sweep")  # a removed window's text is never served again


@NEEDS_SDK
class WithoutAnIndexOrAModelTests(SweptFolder, unittest.TestCase):
    def setUp(self):
        self.stub = StubServer().__enter__()
        self.addCleanup(self.stub.__exit__, None, None, None)

    def test_a_folder_never_swept_says_run_sweep_first_until_it_is_swept(self):
        self.make_folder(sweep=False)

        async def body(session):
            self.listed = [tool.name for tool in (await session.list_tools()).tools]
            self.search = await session.call_tool("search", {"query": "cedar shingles"})
            self.fetch = await session.call_tool("fetch", {"chunk_id": "0" * 64})
            await anyio.to_thread.run_sync(self.sweep)
            self.swept = await session.call_tool("search", {"query": "cedar shingles", "k": 1})

        self.serve(body)
        self.assertEqual(sorted(self.listed), ["fetch", "search"])
        for result in (self.search, self.fetch):
            self.assert_tool_error(result, "has not been swept yet", "sweep")
            self.assertNotIn(str(self.tmp), result.content[0].text)  # no local path handed to the assistant
        self.assertEqual(self.swept.structured_content["hits"][0]["paths"], ["notes/roof.txt"])

    def test_model_server_down_is_a_clear_tool_error_and_keyword_search_still_answers(self):
        self.make_folder()

        async def body(session):
            self.vector = await session.call_tool("search", {"query": "cedar shingles", "mode": "vector"})
            self.keyword = await session.call_tool("search", {"query": "cedar shingles", "mode": "keyword"})

        self.serve(body, embed_url=closed_port_url())
        if self.vector.is_error:
            self.assert_tool_error(self.vector, "the model server is unavailable")
        else:  # the keyword fallback answered, and says so
            self.assertEqual(self.vector.structured_content.get("fallback"), "keyword")
            self.assertTrue(self.vector.structured_content.get("notice"))
        self.assertFalse(self.keyword.is_error)
        self.assertEqual(self.keyword.structured_content["hits"][0]["paths"], ["notes/roof.txt"])


TOKEN = "correct-horse-battery-staple-42"


@NEEDS_SDK
class StreamableHttpTests(SweptFolder, unittest.TestCase):
    """``mcp --http``: the same tools over HTTP, under serve's exposure rules."""

    def setUp(self):
        self.stub = StubServer().__enter__()
        self.addCleanup(self.stub.__exit__, None, None, None)
        self.make_folder()

    def start_http(self, *extra: str, token: str | None = None) -> str:
        """The server's URL, once it listens; stopped at the end of the test."""
        env = {key: value for key, value in os.environ.items() if not key.startswith(("EMBED_", "BASTION_"))}
        env["EMBED_URL"] = self.stub.url
        if token:
            env["BASTION_SERVE_TOKEN"] = token
        return start_mcp_http(self, self.manifest, self.out, env, *extra, wait=WAIT_SECONDS)

    def over_http(self, url: str, body, token: str | None = None) -> None:
        async def session_then_body():
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            with anyio.fail_after(WAIT_SECONDS):
                async with httpx2.AsyncClient(headers=headers) as client:
                    async with streamable_http_client(url, http_client=client) as (read_stream, write_stream, *_):
                        async with ClientSession(read_stream, write_stream) as session:
                            await session.initialize()
                            await body(session)

        anyio.run(session_then_body)

    def raw_post(self, url: str, headers: dict) -> int:
        request = urllib.request.Request(url, data=b"{}", headers={"Content-Type": "application/json",
                                                                   "Accept": "application/json, text/event-stream",
                                                                   **headers})
        try:
            with urllib.request.urlopen(request, timeout=WAIT_SECONDS) as answer:
                return answer.status
        except urllib.error.HTTPError as error:
            return error.code

    def test_loopback_answers_the_tools_and_refuses_a_foreign_host(self):
        url = self.start_http()
        self.assertTrue(url.startswith("http://127.0.0.1:"))

        async def body(session):
            self.listed = sorted(tool.name for tool in (await session.list_tools()).tools)
            self.found = await session.call_tool("search", {"query": "billing deploy password", "k": 3})

        self.over_http(url, body)
        self.assertEqual(self.listed, ["fetch", "search"])
        self.assertFalse(self.found.is_error)
        self.assertEqual(self.found.structured_content["hits"][0]["paths"], ["ops/deploy.txt"])
        self.assert_nothing_planted(self.found)
        # A web page whose name was rebound to 127.0.0.1 sends its own name as Host, and its own Origin.
        self.assertEqual(self.raw_post(url, {"Host": "attacker.example"}), 421)
        self.assertEqual(self.raw_post(url, {"Origin": "http://attacker.example"}), 403)

    def test_with_a_token_every_request_must_carry_it(self):
        url = self.start_http(token=TOKEN)
        self.assertEqual(self.raw_post(url, {}), 401)
        self.assertEqual(self.raw_post(url, {"Authorization": "Bearer " + TOKEN[:-1] + "x"}), 401)

        async def body(session):
            self.found = await session.call_tool("search", {"query": "cedar shingles", "k": 1})

        self.over_http(url, body, token=TOKEN)
        self.assertEqual(self.found.structured_content["hits"][0]["paths"], ["notes/roof.txt"])

    def test_off_loopback_it_refuses_to_start_without_a_token(self):
        with clean_env(EMBED_URL=self.stub.url):
            code, out, err = run_cli("mcp", self.manifest, "--out", self.out, "--http", "--host", "0.0.0.0")
        self.assertEqual((code, out), (2, ""))
        self.assertIn("set BASTION_SERVE_TOKEN", err)
        self.assertEqual(err.count("\n"), 1)

    def test_host_or_port_without_http_is_refused(self):
        code, out, err = run_cli("mcp", self.manifest, "--out", self.out, "--port", "9000")
        self.assertEqual((code, out), (2, ""))
        self.assertEqual(err, "bastion_agent mcp: --host and --port are for --http; without it the server speaks "
                              "on stdin/stdout\n")


class WithoutTheSdkTests(TempFolder, unittest.TestCase):
    """The command line without the [mcp] extra: help works, the server says what to install."""

    def run_without_sdk(self, *argv: str) -> subprocess.CompletedProcess:
        hide = ("import sys; sys.modules['mcp'] = None; from bastion_agent.commands.cli import main; "
                f"sys.exit(main({list(argv)!r}))")
        return subprocess.run([sys.executable, "-c", hide], cwd=ROOT, capture_output=True, text=True, timeout=60)

    def test_help_needs_no_sdk(self):
        result = self.run_without_sdk("mcp", "--help")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("Model Context Protocol", result.stdout)

    def test_starting_without_the_sdk_names_the_extra_in_one_line(self):
        manifest = write_manifest(self.make_tmp())
        result = self.run_without_sdk("mcp", str(manifest))
        self.assertEqual(result.returncode, 2)
        self.assertEqual(result.stdout, "")
        self.assertEqual(result.stderr,
                         f"bastion_agent mcp: the MCP server needs the official MCP SDK: {mcp_server.INSTALL_HINT}\n")


if __name__ == "__main__":
    unittest.main()
