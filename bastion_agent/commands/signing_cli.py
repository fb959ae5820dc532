"""``sign MANIFEST --key KEY`` and ``verify MANIFEST``: the operator's side of signing.

``sign`` is where an operator approves a manifest; ``verify`` shows, before
deploying, what an agent would conclude from the same bytes and the same
trust file (``BASTION_ALLOWED_SIGNERS``), with the same one-line refusals.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bastion_agent.config import signing
from bastion_agent.config.manifest import read_manifest_bytes


def add_sign_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", type=Path, help="the manifest to sign; MANIFEST.sig is written beside it")
    parser.add_argument(
        "--key",
        type=Path,
        required=True,
        metavar="PRIVATE_KEY",
        help="your SSH private key (or its .pub when the private half is in ssh-agent)",
    )


def run_sign(args: argparse.Namespace) -> int:
    raw = read_manifest_bytes(args.manifest)
    target, info = signing.sign_file(args.manifest, raw, args.key)
    print(f"wrote {target} ({info.key_type} key {info.fingerprint}, namespace {signing.NAMESPACE})")
    return 0


def add_verify_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", type=Path, help="the manifest whose MANIFEST.sig to check")


def run_verify(args: argparse.Namespace) -> int:
    raw = read_manifest_bytes(args.manifest)
    status = signing.check_manifest(args.manifest, raw, require_signed=True)
    print(f"{args.manifest}: signed by {status.principal} (key {status.key}, namespace {signing.NAMESPACE})")
    return 0
