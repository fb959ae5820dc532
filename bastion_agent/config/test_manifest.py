"""Manifest loading: every invalid manifest is refused with one line naming the key."""

from __future__ import annotations

import json
import os
import re
import unittest

from bastion_agent.config import manifest as manifest_module
from bastion_agent.core.errors import ManifestError
from bastion_agent.testing.testsupport import (
    TempFolder,
    clean_env,
    run_cli,
    write_manifest,
)

VALID = """
[source]
root = "docs"

[embed]
model = "nomic-embed-text"
dim = 768

[embed.chunk]
size_tokens = 256
overlap_tokens = 32
"""

# (name, manifest text, words the one-line error must contain)
INVALID = [
    ("missing source", VALID.replace('[source]\nroot = "docs"\n', ""), ["missing table [source]"]),
    ("missing root", VALID.replace('root = "docs"', ""), ["[source] root", "missing"]),
    ("root not a folder", VALID.replace('"docs"', '"nowhere"'), ["[source] root", "does not exist"]),
    ("root wrong type", VALID.replace('"docs"', "7"), ["[source] root", "non-empty string"]),
    ("missing model", VALID.replace('model = "nomic-embed-text"', ""), ["[embed] model", "missing"]),
    ("empty model", VALID.replace('"nomic-embed-text"', '""'), ["[embed] model", "non-empty string"]),
    ("dim a string", VALID.replace("dim = 768", 'dim = "768"'), ["[embed] dim", "whole number >= 1"]),
    ("dim zero", VALID.replace("dim = 768", "dim = 0"), ["[embed] dim", ">= 1"]),
    ("dim a float", VALID.replace("dim = 768", "dim = 7.5"), ["[embed] dim"]),
    ("dim a bool", VALID.replace("dim = 768", "dim = true"), ["[embed] dim"]),
    ("negative size", VALID.replace("size_tokens = 256", "size_tokens = -4"), ["[embed.chunk] size_tokens", ">= 1"]),
    ("negative overlap", VALID.replace("overlap_tokens = 32", "overlap_tokens = -1"), ["[embed.chunk] overlap_tokens", ">= 0"]),
    ("overlap equals size", VALID.replace("overlap_tokens = 32", "overlap_tokens = 256"), ["overlap_tokens", "< size_tokens (256)"]),
    ("overlap above size", VALID.replace("overlap_tokens = 32", "overlap_tokens = 300"), ["overlap_tokens", "< size_tokens"]),
    ("unknown key", VALID.replace("dim = 768", "dim = 768\ndimension = 768"), ["unknown key 'dimension'", "[embed]"]),
    ("typo in chunk key", VALID.replace("overlap_tokens", "overlap_token"), ["unknown key 'overlap_token'"]),
    ("unknown section", VALID + "\n[endpoint]\nurl = 'http://evil'\n", ["unknown key 'endpoint'", "top level"]),
    ("embed url in manifest", VALID.replace("dim = 768", "dim = 768\nurl = 'http://x'"), ["unknown key 'url'"]),
    ("include not a list", VALID.replace('root = "docs"', 'root = "docs"\ninclude = "*.md"'), ["[source] include", "list of glob"]),
    ("max size negative", VALID.replace('root = "docs"', 'root = "docs"\nmax_file_mb = -1'), ["[source] max_file_mb", "> 0"]),
    ("search mode unknown", VALID + '\n[search]\nmode = "magic"\n', ["[search] mode", "vector"]),
    ("broken TOML", VALID.replace("dim = 768", "dim = = 768"), ["invalid TOML"]),
    ("source not a table", 'source = "docs"\n' + VALID.split("[embed]")[0].replace('[source]\nroot = "docs"', "") + "[embed]" + VALID.split("[embed]", 1)[1], ["[source] must be a table"]),
]


class ManifestTests(TempFolder, unittest.TestCase):
    def setUp(self):
        self.tmp = self.make_tmp()
        (self.tmp / "docs").mkdir()

    def write(self, text: str, name: str = "manifest.toml"):
        path = self.tmp / name
        path.write_text(text, encoding="utf-8")
        return path

    def test_a_valid_manifest_loads_with_its_settings(self):
        with clean_env():
            loaded = manifest_module.load(self.write(VALID))
        self.assertEqual(loaded.source.root, (self.tmp / "docs"))
        self.assertEqual((loaded.embed.model, loaded.embed.dim), ("nomic-embed-text", 768))
        self.assertEqual((loaded.embed.size_tokens, loaded.embed.overlap_tokens), (256, 32))
        self.assertFalse(loaded.signature.signed)

    def test_embed_chunk_is_optional_with_the_defaults(self):
        """Regression: a manifest without [embed.chunk] was refused instead of taking the defaults."""
        chunkless = VALID.replace("[embed.chunk]\nsize_tokens = 256\noverlap_tokens = 32", "")
        self.assertNotEqual(chunkless, VALID)
        with clean_env():
            loaded = manifest_module.load(self.write(chunkless))
            self.assertEqual((loaded.embed.size_tokens, loaded.embed.overlap_tokens),
                             (manifest_module.DEFAULT_SIZE_TOKENS, manifest_module.DEFAULT_OVERLAP_TOKENS))
            sized = manifest_module.load(self.write(VALID.replace("overlap_tokens = 32\n", ""), "sized.toml"))
        self.assertEqual((sized.embed.size_tokens, sized.embed.overlap_tokens), (256, 16))

    def test_watch_timing_has_laptop_defaults_and_refuses_what_is_not_a_duration(self):
        with clean_env():
            loaded = manifest_module.load(self.write(VALID))
            self.assertEqual((loaded.watch.poll_seconds, loaded.watch.debounce_seconds),
                             (manifest_module.DEFAULT_POLL_SECONDS, manifest_module.DEFAULT_DEBOUNCE_SECONDS))
            quick = manifest_module.load(self.write(VALID + "\n[watch]\npoll_seconds = 0.5\ndebounce_seconds = 0\n", "w.toml"))
            self.assertEqual((quick.watch.poll_seconds, quick.watch.debounce_seconds), (0.5, 0.0))
            for table, words in (("poll_seconds = 0", "[watch] poll_seconds must be a number > 0"),
                                 ("debounce_seconds = -1", "[watch] debounce_seconds must be a number >= 0"),
                                 ("poll_seconds = true", "[watch] poll_seconds"),
                                 ("interval = 3", "interval")):
                with self.subTest(table), self.assertRaisesRegex(ManifestError, re.escape(words)):
                    manifest_module.load(self.write(VALID + f"\n[watch]\n{table}\n", "bad.toml"))

    def test_root_is_relative_to_the_manifest_folder_not_the_working_directory(self):
        path = self.write(VALID)
        cwd = os.getcwd()
        try:
            os.chdir("/")
            with clean_env():
                self.assertEqual(manifest_module.load(path).source.root, self.tmp / "docs")
        finally:
            os.chdir(cwd)

    def test_json_manifests_are_read_by_extension(self):
        data = {"source": {"root": "docs"}, "embed": {"model": "m", "dim": 8, "chunk": {"size_tokens": 4, "overlap_tokens": 1}}}
        with clean_env():
            loaded = manifest_module.load(self.write(json.dumps(data), "manifest.json"))
        self.assertEqual(loaded.embed.size_tokens, 4)

    def test_invalid_json_names_line_and_column(self):
        with self.assertRaisesRegex(ManifestError, r"invalid JSON.*line 1, column"):
            manifest_module.load(self.write("{", "manifest.json"))

    def test_each_invalid_manifest_is_refused_with_a_line_naming_the_key(self):
        for name, text, words in INVALID:
            with self.subTest(name):
                path = self.write(text)
                with self.assertRaises(ManifestError) as caught:
                    manifest_module.load(path)
                message = str(caught.exception)
                self.assertNotIn("\n", message)
                self.assertIn(str(path), message)
                for word in words:
                    self.assertIn(word, message)

    def test_missing_and_unreadable_manifests(self):
        with self.assertRaisesRegex(ManifestError, "no such file"):
            manifest_module.load(self.tmp / "absent.toml")
        with self.assertRaisesRegex(ManifestError, "is a folder"):
            manifest_module.load(self.tmp / "docs")
        if os.geteuid() != 0:  # root reads anything
            path = self.write(VALID)
            path.chmod(0)
            with self.assertRaisesRegex(ManifestError, "cannot read"):
                manifest_module.load(path)

    def test_not_utf8_is_refused(self):
        path = self.tmp / "manifest.toml"
        path.write_bytes(VALID.encode() + b"\n# \xff\n")
        with self.assertRaisesRegex(ManifestError, "not UTF-8"):
            manifest_module.load(path)

    def test_every_stage_refuses_an_invalid_manifest_without_writing(self):
        path = self.write(VALID.replace("overlap_tokens = 32", "overlap_tokens = 999"))
        out = self.tmp / "out"
        for stage in ("extract", "sanitize", "chunk", "embed", "sweep"):
            with self.subTest(stage), clean_env():
                code, stdout, stderr = run_cli(stage, path, "--out", out)
                self.assertEqual(code, ManifestError.exit_code)
                self.assertEqual(stdout, "")
                self.assertEqual(len(stderr.strip().splitlines()), 1)
                self.assertTrue(stderr.startswith(f"bastion_agent {stage}: manifest "))
                self.assertFalse(out.exists())
        with clean_env():
            code, stdout, stderr = run_cli("search", path, "query", "--out", out)
        self.assertEqual(code, ManifestError.exit_code)
        self.assertFalse(out.exists())

    def test_passage_prefix_is_part_of_the_vector_key(self):
        plain = write_manifest(self.tmp, model="e5")
        with clean_env():
            key_plain = manifest_module.load(plain).embed.vector_key
        prefixed = write_manifest(self.tmp, model="e5", extra='', name="p.toml")
        prefixed.write_text(prefixed.read_text().replace('model = "e5"', 'model = "e5"\npassage_prefix = "passage: "'))
        with clean_env():
            key_prefixed = manifest_module.load(prefixed).embed.vector_key
        self.assertEqual(key_plain, "e5")
        self.assertNotEqual(key_prefixed, key_plain)
        self.assertTrue(key_prefixed.startswith("e5"))


if __name__ == "__main__":
    unittest.main()
