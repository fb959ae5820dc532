"""Values found by their key where the key does not stand right before them.

``context.py`` reads ``key = value``, ``key: value``, ``<key>value</key>``.
Real files also put the key one field away from its value, and a reader
sees at once which value the key names:

- **sibling name/value fields**: a Kubernetes env entry ``- name:
  DB_PASSWORD`` then ``value: …`` on the next line (quoted or not), an ECS
  task's ``{"name": "DB_PASSWORD", "value": "…"}``, Hadoop's
  ``<name>…password</name><value>…</value>``, a Terraform ``variable
  "db_password" { default = "…" }``;
- **XML wrappers**: ``<password><![CDATA[…]]></password>``, a Windows
  unattend file's ``<AdministratorPassword><Value>…</Value>``;
- **a list under a credential key**: ``"tokens": ["99b8…", "79eb…"]``.

It also holds the line shapes that tell ``context.py`` a bare value is data
(letters alone can be its password) rather than a word of prose or code: a
YAML flow mapping's item, a connection string, a Kubernetes ``value:``
line, a setting commented out.

Each form is a bounded, linear scan near a credential-named key that
``context.py`` found (its key vocabulary decides which names count): the
sibling is looked for within ``SIBLING_REACH`` characters, so a
megabyte of text costs no more than reading it once.
"""

from __future__ import annotations

import re

# The version of what this module finds: bump it with any change that makes some text
# sanitize differently (detection_version.py; docs/sanitize.md, "The cache key").
DETECTION_VERSION = 5

SIBLING_REACH = 512  # how far after a name field its value field may sit
MAX_VALUE = 1024

# The name field of a name/value pair, the name in group "name"; the value field follows.
NAME_FIELDS = (
    # YAML list item: ``- name: DB_PASSWORD`` (quoted or not), then ``value: X`` at the same depth
    re.compile(r"(?m)^[ \t]*-[ \t]+name:[ \t]*[\"']?(?P<name>[\w.\-]{1,100})[\"']?[ \t]*\r?$"),
    # JSON / HCL object: ``"name": "DB_PASSWORD",`` then ``"value": "X"``
    re.compile(r"[\"']?\bname[\"']?[ \t]*[:=][ \t]*[\"'](?P<name>[\w.\-]{1,100})[\"']"),
    # XML: ``<name>db.password</name>`` then ``<value>X</value>``
    re.compile(r"<name>[ \t]*(?P<name>[\w.\-]{1,100})[ \t]*</name>"),
    # Terraform: ``variable "db_password" {`` then ``default = "X"``
    re.compile(r"\bvariable[ \t]+\"(?P<name>[\w.\-]{1,100})\"[ \t]*\{"),
)
VALUE_FIELD = re.compile(
    r"""(?:^[ \t]*value:[ \t]*|["']?\bvalue["']?[ \t]*[:=][ \t]*|<value>|\bdefault[ \t]*=[ \t]*)"""
    r"""(?:(?P<q>["'])(?P<quoted>[^"'\n]{1,1024}?)(?P=q)|<!\[CDATA\[(?P<cdata>[^\]\n]{1,1024}?)\]\]>"""
    r"""|(?P<xml>[^<\n]{1,1024}?)</value>|(?P<bare>[^\s"'<>{},#\[][^\n]{0,1023}))""",
    re.MULTILINE,
)
STOP = re.compile(r"(?m)^[ \t]*-[ \t]+name:|\bname[\"']?[ \t]*[:=]|<name>|\bvariable[ \t]")
CDATA = re.compile(r"<!\[CDATA\[(?P<value>[^\]\n]{1,1024}?)\]\]>")
# An unattend file's password elements hold their value in a <Value> child.
UNATTEND = re.compile(r"(?i)<(?:AdministratorPassword|Password|AutoLogon[^>]{0,40}?Password|UserPassword)>\s{0,200}"
                      r"<Value>(?P<value>[^<\n]{1,1024})</Value>")


def sibling_values(text: str, strength_of) -> list[tuple[int, int, str]]:
    """(start, end, key strength) of values whose credential-named key sits in a sibling name field;
    ``strength_of(name)`` is the key vocabulary's verdict (None: not a credential)."""
    spans: list[tuple[int, int, str]] = []
    for pattern in NAME_FIELDS:
        for match in pattern.finditer(text):
            strength = strength_of(match.group("name"))
            if strength is None:
                continue
            span = _value_after(text, match.end())
            if span is not None:
                spans.append((*span, strength))
    return spans


def _value_after(text: str, position: int) -> tuple[int, int] | None:
    """The value field following a name field, before any other name field."""
    limit = min(len(text), position + SIBLING_REACH)
    stop = STOP.search(text, position, limit)
    if stop is not None:
        limit = stop.start()
    value = VALUE_FIELD.search(text, position, limit)
    if value is None:
        return None
    for group in ("quoted", "cdata", "xml"):
        if value.start(group) != -1:
            return value.span(group)
    start, end = value.span("bare")
    bare = value.group("bare")
    comment = bare.find(" #")
    if comment != -1:
        bare = bare[:comment]  # YAML: `` #`` starts a comment; a ``#`` inside the value is the value's
    bare = bare.rstrip(" \t\r")
    return (start, start + len(bare)) if bare else None


def wrapped_values(text: str) -> list[tuple[int, int]]:
    """Unattend ``<…Password><Value>X</Value>`` values (the CDATA of a credential key is ``cdata_value``)."""
    if "<Value>" not in text and "<value>" not in text.lower():
        return []
    return [match.span("value") for match in UNATTEND.finditer(text)]


def cdata_value(text: str, position: int, line_end: int) -> tuple[int, int] | None:
    """``<password><![CDATA[X]]></password>``: the span of X when a CDATA section starts at ``position``."""
    match = CDATA.match(text, position, min(len(text), max(line_end, position + MAX_VALUE)))
    return match.span("value") if match else None


def list_items(text: str, position: int, line_end: int) -> list[tuple[int, int]] | None:
    """``["a1b2…", "c3d4…"]`` at ``position``: the spans of its quoted items, or None when it holds anything else."""
    close = text.find("]", position, min(line_end, position + MAX_VALUE))
    if close == -1:
        return None
    inner = text[position + 1:close]
    spans, index = [], 0
    for item in re.finditer(r"""\s*(?:"([^"\n]*)"|'([^'\n]*)')\s*(?:,|$)""", inner):
        if item.start() != index:
            return None
        group = 1 if item.start(1) != -1 else 2
        spans.append((position + 1 + item.start(group), position + 1 + item.end(group)))
        index = item.end()
    return spans if spans and index == len(inner) else None


# --- line shapes that say a bare value is data, not a word of prose or code ----------------------------

# A YAML list item that is a flow mapping, opened before the key on its line: ``- { username: user1, ``
# (not a JavaScript object, which an assignment or a call opens).
FLOW_MAPPING = re.compile(r"^[ \t]*-[ \t]+\{[ \t]*[\w.\-]+:[ \t]")
# A connection string names its server or database before its password (``Server=...;User Id=sa;Password=``).
CONNECTION_FIELD = re.compile(r"(?i)(?:server|data source|host|address|user id|uid|database|initial catalog)[ \t]*=[^;]*;")
# ``value: kxqmvbnrtwpzla`` on its own line: a Kubernetes env entry's value, YAML data to the line's end.
YAML_VALUE_FIELD = re.compile(r"[ \t]*value:[ \t]*")
# A string inside a SQL string: dynamic SQL (``EXEC('...')``, PL/pgSQL ``EXECUTE '...'``) writes each quote of
# the statement it runs twice, and four times one level further in; the value ends at the same run of quotes.
DOUBLED_QUOTED = re.compile(r"(?P<q>''(?:'')?)(?!')(?P<literal>[^'\s]{1,200})(?P=q)")
# ``docker run -e POSTGRES_PASSWORD=X``, ``--env X=...``: a container's environment given on a command line.
ENV_FLAG = re.compile(r"(?:^|[\s\"'])(?:-e|--env)[ \t]*\Z")
# ``helm install ... --set externalDatabase.password=X`` (also after other pairs, ``--set a=b,auth.password=X``):
# a chart value given on a command line is data, as in the values file it overrides; letters alone can be
# its password.
HELM_SET = re.compile(r"(?:^|[\s\"'(])--set(?:-string)?(?:(?:[ \t]+|=)[\w.\-\[\]]+=[^\s,=]*"
                      r"(?:,[\w.\-\[\]]+=[^\s,=]*)*)?[ \t,=]*\Z")
# A comment's mark, then (a setting commented out of a list or an indented block) a list dash or a
# second mark: ``#- X=...``, ``#     #password: ...``.
COMMENT_MARK = re.compile(r"[ \t]*(?:#{1,3}|//|;|--)[ \t]*(?:(?:-|#{1,3})[ \t]*)?")
# An indented block commented out keeps its indentation: ``#     token: X`` (two spaces or more).
INDENTED_COMMENT = re.compile(r"[ \t]*#[ \t]{2,}(?:#[ \t]*)?|[ \t]*#[ \t]*#[ \t]*")
SETTING_NAME = re.compile(r"[A-Za-z][\w\-]*[_.][\w.\-]+|[A-Z][A-Z0-9]+|[a-z]+(?:[A-Z][a-z0-9]+)+")
LOWER_WORD = re.compile(r"[a-z]+")
# ``PAPERLESS_SECRET_KEY: X # adjust this key``: YAML, .env and INI end a bare value at a comment (a ``#``
# after whitespace, then a space: ``pa #ss`` keeps its ``#``).
TRAILING_COMMENT = re.compile(r"[ \t]+#[ \t]")
# ``# crowdsecLapiKey: X # <--- replace this later``: a note after the setting, as in a live line.
TRAILING_NOTE = re.compile(r"[ \t]+#")
# ``host=db port=5432 user=app password=X dbname=app``: libpq's keyword/value connection string.
KEYWORD_CONNECTION = re.compile(r"(?:^|[\s\"'=])(?:host|hostaddr|port|user|dbname)=[^\s=]+[ \t]")


def commented_setting(text: str, name: str, before: str, position: int, line_end: int) -> bool:
    """``# DB_PASSWORD=kxqmvbnrtwpzla``, ``# truststore_password: X``: a setting commented out, its name
    a setting's (``_``, ``.`` or capitals), its value one token to the end of the line (``# DB_PASSWORD:
    change this`` is a note)."""
    if COMMENT_MARK.fullmatch(before) is None:
        return False
    if not SETTING_NAME.fullmatch(name) and not (LOWER_WORD.fullmatch(name) and INDENTED_COMMENT.fullmatch(before)):
        return False
    rest = TRAILING_NOTE.split(text[position:line_end], 1)[0].lstrip(":= \t").rstrip()
    return bool(rest) and not any(ch.isspace() for ch in rest)
