#!/usr/bin/env python3
"""Real config and code of other people, with fresh values planted where the authors put credentials.

Reads a folder of files written by others (checkouts of public repositories:
compose files, Kubernetes manifests, Ansible, Terraform, ``.env``,
``.properties``, XML and ``appsettings.json``, SQL, code that calls database
drivers), finds the places where the authors put a credential, plants a fresh
random value in each, sends every file through the sanitizer and prints one
JSON object of figures per syntax.

Where a credential goes (a *slot*), by the syntax the authors wrote:

- ``KEY: value`` / ``KEY=value`` / ``KEY => value`` / ``KEY := value``
  (YAML, compose lists, ``.env``, ``.properties``, HCL, PHP arrays, code),
  where KEY is an identifier whose last word is a credential word
  (``password``, ``passwd``, ``pwd``, ``pass``, ``passphrase``, ``secret``,
  ``token``, ``apikey``, or ``key`` after ``api``/``access``/``secret``/
  ``private``/``client``/``auth``/``master``/``encryption``/``signing``);
  ``password_file``, ``token_url``, ``secret_arn``, ``rotation_days`` end in
  another word and are not slots;
- the value line under a name line: Kubernetes ``- name: DB_PASSWORD`` /
  ``value: ...``, Hadoop ``<name>...password</name>`` / ``<value>...``,
  ECS ``{"name": "DB_PASSWORD", "value": "..."}``;
- XML elements ``<password>...</password>`` (also CDATA) and
  ``<add key="...Password" value="..."/>``;
- connection strings ``...;Password=...;`` / ``Pwd=...``;
- SQL ``IDENTIFIED BY '...'`` and ``PASSWORD '...'``;
- URLs ``scheme://user:...@host``;
- command-line flags ``--password=...`` / ``--password ...`` (a ``--no-…`` switch,
  ``--no-ask-password``, takes no value; kubectl's ``--from-file=key=./path``
  names a file);
- positional arguments of driver calls (``mysqli_connect(h, u, '...')``,
  ``getConnection(url, u, "...")``, ``new NetworkCredential(u, "...")``).

A slot holding a literal (quoted in code; quoted, bare, empty or ``null`` in
config) gets a fresh value: letters and digits, letters only, or a passphrase
of three to six words, chosen per slot from a seeded draw (``--seed``
replays one; the seed is printed). A slot holding a reference is left alone
and its line is a *reference line*: ``${VAR}``, ``$VAR``, ``$(cat ...)``,
``{{ vault_x }}``, ``var.x``/``local.x``/``module.x``, ``os.environ[...]``,
``getenv``, ``env('X')``, ``secretKeyRef``/``valueFrom``, ``%(x)s``, an
identifier, member access or call in code (``handler.CreateToken(...)``),
booleans and numbers. A reference with a literal default
(``${DB_PASSWORD:secret}``), code's empty default (``token = ""``), a
setting's snake_case name in code (``AccessToken = "access_token"``), a
permission (``id-token: write``) and a usage line's metavar
(``--api-token API_TOKEN``) are neither; a format field (``PASSWORD '%s'``,
``{}``) is a reference; a URL and a ``<your password>`` stand-in are no
value; a key that names a Secret (``envFromSecret``) or a message
(``no_token``) is no slot; on a comment line of code, ``KEY=value`` ending
the line is data, as in a config file.

How a line counts (lines are those of the planted file, matched to the
sanitized file by a line diff, so a placeholder that swallows a line break
marks every line it touched):

- **recall**: a planted value counts as found when no 8 consecutive
  characters of it survive anywhere in the sanitized file (8 characters the
  file held nowhere else: a passphrase's words may stand in its own prose);
- **changed per 1,000**: among lines that hold no planted value (reference
  lines included), how many the sanitizer changed, per 1,000 such lines;
- **reference changed**: the share of reference lines the sanitizer changed.

Files skipped: Markdown, lock files, minified or vendored scripts, anything
over 256 KiB or not UTF-8. With ``--baseline DIR`` the same planted files
also go through another checkout's sanitizer (e.g. a ``git archive`` of
main) in the same run, under ``"before"``.

Usage: python3 bench/sanitize/real_config.py FOLDER [--seed N] [--baseline DIR] [--examples N]
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import random
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
MAX_BYTES = 256 * 1024
SURVIVE = 8

# The syntax of a file, by its name (first match wins) and, for YAML, its content.
SKIP_NAME = re.compile(r"(?i)(\.md|\.min\.js|\.map|lock\.json|\.lock|\.svg|\.css|\.html?|LICENSE.*|\.txt|\.sum)$")
SKIP_DIR = re.compile(r"(?:^|/)(?:node_modules|wwwroot/lib|vendor|\.git)/")
BY_NAME = (
    ("env", re.compile(r"(?:^|/)\.env[^/]*$|\.env$")),
    ("compose", re.compile(r"(?:^|/)(?:docker-)?compose[^/]*\.ya?ml$")),
    ("terraform", re.compile(r"\.(?:tf|tfvars|hcl)$")),
    ("properties", re.compile(r"\.(?:properties|ini|cfg|cnf|conf)$")),
    ("xml", re.compile(r"\.(?:xml|config|csproj|props|runsettings|xaml)$")),
    ("json", re.compile(r"\.json$")),
    ("sql", re.compile(r"\.sql$")),
    ("ansible", re.compile(r"(?:^|/)(?:group_vars|host_vars|roles|playbooks?)/|ansible[^/]*/[^/]*\.ya?ml$")),
    ("helm", re.compile(r"(?:^|/)templates/[^/]*\.(?:ya?ml|tpl)$|\.tpl$|(?:^|/)values[^/]*\.ya?ml$")),
    ("yaml", re.compile(r"\.ya?ml$")),
    ("python", re.compile(r"\.py$")),
    ("php", re.compile(r"\.php$")),
    ("java", re.compile(r"\.(?:java|kt|gradle)$")),
    ("dotnet", re.compile(r"\.(?:cs|vb|bicep)$")),
    ("javascript", re.compile(r"\.(?:js|ts|mjs)$")),
    ("go", re.compile(r"\.go$")),
    ("shell", re.compile(r"\.(?:sh|bash|ps1)$|(?:^|/)Dockerfile[^/]*$|(?:^|/)Makefile$")),
)
CODE = frozenset({"python", "php", "java", "dotnet", "javascript", "go", "shell"})

SECRET_WORD = r"(?:password|passwd|pwd|pass|passphrase|secret|token|apikey)"
KEY_QUALIFIER = r"(?:api|access|secret|private|client|auth|master|encryption|signing)"
KEY_IDENT = re.compile(
    r"(?i)^[A-Za-z0-9_.\-]*?(?:(?<![A-Za-z])|(?-i:(?<=[a-z])(?=[A-Z]))|(?<=_|\.|-))"
    rf"(?:{SECRET_WORD}|{KEY_QUALIFIER}[_\-.]?key)(?:[_\-]wo)?$")
NAMES_A_SECRET_OBJECT = re.compile(r"(?i)(?:existing|extra\w*|passwords|tls|users|auto|pull|ref|certificates|scripts|user)[_\-.]?secrets?$"
                                   r"|(?:allow|empty|use|require|skip)\w*[_\-.]?passw(?:or)?d$"
                                   r"|public[_\-.]?key[_\-.]?token$"
                                   r"|from[_\-.]?secrets?$"  # ``envFromSecret``: the name of a Secret to read
                                   r"|(?:^|[_\-.])(?:no|invalid|missing|expired)[_\-.]?(?:token|password|secret)$")
CAMEL_TAIL = re.compile(rf"(?:{SECRET_WORD}|{KEY_QUALIFIER}[_\-.]?key)(?:[_\-]wo)?$", re.I)

# A key, its separator and its value; the key may be quoted, the value quoted or bare (not kubectl's
# ``--from-file=key=./path``: the value is a file to read).
ASSIGN = re.compile(
    r"""(?<![\w\-./])(?<!\$\{)(?<!--from-file=)(?P<key>["']?\$?[A-Za-z_][A-Za-z0-9_.\-]*["']?)\s*(?P<sep>:=|=>|[:=])[ \t]*"""
    r"""(?P<value>"(?:[^"\\\n]|\\.)*"|'[^'\n]*'|[^\s,;)#\]}"']*)""")
K8S_NAME = re.compile(r"""^\s*(?:-\s+)?name:\s*["']?([A-Za-z0-9_.\-]+)["']?\s*$""")
K8S_VALUE = re.compile(r"""^\s*value:[ \t]*(?P<value>"[^"\n]*"|'[^'\n]*'|\S.*?|)\s*$""")
XML_NAME = re.compile(r"<name>\s*([A-Za-z0-9_.\-]+)\s*</name>")
XML_VALUE = re.compile(r"<value>(?:<!\[CDATA\[)?(?P<value>[^<\]]*)(?:\]\]>)?</value>")
ECS = re.compile(r""""name"\s*:\s*"([A-Za-z0-9_.\-]+)"\s*,\s*"value"\s*:\s*(?P<value>"[^"\n]*")""")
XML_ELEMENT = re.compile(r"<(?P<tag>[A-Za-z0-9_:.\-]+)>(?:<!\[CDATA\[)?(?P<value>[^<\]\n]*)(?:\]\]>)?</(?P=tag)>")
XML_ADD = re.compile(r"""key\s*=\s*"(?P<key>[^"]+)"\s+value\s*=\s*"(?P<value>[^"]*)\"""")
CONN = re.compile(r"(?i)(?:^|[;\"'])\s*(?:password|pwd)=(?P<value>[^;\"'<>]*)(?=;|\"|'|$)")
CONN_LINE = re.compile(r"(?i)(?:server|data source|host|user id|uid|database|initial catalog)=[^;]*;")
SQL = re.compile(r"(?i)(?<![$\w])(?:identified\s+by|password)\s+(?:=\s*)?(?P<value>'[^'\n]*'|\"[^\"\n]*\")")
URL = re.compile(r"[a-z][a-z0-9+.\-]*://[^\s:/@'\"]+:(?P<value>[^\s@/'\"]+)@[^\s/'\"]")
FLAG = re.compile(r"""--(?!no-)(?:[a-z\-]*-)?(?:password|passwd|token|secret)(?:=|\s+)(?P<value>"[^"\n]*"|'[^'\n]*'|"""
                  r"""(?![A-Z][A-Z0-9_]*\b)[^\s\\'"\-\[][^\s\\\]]*)""")  # not a usage line's metavar (API_TOKEN)
POSITIONAL = re.compile(
    r"""(?:mysqli_connect|mysql_connect|getConnection|NetworkCredential|new\s+PDO)\s*\("""
    r"""(?:[^,()]*,){%s}\s*(?P<value>"[^"\n]*"|'[^'\n]*')""")
POSITION_OF = {"mysqli_connect": 2, "mysql_connect": 2, "getConnection": 2, "NetworkCredential": 1, "PDO": 2}

REFERENCE = re.compile(
    r"""^["']?(?:\$\{|\$\(|\$[A-Za-z_]|\$\d(?![$\w])|\$\$(?![A-Za-z0-9]+\$\$)|\{\{|\{%|<%|%\(|var\.|local\.|module\.|data\.|each\.|"""
    r"""os\.environ|os\.getenv|getenv|env\(|process\.env|ENV\[|System\.getenv|Environment\.|"""
    r"""lookup\(|!Ref|!Sub|secretKeyRef|valueFrom|\[parameters\()""")
NOT_VALUE = re.compile(r"""(?i)^(?:true|false|yes|no|on|off|read|write|\d+|https?://\S*|<.*|[~^>=<]*\d+(?:\.[\dx*]+)+\S*|\|-?|>-?|\{|\[|\(|&[A-Za-z]\w*|\*[A-Za-z]\w*)$""")
# ``'%s'``, ``'{}'``, ``'?'``, ``'$1'``: a format string's or a prepared statement's field, filled in by code.
FORMAT_FIELD = re.compile(r"%[sdvq]|\{\d*\}|\?|\$\d+|:[a-z_]\w*")
PLACEHOLDER_LITERAL = re.compile(r"""(?i)^(?:""|''|null|~|none|nil|)$""")

WORDS = (
    "amber anchor apple arrow autumn badge bamboo barrel basket beacon blossom bottle bridge bronze bucket "
    "button cabin candle canyon carpet castle cedar chalk cherry circle cobalt comet copper coral cotton "
    "crater crystal dancer delta desert dragon drift eagle ember engine falcon feather fennel fiddle forest "
    "fossil garden garnet ginger glacier goblet granite gravel harbor hazel helmet hollow honey hunter island "
    "ivory jacket jasmine jungle kettle kitten ladder lantern lemon linen lizard magnet maple marble meadow "
    "mirror mosaic motor muffin nectar needle nickel oasis orbit orchid otter paddle panther pebble pepper "
    "pillow pirate planet pocket poppy puzzle quartz quiver rabbit raven ribbon river rocket saddle salmon "
    "signal silver socket spider spruce stable summit tablet temple thunder timber tomato tunnel velvet "
    "violet walnut willow window winter wizard yonder zephyr"
).split()


@dataclass
class PlantedFile:
    path: str
    syntax: str
    text: str
    values: list[tuple[int, str]] = field(default_factory=list)  # (line index, planted value)
    references: set[int] = field(default_factory=set)


def syntax_of(rel: str, text: str) -> str | None:
    """The syntax a file is scored under, or None for a file the bench skips."""
    if SKIP_NAME.search(rel) or SKIP_DIR.search("/" + rel):
        return None
    for name, pattern in BY_NAME:
        if pattern.search(rel):
            if name == "yaml" and re.search(r"(?m)^apiVersion:", text) and re.search(r"(?m)^kind:", text):
                return "kubernetes"
            if name == "helm" and "ansible" in rel.lower():
                return "ansible"
            return name
    return None


def is_secret_key(key: str) -> bool:
    """A key whose last word names a credential (``DB_PASSWORD``, ``sqlAdminPassword``, ``secret_key``)."""
    key = key.strip("\"'$")
    if not CAMEL_TAIL.search(key) or NAMES_A_SECRET_OBJECT.search(key):
        return False
    return bool(KEY_IDENT.match(key))


# ``${DB_PASSWORD:secret}`` / ``${PW:-secret}``: a reference with a literal default, neither kind.
WITH_DEFAULT = re.compile(r"""^["']?\$?\$\{[A-Za-z_][\w\-]*:-?[^}$]+\}?["']?$""")


def value_kind(value: str, syntax: str) -> str:
    """``literal`` (plant here), ``reference`` (leave alone, watch the line) or ``none`` (not a slot)."""
    bare = value.strip()
    if WITH_DEFAULT.match(bare):
        return "none"
    if REFERENCE.match(bare) or FORMAT_FIELD.fullmatch(bare):
        return "reference"
    quoted = len(bare) >= 2 and bare[0] == bare[-1] and bare[0] in "\"'"
    if quoted:
        inner = bare[1:-1]
        if REFERENCE.match(inner) or "${" in inner or "{{" in inner or "$(" in inner or FORMAT_FIELD.fullmatch(inner):
            return "reference"
        if syntax in CODE and (not inner or re.fullmatch(r"[a-z]+(?:_[a-z0-9]+)+", inner)):
            return "none"  # ``token = ""``, ``AccessToken = "access_token"``: a default, a setting's name
        return "none" if NOT_VALUE.match(inner) and inner else "literal"
    if syntax == "shell" and not NOT_VALUE.match(bare) and bare:
        return "literal"  # ``JWT_SECRET=dxLm...= npm run dev``: a shell assignment's bare word is data
    if syntax in CODE or syntax == "terraform":
        return "none" if NOT_VALUE.match(bare) or PLACEHOLDER_LITERAL.match(bare) else "reference"
    if NOT_VALUE.match(bare) or not bare and syntax not in ("env", "properties"):
        return "none"
    return "literal"


class Draw:
    """Fresh values from one seeded generator: letters and digits, letters only, passphrases."""

    def __init__(self, seed: int | None):
        self.seed = seed if seed is not None else random.SystemRandom().randrange(1 << 31)
        self.rng = random.Random(self.seed)

    def value(self, quoted: bool) -> str:
        kind = self.rng.choice(("mixed", "mixed", "letters", "phrase"))
        if kind == "mixed":
            alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789"
            chars = [self.rng.choice(alphabet) for _ in range(self.rng.randint(10, 24))]
            chars[self.rng.randrange(len(chars))] = self.rng.choice("23456789")
            return "".join(chars)
        if kind == "letters":
            return "".join(self.rng.choice("abcdefghijkmnopqrstuvwxyz") for _ in range(self.rng.randint(10, 16)))
        words = self.rng.sample(WORDS, self.rng.randint(3, 6))
        return (" " if quoted else "-").join(words)


def _slots(lines: list[str], syntax: str):
    """Each (line index, start, end, kind) where the authors put a credential, literal or reference."""
    for index, line in enumerate(lines):
        found = list(_line_slots(line, syntax))
        if not found:
            found = list(_pair_slot(lines, index, syntax))
        yield from ((index, start, end, kind) for start, end, kind in found)


def _pair_slot(lines: list[str], index: int, syntax: str):
    """The value line under a name line (Kubernetes ``- name:``/``value:``, Hadoop ``<name>``/``<value>``)."""
    named = K8S_NAME.match(lines[index - 1]) if index else None
    if named and is_secret_key(named.group(1)):
        if re.match(r"^\s*valueFrom:", lines[index]):
            yield 0, 0, "reference"
            return
        match = K8S_VALUE.match(lines[index])
        if match:
            yield _span(match, syntax)
        return
    named = XML_NAME.search(lines[index - 1]) if index else None
    if named and is_secret_key(named.group(1)):
        match = XML_VALUE.search(lines[index])
        if match:
            yield match.start("value"), match.end("value"), _kind_or_literal(match.group("value"))


def _kind_or_literal(value: str) -> str:
    kind = value_kind(value, "xml")
    return "literal" if kind == "none" and not value.strip() else kind


def _span(match: re.Match, syntax: str) -> tuple[int, int, str]:
    value = match.group("value")
    return match.start("value"), match.end("value"), value_kind(value, syntax)


def _line_slots(line: str, syntax: str):
    taken: list[tuple[int, int]] = []

    def fresh(start: int, end: int) -> bool:
        if any(start < e and s < max(end, start + 1) for s, e in taken):
            return False
        taken.append((start, max(end, start + 1)))
        return True

    for regex in (ECS, URL, CONN, SQL, FLAG):
        for match in regex.finditer(line):
            if regex is ECS and not is_secret_key(match.group(1)) or regex is CONN and not CONN_LINE.search(line):
                continue
            if regex is SQL and syntax not in ("sql", "shell") and '"' not in line and "'" not in line:
                continue
            start, end, kind = _span(match, "sql" if regex is SQL else "config")
            if kind != "none" and (start < end or regex is CONN) and fresh(start, end):
                yield start, end, kind
    for name, position in POSITION_OF.items():
        regex = re.compile(POSITIONAL.pattern.replace("%s", str(position)).replace(
            "(?:mysqli_connect|mysql_connect|getConnection|NetworkCredential|new\\s+PDO)", re.escape(name)))
        for match in regex.finditer(line):
            if fresh(match.start("value"), match.end("value")):
                yield match.start("value"), match.end("value"), "literal"
    yield from _element_slots(line, fresh)
    comment = syntax in CODE and CODE_COMMENT.match(line) is not None
    for match in ASSIGN.finditer(line):
        if not is_secret_key(match.group("key")) or match.group("sep") == ":" and syntax in CODE - {"python"} \
                and not match.group("key")[0] in "\"'" or _in_template(line, match.start()):
            continue
        as_data = comment and match.group("value")[:1] not in "\"'" and not line[match.end():].strip()
        start, end, kind = _span(match, "env" if as_data else syntax)
        if kind == "literal" and syntax in CODE - {"shell"} and not as_data and not match.group("value")[:1] in "\"'":
            kind = "reference"
        if kind != "none" and fresh(start, end):
            yield start, end, kind


# A comment line of code (``#``, ``//``, ``/*``, `` * ``, ``--``): ``KEY=value`` ending it is an example of
# configuration, its bare value data, not an identifier of the code (``token = X XOR y`` is prose).
CODE_COMMENT = re.compile(r"^\s*(?:#|//|/\*|\*|--)")


def _in_template(line: str, position: int) -> bool:
    """Inside a ``{{ ... }}`` template action, where assignments are expressions, not config values."""
    return line.rfind("{{", 0, position) > line.rfind("}}", 0, position)


def _element_slots(line: str, fresh):
    for match in XML_ELEMENT.finditer(line):
        if is_secret_key(match.group("tag").split(":")[-1]) and fresh(match.start("value"), match.end("value")):
            yield match.start("value"), match.end("value"), _kind_or_literal(match.group("value"))
    for match in XML_ADD.finditer(line):
        if is_secret_key(match.group("key").split(":")[-1]) and fresh(match.start("value"), match.end("value")):
            yield match.start("value"), match.end("value"), _kind_or_literal(match.group("value"))


def plant(rel: str, text: str, syntax: str, draw: Draw) -> PlantedFile:
    """The file with a fresh value in every literal slot; reference lines noted, not touched."""
    lines = text.split("\n")
    planted = PlantedFile(rel, syntax, text)
    by_line: dict[int, list[tuple[int, int]]] = {}
    for index, start, end, kind in _slots(lines, syntax):
        if kind == "reference":
            planted.references.add(index)
        else:
            by_line.setdefault(index, []).append((start, end))
    for index, spans in by_line.items():
        line = lines[index]
        for start, end in sorted(spans, reverse=True):
            old = line[start:end]
            quote = old[0] if len(old) >= 2 and old[0] == old[-1] and old[0] in "\"'" else ""
            value = draw.value(bool(quote) or syntax in ("xml", "json", "sql"))
            line = line[:start] + quote + value + quote + line[end:]
            planted.values.append((index, value))
        lines[index] = line
    planted.references -= set(by_line)
    planted.text = "\n".join(lines)
    return planted


def changed_lines(before: str, after: str) -> set[int]:
    """Indexes of the lines of ``before`` that the sanitizer changed (by a line diff)."""
    a, b = before.split("\n"), after.split("\n")
    if len(a) == len(b):
        return {i for i, (x, y) in enumerate(zip(a, b)) if x != y}
    changed: set[int] = set()
    for tag, i1, i2, _j1, _j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            changed.update(range(i1, max(i2, i1 + 1)))
    return changed


def survives(value: str, text: str, planted_text: str) -> bool:
    """Do 8 consecutive characters of ``value`` remain in ``text`` that the file held nowhere else (a
    passphrase's words may also stand in the file's prose)?"""
    elsewhere = planted_text.replace(value, "\0")
    return any(value[i:i + SURVIVE] in text and value[i:i + SURVIVE] not in elsewhere
               for i in range(len(value) - SURVIVE + 1))


def score(files: list[PlantedFile], outputs: list[str], examples: int) -> dict:
    table: dict = {}
    for planted, output in zip(files, outputs):
        row = table.setdefault(planted.syntax, {"planted": 0, "found": 0, "lines": 0, "changed": 0,
                                                "reference_lines": 0, "reference_changed": 0,
                                                "missed": [], "flagged": [], "references": []})
        changed = changed_lines(planted.text, output)
        lines = planted.text.split("\n")
        holding = {index for index, _value in planted.values}
        for index, value in planted.values:
            row["planted"] += 1
            if survives(value, output, planted.text):
                _example(row["missed"], examples, planted.path, index, lines)
            else:
                row["found"] += 1
        for index in range(len(lines)):
            if index in holding:
                continue
            row["lines"] += 1
            if index in changed:
                row["changed"] += 1
                _example(row["flagged"], examples, planted.path, index, lines)
        for index in planted.references:
            row["reference_lines"] += 1
            if index in changed:
                row["reference_changed"] += 1
                _example(row["references"], examples, planted.path, index, lines)
    return _summary(table)


def _example(rows: list, limit: int, path: str, index: int, lines: list[str]) -> None:
    if len(rows) < limit:
        rows.append(f"{path}:{index + 1}: {lines[index].strip()[:160]}")


def _summary(table: dict) -> dict:
    total = {key: sum(row[key] for row in table.values())
             for key in ("planted", "found", "lines", "changed", "reference_lines", "reference_changed")}
    out = {}
    for name, row in sorted(table.items()) + [("all", dict(total, missed=[], flagged=[], references=[]))]:
        figures = {
            "planted": row["planted"],
            "recall": round(row["found"] / row["planted"], 4) if row["planted"] else None,
            "lines": row["lines"],
            "changed_per_1000": round(1000 * row["changed"] / row["lines"], 2) if row["lines"] else None,
            "reference_lines": row["reference_lines"],
            "reference_changed": round(row["reference_changed"] / row["reference_lines"], 4)
            if row["reference_lines"] else None,
        }
        for key in ("missed", "flagged", "references"):
            if row[key]:
                figures[key] = row[key]
        out[name] = figures
    return out


def gather(folder: Path, draw: Draw) -> list[PlantedFile]:
    files = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_BYTES:
            continue
        rel = path.relative_to(folder).as_posix()
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        syntax = syntax_of(rel, text)
        if syntax is not None and "\0" not in text:
            files.append(plant(rel, text, syntax, draw))
    return files


def _outputs_of(code: str, texts: list[str]) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(code).resolve()))
    done = subprocess.run([sys.executable, __file__, "--child"], input=json.dumps(texts), capture_output=True,
                          text=True, env=env, check=True)
    return json.loads(done.stdout)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--baseline", help="another checkout whose sanitizer is scored beside this one")
    parser.add_argument("--examples", type=int, default=0, help="print up to N example lines per class")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        from bastion_agent.sanitizing.scanner import sanitizer_for

        sanitizer = sanitizer_for(None)
        print(json.dumps([sanitizer.redact(text)[0] for text in json.load(sys.stdin)]))
        return 0
    if not args.folder or not Path(args.folder).is_dir():
        print(f"real_config: not a folder: {args.folder}", file=sys.stderr)
        return 2
    draw = Draw(args.seed)
    files = gather(Path(args.folder), draw)
    texts = [planted.text for planted in files]
    result = {"seed": draw.seed, "files": len(files), "after": score(files, _outputs_of(str(HERE), texts),
                                                                     args.examples)}
    if args.baseline:
        result["before"] = score(files, _outputs_of(args.baseline, texts), args.examples)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
