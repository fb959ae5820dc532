#!/usr/bin/env python3
"""What an insider who reads ``public`` and drops files into the swept folder learns of ``hr``.

Three attacks, values fresh each run, through the real stages (the CLI, the
loopback stub model server):

- ``copies``: the victim's ``hr/ops/db.env`` holds ``DB_PASSWORD=<one of N
  guesses>`` and ``hr/letters/exit.txt`` a letter to ``<one of N full
  names>``; the attacker plants ``public/wiki/glossary.txt`` listing every
  guess and name, guess ``i`` written ``i + 1`` times. Recovered *by text*:
  the values whose glossary lines come out redacted. Recovered *by counts*:
  the values told apart by ``sanitize.summary.json`` or the stage line (two
  sweeps whose secrets are different guesses give different counts).
- ``audit``: a document holding ``EMP-<6 digits>`` is swept and searched,
  then a new rule redacts the value (sweep, prune). The attacker holds the
  audit log and the new text; it hashes the new text with each of the 10^6
  values in the placeholder and looks for the result in the log. Printed
  (``keyed_log``): whether one matched, and the seconds spent (to find it,
  or to try all of them); beside it (``plain_id_log``), the same search
  against a log that held the plain old id, as logs did before.
- ``paths``: the same form at ``public/forms-exit-interview.txt`` and at an
  ``hr/dismissals/...`` path; a ``public`` caller searches (vector, keyword,
  hybrid) and MCP-fetches the hit. Printed: the hidden paths it saw.
- ``remote_paths``: the same two files, published to a throw-away
  PostgreSQL (``testing/pgtest``); a reader of ``public`` that logs in runs
  ``search --remote --json`` (vector, keyword, hybrid). Printed: the hidden
  paths and the hidden file's date it saw, ``before`` (the reader function
  ``hit_rows`` as schema migration 10 made it: every path, the document's
  date) and ``after`` (migration 11's), on the same rows in the same run.
  Skipped (with the reason) when no PostgreSQL with pgvector is at hand.

Targets: 0 recovered, no match in the audit log, 0 hidden paths.

Usage: python3 bench/access_leaks.py [--guesses 40] [--only remote_paths]   (about a minute; prints JSON)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import string
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bastion_agent import embed  # noqa: E402
from bastion_agent.config import manifest as manifest_module  # noqa: E402
from bastion_agent.core import audit  # noqa: E402
from bastion_agent.core.layout import Layout, read_jsonl  # noqa: E402
from bastion_agent.embedding.endpoint import EndpointConfig  # noqa: E402
from bastion_agent.serving import mcp_server, tokens  # noqa: E402
from bastion_agent.testing.labelled_docs import HR_PUBLIC_ACCESS as ACCESS  # noqa: E402
from bastion_agent.testing.stub_server import StubServer  # noqa: E402
from bastion_agent.testing.testsupport import clean_env, run_cli, write_manifest  # noqa: E402

SURNAMES = ["Hollis", "Quill", "Marsh", "Thorne", "Vance", "Pryce", "Lowell", "Ashby", "Carver", "Dunmore",
            "Fenwick", "Garrow", "Haldane", "Ingram", "Jessop", "Kendal", "Lytton", "Morrow", "Norcott", "Oakes"]
FIRST = ["Margaret", "Eleanor", "Beatrice", "Josephine", "Harriet", "Florence", "Rosalind", "Winifred"]


def password() -> str:
    """One shape for every guess (only the letters and digits vary): which rule finds a value in hr's own
    text can depend on its symbols, and that count is hr's own; this bench measures what copies give away."""
    body = "".join(random.choice(string.ascii_letters + string.digits) for _ in range(10))
    return random.choice(string.ascii_uppercase) + body + "!" + random.choice(string.digits)


def write_files(root: Path, files: dict[str, str]) -> None:
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def sweep(folder: Path, files: dict[str, str], stub, extra: str = ACCESS, stages=("extract", "sanitize")):
    """The stages over ``files`` in a fresh folder: (layout, summary, stage lines)."""
    write_files(folder / "docs", files)
    manifest, out = write_manifest(folder, extra=extra), folder / "out"
    lines = []
    with clean_env(EMBED_URL=stub.url):
        for stage in stages:
            code, stdout, err = run_cli(stage, manifest, "--out", out)
            if code != 0:
                raise SystemExit(f"{stage} failed: {err.strip()}")
            lines.append(re.sub(r" in [0-9.]+ s$", "", (stdout + err).strip()))
    summary = json.loads((out / "sanitize.summary.json").read_text(encoding="utf-8"))
    return Layout(out), {k: v for k, v in summary.items() if isinstance(v, (int, dict))}, lines


def text_of(layout: Layout, path: str) -> str:
    for row in read_jsonl(layout.sanitized_listing):
        if path in row["paths"]:
            return (layout.sanitized_dir / f"{row['doc']}.txt").read_text(encoding="utf-8")
    raise SystemExit(f"{path} is not in the listing")


def copies_attack(n: int, stub) -> dict:
    guesses = [password() for _ in range(n)]
    names = [f"{random.choice(FIRST)} {random.choice(SURNAMES)}-{random.choice(SURNAMES)}" for _ in range(n)]
    glossary = "".join(f"term {i}: {guesses[i]}\n" * (i + 1) + f"person {i}: {names[i]}\n" for i in range(n))

    def run(index: int):
        with tempfile.TemporaryDirectory() as folder:
            files = {"hr/ops/db.env": f"DB_PASSWORD={guesses[index]}\n",
                     "hr/letters/exit.txt": f"Dear Ms. {names[index]},\n\nyour contract ends on Friday.\n\nHR\n",
                     "public/wiki/glossary.txt": glossary}
            layout, summary, lines = sweep(Path(folder), files, stub)
            public = text_of(layout, "public/wiki/glossary.txt")
            hr_clean = guesses[index] not in text_of(layout, "hr/ops/db.env")
            return public, summary, lines, hr_clean

    first, second = random.sample(range(n), 2)
    public, summary, lines, hr_clean = run(first)
    _, summary2, lines2, _ = run(second)
    redacted_lines = [line for line in public.splitlines() if "[REDACTED" in line]
    by_text = sum(1 for value in (guesses[first], names[first]) if value not in public)
    by_counts = int(summary != summary2 or lines != lines2)
    return {"guesses": n, "recovered_by_text": by_text, "public_lines_redacted": len(redacted_lines),
            "recovered_by_counts": by_counts, "hr_text_still_clean": hr_clean}


def audit_attack(stub) -> dict:
    value = f"{random.randrange(10 ** 6):06d}"
    rule = '\n[[sanitize.rules]]\nid = "employee-id"\npattern = \'EMP-\\d{6}\'\nkeywords = ["emp-"]\n'
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        files = {"badge.txt": f"Badge EMP-{value} was issued to the night shift porter.\n",
                 "bread.txt": "Sourdough bread needs flour, water, salt and a starter.\n"}
        layout, _, _ = sweep(root, files, stub, extra="", stages=("sweep",))
        manifest, out = root / "manifest.toml", root / "out"
        old_doc = next(row["doc"] for row in read_jsonl(layout.sanitized_listing) if row["paths"] == ["badge.txt"])
        with clean_env(EMBED_URL=stub.url):
            for query in ("badge night shift porter", "sourdough bread flour"):
                run_cli("search", manifest, query, "--out", out, "--mode", "keyword", "-k", "1")
            manifest.write_text(manifest.read_text(encoding="utf-8") + rule, encoding="utf-8")
            run_cli("sweep", manifest, "--out", out)
            run_cli("prune", manifest, "--out", out)
        new_doc = next(row["doc"] for row in read_jsonl(layout.sanitized_listing) if row["paths"] == ["badge.txt"])
        template = (layout.sanitized_dir / f"{new_doc}.txt").read_text(encoding="utf-8").replace(
            "[REDACTED:employee-id]", "EMP-{}")
        fields = {doc for record in audit.read_records(layout.audit_log) for doc in record["docs"]}
        after_seconds, after_found = brute_force(template, fields)
        before_seconds, before_found = brute_force(template, {old_doc})  # a log that kept the plain old id
    return {"values": 10 ** 6,
            "keyed_log": {"found": after_found is not None, "seconds": round(after_seconds, 2)},
            "plain_id_log": {"found": before_found == value, "seconds": round(before_seconds, 2)}}


def brute_force(template: str, fields: set[str]) -> tuple[float, str | None]:
    """Hash the text with each 6-digit value; the first whose hash (or a prefix of it) is in ``fields``."""
    lengths = {len(field) for field in fields if re.fullmatch(r"[0-9a-f]{16,64}", field)}
    started = time.perf_counter()
    for candidate in range(10 ** 6):
        digest = hashlib.sha256(template.format(f"{candidate:06d}").encode()).hexdigest()
        if any(digest[:length] in fields for length in lengths):
            return time.perf_counter() - started, f"{candidate:06d}"
    return time.perf_counter() - started, None


def paths_attack(stub) -> dict:
    hidden = "hr/dismissals/" + "".join(random.choice(string.ascii_lowercase) for _ in range(10)) + "-layoffs.txt"
    form = "Exit interview form: reason for leaving, notice period, equipment returned, final pay confirmed.\n"
    with tempfile.TemporaryDirectory() as folder:
        layout, _, _ = sweep(Path(folder), {"public/forms-exit-interview.txt": form, hidden: form,
                                            "public/canteen.txt": "The canteen serves soup on Fridays.\n"},
                             stub, stages=("sweep",))
        with clean_env():
            manifest = manifest_module.load(Path(folder) / "manifest.toml")
        public = frozenset({"public"})
        seen = []
        with clean_env(EMBED_URL=stub.url):
            for mode in ("vector", "keyword", "hybrid"):
                hits = embed.answer(manifest, layout, "exit interview form notice", 5, mode=mode, groups=public).hits
                seen += [path for hit in hits for path in hit.paths]
            tools = mcp_server.BastionTools(manifest, layout, EndpointConfig(url=stub.url))
            caller = tokens.Caller("reader", public)
            found = tools.search({"query": "exit interview form", "k": 5, "mode": "keyword"}, caller)["hits"]
            seen += [path for hit in found for path in hit["paths"]]
            seen += [path for hit in found for path in tools.fetch({"chunk_id": hit["chunk_id"]}, caller)["paths"]]
    return {"paths_seen": len(seen), "hidden_paths_seen": sum(1 for path in seen if path.startswith("hr/"))}


def remote_paths_attack(stub) -> dict:
    """``search --remote`` as a ``public`` reader, with migration 10's ``hit_rows`` and with migration 11's."""
    import os

    from bastion_agent.publishing import schema_dates, schema_paths
    from bastion_agent.testing import pgtest

    reason = pgtest.unavailable_for_tests()
    if reason:
        return {"skipped": reason}
    hidden = "hr/dismissals/" + "".join(random.choice(string.ascii_lowercase) for _ in range(10)) + "-layoffs.txt"
    form = "Exit interview form: reason for leaving, notice period, equipment returned, final pay confirmed.\n"
    server = pgtest.server_for_tests()
    database, reader = f"leaks_{os.getpid()}", f"leaks_public_{os.getpid()}"
    try:
        _sql(server.dsn(), f'CREATE DATABASE "{database}"')
        owner_dsn = server.dsn(dbname=database)
        _sql(owner_dsn, "CREATE EXTENSION IF NOT EXISTS vector")
        with tempfile.TemporaryDirectory() as folder:
            now = time.time()
            files = {"public/forms-exit-interview.txt": form, hidden: form}
            layout, _, _ = sweep(Path(folder), files, stub, extra=ACCESS + '\n[publish]\nbastion = "fs-01"\n',
                                 stages=("sweep",))
            recent = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(now)))  # the HR file is the recent one
            older = now - random.randint(400, 800) * 86400
            os.utime(Path(folder) / "docs" / "public/forms-exit-interview.txt", (older, older))
            with clean_env(EMBED_URL=stub.url, BASTION_PUBLISH_DSN=owner_dsn):
                for stage in ("sweep", "publish"):
                    code, _, err = run_cli(stage, Path(folder) / "manifest.toml", "--out", layout.root)
                    assert code == 0, err
            with clean_env(BASTION_ADMIN_DSN=owner_dsn):
                from unittest import mock
                import io

                with mock.patch("sys.stdin", io.StringIO("leaks-password\n")):
                    code, _, err = run_cli("admin", "add-searcher", reader, "--groups", "public", "--login")
                assert code == 0, err
            reader_dsn = server.dsn(user=reader, password="leaks-password", dbname=database)
            result = {}
            for phase, statement in (("before", schema_dates._hit_rows_sql()),
                                     ("after", schema_paths._rows_sql("hit_rows", True))):
                _sql(owner_dsn, statement)
                seen, dated = [], 0
                for mode in ("vector", "keyword", "hybrid"):
                    with clean_env(EMBED_URL=stub.url, BASTION_PUBLISH_DSN=reader_dsn):
                        code, out, err = run_cli("search", Path(folder) / "manifest.toml", "exit interview form notice",
                                                 "--remote", "--json", "--mode", mode)
                    assert code == 0, err
                    hits = json.loads(out)
                    seen += [path for hit in hits for path in hit["paths"]]
                    dated += sum(1 for hit in hits if (hit.get("modified") or "")[:10] == recent[:10])
                result[phase] = {"paths_seen": len(seen), "hidden_paths_seen": sum(1 for p in seen if p.startswith("hr/")),
                                 "hits_dated_by_the_hidden_file": dated}
            return result
    finally:
        _sql(server.dsn(), f'DROP DATABASE IF EXISTS "{database}"')
        _sql(server.dsn(), f'DROP ROLE IF EXISTS "{reader}"')
        server.stop()


def _sql(dsn: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement)


ATTACKS = ("copies", "audit", "paths", "remote_paths")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--guesses", type=int, default=40)
    parser.add_argument("--only", choices=ATTACKS, help="run this attack alone")
    args = parser.parse_args()
    attacks = {"copies": lambda stub: copies_attack(args.guesses, stub), "audit": audit_attack,
               "paths": paths_attack, "remote_paths": remote_paths_attack}
    with StubServer() as stub:
        result = {name: attack(stub) for name, attack in attacks.items() if args.only in (None, name)}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
