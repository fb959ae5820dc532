"""The audit log (``core/audit.py``) and the ``audit`` command: one private line per search, bounded, summarised."""

from __future__ import annotations

import json
import os
import stat
import unittest
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

from bastion_agent.commands import audit_cli
from bastion_agent.core import audit, dates
from bastion_agent.core.errors import StoreError
from bastion_agent.core.layout import Layout
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import TempFolder, clean_env, run_cli, write_manifest

SECRET_QUERY = "dismissal of margaret hollis"


def lines(layout: Layout) -> list[dict]:
    return [json.loads(line) for line in layout.audit_log.read_text(encoding="utf-8").splitlines()]


class AuditLogTests(TempFolder, unittest.TestCase):
    def setUp(self):
        self.tmp = self.make_tmp()
        self.layout = Layout(self.tmp / "out")

    def test_a_record_is_one_private_line_without_the_query(self):
        audit.record_search(self.layout, caller="hr-portal", via="serve", mode="hybrid", k=5, docs=["a" * 64, "b" * 64, "a" * 64])
        (row,) = lines(self.layout)
        self.assertEqual(stat.S_IMODE(self.layout.audit_log.stat().st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(self.layout.root.stat().st_mode), 0o700)
        self.assertEqual((row["caller"], row["via"], row["mode"], row["k"], row["hits"]), ("hr-portal", "serve", "hybrid", 5, 3))
        key = audit.installation_key(self.layout)
        self.assertEqual(row["docs"], [audit.audit_id(key, "a" * 64), audit.audit_id(key, "b" * 64)])
        self.assertNotIn("query", row)
        self.assertRegex(row["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")

    def test_a_query_cannot_break_or_forge_a_line(self):
        forged = '"}\n{"caller": "ceo", "via": "cli"\u2028\x1b[2J'
        audit.record_search(self.layout, caller="c", via="serve", mode="keyword", k=1, docs=[], query=forged)
        raw = self.layout.audit_log.read_bytes()
        self.assertEqual(raw.count(b"\n"), 1)
        self.assertTrue(raw.isascii())
        self.assertNotIn(b"\x1b", raw)
        (row,) = list(audit.read_records(self.layout.audit_log))
        self.assertEqual((row["caller"], row["query"]), ("c", forged))

    def test_concurrent_searches_give_whole_lines(self):
        def one(n):
            audit.record_search(self.layout, caller=f"c{n % 4}", via="serve", mode="vector", k=3, docs=[f"{n:064x}"])

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(one, range(400)))
        rows = lines(self.layout)
        self.assertEqual(len(rows), 400)
        key = audit.installation_key(self.layout)
        self.assertEqual(sorted(row["docs"][0] for row in rows), sorted(audit.audit_id(key, f"{n:064x}") for n in range(400)))

    def test_a_flood_that_pushes_young_records_out_is_said_on_stderr_and_noted(self):
        said = []
        retention = audit.Retention(days=30, warn=said.append)
        own = f"{os.getpid():064x}"  # the record the flooder wants gone
        audit.record_search(self.layout, caller="insider", via="serve", mode="keyword", k=1, docs=[own],
                            max_bytes=2048, keep=2, retention=retention)
        flood = 0
        own = audit.audit_id(audit.installation_key(self.layout), own)  # as the log holds it: keyed
        while any(own in row["docs"] for row in audit.read_records(self.layout.audit_log, keep=2)):
            audit.record_search(self.layout, caller="insider", via="serve", mode="keyword", k=1,
                                docs=[f"{flood:064x}"], max_bytes=2048, keep=2, retention=retention)
            flood += 1
            self.assertLess(flood, 1000, "the record never left the log: the test proves nothing")
        self.assertEqual(len(said), 1, said)
        self.assertIn("younger than the 30-day retention", said[0])
        (drop,) = list(audit.read_drops(self.layout.audit_log))
        self.assertTrue(drop.within_retention)
        self.assertGreater(drop.records, 1)
        self.assertEqual(drop.first, audit.parse_time(drop.first).strftime(audit.TIME_FORMAT))
        self.assertEqual(stat.S_IMODE(audit.dropped_log(self.layout.audit_log).stat().st_mode), 0o600)

    def test_records_older_than_the_retention_go_without_a_warning_but_are_noted(self):
        self.layout.root.mkdir(mode=0o700)
        oldest = self.layout.root / "audit.jsonl.2"
        rows = [{"time": f"2026-01-0{day}T10:00:00Z", "caller": "c", "via": "cli", "mode": "keyword", "k": 1,
                 "hits": 0, "docs": []} for day in (1, 2, 3)]
        oldest.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        said = []
        now = datetime(2026, 2, 3, tzinfo=timezone.utc)  # 30.6 days after the newest record
        drop = audit.note_drop(self.layout.audit_log, 2, audit.Retention(days=31, warn=said.append), now=now)
        self.assertEqual((drop.records, drop.first, drop.last, drop.within_retention),
                         (3, "2026-01-01T10:00:00Z", "2026-01-03T10:00:00Z", True))
        self.assertEqual(len(said), 1)
        drop = audit.note_drop(self.layout.audit_log, 2, audit.Retention(days=30, warn=said.append), now=now)
        self.assertFalse(drop.within_retention)
        self.assertEqual(len(said), 1, "an old record dropped is no news")
        self.assertEqual([item.within_retention for item in audit.read_drops(self.layout.audit_log)], [True, False])

    def test_rotation_keeps_the_log_bounded(self):
        said = []
        for n in range(2000):
            audit.record_search(self.layout, caller="c", via="cli", mode="keyword", k=5, docs=[f"{n:064x}"],
                                max_bytes=4096, keep=3, retention=audit.Retention(warn=said.append))
        files = audit.log_files(self.layout.audit_log, keep=3)
        self.assertEqual([path.name for path in files], ["audit.jsonl.3", "audit.jsonl.2", "audit.jsonl.1", "audit.jsonl"])
        self.assertFalse((self.layout.root / "audit.jsonl.4").exists())
        for path in files:
            self.assertLessEqual(path.stat().st_size, 4096)
            self.assertEqual(stat.S_IMODE(path.stat().st_mode), 0o600)
        key = audit.installation_key(self.layout)
        number_of = {audit.audit_id(key, f"{n:064x}"): n for n in range(2000)}
        kept = [number_of[row["docs"][0]] for row in audit.read_records(self.layout.audit_log, keep=3)]
        self.assertEqual(kept[-1], 1999)  # the newest survive, in order
        self.assertEqual(kept, sorted(kept))
        drops = list(audit.read_drops(self.layout.audit_log))
        self.assertEqual(len(drops), len(said))  # each drop of young records noted and said
        self.assertEqual(sum(drop.records for drop in drops) + len(kept), 2000, "every dropped record counted")

    def test_a_log_that_cannot_be_written_refuses_the_search(self):
        self.layout.root.mkdir(mode=0o700)
        self.layout.audit_log.mkdir()
        with self.assertRaises(StoreError) as caught:
            audit.record_search(self.layout, caller="c", via="cli", mode="vector", k=1, docs=[])
        self.assertIn("not answered", str(caught.exception))

    def test_a_link_planted_as_the_log_is_not_followed(self):
        self.layout.root.mkdir(mode=0o700)
        target = self.tmp / "elsewhere"
        target.write_text("", encoding="utf-8")
        self.layout.audit_log.symlink_to(target)
        with self.assertRaises(StoreError):
            audit.record_search(self.layout, caller="c", via="cli", mode="vector", k=1, docs=[])
        self.assertEqual(target.read_text(encoding="utf-8"), "")


class AuditCommandTests(TempFolder, unittest.TestCase):
    def setUp(self):
        self.tmp = self.make_tmp()
        self.manifest = write_manifest(self.tmp, size=16, overlap=4)
        self.out = self.tmp / "out"
        self.layout = Layout(self.out)

    def swept(self, audit_queries: bool = False):
        (self.tmp / "docs").mkdir(exist_ok=True)
        (self.tmp / "docs" / "roof.txt").write_text("The roof of the north barn leaks when the wind blows.\n")
        (self.tmp / "docs" / "bread.txt").write_text("Sourdough bread needs flour, water, salt and a starter.\n")
        if audit_queries:
            with open(self.manifest, "a", encoding="utf-8") as handle:
                handle.write("\n[serve]\naudit_queries = true\n")
        stub = StubServer().__enter__()
        self.addCleanup(stub.__exit__, None, None, None)
        with clean_env(EMBED_URL=stub.url):
            self.assertEqual(run_cli("sweep", self.manifest, "--out", self.out, "--quiet")[0], 0)
            for mode in ("vector", "keyword", "hybrid"):
                code, _, err = run_cli("search", self.manifest, SECRET_QUERY, "--out", self.out, "--mode", mode, "-k", "2")
                self.assertEqual((code, err), (0, ""))

    def test_every_cli_search_is_one_line_without_its_text(self):
        self.swept()
        rows = lines(self.layout)
        self.assertEqual([row["mode"] for row in rows], ["vector", "keyword", "hybrid"])
        self.assertTrue(all(row["via"] == "cli" and row["caller"].startswith("local:") and row["k"] == 2 for row in rows))
        self.assertNotIn("margaret", self.layout.audit_log.read_text(encoding="utf-8"))

    def test_the_query_is_kept_when_the_manifest_asks(self):
        self.swept(audit_queries=True)
        self.assertEqual({row["query"] for row in lines(self.layout)}, {SECRET_QUERY})

    def test_audit_queries_must_be_a_boolean(self):
        with open(self.manifest, "a", encoding="utf-8") as handle:
            handle.write("\n[serve]\naudit_queries = \"yes\"\n")
        code, out, err = run_cli("audit", self.manifest, "--out", self.out)
        self.assertEqual((code, out), (2, ""))
        self.assertIn("[serve] audit_queries must be true or false", err)

    def test_the_summary_counts_callers_modes_ways_in_and_documents(self):
        self.swept()
        audit.record_search(self.layout, caller="hr-portal", via="serve", mode="vector", k=5, docs=["d" * 64])
        code, out, err = run_cli("audit", self.manifest, "--out", self.out, "--json")
        self.assertEqual((code, err), (0, ""))
        summary = json.loads(out)
        self.assertEqual(summary["searches"], 4)
        self.assertEqual(summary["via"], {"cli": 3, "serve": 1})
        self.assertEqual(summary["modes"], {"vector": 2, "keyword": 1, "hybrid": 1})
        self.assertEqual(summary["callers"]["hr-portal"], 1)
        self.assertLessEqual(summary["first"], summary["last"])
        self.assertTrue(summary["documents"])
        code, out, _ = run_cli("audit", self.manifest, "--out", self.out)
        self.assertEqual(code, 0)
        self.assertIn("4 searches from", out)
        self.assertIn("hr-portal", out)

    def test_since_and_unreadable_lines(self):
        self.layout.root.mkdir(mode=0o700)
        rows = [{"time": "2026-11-01T10:00:00Z", "caller": "old", "via": "cli", "mode": "vector", "k": 1, "hits": 0, "docs": []},
                {"time": "2026-12-01T10:00:00Z", "caller": "new", "via": "mcp", "mode": "keyword", "k": 1, "hits": 1, "docs": ["x"]}]
        text = "".join(json.dumps(row) + "\n" for row in rows) + "{broken\n" + "\x1b[2J\n"
        self.layout.audit_log.write_text(text, encoding="utf-8")
        code, out, err = run_cli("audit", self.manifest, "--out", self.out, "--since", "2026-12-01", "--json")
        self.assertEqual((code, err), (0, ""))
        summary = json.loads(out)
        self.assertEqual((summary["searches"], summary["callers"], summary["unreadable"]), (1, {"new": 1}, 2))
        now = datetime(2026, 12, 2, 10, tzinfo=timezone.utc)
        self.assertEqual(dates.point_in_time("24h", now=now), datetime(2026, 12, 1, 10, tzinfo=timezone.utc))
        code, out, err = run_cli("audit", self.manifest, "--out", self.out, "--since", "yesterday")
        self.assertEqual((code, out), (2, ""))
        self.assertIn("--since", err)

    def test_the_summary_says_when_rotation_dropped_records(self):
        self.swept()
        said = []
        for n in range(60):
            audit.record_search(self.layout, caller="flood", via="serve", mode="keyword", k=1, docs=[f"{n:064x}"],
                                max_bytes=1024, retention=audit.Retention(warn=said.append))
        self.assertTrue(said, "nothing was dropped: the test proves nothing")
        code, out, err = run_cli("audit", self.manifest, "--out", self.out, "--json")
        self.assertEqual(code, 0)
        summary = json.loads(out)
        self.assertEqual(len(summary["dropped"]), len(said))
        self.assertTrue(all(drop["within_retention"] for drop in summary["dropped"]))
        self.assertEqual(err.count("younger than the 90-day retention"), len(said))
        code, out, _ = run_cli("audit", self.manifest, "--out", self.out)
        self.assertIn("dropped by rotation:", out)
        self.assertIn("younger than the 90-day retention", out)

    def test_the_serve_limits_in_the_manifest_are_checked(self):
        for key, value, allowed in (("searches_per_minute", "0", "from 1 to 60000"),
                                    ("search_burst", "true", "from 1 to 10000"),
                                    ("audit_retention_days", "1.5", "from 0 to 36500")):
            with self.subTest(key=key):
                text = self.manifest.read_text(encoding="utf-8")
                self.addCleanup(self.manifest.write_text, text, encoding="utf-8")
                self.manifest.write_text(text + f"\n[serve]\n{key} = {value}\n", encoding="utf-8")
                code, out, err = run_cli("audit", self.manifest, "--out", self.out)
                self.assertEqual((code, out), (2, ""))
                self.assertIn(f"[serve] {key} must be a whole number {allowed}", err)
                self.assertEqual(err.count("\n"), 1)
                self.manifest.write_text(text, encoding="utf-8")

    def test_no_log_yet_is_one_line(self):
        code, out, err = run_cli("audit", self.manifest, "--out", self.out)
        self.assertEqual((code, out), (2, ""))
        self.assertIn("no audit log", err)
        self.assertEqual(err.count("\n"), 1)


if __name__ == "__main__":
    unittest.main()
