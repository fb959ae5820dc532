#!/usr/bin/env python3
"""The peers' own test cases as strings: trufflehog's, Presidio's, gitleaks' and detect-secrets' suites, bastion beside the peers.

``bench/sanitize/peer_suites.py`` scores the sample *files* of CredSweeper and
detect-secrets. Four peers keep cases as test tables in code;
this reads those tables at run time from a checkout given on the command
line (nothing of theirs is copied here) and scores every case:

- **trufflehog** (``--trufflehog DIR``): each detector's
  ``pkg/detectors/**/*_test.go``, the table of its ``Test*_Pattern``
  function. A case whose ``want`` holds strings is a positive, one whose
  ``want`` is empty or ``nil`` a negative. Inputs and wants are Go
  expressions, evaluated by ``go_literals`` (literals, ``+``,
  ``fmt.Sprintf``); a case it cannot evaluate is left out and counted.
- **Presidio** (``--presidio DIR``): the parametrized cases (text, expected
  count, expected positions) of ``presidio-analyzer/tests/test_*_recognizer.py``
  for the families bastion claims (``CLAIMED``); a case expecting at least
  one entity is a positive, its values the expected spans (the whole text
  when the test gives no position), a case expecting none a negative.
- **gitleaks** (``--gitleaks DIR``): the ``tps`` and ``fps`` lists of
  ``cmd/generate/config/rules/*.go``, each element that is a literal string
  (generated samples are left out and counted).
- **detect-secrets** (``--detect-secrets DIR``): every row of every
  ``pytest.mark.parametrize`` table of ``tests/plugins/*_test.py``, expanded
  as pytest expands it (a class's table crossed with its methods'; the
  keyword plugin's generator over file types, each row written under its
  file type's extension). ``py_literals`` evaluates the strings the tables
  build (``.format``, f-strings, ``+``, ``*``, slices, ``textwrap.dedent``)
  from the syntax tree, never importing the tests. A row is a positive when
  ``should_flag``/``should_be_caught`` is true, ``num_results`` above zero,
  ``expected_secret`` set (its value, scored by the span rule) or its table
  has no expectation column (those tables assert a finding on each row);
  otherwise a negative. A positive with no named value counts as removed
  when the text changed. Rows whose text cannot be computed statically (a
  value drawn by ``randint``) and tables that scan no text (verification
  helpers, settings) are left out and counted with the reason.

How a case counts, the same for every tool:

- a positive is **removed** when no run of min(8, len) characters of its
  value survives (the span rule). trufflehog's ``want`` often joins two or
  three parts (an id, its secret, the endpoint); the value is then each
  maximal piece of the want found in the input. The case counts as removed
  when a piece that is no locator (URL, host name, e-mail address) is
  removed, so the credential the detector reports can no longer be put
  together from the text (``recall``), and strictly when every piece is
  (``recall_all_pieces``). gitleaks names no value, so a positive counts as
  removed when the text changed; Presidio gives spans.
- a negative is **falsely flagged** when the text changed at all.
- **by design** (bastion only): a flagged negative whose every changed run of
  characters is random (``random_run``: twelve characters or more, letters
  and digits or both cases, 3 bits a character or more) and has a credential
  word before it on its line (``CREDENTIAL_WORD``: key, token, secret,
  password, auth, bearer...). docs/sanitize.md says why such a value goes
  whatever vendor's shape it lacks; ``by_design`` counts them and
  ``false_flags_without_by_design`` is the rate on the other negatives, beside
  ``false_flags_clean`` (the negatives holding no value the suite labels
  secret elsewhere).
- **floor** (bastion only): ``false_flags_floor`` is the rate left if every
  other flagged negative were kept, that is the flagged negatives that are by
  design or hold a secret the suite's own positives label: how low the false
  flags can go without keeping a key (a labelled key counts when the change
  touched it).

The peers (detect-secrets and CredSweeper from ``--peer-venv``) see every
case as a file of its own and are scored by the line rule: a positive is
found when they report a line holding a piece of its value, a negative
flagged when they report anything. ``--no-peers`` leaves them out.

Prints JSON on stdout and a table on stderr.

Usage: python3 bench/sanitize/peer_cases.py [--trufflehog DIR] [--presidio DIR] [--gitleaks DIR] [--detect-secrets DIR]
       [--peer-venv DIR] [--no-peers] [--code DIR] [--misses N] [--only FAMILY]
"""

from __future__ import annotations

import argparse
import ast
import collections
import ipaddress
import json
import math
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import creddata  # noqa: E402  (puts the measured bastion_agent on the path, honouring --code)
import go_literals  # noqa: E402
import py_literals  # noqa: E402

PIECE = 8
# Presidio's recognizers whose family bastion claims to remove, test file -> family. The others are
# not claimed: names, places and dates need a language model (bastion marks names only by their
# markers), URLs and MAC addresses are not personal data by themselves, crypto wallet addresses are
# public by design, and the national numbers of other countries have no detector here.
CLAIMED = {"test_credit_card_recognizer.py": "credit card", "test_iban_recognizer.py": "IBAN",
           "test_email_recognizer.py": "e-mail", "test_phone_recognizer.py": "phone",
           "test_ip_recognizer.py": "IP address", "test_us_ssn_recognizer.py": "US SSN",
           "test_uk_nino_recognizer.py": "UK NINO", "test_de_tax_id_recognizer.py": "DE tax id"}
NOT_CLAIMED = " (not claimed)"  # a family scored apart, outside the suite's figures
PATTERN_TEST = re.compile(r"^func (Test\w*Pattern\w*)\(", re.M)
RULE_FUNC = re.compile(r"^func (\w+)\(\) \*config\.Rule \{", re.M)


@dataclass
class Case:
    """One test case: its text, the values it holds (positives) or none (negatives)."""
    suite: str
    family: str
    ref: str
    text: str
    values: list[str] = field(default_factory=list)
    positive: bool = False
    by_change: bool = False  # a positive whose value the peer does not name: removed when the text changed
    holds_labelled: bool = False  # a negative holding a value the same suite labels a secret elsewhere
    labelled: list[str] = field(default_factory=list)  # those values
    suffix: str = ".txt"  # the file type the test scans the text as (detect-secrets' keyword plugin cares)


@dataclass
class Loaded:
    cases: list[Case]
    skipped: collections.Counter


def pieces_of(want: str, text: str) -> list[str]:
    """The maximal substrings of ``want`` that ``text`` holds, left to right (at least 4 characters each)."""
    out, i = [], 0
    while i < len(want):
        j = len(want)
        while j - i >= 4 and want[i:j] not in text:
            j -= 1
        if j - i >= 4:
            out.append(want[i:j])
            i = j
        else:
            i += 1
    return out


def pattern_cases(reader: go_literals.Reader, body: tuple[int, int]):
    """(input, want) of each case of a ``Test*_Pattern`` table: keyed ``input:`` and ``want:`` fields."""
    fields: dict[str, object] = {}
    toks, i = reader.toks, body[0]
    while i < body[1] - 1:
        tok = toks[i]
        if tok.kind == "ident" and tok.text in ("name", "input", "want") and toks[i + 1].text == ":":
            if tok.text == "name" and fields:
                fields = {}
            value, i = reader.expr(i + 2)
            fields[tok.text] = value
            if "input" in fields and "want" in fields:
                yield fields.get("input"), fields.get("want")
                fields = {}
            continue
        i += 1


def trufflehog_cases(root: Path) -> Loaded:
    cases, skipped = [], collections.Counter()
    base = root / "pkg" / "detectors"
    for path in sorted(base.rglob("*_test.go")):
        source = path.read_text(encoding="utf-8", errors="replace")
        if "_Pattern" not in source or "integration" in path.name:
            continue
        reader = go_literals.Reader(source)
        family = path.parent.relative_to(base).as_posix()
        starts = [m.start() for m in PATTERN_TEST.finditer(source)]
        for start in starts:
            end = source.find("\nfunc ", start + 1)
            end = len(source) if end < 0 else end
            span = (next(k for k, t in enumerate(reader.toks) if t.at >= start),
                    next((k for k, t in enumerate(reader.toks) if t.at >= end), len(reader.toks)))
            for text, want in pattern_cases(reader, span):
                if not isinstance(text, str) or not isinstance(want, list) or any(
                        not isinstance(w, str) for w in want):
                    skipped["unevaluated"] += 1
                    continue
                values = [p for w in want for p in pieces_of(w, text)]
                if want and not values:
                    skipped["want not in input"] += 1
                    continue
                cases.append(Case("trufflehog", family, f"{path.relative_to(root)}", text, values, bool(want)))
    return Loaded(cases, skipped)


def parametrized(tree: ast.Module):
    """(argument names, each case's values) of every ``pytest.mark.parametrize`` whose cases are literals."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            if not (isinstance(deco, ast.Call) and ast.unparse(deco.func).endswith("mark.parametrize")
                    and len(deco.args) >= 2):
                continue
            try:
                names = [n.strip() for n in ast.literal_eval(deco.args[0]).split(",")]
                rows = ast.literal_eval(deco.args[1])
            except (ValueError, SyntaxError, AttributeError):
                continue
            yield node.name, names, rows


def public_address(value: str) -> bool:
    """An address of the public internet: private, loopback, link-local, documentation and other
    special-use ranges identify no person and are left in text on purpose (docs/sanitize.md)."""
    try:
        address = ipaddress.ip_address(value.split("%")[0].strip("[]"))
    except ValueError:
        return True  # not an address Python reads: keep it claimed rather than excuse a miss
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    elif address.version == 6 and int(address) >> 32 == 0 and int(address) > 1:
        address = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)  # IPv4-compatible (``::10.0.0.1``), RFC 4291
    return address.is_global and not address.is_multicast


def presidio_cases(root: Path) -> Loaded:
    cases, skipped = [], collections.Counter()
    tests = root / "presidio-analyzer" / "tests"
    for name, family in CLAIMED.items():
        path = tests / name
        if not path.is_file():
            skipped[f"no {name}"] += 1
            continue
        for func, names, rows in parametrized(ast.parse(path.read_text(encoding="utf-8"))):
            text_at = next((names.index(n) for n in ("text", "iban") if n in names), None)
            if text_at is None or "expected_len" not in names:
                continue
            spans_at = next((names.index(n) for n in ("expected_positions", "expected_res") if n in names), None)
            for row in rows:
                text, count = row[text_at], row[names.index("expected_len")]
                spans = [s for s in (row[spans_at] if spans_at is not None else ()) if len(s) >= 2]
                values = [text[s[0]:s[1]] for s in spans] if count else []
                fam = family if family != "IP address" or not values or any(
                    public_address(v) for v in values) else "IP address, special-use" + NOT_CLAIMED
                case = Case("presidio", fam, f"{name}::{func}", text, values, count > 0)
                if count and not values:
                    case.values, case.by_change = [text], True
                cases.append(case)
    return Loaded(cases, skipped)


def gitleaks_cases(root: Path) -> Loaded:
    """Each literal element of a rule function's ``tps``/``fps`` lists (``x := []string{...}`` or appends)."""
    cases, skipped = [], collections.Counter()
    rules = root / "cmd" / "generate" / "config" / "rules"
    for path in sorted(rules.glob("*.go")):
        source = path.read_text(encoding="utf-8", errors="replace")
        reader = go_literals.Reader(source)
        funcs = [(m.start(), m.group(1)) for m in RULE_FUNC.finditer(source)]
        for index, (start, func) in enumerate(funcs):
            end = funcs[index + 1][0] if index + 1 < len(funcs) else len(source)
            rule = re.search(r'RuleID:\s*"([^"]+)"', source[start:end])
            family = rule.group(1) if rule else func
            for kind, items in list_literals(reader, start, end):
                for item in items:
                    if not isinstance(item, str):
                        skipped["generated"] += 1
                        continue
                    cases.append(Case("gitleaks", family, f"{path.name}::{func}", item, [],
                                      kind == "tps", by_change=kind == "tps"))
    return Loaded(cases, skipped)


# The arguments of a detect-secrets table that hold the scanned text, and those that say whether it is a secret.
DS_PAYLOAD = ("payload", "line", "file_content")
DS_FLAG = ("should_flag", "should_be_caught")


def ds_scanned(func: ast.FunctionDef, bound: dict, reader: py_literals.Reader):
    """The text a detect-secrets test scans: its payload argument, or the expression it passes as
    ``line=`` built from its arguments (the entropy tables format a quoting template with the secret)."""
    for name in DS_PAYLOAD:
        if name in bound:
            return bound[name]
    for node in ast.walk(func):
        if isinstance(node, ast.keyword) and node.arg == "line" and not isinstance(node.value, ast.Name):
            return reader.value(node.value, bound)
    return None


def ds_expected(bound: dict) -> tuple[bool, list[str]]:
    """(a finding expected, the values the test names): ``expected_secret`` names the value, a flag or a
    count of results only says whether; a table with none of them asserts a finding on every row."""
    if "expected_secret" in bound:
        value = bound["expected_secret"]
        return bool(value), [value] if value else []
    for name in DS_FLAG:
        if name in bound:
            return bool(bound[name]), []
    if "num_results" in bound:
        return bound["num_results"] > 0, []
    return True, []


def detect_secrets_cases(root: Path) -> Loaded:
    """Each row of every ``pytest.mark.parametrize`` table of ``tests/plugins/*_test.py``, expanded as
    pytest expands it (a class's table crossed with its methods', the keyword plugin's generator over
    file types); a row whose text cannot be computed statically is left out with the reason."""
    cases, skipped = [], collections.Counter()
    for path in sorted((root / "tests" / "plugins").glob("*_test.py")):
        family = path.name[:-len("_test.py")]
        for func, names, rows, reader in py_literals.test_tables(ast.parse(path.read_text(encoding="utf-8"))):
            for number, row in enumerate(rows):
                if isinstance(row, py_literals.Unreadable):
                    skipped[f"{path.name}: {row.reason}"] += 1
                    continue
                bound = dict(zip(names, row))
                try:
                    text = ds_scanned(func, bound, reader)
                except py_literals.NotRead as error:
                    text = py_literals.Unreadable(error.reason)
                if not isinstance(text, str):
                    reason = text.reason if isinstance(text, py_literals.Unreadable) else "no scanned text"
                    skipped[f"{path.name}::{func.name}: {reason}"] += 1
                    continue
                positive, values = ds_expected(bound)
                values = [v for v in values if v in text]
                extension = bound.get("file_extension")
                case = Case("detect-secrets", family, f"{path.name}::{func.name}[{number}]", text, values, positive,
                            by_change=positive and not values, suffix=f".{extension}" if extension else ".txt")
                cases.append(case)
    return Loaded(cases, skipped)


def list_literals(reader: go_literals.Reader, start: int, end: int):
    """("tps"|"fps", elements) of every ``tps := []string{…}``, ``tps = append(tps, …)`` in [start, end)."""
    toks = reader.toks
    for k, tok in enumerate(toks):
        if not (start <= tok.at < end) or tok.text not in ("tps", "fps", "falsePositives", "truePositives"):
            continue
        if k + 2 >= len(toks) or toks[k + 1].text not in ("=", ":="):
            continue
        kind = "tps" if tok.text in ("tps", "truePositives") else "fps"
        if toks[k + 2].text == "append":
            reader_items = []
            i = k + 4
            first, i = reader.expr(i)  # the list appended to: the variable itself, or another list taken whole
            if toks[k + 4].text != tok.text:
                reader_items.extend(first if isinstance(first, list) else [None])
            while i < len(toks) and toks[i].text == ",":
                value, i = reader.expr(i + 1)
                if i < len(toks) and toks[i].text == "...":
                    i += 1
                    reader_items.extend(value if isinstance(value, list) else [None])
                else:
                    reader_items.append(value)
            yield kind, reader_items
        elif toks[k + 2].text == "[":
            value, _ = reader.composite(k + 2)
            yield kind, value if isinstance(value, list) else [None]


def mark_labelled(cases: list[Case]) -> None:
    """Flag the negatives that hold a secret of the suite's own positives (8 characters or more, no locator).

    trufflehog reuses one key in a positive and in a negative whose keyword is
    too far from it; gitleaks lists one rule's true positive as another's false
    positive. Such a text is not harmless, so its figure is given apart."""
    marks = {v for c in cases if c.positive for v in (c.values if not c.by_change else [c.text])
             if len(v) >= PIECE and not is_locator(v)}
    for case in cases:
        if not case.positive:
            case.labelled = [mark for mark in marks if mark in case.text]
            case.holds_labelled = bool(case.labelled)


def changes_labelled(case: Case, mask: bytearray) -> bool:
    """Did the change touch a value the suite labels a secret elsewhere (``mark_labelled``)?"""
    for value in case.labelled:
        at = case.text.find(value)
        while at >= 0:
            if any(mask[at:at + len(value)]):
                return True
            at = case.text.find(value, at + 1)
    return False


def survives(text: str, value: str, mask: bytearray) -> bool:
    """Some run of min(PIECE, len) characters of one occurrence of ``value`` in ``text`` is unmasked."""
    run = min(PIECE, len(value))
    at = text.find(value)
    while at >= 0:
        kept = 0
        for p in range(at, at + len(value)):
            kept = kept + 1 if not mask[p] else 0
            if kept >= run:
                return True
        at = text.find(value, at + 1)
    return False


def bastion_masks(cases: list[Case], folder: Path) -> list[bytearray]:
    rows = {case_file(n, c): [] for n, c in enumerate(cases)}
    masks, _, _ = creddata.bastion_masks(rows, folder)
    return [masks[case_file(n, c)] for n, c in enumerate(cases)]


def case_file(n: int, case: Case) -> str:
    """The name a case is written under: its number, and the file type the peer's test gave it, if any."""
    return f"{n:05d}{case.suffix}"


def write_cases(cases: list[Case], folder: Path) -> None:
    for n, case in enumerate(cases):
        (folder / case_file(n, case)).write_bytes(case.text.encode("utf-8", errors="replace"))


LOCATOR = re.compile(r"(?i)^(?:[a-z][a-z0-9+.\-]*://\S*|[^\s@]+@[\w\-]+(?:\.[\w\-]+)+|"
                     r"[\w\-]+(?:\.[\w\-]+)*\.[a-z]{2,}(?::\d+)?(?:/\S*)?)$")


def is_locator(value: str) -> bool:
    """A URL, an e-mail address or a host name: where a credential is used, not the credential.

    trufflehog's ``want`` joins a secret with the endpoint or account it works
    against; that part locates the secret and is no secret itself (a URL
    holding user information is caught by its own rules all the same)."""
    return bool(LOCATOR.match(value.strip()))


def value_lines(text: str, value: str) -> set[int]:
    """The 1-based lines any occurrence of ``value`` spans."""
    lines, at = set(), text.find(value)
    while at >= 0:
        first = text.count("\n", 0, at) + 1
        lines.update(range(first, first + value.count("\n") + 1))
        at = text.find(value, at + 1)
    return lines


@dataclass
class Verdict:
    """What one tool did with one case: broke the credential (removed a piece that is no locator),
    removed all its pieces, changed the text; for a negative bastion changed, whether every change was
    a random value under a credential word (``by_design``)."""
    longest: bool
    every: bool
    changed: bool
    by_design: bool = False
    labelled: bool = False  # for a negative bastion changed, the change touched a key the suite labels secret


# A word that names a credential: a random value after it on its line is removed on purpose.
CREDENTIAL_WORD = re.compile(r"(?i)key|token|secret|pass(?:word|wd)?|pwd|auth|credential|bearer")


def random_run(value: str) -> bool:
    """Twelve characters or more, with letters and digits or both cases, at 3 bits a character or more."""
    value = value.strip()
    if len(value) < 12:
        return False
    has = (any(c.isdigit() for c in value), any(c.islower() for c in value), any(c.isupper() for c in value))
    if sum(has) < 2:
        return False
    counts = collections.Counter(value)
    bits = -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())
    return bits >= 3.0


def changed_runs(mask: bytearray) -> list[tuple[int, int]]:
    runs, at = [], mask.find(1)
    while at >= 0:
        end = mask.find(0, at)
        end = len(mask) if end < 0 else end
        runs.append((at, end))
        at = mask.find(1, end)
    return runs


def by_design(text: str, mask: bytearray) -> bool:
    """Every changed run is random and a credential word stands before it on its line."""
    runs = changed_runs(mask)
    return bool(runs) and all(
        random_run(text[start:end]) and CREDENTIAL_WORD.search(text, text.rfind("\n", 0, start) + 1, start)
        for start, end in runs)


def bastion_verdicts(cases: list[Case], masks: list[bytearray]) -> list[Verdict]:
    out = []
    for case, mask in zip(cases, masks):
        changed = any(mask)
        if not case.positive or case.by_change:
            negative = changed and not case.positive
            out.append(Verdict(changed, changed, changed, negative and by_design(case.text, mask),
                               negative and changes_labelled(case, mask)))
            continue
        kept = [survives(case.text, v, mask) for v in case.values]
        secrets = [k for v, k in zip(case.values, kept) if not is_locator(v)] or kept
        out.append(Verdict(not all(secrets), not any(kept), changed))
    return out


def peer_verdicts(cases: list[Case], reported: dict[str, set[int]]) -> list[Verdict]:
    out = []
    for n, case in enumerate(cases):
        lines = reported.get(case_file(n, case), set())
        if not case.positive or case.by_change:
            out.append(Verdict(bool(lines), bool(lines), bool(lines)))
            continue
        found = [bool(value_lines(case.text, v) & lines) for v in case.values]
        secrets = [f for v, f in zip(case.values, found) if not is_locator(v)] or found
        out.append(Verdict(any(secrets), all(found), bool(lines)))
    return out


def figures(cases: list[Case], verdicts: list[Verdict]) -> dict:
    pos = [(c, v) for c, v in zip(cases, verdicts) if c.positive]
    neg = [(c, v) for c, v in zip(cases, verdicts) if not c.positive]

    def share(part, whole):
        return round(100 * part / whole, 1) if whole else None

    removed = sum(v.longest for _, v in pos)
    flagged = sum(v.changed for _, v in neg)
    clean = [v for c, v in neg if not c.holds_labelled]
    designed = sum(v.by_design for _, v in neg)
    floor = sum(v.changed and (v.by_design or v.labelled) for _, v in neg)
    return {"positives": len(pos), "removed": removed, "recall": share(removed, len(pos)),
            "recall_all_pieces": share(sum(v.every for _, v in pos), len(pos)),
            "negatives": len(neg), "flagged": flagged, "false_flags": share(flagged, len(neg)),
            "clean_negatives": len(clean), "clean_flagged": sum(v.changed for v in clean),
            "false_flags_clean": share(sum(v.changed for v in clean), len(clean)),
            "by_design": designed, "false_flags_without_by_design": share(flagged - designed, len(neg) - designed),
            "false_flags_floor": share(floor, len(neg))}


def per_family(cases: list[Case], verdicts: dict[str, list[Verdict]]) -> dict:
    families = sorted({c.family for c in cases})
    out = {}
    for fam in families:
        idx = [i for i, c in enumerate(cases) if c.family == fam]
        out[fam] = {tool: figures([cases[i] for i in idx], [v[i] for i in idx]) for tool, v in verdicts.items()}
    return out


def peer_runs(cases: list[Case], folder: Path, venv: Path) -> dict[str, list[Verdict] | str]:
    out: dict[str, list[Verdict] | str] = {}
    names = [case_file(n, c) for n, c in enumerate(cases)]
    runs = (("detect_secrets", lambda: creddata.run_detect_secrets(venv, folder, names)),
            ("credsweeper", lambda: creddata.run_credsweeper(venv, folder)))
    for tool, run in runs:
        try:
            out[tool] = peer_verdicts(cases, {k: set(v) for k, v in run().items()})
        except (OSError, subprocess.CalledProcessError, ValueError, KeyError) as error:
            out[tool] = f"{type(error).__name__}: {str(error)[:200]}"
    return out


def longest_value(case: Case) -> str:
    return max(case.values, key=len) if case.values else ""


def examples(cases: list[Case], verdicts: list[Verdict], limit: int) -> dict:
    """Up to ``limit`` kept positives and flagged negatives, one line each (for development)."""
    kept = [f"{c.family}: {c.ref}: {longest_value(c)[:60]!r} in {c.text.strip()[:140]!r}"
            for c, v in zip(cases, verdicts) if c.positive and not v.longest]
    flagged = [f"{c.family}: {c.ref}: {c.text.strip()[:200]!r}" for c, v in zip(cases, verdicts)
               if not c.positive and v.changed]
    return {"kept": kept[:limit], "flagged": flagged[:limit]}


def suite_report(loaded: Loaded, venv: Path, peers: bool, misses: int) -> dict:
    cases = loaded.cases
    mark_labelled(cases)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_cases(cases, folder)
        verdicts: dict[str, list[Verdict]] = {"bastion": bastion_verdicts(cases, bastion_masks(cases, folder))}
        errors = {}
        if peers:
            for tool, result in peer_runs(cases, folder, venv).items():
                if isinstance(result, str):
                    errors[tool] = result
                else:
                    verdicts[tool] = result
    claimed = [i for i, c in enumerate(cases) if not c.family.endswith(NOT_CLAIMED)]
    report = {"cases": len(cases), "left_out": dict(loaded.skipped), "scored": len(claimed),
              "tools": {tool: figures([cases[i] for i in claimed], [v[i] for i in claimed])
                        for tool, v in verdicts.items()}, "errors": errors,
              "per_family": per_family(cases, verdicts)}
    if misses:
        report["examples"] = examples(cases, verdicts["bastion"], misses)
    return report


def table(reports: dict) -> str:
    rows = ["| suite | tool | recall (a secret piece) | recall (all pieces) | false flags | "
            "false flags, negatives holding no labelled secret | by design | false flags without them | floor |",
            "|---|---|---|---|---|---|---|---|---|"]
    for suite, report in reports.items():
        for tool, fig in report["tools"].items():
            rows.append(f"| {suite} | {tool} | {fig['recall']} % ({fig['removed']}/{fig['positives']}) | "
                        f"{fig['recall_all_pieces']} % | {fig['false_flags']} % ({fig['flagged']}/{fig['negatives']}) | "
                        f"{fig['false_flags_clean']} % ({fig['clean_flagged']}/{fig['clean_negatives']}) | "
                        f"{fig['by_design']} | {fig['false_flags_without_by_design']} % | "
                        f"{fig.get('false_flags_floor', '')} % |")
    return "\n".join(rows)


LOADERS = {"trufflehog": (trufflehog_cases, "pkg/detectors"),
           "presidio": (presidio_cases, "presidio-analyzer/tests"),
           "gitleaks": (gitleaks_cases, "cmd/generate/config/rules"),
           "detect_secrets": (detect_secrets_cases, "tests/plugins")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, (_, needs) in LOADERS.items():
        parser.add_argument(f"--{name.replace('_', '-')}", help=f"root of a {name} checkout ({needs}/)")
    parser.add_argument("--peer-venv", default=str(creddata.PEER_VENV))
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--code", help="a checkout whose bastion_agent to measure (read by bench/sanitize/creddata.py)")
    parser.add_argument("--misses", type=int, default=0, help="list N kept positives and flagged negatives per suite")
    parser.add_argument("--only", help="score only the cases of this family (a detector, rule or Presidio family)")
    args = parser.parse_args(argv)
    chosen = {name: getattr(args, name) for name in LOADERS if getattr(args, name)}
    if not chosen:
        print("peer_cases: give --trufflehog DIR, --presidio DIR, --gitleaks DIR and/or --detect-secrets DIR", file=sys.stderr)
        return 2
    reports = {}
    for name, root in chosen.items():
        load, needs = LOADERS[name]
        if not (Path(root) / needs).is_dir():
            print(f"peer_cases: no {needs}/ under {root}", file=sys.stderr)
            return 2
        loaded = load(Path(root))
        if args.only:
            loaded.cases = [c for c in loaded.cases if c.family == args.only]
        reports[name] = suite_report(loaded, Path(args.peer_venv), not args.no_peers, args.misses)
    print(json.dumps({"code": str(Path(creddata.scanner.__file__).resolve().parents[2]), "suites": reports}, indent=2))
    print(table(reports), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
