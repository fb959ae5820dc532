"""The manifest's ``[sanitize]`` table, validated: what the sanitizer may skip and what it adds.

Kept apart from the scanner so that a manifest can be checked (``config``)
without building a sanitizer, and so that each error names the key at fault
in one line before any text is read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bastion_agent.core.errors import ManifestError
from bastion_agent.sanitizing.rules import CATEGORIES, RULES_BY_ID, Rule

SETTINGS_KEYS = ("disable", "allow", "allow_patterns", "rules")
CUSTOM_RULE_KEYS = ("id", "name", "pattern", "keywords", "entropy")
RULE_ID = re.compile(r"[a-z0-9][a-z0-9\-]{0,62}")


@dataclass(frozen=True)
class SanitizeSettings:
    """The manifest's ``[sanitize]`` table, validated.

    ``disable``: rule ids, categories or kinds ("secret", "personal") to turn
    off. ``allow``: exact strings never redacted. ``allow_patterns``: regular
    expressions; a finding that matches one in full is kept. ``rules``: custom
    detectors (category "custom").
    """

    disable: tuple[str, ...] = ()
    allow: tuple[str, ...] = ()
    allow_patterns: tuple[str, ...] = ()
    rules: tuple[Rule, ...] = field(default=())


def parse_settings(raw: dict) -> SanitizeSettings:
    """Validate ``[sanitize]``; raise ``ManifestError`` with one line naming the key."""
    if not isinstance(raw, dict):
        raise ManifestError(f"[sanitize] must be a table; got {type(raw).__name__}")
    for key in raw:
        if key not in SETTINGS_KEYS:
            raise ManifestError(f"[sanitize] unknown key {key!r}; allowed: {', '.join(SETTINGS_KEYS)}")
    custom = tuple(_custom_rule(index, item) for index, item in enumerate(_list(raw, "rules", dict, "tables")))
    seen: set[str] = set()
    for index, rule in enumerate(custom):
        if rule.id in RULES_BY_ID or rule.id in seen:
            raise ManifestError(f"[sanitize] rules[{index}].id {rule.id!r} is already used by another rule; choose another")
        seen.add(rule.id)
    names = set(RULES_BY_ID) | set(CATEGORIES) | {"secret", "personal"} | seen
    disable = tuple(_list(raw, "disable", str, "strings"))
    for index, name in enumerate(disable):
        if name not in names:
            raise ManifestError(
                f"[sanitize] disable[{index}] {name!r} is not a rule id, a category or a kind; categories: "
                f"{', '.join(CATEGORIES)}; kinds: secret, personal (rule ids: see docs/sanitize.md)"
            )
    patterns = tuple(_list(raw, "allow_patterns", str, "strings"))
    for index, pattern in enumerate(patterns):
        _compile(pattern, f"allow_patterns[{index}]")
    return SanitizeSettings(
        disable=disable,
        allow=tuple(_list(raw, "allow", str, "strings")),
        allow_patterns=patterns,
        rules=custom,
    )


def _list(raw: dict, key: str, kind: type, what: str) -> list:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, kind) for item in value):
        raise ManifestError(f"[sanitize] {key} must be a list of {what}; got {value!r}")
    if kind is str and any(not item for item in value):
        raise ManifestError(f"[sanitize] {key} must not contain empty strings")
    return value


def _compile(pattern: str, where: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except (re.error, OverflowError, RecursionError) as exc:
        raise ManifestError(f"[sanitize] {where} is not a valid regular expression: {exc}") from None


def _custom_rule(index: int, item: dict) -> Rule:
    where = f"rules[{index}]"
    for key in item:
        if key not in CUSTOM_RULE_KEYS:
            raise ManifestError(f"[sanitize] {where} unknown key {key!r}; allowed: {', '.join(CUSTOM_RULE_KEYS)}")
    name = item.get("id", item.get("name"))
    if not isinstance(name, str) or not name.strip():
        raise ManifestError(f"[sanitize] {where} needs an id (or name): a short string such as \"employee-id\"")
    rule_id = re.sub(r"[^a-z0-9]+", "-", name.strip().lower()).strip("-")
    if not RULE_ID.fullmatch(rule_id):
        raise ManifestError(f"[sanitize] {where}.id {name!r} must give letters, digits and dashes (at most 63)")
    pattern = item.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise ManifestError(f"[sanitize] {where}.pattern is missing (a regular expression)")
    compiled = _compile(pattern, f"{where}.pattern")
    if compiled.fullmatch(""):
        raise ManifestError(f"[sanitize] {where}.pattern matches the empty string; it must match at least one character")
    keywords = item.get("keywords", [])
    if not isinstance(keywords, list) or not all(isinstance(k, str) and k for k in keywords):
        raise ManifestError(f"[sanitize] {where}.keywords must be a list of non-empty strings; got {keywords!r}")
    entropy = item.get("entropy")
    if entropy is not None and (isinstance(entropy, bool) or not isinstance(entropy, (int, float)) or entropy < 0):
        raise ManifestError(f"[sanitize] {where}.entropy must be a number >= 0 (bits per character); got {entropy!r}")
    return Rule(
        id=rule_id,
        category="custom",
        pattern=pattern,
        keywords=tuple(sorted({k.lower() for k in keywords})),
        entropy=float(entropy) if entropy is not None else None,
    )
