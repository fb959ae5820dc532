"""The hit schemas the HTTP API and the MCP server publish are the ``Hit`` record's, field for field."""

import dataclasses
import typing
import unittest

from bastion_agent.core import records
from bastion_agent.serving import mcp_server, serve_openapi, serve_settings


class HitSchemaTests(unittest.TestCase):
    def setUp(self):
        document = serve_openapi.document(serve_settings.ServeSettings(), "http://127.0.0.1:8080")
        self.openapi = document["components"]["schemas"]["Hit"]
        self.fields = dataclasses.fields(records.Hit)
        self.hints = typing.get_type_hints(records.Hit)

    def test_the_openapi_hit_has_exactly_the_records_fields_with_their_types(self):
        self.assertEqual(sorted(self.openapi["properties"]), sorted(field.name for field in self.fields))
        for field in self.fields:
            with self.subTest(field=field.name):
                want = records.json_type(self.hints[field.name])["type"]
                self.assertEqual(self.openapi["properties"][field.name]["type"], want)

    def test_the_openapi_hit_requires_the_fields_without_a_default(self):
        required = [field.name for field in self.fields if field.default is dataclasses.MISSING]
        self.assertEqual(self.openapi["required"], required)
        self.assertIn("score", required)
        self.assertNotIn("page", required)

    def test_every_described_field_carries_its_description(self):
        for field in self.fields:
            description = field.metadata.get("schema", {}).get("description")
            with self.subTest(field=field.name):
                self.assertEqual(self.openapi["properties"][field.name].get("description"), description)

    def test_the_mcp_hit_has_every_field_of_the_record(self):
        properties = mcp_server.hit_schema()["properties"]
        self.assertLessEqual({field.name for field in self.fields}, set(properties))
        self.assertEqual(set(properties) - {field.name for field in self.fields}, {"truncated", "paths_total"})

    def test_a_field_added_to_the_record_reaches_both_schemas(self):
        extra = dataclasses.make_dataclass(
            "LanguageHit", [("language", str, dataclasses.field(default="", metadata={"schema": {"description": "x"}}))],
            bases=(records.Hit,), frozen=True)
        schema = records.json_schema(extra)
        self.assertEqual(schema["properties"]["language"], {"type": "string", "description": "x"})
        self.assertNotIn("language", schema["required"])
        self.assertEqual(records.json_schema(extra, described=False)["properties"]["language"], {"type": "string"})


if __name__ == "__main__":
    unittest.main()
