#!/usr/bin/env python3
"""Benchmark of the sanitize stage: recall, kept negatives, throughput.

Reads the labelled corpus in ``../shared/data/secrets/`` (override with
``BASTION_SECRETS_DATA``) and a large prose corpus, the concatenated
documents of ``../shared/data/ir/scifact/docs`` (override with
``BASTION_PROSE_DATA``), and prints one JSON object:

- ``recall``: share of ``secrets.jsonl`` values caught, a value counting as
  caught when no substring of 8 or more of its characters survives in the
  sanitized context (shorter values: when the value itself is gone); overall,
  per family (the corpus's rule prefix) and per corpus rule, with the ids of
  the missed records and which of our rules fired (never a value);
- ``personal``: the same on personal data written here (phones, cards,
  IBANs, SSNs, e-mail and IP addresses), generated from a fixed seed;
- ``negatives``: share of clear (``ambiguous: false``) ``negatives.jsonl``
  texts left byte for byte unchanged, and the ids of those changed;
- ``throughput``: sanitize MB/s on the prose corpus repeated to ``--mb``
  megabytes (best of ``--repeat`` interleaved runs), next to the chunk floor measured in the same run (tokenising
  with ``\\w+|[^\\w\\s]`` and hashing 256-token windows, as the chunk stage
  does), and their ratio; ``throughput_code`` is the same on this project's
  own Python source, dense in the keywords (token, key, password) that wake
  the assignment detectors.

- ``redteam``: recall per family on attacker's forms written here (look-alike
  characters, values split over lines, new credential and personal-data
  forms, key blocks with headers, path names), and ``negatives`` per family;
- ``real``: precision on the hand-labelled findings of real files
  (``bastion_agent/sanitizing/testdata/real_findings.tsv``, rows whose file is absent
  skipped), and ``quarantine``: how many of a fixed sample of
  ``/usr/share/doc`` files extract would quarantine (should be none).

- ``peers``: the peers table of ``bench/sanitize/peers.py``: bastion beside
  detect-secrets on detect-secrets' and gitleaks' own test strings, recall
  and false positives, per family, the misses and the placeholders kept
  (detect-secrets runs from a bench-only venv given by ``--peer-path``; it is
  no dependency of the project);
- ``copies``: the cost of the copies pass (one matcher of 100 and of 10,000
  found values read over the prose corpus);
- ``before_after`` (with ``--baseline DIR``): throughput on prose and source
  code beside another checkout's, in the same run (``bench/sanitize/sanitize_ab.py``),
  as this / baseline.

``--code DIR`` measures another checkout's ``bastion_agent`` (e.g. main's,
for the "before" figures) with this script's data.

Usage: python3 bench/sanitize/sanitize.py [--mb 24] [--repeat 3] [--no-throughput] [--code DIR]
                                 [--peer-path SITE_PACKAGES] [--baseline DIR [--ab-mb 2]]
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import random
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # bench/, beside the package
if "--code" in sys.argv:  # measure another checkout's sanitizer with this script's data
    sys.path.insert(0, str(Path(sys.argv[sys.argv.index("--code") + 1]).resolve()))
else:
    sys.path.insert(0, str(HERE.parent))

from bastion_agent.sanitizing import scanner as sanitize_module  # noqa: E402
from bastion_agent.sanitizing import validators  # noqa: E402
from bastion_agent.sanitizing.scanner import Sanitizer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402  (the peers table: bench/sanitize/peers.py)
import sanitize_ab  # noqa: E402  (throughput beside another checkout: bench/sanitize/sanitize_ab.py)

LABELS = HERE.parent / "bastion_agent" / "sanitizing" / "testdata" / "real_findings.tsv"

DATA = Path(os.environ.get("BASTION_SECRETS_DATA", HERE.parent.parent / "shared" / "data" / "secrets"))
PROSE = Path(os.environ.get("BASTION_PROSE_DATA", HERE.parent.parent / "shared" / "data" / "ir" / "scifact" / "docs"))
TOKEN = re.compile(r"\w+|[^\w\s]")
SURVIVOR = 8


def load(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


PLACEHOLDERS = re.compile(r"\[REDACTED:[a-z0-9\-]+\]")


def caught(value: str, context: str, clean: str) -> bool:
    """No piece of ``value`` of SURVIVOR or more characters is left in ``clean``.

    A piece counts as left when the sanitized text holds more copies of it
    than the context without the value did (``<add key="Password"
    value="CleartextPassword1">`` keeps the key's own "Password"), not
    counting the placeholders' own names (``[REDACTED:rubygems-token]``).
    """
    clean = PLACEHOLDERS.sub("\0", clean)
    rest = context.replace(value, "\0")
    if len(value) < SURVIVOR:
        return clean.count(value) <= rest.count(value)
    pieces = {value[i:i + SURVIVOR] for i in range(len(value) - SURVIVOR + 1)}
    return all(clean.count(piece) <= rest.count(piece) for piece in pieces)


def family(record: dict) -> str:
    rule = record["rule"]
    if record["source"] == "gitleaks":
        return rule.split("-")[0]
    return rule


def recall(sanitizer: Sanitizer, records: list[dict], family_of) -> dict:
    total = collections.Counter()
    hit = collections.Counter()
    by_rule_total = collections.Counter()
    by_rule_hit = collections.Counter()
    fired = collections.Counter()
    misses = []
    for record in records:
        clean, counts = sanitizer.redact(record["context"])
        fired.update(counts)
        ok = caught(record["value"], record["context"], clean)
        fam = family_of(record)
        total[fam] += 1
        by_rule_total[record["rule"]] += 1
        if ok:
            hit[fam] += 1
            by_rule_hit[record["rule"]] += 1
        else:
            misses.append({"id": record["id"], "rule": record["rule"], "fired": sorted(counts)})
    n = len(records)
    return {
        "records": n,
        "caught": sum(hit.values()),
        "recall": round(sum(hit.values()) / n, 4) if n else None,
        "per_family": {f: {"n": total[f], "recall": round(hit[f] / total[f], 4)} for f in sorted(total)},
        "rules_missed": {r: by_rule_total[r] - by_rule_hit[r] for r in sorted(by_rule_total) if by_rule_hit[r] < by_rule_total[r]},
        "misses": misses,
        "our_rules_fired": dict(fired.most_common()),
    }


def negatives(sanitizer: Sanitizer, records: list[dict]) -> dict:
    clear = [r for r in records if not r.get("ambiguous")]
    ambiguous = [r for r in records if r.get("ambiguous")]
    changed = []
    per_family = collections.Counter()
    kept = collections.Counter()
    for record in clear:
        clean, counts = sanitizer.redact(record["text"])
        fam = family(record)
        per_family[fam] += 1
        if clean != record["text"]:
            changed.append({"id": record["id"], "rule": record["rule"], "fired": sorted(counts)})
        else:
            kept[fam] += 1
    ambiguous_kept = sum(1 for r in ambiguous if sanitizer.redact(r["text"])[0] == r["text"])
    return {
        "clear": len(clear),
        "clear_unchanged": len(clear) - len(changed),
        "share_unchanged": round((len(clear) - len(changed)) / len(clear), 4) if clear else None,
        "changed": changed,
        "per_family_kept": {f: round(kept[f] / per_family[f], 4) for f in sorted(per_family) if kept[f] < per_family[f]},
        "ambiguous": len(ambiguous),
        "ambiguous_unchanged": ambiguous_kept,
    }


# --- personal data written here ---------------------------------------------------


def _luhn_complete(prefix: str, length: int, rng: random.Random) -> str:
    body = prefix + "".join(rng.choice("0123456789") for _ in range(length - len(prefix) - 1))
    for check in "0123456789":
        if validators.luhn_ok(body + check):
            return body + check
    raise AssertionError("unreachable")


def _iban(country: str, rng: random.Random) -> str:
    length = validators.IBAN_LENGTHS[country]
    bban = "".join(rng.choice("0123456789") for _ in range(length - 4))
    for check in range(2, 99):
        candidate = f"{country}{check:02d}{bban}"
        if validators.iban_ok(candidate):
            return candidate
    raise AssertionError("unreachable")


def personal_records(seed: int = 7, per_form: int = 25) -> list[dict]:
    """Personal data in the forms people write it, inside short sentences."""
    rng = random.Random(seed)
    digits = lambda n: "".join(rng.choice("0123456789") for _ in range(n))  # noqa: E731
    names = ["anna.keller", "j.smith", "marie-claire.dupont", "o.brien+news", "li_wei", "tkowalski"]
    domains = ["gmail.com", "posteo.de", "acme-corp.co.uk", "mail.univ-lyon.fr", "outlook.com"]
    forms = {
        "email": lambda: f"{rng.choice(names)}{digits(2)}@{rng.choice(domains)}",
        "phone-e164": lambda: f"+{rng.choice(['1', '44', '33', '49', '41', '31'])} {digits(3)} {digits(3)} {digits(4)}",
        "phone-e164-compact": lambda: f"+{rng.choice(['44', '49', '33'])}{digits(10)}",
        "phone-us": lambda: f"({rng.randint(201, 989)}) {rng.randint(200, 999)}-{digits(4)}",
        "phone-us-dashed": lambda: f"{rng.randint(201, 989)}-{rng.randint(200, 999)}-{digits(4)}",
        "phone-fr": lambda: "0" + str(rng.randint(1, 9)) + "".join(" " + digits(2) for _ in range(4)),
        "phone-uk": lambda: f"0{rng.randint(20, 29)} {digits(4)} {digits(4)}",
        "phone-de": lambda: f"0{rng.randint(30, 89)} {digits(8)}",
        "card-visa": lambda: " ".join(re.findall("....", _luhn_complete("4", 16, rng))),
        "card-mastercard": lambda: "-".join(re.findall("....", _luhn_complete(str(rng.randint(51, 55)), 16, rng))),
        "card-amex": lambda: _luhn_complete(rng.choice(["34", "37"]), 15, rng),
        "iban-de": lambda: " ".join(re.findall(".{1,4}", _iban("DE", rng))),
        "iban-fr": lambda: _iban("FR", rng),
        "iban-gb": lambda: " ".join(re.findall(".{1,4}", _iban("GB", rng))),
        "iban-nl": lambda: _iban("NL", rng),
        "phone-us-dots": lambda: f"{rng.randint(201, 989)}.{rng.randint(200, 999)}.{digits(4)}",
        "phone-intl-00": lambda: f"00{rng.choice(['41', '49', '33'])} {digits(2)} {digits(3)} {digits(2)} {digits(2)}",
        "phone-nl-mobile": lambda: f"06-{digits(8)}",
        "card-discover": lambda: "-".join(re.findall("....", _luhn_complete("6011", 16, rng))),
        "card-compact": lambda: _luhn_complete(rng.choice(["4", "51", "3530"]), 16, rng),
        "ssn": lambda: f"{rng.randint(1, 665):03d}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}",
        "ssn-spaced": lambda: f"{rng.randint(1, 665):03d} {rng.randint(1, 99):02d} {rng.randint(1, 9999):04d}",
        "email-subdomain": lambda: f"{rng.choice(names)}@{rng.choice(['mail', 'lab'])}.{rng.choice(['cs', 'bio'])}.uni-{digits(2)}.edu",
        "ipv6-full": lambda: ":".join(f"{rng.randint(0, 65535):04x}" for _ in range(7)).join(["2a02:", ""]),
        "ipv4-public": lambda: f"{rng.choice([23, 51, 81, 145, 185, 212])}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
        "ipv6-public": lambda: f"2a0{rng.randint(0, 9)}:{rng.randint(0, 65535):x}:{rng.randint(0, 65535):x}::{rng.randint(1, 65535):x}",
    }
    templates = [
        "Please contact the customer at {v} before Friday.",
        "{v}",
        "Kontakt: {v}\n",
        "| Jane Roe | {v} | active |",
        '"value": "{v}",',
    ]
    records = []
    for form, make in forms.items():
        for index in range(per_form):
            value = make()
            records.append({
                "id": f"pii-{form}-{index:02d}",
                "rule": form,
                "value": value,
                "context": templates[index % len(templates)].format(v=value),
            })
    return records


# --- the attacker's forms -----------------------------------------------

RT_TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


def redteam_records() -> list[dict]:
    """(family, context, value) in the forms a red team found passing; written here, not real secrets."""
    zw, shy = "\u200b", "\u00ad"
    pem = ("-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,B1ADB6CC4CEDC36D5C42551F5914B46A\n\n"
           + "\n".join("MIICXAIBAAKBgQC7" + "x9Qz" * 12 for _ in range(6)) + "\n-----END RSA PRIVATE KEY-----")
    pgp = ("-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlFgEaw6pIRYJKwYBBAHaRw8BAQdAvWi2kDLr+eajjoU7ddwa78e4qyqhtf9RFbUS\n"
           "TFGNvHAAAP0S/qh/lWtzxC5lfhjz2iNodJkQjlPWvY3w0yDoc5mrFRGhtBRUZXN0\n=Ab12\n-----END PGP PRIVATE KEY BLOCK-----")
    cases = [
        ("lookalike", f"token {RT_TOKEN[:6]}{zw}{RT_TOKEN[6:]} end", RT_TOKEN[7:]),
        ("lookalike", f"token {RT_TOKEN[:10]}{shy}{RT_TOKEN[10:]} end", RT_TOKEN[11:]),
        ("lookalike", f"mail alice.smith{zw}@gmail.com", "gmail.com"),
        ("lookalike", "mail alice.smith\uff20gmail.com", "alice.smith"),
        ("lookalike", "key \uff21\uff2b\uff29\uff21IOSFODNN7EXAMPLE", "IOSFODNN7EXAMPLE"),
        ("lookalike", "key \u0410\u041aIAIOSFODNN7EXAMPLE", "IOSFODNN7EXAMPLE"),
        ("lookalike", "mail alice.smith&#64;gmail.com", "alice.smith"),
        ("lookalike", "mail alice.smith&#x40;gmail.com", "alice.smith"),
        ("lookalike", "mail alice.smith%40gmail.com", "alice.smith"),
        ("lookalike", f"card 4111{zw}1111{zw}1111{zw}1111", "1111"),
        ("split", "card 4111 1111\n1111 1111 exp", "4111 1111"),
        ("split", "aws AKIAIOSF\nODNN7EXAMPLE end", "ODNN7EXAMPLE"),
        ("key-block", pem, "x9Qzx9Qz"),
        ("key-block", pgp, "lFgEaw6pIRYJ"),
        ("key-block", pgp.replace("\n", "\r\n"), "lFgEaw6pIRYJ"),
        ("forms", "machine api.corp.io login deploy password Wq8-Lk2mPz9x", "Wq8-Lk2mPz9x"),
        ("forms", "db.corp.io:5432:billing:app:Pg7Secret99", "Pg7Secret99"),
        ("forms", "mysql -u root -pS3cretPw88 billing", "S3cretPw88"),
        ("forms", "sshpass -p 'Tr0ub4dor&3' ssh deploy@host", "Tr0ub4dor&3"),
        ("forms", "Hi Tom, the wifi password is Blue-Kx72pq until Friday.", "Blue-Kx72pq"),
        ("forms", "Your new PIN is 4921.", "4921"),
        ("forms", "db:\n  password:\n\n    Hunter2Secret99\n", "Hunter2Secret99"),
        ("forms", "alice:$6$saltsalt$" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hI6kL9nO2qR5tU8wX1zA4cD7fG0iJ3lM6oP9rS2uV5xY8" + "Qw3rTy" + ":19700:0:99999:7:::", "saltsalt"),
        ("forms", "hash $2b$12$R9h/cIPz0gi.URNNX3kh2OPST9/PgBkqquzi.Ss7KIUgO2t0jWMUW", "R9h/cIPz0gi"),
        ("forms", "NI number AB 12 34 56 C", "AB 12 34 56 C"),
        ("forms", "Steuer-ID 86095742719", "86095742719"),
        ("forms", "iban de89370400440532013000", "de89370400440532013000"),
    ]
    return [{"id": f"rt-{i:02d}", "rule": fam, "value": value, "context": context}
            for i, (fam, context, value) in enumerate(cases)]


def redteam_paths(sanitizer: Sanitizer) -> dict:
    cases = [("hr/alice.smith@corp-internal.com-cv.txt", "alice.smith"), ("password=NamePw998877.txt", "NamePw998877"),
             ("scans/scan_219-09-9999.pdf", "219-09-9999"), ("n/+41 44 668 18 11 call log.txt", "668 18 11")]
    caught_paths = sum(1 for path, value in cases if value not in sanitizer.redact_path(path))
    return {"paths": len(cases), "caught": caught_paths, "recall": round(caught_paths / len(cases), 4)}


def real_precision(sanitizer: Sanitizer) -> dict:
    """Precision on the labelled findings of real files (the rows whose file is here)."""
    import gzip
    by_path: dict[str, list] = {}
    for line in LABELS.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            path, rule, value, label = line.split("\t")[:4]
            value = value.replace("\\n", "\n").replace("\\t", "\t").replace("\\r", "\r").replace("\\\\", "\\")
            by_path.setdefault(path, []).append((rule, value, label))
    found = collections.Counter()
    per_rule = collections.defaultdict(collections.Counter)
    rows = 0
    for rel, entries in sorted(by_path.items()):
        path = Path("/usr/share") / rel
        if not path.is_file():
            continue
        data = path.read_bytes()
        text = (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8", errors="replace")
        values = {text[f.start:f.end] for f in sanitize_module.merge(sanitizer.findings(text))}
        for rule, value, label in entries:
            rows += 1
            outcome = ("found_" if value in values else "missed_") + label
            found[outcome] += 1
            per_rule[rule][outcome] += 1
    hits = found["found_tp"] + found["found_fp"]

    def share(counter):
        total = counter["found_tp"] + counter["found_fp"]
        return round(counter["found_tp"] / total, 4) if total else None
    return {"rows": rows, "found": hits, "false_found": found["found_fp"], "true_lost": found["missed_tp"],
            "precision": share(found), "per_rule_precision": {r: share(c) for r, c in sorted(per_rule.items())}}


def quarantine_rate(files: int = 400) -> dict:
    """How many files of a fixed /usr/share/doc sample extract would quarantine (the byte-level scan)."""
    import gzip
    from bastion_agent.extracting import readers
    try:
        from bastion_agent.extracting import reading as scan
    except ImportError:  # a checkout from before the byte-level scan
        return {"available": False}
    paths = sorted(p for p in Path("/usr/share/doc").rglob("*") if p.is_file() and not p.is_symlink())
    step = max(1, len(paths) // files)
    checked = quarantined = 0
    reasons = collections.Counter()
    for path in paths[::step][:files]:
        data = path.read_bytes()
        name = path.name
        if path.suffix == ".gz":
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError):
                continue
            name = path.stem
        kind = readers.kind_for(name, data[:8])
        reading = readers.read(kind, data)
        if reading.text is None or kind not in scan.QUARANTINE_KINDS:
            continue
        checked += 1
        hidden = scan.hidden_findings(data, reading.text, None, kind)
        if hidden:
            quarantined += 1
            reasons.update(hidden)
    return {"files_checked": checked, "quarantined": quarantined, "by_rule": dict(reasons)}


# --- throughput -------------------------------------------------------------------------


def corpus(folder: Path, pattern: str, megabytes: float) -> str:
    files = sorted(folder.glob(pattern))
    if not files:
        raise SystemExit(f"no corpus at {folder}/{pattern} (set BASTION_PROSE_DATA)")
    base = "\n\n".join(f.read_text(encoding="utf-8") for f in files)
    repeat = max(1, int(megabytes * 1e6 / max(len(base.encode("utf-8")), 1) + 0.999))
    return "\n\n".join([base] * repeat)


def chunk_floor(text: str, size: int = 256, overlap: int = 32) -> int:
    """What the chunk stage must at least do: tokenise, then hash each window."""
    spans = [m.span() for m in TOKEN.finditer(text)]
    doc = "0" * 64
    windows = 0
    for first in range(0, len(spans), size - overlap):
        window = spans[first:first + size]
        hashlib.sha256((doc + "\0" + text[window[0][0]:window[-1][1]]).encode("utf-8")).hexdigest()
        windows += 1
        if first + size >= len(spans):
            break
    return windows


def throughput(sanitizer: Sanitizer, folder: Path, pattern: str, megabytes: float, repeat: int,
               doc_chars: int = 200_000) -> dict:
    """Best of ``repeat`` interleaved timings of each, so a busy machine slows both alike."""
    text = corpus(folder, pattern, megabytes)
    size_mb = len(text.encode("utf-8")) / 1e6
    # documents of realistic size, as the stage sees them
    docs = [text[i:i + doc_chars] for i in range(0, len(text), doc_chars)]
    floor_s = sanitize_s = float("inf")
    changed = 0
    for _ in range(repeat):
        started = time.perf_counter()
        for doc in docs:
            chunk_floor(doc)
        floor_s = min(floor_s, time.perf_counter() - started)
        started = time.perf_counter()
        changed = 0
        for doc in docs:
            clean, counts = sanitizer.redact(doc)
            changed += clean != doc
        sanitize_s = min(sanitize_s, time.perf_counter() - started)
    return {
        "corpus": f"{folder}/{pattern}",
        "megabytes": round(size_mb, 2),
        "documents": len(docs),
        "repeat": repeat,
        "documents_changed": changed,
        "sanitize_mb_s": round(size_mb / sanitize_s, 2),
        "chunk_floor_mb_s": round(size_mb / floor_s, 2),
        "ratio_sanitize_to_chunk": round(floor_s / sanitize_s, 3),
        "target_ratio": 0.333,
    }


def copies_cost(folder: Path, megabytes: float, repeat: int) -> dict:
    """What the copies pass costs: one matcher of N found values read over the corpus, for N = 100 and 10,000.

    The matcher is one regular expression shaped as a trie of the values: its
    scan is linear in the text for any N, and at each position it tries the
    branches of the values' first characters, so its cost per MB grows with
    N only until every character of the alphabet starts some value
    (``ratio_scan_10000_to_100`` says how much). Its build grows with the
    values' total length, not with the folder.
    """
    from bastion_agent.sanitizing import copies

    text = corpus(folder, pattern="*.txt", megabytes=megabytes)
    size_mb = len(text.encode("utf-8")) / 1e6
    rng = random.Random(24)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789;#&!$"
    report = {"megabytes": round(size_mb, 2)}
    for count in (100, 10_000):
        values = {"".join(rng.choice(alphabet) for _ in range(rng.randint(10, 40))): "credential-value"
                  for _ in range(count)}
        started = time.perf_counter()
        matcher = copies.Matcher(values)
        build = time.perf_counter() - started
        scan = float("inf")
        for _ in range(repeat):
            started = time.perf_counter()
            sum(1 for _ in matcher.finditer(text))
            scan = min(scan, time.perf_counter() - started)
        report[f"values_{count}"] = {"build_s": round(build, 3), "scan_mb_s": round(size_mb / scan, 1)}
    report["ratio_scan_10000_to_100"] = round(report["values_100"]["scan_mb_s"] / report["values_10000"]["scan_mb_s"], 2)
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=24.0, help="size of the throughput corpus in MB (default 24)")
    parser.add_argument("--repeat", type=int, default=3, help="timings per measure; the best is kept (default 3)")
    parser.add_argument("--no-throughput", action="store_true", help="skip the throughput measure")
    parser.add_argument("--code", help="root of another checkout whose bastion_agent to measure")
    parser.add_argument("--no-real", action="store_true", help="skip the real-document precision and quarantine")
    parser.add_argument("--peer-path", default=os.environ.get("BASTION_PEER_PATH"),
                        help="site-packages of a bench-only venv holding detect-secrets, for the peers table "
                             "(default: $BASTION_PEER_PATH; without it the table has bastion's columns only)")
    parser.add_argument("--baseline", help="root of a checkout to compare throughput with, in the same run "
                                           "(bench/sanitize/sanitize_ab.py): e.g. an older main, from git archive")
    parser.add_argument("--ab-mb", type=float, default=2.0, help="prose MB of the before/after comparison (default 2)")
    args = parser.parse_args(argv)
    sanitizer = Sanitizer()
    report = {
        "data": str(DATA),
        "rules": len(sanitizer.rules),
        "secrets": recall(sanitizer, load(DATA / "secrets.jsonl"), family),
        "personal": recall(sanitizer, personal_records(), lambda r: r["rule"].split("-")[0]),
        "negatives": negatives(sanitizer, load(DATA / "negatives.jsonl")),
    }
    report["redteam"] = recall(sanitizer, redteam_records(), lambda r: r["rule"])
    report["redteam"]["paths"] = redteam_paths(sanitizer)
    report["peers"] = peers.peers_report(sanitizer, args.peer_path)
    if not args.no_real:
        report["real"] = real_precision(sanitizer)
        report["quarantine"] = quarantine_rate()
    if not args.no_throughput:
        report["throughput"] = throughput(sanitizer, PROSE, "*.txt", args.mb, max(1, args.repeat))
        # Source code is dense in the keywords (token, key, password...): the slow case.
        report["throughput_code"] = throughput(sanitizer, HERE.parent / "bastion_agent", "**/*.py", args.mb / 4,
                                               max(1, args.repeat))
        report["copies"] = copies_cost(PROSE, args.mb / 4, max(1, args.repeat))
        if args.baseline:
            report["before_after"] = sanitize_ab.compare(Path(args.baseline), args.ab_mb, max(1, args.repeat))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
