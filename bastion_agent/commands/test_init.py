"""``init FOLDER``: a manifest that fits the model server at EMBED_URL (or the embedded model)."""

from __future__ import annotations

import json
import unittest

from bastion_agent.config import manifest
from bastion_agent.testing.fault_stub import nested_answer
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import (
    TempFolder,
    clean_env,
    closed_port_url,
    run_cli,
)


class InitTests(TempFolder, unittest.TestCase):
    def setUp(self):
        self.tmp = self.make_tmp()
        self.docs = self.tmp / "docs"
        self.docs.mkdir()
        (self.docs / "note.txt").write_text("The backup keys are rotated every spring.\n", encoding="utf-8")
        self.target = self.tmp / "bastion.toml"

    def init(self, url: str, *extra):
        with clean_env(EMBED_URL=url):
            return run_cli("init", self.docs, "--manifest", self.target, *extra)

    def loaded(self):
        with clean_env():
            return manifest.load(self.target)

    def test_an_ollama_server_gives_its_embedding_model_dimension_and_prefixes(self):
        with StubServer(dim=48, models=["llama3:latest", "nomic-embed-text:latest"]) as stub:
            code, out, err = self.init(stub.url)
            self.assertEqual(code, 0, err)
            loaded = self.loaded()
            self.assertEqual((loaded.embed.model, loaded.embed.dim), ("nomic-embed-text:latest", 48))
            self.assertEqual((loaded.embed.query_prefix, loaded.embed.passage_prefix),
                             ("search_query: ", "search_document: "))
            self.assertEqual(loaded.source.root, self.docs.resolve())
            with clean_env(EMBED_URL=stub.url):  # and the walk goes on: sweep, search
                self.assertEqual(run_cli("sweep", self.target, "--quiet")[0], 0)
                code, out, err = run_cli("search", self.target, "backup keys rotated", "--json")
        self.assertEqual(json.loads(out)[0]["paths"], ["note.txt"])
        self.assertIn(f"# Found at {stub.url} (ollama API)", self.target.read_text())

    def test_update_repins_to_the_served_name_and_keeps_the_rest_of_the_file(self):
        """README step 2 said to run init again with the server up, and init refused to overwrite."""
        with clean_env(EMBED_URL=closed_port_url()):
            self.assertEqual(run_cli("init", self.docs, "--manifest", self.target)[0], 0)
        with self.target.open("a", encoding="utf-8") as stream:
            stream.write("# my own note, kept\n")
        before = self.target.read_text()
        with StubServer(dim=384, models=["multilingual-e5-small:latest"]) as stub:
            with clean_env(EMBED_URL=stub.url):
                code, out, err = run_cli("init", "--update", self.target)
                self.assertEqual(code, 0, err)
                again = run_cli("init", "--update", self.target)
        after = self.target.read_text()
        self.assertEqual(self.loaded().embed.model, "multilingual-e5-small:latest")
        self.assertIn('-model = "multilingual-e5-small"', out)
        self.assertIn('+model = "multilingual-e5-small:latest"', out)
        self.assertIn("every stored vector is reused", err)
        changed = [line for line in after.splitlines() if line not in before.splitlines()]
        self.assertEqual(changed, ['model = "multilingual-e5-small:latest"'])
        self.assertIn("# my own note, kept", after)
        self.assertEqual((again[0], again[1]), (0, ""))
        self.assertIn("unchanged", again[2])

    def test_update_with_no_server_changes_nothing(self):
        with clean_env(EMBED_URL=closed_port_url()):
            self.assertEqual(run_cli("init", self.docs, "--manifest", self.target)[0], 0)
            before = self.target.read_bytes()
            code, out, err = run_cli("init", "--update", self.target)
        self.assertNotEqual(code, 0)
        self.assertIn("left as it is", err)
        self.assertEqual(self.target.read_bytes(), before)

    def test_a_listed_name_with_a_line_break_cannot_write_into_the_manifest(self):
        """The other names the server lists go in a comment: one with a newline broke out of it, and init failed."""
        hostile = 'x-embed\n[publish]\nbastion = "rogue"\n#'
        with StubServer(dim=48, models=["nomic-embed-text:latest"], listed=["nomic-embed-text:latest", hostile]) as stub:
            code, out, err = self.init(stub.url)
        self.assertEqual(code, 0, err)
        self.assertIsNone(self.loaded().publish_bastion)
        self.assertNotIn("rogue", self.target.read_text())

    def test_a_nested_model_list_is_no_list_not_a_crash(self):
        """/api/tags nested past the JSON parser's depth raised RecursionError through init (a traceback)."""
        with StubServer(dim=48, models=["nomic-embed-text:latest"], routes={"/api/tags": nested_answer}) as stub:
            code, out, err = self.init(stub.url)
        self.assertEqual(code, 0, err)
        self.assertEqual(self.loaded().embed.model, "nomic-embed-text:latest")  # asked through /v1/models instead

    def test_an_openai_style_server_is_asked_through_v1_models(self):
        with StubServer(dim=24, wire_formats=("openai",), models=["bge-small-en-v1.5"]) as stub:
            code, out, err = self.init(stub.url)
        self.assertEqual(code, 0, err)
        loaded = self.loaded()
        self.assertEqual((loaded.embed.model, loaded.embed.dim), ("bge-small-en-v1.5", 24))
        self.assertTrue(loaded.embed.query_prefix.startswith("Represent this sentence"))
        self.assertIn("(openai API)", self.target.read_text())

    def test_no_server_gives_the_embedded_model_and_says_how_to_start_it(self):
        code, out, err = self.init(closed_port_url())
        self.assertEqual(code, 0, err)
        loaded = self.loaded()
        self.assertEqual((loaded.embed.model, loaded.embed.dim), ("multilingual-e5-small", 384))
        self.assertEqual((loaded.embed.query_prefix, loaded.embed.passage_prefix), ("query: ", "passage: "))
        self.assertIn("model-server", err)
        self.assertIn("model-server", self.target.read_text())

    def test_the_embedded_model_server_gives_the_e5_settings(self):
        from bastion_agent.model.modelserver import ModelServer
        from bastion_agent.testing.fake_model import FakeModel

        with ModelServer(FakeModel(dim=384), model="multilingual-e5-small", dim=384) as server:
            code, out, err = self.init(server.url)
        self.assertEqual(code, 0, err)
        loaded = self.loaded()
        self.assertEqual((loaded.embed.model, loaded.embed.dim), ("multilingual-e5-small:latest", 384))
        self.assertEqual((loaded.embed.query_prefix, loaded.embed.passage_prefix), ("query: ", "passage: "))
        self.assertEqual((loaded.embed.size_tokens, loaded.embed.overlap_tokens), (128, 16))

    def test_an_existing_manifest_is_never_overwritten(self):
        self.target.write_text("# mine\n", encoding="utf-8")
        code, out, err = self.init(closed_port_url())
        self.assertEqual(code, 2)
        self.assertIn("never overwrites", err)
        self.assertEqual(self.target.read_text(), "# mine\n")
        self.assertEqual(sorted(p.name for p in self.tmp.iterdir()), ["bastion.toml", "docs"])  # no temp file left

    def test_a_missing_folder_is_one_clear_line(self):
        with clean_env(EMBED_URL=closed_port_url()):
            code, out, err = run_cli("init", self.tmp / "nope", "--manifest", self.target)
        self.assertEqual(code, 2)
        self.assertEqual(len(err.splitlines()), 1)
        self.assertFalse(self.target.exists())

    def test_the_manifest_is_commented_and_shows_the_real_default_exclude(self):
        self.init(closed_port_url())
        text = self.target.read_text()
        self.assertIn('# exclude = [".git/**", ".hg/**", ".svn/**", ".bastion/**", ".bastion-*/**", "**/.DS_Store"]', text)
        self.assertIn("EMBED_URL", text)


if __name__ == "__main__":
    unittest.main()
