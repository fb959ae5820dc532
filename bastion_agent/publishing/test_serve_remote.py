"""``serve --remote`` end to end: named tokens read the central index as their PostgreSQL reader roles.

Two bastions sweep real folders whose ``[access]`` rules label ``hr/**`` and
``eng/**``, and publish; an administrator makes a gateway and two readers
(``admin add-gateway``, ``admin add-searcher --groups … --gateway``); a
tokens file maps one named token to each reader (``token add NAME --groups
G --reader ROLE``); serve runs with ``--remote`` and the gateway as
``BASTION_PUBLISH_DSN``. Every request goes over HTTP, as a client's would.
"""

from __future__ import annotations

import io
import json
import unittest
import urllib.parse
from pathlib import Path

from bastion_agent.core import audit
from bastion_agent.core.errors import BastionError
from bastion_agent.core.layout import Layout
from bastion_agent.serving import serve_settings
from bastion_agent.testing import publish_case
from bastion_agent.testing.publish_case import PublishCase, query
from bastion_agent.testing.testsupport import clean_env, run_cli, write_manifest

HR = {"hr/salary.txt": "Salary review for the design team: each raise is approved by the board after the annual review.",
      "hr/leave.txt": "The parental leave policy grants sixteen weeks; requests reach the people office before review.",
      "hr/hearing.txt": "Disciplinary hearing notes are kept by the people office and the council reviews them."}
ENG = {"eng/keys.txt": "Rotate the backup encryption keys every month with the vault tool and log each rotation.",
       "eng/deploy.txt": "Code review happens before every deploy; the release manager signs off when tests pass.",
       "eng/cache.txt": "The build server caches compiled artefacts for a week; clear it when the compiler changes."}
ACCESS = """
[access]
default = ["staff"]

[[access.rules]]
paths = ["hr/**"]
groups = ["hr"]

[[access.rules]]
paths = ["eng/**"]
groups = ["eng"]
"""
MODES = ("vector", "keyword", "hybrid")
QUERY = "review salary board keys deploy compiler"


setUpModule, tearDownModule = publish_case.setUpModule, publish_case.tearDownModule  # one throw-away server for the module


class SweptBastion:
    """A bastion whose documents are real files, labelled by its manifest's ``[access]`` rules, swept and published."""

    def __init__(self, folder: Path, name: str, stub, dsn: str):
        self.name = name
        self.manifest_path = write_manifest(folder, size=8, overlap=2,
                                            extra=f'\n[publish]\nbastion = "{name}"\n{ACCESS}')
        for relative, text in (HR | ENG).items():
            path = folder / "docs" / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"{text} Filed by {name}.\n", encoding="utf-8")
        self.layout = Layout(folder / "out")
        with clean_env(EMBED_URL=stub.url, BASTION_PUBLISH_DSN=dsn):
            for argv in (("sweep",), ("publish",)):
                code, _, err = run_cli(*argv, str(self.manifest_path), "--out", str(self.layout.root))
                assert code == 0, err


class ServeRemoteCase(PublishCase):
    def setUp(self):
        super().setUp()
        self.bastions = [SweptBastion(self.tmp / name, name, self.stub, self.dsn) for name in ("fs-01", "fs-02")]
        query(self.dsn, "ANALYZE bastion_agent.windows; ANALYZE bastion_agent.documents")
        self.gateway, self.hr, self.eng = self.new_role("gw"), self.new_role("hr"), self.new_role("eng")
        self.admin("add-gateway", self.gateway, stdin="gateway-password\n")
        self.admin("add-searcher", self.hr, "--groups", "hr", "--gateway", self.gateway)
        self.admin("add-searcher", self.eng, "--groups", "eng", "--gateway", self.gateway)
        self.gateway_dsn = publish_case.SERVER.dsn(user=self.gateway, password="gateway-password",
                                                   dbname=self.database)
        self.tokens_path = self.tmp / "tokens.json"
        self.hr_token = self.token("add", "hr-portal", "--groups", "hr", "--reader", self.hr)
        self.eng_token = self.token("add", "eng-wiki", "--groups", "eng", "--reader", self.eng)
        self.manifest_path, self.layout = self.bastions[0].manifest_path, self.bastions[0].layout

    def admin(self, *args: str, stdin: str = "") -> None:
        from unittest import mock

        with clean_env(BASTION_ADMIN_DSN=self.super_dsn), mock.patch("sys.stdin", io.StringIO(stdin)):
            code, _, err = run_cli("admin", *args)
        self.assertEqual(code, 0, err)

    def token(self, *args: str) -> str:
        with clean_env(BASTION_SERVE_TOKENS=str(self.tokens_path)):
            code, out, err = run_cli("token", *args)
        self.assertEqual(code, 0, err)
        return out.strip()

    def start(self, **settings):
        """serve --remote, with the gateway as BASTION_PUBLISH_DSN, on a free loopback port for the rest of the test."""
        from bastion_agent.config.manifest import load
        from bastion_agent.embedding.client import EndpointConfig
        from bastion_agent.publishing import remote_search
        from bastion_agent.serving import serve

        with clean_env(BASTION_PUBLISH_DSN=self.gateway_dsn):
            manifest = load(self.manifest_path)
            index = remote_search.open_index(manifest)
        self.addCleanup(index.close)
        self.log = io.StringIO()
        values = {"port": 0, "reload_check_seconds": 3600.0, "tokens_file": self.tokens_path, **settings}
        server = serve.build_server(manifest, self.layout, serve_settings.ServeSettings(**values), self.log,
                                    endpoint=EndpointConfig(url=self.stub.url), remote=index)
        running = serve.RunningServer(server).__enter__()
        self.addCleanup(running.__exit__, None, None, None)
        return running

    def get(self, running, path: str, token: str | None):
        from bastion_agent.testing.serve_store import request

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return request(running.url, path=path, headers=headers)

    def search(self, running, token: str | None, text: str = QUERY, mode: str = "hybrid", k: int = 3):
        return self.get(running, "/search?" + urllib.parse.urlencode({"q": text, "mode": mode, "k": k}), token)

    def windows_of(self, group: str) -> set[tuple[str, str]]:
        """(bastion, chunk_id) of every central window labelled ``group``, read as the owner."""
        return set(query(self.dsn, "SELECT bastion, chunk_id FROM bastion_agent.windows WHERE %s = ANY(groups)",
                         (group,)))

    def audit_rows(self) -> list[dict]:
        if not self.layout.audit_log.exists():
            return []
        return [json.loads(line) for line in self.layout.audit_log.read_text(encoding="utf-8").splitlines()]


class ServeRemoteReaderTests(ServeRemoteCase):
    def test_the_labels_of_the_access_rules_reach_the_central_rows(self):
        rows = query(self.dsn, "SELECT DISTINCT bastion, groups FROM bastion_agent.documents")
        self.assertEqual({(b, tuple(g)) for b, g in rows}, {(b, (g,)) for b in ("fs-01", "fs-02") for g in ("eng", "hr")})

    def test_two_tokens_get_disjoint_hits_in_every_mode_k_of_their_own(self):
        running = self.start()
        hr_windows, eng_windows = self.windows_of("hr"), self.windows_of("eng")
        self.assertFalse(hr_windows & eng_windows)
        for mode in MODES:
            with self.subTest(mode=mode):
                answers = {}
                for name, token in (("hr", self.hr_token), ("eng", self.eng_token)):
                    status, _, body = self.search(running, token, mode=mode, k=3)
                    self.assertEqual(status, 200, body)
                    answers[name] = {(hit["bastion"], hit["chunk_id"]) for hit in body["hits"]}
                    self.assertEqual(len(body["hits"]), 3, "k of its own when there are k")
                self.assertLessEqual(answers["hr"], hr_windows)
                self.assertLessEqual(answers["eng"], eng_windows)
                status, _, body = self.search(running, self.hr_token, mode=mode, k=100)
                self.assertEqual(status, 200)
                found = {(hit["bastion"], hit["chunk_id"]) for hit in body["hits"]}
                self.assertLessEqual(found, hr_windows)
                self.assertEqual({bastion for bastion, _ in found}, {"fs-01", "fs-02"}, "both bastions answer")
                if mode != "keyword":  # every window is near by vector: the reader gets all of its own, no other
                    self.assertEqual(found, hr_windows)

    def test_a_query_aimed_at_the_other_groups_document_returns_the_callers_best(self):
        running = self.start()
        aimed = HR["hr/salary.txt"]
        words = " | ".join(f"'{word}'" for word in aimed.lower().replace(";", " ").replace(":", " ").replace(",", " ")
                           .replace(".", " ").split())
        matching = query(self.dsn, "SELECT count(*) FROM bastion_agent.windows WHERE 'eng' = ANY(groups)"
                                   " AND tsv @@ to_tsquery('english', %s)", (words,))[0][0]
        self.assertGreaterEqual(matching, 1)
        for mode in MODES:
            with self.subTest(mode=mode):
                status, _, body = self.search(running, self.eng_token, aimed, mode, 3)
                self.assertEqual(status, 200)
                self.assertEqual(len(body["hits"]), 3 if mode != "keyword" else min(3, matching))
                self.assertLessEqual({(h["bastion"], h["chunk_id"]) for h in body["hits"]}, self.windows_of("eng"))
                self.assertNotIn("Salary", json.dumps(body["hits"]))

    def test_file_dates_reach_each_remote_hit_and_since_before_filter_before_ranking(self):
        import os
        import random
        import time

        # fs-01's files dated by their mtimes, drawn fresh: hr long ago, eng lately; swept (and so published) again
        folder, now = self.tmp / "fs-01" / "docs", time.time()
        when = {name: now - random.randint(400, 800) * 86400 for name in HR} | {
            name: now - random.randint(1, 30) * 86400 for name in ENG}
        for name, moment in when.items():
            os.utime(folder / name, (moment, moment))
        with clean_env(EMBED_URL=self.stub.url, BASTION_PUBLISH_DSN=self.dsn):  # sweep publishes after embed
            code, _, err = run_cli("sweep", str(self.manifest_path), "--out", str(self.layout.root))
            self.assertEqual(code, 0, err)
        summary = json.loads(self.layout.summary_path("publish").read_text())
        self.assertEqual((summary["documents_written"], summary["documents_dates_updated"]), (0, len(when)))
        stamps = {time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(moment))) for moment in when.values()}
        running = self.start()
        cut = time.strftime("%Y-%m-%d", time.gmtime(now - 200 * 86400))
        for mode in MODES:
            with self.subTest(mode=mode):
                status, _, body = self.get(running, "/search?" + urllib.parse.urlencode(
                    {"q": ENG["eng/keys.txt"] + " review", "mode": mode, "k": 3, "before": cut}), self.hr_token)
                self.assertEqual(status, 200, body)
                self.assertTrue(body["hits"])
                if mode != "keyword":  # every window is near by vector: k of the range, since k exist
                    self.assertEqual(len(body["hits"]), 3)
                self.assertEqual({hit["bastion"] for hit in body["hits"]}, {"fs-01"}, "fs-02's files are recent")
                self.assertLessEqual({hit["modified"] for hit in body["hits"]}, stamps)
                status, _, body = self.get(running, "/search?" + urllib.parse.urlencode(
                    {"q": QUERY, "mode": mode, "k": 3, "since": cut}), self.hr_token)
                self.assertEqual(status, 200, body)
                self.assertEqual({hit["bastion"] for hit in body["hits"]}, {"fs-02"}, "fs-01's hr files are old")
                self.assertTrue(all(hit["modified"] >= cut for hit in body["hits"]))
                if mode != "keyword":
                    self.assertEqual(len(body["hits"]), 3)

    def test_concurrent_callers_on_the_shared_connection_never_read_as_each_other(self):
        from concurrent.futures import ThreadPoolExecutor

        running = self.start()
        allowed = {self.hr_token: self.windows_of("hr"), self.eng_token: self.windows_of("eng")}
        jobs = [(token, mode) for _ in range(4) for token in allowed for mode in MODES]

        def one(job):
            token, mode = job
            status, _, body = self.search(running, token, mode=mode, k=5)
            return token, status, {(hit["bastion"], hit["chunk_id"]) for hit in body.get("hits", [])}

        with ThreadPoolExecutor(max_workers=6) as pool:
            answers = list(pool.map(one, jobs))
        for token, status, found in answers:
            self.assertEqual(status, 200)
            self.assertEqual(len(found), 5)
            self.assertLessEqual(found, allowed[token])

    def test_healthz_counts_are_each_callers_own(self):
        running = self.start()
        for token, group, name in ((self.hr_token, "hr", "hr-portal"), (self.eng_token, "eng", "eng-wiki")):
            with self.subTest(caller=name):
                status, _, health = self.get(running, "/healthz", token)
                self.assertEqual(status, 200)
                self.assertEqual((health["caller"], health["chunks"]), (name, len(self.windows_of(group))))
        status, _, health = self.get(running, "/healthz", None)
        self.assertEqual((status, set(health)), (200, {"status"}))

    def test_a_token_without_a_reader_is_refused_remotely_and_told_no_count(self):
        plain = self.token("add", "plain", "--groups", "hr")
        running = self.start()
        for mode in MODES:
            with self.subTest(mode=mode):
                status, _, body = self.search(running, plain, mode=mode)
                self.assertEqual(status, 403)
                self.assertIn("no reader role", json.dumps(body))
                self.assertNotIn("hits", body)
        _, _, health = self.get(running, "/healthz", plain)
        self.assertEqual((health["caller"], health["chunks"]), ("plain", None))
        self.assertEqual([row["caller"] for row in self.audit_rows()], [], "a refused search is no search")

    def test_the_single_token_reads_as_the_gateway_which_reads_nothing(self):
        single = "single-token-for-every-group-0123456789"
        running = self.start(token=single)
        for mode in MODES:
            with self.subTest(mode=mode):
                status, _, body = self.search(running, single, mode=mode)
                self.assertEqual((status, body.get("hits")), (200, []), body)
        _, _, health = self.get(running, "/healthz", single)
        self.assertEqual((health["caller"], health["chunks"]), ("serve-token", 0))
        self.assertNotIn("failed the search", self.log.getvalue())

    def test_a_revoked_token_is_refused_at_the_next_request(self):
        running = self.start()
        self.assertEqual(self.search(running, self.eng_token)[0], 200)
        self.token("revoke", "eng-wiki")
        status, _, body = self.search(running, self.eng_token)
        self.assertEqual(status, 401)
        self.assertNotIn("hits", body)
        self.assertEqual(self.search(running, self.hr_token)[0], 200, "the other token still works")

    def test_each_remote_search_is_one_audit_line_with_the_callers_name(self):
        running = self.start()
        if self.layout.audit_log.exists():
            self.layout.audit_log.unlink()
        expected = []
        for token, name in ((self.hr_token, "hr-portal"), (self.eng_token, "eng-wiki")):
            for mode in MODES:
                status, _, body = self.search(running, token, mode=mode, k=2)
                self.assertEqual(status, 200)
                expected.append((name, "serve", mode, 2, list(dict.fromkeys(h["doc"] for h in body["hits"]))))
        self.search(running, "bst_" + "A" * 43)  # refused: not a search
        key = audit.installation_key(self.layout)  # the log holds ids keyed with the installation's secret
        expected = [(*row[:4], [audit.audit_id(key, doc) for doc in row[4]]) for row in expected]
        rows = self.audit_rows()
        self.assertEqual([(r["caller"], r["via"], r["mode"], r["k"], r["docs"]) for r in rows], expected)
        self.assertNotIn("salary", self.layout.audit_log.read_text(encoding="utf-8"), "no query text by default")


class ServeRemoteTokensFileTests(ServeRemoteCase):
    def wider(self) -> None:
        """A token for hr whose reader also reads eng: the administrator's mistake the check catches."""
        self.admin("add-searcher", self.new_role("unused"), "--groups", "hr", "--gateway", self.gateway)
        self.token("add", "wide", "--groups", "hr", "--reader", self.eng)

    def serve_cli(self) -> tuple[int, str, str]:
        with clean_env(EMBED_URL=self.stub.url, BASTION_PUBLISH_DSN=self.gateway_dsn,
                       BASTION_SERVE_TOKENS=str(self.tokens_path)):
            return run_cli("serve", str(self.manifest_path), "--out", str(self.layout.root), "--remote",
                           "--port", "0")

    def test_a_token_whose_reader_reads_a_group_it_lacks_stops_serve_in_one_line(self):
        self.wider()
        with self.assertRaises(BastionError) as refused:
            self.start()
        self.assertIn("token wide", str(refused.exception))
        code, out, err = self.serve_cli()
        self.assertEqual((code != 0, out), (True, ""))
        self.assertEqual(err.count("\n"), 1, err)
        self.assertIn("also reads group(s) eng", err)
        self.assertNotIn("gateway-password", err)

    def test_a_reader_that_does_not_exist_stops_serve_in_one_line(self):
        self.token("add", "ghost", "--groups", "hr", "--reader", "no_such_reader")
        code, out, err = self.serve_cli()
        self.assertEqual((code != 0, out), (True, ""))
        self.assertEqual(err.count("\n"), 1, err)
        self.assertIn("no_such_reader", err)

    def test_a_reload_that_maps_a_token_to_a_wider_reader_is_refused_not_served(self):
        running = self.start()
        self.assertEqual(self.search(running, self.hr_token)[0], 200)
        self.wider()
        for token in (self.hr_token, self.eng_token):  # every named token refused until the file is right
            status, _, body = self.search(running, token)
            self.assertEqual(status, 401)
            self.assertNotIn("hits", body)
        self.assertIn("also reads group(s) eng", self.log.getvalue())
        self.assertEqual(self.log.getvalue().count("also reads"), 1, "said once")
        self.token("revoke", "wide")
        self.assertEqual(self.search(running, self.hr_token)[0], 200)

    def test_a_reload_naming_a_reader_the_gateway_cannot_check_is_refused_not_a_crash(self):
        running = self.start()
        outsider = self.new_role("outsider")
        self.admin("add-searcher", outsider, "--groups", "hr")  # a reader the gateway may not become
        for name, reader in (("ghost", "no_such_reader"), ("outside", outsider)):
            with self.subTest(reader=name):
                self.token("add", name, "--groups", "hr", "--reader", reader)
                status, _, body = self.search(running, self.hr_token)
                self.assertEqual(status, 401, body)
                self.assertNotIn("hits", body)
                self.assertEqual(self.get(running, "/healthz", None)[0], 200, "the server still answers")
                self.token("revoke", name)
                self.assertEqual(self.search(running, self.hr_token)[0], 200)
        self.assertNotIn("Traceback", self.log.getvalue())
        self.assertNotIn("gateway-password", self.log.getvalue())

    def test_a_reload_while_the_database_is_gone_refuses_the_named_tokens(self):
        running = self.start()
        self.assertEqual(self.search(running, self.hr_token)[0], 200)
        query(publish_case.SERVER.dsn(), f'DROP DATABASE "{self.database}" WITH (FORCE)')
        self.token("add", "late", "--groups", "eng", "--reader", self.eng)  # a change serve cannot check now
        status, _, body = self.search(running, self.hr_token)
        self.assertEqual(status, 401, body)
        self.assertNotIn("hits", body)
        self.assertIn("every named token is refused", self.log.getvalue())
        self.assertNotIn(publish_case.SERVER.password, self.log.getvalue())


if __name__ == "__main__":
    unittest.main()
