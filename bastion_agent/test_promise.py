"""The promise, end to end: after a full sweep, nothing outside the extract store lets anyone read
or recover what sanitize removed.

A red-team folder is written in the test (``CORPUS``, plus an ``ssh-keygen``
private key made on the spot), swept through the command line against the
stub model server, searched with ``search --json`` and through ``serve``
(``/search``, the page ``/``, ``/healthz``) and the MCP tools (``search``,
then ``fetch`` around each hit). Then every place a user or an
attacker can read is scanned for every planted value (``leaks``): every file
of the output folder but ``extract/`` (raw bytes: vectors.db and its side
files, index/, summaries, chunks.jsonl, sanitized/), stdout and stderr of
every command, every answer, the page, and every request body the model
server received. The scan also tries the reversible views of each place's
text (invisible characters removed; the bytes of ``.encode("utf-16-le")``
and ``.encode("cp500")``, which give back ASCII hidden by a wrong decoding),
and looks for the sha256 of every raw file and of its text, which must never
leave the extract store (it would be an oracle for what was redacted).

To add a case, append a ``Planted`` to ``CORPUS``: a file name (relative to
the source root; it may itself hold a secret), its bytes, and the values
that must appear nowhere. (A file whose bytes plant nothing keeps its text
as it is, so the sha256 of that text is rightly its document id; the hash
check skips it.)
"""

from __future__ import annotations

import codecs
import hashlib
import http.client
import io
import json
import os
import random
import re
import shutil
import string
import subprocess
import sys
import unittest
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from bastion_agent.core.layout import Layout, read_jsonl
from bastion_agent.serving import serve_settings
from bastion_agent.testing.office_files import docx, para, zipped
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import (
    TempFolder,
    clean_env,
    run_cli,
    write_manifest,
)


@dataclass(frozen=True)
class Planted:
    """One file of the red-team folder and the values it plants."""

    name: str  # path under the source root, "/"-separated
    data: bytes
    secrets: tuple[str, ...]


_rand = random.Random(20261201)  # fixed: the same corpus on every run, still values nobody else uses


def _token(alphabet: str, length: int) -> str:
    return "".join(_rand.choice(alphabet) for _ in range(length))


B62 = string.ascii_letters + string.digits
AWS_ID = "AKIA" + _token("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
AWS_SECRET = _token(B62 + "/+", 40)
DB_PASSWORD = _token(B62, 12) + "7"
YAML_PASSWORD = _token(B62, 14) + "3"
EMAIL = "lena.marsh@northwind-mail.com"
NAME_EMAIL = "oskar.vintner@fjordline-post.com"
PHONE = "+41 44 668 18 00"
SSN = "536-22-8714"

CORPUS: list[Planted] = [
    Planted("ops/deploy.md", (
        "# Deploying the ledger service\n\n"
        "Rotate the backup tapes on friday, then deploy.\n\n"
        f"export AWS_ACCESS_KEY_ID={AWS_ID}\n"
        f"aws_secret_access_key = {AWS_SECRET}\n"
        f'db_password = "{DB_PASSWORD}"\n'
    ).encode("utf-8"), (AWS_ID, AWS_SECRET, DB_PASSWORD)),
    Planted("ops/service.yaml", (
        "service:\n  name: ledger\n  replicas: 3\n"
        f"  password: {YAML_PASSWORD}\n"
        "  region: eu-central\n"
    ).encode("utf-8"), (YAML_PASSWORD,)),
    Planted("hr/customers.csv", (
        "name,email,phone,ssn,notes\n"
        f"Lena Marsh,{EMAIL},{PHONE},{SSN},prefers calls before noon\n"
    ).encode("utf-8"), (EMAIL, PHONE, SSN)),
    Planted(f"hr/{NAME_EMAIL}.txt",
            ("Quarterly review notes: the cafeteria menu and the parking rota were discussed.\n"
             f"Follow-up by mail to {NAME_EMAIL}.\n").encode("utf-8"),
            (NAME_EMAIL,)),
]

# The detect engineer's red-team cases: decodings that
# hid text, key blocks with headers, look-alike characters, new credential
# forms and hostile file names. Values are fresh, so a leak is unambiguous.
RT_AWS = "AKIA" + _token("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
RT_AWS2 = "AKIA" + _token("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
RT_AWS3 = "AKIA" + _token("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
RT_AWS4 = "AKIA" + _token("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
RT_MAIL = "ilse.brandt@harbourline-post.com"
RT_GH = "ghp_" + _token(B62, 36)
RT_NETRC = _token(B62, 10) + "-9x"
RT_MYSQL = _token(B62, 11) + "4"
RT_SSHPASS = _token(B62, 9) + "&2"
RT_PROSE = "Kite-" + _token(B62, 8) + "5"
RT_HASH = "$6$" + _token(B62, 8) + "$" + _token(B62 + "./", 86)
RT_PGPASS = _token(B62, 12) + "8"
RT_PEM_BODY = [_token(B62 + "+/", 64) for _ in range(8)]
RT_PEM = ("-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n"
          "DEK-Info: AES-128-CBC,B1ADB6CC4CEDC36D5C42551F5914B46A\n\n" + "\n".join(RT_PEM_BODY)
          + "\n-----END RSA PRIVATE KEY-----\n")
ZWSP = "\u200b"

CORPUS += [
    Planted("logs/transcript.log", codecs.BOM_UTF16_LE + "Transcript started\r\n".encode("utf-16-le")
            + f"appended by cmd.exe: key {RT_AWS} mail {RT_MAIL}\r\n".encode("ascii"), (RT_AWS, RT_MAIL)),
    Planted("web/page.html", (f'<html><head><meta charset="utf-16"></head><body><p>Deploy key {RT_AWS2} '
                              "for the ledger service.</p></body></html>").encode("ascii"), (RT_AWS2,)),
    Planted("mail/keys.eml", ("From: ops@example.org\r\nSubject: ledger keys\r\nMIME-Version: 1.0\r\n"
                              'Content-Type: text/plain; charset="utf-16"\r\n\r\n'
                              f"The ledger key is {RT_AWS3}.\r\n").encode("ascii"), (RT_AWS3,)),
    Planted("docs/ledger.rtf", ("{\\rtf1\\ansi\\ansicpg500 {\\fonttbl{\\f0 Arial;}}\\f0 Ledger key "
                                f"{RT_AWS4} for the service.\\par}}").encode("ascii"), (RT_AWS4,)),
    Planted("ops/legacy.pem", f"Old ledger key, encrypted:\n{RT_PEM}".encode("ascii"), tuple(RT_PEM_BODY)),
    Planted("ops/lookalikes.md", (f"Token {RT_GH[:8]}{ZWSP}{RT_GH[8:]} for the ledger deploy.\n"
                                  f"Mail {RT_MAIL.replace('@', '&#64;')} or {RT_MAIL.replace('@', '%40')} or "
                                  f"{RT_MAIL.replace('@', chr(0xFF20))}.\n"
                                  f"Key \u0410\u041a{RT_AWS[2:]} and \uff21\uff2b\uff29\uff21{RT_AWS2[4:]}.\n").encode("utf-8"),
            (RT_GH, RT_GH[8:], RT_MAIL, RT_AWS[4:], RT_AWS2[4:])),
    Planted("ops/credentials.txt", (
        f"machine ledger.corp.io login deploy password {RT_NETRC}\n"
        f"ledger-db.corp.io:5432:ledger:app:{RT_PGPASS}\n"
        f"mysqldump -u root -p{RT_MYSQL} ledger > ledger.sql\n"
        f"sshpass -p '{RT_SSHPASS}' ssh deploy@ledger\n"
        f"Hi Tom, the wifi password is {RT_PROSE} until Friday.\n"
        f"deploy:{RT_HASH}:19700:0:99999:7:::\n").encode("ascii"),
        (RT_NETRC, RT_PGPASS, RT_MYSQL, RT_SSHPASS, RT_PROSE, RT_HASH)),
    Planted("hr/ilse.brandt@harbourline-post.com-cv.txt", b"Curriculum vitae: ledger systems, ten years.\n",
            ("ilse.brandt@harbourline-post.com",)),
    Planted("scans/scan_219-09-9999.txt", b"Scanned form about the ledger service.\n", ("219-09-9999",)),
    Planted("notes/password=NamePw998877.txt", b"Notes on the ledger service.\n", ("NamePw998877",)),
]

# Saved coloured terminal output (a CI log, ``grep --color=always``): the
# escape before a value ends in a letter that glued to it.
RT_ANSI_AWS = "AKIA" + _token("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
RT_ANSI_GH = "ghp_" + _token(B62, 36)
CORPUS += [
    Planted("logs/ci-deploy.log", (
        f"\x1b[32mINFO\x1b[0m ledger deploy started\n"
        f"\x1b[33mWARN\x1b[0m key in env: \x1b[01;31m\x1b[K{RT_ANSI_AWS}\x1b[m\x1b[K\n"
        f"\x1b[33mWARN\x1b[0m token \x1b[36m{RT_ANSI_GH}\x1b[0m\n").encode("ascii"), (RT_ANSI_AWS, RT_ANSI_GH)),
]

# An e-mail's attachments are names: the reader writes them as "[attachment: NAME]",
# where a value glued to "_" or "-cv" hid from the text's detectors.
RT_ATT_SSN = "372-51-4486"
RT_ATT_MAIL = "mirja.halvorsen@tidewater-post.com"
CORPUS += [
    Planted("mail/scans.eml", (
        "From: ops@example.org\r\nSubject: the scans you asked for\r\nMIME-Version: 1.0\r\n"
        'Content-Type: multipart/mixed; boundary="b1"\r\n\r\n'
        "--b1\r\nContent-Type: text/plain\r\n\r\nBoth scans attached, for the ledger audit.\r\n"
        f'--b1\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment; filename="scan_{RT_ATT_SSN}.pdf"\r\n'
        "Content-Transfer-Encoding: base64\r\n\r\nJVBERi0xLjQK\r\n"
        f'--b1\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment; filename="{RT_ATT_MAIL}-cv.pdf"\r\n'
        "Content-Transfer-Encoding: base64\r\n\r\nJVBERi0xLjQK\r\n--b1--\r\n").encode("ascii"),
        (RT_ATT_SSN, RT_ATT_MAIL)),
]

# JSON as PHP's json_encode ("\/") and Gson ("\u003d") write it.
RT_JSON_URLPW = _token(B62, 13) + "6"
RT_JSON_GSONPW = _token(B62, 12) + "2"
CORPUS += [
    Planted("ops/app-config.json", (
        '{"service":"ledger","database_url":"postgres:\\/\\/app:' + RT_JSON_URLPW + '@ledger-db:5432\\/ledger",\n'
        ' "jdbc":"jdbc:postgresql://ledger-db/ledger?user\\u003dapp\\u0026password\\u003d' + RT_JSON_GSONPW + '"}\n'
    ).encode("ascii"), (RT_JSON_URLPW, RT_JSON_GSONPW)),
]

# Credential values by their context, whatever characters they hold
# (``; # & ! $``, spaces, quotes), and a found token's copy in a second file.
CTX_INI = _token(B62, 5) + "; #" + _token(B62, 5) + "&2"
CTX_YAML = _token(B62, 4) + " " + _token(B62, 6) + "!$9"
CTX_ENV = _token(B62, 8) + "#&" + _token(B62, 3) + "1"
CTX_JAVA = _token(B62, 9) + "!" + _token(B62, 3) + "4"
CTX_XML = _token(B62, 7) + "&amp;" + _token(B62, 4) + "#6"
CTX_ATTR = _token(B62, 6) + " '$" + _token(B62, 4) + "8"
CTX_NET = _token(B62, 7) + "#" + _token(B62, 2) + "3"
CTX_PROSE = _token(B62, 6) + ";" + _token(B62, 5) + "5"
CTX_TOKEN = _token(B62, 23) + "7"
CTX_URL = _token(B62, 12) + "9"
CORPUS += [
    Planted("ctx/app.ini", f"[database]\nhost = ledger-db\ndb_password = {CTX_INI}\nport = 5432\n".encode("ascii"),
            (CTX_INI,)),
    Planted("ctx/values.yaml", f"ledger:\n  replicas: 2\n  pwd: {CTX_YAML}\n".encode("ascii"), (CTX_YAML,)),
    Planted("ctx/.env", f"LEDGER_HOST=ledger-db\nLEDGER_DB_PASSWORD={CTX_ENV}\n".encode("ascii"), (CTX_ENV,)),
    Planted("ctx/Boot.java", ('class Boot { void init() {\n'
                              f'  System.setProperty("db.password", "{CTX_JAVA}");\n}} }}\n').encode("ascii"),
            (CTX_JAVA,)),
    Planted("ctx/settings.xml", (f"<settings>\n  <password>{CTX_XML}</password>\n"
                                 f'  <entry key="ledger.db.password" value="{CTX_ATTR}" />\n'
                                 '  <entry key="jetbrains.mps.v8_elimination" value="executed" />\n'
                                 "</settings>\n").encode("ascii"), (CTX_XML, CTX_ATTR)),
    Planted("ctx/runbook.md", (f"# Ledger runbook\n\n    net use L: \\\\fs01\\ledger /user:CORP\\ops {CTX_NET}\n"
                               f"    psql postgres://ledger:{CTX_URL}@db.corp.local:5432/ledger\n\n"
                               f"Log in to the NAS as admin, pw: {CTX_PROSE}\n").encode("ascii"),
            (CTX_NET, CTX_URL, CTX_PROSE)),
    Planted("ctx/deploy.toml", f'[registry]\ntoken = "{CTX_TOKEN}"\n'.encode("ascii"), (CTX_TOKEN,)),
    Planted("ctx/howto.txt", (f"To push, run docker login registry.corp -u ci {CTX_TOKEN} and then the job.\n"
                              ).encode("ascii"), (CTX_TOKEN,)),
]


# Personal data where documents mark it: a staff table in every
# syntax the readers emit one from, a letter's salutation and signature, an
# e-mail's display name and a patient form. These values are fresh on every
# run (FRESH_SEED, printed with a leak); each file has its own, so a column
# missed in one syntax is not hidden by the copies pass finding the same
# value in another.
# BASTION_FRESH_SEED replays the values of a run that printed its seed.
FRESH_SEED = int(os.environ.get("BASTION_FRESH_SEED") or random.randrange(2**32))
_fresh = random.Random(FRESH_SEED)


def _fresh_digits(length: int) -> str:
    return "".join(_fresh.choice("23456789") for _ in range(length))


def _fresh_name() -> str:
    return "Ys" + "".join(_fresh.choice("aeiounrl") for _ in range(5))


def _fresh_surname() -> str:
    return "Ok" + "".join(_fresh.choice("aeiounrl") for _ in range(6)) + "-Baptiste"


def _fresh_password() -> str:
    """Letters and digits around ``; # & ! $``, a space and both quotes."""
    return (_token_of(_fresh, B62, 5) + _fresh.choice(";#&!$") + " " + _token_of(_fresh, B62, 3) + "'\""
            + _fresh.choice(";#&!$") + _fresh_digits(2))


def _token_of(rng: random.Random, alphabet: str, length: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(length))


STAFF_HEADER = ("name", "ssn", "phone", "password", "PIN")


def _staff_row() -> tuple[str, ...]:
    # Long numbers (a PIN of 8 digits) so that no count or timing of an output holds one by chance.
    return (f"{_fresh_name()} {_fresh_surname()}", _fresh_digits(9), _fresh_digits(10), _fresh_password(),
            _fresh_digits(8))


def _xml(value: str) -> str:
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def staff_table(kind: str, rows: list[tuple[str, ...]], header: tuple[str, ...] = STAFF_HEADER) -> bytes:
    """The table (``header`` then ``rows``) as a file of ``kind``."""
    table = [header, *rows]
    if kind == "csv":
        return "".join(",".join('"' + cell.replace('"', '""') + '"' for cell in row) + "\r\n"
                       for row in table).encode("utf-8")
    if kind == "tsv":
        return "".join("\t".join(row) + "\n" for row in table).encode("utf-8")
    if kind == "md":
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return ("# Staff\n\n" + "\n".join(lines) + "\n").encode("utf-8")
    if kind == "html":
        cells = "".join("<tr>" + "".join(f"<{tag}>{_xml(cell)}</{tag}>" for cell in row) + "</tr>"
                        for tag, row in (("th" if index == 0 else "td", row) for index, row in enumerate(table)))
        return f"<html><body><h1>Staff</h1><table>{cells}</table></body></html>".encode("utf-8")
    if kind == "docx":
        cells = "".join("<w:tr>" + "".join(f"<w:tc>{para(_xml(cell))}</w:tc>" for cell in row) + "</w:tr>"
                        for row in table)
        return docx(para("Staff") + f"<w:tbl>{cells}</w:tbl>")
    if kind == "xlsx":  # a real sheet: text cells inline, the numbers as numbers
        def cell(value: str) -> str:
            if value.isdigit():
                return f"<c><v>{value}</v></c>"
            return f'<c t="inlineStr"><is><t xml:space="preserve">{_xml(value)}</t></is></c>'
        sheet = "".join("<row>" + "".join(cell(value) for value in row) + "</row>" for row in table)
        return zipped({"[Content_Types].xml": "<Types/>",
                       "xl/worksheets/sheet1.xml": f'<worksheet xmlns="s"><sheetData>{sheet}</sheetData></worksheet>'})
    raise ValueError(kind)


STAFF_KINDS = ("csv", "tsv", "xlsx", "md", "html", "docx")
STAFF_ROWS = {kind: [_staff_row(), _staff_row()] for kind in STAFF_KINDS}
LETTER_TO, LETTER_FROM = _fresh_surname(), (_fresh_name(), _fresh_surname())
MAIL_FROM = (_fresh_name(), _fresh_surname())
PATIENT = (_fresh_name(), _fresh_surname())
PATIENT_BORN = f"{_fresh.randint(10, 28)}/0{_fresh.randint(1, 9)}/{_fresh.randint(1940, 2005)}"


def staff_values(kind: str, rows: list[tuple[str, ...]]) -> tuple[str, ...]:
    """The values as they stand in the file of ``kind`` (a CSV cell doubles its quotes) and as they are."""
    values = [value for row in rows for value in row]
    if kind == "csv":
        values += [value.replace('"', '""') for value in values if '"' in value]
    return tuple(values)


CORPUS += [Planted(f"hr/staff.{kind}", staff_table(kind, rows), staff_values(kind, rows))
           for kind, rows in STAFF_ROWS.items()]
CORPUS += [
    Planted("letters/reference.txt", (
        f"Dear Ms. {LETTER_TO},\n\nthank you for the ledger audit; the rota for next month is attached.\n\n"
        f"Kind regards,\n{LETTER_FROM[0]} {LETTER_FROM[1]}\nHead of Payroll\n").encode("utf-8"),
        (LETTER_TO, *LETTER_FROM)),
    Planted("mail/rota.eml", (
        f"From: {MAIL_FROM[0]} {MAIL_FROM[1]} <{MAIL_FROM[0].lower()}@harbourline-post.com>\r\n"
        "To: ops@example.org\r\nSubject: the ledger rota\r\nMIME-Version: 1.0\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n\r\nThe ledger rota for December is settled.\r\n"
    ).encode("utf-8"), MAIL_FROM),
    Planted("forms/intake.txt", (
        f"Intake form, ledger clinic\nPatient name: {PATIENT[0]} {PATIENT[1]}\nDate of birth: {PATIENT_BORN}\n"
        "Reason: annual check\n").encode("utf-8"), (*PATIENT, PATIENT_BORN)),
]

# Credentials where real config and code put them: a key one field away, a key in another
# language, letters only, a passphrase, positional arguments, prose (fresh on every run).
def _fresh_key() -> str:
    return _token_of(_fresh, B62, 10) + _fresh_digits(2)


def _fresh_letters() -> str:
    return "".join(_fresh.choice("bcdfghjklmnpqrstvwxz") for _ in range(14))


KEYS = {name: _fresh_key() for name in ("k8s", "ecs", "hadoop", "tf", "cdata", "unattend", "wacht", "senha", "smtp",
                                        "imap", "auth", "mysqli", "netcred", "insert", "stdin", "sudo", "prose",
                                        "cipher")}
KEY_LETTERS = _fresh_letters()
KEY_PHRASE = " ".join(_token_of(_fresh, "abcdefghijklmnopqrstuvwxyz", 6) for _ in range(6))
KEY_PIN = _fresh_digits(6)
CORPUS += [
    Planted("keys/deploy.yaml", (f"env:\n  - name: LEDGER_DB_PASSWORD\n    value: {KEYS['k8s']}\n"
                                 "  - name: LEDGER_HOST\n    value: ledger-db\n").encode("ascii"), (KEYS["k8s"],)),
    Planted("keys/task.json", ('{"environment": [{"name": "LEDGER_API_TOKEN", "value": "' + KEYS["ecs"] + '"}]}\n'
                               ).encode("ascii"), (KEYS["ecs"],)),
    Planted("keys/core-site.xml", ("<configuration><property><name>fs.s3a.secret.key</name>"
                                   f"<value>{KEYS['hadoop']}</value></property>\n"
                                   f"<password><![CDATA[{KEYS['cdata']}]]></password></configuration>\n"
                                   ).encode("ascii"), (KEYS["hadoop"], KEYS["cdata"])),
    Planted("keys/vars.tf", f'variable "ledger_db_password" {{\n  default = "{KEYS["tf"]}"\n}}\n'.encode("ascii"),
            (KEYS["tf"],)),
    Planted("keys/unattend.xml", ("<unattend><AdministratorPassword>\n  <Value>" + KEYS["unattend"]
                                  + "</Value>\n</AdministratorPassword></unattend>\n").encode("ascii"),
            (KEYS["unattend"],)),
    Planted("keys/ledger.env", (f"WACHTWOORD={KEYS['wacht']}\nSENHA_BANCO={KEYS['senha']}\n"
                                f"SMTP_PASSWORD={KEY_LETTERS}\npassphrase: {KEY_PHRASE}\n").encode("ascii"),
            (KEYS["wacht"], KEYS["senha"], KEY_LETTERS, KEY_PHRASE)),
    Planted("keys/mailer.py", (f"smtp.login('ledger', '{KEYS['smtp']}')\nimap.login(\"ledger\", \"{KEYS['imap']}\")\n"
                               f"requests.get(url, auth=('ledger', '{KEYS['auth']}'))\n"
                               "password = get_password()\n").encode("ascii"),
            (KEYS["smtp"], KEYS["imap"], KEYS["auth"])),
    Planted("keys/db.php", f"$db = mysqli_connect($host, 'ledger', '{KEYS['mysqli']}', 'ledger');\n".encode("ascii"),
            (KEYS["mysqli"],)),
    Planted("keys/Mail.cs", (f'var c = new NetworkCredential("ledger", "{KEYS["netcred"]}", "CORP");\n'
                             f'm.setCipherKey(Base64.decode("{KEYS["cipher"]}"));\n').encode("ascii"),
            (KEYS["netcred"], KEYS["cipher"])),
    Planted("keys/seed.sql", (f"INSERT INTO users (login, password, role) VALUES ('ops', '{KEYS['insert']}', 'admin');\n"
                              ).encode("ascii"), (KEYS["insert"],)),
    Planted("keys/deploy.sh", (f"echo '{KEYS['stdin']}' | docker login -u ci --password-stdin registry.corp\n"
                               f'echo "{KEYS["sudo"]}" | sudo -S systemctl restart ledger\n').encode("ascii"),
            (KEYS["stdin"], KEYS["sudo"])),
    Planted("keys/welcome.txt", (f"Welcome aboard. Your temporary password is {KEYS['prose']} and your card's "
                                 f"PIN {KEY_PIN} arrives by post.\n").encode("ascii"), (KEYS["prose"], KEY_PIN)),
]

# Disguised forms a reader undoes at a glance, an OCR-free letter-spaced layer, a vertical record, the
# markers of minutes and chat: fresh values, each planted in the one form that hides it.
FORM_KEY = "AKIA" + _token_of(_fresh, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
FORM_IBAN = "DE" + _fresh_digits(20)
FORM_IBAN = FORM_IBAN[:2] + f"{98 - int(FORM_IBAN[4:] + '131400') % 97:02d}" + FORM_IBAN[4:]
FORM_FRAME_PW = _token_of(_fresh, B62, 9) + "#7"
FORM_VERTICAL_PW = _token_of(_fresh, B62, 10) + "!4"
FORM_SSN = f"{_fresh.randint(120, 599)}-{_fresh_digits(2)}-{_fresh_digits(4)}"
FORM_REPORTER = (_fresh_name(), _fresh_surname())
FORM_SPEAKER = (_fresh_name(), _fresh_surname())
CORPUS += [
    Planted("forms/keys.py", (f'KEY = "{FORM_KEY[:4]}" + "{FORM_KEY[4:12]}" + \\\n      "{FORM_KEY[12:]}"\n'
                              ).encode("ascii"), (FORM_KEY[4:12], FORM_KEY[12:])),
    Planted("forms/wire.txt", ("Please wire the deposit to " + "-".join(FORM_IBAN[i:i + 4] for i in range(0, 22, 4))
                               + " by Friday.\n").encode("ascii"),
            ("-".join(FORM_IBAN[i:i + 4] for i in range(0, 22, 4)),)),
    Planted("forms/frame.log", (f"INFO accounts loaded\n   user      password  role\n0  kim  {FORM_FRAME_PW}  admin\n"
                                ).encode("ascii"), (FORM_FRAME_PW,)),
    Planted("forms/record.tsv", f"Field\tValue\nPassword\t{FORM_VERTICAL_PW}\nOffice\tLedger\n".encode("ascii"),
            (FORM_VERTICAL_PW,)),
    Planted("forms/scan-layer.txt", ("  ".join(" ".join(word) for word in f"SSN {FORM_SSN}".split(" ")) + "\n"
                                     ).encode("ascii"), (" ".join(FORM_SSN),)),
    Planted("forms/minutes.txt", (f"Ledger sync\nReporter: {FORM_REPORTER[0]} {FORM_REPORTER[1]}\n"
                                  f"[09:14] {FORM_SPEAKER[0]} {FORM_SPEAKER[1]}: the rota is settled\n"
                                  ).encode("utf-8"), (*FORM_REPORTER, *FORM_SPEAKER)),
]


def gpg_private_key(folder: Path) -> Planted | None:
    """Real ``gpg --armor --export-secret-keys`` output in a notes file; None without gpg."""
    if shutil.which("gpg") is None:
        return None
    home = folder / "gnupg"
    home.mkdir(mode=0o700)
    env = dict(os.environ, GNUPGHOME=str(home))
    subprocess.run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", "Ledger Ops <ops@example.org>",
                    "ed25519", "default", "never"], check=True, capture_output=True, env=env, timeout=60)
    block = subprocess.run(["gpg", "--batch", "--armor", "--export-secret-keys"], check=True, capture_output=True,
                           env=env, timeout=60, text=True).stdout
    if shutil.which("gpgconf"):  # stop the agent gpg started for this home
        subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, capture_output=True, timeout=30)
    shutil.rmtree(home, ignore_errors=True)
    body = [line for line in block.splitlines() if len(line) > 40 and not line.startswith("-----")]
    text = f"Ledger signing key backup.\n\n{block}\nKeep offline.\n"
    return Planted("ops/signing-key.txt", text.encode("ascii"), tuple(line[:48] for line in body))


INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad\u180e"))
QUERIES = ("deploy the ledger service", "customer phone notes", "cafeteria menu",
           "staff name ssn phone password PIN", "letter about the ledger audit and the rota", "patient intake form")


def views(text: str) -> dict[str, bytes]:
    """The reversible views of a place's text, as bytes to search for a secret's ASCII bytes in."""
    return {
        "text": text.encode("utf-8"),
        "without invisible characters": text.translate(INVISIBLE).encode("utf-8"),
        "utf-16-le": text.encode("utf-16-le", "replace"),
        "cp500": text.encode("cp500", "replace"),
    }


def leaks(places: dict[str, str | bytes], secrets: dict[str, str]) -> list[str]:
    """``"place: secret name (view)"`` for every planted value found in a place or one of its views.

    ``places`` maps a name to its text, or to its raw bytes (a file): bytes
    are searched as they are, as UTF-16, and through the views of their
    UTF-8 reading. ``secrets`` maps a name (shown) to the value (not shown).
    """
    found = []
    for place, content in places.items():
        if isinstance(content, bytes):
            spaces = {"bytes": content, **views(content.decode("utf-8", "replace"))}
        else:
            spaces = views(content)
        for secret_name, value in secrets.items():
            needles = {value.encode("utf-8")}
            if isinstance(content, bytes):
                needles.add(value.encode("utf-16-le"))
            for view, haystack in spaces.items():
                if any(needle in haystack for needle in needles):
                    found.append(f"{place}: {secret_name} ({view})")
                    break
    return found


def ssh_private_key(folder: Path) -> Planted | None:
    """A fresh ``ssh-keygen`` ed25519 private key, pasted into a runbook; None without ssh-keygen."""
    if shutil.which("ssh-keygen") is None:
        return None
    key = folder / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ops@bastion-test", "-f", str(key)],
                   check=True, capture_output=True)
    block = key.read_text(encoding="ascii")
    key.unlink()
    key.with_suffix(".pub").unlink()
    body = [line for line in block.splitlines() if line and not line.startswith("-----")]
    text = f"Runbook: emergency access to the ledger host.\n\n{block}\nStore this key in the vault.\n"
    return Planted("ops/runbook.txt", text.encode("ascii"), tuple(body[1:]))  # the first line is the same in every key


class PromiseTests(TempFolder, unittest.TestCase):
    def setUp(self):
        self.tmp = self.make_tmp()
        self.manifest = write_manifest(self.tmp, size=24, overlap=4)
        self.docs = self.tmp / "docs"
        self.out = self.tmp / "out"
        self.layout = Layout(self.out)
        self.corpus = list(CORPUS)
        for make in (ssh_private_key, gpg_private_key):
            generated = make(self.tmp)
            if generated is not None:
                self.corpus.append(generated)
        for planted in self.corpus:
            path = self.docs / planted.name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(planted.data)
        self.places: dict[str, str | bytes] = {}

    def command(self, *argv: str, env: dict) -> str:
        with clean_env(**env):
            code, out, err = run_cli(argv[0], self.manifest, *argv[1:], "--out", self.out)
        label = " ".join(argv)
        self.places[f"stdout of {label}"] = out
        self.places[f"stderr of {label}"] = err
        self.assertEqual(code, 0, f"{label}: {err}")
        return out

    def secrets(self) -> dict[str, str]:
        values = {}
        for planted in self.corpus:
            for index, value in enumerate(planted.secrets):
                values[f"{planted.name} #{index}"] = value
            text = planted.data.decode("utf-8", "replace")
            if not any(value in text for value in planted.secrets):
                continue  # nothing to redact: the sanitized text is the raw text, so its hash is its public id
            for label, digest in (("sha256 of the raw file", hashlib.sha256(planted.data).hexdigest()),
                                  ("sha256 of its text", hashlib.sha256(text.encode("utf-8")).hexdigest())):
                values[f"{planted.name}: {label}"] = digest
                values[f"{planted.name}: {label} (upper case)"] = digest.upper()
        return values

    def test_no_planted_value_or_raw_hash_outside_the_extract_store(self):
        with StubServer(dim=64) as stub:
            env = {"EMBED_URL": stub.url}
            for stage in ("extract", "sanitize", "chunk", "embed"):
                self.command(stage, env=env)
            self.command("sweep", env=env)  # a second run, reusing what it can
            self.command("extract", "--report", env=env)
            for query in QUERIES:
                hits = json.loads(self.command("search", query, "--json", "-k", "10", env=env))
                self.assertIsInstance(hits, list)
            self.assertTrue(hits, "the search found nothing: the scan would prove little")
            self.serve_answers(stub)
            self.mcp_answers(stub)
            for index, (path, body) in enumerate(stub.requests):
                self.places[f"model server request {index} to {path}"] = json.dumps(body, ensure_ascii=False)
                inputs = body.get("input") if isinstance(body.get("input"), list) else [body.get("input")]
                for position, text in enumerate(inputs):
                    self.places[f"model server request {index} input {position}"] = str(text)
        self.assertGreater(len(stub.requests), 1)
        files = 0
        for path in sorted(self.out.rglob("*")):
            rel = path.relative_to(self.out).as_posix()
            if path.is_file() and not rel.startswith("extract/"):
                self.places[rel] = path.read_bytes()
                files += 1
        self.assertIn("vectors.db", self.places)
        self.assertTrue(any(name.startswith("sanitized/") for name in self.places))
        status = {row["path"]: row["status"] for row in read_jsonl(self.out / "extract" / "listing.jsonl")}
        for name in [f"hr/staff.{kind}" for kind in STAFF_KINDS] + ["letters/reference.txt", "mail/rota.eml"]:
            self.assertEqual(status.get(name), "extracted", f"{name} was not read: its scan would prove nothing")
        self.assertGreater(files, 8)
        secrets = self.secrets()
        for row in read_jsonl(self.out / "extract" / "listing.jsonl"):  # the private keys: hashes of raw bytes
            if row.get("key"):
                secrets[f"extract key of {row['path']}"] = row["key"]
        self.assertEqual(leaks(self.places, secrets), [], f"fresh values of seed {FRESH_SEED}")

    def mcp_answers(self, stub: StubServer) -> None:
        """What the MCP tools answer: ``search`` for each query, then ``fetch`` around each hit.

        Through the SDK's own stdio client against ``mcp MANIFEST`` when the
        mcp extra is installed (what an assistant reads: the structured
        content and the text blocks); without it, the same tools in this
        process (what that server would have serialised).
        """
        try:
            import anyio
            from mcp import ClientSession, StdioServerParameters, stdio_client
        except ImportError:
            self.mcp_answers_in_process(stub)
            return
        params = StdioServerParameters(command=sys.executable, cwd=str(Path(__file__).resolve().parents[1]),
                                       args=["-m", "bastion_agent", "mcp", str(self.manifest), "--out", str(self.out)],
                                       env={"EMBED_URL": stub.url})
        answers: dict[str, str] = {}

        def shown(result) -> str:
            self.assertFalse(result.is_error, result.content)
            return result.model_dump_json(by_alias=True) + "".join(block.text for block in result.content)

        async def session_then_calls():
            with anyio.fail_after(120):
                async with stdio_client(params) as (read_stream, write_stream):
                    async with ClientSession(read_stream, write_stream) as session:
                        await session.initialize()
                        for query in QUERIES:
                            result = await session.call_tool("search", {"query": query, "k": 10})
                            answers[f"mcp search {query}"] = shown(result)
                            for hit in result.structured_content["hits"]:
                                fetched = await session.call_tool("fetch", {"chunk_id": hit["chunk_id"],
                                                                            "neighbours": 2})
                                answers[f"mcp fetch {hit['chunk_id']}"] = shown(fetched)

        anyio.run(session_then_calls)
        self.assertTrue(any(name.startswith("mcp fetch") for name in answers), answers)
        self.places.update(answers)

    def mcp_answers_in_process(self, stub: StubServer) -> None:
        from bastion_agent.config import manifest as manifest_module
        from bastion_agent.embedding.endpoint import EndpointConfig
        from bastion_agent.serving import mcp_server

        with clean_env():
            loaded = manifest_module.load(self.manifest)
        tools = mcp_server.BastionTools(loaded, self.layout, EndpointConfig(url=stub.url))
        for query in QUERIES:
            found = tools.search({"query": query, "k": 10})
            self.places[f"mcp search {query}"] = json.dumps(found, ensure_ascii=False)
            for hit in found["hits"]:
                self.places[f"mcp fetch {hit['chunk_id']}"] = json.dumps(
                    tools.fetch({"chunk_id": hit["chunk_id"], "neighbours": 2}), ensure_ascii=False)

    def serve_answers(self, stub: StubServer) -> None:
        from bastion_agent.config import manifest as manifest_module
        from bastion_agent.embedding.endpoint import EndpointConfig
        from bastion_agent.serving import serve

        with clean_env():
            loaded = manifest_module.load(self.manifest)
        settings = serve_settings.ServeSettings(port=0, reload_check_seconds=3600.0)
        log = io.StringIO()
        server = serve.build_server(loaded, self.layout, settings, log, endpoint=EndpointConfig(url=stub.url))
        with serve.RunningServer(server) as running:
            for query in QUERIES:
                self.places[f"serve /search {query}"] = self.get(running.url, "/search?" + urllib.parse.urlencode(
                    {"q": query, "k": 10}))
            self.places["serve page /"] = self.get(running.url, "/")
            self.places["serve /healthz"] = self.get(running.url, "/healthz")
        self.places["serve log"] = log.getvalue()
        self.assertIn('"hits"', self.places[f"serve /search {QUERIES[0]}"])

    @staticmethod
    def get(url: str, path: str) -> str:
        parts = urllib.parse.urlsplit(url)
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        try:
            connection.request("GET", path)
            answer = connection.getresponse()
            return answer.read().decode("utf-8")
        finally:
            connection.close()


# ---------------------------------------------------------------- side channels
#
# Nothing an attacker can read may depend on a redacted value: not its length,
# not whether it equals another file's. Two sweeps whose folders differ only in
# a redacted value must print and write the same outputs, timings aside.

_TIMING_KEYS = {"seconds", "batch_trials", "batch_settled", "concurrency_settled", "batch_size_final", "batch_tuning"}
_TIMING_TEXT = (
    (re.compile(r" in (?:\d+(?:\.\d+)? s|\d+ min \d+ s)\b"), " in <time>"),
    (re.compile(r"\(\d+(?:\.\d+)? windows/s, (?:batch \d+(?: \(fixed\))?, \d+ in flight, )?"), "("),
)
NOTES = [f"notes/note-{index:02d}.txt" for index in range(20)]
PIN_RULE = '\n[[sanitize.rules]]\nid = "door-pin"\npattern = "(?<=door PIN: )[0-9]{3}"\n'


def without_timings(value, tmp: Path):
    """A command's output or a summary with what varies from run to run (timings, the folder) taken out."""
    if isinstance(value, dict):
        return {key: without_timings(item, tmp) for key, item in value.items() if key not in _TIMING_KEYS}
    if isinstance(value, list):
        return [without_timings(item, tmp) for item in value]
    if not isinstance(value, str):
        return value
    text = value.replace(str(tmp), "<tmp>")
    try:
        return without_timings(json.loads(text), tmp) if text.strip()[:1] in ("{", "[") else _untimed(text)
    except ValueError:
        return _untimed(text)


def _untimed(text: str) -> str:
    for pattern, replacement in _TIMING_TEXT:
        text = pattern.sub(replacement, text)
    return text


FIXED_MTIME = 1_764_547_200  # 2025-12-01T00:00:00Z, every file of the two folders compared


class SideChannelTests(TempFolder, unittest.TestCase):
    """Every summary, ``--json`` output, stage line and report of two sweeps that differ only in a redacted value."""

    @classmethod
    def setUpClass(cls):
        cls.stub = StubServer(dim=64).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.stub.__exit__(None, None, None)

    def readable_outputs(self, files: dict[str, bytes], extra: str = "", commands=None) -> dict:
        """What an attacker who can read the output folder's summaries and the commands' output sees."""
        tmp = self.make_tmp()
        manifest = write_manifest(tmp, size=16, overlap=4, extra=extra)
        for name in NOTES:
            (tmp / "docs" / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / "docs" / name).write_text(f"Meeting note {name}: the ledger review and the rota.\n")
        for name, data in files.items():
            (tmp / "docs" / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / "docs" / name).write_bytes(data)
        for path in (tmp / "docs").rglob("*"):  # the same dates in both folders: only the redacted value differs
            os.utime(path, (FIXED_MTIME, FIXED_MTIME))
        outputs = {}
        commands = commands or (("extract", "--json"), ("sanitize", "--json"), ("chunk", "--json"),
                                ("embed", "--json"), ("sweep", "--json"), ("sweep",), ("extract", "--report", "--files"),
                                ("search", "ledger service config", "--json", "-k", "30"))
        for argv in commands:
            with clean_env(EMBED_URL=self.stub.url):
                code, out, err = run_cli(argv[0], manifest, *argv[1:], "--out", tmp / "out")
            self.assertEqual(code, 0, err)
            outputs[f"stdout of {' '.join(argv)}"] = without_timings(out, tmp)
            outputs[f"stderr of {' '.join(argv)}"] = without_timings(err, tmp)
        for path in sorted((tmp / "out").glob("*.summary.json")):
            outputs[path.name] = without_timings(path.read_text(encoding="utf-8"), tmp)
        return outputs

    def assertSameOutputs(self, first: dict, second: dict) -> None:
        self.assertEqual(sorted(first), sorted(second))
        for name in first:
            self.assertEqual(first[name], second[name], f"{name} tells the two folders apart")

    def test_a_password_of_another_value_or_length_changes_no_output(self):
        base = {"ops/config.json": '{"service": "ledger", "password": "%s"}\n'}
        outputs = {}
        for label, password in (("same length", "Kq7sP2xWm9Lt"), ("other value", "Zr4nB8vCy1Hd"),
                                ("other length", "Wm3hT8qLp2Rx6Ns9Vb4Kd7Gf5Jc1Y")):
            files = {name: (text % password).encode() for name, text in base.items()}
            outputs[label] = self.readable_outputs(files)
        self.assertIn("secret-assignment", json.dumps(outputs["same length"]))  # the password was redacted
        self.assertSameOutputs(outputs["same length"], outputs["other value"])
        self.assertSameOutputs(outputs["same length"], outputs["other length"])

    def test_two_configs_with_equal_or_different_passwords_look_the_same(self):
        # Equal passwords make the two files the same raw bytes at two paths; different ones make two
        # raw files that sanitize to the same text. No count, document or line may tell which.
        config = '{"service": "ledger", "password": "%s"}\n'
        equal = self.readable_outputs({"a/config.json": (config % "Kq7sP2xWm9Lt").encode(),
                                       "b/config.json": (config % "Kq7sP2xWm9Lt").encode()})
        different = self.readable_outputs({"a/config.json": (config % "Kq7sP2xWm9Lt").encode(),
                                           "b/config.json": (config % "Zr4nB8vCy1Hd").encode()})
        self.assertSameOutputs(equal, different)

    def test_planted_guesses_of_a_pin_learn_nothing(self):
        # The attacker can drop files into the swept folder and read what the commands print and the
        # summaries: a copy of the victim's file holding the right PIN has the victim's exact bytes.
        victim = b"Server room: the door PIN: 482 opens it.\n"
        runs = {}
        for guess in ("117", "482", "903", "640"):
            planted = victim.replace(b"482", guess.encode())
            runs[guess] = self.readable_outputs({"ops/door.txt": victim, "uploads/guess.txt": planted}, PIN_RULE)
        self.assertIn("door-pin", json.dumps(runs["482"]))  # the PIN was redacted, in both files
        for guess in ("117", "903", "640"):
            with self.subTest(wrong=guess):
                self.assertSameOutputs(runs["482"], runs[guess])


# ---------------------------------------------------------------- stores inside the root

OLD_WORD = "quixotrumvelk"  # only in the old project's documents, which are not in the root


class StoreInRootTests(TempFolder, unittest.TestCase):
    """No store is ever read as a document: a copied project's output folder, or a link to the live one."""

    def setUp(self):
        self.tmp = self.make_tmp()
        self.manifest = write_manifest(self.tmp, size=16, overlap=4)
        self.docs = self.tmp / "docs"
        self.out = self.tmp / "out"
        (self.docs / "notes.txt").write_text("The ledger review moved to Thursday.\n")
        self.stub = StubServer(dim=64).__enter__()
        self.addCleanup(self.stub.__exit__, None, None, None)

    def cli(self, *argv, manifest=None, out=None) -> str:
        with clean_env(EMBED_URL=self.stub.url):
            code, stdout, err = run_cli(argv[0], manifest or self.manifest, *argv[1:], "--out", out or self.out)
        self.assertEqual(code, 0, err)
        return stdout + err

    def old_project(self) -> Path:
        """An older project, swept into its default ``.bastion/``: raw keys in its listings, raw text."""
        old = self.tmp / "old"
        manifest = write_manifest(old, size=16, overlap=4)
        (old / "docs" / "door.txt").write_text(f"{OLD_WORD} vault: password is Hx7Lq2Wv9Pk4 for the door.\n")
        self.cli("sweep", manifest=manifest, out=old / ".bastion")
        return old / ".bastion"

    def private_keys(self, *outs: Path) -> set[str]:
        keys = set()
        for out in outs:
            for row in read_jsonl(out / "extract" / "listing.jsonl"):
                if row.get("key"):
                    keys.add(row["key"])
        return keys

    def readable(self, search_output: str) -> dict[str, bytes]:
        places = {"search": search_output.encode("utf-8")}
        for path in sorted(self.out.rglob("*")):
            rel = path.relative_to(self.out).as_posix()
            if path.is_file() and not rel.startswith("extract/"):
                places[rel] = path.read_bytes()
        self.assertIn("vectors.db", places)
        return places

    def assertNothingOf(self, keys: set[str], words: tuple[str, ...], places: dict[str, bytes]) -> None:
        self.assertTrue(keys)
        for place, data in places.items():
            for value in (*keys, *words):
                self.assertNotIn(value.encode("utf-8"), data, f"{value[:12]}... reached {place}")

    def test_a_copied_older_project_deep_in_the_root_is_not_read(self):
        old = self.old_project()
        shutil.copytree(old, self.docs / "archive" / "2019" / "projects" / "old" / ".bastion")
        legacy = self.docs / "backup" / "before-markers"  # an output folder made before the marker
        shutil.copytree(old, legacy)
        (legacy / ".bastion-out").unlink()
        for summary in legacy.glob("*.summary.json"):
            summary.unlink()
        shutil.copytree(old / "extract", self.docs / "backup" / "extract-only")  # the private store on its own
        report = self.cli("sweep") + self.cli("extract", "--report", "--files")
        hits = self.cli("search", f"{OLD_WORD} vault door", "--json")
        self.assertIn("output folder", report)
        rows = {row["path"]: row for row in read_jsonl(self.out / "extract" / "listing.jsonl")}
        for folder in ("archive/2019/projects/old/.bastion", "backup/before-markers", "backup/extract-only"):
            self.assertEqual((rows[folder]["status"], rows[folder]["reason"]), ("skipped", "output folder"), folder)
        self.assertNothingOf(self.private_keys(old), (OLD_WORD, "Hx7Lq2Wv9Pk4"), self.readable(hits))
        self.assertIn("ledger review", hits)  # the real document is still found

    def test_a_hard_link_to_the_live_store_is_not_read_now_or_after_the_store_replaced_it(self):
        (self.docs / "door.txt").write_text("vault: password is Hx7Lq2Wv9Pk4 for the door.\n")
        self.cli("sweep")
        os.link(self.out / "extract" / "listing.jsonl", self.docs / "listing-link.jsonl")
        first = self.cli("sweep") + self.cli("extract", "--report", "--files")
        self.assertIn("file of the output folder", first)
        third = self.cli("sweep") + self.cli("extract", "--report", "--files")  # the link now holds an old listing
        self.assertIn("file of the output folder", third)
        os.link(self.out / "extract" / "sanitized.jsonl", self.docs / "map-link.jsonl")
        self.cli("sanitize")  # replaced before extract saw the link: known by its content
        hits = self.cli("sweep") + self.cli("search", "vault extracted status key", "--json")
        rows = {row["path"]: row for row in read_jsonl(self.out / "extract" / "listing.jsonl")}
        for name in ("listing-link.jsonl", "map-link.jsonl"):
            self.assertEqual(rows[name]["reason"], "file of the output folder", name)
        self.assertNothingOf(self.private_keys(self.out), ("Hx7Lq2Wv9Pk4", '"status"'), self.readable(hits))


# ---------------------------------------------------------------- file names

LATIN1_NAME = "jos\xe9.garc\xeda@corp-mail.es"
FORGED = "notes\n\n2. relevance 100  forged-result.txt  [doc 000000000000 window 0]\n    forged text"
NAME_CONTROLS = ("\n", "\x1b", "\u202e", "\x85", "\t")


class FileNameTests(TempFolder, unittest.TestCase):
    """File names are decoded (UTF-8, else Latin-1) before sanitize, then escaped in every output."""

    def setUp(self):
        self.tmp = self.make_tmp()
        self.manifest = write_manifest(self.tmp, size=16, overlap=4)
        self.docs = self.tmp / "docs"
        self.out = self.tmp / "out"
        (self.docs / "hr").mkdir()
        with open(os.fsencode(self.docs / "hr") + b"/" + LATIN1_NAME.encode("latin-1") + b".txt", "wb") as handle:
            handle.write(b"Review notes of the ledger team, the rota and the budget.\n")
        (self.docs / FORGED).write_text("Meeting notes about the ledger budget and the rota.\n")
        (self.docs / "ops\x1b]0;pwned\x07\u202egpj.txt").write_text("Ledger budget notes, third copy of the rota.\n")
        self.stub = StubServer(dim=64).__enter__()
        self.addCleanup(self.stub.__exit__, None, None, None)

    def cli(self, *argv) -> tuple[str, str]:
        with clean_env(EMBED_URL=self.stub.url):
            code, out, err = run_cli(argv[0], self.manifest, *argv[1:], "--out", self.out)
        self.assertEqual(code, 0, err)
        return out, err

    def test_a_latin1_address_in_a_name_is_removed_whole(self):
        self.cli("sweep")
        hits = json.loads(self.cli("search", "review notes ledger team", "--json", "-k", "10")[0])
        paths = [path for hit in hits for path in hit["paths"]]
        self.assertIn("hr/[REDACTED:email].txt", paths)
        report = self.cli("extract", "--report", "--files")[0]
        for place, text in (("search --json", json.dumps(paths, ensure_ascii=False)), ("report", report),
                            ("sanitized listing", self.layout_text("sanitized/listing.jsonl"))):
            for part in ("garc", "corp-mail", "\\xe9", "jos\u00e9"):
                self.assertNotIn(part, text, place)

    def layout_text(self, rel: str) -> str:
        return (self.out / rel).read_text(encoding="utf-8")

    def test_control_characters_in_names_are_escaped_in_every_output(self):
        from bastion_agent.config import manifest as manifest_module
        from bastion_agent.embedding.endpoint import EndpointConfig
        from bastion_agent.serving import mcp_server, serve

        self.cli("sweep")
        text, _ = self.cli("search", "ledger budget rota notes", "-k", "10")
        hits = json.loads(self.cli("search", "ledger budget rota notes", "--json", "-k", "10")[0])
        self.assertEqual(len(hits), 3, hits)
        # One result line per hit: a newline in a name cannot add one.
        self.assertEqual(len(re.findall(r"^\d+\. relevance", text, re.M)), 3, text)
        with clean_env():
            loaded = manifest_module.load(self.manifest)
        settings = serve_settings.ServeSettings(port=0, reload_check_seconds=3600.0)
        endpoint = EndpointConfig(url=self.stub.url)
        server = serve.build_server(loaded, Layout(self.out), settings, io.StringIO(), endpoint=endpoint)
        with serve.RunningServer(server) as running:
            answer = PromiseTests.get(running.url, "/search?" + urllib.parse.urlencode({"q": "ledger budget", "k": 10}))
            page = PromiseTests.get(running.url, "/")
        tools = mcp_server.BastionTools(loaded, Layout(self.out), endpoint)
        mcp = tools.search({"query": "ledger budget rota notes", "k": 10})
        outputs = {
            "search": text, "search --json paths": [path for hit in hits for path in hit["paths"]],
            "serve /search paths": [path for hit in json.loads(answer)["hits"] for path in hit["paths"]],
            "mcp paths": [path for hit in mcp["hits"] for path in hit["paths"]],
            "report": self.cli("extract", "--report", "--files")[0], "serve page": page,
        }
        self.assertEqual(len(outputs["mcp paths"]), 3, mcp)
        for place, shown in outputs.items():
            for value in (shown if isinstance(shown, list) else [shown]):
                if place == "search" or place == "report" or place == "serve page":
                    value = "".join(value.split("\n"))  # their own lines aside
                for control in NAME_CONTROLS:
                    self.assertNotIn(control, value, f"{place}: {value!r}")
        self.assertIn("notes\\x0a\\x0a2. relevance 100  forged-result.txt", "".join(outputs["search --json paths"]))


class StaffTableTests(unittest.TestCase):
    """Each syntax of the staff table, as its reader emits it, loses every sensitive cell; a look-alike keeps all.

    The look-alike has the same syntax and a bare ``name`` column, but no
    personal column beside it (a product list): its names and numbers stay.
    """

    def read_then_sanitize(self, kind: str, data: bytes) -> tuple[str, str]:
        from bastion_agent.extracting import readers
        from bastion_agent.sanitizing.scanner import Sanitizer

        text = readers.read(readers.kind_for(f"staff.{kind}", data[:4096]), data).text
        self.assertIsNotNone(text, kind)
        return text, Sanitizer().redact(text)[0]

    def test_every_sensitive_cell_goes_in_every_syntax(self):
        for kind in STAFF_KINDS:
            rows = [_staff_row(), _staff_row()]
            with self.subTest(kind=kind):
                text, clean = self.read_then_sanitize(kind, staff_table(kind, rows))
                values = staff_values(kind, rows)
                for value in values:
                    if kind != "csv" or '"' not in value or '""' in value:  # as the file holds it
                        self.assertIn(value, text, "the reader lost a cell: the test would prove nothing")
                    self.assertNotIn(value, clean)
                for column in ("ssn-column", "phone-column", "password-column", "pin-column", "person-name"):
                    self.assertIn(f"[REDACTED:{column}]", clean)

    def test_a_product_table_in_the_same_syntax_stays(self):
        products = [("name", "price", "sku", "stock"), ("Widget Pro", "3.50", "AB-1", "120"),
                    ("Gadget Max", "12.00", "CD-22", "7")]
        for kind in STAFF_KINDS:
            with self.subTest(kind=kind):
                text, clean = self.read_then_sanitize(kind, staff_table(kind, products[1:], products[0]))
                self.assertIn("Gadget Max", text)
                self.assertEqual(clean, text)

class ScannerTests(unittest.TestCase):
    """The scanner itself must find what it is meant to find, or a clean result proves nothing."""

    def test_it_finds_a_value_in_text_in_bytes_and_through_each_reversible_view(self):
        secret = {"key": "AKIAEXAMPLEVALUE1234"}
        hidden_utf16 = "AKIAEXAMPLEVALUE1234".encode("ascii").decode("utf-16-le")  # ASCII read pair-wise: CJK
        hidden_cp500 = "AKIAEXAMPLEVALUE1234".encode("ascii").decode("cp500")
        cases = {
            "plain": "see AKIAEXAMPLEVALUE1234 here",
            "zero-width": "AKIA\u200bEXAMPLE\u00adVALUE1234",
            "utf-16": hidden_utf16,
            "cp500": hidden_cp500,
        }
        for name, text in cases.items():
            with self.subTest(name=name):
                self.assertEqual(len(leaks({name: text}, secret)), 1)
        self.assertEqual(len(leaks({"file": b"\x00\x01AKIAEXAMPLEVALUE1234\x00"}, secret)), 1)
        self.assertEqual(len(leaks({"file": "AKIAEXAMPLEVALUE1234".encode("utf-16-le")}, secret)), 1)
        self.assertEqual(leaks({"clean": "nothing [REDACTED:aws-access-key] here", "file": b"\x00" * 64}, secret), [])


if __name__ == "__main__":
    unittest.main()
