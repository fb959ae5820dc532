"""serve with named tokens (BASTION_SERVE_TOKENS): who may search, what each caller sees, and the audit log."""

from __future__ import annotations

import json
import os
import stat
import unittest
import urllib.parse

from bastion_agent.commands import token_cli
from bastion_agent.core.errors import ConfigError
from bastion_agent.serving import serve_settings, tokens
from bastion_agent.testing.serve_store import TOKEN, StoreCase, request, start
from bastion_agent.testing.testsupport import TempFolder, clean_env, run_cli


def audit_rows(layout) -> list[dict]:
    if not layout.audit_log.exists():
        return []
    return [json.loads(line) for line in layout.audit_log.read_text(encoding="utf-8").splitlines()]


class NamedTokenTests(TempFolder, StoreCase):
    def setUp(self):
        self.path = self.make_tmp() / "tokens.json"
        self.staff = token_cli.add_token(self.path, "staff-portal", ("staff",))
        self.other = token_cli.add_token(self.path, "other", ("other",))
        self.server = start(self.store, self, tokens_file=self.path, token=TOKEN)
        self.url = self.server.url
        if self.store.layout.audit_log.exists():
            self.store.layout.audit_log.unlink()

    def search(self, query: str, token: str | None, **headers):
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return request(self.url, path="/search?" + urllib.parse.urlencode({"q": query, "k": 2}), headers=headers)

    def test_a_named_token_or_the_single_token_opens_search_and_nothing_else_does(self):
        self.assertEqual(self.search("bread", self.staff)[0], 200)
        self.assertEqual(self.search("bread", TOKEN)[0], 200)
        for token in (None, self.staff[:-1], tokens.hash_token(self.staff), self.staff.upper()):
            with self.subTest(token=token):
                status, answer, value = self.search("bread", token)
                self.assertEqual(status, 401)
                self.assertNotIn("hits", value)

    def test_a_token_in_the_query_string_or_a_cookie_is_not_accepted(self):
        for name in ("token", "access_token", "bearer"):
            with self.subTest(parameter=name):
                path = "/search?" + urllib.parse.urlencode({"q": "bread", name: self.staff})
                status, _, value = request(self.url, path=path)
                self.assertIn(status, (400, 401))
                self.assertNotIn("hits", value)
        for cookie in (f"token={self.staff}", f"bastion-token={self.staff}", f"Authorization=Bearer {self.staff}"):
            with self.subTest(cookie=cookie):
                self.assertEqual(self.search("bread", None, Cookie=cookie)[0], 401)
        status, _, value = request(self.url, path="/search?q=bread", headers={"Authorization": f"Bearer {self.staff}",
                                                                               "Cookie": "x=1"})
        self.assertEqual(status, 200)

    def test_a_revoked_token_is_refused_at_the_next_request(self):
        self.assertEqual(self.search("bread", self.other)[0], 200)
        token_cli.revoke_token(self.path, "other")
        self.assertEqual(self.search("bread", self.other)[0], 401)
        self.assertEqual(self.search("bread", self.staff)[0], 200)
        # nor may it take a slot kept for callers with a token
        self.assertFalse(self.server.server.app.slots.authenticated(f"Bearer {self.other}"))
        self.assertTrue(self.server.server.app.slots.authenticated(f"Bearer {self.staff}"))

    def test_a_tokens_file_opened_to_others_refuses_every_named_token_until_fixed(self):
        os.chmod(self.path, 0o644)
        self.assertEqual(self.search("bread", self.staff)[0], 401)
        self.assertIn("0644", self.log.getvalue())
        os.chmod(self.path, 0o600)
        self.assertEqual(self.search("bread", self.staff)[0], 200)

    def test_healthz_tells_a_stranger_only_the_status(self):
        for header in ({}, {"Authorization": f"Bearer {self.staff}x"}):
            status, _, health = request(self.url, path="/healthz", headers=header)
            self.assertEqual((status, health), (200, {"status": "ok"}))

    def test_healthz_says_who_the_caller_is_and_the_load_time_only_to_every_group(self):
        _, _, health = request(self.url, path="/healthz", headers={"Authorization": f"Bearer {TOKEN}"})
        self.assertEqual((health["chunks"], health["caller"]), (len(self.server.server.service.index), "serve-token"))
        self.assertEqual(health["loaded_at"], self.server.server.service.index.loaded_at)
        _, _, health = request(self.url, path="/healthz", headers={"Authorization": f"Bearer {self.staff}"})
        # the load time moves when any document changes, hidden ones too
        self.assertEqual((health["caller"], health["loaded_at"], health["index_error"]), ("staff-portal", None, None))
        self.assertEqual(health["auth"], "bearer")

    def test_a_token_that_searches_too_fast_gets_429_with_retry_after_and_no_record(self):
        text = self.store.manifest_path.read_text(encoding="utf-8")
        self.addCleanup(self.store.manifest_path.write_text, text, encoding="utf-8")
        self.store.manifest_path.write_text(text + "\n[serve]\nsearches_per_minute = 1\nsearch_burst = 2\n",
                                            encoding="utf-8")
        self.url = start(self.store, self, tokens_file=self.path, token=TOKEN).url
        answers = [self.search("bread", self.staff) for _ in range(4)]
        self.assertEqual([status for status, _, _ in answers], [200, 200, 429, 429])
        status, answer, value = answers[2]
        self.assertTrue(1 <= int(answer.getheader("Retry-After")) <= 60, answer.getheader("Retry-After"))
        self.assertNotIn("hits", value)
        self.assertIn("too many searches", value["error"])
        self.assertEqual(self.search("bread", self.other)[0], 200, "each token has its own budget")
        self.assertEqual([row["caller"] for row in audit_rows(self.store.layout)],
                         ["staff-portal", "staff-portal", "other"], "a refused search is no search")
        self.assertEqual(self.log.getvalue().count("staff-portal spent its searches"), 1)

    def test_each_search_is_one_audit_line_with_the_token_name_and_no_query(self):
        for token, mode in ((self.staff, "keyword"), (TOKEN, "vector"), (self.other, "hybrid")):
            path = "/search?" + urllib.parse.urlencode({"q": "quarterly budget reserve", "k": 3, "mode": mode})
            self.assertEqual(request(self.url, path=path, headers={"Authorization": f"Bearer {token}"})[0], 200)
        self.search("bread", None)  # refused: not a search
        rows = audit_rows(self.store.layout)
        self.assertEqual([(row["caller"], row["via"], row["mode"], row["k"]) for row in rows],
                         [("staff-portal", "serve", "keyword", 3), ("serve-token", "serve", "vector", 3),
                          ("other", "serve", "hybrid", 3)])
        self.assertEqual(stat.S_IMODE(self.store.layout.audit_log.stat().st_mode), 0o600)
        self.assertNotIn("budget", self.store.layout.audit_log.read_text(encoding="utf-8"))
        self.assertTrue(all(row["hits"] == len(row["docs"]) or row["hits"] >= len(row["docs"]) for row in rows))


class LocalCallerTests(StoreCase):
    def test_without_tokens_loopback_serve_answers_the_local_user(self):
        server = start(self.store, self)
        _, _, health = request(server.url, path="/healthz")
        self.assertTrue(health["caller"].startswith("local:"))
        self.assertEqual(health["chunks"], len(server.server.service.index))
        self.assertEqual(request(server.url, path="/search?q=bread")[0], 200)
        self.assertTrue(audit_rows(self.store.layout)[-1]["caller"].startswith("local:"))

    def test_the_local_user_is_not_limited(self):
        text = self.store.manifest_path.read_text(encoding="utf-8")
        self.addCleanup(self.store.manifest_path.write_text, text, encoding="utf-8")
        self.store.manifest_path.write_text(text + "\n[serve]\nsearches_per_minute = 1\nsearch_burst = 1\n",
                                            encoding="utf-8")
        server = start(self.store, self)
        self.assertEqual([request(server.url, path="/search?q=bread")[0] for _ in range(4)], [200] * 4)


class StartTests(TempFolder, StoreCase):
    def test_a_tokens_file_others_can_read_stops_serve_in_one_line(self):
        path = self.make_tmp() / "tokens.json"
        token_cli.add_token(path, "hr", ("hr",))
        os.chmod(path, 0o644)
        with self.assertRaises(ConfigError):
            start(self.store, self, tokens_file=path)
        with clean_env(EMBED_URL=self.stub.url, BASTION_SERVE_TOKENS=str(path)):
            code, out, err = run_cli("serve", self.store.manifest_path, "--out", self.store.layout.root, "--port", "0")
        self.assertEqual((code, out), (2, ""))
        self.assertEqual(err.count("\n"), 1)
        self.assertIn("mode 0644", err)

    def test_a_tokens_file_alone_lets_serve_leave_loopback(self):
        settings = serve_settings.settings_from("0.0.0.0", 0, environ={tokens.TOKENS_ENV: "/nonexistent/tokens.json"})
        self.assertTrue(settings.guarded)
        with self.assertRaisesRegex(ConfigError, "BASTION_SERVE_TOKENS"):
            serve_settings.settings_from("0.0.0.0", 0, environ={})


if __name__ == "__main__":
    unittest.main()
