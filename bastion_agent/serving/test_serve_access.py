"""Two named tokens with disjoint groups through serve and MCP: disjoint hits, their own counts, nothing learnt.

The store holds HR's, engineering's and one shared document (labelled as
sanitize would), plus enough filler per group that the ANN index answers
vector search when it is switched on.
"""

from __future__ import annotations

import json
import os
import tempfile
import unittest
import urllib.parse
from pathlib import Path
from unittest import mock

from bastion_agent.commands import token_cli
from bastion_agent.core.errors import BastionError
from bastion_agent.embedding import ann
from bastion_agent.embedding.endpoint import EndpointConfig
from bastion_agent.serving import mcp_server
from bastion_agent.testing.labelled_docs import ENG_DOCS, HR_DOCS, SHARED
from bastion_agent.testing.serve_store import Store, request, start
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import label_documents, start_mcp_http

HR_FILLER = {f"Personnel memo {n}: the salary scale, leave balance and appraisal form of employee {n}.":
             [f"hr/memo-{n}.txt"] for n in range(30)}
ENG_FILLER = {f"Engineering note {n}: the compiler flag, build cache and parser test number {n}.":
              [f"eng/note-{n}.txt"] for n in range(30)}
DOCS = {**HR_DOCS, **ENG_DOCS, **SHARED, **HR_FILLER, **ENG_FILLER}
GROUPS = {path: [paths_group] for text, paths in DOCS.items() for path in paths
          for paths_group in [path.split("/")[0]] if paths_group in ("hr", "eng")}
GROUPS["all/holidays.txt"] = ["eng", "hr"]
MODES = ("vector", "keyword", "hybrid")
QUERIES = ("salary review of Dana Quill pay band appraisal", "compiler review", "review", "office holidays")
WAIT_SECONDS = 60.0


class LabelledStore(Store):
    """serve_store's store, its documents labelled by folder before chunk and embed."""

    def sweep(self, docs=None):
        label_documents(self.layout, GROUPS)
        super().sweep(docs)


def folders(hits: list[dict]) -> set[str]:
    return {path.split("/")[0] for hit in hits for path in hit["paths"]}


class TwoTokensCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.holder = tempfile.TemporaryDirectory()
        cls.stub = StubServer().start()
        cls.store = LabelledStore(Path(cls.holder.name), cls.stub, DOCS)
        cls.tokens_file = Path(cls.holder.name) / "conf" / "tokens.json"
        cls.hr = token_cli.add_token(cls.tokens_file, "hr-portal", ("hr",))
        cls.eng = token_cli.add_token(cls.tokens_file, "eng-wiki", ("eng",))

    @classmethod
    def tearDownClass(cls):
        cls.stub.stop()
        cls.holder.cleanup()


class ServeTests(TwoTokensCase):
    def serve(self, use_ann: bool):
        """serve with the two tokens; with ``use_ann`` the ANN index answers vector search (its threshold lowered)."""
        if not use_ann:
            return start(self.store, self, tokens_file=self.tokens_file)
        if not ann.available():
            self.skipTest("faiss is not installed (the ann extra)")
        patcher = mock.patch.multiple(ann, MIN_ROWS=50, LAZY_ROWS=100_000)
        patcher.start()
        self.addCleanup(patcher.stop)
        server = start(self.store, self, tokens_file=self.tokens_file)
        if server.server.service.index.ann is None:
            self.skipTest("no ANN index on this machine")
        return server

    def search(self, url: str, token: str, query: str, mode: str, k: int = 20) -> dict:
        path = "/search?" + urllib.parse.urlencode({"q": query, "k": k, "mode": mode})
        status, _, answer = request(url, path=path, headers={"Authorization": f"Bearer {token}"})
        self.assertEqual(status, 200, answer)
        return answer

    def test_disjoint_tokens_get_disjoint_hits_in_every_mode_exact_and_ann(self):
        for use_ann in (False, True):
            server = self.serve(use_ann)
            for mode in MODES:
                for query in QUERIES:
                    with self.subTest(ann=use_ann, mode=mode, query=query):
                        hr = self.search(server.url, self.hr, query, mode)["hits"]
                        eng = self.search(server.url, self.eng, query, mode)["hits"]
                        self.assertTrue(folders(hr) <= {"hr", "all"}, folders(hr))
                        self.assertTrue(folders(eng) <= {"eng", "all"}, folders(eng))
                        common = {hit["doc"] for hit in hr} & {hit["doc"] for hit in eng}
                        self.assertLessEqual(common, {self.store.ids[text] for text in SHARED})

    def test_a_query_aimed_at_the_other_group_returns_the_callers_own_k_best(self):
        server = self.serve(False)
        for mode in MODES:
            with self.subTest(mode=mode):
                answer = self.search(server.url, self.eng, "salary review of Dana Quill, and the compiler", mode, k=5)
                self.assertEqual(len(answer["hits"]), 5)
                self.assertTrue(folders(answer["hits"]) <= {"eng", "all"})

    def test_healthz_counts_only_the_callers_windows(self):
        server = self.serve(False)
        index = server.server.service.index
        counts = {}
        for name, token in (("hr", self.hr), ("eng", self.eng)):
            _, _, health = request(server.url, path="/healthz", headers={"Authorization": f"Bearer {token}"})
            counts[name] = health["chunks"]
            self.assertEqual(health["chunks"], index.visible_count(frozenset({name})))
        shared = index.visible_count(frozenset({"hr"})) + index.visible_count(frozenset({"eng"})) - len(index)
        self.assertGreater(shared, 0)  # the holidays document counts for both
        self.assertLess(counts["hr"], len(index))
        self.assertLess(counts["eng"], len(index))
        self.assertNotEqual(counts["hr"], counts["eng"])

    def test_the_audit_log_names_each_token_and_only_its_own_documents(self):
        server = self.serve(False)
        self.search(server.url, self.hr, "review", "hybrid")
        self.search(server.url, self.eng, "review", "hybrid")
        rows = [json.loads(line) for line in self.store.layout.audit_log.read_text(encoding="utf-8").splitlines()]
        from bastion_agent.core import audit

        key = audit.installation_key(self.store.layout)  # the log keeps keyed ids
        hr_docs = {audit.audit_id(key, self.store.ids[text]) for text in {**HR_DOCS, **HR_FILLER, **SHARED}}
        eng_docs = {audit.audit_id(key, self.store.ids[text]) for text in {**ENG_DOCS, **ENG_FILLER, **SHARED}}
        last = {row["caller"]: row for row in rows}
        self.assertTrue(set(last["hr-portal"]["docs"]) <= hr_docs)
        self.assertTrue(set(last["eng-wiki"]["docs"]) <= eng_docs)


class McpToolsTests(TwoTokensCase):
    """The tools in process, as the HTTP layer calls them with each token's caller."""

    def setUp(self):
        from bastion_agent.serving import tokens

        book = tokens.TokenBook(self.tokens_file)
        self.hr_caller = book.caller(f"Bearer {self.hr}")
        self.eng_caller = book.caller(f"Bearer {self.eng}")
        manifest = self.store.manifest()
        self.tools = mcp_server.BastionTools(manifest, self.store.layout, EndpointConfig(url=self.stub.url))

    def fetch_error(self, chunk: str, caller) -> str:
        with self.assertRaises(BastionError) as caught:
            self.tools.fetch({"chunk_id": chunk, "neighbours": 2}, caller)
        return str(caught.exception).replace(chunk, "<id>")

    def test_search_is_the_callers_share(self):
        for mode in MODES:
            with self.subTest(mode=mode):
                hr = self.tools.search({"query": "review", "k": 20, "mode": mode}, self.hr_caller)["hits"]
                eng = self.tools.search({"query": "review", "k": 20, "mode": mode}, self.eng_caller)["hits"]
                self.assertTrue(folders(hr) <= {"hr", "all"})
                self.assertTrue(folders(eng) <= {"eng", "all"})

    def test_fetch_of_another_groups_window_is_answered_as_a_window_that_does_not_exist(self):
        hr_hit = self.tools.search({"query": "salary review Dana Quill", "k": 1, "mode": "keyword"}, self.hr_caller)["hits"][0]
        self.assertEqual(folders([hr_hit]), {"hr"})
        self.assertEqual(self.tools.fetch({"chunk_id": hr_hit["chunk_id"]}, self.hr_caller)["doc"], hr_hit["doc"])
        guessed = self.fetch_error(hr_hit["chunk_id"], self.eng_caller)
        for random_id in ("0" * 64, "f" * 64, os.urandom(32).hex()):
            self.assertEqual(self.fetch_error(random_id, self.eng_caller), guessed)
        self.assertNotIn("hr", guessed.replace("chunk", ""))
        shared = self.tools.search({"query": "office closes on public holidays", "k": 1, "mode": "keyword"},
                                   self.eng_caller)["hits"][0]
        self.assertEqual(self.tools.fetch({"chunk_id": shared["chunk_id"]}, self.hr_caller)["doc"], shared["doc"])


class LocalGroupsTests(unittest.TestCase):
    """The local user (CLI search, stdio MCP, loopback serve without tokens) sees ``[access] local_groups``."""

    def setUp(self):
        holder = tempfile.TemporaryDirectory()
        self.addCleanup(holder.cleanup)
        self.stub = StubServer().start()
        self.addCleanup(self.stub.stop)
        self.store = LabelledStore(Path(holder.name), self.stub, DOCS)
        with open(self.store.manifest_path, "a", encoding="utf-8") as handle:
            handle.write('\n[access]\nlocal_groups = ["eng"]\n')

    def test_cli_search_serve_and_the_mcp_tools_see_only_the_local_groups(self):
        from bastion_agent.testing.testsupport import clean_env, run_cli

        for mode in MODES:
            with self.subTest(mode=mode), clean_env(EMBED_URL=self.stub.url):
                code, out, err = run_cli("search", self.store.manifest_path, "salary review, and the compiler", "-k",
                                         "5", "--mode", mode, "--out", self.store.layout.root, "--json")
                self.assertEqual((code, err), (0, ""))
                self.assertEqual(len(json.loads(out)), 5)
                self.assertTrue(folders(json.loads(out)) <= {"eng", "all"})
        server = start(self.store, self)
        _, _, health = request(server.url, path="/healthz")
        self.assertEqual(health["chunks"], server.server.service.index.visible_count(frozenset({"eng"})))
        _, _, answer = request(server.url, path="/search?q=salary+review&k=20")
        self.assertTrue(folders(answer["hits"]) <= {"eng", "all"})
        tools = mcp_server.BastionTools(self.store.manifest(), self.store.layout, EndpointConfig(url=self.stub.url))
        hits = tools.search({"query": "salary review", "k": 20}, None)["hits"]
        self.assertTrue(folders(hits) <= {"eng", "all"})
        rows = [json.loads(line) for line in self.store.layout.audit_log.read_text(encoding="utf-8").splitlines()]
        self.assertEqual([row["via"] for row in rows], ["cli"] * 3 + ["serve", "mcp"])
        self.assertTrue(all(row["caller"].startswith("local:") for row in rows))


class McpHttpTests(TwoTokensCase):
    """``mcp --http`` with the tokens file: each token's session sees its own share; a revoked token stops."""

    def start_http(self) -> str:
        env = {key: value for key, value in os.environ.items() if not key.startswith(("EMBED_", "BASTION_"))}
        env.update(EMBED_URL=self.stub.url, BASTION_SERVE_TOKENS=str(self.tokens_file))
        return start_mcp_http(self, self.store.manifest_path, self.store.layout.root, env, wait=WAIT_SECONDS)

    def session(self, url: str, token: str, body) -> None:
        import anyio
        import httpx2
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        async def run():
            with anyio.fail_after(WAIT_SECONDS):
                async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as client:
                    async with streamable_http_client(url, http_client=client) as (read_stream, write_stream, *_):
                        async with ClientSession(read_stream, write_stream) as session:
                            await session.initialize()
                            await body(session)

        anyio.run(run)

    def test_each_token_searches_its_share_and_fetch_learns_nothing_of_the_other(self):
        try:
            import mcp  # noqa: F401
        except ImportError:
            self.skipTest("the mcp extra is not installed")
        url = self.start_http()
        found = {}

        async def as_hr(session):
            for mode in MODES:
                result = await session.call_tool("search", {"query": "review", "k": 20, "mode": mode})
                found[("hr", mode)] = result.structured_content["hits"]

        async def as_eng(session):
            for mode in MODES:
                result = await session.call_tool("search", {"query": "review", "k": 20, "mode": mode})
                found[("eng", mode)] = result.structured_content["hits"]
            hr_chunk = found[("hr", "keyword")][0]["chunk_id"]
            found["other"] = await session.call_tool("fetch", {"chunk_id": hr_chunk})
            found["random"] = await session.call_tool("fetch", {"chunk_id": "0" * 64})
            found["hr_chunk"] = hr_chunk

        self.session(url, self.hr, as_hr)
        self.session(url, self.eng, as_eng)
        for mode in MODES:
            self.assertTrue(folders(found[("hr", mode)]) <= {"hr", "all"})
            self.assertTrue(folders(found[("eng", mode)]) <= {"eng", "all"})
        self.assertEqual(folders([hit for hit in found[("hr", "keyword")] if hit["chunk_id"] == found["hr_chunk"]]), {"hr"})
        other, random_ = found["other"], found["random"]
        self.assertTrue(other.is_error and random_.is_error)
        self.assertEqual(other.content[0].text.replace(found["hr_chunk"], "<id>"),
                         random_.content[0].text.replace("0" * 64, "<id>"))
        self.assertIsNone(other.structured_content)

    def test_a_token_revoked_during_a_session_is_refused_at_its_next_request(self):
        try:
            import mcp  # noqa: F401
        except ImportError:
            self.skipTest("the mcp extra is not installed")
        url = self.start_http()
        spare = token_cli.add_token(self.tokens_file, "spare", ("eng",))
        outcome = {}

        async def body(session):
            outcome["before"] = await session.call_tool("search", {"query": "compiler", "k": 1})
            token_cli.revoke_token(self.tokens_file, "spare")
            try:
                outcome["after"] = await session.call_tool("search", {"query": "compiler", "k": 1})
            except Exception as exc:  # the transport's 401: the session cannot go on
                outcome["after"] = exc

        try:
            self.session(url, spare, body)
        except BaseException as exc:  # the SDK ends the session with the HTTP error
            outcome.setdefault("after", exc)
        self.assertFalse(outcome["before"].is_error)
        self.assertIsInstance(outcome["after"], Exception)  # the server's 401 ends the call: no result at all


if __name__ == "__main__":
    unittest.main()
