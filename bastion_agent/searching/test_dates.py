"""Every hit says when its document changed, and a search can keep to a span of dates, filtered before ranking.

The files are swept through the real stages (extract reads each file's
modification time from its inode), and searched through the CLI, serve and
the MCP tool, so each way in is held to the same answer.
"""

from __future__ import annotations

import os
import unittest
from datetime import datetime, timezone
from pathlib import Path

from bastion_agent.config import manifest as manifest_module
from bastion_agent.core import dates
from bastion_agent.core.errors import ConfigError
from bastion_agent.core.layout import Layout, read_jsonl
from bastion_agent.serving.mcp_server import ToolArgumentError
from bastion_agent.testing.dated_folder import NEW, OLD, DatedFolder, iso
from bastion_agent.testing.testsupport import clean_env, run_cli


class HitDateTests(DatedFolder):
    def test_every_hit_carries_its_files_modification_time(self):
        code, hits, _ = self.search("-k", "20", "--mode", "keyword")
        self.assertEqual(code, 0)
        by_path = {path: hit["modified"] for hit in hits for path in hit["paths"]}
        self.assertEqual(by_path["old/note-0.txt"], iso(OLD))
        self.assertEqual(by_path["new/note-2.txt"], iso(NEW))

    def test_a_text_at_two_paths_is_dated_by_the_later_file(self):
        code, hits, _ = self.search("-k", "20", "--mode", "keyword")
        shared = [hit for hit in hits if "copy/a.txt" in hit["paths"]]
        self.assertEqual((code, len(shared)), (0, 1))
        self.assertEqual((sorted(shared[0]["paths"]), shared[0]["modified"]), (["copy/a.txt", "copy/b.txt"], iso(NEW)))

    def test_the_sanitized_listing_holds_one_time_per_path_and_no_more(self):
        listing = read_jsonl(Layout(self.out).sanitized_listing)
        for row in listing:
            self.assertEqual(len(row["modified"]), len(row["paths"]), row)
            for when in row["modified"]:
                self.assertRegex(when, r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")

    def test_the_person_reading_the_terminal_sees_the_date(self):
        with clean_env(EMBED_URL=self.stub.url):
            code, out, _ = run_cli("search", self.manifest, self.topic, "--out", self.out, "--mode", "keyword")
        self.assertEqual(code, 0)
        self.assertIn("modified 2019-03-04 05:06:07Z", out)


class OpenTheFileTests(DatedFolder):
    """The operator on the bastion gets the local file of each hit, and can open hit N."""

    def test_each_hit_names_its_local_file_and_open_hands_it_to_the_opener(self):
        bin_dir = self.tmp / "bin"
        bin_dir.mkdir(exist_ok=True)
        opened = self.tmp / "opened.txt"
        opener = bin_dir / "xdg-open"
        opener.write_text(f'#!/bin/sh\nprintf "%s" "$1" > "{opened}"\n')
        opener.chmod(0o755)
        with clean_env(EMBED_URL=self.stub.url, PATH=f"{bin_dir}:{os.environ.get('PATH', '')}"):
            code, out, err = run_cli("search", self.manifest, self.topic, "--out", self.out, "--mode", "keyword",
                                     "--before", "2020-01-01", "--open", "2")
            for _ in range(200):  # the opener runs detached; wait for it to write, at most a few seconds
                if opened.exists() and opened.read_text():
                    break
                import time

                time.sleep(0.02)
        self.assertEqual((code, err), (0, ""))
        root = (self.tmp / "docs").resolve()
        files = [line.split("file: ", 1)[1] for line in out.splitlines() if "file: " in line]
        self.assertEqual(len(files), 4)
        self.assertTrue(all(Path(name).resolve().is_relative_to(root) for name in files), files)
        self.assertEqual(opened.read_text(), files[1])

    def test_open_out_of_range_or_without_an_opener_is_one_line(self):
        with clean_env(EMBED_URL=self.stub.url, PATH=str(self.tmp / "nowhere")):
            beyond = run_cli("search", self.manifest, self.topic, "--out", self.out, "--mode", "keyword", "--open", "99")
            no_opener = run_cli("search", self.manifest, self.topic, "--out", self.out, "--mode", "keyword", "--open", "1")
        self.assertEqual(beyond[0], 2)
        self.assertIn("gave", beyond[2])
        self.assertEqual(no_opener[0], 2)
        self.assertIn("no desktop opener", no_opener[2])
        self.assertEqual(len(no_opener[2].strip().splitlines()), 1)


class DateFilterTests(DatedFolder):
    def test_since_keeps_to_newer_documents_and_still_returns_k(self):
        for mode in ("keyword", "vector", "hybrid"):
            code, unfiltered, _ = self.search("-k", "3", "--mode", mode)
            self.assertEqual(code, 0)
            code, hits, _ = self.search("-k", "3", "--mode", mode, "--since", "2026-01-01")
            self.assertEqual((code, len(hits)), (0, 3), mode)
            self.assertTrue(all(hit["modified"] >= "2026-01-01" for hit in hits), (mode, hits))
        self.assertTrue(any(hit["modified"] < "2026-01-01" for hit in unfiltered))

    def test_before_keeps_to_older_documents(self):
        code, hits, _ = self.search("-k", "20", "--mode", "keyword", "--before", "2020-01-01")
        self.assertEqual(code, 0)
        self.assertEqual({hit["modified"] for hit in hits}, {iso(OLD)})
        self.assertEqual(len(hits), 4)  # the four old notes; the copy at two paths is dated by its newer one

    def test_a_filter_never_reaches_past_the_callers_groups(self):
        # The local user of this manifest sees every group; a staff caller must not see the hr file in a dated search.
        from bastion_agent.searching.searcher import SearchIndex

        with clean_env():
            manifest = manifest_module.load(self.manifest)
        index = SearchIndex.load(manifest, Layout(self.out))
        self.addCleanup(index.close)
        window = dates.date_range("2026-01-01", None)
        staff = index.search(self.topic, None, 20, "keyword", groups=frozenset({"staff"}), dates=window)
        everyone = index.search(self.topic, None, 20, "keyword", dates=window)
        self.assertNotIn("hr/secret.txt", [path for hit in staff for path in hit.paths])
        self.assertIn("hr/secret.txt", [path for hit in everyone for path in hit.paths])
        tables = index.db.execute("SELECT COUNT(*) FROM temp.sqlite_master WHERE name LIKE 'visible_%'").fetchone()[0]
        index.search(self.topic, None, 20, "keyword", groups=frozenset({"staff"}), dates=window)
        self.assertEqual(index.db.execute("SELECT COUNT(*) FROM temp.sqlite_master WHERE name LIKE 'visible_%'")
                         .fetchone()[0], tables, "a dated search leaves no table of its own behind")

    def test_a_bad_date_is_one_line_and_exit_2(self):
        for extra in (("--since", "yesterday"), ("--before", "2026-13-01"), ("--since", "2026-02-01", "--before", "2026-01-01")):
            code, out, err = self.search(*extra)
            self.assertEqual(code, 2, extra)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            self.assertEqual(out, "")


class HiddenCopyDateTests(DatedFolder):
    """One text in a public folder and in hr: a staff caller is dated, and filtered, by the public file alone."""

    @classmethod
    def extra_files(cls, docs):
        from bastion_agent.testing.dated_folder import write_dated

        write_dated(docs, "forms/exit-form.txt", f"exit {cls.topic} form for the depot staff", OLD)
        write_dated(docs, "hr/dismissals/exit-form.txt", f"exit {cls.topic} form for the depot staff", NEW)

    def test_a_hidden_copys_date_is_never_shown_nor_filtered_by(self):
        from bastion_agent.searching.searcher import SearchIndex

        with clean_env():
            manifest = manifest_module.load(self.manifest)
        index = SearchIndex.load(manifest, Layout(self.out))
        self.addCleanup(index.close)
        staff = frozenset({"staff"})

        def form_hits(groups, window=None):
            hits = index.search(f"exit {self.topic} form", None, 20, "keyword", groups=groups, dates=window)
            return [hit for hit in hits if "exit" in hit.text]

        (mine,) = form_hits(staff)
        self.assertEqual((mine.paths, mine.modified), (["forms/exit-form.txt"], iso(OLD)))
        (everyone,) = form_hits(None)
        self.assertEqual(everyone.modified, iso(NEW))
        self.assertEqual(form_hits(staff, dates.date_range("2026-01-01", None)), [])
        self.assertEqual(len(form_hits(None, dates.date_range("2026-01-01", None))), 1)


class ServeAndMcpDateTests(DatedFolder):
    def test_http_and_mcp_filter_like_the_cli(self):
        from types import SimpleNamespace

        from bastion_agent.embedding.endpoint import EndpointConfig
        from bastion_agent.serving.mcp_server import BastionTools
        from bastion_agent.testing.serve_store import request, start

        code, expected, _ = self.search("-k", "3", "--mode", "keyword", "--since", "2026-01-01")
        with clean_env():
            manifest = manifest_module.load(self.manifest)
        store = SimpleNamespace(manifest=lambda: manifest, layout=Layout(self.out), stub=self.stub)
        running = start(store, self)
        status, _, body = request(running.url, path=f"/search?q={self.topic}&k=3&mode=keyword&since=2026-01-01")
        refused, _, error = request(running.url, path=f"/search?q={self.topic}&since=last+tuesday")
        tools = BastionTools(manifest, Layout(self.out), EndpointConfig(url=self.stub.url))
        answered = tools.search({"query": self.topic, "k": 3, "mode": "keyword", "since": "2026-01-01"})
        with self.assertRaises(ToolArgumentError):
            tools.search({"query": self.topic, "before": 20260101})
        self.assertEqual((code, status, refused), (0, 200, 400))
        self.assertIn("since must be", error["error"])
        self.assertEqual([hit["chunk_id"] for hit in body["hits"]], [hit["chunk_id"] for hit in expected])
        self.assertEqual([hit["modified"] for hit in body["hits"]], [hit["modified"] for hit in expected])
        self.assertEqual([hit["chunk_id"] for hit in answered["hits"]], [hit["chunk_id"] for hit in expected])


class DateParsingTests(unittest.TestCase):
    def test_forms_and_refusals(self):
        now = datetime(2026, 12, 6, 12, 0, 0, tzinfo=timezone.utc)
        self.assertEqual(dates.date_range("7d", None, now), dates.DateRange("2026-11-29T12:00:00Z", None))
        self.assertEqual(dates.date_range(None, "2026-12-01", now), dates.DateRange(None, "2026-12-01T00:00:00Z"))
        self.assertIsNone(dates.date_range(None, None, now))
        for bad in ("", "now", "7y", "2026-02-30", "1" * 50):
            with self.assertRaises(ConfigError):
                dates.date_range(bad, None, now)

    def test_an_undated_document_is_outside_every_range(self):
        self.assertFalse(dates.DateRange("2000-01-01T00:00:00Z", None).holds(None))


if __name__ == "__main__":
    unittest.main()
