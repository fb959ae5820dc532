"""The wire formats: one class each, one registry, and everyone dispatching on it (not on names).

Each format is exercised end to end against the stub's side of it: the
probe detects it, the request is the format's own body on its own route,
the answer is read back. The hostile cases: a server answering another
format's shape is never read as vectors, an ``EMBED_API`` holding a key is
never echoed, a listing that never ends is read only so far, and a format
the stub has no answer for stops the stub instead of being answered in
another's shape.
"""

from __future__ import annotations

import ast
import contextlib
import unittest
from pathlib import Path

from bastion_agent.core.errors import ConfigError, ModelServerError
from bastion_agent.embedding import wire_formats
from bastion_agent.embedding.client import EmbedClient
from bastion_agent.embedding.endpoint import EndpointConfig
from bastion_agent.embedding.failures import WRONG_API, RequestFailure
from bastion_agent.embedding.wire_formats import WIRE_FORMATS, WireFormat, listed_names, wire_format
from bastion_agent.testing.stub_server import STUB_FORMATS, StubServer, bag_of_words

PACKAGE = Path(__file__).resolve().parent.parent
# Modules that must ask a wire format rather than compare its name (testing/ compares server kinds, not formats).
DISPATCHERS = [*sorted((PACKAGE / "embedding").glob("*.py")), PACKAGE / "commands" / "init_manifest.py"]


@contextlib.contextmanager
def registered(fmt: WireFormat):
    """``fmt`` in the registry for the block (a format the stub has never heard of)."""
    WIRE_FORMATS[fmt.name] = fmt
    try:
        yield fmt
    finally:
        del WIRE_FORMATS[fmt.name]


class Registry(unittest.TestCase):
    def test_every_format_has_its_stub_answer(self):
        self.assertEqual(set(STUB_FORMATS), set(WIRE_FORMATS))
        self.assertEqual(len({fmt.embed_path for fmt in WIRE_FORMATS.values()}), len(WIRE_FORMATS),
                         "two formats on one route could not be told apart by the probe")

    def test_lookup_by_name_and_unknown_name_lists_the_names_without_echoing(self):
        self.assertIs(wire_format("ollama"), WIRE_FORMATS["ollama"])
        key = "sk-live-0123456789abcdef"  # what people put in EMBED_API
        for environ in ({"EMBED_API": key}, {"EMBED_API": "OpenAI"}):
            with self.subTest(environ=environ), self.assertRaises(ConfigError) as caught:
                EndpointConfig.from_env(environ)
            message = str(caught.exception)
            self.assertNotIn(environ["EMBED_API"], message)
            self.assertEqual(message.count("\n"), 0)
            for name in WIRE_FORMATS:
                self.assertIn(repr(name), message)

    def test_no_module_branches_on_a_format_name(self):
        """``api == "openai"`` outside the format classes is how a new format got missed in eight files."""
        names = set(WIRE_FORMATS)
        for path in DISPATCHERS:
            if path.name.startswith("test_") or path.name == "wire_formats.py":
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Compare):
                    for side in [node.left, *node.comparators]:
                        if isinstance(side, ast.Constant) and side.value in names:
                            self.fail(f"{path.name}:{node.lineno} compares with the wire format name {side.value!r}")


class EachFormatEndToEnd(unittest.TestCase):
    def test_probe_detects_each_format_alone_and_embeds_in_its_shape(self):
        for name, fmt in WIRE_FORMATS.items():
            with self.subTest(format=name), StubServer(dim=16, wire_formats=(name,)) as stub:
                client = EmbedClient(EndpointConfig(url=stub.url, timeout=10), "m")
                self.assertEqual(client.probe(16), name)
                vectors = client.embed(["alpha beta", "gamma"])
                self.assertEqual(vectors, [bag_of_words("alpha beta", 16), bag_of_words("gamma", 16)])
                path, body = stub.requests[-1]
                self.assertEqual(path, fmt.embed_path)
                self.assertEqual(body, fmt.request_body("m", ["alpha beta", "gamma"], client.encoding, False))
                self.assertEqual(stub.inputs()[-2:], ["alpha beta", "gamma"])

    def test_a_pinned_format_the_server_lacks_fails_in_one_line_naming_its_route(self):
        for name, fmt in WIRE_FORMATS.items():
            others = tuple(other for other in WIRE_FORMATS if other != name)
            with self.subTest(format=name), StubServer(dim=16, wire_formats=others) as stub:
                client = EmbedClient(EndpointConfig(url=stub.url, wire_format=name, timeout=10), "m")
                with self.assertRaises(ModelServerError) as caught:
                    client.probe(16)
                self.assertIn(fmt.embed_path, str(caught.exception))
                self.assertNotIn("\n", str(caught.exception))
                with self.assertRaises(RequestFailure) as measured:
                    client.measure(name)
                self.assertEqual(measured.exception.kind, WRONG_API)


class HostileAnswers(unittest.TestCase):
    def test_another_formats_answer_is_never_read_as_vectors(self):
        vectors = [[1.0, 2.0], [3.0, 4.0]]
        for reader_name, reader in WIRE_FORMATS.items():
            for writer_name, writer in STUB_FORMATS.items():
                if reader_name == writer_name:
                    continue
                for encoding in ("float", "base64"):
                    with self.subTest(reader=reader_name, writer=writer_name, encoding=encoding):
                        self.assertIsNone(reader.vectors(writer.answer("m", vectors, encoding, 3)))

    def test_non_answers_are_not_vectors(self):
        for name, fmt in WIRE_FORMATS.items():
            for answer in (None, "embeddings", 7, {"error": "x"}, {"data": "x", "embeddings": 3}):
                with self.subTest(format=name, answer=answer):
                    self.assertIsNone(fmt.vectors(answer))
                    self.assertIsNone(fmt.prompt_tokens(answer))

    def test_token_counts_are_believed_only_when_plausible(self):
        for name, stub in STUB_FORMATS.items():
            fmt = WIRE_FORMATS[name]
            if fmt.prompt_tokens(stub.answer("m", [[1.0]], "float", 12)) is None:
                continue  # this format's answer carries no token count
            for tokens, expected in ((12, 12), (0, None), (-5, None), (True, None), (1 << 40, None), (None, None)):
                with self.subTest(format=name, tokens=tokens):
                    self.assertEqual(fmt.prompt_tokens(stub.answer("m", [[1.0]], "float", tokens)), expected)

    def test_an_endless_listing_is_read_only_so_far(self):
        for route in wire_formats.listing_routes():
            key, name_keys = wire_formats.LISTINGS[route]
            items = [{name_keys[0]: f"model-{n}"} for n in range(50_000)] + [{name_keys[0]: 7}, "plain", None]
            with self.subTest(route=route):
                names = listed_names(route, {key: items})
                self.assertEqual(len(names), wire_formats.MAX_LISTED)
                self.assertTrue(all(isinstance(name, str) for name in names))
                self.assertEqual(listed_names(route, {key: "not a list"}), [])
                self.assertEqual(listed_names(route, ["no", "object"]), [])


class ANewFormatIsNeverAnsweredInAnothersShape(unittest.TestCase):
    def test_the_stub_refuses_to_start_with_a_format_it_cannot_answer(self):
        class Unheard(WireFormat):
            name = "unheard"
            embed_path = "/unheard/embed"

            def request_body(self, model, texts, encoding, truncate):
                return {"model": model, "input": texts}

            def vectors(self, answer):
                return WIRE_FORMATS["ollama"].vectors(answer)  # would read Ollama's shape, were it answered

        with registered(Unheard()):
            with self.assertRaises(ValueError) as caught:
                StubServer(wire_formats=("unheard",))
            self.assertIn("StubFormat", str(caught.exception))
            with StubServer(dim=16, wire_formats=tuple(STUB_FORMATS)) as stub:  # the unheard route is a 404
                client = EmbedClient(EndpointConfig(url=stub.url, wire_format="unheard", timeout=10), "m")
                with self.assertRaises(ModelServerError):
                    client.probe(16)
                self.assertEqual(stub.requests, [])


if __name__ == "__main__":
    unittest.main()
