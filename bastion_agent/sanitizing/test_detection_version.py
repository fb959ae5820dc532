"""The sanitizer's cache key is a version of what it finds, and a forgotten bump is caught.

The stage sanitizes a text again only when the key changes
(``detection_version.sanitizer_fingerprint``). These tests hold the three
promises of that key: it is the same on every run; an edit that is no
detector's (the stage, the store) leaves it alone; and a rule's pattern, a
detector module's ``DETECTION_VERSION`` or the settings change it.

The golden check guards the one thing a key made of versions cannot see by
itself: a detector whose behaviour changed while nobody bumped its version.
It runs the scanner over a fixed corpus (texts made from templates, so no
secret-looking value is stored in the repository) and compares a digest of
every output with the one recorded in ``testdata/detection_golden.json``
beside what it was recorded under: the detector versions, the rule ids of
the table and a digest of those rules' rows. Same versions and rows, other
outputs: the bump was forgotten. Other versions, an edited or removed
recorded rule: record again, so the pair stays in step::

    python3 -m bastion_agent.sanitizing.test_detection_version --record

Adding a rule needs no record. Every sample has a stable id
(``template:<i>``, ``rule:<rule id>:<keyword>``, ``path:<i>``) and its own
generator seeded by that id, so a new rule's keyword samples shift no other
sample; rules added since the record are disabled by id while the corpus
runs, and samples that were not recorded are not compared. Append new
templates at the end: a template's id is its index.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from bastion_agent.sanitizing import detection_version, rules, scanner, validators
from bastion_agent.sanitizing.scanner import Sanitizer
from bastion_agent.sanitizing.settings import SanitizeSettings, parse_settings

GOLDEN = Path(__file__).with_name("testdata") / "detection_golden.json"
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
SEED = 20261202
RECORD = "python3 -m bastion_agent.sanitizing.test_detection_version --record"
ALPHABETS = {
    "HEX": "0123456789abcdef",
    "B62": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
    "B32": "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567",
    "LOW": "abcdefghijklmnopqrstuvwxyz0123456789",
    "DIG": "0123456789",
    "B64": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/",
}
# Token lengths the rules' shapes ask for (after their keyword), so most token rules find something.
LENGTHS = (16, 20, 24, 32, 36, 40, 43, 64)
SLOT = re.compile(r"\{(HEX|B62|B32|LOW|DIG|B64):(\d+)\}")

# Texts that reach every kind of detector: token shapes, keyed values, the
# context scanner's credential values, numbers with check digits, look-alike
# characters, values split across lines, copies, columns, marked names; and
# their look-alikes that must stay. ``{B62:36}`` is 36 random base-62 characters.
TEMPLATES = (
    "export AWS_ACCESS_KEY_ID=AKIA{B32:16}\naws_secret_access_key = {B64:40}\n",
    "token: ghp_{B62:36} and github_pat_{B62:70}\n",
    "glpat-{B62:20} npm_{B62:36} pypi-AgE{B62:80}\n",
    "slack xoxb-{DIG:12}-{DIG:12}-{B62:24} hook https://hooks.slack.com/services/T{B32:8}/B{B32:8}/{B62:24}\n",
    "stripe sk_live_{B62:24} and whsec_{B62:32}; openai sk-proj-{B62:48}\n",
    "jwt eyJ{B62:20}.eyJ{B62:30}.{B62:40}\n",
    "-----BEGIN RSA PRIVATE KEY-----\n{B64:64}\n{B64:64}\n-----END RSA PRIVATE KEY-----\n",
    "-----BEGIN OPENSSH PRIVATE KEY-----\n{B64:64}\n{B64:40}\n",
    "postgres://app:{B62:16}@db.internal:5432/app\nhttps://user:{LOW:12}@example.org/x\n",
    "Authorization: Bearer {B62:40}\ncurl -u admin:{B62:14} https://api.example.org\n",
    "mysql -u root -p{B62:12} shop\nsshpass -p '{B62:10}' ssh host\nredis-cli -a {B62:16} ping\n",
    "CREATE USER app WITH PASSWORD '{B62:14}';\nALTER USER bob IDENTIFIED BY {B62:12};\n",
    "the password is {LOW:10}. The PIN is 4821.\nDas Passwort lautet {B62:9}\n",
    "db_password = \"{B62:18}\"\nAPI_TOKEN: {B62:32}\nsecret_key => '{B64:30}'\n",
    "password:\n  {B62:20}\nclient_secret: |\n  {B64:40}\n",
    "<add key=\"ConnectionPassword\" value=\"{B62:16}\" />\n",
    "{\"password\": \"{B62:12}\", \"user\": \"alice\", \"token\": null}\n",
    "env PGPASSWORD={B62:12} psql; set pw={B62:10} && run\n",
    "print(\"{B62:24}\")\napi_key = \"{B62:24}\"\n",
    "contact jane.doe@example.com or +41 44 668 18 11 or (415) 555-{DIG:4}\n",
    "card 4111 1111 1111 1111, iban GB82 WEST 1234 5698 7654 32, ssn 219-09-9999\n",
    "SSN: 078051120; NINO AB 12 34 56 C; Steuer-ID 12 345 678 901\n",
    "client 203.0.113.{DIG:2} and 8.8.{DIG:1}.8 and 2001:db8::{HEX:4} and 10.0.0.1\n",
    "from 93.184.216.34 via 2a00:1450:4001:82b::200e, not 192.168.1.20 nor ::1\n",
    "Tel.: 030 {DIG:8}\nMobile: +44 7700 {DIG:6}\nversion 1.2.3.4 build 2024-01-02\n",
    "name,email,phone,ssn,password\nLena Marsh,lena@example.org,555-{DIG:3}-{DIG:4},123-45-{DIG:4},{B62:10}\n",
    "account;card number;phone;ssn;id number;address\nDE44 5001 0517 5407 3249 31;4111111111111111;"
    "+49 30 {DIG:7};219-09-{DIG:4};X{DIG:8};Hauptstr. 5, 10115 Berlin\n",
    "| Name | Date of birth | PIN |\n|---|---|---|\n| Omar Haddad | 1984-03-{DIG:1}1 | {DIG:4} |\n",
    "Dear Mrs Ingrid Bergström,\n\nthank you.\n\nBest regards,\nJonas Vermeulen\n",
    "From: Priya Raman <priya@example.net>\nTo: ops@example.net\nSubject: keys\n",
    "Patient: Thomas Müller\nDOB: 12.04.1979\nAddress: 221B Baker Street, London NW1 6XE\n",
    "pass\u200bword = {B62:14}\n\uff41\uff50\uff49_\uff4b\uff45\uff59 = {B62:24}\n",
    "AKI\u0410{B32:16} and gh\u0440_{B62:36}\n",
    "token = %67%68%70%5F{B62:36} and &#103;hp_{B62:36}\n",
    "ghp_{B62:18}\n{B62:18} continued\npassword = {B62:6}\nnext line\n",
    "AKIA{B32:8}-\n{B32:8} split\n",
    "[attachment: scan_219-09-9999.pdf]\n[attachment: alice@corp.com-cv.pdf]\n",
    "sha256 {HEX:64} commit {HEX:40} uuid {HEX:8}-{HEX:4}-{HEX:4}-{HEX:4}-{HEX:12}\n",
    "password = get_password()\ntoken = ${TOKEN}\nsecret: <your-secret-here>\npassword: changeme\n",
    "key-{HEX:32} mailchimp {HEX:32}-us12 SK{HEX:32} AIza{B62:35}\n",
    "kind: Secret\ndata:\n  password: {B64:24}\n  user: YWRtaW4=\n",
    "machine api.example.org login bob password {B62:12}\n*:5432:*:app:{B62:14}\n",
    "$6$rounds=5000${LOW:8}${B62:86}\n$2b$12${B62:53}\n",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit; 1234567 is a count.\n",
    "",
)
PATHS = (
    "home/alice/scan_219-09-9999.pdf",
    "n/+41 44 668 18 11 call log.txt",
    "password=NamePw998877.txt",
    "docs/jane.doe@example.com/notes.md",
    "src/app/settings.py",
)
CUSTOM = {"disable": ["phone"], "allow": ["jane.doe@example.com"], "allow_patterns": [r"10\.0\.0\.\d+"],
          "rules": [{"id": "employee-id", "pattern": r"EMP-\d{6}", "keywords": ["emp-"]}]}


def _fill(template: str, sample_id: str) -> str:
    """``template`` with its slots filled from a generator seeded by the sample's own id.

    Each sample draws from its own generator, so a sample added or taken away
    (a new rule's keywords) leaves every other sample's text as it was.
    """
    rng = random.Random(f"{SEED}:{sample_id}")
    return SLOT.sub(lambda slot: "".join(rng.choice(ALPHABETS[slot.group(1)]) for _ in range(int(slot.group(2)))),
                    template)


def corpus() -> dict[str, str]:
    """The fixed texts by id: the templates, each keyword of each rule before random tokens, the custom rule's text."""
    texts = {f"template:{index}": _fill(template, f"template:{index}") for index, template in enumerate(TEMPLATES)}
    for rule in rules.RULES:
        for keyword in rule.keywords:
            lines = [f"{keyword}{{{alphabet}:{length}}} x\n" for alphabet in ("B62", "HEX") for length in LENGTHS]
            sample_id = f"rule:{rule.id}:{keyword}"
            texts[sample_id] = _fill("".join(lines) + f"x {keyword} = {{B64:32}}\n", sample_id)
    texts["custom-rule"] = _fill("staff EMP-{DIG:6} host 10.0.0.7 phone +41 44 668 18 11 jane.doe@example.com\n",
                                 "custom-rule")
    return texts


def outputs(recorded_rules: frozenset[str] | None = None) -> dict[str, str]:
    """A short digest per sample id: the corpus under built-in and custom settings, and the paths.

    ``recorded_rules``: the rule ids the golden file was recorded with; every
    other built-in rule is disabled (by id), so a rule added since finds
    nothing here and changes no recorded output.
    """
    added = _added_rules(recorded_rules)
    digests = {}
    for name, settings in (("builtin", SanitizeSettings()), ("custom", parse_settings(CUSTOM))):
        sanitizer = Sanitizer(dataclasses.replace(settings, disable=(*settings.disable, *added)))
        for sample_id, text in corpus().items():
            clean, counts, values = sanitizer.redact_found(text)
            record = [clean, sorted(counts.items()), sorted(values.items())]
            digests[f"{name}/{sample_id}"] = _short_digest(json.dumps(record))
        for index, path in enumerate(PATHS):
            digests[f"{name}/path:{index}"] = _short_digest(sanitizer.redact_path(path))
    return digests


def _added_rules(recorded_rules: frozenset[str] | None) -> tuple[str, ...]:
    """The ids of the built-in rules that were not there when the golden file was recorded."""
    if recorded_rules is None:
        return ()
    added = tuple(rule.id for rule in rules.RULES if rule.id not in recorded_rules)
    # ``disable`` also takes categories and kinds: an id that is one of those would turn off recorded rules too.
    shared = [rule_id for rule_id in added if rule_id in rules.CATEGORIES or rule_id in (rules.SECRET, rules.PERSONAL)]
    if shared:
        raise AssertionError(f"the new rules {shared} are named like a category or a kind; give them another id")
    return added


def _short_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def detector_identity(recorded_rules: frozenset[str]) -> dict:
    """What the golden outputs were made by: the detector versions and the rows of the recorded rules.

    Only the recorded rules' rows (and their categories' kinds) count, in
    table order: a rule added since is disabled while the corpus runs, so
    its row cannot change a recorded output. An edit of a recorded row does.
    """
    kept = [rule for rule in rules.RULES if rule.id in recorded_rules]
    table = {"rules": [dataclasses.asdict(rule) for rule in kept],
             "categories": {rule.category: rules.CATEGORIES.get(rule.category) for rule in kept}}
    canonical = json.dumps(table, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return {"versions": detection_version.detection_versions(),
            "rules": hashlib.sha256(canonical.encode("ascii")).hexdigest()}


def record() -> None:
    rule_ids = frozenset(rule.id for rule in rules.RULES)
    GOLDEN.write_text(json.dumps({
        "detector": detector_identity(rule_ids),
        "rule_ids": sorted(rule_ids),
        "samples": outputs(),
    }, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def golden_mismatch(golden: dict) -> str:
    """Why the outputs do not match the golden file, or "" when they do."""
    recorded_rules = frozenset(golden["rule_ids"])
    removed = sorted(recorded_rules - {rule.id for rule in rules.RULES})
    identity = detector_identity(recorded_rules)
    if removed or golden["detector"] != identity:
        return (f"the detectors' versions or recorded rules changed (removed rules: {removed}; {identity} against the"
                f" recorded {golden['detector']}): record the golden outputs again: {RECORD}")
    digests = outputs(recorded_rules)
    missing = sorted(set(golden["samples"]) - set(digests))
    if missing:
        return f"recorded samples no longer in the corpus ({missing[:20]}): record the golden outputs again: {RECORD}"
    changed = sorted(sample for sample, then in golden["samples"].items() if digests[sample] != then)
    if changed:
        return ("what the detectors find changed without a version bump: bump DETECTION_VERSION in the module whose"
                " behaviour changed (docs/sanitize.md, 'The cache key'), then record again; changed samples: "
                f"{changed[:20]}")
    return ""


class GoldenTests(unittest.TestCase):
    """What the detectors find on the fixed corpus changes only with a version or a recorded rule."""

    def setUp(self):
        self.golden = json.loads(GOLDEN.read_text(encoding="utf-8"))

    def test_the_corpus_reaches_the_detectors(self):
        found = set()
        for text in corpus().values():
            found.update(Sanitizer().redact(text)[1])
        self.assertGreaterEqual(len(found), 40, sorted(found))
        for rule in ("credential-value", "person-name", "password-column", "email", "card-number", "iban"):
            self.assertIn(rule, found)

    def test_outputs_match_the_recorded_digest_under_the_recorded_versions(self):
        self.assertEqual(golden_mismatch(self.golden), "")

    def test_a_new_rule_leaves_the_golden_check_passing(self):
        """A rule added in the middle of the table, whose keyword is in recorded samples, changes none of them."""
        new = rules.Rule("simulated-new-rule", "national-id", r"(?i)password", keywords=("password",))
        with _rules_table((*rules.RULES[:5], new, *rules.RULES[5:])):
            self.assertIn("builtin/rule:simulated-new-rule:password", outputs())
            self.assertEqual(golden_mismatch(self.golden), "")
            enabled = outputs()  # the rule on: it does change recorded samples, so disabling it is what kept them
            self.assertTrue(any(enabled[sample] != then for sample, then in self.golden["samples"].items()))

    def test_an_edit_of_a_recorded_rule_fails(self):
        edited = tuple(dataclasses.replace(rule, pattern=rule.pattern.replace("{36}", "{37}"))
                       if rule.id == "npm-token" else rule for rule in rules.RULES)
        self.assertNotEqual(edited, rules.RULES)
        with _rules_table(edited):
            self.assertIn("record the golden outputs again", golden_mismatch(self.golden))

    def test_a_removed_rule_fails(self):
        with _rules_table(tuple(rule for rule in rules.RULES if rule.id != "npm-token")):
            self.assertIn("removed rules: ['npm-token']", golden_mismatch(self.golden))

    def test_a_detector_change_without_a_bump_fails_and_a_bump_asks_for_a_record(self):
        """A validator that refuses every card number stands for any detector edit the versions do not show."""
        with mock.patch.dict(validators.CHECKS, {"card": lambda match, start, end: False}):
            self.assertIn("without a version bump", golden_mismatch(self.golden))
            with mock.patch.object(validators, "DETECTION_VERSION", validators.DETECTION_VERSION + 1):
                self.assertIn("record the golden outputs again", golden_mismatch(self.golden))


@contextlib.contextmanager
def _rules_table(table: tuple):
    """Run with ``table`` as the built-in rules, where the scanner and this module read them."""
    with mock.patch.object(rules, "RULES", table), mock.patch.object(scanner, "RULES", table):
        yield


class KeyTests(unittest.TestCase):
    """The key changes with what the detectors find, and with nothing else."""

    def test_the_key_is_the_same_in_another_interpreter(self):
        here = detection_version.sanitizer_fingerprint(SanitizeSettings())
        self.assertEqual(_fingerprint_of(PACKAGE_ROOT.parent), here)
        self.assertEqual(detection_version.sanitizer_fingerprint(SanitizeSettings()), here)

    def test_an_edit_of_the_stage_keeps_the_key(self):
        with tempfile.TemporaryDirectory() as folder:
            root = _copy_package(Path(folder))
            before = _fingerprint_of(root)
            stage = root / "bastion_agent" / "sanitizing" / "sanitize.py"
            stage.write_text(stage.read_text(encoding="utf-8").replace("ERASE_LIST = \"erase.jsonl\"",
                                                                         "ERASE_LIST = \"erased.jsonl\"")
                             + "\n\ndef _an_edit():\n    return 1\n", encoding="utf-8")
            self.assertEqual(_fingerprint_of(root), before)

    def test_an_edit_of_a_rule_pattern_changes_the_key(self):
        with tempfile.TemporaryDirectory() as folder:
            root = _copy_package(Path(folder))
            before = _fingerprint_of(root)
            rules = root / "bastion_agent" / "sanitizing" / "rules.py"
            text = rules.read_text(encoding="utf-8")
            self.assertIn("npm_[A-Za-z0-9]{36}", text)
            rules.write_text(text.replace("npm_[A-Za-z0-9]{36}", "npm_[A-Za-z0-9]{37}"), encoding="utf-8")
            self.assertNotEqual(_fingerprint_of(root), before)

    def test_a_validator_version_changes_the_key(self):
        before = detection_version.sanitizer_fingerprint(SanitizeSettings())
        with mock.patch.object(validators, "DETECTION_VERSION", validators.DETECTION_VERSION + 1):
            self.assertNotEqual(detection_version.sanitizer_fingerprint(SanitizeSettings()), before)
        self.assertEqual(detection_version.sanitizer_fingerprint(SanitizeSettings()), before)

    def test_every_detector_version_and_the_settings_change_the_key(self):
        base = SanitizeSettings()
        keys = {detection_version.sanitizer_fingerprint(base)}
        for module in detection_version.DETECTOR_MODULES.values():
            with mock.patch.object(module, "DETECTION_VERSION", module.DETECTION_VERSION + 1):
                keys.add(detection_version.sanitizer_fingerprint(base))
        for settings in (SanitizeSettings(disable=("email",)), SanitizeSettings(allow=("x@y.io",)),
                         SanitizeSettings(allow_patterns=("a+",)), parse_settings(CUSTOM)):
            keys.add(detection_version.sanitizer_fingerprint(settings))
        self.assertEqual(len(keys), 1 + len(detection_version.DETECTOR_MODULES) + 4)

    def test_every_module_the_scanner_runs_has_a_version(self):
        """A new detector module joins the key: whatever the scanner imports is versioned or digested."""
        versioned = set(detection_version.DETECTOR_MODULES)
        digested_as_data = {"rules", "settings"}  # the table and the settings are part of the key as values
        only_constants = {"pages": "the form feed a placeholder keeps",
                          "path_memo": "answers the scanner gave, under the settings and rules that gave them"}
        imported = _sanitizing_imports("scanner")
        self.assertEqual(imported - versioned - digested_as_data - set(only_constants), set())
        self.assertIn("scanner", versioned)


def _sanitizing_imports(start: str) -> set[str]:
    """The ``sanitizing`` modules ``start`` imports, directly or through each other."""
    folder = PACKAGE_ROOT / "sanitizing"
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        source = (folder / f"{name}.py").read_text(encoding="utf-8")
        for found in re.findall(r"from bastion_agent\.sanitizing(?:\.(\w+))? import ([\w, ]+)", source):
            module, names = found
            for candidate in ([module] if module else [n.strip() for n in names.split(",")]):
                if (folder / f"{candidate}.py").is_file() and candidate not in seen:
                    seen.add(candidate)
                    todo.append(candidate)
    return seen


def _copy_package(folder: Path) -> Path:
    """A copy of the package's base and its sanitizing part, to edit without touching the checkout."""
    package = folder / "bastion_agent"
    package.mkdir()
    shutil.copy(PACKAGE_ROOT / "__init__.py", package / "__init__.py")
    for part in ("core", "sanitizing"):
        shutil.copytree(PACKAGE_ROOT / part, package / part, ignore=shutil.ignore_patterns("test_*", "testdata"))
    return folder


def _fingerprint_of(root: Path) -> str:
    """The key of the default settings, computed by a fresh interpreter from the package under ``root``."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]);"
            "from bastion_agent.sanitizing import detection_version, sanitize;"
            "from bastion_agent.sanitizing.settings import SanitizeSettings;"
            "print(sanitize.__file__);"
            "print(detection_version.sanitizer_fingerprint(SanitizeSettings()))")
    env = {**os.environ, "PYTHONHASHSEED": "random", "PYTHONDONTWRITEBYTECODE": "1"}
    answer = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True,
                            env=env, check=True, cwd=root)
    module_file, key = answer.stdout.split()
    if not Path(module_file).is_relative_to(root):  # the checkout's package, not the copy: the test would prove nothing
        raise AssertionError(f"{module_file} is not under {root}")
    return key


if __name__ == "__main__":
    if sys.argv[1:] == ["--record"]:
        record()
        print(f"recorded {GOLDEN}")
    else:
        unittest.main()
