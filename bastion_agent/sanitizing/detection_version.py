"""The sanitizer's cache key: a version of what the scanner finds, not the text of its files.

The stage remembers, for each raw text, the document it became and the key
of the sanitizer that made it (``extract/sanitized.jsonl``), and sanitizes
a text again only when that key changes. A key made of source files changed
with every edit of the stage or its I/O, so an upgrade that only touched
those sanitized every installation's documents again. This key changes when,
and only when, what the scanner finds may change:

- a rule of the table (its id, category, pattern, keywords, entropy floor,
  validator name, scope or anchor) or the category table;
- the ``DETECTION_VERSION`` of a detector module, which its developer bumps
  with any change that makes some text sanitize differently
  (``DETECTOR_MODULES``: the scanner's own scan and replacement, the
  validators, the look-alike view, credential values by context, copies,
  columns and names, disguise views and OCR tolerance);
- the manifest's ``[sanitize]`` settings.

A forgotten bump is the risk: ``test_detection_version`` runs every detector
over a fixed corpus and compares what they find with what was recorded under
the same versions (docs/sanitize.md, "The cache key").
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

from bastion_agent.sanitizing import (assigned_values, code_lookups, code_values, columns, command_lines, context,
                                      copies, disguises, keyed_values, names, normalise, recognised, scanner,
                                      signatures, validators)
from bastion_agent.sanitizing.rules import CATEGORIES, RULES
from bastion_agent.sanitizing.settings import SanitizeSettings

# The modules whose code decides what is found and how it is replaced, each with its DETECTION_VERSION.
DETECTOR_MODULES = {
    "scanner": scanner,
    "validators": validators,
    "normalise": normalise,
    "context": context,
    "assigned_values": assigned_values,
    "command_lines": command_lines,
    "copies": copies,
    "columns": columns,
    "names": names,
    "code_values": code_values,
    "code_lookups": code_lookups,
    "keyed_values": keyed_values,
    "signatures": signatures,
    "disguises": disguises,
    "recognised": recognised,
}
# Changes when the key's own recipe changes, so no two recipes can give one key.
KEY_FORMAT = "detection-version-1"


def detection_versions() -> dict[str, int]:
    """Each detector module's ``DETECTION_VERSION``, read now (a test may raise one)."""
    return {name: module.DETECTION_VERSION for name, module in DETECTOR_MODULES.items()}


def rules_digest() -> str:
    """A digest of the rules table and the category table: every field of every built-in rule."""
    table = {"rules": [asdict(rule) for rule in RULES], "categories": CATEGORIES}
    return hashlib.sha256(_canonical(table)).hexdigest()


def sanitizer_fingerprint(settings: SanitizeSettings) -> str:
    """The cache key: equal means the same raw text sanitizes to the same document."""
    identity = {
        "format": KEY_FORMAT,
        "rules": rules_digest(),
        "versions": detection_versions(),
        "settings": asdict(settings),
    }
    return hashlib.sha256(_canonical(identity)).hexdigest()


def _canonical(value) -> bytes:
    """One byte string per value, whatever the interpreter or its hash seed: sorted keys, no spaces."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")
