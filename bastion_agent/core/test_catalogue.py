"""The catalogue: both listings read and written as records, and a document merged by its fields' rules."""

import dataclasses
import json
import secrets
import unittest
from pathlib import Path
from unittest import mock

from bastion_agent.core import catalogue, records
from bastion_agent.core.errors import StoreError
from bastion_agent.core.layout import Layout, ensure_private_dir, write_private
from bastion_agent.core.records import Document, ListingRow
from bastion_agent.testing.testsupport import TempFolder, run_cli, write_manifest, write_sanitized_store


def fresh_id() -> str:
    return secrets.token_hex(32)


def fresh_name() -> str:
    return f"folder-{secrets.token_hex(3)}/file-{secrets.token_hex(3)}.txt"


class HostileListingTests(TempFolder, unittest.TestCase):
    """A listing line that is not what its record says: one line naming the file and line, nothing written."""

    def setUp(self):
        self.tmp = self.make_tmp()
        self.manifest = write_manifest(self.tmp)
        self.layout = Layout(self.tmp / "out")
        self.planted = "sk-" + secrets.token_hex(16)  # a value that must never reach an error line

    def hostile_documents(self) -> list:
        doc = fresh_id()
        return [
            ["not", "an", "object", self.planted],
            {"doc": self.planted, "paths": []},
            {"doc": doc, "paths": [self.planted, 7]},
            {"doc": doc, "paths": self.planted},
            {"doc": doc, "paths": [], "size": 10**40},
            {"doc": doc, "paths": [], "size": True},
            {"doc": doc, "paths": [], "size": self.planted},
            {"doc": doc, "paths": [], "kind": [self.planted]},
            {"doc": doc, "paths": [], "skipped": {"why": self.planted}},
        ]

    def write_listing(self, path, lines: list[str]) -> None:
        ensure_private_dir(path.parent)
        write_private(path, "".join(line + "\n" for line in lines))

    def test_each_hostile_document_line_is_one_store_error_naming_its_line_and_no_value(self):
        good = json.dumps({"doc": fresh_id(), "paths": [fresh_name()]})
        for hostile in self.hostile_documents():
            with self.subTest(hostile=str(hostile)[:60]):
                self.write_listing(self.layout.sanitized_listing, [good, json.dumps(hostile)])
                with self.assertRaises(StoreError) as caught:
                    catalogue.read_documents(self.layout.sanitized_listing)
                message = str(caught.exception)
                self.assertIn("line 2", message)
                self.assertNotIn(self.planted, message)
                self.assertEqual(len(message.splitlines()), 1)

    def test_text_that_is_not_json_or_not_utf8_or_nested_past_the_stack_is_one_store_error(self):
        for data in (b"{\"doc\": \n", b"\xff\xfe" + self.planted.encode(), b"[" * 200_000 + b"]" * 200_000,
                     b'{"doc": "' + b"a" * 64 + b'", "size": 1' + b"9" * 5_000 + b"}"):
            with self.subTest(data=data[:20]):
                ensure_private_dir(self.layout.sanitized_dir)
                write_private(self.layout.sanitized_listing, data)
                with self.assertRaises(StoreError) as caught:
                    catalogue.read_documents(self.layout.sanitized_listing)
                self.assertNotIn(self.planted, str(caught.exception))

    def test_chunk_refuses_a_hostile_sanitized_listing_in_one_line_and_writes_nothing(self):
        write_sanitized_store(self.layout, {"an honest text of a few words": ["honest.txt"]})
        lines = self.layout.sanitized_listing.read_text(encoding="utf-8").splitlines()
        self.write_listing(self.layout.sanitized_listing,
                           lines + [json.dumps({"doc": fresh_id(), "paths": [], "size": -(10**40)})])
        code, out, err = run_cli("chunk", self.manifest, "--out", self.layout.root)
        self.assertNotEqual(code, 0)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("line 2", err)
        self.assertNotIn("Traceback", err)
        self.assertFalse(self.layout.chunks_path.exists())

    def test_sanitize_refuses_a_hostile_extract_listing_in_one_line_and_writes_no_sanitized_store(self):
        key = fresh_id()
        rows = [ListingRow(fresh_name(), key, 12, "text", "extracted").listed(),
                {"path": [self.planted], "key": key, "size": 1, "kind": "text", "status": "extracted"}]
        self.write_listing(self.layout.extract_listing, [json.dumps(row) for row in rows])
        write_private(self.layout.doc_text_path(self.layout.extract_dir, key), "twelve bytes")
        code, out, err = run_cli("sanitize", self.manifest, "--out", self.layout.root)
        self.assertNotEqual(code, 0)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("path", err)
        self.assertNotIn(self.planted, err)
        self.assertFalse(self.layout.sanitized_listing.exists())

    def test_an_extract_listing_row_of_the_wrong_types_is_refused_by_field(self):
        for field, value in (("size", 2**70), ("size", "12"), ("ocr_pages", [1, "2"]), ("status", None),
                             ("modified", 5)):
            with self.subTest(field=field, value=value):
                row = {**ListingRow(fresh_name(), fresh_id(), 3, "text", "extracted").listed(), field: value}
                self.write_listing(self.layout.extract_listing, [json.dumps(row)])
                with self.assertRaises(StoreError) as caught:
                    catalogue.read_extract_listing(self.layout.extract_listing)
                self.assertIn(f"line 1: {field} is not", str(caught.exception))


class RoundTripTests(TempFolder, unittest.TestCase):
    def setUp(self):
        self.layout = Layout(self.make_tmp() / "out")
        ensure_private_dir(self.layout.extract_dir)
        ensure_private_dir(self.layout.sanitized_dir)

    def test_documents_come_back_equal_sorted_and_their_none_fields_are_not_written(self):
        first, second = sorted([fresh_id(), fresh_id()], reverse=True)
        documents = [
            Document(first, paths=sorted([fresh_name(), fresh_name()]), kind="pdf",
                     modified=["2026-12-01T09:00:00Z", None], groups=["eng"], path_groups=[["eng"], []],
                     pages=[[0, 1, True], [40, 2, False]], size=secrets.randbelow(10**9)),
            Document(second, paths=[fresh_name()], kind="text", modified=[None]),
        ]
        catalogue.write_documents(self.layout.sanitized_listing, documents)
        catalogue.forget()  # parse the file, not the records kept from the write
        self.assertEqual(catalogue.read_documents(self.layout.sanitized_listing), sorted(documents, key=lambda d: d.doc))
        plain = json.loads(self.layout.sanitized_listing.read_text().splitlines()[0 if second < first else 1])
        self.assertEqual(set(plain), {"doc", "paths", "kind", "modified"})

    def test_extract_rows_come_back_equal_in_file_order(self):
        rows = [ListingRow(fresh_name(), fresh_id(), secrets.randbelow(10**6), "pdf", "extracted",
                           ocr_pages=[1, 3], modified="2026-11-30T08:00:00Z"),
                ListingRow(fresh_name(), None, 0, "binary", "skipped", reason="unsupported")]
        catalogue.write_extract_listing(self.layout.extract_listing, rows)
        catalogue.forget()
        self.assertEqual(catalogue.read_extract_listing(self.layout.extract_listing), rows)
        self.assertNotIn("ocr_pages", self.layout.extract_listing.read_text().splitlines()[1])

    def test_an_older_listing_without_newer_keys_and_with_unknown_ones_reads(self):
        doc, key, path = fresh_id(), fresh_id(), fresh_name()
        write_private(self.layout.sanitized_listing,
                      json.dumps({"doc": doc, "paths": [path, "b"], "kind": "text", "from_the_future": 1}) + "\n")
        write_private(self.layout.extract_listing,
                      json.dumps({"path": path, "doc": key, "kind": "text", "status": "extracted"}) + "\n")
        (document,) = catalogue.read_documents(self.layout.sanitized_listing)
        self.assertEqual(document, Document(doc, paths=[path, "b"], kind="text", modified=[None, None]))
        self.assertIsNone(document.latest_modified)
        self.assertEqual(document.text_source, "typed")
        (row,) = catalogue.read_extract_listing(self.layout.extract_listing)
        self.assertEqual((row.key, row.size, row.reason, row.ocr_pages), (key, 0, None, None))

    def test_labels_and_maps_that_are_not_valid_fail_closed_rather_than_stop(self):
        doc = fresh_id()
        line = {"doc": doc, "paths": ["a", "b"], "groups": ["eng", "Not A Group"], "path_groups": [["eng"]],
                "modified": ["yesterday", "2026-12-01T09:00:00Z"], "pages": [[0, "1", True]]}
        write_private(self.layout.sanitized_listing, json.dumps(line) + "\n")
        (document,) = catalogue.read_documents(self.layout.sanitized_listing)
        self.assertEqual(document.groups, [])  # labels nothing: fail closed
        self.assertIsNone(document.path_groups)
        self.assertEqual(document.modified, [None, "2026-12-01T09:00:00Z"])
        self.assertIsNone(document.pages)
        for times in (["2026-12-01T09:00:00Z"], "2026-12-01T09:00:00Z"):
            self.assertEqual(catalogue.CHECKS["times"](times, ["a", "b"]), [None, None])


class KeptListingTests(TempFolder, unittest.TestCase):
    """A sweep's stages parse each listing once, and a listing replaced since is never answered from memory."""

    def setUp(self):
        self.tmp = self.make_tmp()
        self.manifest = write_manifest(self.tmp)
        for number in range(3):
            (self.tmp / "docs" / f"note-{number}-{secrets.token_hex(4)}.txt").write_text(f"note {number}: {secrets.token_hex(8)}\n")
        self.layout = Layout(self.tmp / "out")

    def stages(self) -> dict[str, int]:
        """Run extract, sanitize and chunk in this process; how many times each listing file was parsed."""
        parsed: dict[str, int] = {}
        real = catalogue._lines

        def counting(path, remedy):
            lines = real(path, remedy)  # a listing not there yet (a first run) is no parse
            name = f"{Path(path).parent.name}/{Path(path).name}"
            parsed[name] = parsed.get(name, 0) + 1
            return lines

        with mock.patch.object(catalogue, "_lines", counting):
            for stage in ("extract", "sanitize", "chunk"):
                code, _, err = run_cli(stage, self.manifest, "--out", self.layout.root)
                self.assertEqual(code, 0, err)
        return parsed

    def test_the_stages_of_a_sweep_parse_each_listing_at_most_once(self):
        catalogue.forget()
        self.assertEqual(self.stages(), {})  # each stage reads what the one before wrote: kept, not parsed
        catalogue.forget()  # a new process over the same store
        self.assertEqual(set(self.stages().values()), {1})

    def test_a_listing_replaced_after_it_was_kept_is_read_again(self):
        self.stages()
        kept = catalogue.read_documents(self.layout.sanitized_listing)
        self.assertTrue(kept)
        planted = "sk-" + secrets.token_hex(16)
        write_private(self.layout.sanitized_listing, json.dumps({"doc": planted, "paths": []}) + "\n")
        with self.assertRaises(StoreError) as caught:
            catalogue.read_documents(self.layout.sanitized_listing)
        self.assertNotIn(planted, str(caught.exception))

    def test_a_long_lived_process_keeps_a_bounded_few(self):
        for _ in range(catalogue.KEPT_LISTINGS * 3):
            layout = Layout(self.make_tmp() / "out")
            ensure_private_dir(layout.sanitized_dir)
            catalogue.write_documents(layout.sanitized_listing, [Document(fresh_id(), paths=[fresh_name()])])
        self.assertLessEqual(len(catalogue._KEPT), catalogue.KEPT_LISTINGS)


class MergeTests(unittest.TestCase):
    def test_every_field_declares_a_known_rule_and_every_check_exists(self):
        for item in dataclasses.fields(Document):
            with self.subTest(field=item.name):
                self.assertIn(item.metadata.get("merge"), records.MERGE_RULES)
                check = item.metadata.get("check")
                self.assertTrue(not check or check in catalogue.CHECKS, check)

    def parts(self):
        doc = fresh_id()
        shared, own = fresh_name(), fresh_name()
        early, late = "2026-01-01T00:00:00Z", "2026-06-01T00:00:00Z"
        return doc, shared, own, [
            Document(doc, paths=[shared], kind="pdf", modified=[early], groups=["hr"], path_groups=[["hr"]],
                     pages=[[0, 1, True]], size=40),
            Document(doc, paths=[own], kind="text", modified=[None], groups=["eng"], path_groups=[["eng"]], size=40),
            Document(doc, paths=[shared], kind="text", modified=[late], groups=["ops"], path_groups=[["ops"]],
                     pages=[[0, 1, False]], size=40),
        ]

    def test_each_field_merges_by_its_rule(self):
        doc, shared, own, parts = self.parts()
        merged = catalogue.merge(parts)
        by_path = dict(zip(merged.paths, zip(merged.modified, merged.path_groups)))
        self.assertEqual(merged.doc, doc)  # same
        self.assertEqual(merged.paths, sorted({shared, own}))  # union
        self.assertEqual(merged.groups, ["eng", "hr", "ops"])  # union
        self.assertEqual((merged.kind, merged.pages, merged.size), ("pdf", [[0, 1, True]], 40))  # first
        self.assertEqual(by_path[shared], ("2026-06-01T00:00:00Z", ["hr", "ops"]))  # latest / union per path
        self.assertEqual(by_path[own], (None, ["eng"]))
        self.assertEqual(merged.latest_modified, "2026-06-01T00:00:00Z")
        self.assertEqual(merged.text_source, "ocr")

    def test_first_follows_the_order_given_and_unlabelled_parts_stay_unlabelled(self):
        _, _, _, parts = self.parts()
        self.assertEqual(catalogue.merge(parts[::-1]).kind, "text")
        bare = [dataclasses.replace(part, groups=None, path_groups=None) for part in parts]
        merged = catalogue.merge(bare)
        self.assertEqual((merged.groups, merged.path_groups), (None, None))

    def test_a_new_field_is_one_declaration_read_checked_merged_and_written_without_another_change(self):
        @dataclasses.dataclass(frozen=True)
        class Wider(Document):
            language: str | None = dataclasses.field(default=None, metadata=records._merged("first"))

        doc, words = fresh_id(), secrets.choice(["en", "de", "fr"])
        merged = catalogue.merge([Wider(doc, paths=["b"], modified=[None]),
                                  Wider(doc, paths=["a"], modified=[None], language=words)])
        self.assertEqual(merged.language, words)
        line = catalogue.document_line(merged)
        self.assertEqual(line["language"], words)
        self.assertEqual(catalogue.document_from_line(json.loads(json.dumps(line)), record=Wider), merged)
        with self.assertRaises(StoreError) as caught:
            catalogue.document_from_line({**line, "language": 7}, record=Wider)
        self.assertIn("language is not str | None", str(caught.exception))

    def test_files_of_different_documents_do_not_merge(self):
        with self.assertRaises(ValueError):
            catalogue.merge([Document(fresh_id()), Document(fresh_id())])
        with self.assertRaises(ValueError):
            catalogue.merge([])


if __name__ == "__main__":
    unittest.main()
