"""Context decides the extent; every copy goes; the damaging false positives stay unchanged.

Each case is a syntax in which a credential-named key holds a value whose
characters a shape detector stops at (``; # & ! $``, spaces, quotes); the
values are random per run. Beside each, a look-alike that must stay.
"""

from __future__ import annotations

import random
import string
import tempfile
import unittest
from pathlib import Path

from bastion_agent.core.layout import Layout, read_jsonl
from bastion_agent.sanitizing import context, copies
from bastion_agent.sanitizing.scanner import Sanitizer, redact
from bastion_agent.testing.testsupport import sanitize_as_extracted, write_manifest

LETTERS = string.ascii_letters + string.digits
SYMBOLS = ";#&!$"


def word(length: int = 10) -> str:
    """A password without spaces or quotes: letters, digits and ``; # & ! $`` (starts with a letter)."""
    chars = [random.choice(string.ascii_letters)] + [random.choice(LETTERS) for _ in range(length - 3)]
    chars += [random.choice(SYMBOLS), random.choice(string.digits)]
    head, rest = chars[0], chars[1:]
    random.shuffle(rest)
    return head + "".join(rest)


def phrase() -> str:
    """A password with a space and a quote inside (for syntaxes that end at the end of the line)."""
    return f"{word(6)} {word(5)}'{random.choice(LETTERS)}\"{random.choice(SYMBOLS)}9"


def token(length: int = 21) -> str:
    return "".join(random.choice(LETTERS) for _ in range(length - 1)) + random.choice(string.digits)


def positives() -> list[tuple[str, str, str]]:
    """(name, text, value) for every syntax in which a credential-named key holds a value."""
    p, w = phrase(), word
    passphrase = " ".join("".join(random.choice(string.ascii_lowercase) for _ in range(6)) for _ in range(4))
    values = {name: w() for name in ("ini", "amp", "bind", "prop", "net", "xml", "pw", "url", "jenkins", "export",
                                     "env", "json", "attr", "call", "php", "environ", "ENV", "putenv", "conn",
                                     "wifi", "sql", "mssql", "netuser", "toml", "yaml", "properties", "flag",
                                     "query", "htpasswd", "smb", "sqlplus", "entry", "templ", "tab")}
    v = values
    return [
        ("ini with ; and #", f"[db]\ndb_password = {p}\nhost = db1\n", p),
        ("ini & and -", f"password = Tr0ub4dor&3-{v['amp']}\n", f"Tr0ub4dor&3-{v['amp']}"),
        ("yaml passphrase", "pwd: correct horse battery staple\n", "correct horse battery staple"),
        ("yaml passphrase of fresh words", f"pwd: {passphrase}\n", passphrase),
        ("yaml random", f"db:\n  password: {p}\n", p),
        ("nslcd bindpw", f"binddn cn=nslcd,dc=corp\nbindpw {v['bind']}\n", v["bind"]),
        ("java setProperty", f'System.setProperty("db.password", "{v["prop"]}");', v["prop"]),
        ("net use", f"net use Z: \\\\fs01\\share /user:CORP\\jdoe {v['net']}", v["net"]),
        ("net user", f"net user jdoe {v['netuser']} /add", v["netuser"]),
        ("xml element with entity", f"<password>{v['xml']}&amp;Gr8</password>", f"{v['xml']}&amp;Gr8"),
        ("prose pw:", f"log in to the NAS as admin, pw: {v['pw']}", v["pw"]),
        ("url on a .local host", f"postgres://shop_admin:{v['url'].replace('#', 'x').replace(';', 'y')}"
                                 f"@db.corp.local:5432/shop",
         v["url"].replace("#", "x").replace(";", "y")),
        ("jenkins secret", f"<secret>{{AQAAABAAAAAQ{token(30)}=}}</secret>", None),
        ("shell export", f"export DB_PASSWORD={v['export']}\n", v["export"]),
        (".env", f"API_TOKEN={p}\n", p),
        ("json escaped quote", f'{{"password": "{v["json"]}\\"x y"}}', f'{v["json"]}\\"x y'),
        ("xml key/value attributes", f'<entry key="db.password" value="{p}" />', p),
        ("xml name/value", f'<property name="password" value="{v["attr"]}"/>', v["attr"]),
        ("php define", f"define('DB_PASSWORD', '{v['call']}');", v["call"]),
        ("php variable", f"$db_pass = '{v['php']}';", v["php"]),
        ("os.environ", f"os.environ['DB_PASSWORD'] = '{v['environ']}'", v["environ"]),
        ("ruby ENV", f'ENV["API_TOKEN"] = "{v["ENV"]}"', v["ENV"]),
        ("putenv", f'putenv("DB_PASS={v["putenv"]}");', v["putenv"]),
        ("connection string", f"Server=db;User Id=sa;Password={v['conn'].replace(';', '!')};Database=shop",
         v["conn"].replace(";", "!")),
        ("prose is", f"the wifi password is {v['wifi']} for guests", v["wifi"]),
        ("sql", f"ALTER LOGIN sa WITH PASSWORD = '{v['mssql']}';", v["mssql"]),
        ("toml", f'[auth]\nsecret = "{v["toml"]}"\n', v["toml"]),
        ("properties", f"spring.datasource.password={p}\n", p),
        ("cli flag", f"tool --db-password={v['flag']} --verbose", v["flag"]),
        ("url query", f"GET /login?user=kim&password={v['query'].replace('&', '!').replace('#', '!')}&next=/",
         v["query"].replace("&", "!").replace("#", "!")),
        ("htpasswd", f"htpasswd -b /etc/nginx/.htpasswd kim {v['htpasswd']}", v["htpasswd"]),
        ("smbclient", f"smbclient //fs01/share -U kim%{v['smb']}", v["smb"]),
        ("sqlplus", f"sqlplus scott/{v['sqlplus'].replace('@', 'a')}@orcl", v["sqlplus"].replace("@", "a")),
        ("a value merely holding ${", f"password = pre${{X}}{v['templ']}\n", f"pre${{X}}{v['templ']}"),
        ("PIN", "PIN: 4821\n", "4821"),
    ]


LOOKALIKES = [
    ("alphabet constant", 'const validKeyChars = "0123456789abcdefghijklmnopqrstuvwxyz_-."'),
    ("header name constant", 'const contentTypeToken string = "Content-Type"'),
    ("xml key= naming no secret", '<entry key="jetbrains.mps.v8_elimination" value="executed" />'),
    ("kubernetes metadata", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: api-key\ntype: Opaque\n"),
    ("kubernetes secretKeyRef", "env:\n  - name: API_KEY\n    valueFrom:\n      secretKeyRef:\n"
                                "        name: api-key\n        key: token\n"),
    ("a whole reference", "password = ${DB_PASSWORD}\n"),
    ("a helm reference", "password: {{ .Values.pw }}\n"),
    ("a python format reference", "password = %(pw)s\n"),
    ("an angle placeholder", "password: <secret>\n"),
    ("code", "password = get_password(user)\n"),
    ("a setting of code", "db_password = settings.DB_PASSWORD\n"),
    ("prose about passwords", "Password: see the team vault for the current one.\n"),
    ("a directive with a word", "password protected\n"),
    ("prose verb with a word", "the password is stored in the vault\n"),
    ("net use without a password", "net use Z: \\\\fs01\\share /persistent:yes\n"),
    ("url of a documentation host", "postgres://admin:Winter2024Shop@db.example.com/shop\n"),
    ("a key name", 'secret_name = "db-credentials"\n'),
    ("a password length", "password_min_length = 12\n"),
    ("a PIN that is no number", "pin: true\n"),
    ("a list of field names", 'fields = ("password", "password_confirm")\n'),
]


class ContextTests(unittest.TestCase):
    def test_each_syntax_removes_the_whole_value(self):
        for name, text, value in positives():
            with self.subTest(name=name):
                clean = redact(text)
                if value is None:
                    self.assertIn("[REDACTED:", clean)
                    self.assertNotIn("AQAAABAAAAAQ", clean)
                    continue
                self.assertNotIn(value, clean)
                for piece in (value[:4], value[-4:]) if len(value) >= 12 else ():
                    self.assertNotIn(piece, clean.replace("[REDACTED:", ""), f"part of the value stays: {clean!r}")

    def test_lookalikes_stay_unchanged(self):
        for name, text in LOOKALIKES:
            with self.subTest(name=name):
                self.assertEqual(redact(text), text)

    def test_the_key_name_stays_readable(self):
        value = phrase()
        self.assertEqual(redact(f"db_password = {value}\n"), "db_password = [REDACTED:credential-value]\n")

    def test_vocabulary(self):
        for name in ("password", "db_password", "db.password", "DB_PASSWORD", "dbPassword", "passwd", "pwd", "pw",
                     "pass", "passphrase", "secret", "client_secret", "token", "api_key", "apiKey", "credentials",
                     "bindpw", "rootpw"):
            with self.subTest(name=name):
                self.assertEqual(context.credential_key(name), "strong")
        self.assertEqual(context.credential_key("pin"), "pin")
        for name in ("password_length", "token_url", "secret_name", "validKeyChars", "max_password", "keyboard",
                     "author", "spinner", "passenger"):
            with self.subTest(name=name):
                self.assertIsNone(context.credential_key(name))

    def test_can_be_disabled(self):
        text = f"db_password = {phrase()}\n"
        sanitizer = Sanitizer(__import__("bastion_agent.sanitizing.settings", fromlist=["x"]).SanitizeSettings(
            disable=("credential-value",)))
        self.assertNotIn("credential-value", sanitizer.redact(text)[0])

    def test_tool_passwords_in_any_case_amid_decoy_prose(self):
        # The scan skips the command-line patterns on text that cannot hold them ("performance" holds
        # "rman", abstracts are full of "%"): a tool line in capitals, after such prose, must still go.
        prose = "Performance rose 12% (p < 0.05); the net effect of a German rman-like tool was small.\n"
        for line, value in (("HTPASSWD -b /etc/.htpasswd kim {}", word()),
                            ("SMBCLIENT //fs01/share -U kim%{}", word().replace("%", "x")),
                            ("SQLPLUS scott/{}@orcl", word().replace("@", "a").replace("/", "b"))):
            text = prose + line.format(value) + "\n"
            with self.subTest(line=line):
                self.assertNotIn(value, redact(text))
                self.assertTrue(redact(text).startswith(prose))
        self.assertEqual(redact(prose), prose)

    def test_hostile_long_lines_finish(self):
        text = ("password=" + "a;" * 200_000 + "\n") + ("token " * 100_000) + ("pw: " + "x" * 100_000)
        clean = redact(text)
        # A value runs at most context.MAX_VALUE characters: its first KiB goes, the scan stays linear.
        self.assertTrue(clean.startswith("password=[REDACTED:credential-value]"), clean[:80])

    def test_an_unclosed_shell_expansion_runs_at_most_a_values_longest(self):
        # ``PW="${PW:-$(`` repeated: every key's quote is open to the line's end. Each value read is cut at
        # context.MAX_VALUE, so each key costs at most that much, and the line still goes whole.
        line = 'PW="${PW:-$(' * 400
        spans = context.scan(line)
        self.assertTrue(spans)
        self.assertLessEqual(max(end - start for start, end in spans), context.MAX_VALUE)
        self.assertNotIn("PW:-$(PW", redact(line).replace("[REDACTED:credential-value]", ""))
        # A plain quoted value longer than that still ends at its own quote, and goes whole (an Entra
        # refresh token is about 1,050 characters).
        value = "0." + "".join(token(21) + random.choice("._-") for _ in range(52))
        clean = redact(f'"refresh_token": "{value}",\n')
        self.assertGreater(len(value), context.MAX_VALUE)
        self.assertFalse(any(value[i:i + 8] in clean for i in range(len(value) - 7)), clean[:120])


class CopyTests(unittest.TestCase):
    def test_a_copy_in_the_same_text_goes(self):
        value = token()
        clean = redact(f'api_key = "{value}"\nprint("{value}")\n')
        self.assertNotIn(value, clean)
        self.assertEqual(clean.count("[REDACTED:"), 2)

    def test_short_and_plain_values_do_not_travel(self):
        self.assertEqual(redact("PIN: 4821\nroom 4821 on floor 2\n"), "PIN: [REDACTED:credential-value]\nroom 4821 on floor 2\n")
        self.assertFalse(copies.eligible("4821"))
        self.assertFalse(copies.eligible("production"))
        self.assertTrue(copies.eligible("Kq7;vX#2m&Lp"))
        self.assertTrue(copies.eligible("correct horse battery staple"))

    def test_matcher_finds_every_value_in_one_pass(self):
        values = {token(): "r" for _ in range(2000)}
        chosen = list(values)[::97]
        text = " filler ".join(chosen)
        matcher = copies.Matcher(values)
        self.assertEqual(matcher.present(text), set(chosen))
        prefix = {"Abcdefgh12": "a", "Abcdefgh12345": "b"}
        self.assertEqual([(s, e) for s, e, _ in copies.Matcher(prefix).finditer("x Abcdefgh12345 y")], [(2, 15)])


class SweepCopyTests(unittest.TestCase):
    """A value found in one document of the sweep is removed from every other."""

    def setUp(self):
        self.folder = Path(tempfile.mkdtemp())
        self.addCleanup(lambda: __import__("shutil").rmtree(self.folder, ignore_errors=True))
        self.manifest = write_manifest(self.folder, dim=8, size=16, overlap=4)
        self.out = self.folder / "out"
        self.layout = Layout(self.out)

    def sweep(self, documents: dict[str, str]) -> None:
        """Write ``{path: text}`` as extract would, then run sanitize."""
        code, _, err = sanitize_as_extracted(self.layout, self.manifest, documents)
        self.assertEqual(code, 0, err)

    def sanitized(self) -> str:
        return "".join(path.read_text(encoding="utf-8") for path in sorted(self.layout.sanitized_dir.glob("*.txt")))

    def outside_extract(self) -> bytes:
        return b"".join(path.read_bytes() for path in self.out.rglob("*")
                        if path.is_file() and self.layout.extract_dir not in path.parents)

    def test_a_token_found_in_one_file_goes_from_the_how_to(self):
        value = token(24)
        self.sweep({"deploy.toml": f'[registry]\ntoken = "{value}"\n',
                    "howto.md": f"# Login\n\n    docker login registry.corp -u ci {value}\n\nThen push.\n"})
        self.assertNotIn(value.encode(), self.outside_extract())
        self.assertIn("Then push.", self.sanitized())

    def test_a_resweep_cleans_the_older_documents(self):
        value = word(14)
        self.sweep({"howto.md": f"run the job with {value} as the second argument\n"})
        self.assertIn(value, self.sanitized())  # nothing says it is a secret yet
        self.sweep({"howto.md": f"run the job with {value} as the second argument\n",
                    "job.ini": f"[job]\npassword = {value}\n"})
        self.assertNotIn(value.encode(), self.outside_extract())
        self.sweep({"howto.md": f"run the job with {value} as the second argument\n",
                    "job.ini": f"[job]\npassword = {value}\n"})  # reused: still clean
        self.assertNotIn(value.encode(), self.outside_extract())
        self.sweep({"howto.md": f"run the job with {value} as the second argument\n"})
        self.assertIn(value, self.sanitized())  # the file that said so left: the older text is as it was

    def test_found_values_stay_inside_extract(self):
        value = token(24)
        self.sweep({"a.env": f"API_TOKEN={value}\n", "b.txt": f"echo {value}\n"})
        self.assertNotIn(value.encode(), self.outside_extract())
        listing = read_jsonl(self.layout.sanitized_listing)
        self.assertEqual(len(listing), 2)
        private = self.layout.extract_dir / "sanitized.jsonl"
        self.assertEqual(private.stat().st_mode & 0o777, 0o600)


if __name__ == "__main__":
    unittest.main()
