"""Only visible paths: a window whose text several documents share names to each caller only the paths it may read.

The attacker reads ``public``; the same form sits at
``public/forms-exit-interview.txt`` and at an HR path whose name is news
(fresh each run). Swept through the real stages, then asked through every
front end that lists paths: the search function, ``search --json``, MCP
``search`` and ``fetch``, and serve over HTTP with a named token.
"""

from __future__ import annotations

import json
import random
import string
import tempfile
import unittest
from pathlib import Path

from bastion_agent import embed
from bastion_agent.config import manifest as manifest_module
from bastion_agent.core.access import visible_paths
from bastion_agent.core.layout import Layout
from bastion_agent.embedding.endpoint import EndpointConfig
from bastion_agent.serving import mcp_server, tokens
from bastion_agent.testing.labelled_docs import HR_PUBLIC_ACCESS as ACCESS
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import clean_env, run_cli, write_manifest

MODES = ("vector", "keyword", "hybrid")


def hidden_name() -> str:
    return "hr/dismissals/" + "".join(random.choice(string.ascii_lowercase) for _ in range(12)) + "-layoffs.txt"


class VisiblePathsTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.holder = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls.holder.name)
        cls.stub = StubServer().start()
        cls.hidden = hidden_name()
        form = ("Exit interview form: reason for leaving, notice period served, equipment returned, "
                "final pay confirmed by the manager.\n")
        files = {"public/forms-exit-interview.txt": form, cls.hidden: form,
                 "public/other.txt": "The canteen opens at eight and serves soup on Fridays.\n"}
        for path, text in files.items():
            target = cls.tmp / "docs" / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        cls.out = cls.tmp / "out"
        cls.manifest_path = write_manifest(cls.tmp, extra=ACCESS)
        cls.public_manifest = write_manifest(cls.tmp, extra='\n[access]\nlocal_groups = ["public"]\n' + ACCESS,
                                             name="public.toml")
        with clean_env(EMBED_URL=cls.stub.url):
            code, _, err = run_cli("sweep", cls.manifest_path, "--out", cls.out)
        assert code == 0, err

    @classmethod
    def tearDownClass(cls):
        cls.stub.stop()
        cls.holder.cleanup()

    def manifest(self, path=None):
        with clean_env():
            return manifest_module.load(path or self.manifest_path)

    def test_the_shared_document_carries_both_paths_with_their_own_groups(self):
        rows = [json.loads(line) for line in (self.out / "sanitized" / "listing.jsonl").read_text().splitlines()]
        shared = next(row for row in rows if len(row["paths"]) == 2)
        self.assertEqual(shared["groups"], ["hr", "public"])
        self.assertEqual(dict(zip(shared["paths"], shared["path_groups"])),
                         {"public/forms-exit-interview.txt": ["public"], self.hidden: ["hr"]})

    def test_search_shows_a_public_caller_only_the_public_path_in_every_mode(self):
        for groups, expected in ((frozenset({"public"}), ["public/forms-exit-interview.txt"]), (frozenset({"hr"}), [self.hidden]),
                                 (None, sorted(["public/forms-exit-interview.txt", self.hidden]))):
            for mode in MODES:
                with self.subTest(groups=groups, mode=mode), clean_env(EMBED_URL=self.stub.url):
                    hits = embed.answer(self.manifest(), Layout(self.out), "exit interview form notice period", 5,
                                        mode=mode, groups=groups).hits
                    form = [hit for hit in hits if "Exit interview" in hit.text]
                    self.assertEqual(len(form), 1)
                    self.assertEqual(sorted(form[0].paths), expected)

    def test_cli_json_and_text_of_a_public_user_never_name_the_hr_path(self):
        for extra in (("--json",), ()):
            with self.subTest(extra=extra), clean_env(EMBED_URL=self.stub.url):
                code, out, err = run_cli("search", self.public_manifest, "exit interview form", "-k", "5",
                                         "--out", self.out, *extra)
            self.assertEqual(code, 0, err)
            self.assertIn("forms-exit-interview", out)
            self.assertNotIn(self.hidden.split("/")[-1].split("-")[0], out + err)
            self.assertNotIn("dismissals", out + err)

    def test_mcp_search_and_fetch_name_only_what_the_caller_may_read(self):
        tools = mcp_server.BastionTools(self.manifest(), Layout(self.out), EndpointConfig(url=self.stub.url))
        public = tokens.Caller("reader", frozenset({"public"}))
        hits = tools.search({"query": "exit interview form notice period", "k": 5, "mode": "keyword"}, public)["hits"]
        form = next(hit for hit in hits if "Exit interview" in hit["text"])
        self.assertEqual((form["paths"], form["paths_total"]), (["public/forms-exit-interview.txt"], 1))
        fetched = tools.fetch({"chunk_id": form["chunk_id"]}, public)
        self.assertEqual((fetched["paths"], fetched["paths_total"]), (["public/forms-exit-interview.txt"], 1))
        everyone = tools.fetch({"chunk_id": form["chunk_id"]}, tokens.Caller("admin", None))
        self.assertEqual(fetched["doc"], everyone["doc"])
        self.assertEqual(everyone["paths_total"], 2)  # every group still sees both (the test can fail)

    def test_serve_with_a_named_public_token_names_only_the_public_path(self):
        import types
        import urllib.parse

        from bastion_agent.commands import token_cli
        from bastion_agent.testing.serve_store import request, start

        tokens_file = self.tmp / "conf" / "tokens.json"
        public = token_cli.add_token(tokens_file, "public-wiki", ("public",))
        store = types.SimpleNamespace(manifest=self.manifest, layout=Layout(self.out), stub=self.stub)
        server = start(store, self, tokens_file=tokens_file)
        for mode in MODES:
            with self.subTest(mode=mode):
                query = urllib.parse.urlencode({"q": "exit interview form notice period", "k": 5, "mode": mode})
                status, _, answer = request(server.url, path="/search?" + query,
                                            headers={"Authorization": f"Bearer {public}"})
                self.assertEqual(status, 200, answer)
                form = [hit for hit in answer["hits"] if "Exit interview" in hit["text"]]
                self.assertEqual([hit["paths"] for hit in form], [["public/forms-exit-interview.txt"]])


class VisiblePathsRuleTests(unittest.TestCase):
    def test_a_path_is_shown_when_the_caller_shares_its_own_groups(self):
        paths, groups = ["a.txt", "b.txt"], [["public"], ["hr"]]
        self.assertEqual(visible_paths(frozenset({"public"}), paths, groups, ["hr", "public"]), ["a.txt"])
        self.assertEqual(visible_paths(frozenset({"board"}), paths, groups, ["hr", "public"]), [])
        self.assertEqual(visible_paths(None, paths, groups), paths)

    def test_a_store_without_path_groups_shows_the_documents_groups_for_each(self):
        self.assertEqual(visible_paths(frozenset({"hr"}), ["a.txt"], [], ["hr"]), ["a.txt"])
        self.assertEqual(visible_paths(frozenset({"eng"}), ["a.txt"], [], ["hr"]), [])
        self.assertEqual(visible_paths(frozenset({"hr"}), ["a.txt", "b.txt"], [["hr"]], ["eng"]), [])


if __name__ == "__main__":
    unittest.main()
