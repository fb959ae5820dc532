"""The command-line arguments every manifest-driven front end shares.

The CLI, the HTTP server, the MCP server and ``publish`` all take a
manifest, ``--out`` and ``--require-signed`` and open the verified manifest
and its output folder the same way; ``search`` and ``serve`` also take
``--remote``/``--bastion``. They live here, below every front end, so that
no server depends on the command line's module to parse its own arguments.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bastion_agent.config import manifest
from bastion_agent.core.layout import Layout


def add_manifest_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments every manifest-driven command shares."""
    parser.add_argument("manifest", type=Path, help="the manifest (.toml, or .json)")
    parser.add_argument("--out", metavar="DIR", help="output folder (default: .bastion/ beside bastion.toml, .bastion-NAME/ beside NAME.toml)")
    parser.add_argument(
        "--require-signed",
        action="store_true",
        help="refuse a manifest without a valid MANIFEST.sig from a key in BASTION_ALLOWED_SIGNERS",
    )


def load_manifest_and_layout(args: argparse.Namespace):
    """The verified manifest and the output folder a command works in."""
    loaded = manifest.load(args.manifest, require_signed=args.require_signed)
    return loaded, Layout.for_manifest(loaded.path, args.out)


def add_remote_arguments(parser: argparse.ArgumentParser) -> None:
    """``--remote`` and ``--bastion``: search the central PostgreSQL (BASTION_PUBLISH_DSN) instead of vectors.db."""
    parser.add_argument("--remote", action="store_true",
                        help="search every bastion that published to BASTION_PUBLISH_DSN (PostgreSQL + pgvector)")
    parser.add_argument("--bastion", action="append", default=[], metavar="NAME",
                        help="with --remote: only this bastion's windows (repeat for several)")
