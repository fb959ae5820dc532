"""``token add NAME --groups G,… | list | revoke NAME``: manage the tokens file serve accepts.

The file is ``BASTION_SERVE_TOKENS`` (``serving/tokens.py`` says what it
holds and how serve reads it). ``add`` prints the new token once, alone on
stdout, so ``TOKEN=$(bastion-agent token add …)`` captures exactly it; the
file keeps only its hash, so a lost token is revoked and added again, never
recovered. Every change rewrites the file atomically (0600) under a lock on
its folder, so two changes at once never lose one another.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import sys
from pathlib import Path

from bastion_agent.core.errors import ConfigError
from bastion_agent.serving import tokens


def add_token_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (f"Manage the named tokens of serve and `mcp --http`, in the file {tokens.TOKENS_ENV} names "
                          "(created 0600 by the first add; only hashes are stored).")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="make a token for NAME with its groups; prints the token once, alone on stdout")
    add.add_argument("name", help="the token's name (lowercase letters, digits, '-', '_'), shown in the audit log")
    add.add_argument("--groups", required=True, help="the groups it may search, comma-separated: hr,staff")
    add.add_argument("--reader", help="the PostgreSQL reader role `serve --remote` reads as for this token")
    listing = actions.add_parser("list", help="names, groups, reader and creation time (never a token or hash)")
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    revoke = actions.add_parser("revoke", help="remove NAME's token; serve refuses it at the next request")
    revoke.add_argument("name")


def run_token(args: argparse.Namespace) -> int:
    path = tokens.required_tokens_path()
    if args.action == "add":
        print(add_token(path, args.name, tokens.group_list(args.groups), args.reader), flush=True)
        print(f"bastion_agent token: added {args.name} (groups {','.join(tokens.group_list(args.groups))}); "
              "the token above is shown only this once", file=sys.stderr)
    elif args.action == "revoke":
        revoke_token(path, args.name)
        print(f"bastion_agent token: revoked {args.name}", file=sys.stderr)
    else:
        entries = tokens.read_tokens(path) if path.exists() else []
        print(format_entries(entries, args.json))
    return 0


def add_token(path: Path, name: str, groups: tuple[str, ...], reader: str | None = None) -> str:
    """Store a new token's hash under ``name``; return the token (the only time it exists in clear)."""
    name = tokens.token_name(name)
    if name == tokens.SINGLE_TOKEN_NAME:
        raise ConfigError(f"the name {name!r} is {tokens.SINGLE_TOKEN_ENV}'s; choose another")
    if reader is not None:
        reader = tokens.reader_name(reader)
    with locked_folder(path):
        entries = tokens.read_tokens(path) if path.exists() or path.is_symlink() else []
        if any(entry.name == name for entry in entries):
            raise ConfigError(f"a token named {name!r} exists already; revoke it first, or choose another name")
        token = tokens.new_token()
        entries.append(tokens.TokenEntry(name, tokens.hash_token(token), groups, reader, tokens.now_utc()))
        tokens.write_tokens(path, entries)
    return token


def revoke_token(path: Path, name: str) -> None:
    with locked_folder(path):
        entries = tokens.read_tokens(path)
        kept = [entry for entry in entries if entry.name != name]
        if len(kept) == len(entries):
            known = ", ".join(entry.name for entry in entries[:20]) or "none"
            raise ConfigError(f"no token named {name[:70]!r} (known: {known})")
        tokens.write_tokens(path, kept)


@contextlib.contextmanager
def locked_folder(path: Path):
    """An exclusive lock on the file's folder (created 0700 when missing) for one read-change-write."""
    from bastion_agent.core.layout import ensure_private_dir

    folder = Path(path).parent
    try:
        if not folder.is_dir():
            ensure_private_dir(folder)
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        raise ConfigError(f"{tokens.TOKENS_ENV} {path}: cannot use its folder ({exc.strerror or exc})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def format_entries(entries: list[tokens.TokenEntry], as_json: bool) -> str:
    rows = [{"name": e.name, "groups": list(e.groups), "reader": e.reader, "created": e.created} for e in entries]
    if as_json:
        return json.dumps(rows, indent=2)
    if not rows:
        return "no tokens"
    width = max(len(row["name"]) for row in rows)
    return "\n".join(f"{row['name']:<{width}}  groups {','.join(row['groups'])}  reader {row['reader'] or '-'}  "
                     f"created {row['created'] or '-'}" for row in rows)
