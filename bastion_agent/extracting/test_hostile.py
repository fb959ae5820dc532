"""Hostile files and folders (issue 13): each costs the agent one file at most.

Every case writes the attacker's input here, runs the stage (in a
subprocess under ``RLIMIT_AS`` where memory matters, so a regression fails
instead of swapping), and checks that the stage ends normally, the other
files are read, and the hostile one is reported with its reason.
"""

from __future__ import annotations

import io
import json
import os
import socket
import stat
import subprocess
import tempfile
import threading
import unittest
import zipfile
from pathlib import Path
from unittest import mock

from bastion_agent.core.budget import (
    REASON_MEMORY,
    REASON_TIME,
    Budget,
    Call,
    WorkerPool,
)
from bastion_agent.core.layout import OUT_MARKER, Layout
from bastion_agent.extracting import extract
from bastion_agent.extracting.formats.base import REASON_OUTPUT
from bastion_agent.serving import serve
from bastion_agent.serving.test_serve import StoreCase
from bastion_agent.testing.testsupport import (
    clean_env,
    run_python_limited,
    write_manifest,
)

STAGE_MEMORY_LIMIT = 1536 << 20  # the whole stage, parent and workers, stays under 1.5 GiB of address space


def run_limited(*args: str, limit: int = STAGE_MEMORY_LIMIT, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m bastion_agent ARGS`` under an address-space limit (inherited by its workers)."""
    code = (
        "import runpy, sys; "
        f"sys.argv = ['bastion_agent'] + {list(args)!r}; "
        "runpy.run_module('bastion_agent', run_name='__main__', alter_sys=True)"
    )
    return run_python_limited(code, limit, timeout)


# ---------------------------------------------------------------- the budget itself (test functions run in a worker)

def spin_for_ever() -> str:
    while True:
        pass


def allocate_four_gib() -> str:
    return str(len(bytearray(4 << 30)))


def crash_hard() -> str:
    os._exit(3)


def echo(text: str) -> str:
    return text


class BudgetTests(unittest.TestCase):
    def call(self, name: str, *args) -> Call:
        return Call("call", ("bastion_agent.extracting.test_hostile", name, *args), 0)

    def test_a_job_that_never_ends_is_killed_and_the_next_one_runs(self):
        with WorkerPool(Budget(seconds=1), workers=1) as pool:
            answers = [answer for _, answer in pool.ordered([(1, self.call("spin_for_ever")), (2, self.call("echo", "after"))])]
        self.assertEqual(answers[0].reason, REASON_TIME)
        self.assertEqual((answers[1].reason, answers[1].data), (None, b"after"))

    def test_a_job_that_allocates_without_end_is_stopped_by_the_memory_budget(self):
        with WorkerPool(Budget(memory_mb=256), workers=1) as pool:
            answers = [answer for _, answer in pool.ordered([(1, self.call("allocate_four_gib")), (2, self.call("echo", "ok"))])]
        self.assertEqual(answers[0].reason, REASON_MEMORY)
        self.assertEqual(answers[1].data, b"ok")

    def test_a_worker_that_dies_is_replaced(self):
        with WorkerPool(Budget(), workers=1) as pool:
            self.assertEqual(pool.run(self.call("crash_hard")).reason, REASON_MEMORY)
            self.assertEqual(pool.run(self.call("echo", "again")).data, b"again")

    def test_answers_come_back_in_submission_order(self):
        with WorkerPool(Budget(), workers=2) as pool:
            got = [payload for payload, _ in pool.ordered((n, self.call("echo", str(n)) if n % 3 else None) for n in range(12))]
        self.assertEqual(got, list(range(12)))


# ---------------------------------------------------------------- hostile files

def xlsx_shared_string_bomb() -> bytes:
    """1.9 KB on disk: one 300,000-character shared string, referenced by 10,000 cells."""
    cells = "".join(f'<row r="{r}">' + "".join(f'<c r="A{r}" t="s"><v>0</v></c>' for _ in range(100)) + "</row>"
                    for r in range(1, 101))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("xl/sharedStrings.xml", f'<sst><si><t>{"A" * 300_000}</t></si></sst>')
        archive.writestr("xl/worksheets/sheet1.xml", f"<worksheet><sheetData>{cells}</sheetData></worksheet>")
    return buffer.getvalue()


def eml_header_bomb() -> bytes:
    """A 980 KB message whose Subject is 67,000 encoded words and whose To: is 2,000 addresses."""
    subject = " ".join(f"=?utf-8?q?{n % 10}?=" for n in range(67_000))
    to = ", ".join(f"u{n}@example.org" for n in range(2_000))
    return f"From: a@example.org\r\nTo: {to}\r\nSubject: {subject}\r\n\r\nthe body\r\n".encode()


class HostileFileTests(unittest.TestCase):
    def setUp(self):
        holder = tempfile.TemporaryDirectory()
        self.addCleanup(holder.cleanup)
        self.tmp = Path(holder.name)
        self.manifest = write_manifest(self.tmp, extra="")
        self.docs = self.tmp / "docs"
        (self.docs / "notes.txt").write_text("honest notes about the budget review", encoding="utf-8")
        self.out = self.tmp / "out"

    def sweep(self, *stages: str) -> dict:
        for stage in stages:
            result = run_limited(stage, str(self.manifest), "--out", str(self.out))
            self.assertEqual(result.returncode, 0, result.stderr)
        return json.loads((self.out / "extract.summary.json").read_text())

    def listing(self) -> dict:
        return {row["path"]: row for row in map(json.loads, (self.out / "extract" / "listing.jsonl").read_text().splitlines())}

    def test_xlsx_shared_string_bomb_is_capped_as_it_is_produced(self):
        (self.docs / "bomb.xlsx").write_bytes(xlsx_shared_string_bomb())
        self.assertLess((self.docs / "bomb.xlsx").stat().st_size, 4000)
        summary = self.sweep("extract", "sanitize")
        rows = self.listing()
        self.assertEqual((rows["bomb.xlsx"]["status"], rows["bomb.xlsx"]["reason"]), ("skipped", REASON_OUTPUT))
        self.assertEqual(summary["skipped_by_reason"], {REASON_OUTPUT: 1})
        self.assertEqual(rows["notes.txt"]["status"], "extracted")
        sanitized = json.loads((self.out / "sanitize.summary.json").read_text())
        self.assertEqual(sanitized["documents"], 1)

    def test_a_costly_file_is_not_read_again_until_it_changes(self):
        bomb = self.docs / "bomb.xlsx"
        bomb.write_bytes(xlsx_shared_string_bomb())
        self.sweep("extract")
        manifest = __import__("bastion_agent.config.manifest", fromlist=["load"]).load(self.manifest)
        sent = []
        original = WorkerPool.ordered

        def counting(pool, items):
            return original(pool, ((payload, sent.append(call) or call) for payload, call in items))

        with mock.patch.object(WorkerPool, "ordered", counting), clean_env():
            summary = extract.run(manifest, Layout(self.out))
        self.assertEqual([call for call in sent if call is not None], [])  # neither the bomb nor the reused notes
        self.assertEqual(summary["skipped_by_reason"], {REASON_OUTPUT: 1})
        bomb.write_bytes(b"not a zip any more")
        with clean_env():
            summary = extract.run(manifest, Layout(self.out))
        self.assertEqual(summary["skipped_by_reason"], {"damaged": 1})  # changed bytes: read again

    def test_eml_subject_bomb_and_long_to_are_read_in_linear_time_and_memory(self):
        (self.docs / "bomb.eml").write_bytes(eml_header_bomb())
        self.assertLess((self.docs / "bomb.eml").stat().st_size, 1_000_000)
        summary = self.sweep("extract")
        rows = self.listing()
        self.assertEqual(rows["bomb.eml"]["status"], "extracted", rows["bomb.eml"])
        self.assertEqual(summary["extracted"], 2)
        text = (self.out / "extract" / f"{rows['bomb.eml']['key']}.txt").read_text()
        self.assertTrue(text.startswith("Subject: 0123456789012"))  # encoded words joined, as RFC 2047 says
        self.assertIn("u1999@example.org", text)

    def test_unclosed_html_markup_is_read_in_linear_time(self):
        (self.docs / "ends.html").write_bytes(b"<p>kept</p>" + b"</" * 1_000_000)
        (self.docs / "decls.html").write_bytes(b"<p>kept</p>" + b"<!" * 1_000_000)
        # A budget far above what linear parsing needs and far below the old quadratic minutes.
        self.manifest.write_text(self.manifest.read_text().replace('root = "docs"', 'root = "docs"\nbudget_seconds = 60'))
        summary = self.sweep("extract")
        rows = self.listing()
        for name in ("ends.html", "decls.html"):
            self.assertEqual(rows[name]["status"], "extracted", rows[name])
        self.assertEqual(summary["extracted"], 3)

    def test_custom_rule_that_backtracks_fails_its_document_closed_by_rule_id(self):
        (self.docs / "aaa.txt").write_text("a" * 40 + "b", encoding="utf-8")
        text = self.manifest.read_text().replace('root = "docs"', 'root = "docs"\nbudget_seconds = 2')
        self.manifest.write_text(text + "\n[[sanitize.rules]]\nid = \"slow\"\npattern = '(a+)+$'\n")
        self.sweep("extract", "sanitize")
        sanitized = json.loads((self.out / "sanitize.summary.json").read_text())
        self.assertEqual(sanitized["skipped_by_reason"], {f"{REASON_TIME} (rule slow)": 1})
        self.assertEqual(sanitized["documents"], 1)  # the notes; the hostile text is not indexed
        listing = (self.out / "sanitized" / "listing.jsonl").read_text()
        self.assertNotIn("aaa.txt", listing)


# ---------------------------------------------------------------- confinement and special files

class ConfinementTests(unittest.TestCase):
    def setUp(self):
        holder = tempfile.TemporaryDirectory()
        self.addCleanup(holder.cleanup)
        self.tmp = Path(holder.name)
        self.manifest = write_manifest(self.tmp)
        (self.tmp / "docs" / "sub").mkdir()
        (self.tmp / "docs" / "sub" / "a.txt").write_text("inside text", encoding="utf-8")
        (self.tmp / "docs" / "b.txt").write_text("another inside text", encoding="utf-8")
        self.outside = self.tmp / "outside"
        self.outside.mkdir()
        secret = self.outside / "a.txt"
        secret.write_text("OUTSIDE-SECRET-4471", encoding="utf-8")
        secret.chmod(0o600)

    def test_a_folder_swapped_for_a_link_between_walk_and_read_is_not_followed(self):
        real_walk = extract.walk

        def walk_then_swap(root, selection):
            found = real_walk(root, selection)
            (self.tmp / "docs" / "sub").rename(self.tmp / "docs-sub-moved")
            (self.tmp / "docs" / "sub").symlink_to(self.outside, target_is_directory=True)
            return found

        from bastion_agent.config import manifest as manifest_module

        layout = Layout(self.tmp / "out")
        with mock.patch.object(extract, "walk", walk_then_swap), clean_env():
            summary = extract.run(manifest_module.load(self.manifest), layout)
        rows = {row["path"]: row for row in map(json.loads, layout.extract_listing.read_text().splitlines())}
        self.assertEqual((rows["sub/a.txt"]["status"], rows["sub/a.txt"]["reason"]), ("skipped", "unreadable"))
        self.assertEqual(rows["b.txt"]["status"], "extracted")
        self.assertEqual(summary["extracted"], 1)
        for path in layout.root.rglob("*"):
            if path.is_file():
                self.assertNotIn(b"OUTSIDE-SECRET-4471", path.read_bytes(), path)

    def test_a_folder_nested_without_end_is_not_walked_to_the_bottom(self):
        # A chain of nested folders, a file in each: every path, listing row and
        # open from the root grew with the depth, so 20,000 levels (seconds to
        # make) cost the sweep the square of that in time and memory.
        depth = 300
        fd = os.open(self.tmp / "docs", os.O_RDONLY | os.O_DIRECTORY)
        try:
            for level in range(depth):
                os.mkdir("d", dir_fd=fd)
                child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = child
                file_fd = os.open("note.txt", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
                os.write(file_fd, f"level {level + 1}".encode())
                os.close(file_fd)
        finally:
            os.close(fd)
        layout = Layout(self.tmp / "out")
        from bastion_agent.config import manifest as manifest_module

        with clean_env():
            summary = extract.run(manifest_module.load(self.manifest), layout)
        rows = [json.loads(line) for line in layout.extract_listing.read_text().splitlines()]
        read = [row["path"].count("/") for row in rows if row["status"] == "extracted" and row["path"].startswith("d/")]
        deep = [row for row in rows if row["reason"] == "too deep"]
        self.assertEqual(len(deep), 1, [row["path"][-40:] for row in deep])
        self.assertEqual(deep[0]["kind"], "folder")
        self.assertLess(max(read), depth)
        self.assertEqual(len(read), deep[0]["path"].count("/"))  # every file above the cut is read
        self.assertEqual(summary["skipped_by_reason"].get("too deep"), 1)
        self.assertEqual({row["path"] for row in rows if row["status"] == "extracted"} & {"b.txt", "sub/a.txt"},
                         {"b.txt", "sub/a.txt"})

    def test_signature_fifo_does_not_hang_any_command(self):
        os.mkfifo(str(self.manifest) + ".sig")
        result = run_limited("extract", str(self.manifest), "--out", str(self.tmp / "out"), timeout=60)
        self.assertNotEqual(result.returncode, 0)
        self.assertEqual(result.stderr.count("\n"), 1, result.stderr)
        self.assertIn("not a regular file", result.stderr)

    def test_manifest_fifo_does_not_hang(self):
        fifo = self.tmp / "fifo.toml"
        os.mkfifo(fifo)
        result = run_limited("extract", str(fifo), "--out", str(self.tmp / "out"), timeout=60)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("not a regular file", result.stderr)


# ---------------------------------------------------------------- --out and temporary files

class OutFolderTests(unittest.TestCase):
    def setUp(self):
        holder = tempfile.TemporaryDirectory()
        self.addCleanup(holder.cleanup)
        self.tmp = Path(holder.name)
        self.manifest = write_manifest(self.tmp)
        (self.tmp / "docs" / "a.txt").write_text("some text to index", encoding="utf-8")

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return run_limited(*args)

    def test_a_shared_1777_folder_keeps_its_mode(self):
        shared = self.tmp / "shared"
        shared.mkdir()
        shared.chmod(0o1777)
        result = self.cli("extract", str(self.manifest), "--out", str(shared))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(stat.S_IMODE(shared.stat().st_mode), 0o1777)
        self.assertEqual(stat.S_IMODE((shared / "extract").stat().st_mode), 0o700)
        self.assertTrue((shared / OUT_MARKER).is_file())

    @unittest.skipUnless(os.geteuid() == 0, "making a folder that another user owns takes root")
    def test_folders_another_user_made_are_refused_and_get_nothing(self):
        shared = self.tmp / "shared"  # a 1777 folder, where anyone may make extract/ before the first run
        shared.mkdir()
        shared.chmod(0o1777)
        planted = shared / "extract"
        foreign = self.tmp / "foreign"  # an --out that is someone else's
        for folder in (planted, foreign):
            folder.mkdir()
            folder.chmod(0o777)
            os.chown(folder, 65534, 65534)
        for out, watched in ((shared, planted), (foreign, foreign)):
            with self.subTest(out=out.name):
                result = self.cli("extract", str(self.manifest), "--out", str(out))
                self.assertEqual(result.returncode, 4, result.stderr)
                self.assertEqual(result.stderr.count("\n"), 1, result.stderr)
                self.assertIn("belongs to another user (uid 65534)", result.stderr)
                self.assertEqual(os.listdir(watched), [])

    def test_out_dot_in_a_project_folder_is_refused_and_untouched(self):
        project = self.tmp / "project"
        project.mkdir()
        (project / "main.c").write_text("int main(void) { return 0; }\n")
        project.chmod(0o755)
        result = run_limited("extract", str(self.manifest), "--out", str(project))
        self.assertNotEqual(result.returncode, 0)
        self.assertEqual(result.stderr.count("\n"), 1, result.stderr)
        self.assertIn("not a bastion output folder", result.stderr)
        self.assertEqual(sorted(os.listdir(project)), ["main.c"])
        self.assertEqual(stat.S_IMODE(project.stat().st_mode), 0o755)

    def test_an_output_folder_of_an_earlier_version_is_recognised(self):
        old = self.tmp / "old"
        (old / "extract").mkdir(parents=True)
        (old / "extract.summary.json").write_text("{}")
        result = self.cli("extract", str(self.manifest), "--out", str(old))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue((old / OUT_MARKER).is_file())

    def test_stale_temp_files_of_a_killed_sanitize_are_removed(self):
        out = self.tmp / "out"
        for stage in ("extract", "sanitize"):
            self.assertEqual(self.cli(stage, str(self.manifest), "--out", str(out)).returncode, 0)
        leftovers = [out / "sanitized" / ".0123.txt.k2j3h4.tmp", out / ".sanitize.summary.json.x1y2.tmp"]
        for path in leftovers:
            path.write_text("half-written")
        self.assertEqual(self.cli("sanitize", str(self.manifest), "--out", str(out)).returncode, 0)
        for path in leftovers:
            self.assertFalse(path.exists(), path)


# ---------------------------------------------------------------- serve

class ServeHostileTests(StoreCase):
    def setUp(self):
        from bastion_agent.serving.test_serve import start

        self.server = start(self.store, self)
        self.url = self.server.url

    def test_http_09_request_gets_a_status_line_and_security_headers(self):
        from bastion_agent.serving.test_serve import raw_exchange, status_of

        raw = raw_exchange(self.url, b"GET /search?q=x\r\n\r\n")
        self.assertTrue(raw.startswith(b"HTTP/1.0 400 "), raw[:80])
        self.assertIn(b"X-Content-Type-Options: nosniff", raw)
        self.assertEqual(status_of(raw), 400)

    def test_lone_surrogate_in_the_query_is_a_400(self):
        from bastion_agent.serving.test_serve import request

        status, _, answer = request(self.url, path="/search?q=%ED%A0%80")
        self.assertEqual(status, 400, answer)
        status, _, answer = request(self.url, "POST", "/search", b'{"query": "\\ud800 budget"}',
                                    {"Content-Type": "application/json"})
        self.assertEqual(status, 400, answer)

    def test_duplicate_json_keys_are_a_400(self):
        from bastion_agent.serving.test_serve import request

        status, _, answer = request(self.url, "POST", "/search", b'{"query": "flour", "query": "secret"}',
                                    {"Content-Type": "application/json"})
        self.assertEqual(status, 400)
        self.assertIn("more than once", answer["error"])

    def test_hundreds_of_idle_sockets_do_not_make_hundreds_of_threads(self):
        from urllib.parse import urlsplit

        from bastion_agent.serving.test_serve import request

        parts = urlsplit(self.url)
        before = threading.active_count()
        idle = []
        try:
            for _ in range(300):
                idle.append(socket.create_connection((parts.hostname, parts.port), timeout=5))
            # every connection has been accepted (or refused) once a request gets its answer
            status, _, _ = request(self.url, path="/healthz")
            self.assertIn(status, (200, 503))
            self.assertLessEqual(threading.active_count() - before, serve.MAX_CONNECTIONS + 2)
        finally:
            for sock in idle:
                sock.close()
        status, _, _ = request(self.url, path="/healthz")
        deadline_status = status
        for _ in range(100):
            if deadline_status == 200:
                break
            import time

            time.sleep(0.05)
            deadline_status, _, _ = request(self.url, path="/healthz")
        self.assertEqual(deadline_status, 200)


if __name__ == "__main__":
    unittest.main()


# ---------------------------------------------------------------- what reaches the user's terminal

class TerminalOutputTests(unittest.TestCase):
    """A file's name or text printed raw could drive the terminal of whoever reads the report
    or searches: set its title, clear the screen over the lines before, write the clipboard
    (OSC 52), reorder what is shown (bidi controls)."""

    CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e")

    def test_the_report_shows_file_names_without_control_characters(self):
        with tempfile.TemporaryDirectory() as holder:
            tmp = Path(holder)
            manifest = write_manifest(tmp)
            hostile = "x\x1b]0;pwned\x07\x1b[2J\x9b2J\u202eevil.bin"
            (tmp / "docs" / hostile).write_bytes(b"\x00\x01binary")
            (tmp / "docs" / "plain.txt").write_text("plain", encoding="utf-8")
            layout = Layout(tmp / "out")
            from bastion_agent.config import manifest as manifest_module

            with clean_env():
                extract.run(manifest_module.load(manifest), layout)
            out = io.StringIO()
            extract.print_report(layout, out, files=True)
        report = out.getvalue()
        self.assertIn("evil.bin", report)
        for control in self.CONTROLS:
            self.assertNotIn(control, report)

    def test_search_hits_show_text_and_paths_without_control_characters(self):
        from bastion_agent.commands.search_cli import format_hits
        from bastion_agent.core.records import Hit

        hit = Hit(score=0.5, doc="0" * 64, idx=0, chunk_id="c" * 64,
                  text="deploy notes \x1b]52;c;cHduZWQ=\x07 then \x1b[8mhidden\x1b[0m \u202eword",
                  paths=["ops/\x1b[2Jnotes.txt"], start=0, end=10, relevance=50)
        shown = format_hits([hit])
        self.assertIn("deploy notes", shown)
        self.assertIn("notes.txt", shown)
        for control in self.CONTROLS:
            self.assertNotIn(control, shown)
