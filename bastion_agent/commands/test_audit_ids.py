"""Audit ids that cannot be hashed back: keyed with a per-installation secret, and erased on remediation.

The attacker holds the audit log (a copy of it, a backup) and the current
sanitized text of a document whose ``EMP-######`` id a new rule redacted
after it was searched. Trying every one of the 10^6 values must find
nothing: no field of the log equals (or starts) the sha256 of any
candidate text, and the old document's keyed id left the log with its
windows.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import stat
import unittest
from concurrent.futures import ThreadPoolExecutor

from bastion_agent.core import audit
from bastion_agent.core.errors import StoreError
from bastion_agent.core.layout import Layout, read_jsonl
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import TempFolder, clean_env, run_cli, write_manifest

RULE = '\n[[sanitize.rules]]\nid = "employee-id"\npattern = \'EMP-\\d{6}\'\nkeywords = ["emp-"]\n'


def strings_in(value) -> set[str]:
    """Every string (keys and values) of a JSON value."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set(value) | set().union(*(strings_in(item) for item in value.values()))
    if isinstance(value, list):
        return set().union(*(strings_in(item) for item in value)) if value else set()
    return set()


class AuditKeyTests(TempFolder, unittest.TestCase):
    def setUp(self):
        self.tmp = self.make_tmp()
        self.layout = Layout(self.tmp / "out")

    def test_the_key_is_made_once_private_and_agreed_by_concurrent_makers(self):
        with ThreadPoolExecutor(8) as pool:
            keys = set(pool.map(lambda _: audit.installation_key(self.layout), range(16)))
        self.assertEqual(len(keys), 1)
        path = audit.key_path(self.layout)
        self.assertEqual(stat.S_IMODE(path.stat().st_mode), 0o600)
        self.assertEqual(len(path.read_bytes()), audit.KEY_BYTES)
        self.assertEqual([name for name in os.listdir(self.layout.root) if name.endswith(".tmp")], [])
        self.assertEqual(audit.installation_key(self.layout), keys.pop())

    def test_a_planted_or_readable_key_refuses_the_search(self):
        self.layout.root.mkdir(mode=0o700)
        elsewhere = self.tmp / "elsewhere"
        elsewhere.write_bytes(os.urandom(audit.KEY_BYTES))
        audit.key_path(self.layout).symlink_to(elsewhere)
        with self.assertRaises(StoreError):
            audit.record_search(self.layout, caller="c", via="cli", mode="vector", k=1, docs=["a" * 64])
        audit.key_path(self.layout).unlink()
        audit.key_path(self.layout).write_bytes(os.urandom(audit.KEY_BYTES))
        os.chmod(audit.key_path(self.layout), 0o644)
        with self.assertRaises(StoreError):
            audit.record_search(self.layout, caller="c", via="cli", mode="vector", k=1, docs=["a" * 64])
        self.assertFalse(self.layout.audit_log.exists())

    def test_an_id_in_the_log_is_neither_the_document_id_nor_its_plain_hash(self):
        doc = hashlib.sha256(os.urandom(16)).hexdigest()
        audit.record_search(self.layout, caller="c", via="cli", mode="vector", k=1, docs=[doc])
        (row,) = audit.read_records(self.layout.audit_log)
        (written,) = row["docs"]
        for plain in (doc, hashlib.sha256(doc.encode()).hexdigest()):
            self.assertFalse(plain.startswith(written))
        other = Layout(self.tmp / "other")  # another installation: another key, another id
        audit.record_search(other, caller="c", via="cli", mode="vector", k=1, docs=[doc])
        self.assertNotEqual(next(audit.read_records(other.audit_log))["docs"], [written])

    def test_a_log_of_an_older_agent_gets_keyed_ids_with_the_new_key(self):
        plain = [hashlib.sha256(os.urandom(16)).hexdigest() for _ in range(3)]
        self.layout.root.mkdir(mode=0o700)
        rows = [{"time": "2026-11-01T10:00:00Z", "caller": "c", "via": "cli", "mode": "vector", "k": 3, "hits": 3,
                 "docs": plain}]
        self.layout.audit_log.write_text("".join(json.dumps(row) + "\n" for row in rows) + "{broken\n", encoding="utf-8")
        os.chmod(self.layout.audit_log, 0o600)
        audit.record_search(self.layout, caller="c", via="cli", mode="vector", k=1, docs=[plain[0]])
        key = audit.installation_key(self.layout)
        records = list(audit.read_records(self.layout.audit_log))
        self.assertEqual(records[0]["docs"], [audit.audit_id(key, doc) for doc in plain])
        self.assertIsNone(records[1])  # a line that is no record is kept as it was
        self.assertEqual(records[2]["docs"], [audit.audit_id(key, plain[0])])
        self.assertFalse(any(doc.encode() in self.layout.audit_log.read_bytes() for doc in plain))


class RemediationTests(TempFolder, unittest.TestCase):
    """A value redacted after the fact (a new rule, then sweep and prune) cannot be found from the audit log."""

    def test_every_6_digit_value_tried_against_the_log_finds_nothing(self):
        tmp = self.make_tmp()
        value = f"{random.randrange(10 ** 6):06d}"
        (tmp / "docs").mkdir()
        (tmp / "docs" / "badge.txt").write_text(f"Badge EMP-{value} was issued to the night shift porter.\n")
        (tmp / "docs" / "bread.txt").write_text("Sourdough bread needs flour, water, salt and a starter.\n")
        manifest, out = write_manifest(tmp, size=16, overlap=4), tmp / "out"
        layout = Layout(out)
        stub = StubServer().__enter__()
        self.addCleanup(stub.__exit__, None, None, None)
        with clean_env(EMBED_URL=stub.url):
            self.assertEqual(run_cli("sweep", manifest, "--out", out, "--quiet")[0], 0)
            old_doc = next(row["doc"] for row in read_jsonl(layout.sanitized_listing) if row["paths"] == ["badge.txt"])
            for _ in range(2):
                self.assertEqual(run_cli("search", manifest, "badge night shift porter", "--out", out,
                                         "--mode", "keyword", "-k", "1")[0], 0)
            self.assertEqual(run_cli("search", manifest, "sourdough bread flour", "--out", out,
                                     "--mode", "keyword", "-k", "1")[0], 0)
            key = audit.installation_key(layout)
            self.assertIn(audit.audit_id(key, old_doc), strings_in(list(audit.read_records(layout.audit_log))))
            manifest.write_text(manifest.read_text(encoding="utf-8") + RULE, encoding="utf-8")
            for command in ("sweep", "prune"):
                code, _, err = run_cli(command, manifest, "--out", out, *(["--quiet"] if command == "sweep" else []))
                self.assertEqual(code, 0, err)
        new_doc = next(row["doc"] for row in read_jsonl(layout.sanitized_listing) if row["paths"] == ["badge.txt"])
        self.assertNotEqual(new_doc, old_doc)
        records = list(audit.read_records(layout.audit_log))
        self.assertEqual(len(records), 3)  # the searches stay recorded, without the old id
        fields = strings_in(records) | {str(record["hits"]) for record in records}
        self.assertNotIn(audit.audit_id(key, old_doc), fields)
        new_text = (layout.sanitized_dir / f"{new_doc}.txt").read_text(encoding="utf-8")
        self.assertIn("[REDACTED:employee-id]", new_text)
        template = new_text.replace("[REDACTED:employee-id]", "EMP-{}")
        hexes = {field for field in fields if re.fullmatch(r"[0-9a-f]{16,64}", field)}  # what could be a hash
        self.assertTrue(hexes)  # the log does hold ids: the search below is not vacuous
        fields, prefixes = hexes, {len(field) for field in hexes}
        found = [candidate for candidate in range(10 ** 6)
                 if _matches(hashlib.sha256(template.format(f"{candidate:06d}").encode()).hexdigest(), fields, prefixes)]
        self.assertEqual(found, [])
        self.assertEqual(hashlib.sha256(template.format(value).encode()).hexdigest(), old_doc)  # the attack's premise
        raw = b"".join(path.read_bytes() for path in audit.log_files(layout.audit_log))
        self.assertNotIn(old_doc.encode(), raw)


def _matches(digest: str, fields: set[str], lengths: set[int]) -> bool:
    return any(digest[:length] in fields for length in lengths)


if __name__ == "__main__":
    unittest.main()
