"""Credentials passed by position: the calls and statements whose Nth argument is the secret.

``smtplib.SMTP(...).login('ops', 'PW')`` names no key: the reader knows from
the call that its second argument is a password. This module is that
knowledge as a table (``SIGNATURES``, listed in docs/sanitize.md): one row
per call or statement shape, a regular expression whose group ``secret`` is
the argument that holds the credential, and the lowercase literals that
must occur in the text for the row to be tried at all (so a text with none
of them costs a few ``in`` tests). ``INSERT INTO t (…, password, …) VALUES
(…)`` is read by ``insert_values``: the value at the password column's
position.

Every pattern is linear: arguments are bounded runs of characters that
cannot hold their own delimiter, so no nested repetition can backtrack.
What is found is still judged as a value (``assigned_values.value_ok``): a
variable, a placeholder or ``${PW}`` in the secret's place stays.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The version of what this module finds: bump it with any change that makes some text
# sanitize differently (detection_version.py; docs/sanitize.md, "The cache key").
DETECTION_VERSION = 2

# One argument of a call: a quoted string or a bare expression without commas or brackets.
ARG = r"""(?:'[^'\n]{0,200}'|"[^"\n]{0,200}"|[$@\w.:\->\[\]]{1,100})"""
SEP = r"[ \t]*,[ \t]*"
QUOTED = r"""(?P<q>['"])(?P<secret>[^'"\n]{1,200})(?P=q)"""
WORD = r"""(?:(?P<wq>['"])(?P<wsecret>[^'"\n]{1,200})(?P=wq)|(?P<bare>[^\s'"|;&$`]{1,200}))"""


@dataclass(frozen=True)
class Signature:
    """A call or statement whose argument ``secret`` is a credential; ``triggers``: literals one of which it holds."""

    name: str
    example: str
    triggers: tuple[str, ...]
    pattern: re.Pattern


def _row(name: str, example: str, triggers: tuple[str, ...], pattern: str) -> Signature:
    return Signature(name, example, triggers, re.compile(pattern))


SIGNATURES: tuple[Signature, ...] = (
    _row("SMTP/IMAP/FTP login", "smtp.login('ops', 'PW')", ("login(",),
         r"\.login\([ \t]*" + ARG + SEP + QUOTED),
    _row("HTTP basic-auth tuple", "requests.get(url, auth=('u', 'PW'))", ("auth",),
         r"(?i)\bauth[ \t]*[=:][ \t]*[(\[][ \t]*" + ARG + SEP + QUOTED),
    _row("HTTP auth object", "HTTPBasicAuth('u', 'PW')", ("auth(",),
         r"(?:HTTPBasicAuth|HTTPDigestAuth|BasicAuth|HTTPProxyAuth)\([ \t]*" + ARG + SEP + QUOTED),
    _row("PHP mysqli / mysql connect", "mysqli_connect($h, $u, 'PW', $db)", ("mysqli", "mysql_connect"),
         r"(?i)(?:mysqli_connect|mysql_connect|mysql_pconnect|new[ \t]+mysqli)\([ \t]*" + ARG + SEP + ARG + SEP + QUOTED),
    _row("PDO", "new PDO($dsn, 'u', 'PW')", ("pdo(",),
         r"new[ \t]+PDO\([ \t]*" + ARG + SEP + ARG + SEP + QUOTED),
    _row("JDBC getConnection", "DriverManager.getConnection(url, \"u\", \"PW\")", ("getconnection(",),
         r"getConnection\([ \t]*" + ARG + SEP + ARG + SEP + QUOTED),
    _row("Python database connect", "pymysql.connect('h', 'u', 'PW', 'db')", ("connect(",),
         r"(?:pymysql|MySQLdb|mysql\.connector|psycopg2?|pyodbc|cx_Oracle|oracledb|pg8000)\.connect\([ \t]*"
         + ARG + SEP + ARG + SEP + QUOTED),
    _row("redis client", "redis.Redis('h', 6379, 0, 'PW')", ("redis(",),
         r"(?:StrictRedis|Redis)\([ \t]*" + ARG + SEP + ARG + SEP + ARG + SEP + QUOTED),
    _row(".NET NetworkCredential", "new NetworkCredential(\"u\", \"PW\", \"D\")", ("networkcredential(",),
         r"NetworkCredential\([ \t]*" + ARG + SEP + QUOTED),
    _row("PowerShell SecureString", "ConvertTo-SecureString 'PW' -AsPlainText", ("convertto-securestring",),
         r"(?i)ConvertTo-SecureString[ \t]+(?:-String[ \t]+)?" + QUOTED),
    _row("PowerShell -Password parameter", "Invoke-Spray -Password Summer2021!", ("password ",),
         r"(?<=[ \t])-(?:[A-Z][A-Za-z]{0,40})?Password[ \t]+(?!-)" + WORD),
    _row("docker login --password-stdin", "echo 'PW' | docker login -u u --password-stdin", ("password-stdin",),
         r"(?i)\becho[ \t]+(?:-n[ \t]+)?" + WORD + r"[ \t]*\|[ \t]*(?:sudo[ \t]+)?[\w.\-]+[ \t]+[^\n|]{0,200}--password-stdin"),
    _row("sudo -S", "echo \"PW\" | sudo -S cmd", ("sudo",),
         r"\becho[ \t]+(?:-n[ \t]+)?" + WORD + r"[ \t]*\|[ \t]*sudo[ \t]+(?:-\w+[ \t]+){0,4}?-\w*S\b"),
    _row("PsExec -p", "psexec \\\\host -u admin -p PW cmd", ("psexec",),
         r"(?i)\bpsexec(?:64)?(?:\.exe)?[ \t][^\n]{0,300}?[ \t]-p[ \t]+" + WORD),
    _row("runas with a piped password", "echo PW | runas /user:admin cmd", ("runas",),
         r"(?i)\becho[ \t]+" + WORD + r"[ \t]*\|[ \t]*runas\b"),
    _row("key handed to a cipher", "setCipherKey(Base64.decode(\"KEY\"))",
         ("cipherkey", "secretkeyspec", "key(", "hmac"),
         r"(?:setCipherKey|SecretKeySpec|AES\d*Key|DESKey|TripleDESKey|HMACKey|setSigningKey|hmac\.new|HMAC)"
         r"\([ \t]*(?:new[ \t]+)?(?:[\w.]{1,60}\.(?:decode|getBytes|b64decode|fromBase64String|from|encode)\([ \t]*)?"
         + QUOTED),
)

INSERT = re.compile(r"(?i)\bINSERT[ \t]+INTO[ \t]+[\w.`\"\[\]]{1,100}[ \t]*\((?P<columns>[^()\n]{1,500})\)[ \t]*"
                    r"VALUES[ \t]*\((?P<values>[^\n]{1,2000}?)\)")
PASSWORD_COLUMN = re.compile(r"(?i)^[`\"\[]?(?:\w*_)?(?:password|passwd|pwd|pass|secret|token|api_?key)[`\"\]]?$")


def scan(text: str, lowered: str) -> list[tuple[int, int]]:
    """Spans of the secret arguments of every signature in ``text`` (``lowered``: its lower case)."""
    spans: list[tuple[int, int]] = []
    for signature in SIGNATURES:
        if not any(trigger in lowered for trigger in signature.triggers):
            continue
        for match in signature.pattern.finditer(text):
            for group in ("secret", "wsecret", "bare"):
                if group in match.re.groupindex and match.start(group) != -1:
                    spans.append(match.span(group))
                    break
    if "insert" in lowered and "values" in lowered:
        spans.extend(insert_values(text))
    return spans


def insert_values(text: str) -> list[tuple[int, int]]:
    """``INSERT INTO users (login, password, role) VALUES ('ann', 'PW', 'admin')``: the password column's value."""
    spans = []
    for match in INSERT.finditer(text):
        columns = [column.strip() for column in match.group("columns").split(",")]
        wanted = [i for i, column in enumerate(columns) if PASSWORD_COLUMN.match(column)]
        if not wanted:
            continue
        values = _split_values(match.group("values"), match.start("values"))
        for index in wanted:
            if index < len(values):
                spans.append(values[index])
    return spans


def _split_values(values: str, offset: int) -> list[tuple[int, int]]:
    """The spans of a VALUES list's items, quotes stripped (``''`` inside a quote is a quote)."""
    items, index, length = [], 0, len(values)
    while index < length:
        while index < length and values[index] in " \t":
            index += 1
        if index < length and values[index] in "'\"":
            quote, start = values[index], index + 1
            index = start
            while index < length and not (values[index] == quote and values[index + 1:index + 2] != quote):
                index += 2 if values[index] == quote else 1
            items.append((offset + start, offset + index))
            index += 1
        else:
            start = index
            while index < length and values[index] not in ",)":
                index += 1
            items.append((offset + start, offset + len(values[start:index].rstrip()) + start))
        while index < length and values[index] != ",":
            index += 1
        index += 1
    return items
