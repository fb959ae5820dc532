"""Credentials in the syntaxes people write them in, each beside a look-alike that must stay.

Every value is drawn fresh each run. A form counts as removed when no
8-character piece of its value survives; its look-alike must come out
byte for byte unchanged. The hostile tests come first: the new parsers
(sibling fields, signatures, lists, code judgement) must finish on input
built to make them work hard, leak nothing and do bounded work.
"""

from __future__ import annotations

import base64
import random
import secrets
import string
import unittest
import uuid
from unittest import mock

from bastion_agent.sanitizing import assigned_values, code_values, keyed_values, signatures
from bastion_agent.sanitizing.scanner import Sanitizer

RNG = random.Random(secrets.randbits(64))
CONSONANTS = "bcdfghjklmnpqrstvwxz"


def password(length: int = 12) -> str:
    """Letters, digits and a symbol, safe inside any quote (no quote, backslash or space)."""
    body = [RNG.choice(string.ascii_letters + string.digits) for _ in range(length - 3)]
    return "".join(body) + RNG.choice(string.digits) + RNG.choice("!#%*@") + RNG.choice(string.ascii_uppercase)


def letters(length: int = 14) -> str:
    return "".join(RNG.choice(CONSONANTS) for _ in range(length))


def hex_token(length: int = 40) -> str:
    return secrets.token_hex(length // 2)


def nkey_seed() -> str:
    return "SU" + "".join(RNG.choice(string.ascii_uppercase + "234567") for _ in range(56))


def words(count: int = 6) -> str:
    return " ".join("".join(RNG.choice(string.ascii_lowercase) for _ in range(RNG.randint(4, 7))) for _ in range(count))


def survives(value: str, clean: str) -> bool:
    piece = min(8, len(value))
    return any(value[i:i + piece] in clean for i in range(len(value) - piece + 1))


# (class, template holding the value as {v}, how to draw the value, a look-alike that must stay)
KEYED = [
    ("k8s env, unquoted", "env:\n  - name: DB_PASSWORD\n    value: {v}\n", password,
     "env:\n  - name: DB_HOST\n    value: db.internal\n"),
    ("k8s env, quoted", "env:\n  - name: \"API_TOKEN\"\n    value: \"{v}\"\n", password,
     "env:\n  - name: DB_PASSWORD\n    valueFrom:\n      secretKeyRef:\n        name: db\n"),
    ("ECS JSON", '[{{"name": "DB_PASSWORD", "value": "{v}"}}]', password,
     '[{"name": "DB_PORT", "value": "5432"}]'),
    ("Hadoop XML", "<property><name>fs.s3a.secret.key</name><value>{v}</value></property>", hex_token,
     "<property><name>fs.s3a.endpoint</name><value>s3.internal</value></property>"),
    ("Terraform default", 'variable "db_password" {{\n  default = "{v}"\n}}\n', password,
     'variable "db_password" {\n  type = string\n  sensitive = true\n}\n'),
    ("XML CDATA", "<password><![CDATA[{v}]]></password>", password, "<comment><![CDATA[see the wiki]]></comment>"),
    ("unattend", "<AdministratorPassword>\n  <Value>{v}</Value>\n  <PlainText>true</PlainText>\n</AdministratorPassword>",
     password, "<DisplayName>\n  <Value>Front desk</Value>\n</DisplayName>"),
    (".netrc", "machine api.example.com login ops password {v}\n", password, "machine api.example.com login ops\n"),
    (".pgpass", "db.internal:5432:shop:app:{v}\n", password, "db.internal:5432:shop:app\n"),
    ("German key", "PASSWORT={v}\n", password, "PASSWORT_LAENGE=12\n"),
    ("Dutch key", "WACHTWOORD={v}\n", password, "GEBRUIKER=beheer\n"),
    ("Portuguese key", "SENHA_BANCO={v}\n", password, "BANCO=loja\n"),
    ("Spanish key", "contrasena_db={v}\n", password, "usuario_db=tienda\n"),
    ("Spanish key, accented", "contraseña: {v}\n", password, "usuario: tienda\n"),
    ("French key", "mot_de_passe={v}\n", password, "nom_utilisateur=boutique\n"),
    ("Polish key", "haslo={v}\n", password, "uzytkownik=sklep\n"),
    ("Swedish key", "lösenord={v}\n", password, "användare=butik\n"),
    ("passphrase of words", "passphrase: {v}\n", words, "description: " + "the nightly job copies the reports"),
    ("letters-only config value", "SMTP_PASSWORD={v}\n", letters, "SMTP_PASSWORD=changeme\n"),
    ("letters-only value holding pwd", "SMTP_PASSWORD={v}\n", lambda: letters(5) + "pwd" + letters(6),
     "clientSecret = serverSecret\n"),
    ("wpa_supplicant psk", 'network={{\n  ssid="office"\n  psk="{v}"\n}}\n', password,
     'network={\n  ssid="office"\n  key_mgmt=NONE\n}\n'),
    ("UUID under a secret key", "client_secret: {v}\n", lambda: str(uuid.uuid4()),
     "CLSID = {00000000-0000-0000-C000-000000000046}\n"),
    ("OAuth consumer key", 'oauth_consumer_key="{v}"', password, 'oauth_signature_method="HMAC-SHA1"'),
    ("OAuth consumer secret", "oauth_consumer_secret = '{v}'", password, "oauth_version = '1.0'"),
    ("Bearer in a code string", 'headers = {{"Authorization": "Bearer {v}"}}', hex_token,
     'doc = "Send a Bearer token in the Authorization header"'),
    ("Basic in a code string", "if (auth === 'Basic {v}')", lambda: secrets.token_urlsafe(18) + "9",
     "if (scheme === 'Basic authentication')"),
    ("Bearer list item", "headers:\n  Authorization:\n  - Bearer {v}\n", hex_token, "headers:\n  Accept:\n  - application/json\n"),
    ("list under a token key", '"tokens":["{v}","{v}"]', lambda: hex_token(16), '"tokens": ["read", "write"]'),
    ("YAML block under a password key", "deploy:\n  password:\n    secure: {v}\n", password,
     "volumes:\n  - name: tls\n    secret:\n      secretName: tls-cert\n      defaultMode: 0400\n"),
    ("NATS nkey seed", "seed: {v}\n", nkey_seed, "public: UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4\n"),
]

SIGNED = [
    ("SMTP login", "server.login('ops@example.com', '{v}')", "server.login(user, password)"),
    ("IMAP login", "imap.login(\"ops\", \"{v}\")", "imap.login(account.user, account.secret)"),
    ("requests auth tuple", "requests.get(url, auth=('api', '{v}'))", "requests.get(url, auth=(user, pw))"),
    ("HTTPBasicAuth", "HTTPBasicAuth('api', '{v}')", "HTTPBasicAuth(user, pw)"),
    ("mysqli_connect", "$db = mysqli_connect($host, 'root', '{v}', 'shop');",
     "$db = mysqli_connect($host, $user, $pass, 'shop');"),
    ("PDO", "$pdo = new PDO($dsn, 'app', '{v}');", "$pdo = new PDO($dsn, $user, $pass);"),
    ("JDBC getConnection", 'c = DriverManager.getConnection(url, "sa", "{v}");',
     "c = DriverManager.getConnection(url, user, password);"),
    ("pymysql connect", "conn = pymysql.connect('db', 'app', '{v}', 'shop')", "conn = pymysql.connect(**settings)"),
    ("psycopg connect", "psycopg2.connect(host='db', user='app', password='{v}')",
     "psycopg2.connect(host='db', user='app', password=os.environ['PGPASSWORD'])"),
    ("redis connect", "r = redis.Redis('cache', 6379, 0, '{v}')", "r = redis.Redis('cache', 6379, 0)"),
    ("NetworkCredential", 'var c = new NetworkCredential("svc", "{v}", "CORP");',
     "var c = new NetworkCredential(user, secret, domain);"),
    ("SqlConnection", 'new SqlConnection("Server=db;User Id=app;Password={v};")',
     'new SqlConnection(Configuration.GetConnectionString("Shop"))'),
    ("CREATE USER", "CREATE USER app IDENTIFIED BY '{v}';", "CREATE USER app IDENTIFIED EXTERNALLY;"),
    ("ALTER USER", "ALTER USER app PASSWORD '{v}';", "ALTER USER app RENAME TO shop;"),
    ("INSERT into a password column", "INSERT INTO users (login, password, role) VALUES ('ann', '{v}', 'admin');",
     "INSERT INTO users (login, role) VALUES ('ann', 'admin');"),
    ("docker --password-stdin", "echo '{v}' | docker login -u bot --password-stdin registry.local",
     'echo "$REGISTRY_TOKEN" | docker login -u bot --password-stdin registry.local'),
    ("sudo -S", 'echo "{v}" | sudo -S apt-get update', "echo done | sudo tee /etc/motd"),
    ("sshpass -p", "sshpass -p '{v}' ssh ops@host", 'sshpass -p "$SSHPASS" ssh ops@host'),
    ("mysql -p", "mysql -u root -p{v} shop", "mysql -u root -p shop"),
    ("htpasswd -b", "htpasswd -b /etc/nginx/.htpasswd ops {v}", "htpasswd /etc/nginx/.htpasswd ops"),
    ("net use", "net use Z: \\\\files\\share {v} /user:CORP\\ops", "net use Z: \\\\files\\share /persistent:yes"),
    ("PsExec -p", "psexec \\\\host -u admin -p {v} cmd", "psexec \\\\host -s cmd"),
    ("ConvertTo-SecureString", "$p = ConvertTo-SecureString '{v}' -AsPlainText -Force",
     "$p = ConvertTo-SecureString $plain -AsPlainText -Force"),
    ("cipher key", 'm.setCipherKey(Base64.decode("{v}"));', "m.setCipherKey(Base64.decode(keyText));"),
    ("SecretKeySpec", 'new SecretKeySpec("{v}".getBytes(), "AES")', 'new SecretKeySpec(key, "AES")'),
    ("AES key object", 'new AES128Key("{v}")', "new AES128Key(material)"),
]

PROSE = [
    ("temporary password", "Hi Ann, your temporary password is {v} - change it at first login.",
     "Your temporary password is in the envelope."),
    ("pw:", "vpn pw: {v}", "vpn pw: ask the helpdesk"),
    ("PIN", "Your card is on its way. PIN {v}, keep it apart from the card.", "Connect the LED to pin 13."),
    ("Passwort:", "Passwort: {v}", "Passwort: siehe Tresor"),
    ("mot de passe :", "Le mot de passe : {v}", "Le mot de passe est dans le coffre."),
    ("contraseña:", "La contraseña: {v}", "La contraseña está en la caja fuerte."),
]

# Code that names a credential without holding one: each must stay as it is.
REFERENCES = [
    "password = get_password()",
    "password = os.environ['DB_PASSWORD']",
    "const token = process.env.API_TOKEN;",
    "token: string | null = null;",
    "this.token = token;",
    "this.password = credentials.password;",
    "Token = token;",
    "token := os.Getenv(\"TOKEN\")",
    "$password = $_ENV['DB_PASSWORD'];",
    "password: ENV['PW'],",
    "PASSWORD=$(cat /run/secrets/db-password)",
    "credentials = malloc(sizeof(*credentials));",
    "password: ${DB_PASSWORD}",
    "password: {{ db_password }}",
    "password = %(db_password)s",
    "password: <your-password>",
    "ERROR_PASSWORD_EXPIRED = 0x00000532,",
    "NERR_PasswordTooShort = 2100 + 145,",
    "PInvoke.Win32ErrorCode.ERROR_WRONG_PASSWORD = 1323 -> PInvoke.Win32ErrorCode",
    '"Password": (str, True),',
    "password: null,",
    "user.password = undefined;",
    "token: await generateToken(),",
    "client = OAuth2Session(client_id, token=token)",
    "public const string NCRYPT_PKCS8_PRIVATE_KEY_BLOB = \"PKCS8_PRIVATEKEY\";",
    "'reset_password': 'allauth.account.forms.ResetPasswordForm',",
    '"@types/passport-facebook-token": "^0.4.34",',
    'EnterPassword = `Enter new password: `',
    'mydata += "&password="+mydomval("password");',
    'public const string NCRYPT_KDF_SECRET_VALUE = "KDFKeySecret";',
    '"key": "benchmark_ml_job_2",',
    "db.Exec(`ALTER LOGIN ` + user + ` WITH password = '` + newpw + `'`)",
    '"change-admin-password:changes the administrator password"',
    "volumes:\n  - name: tls\n    secret:\n      secretName: tls-cert",
]

# A literal in the same languages: each must go.
LITERALS = [
    'password = "{v}"',
    "const token = '{v}';",
    'String password = "{v}";',
    'var password = "{v}";',
    'token := "{v}"',
    "$password = '{v}';",
    "password: '{v}',",
    "PASSWORD={v}",
    'char *password = "{v}";',
    'password: "pass #{v} ?",',
    'password = "+{v}"',
    '<add key="ClearTextPassword" value="TestSourcePassword{v}" />',
    "$p = ConvertTo-SecureString 'AttackerServicePassword{v}' -AsPlainText",
]


class HostileTests(unittest.TestCase):
    """The new parsers on input built to make them work: they finish, leak nothing, work is bounded."""

    def test_many_name_fields_without_values(self):
        secret = password()
        text = "env:\n" + "  - name: DB_PASSWORD\n" * 5000 + f"  - name: DB_PASSWORD\n    value: {secret}\n"
        calls = []
        real = keyed_values._value_after

        def counted(text, position):
            calls.append(position)
            return real(text, position)

        with mock.patch.object(keyed_values, "_value_after", counted):
            clean, _ = Sanitizer().redact(text)
        self.assertFalse(survives(secret, clean))
        self.assertLessEqual(len(calls), 5001 * 2)  # once per name field, per pattern that can match it

    def test_long_value_lines_cost_one_read_each(self):
        secret = password()
        spaced = "value: a" + " " * 400 + "b" + " " * 100
        text = ("  - name: DB_PASSWORD\n    " + spaced + "\n") * 2000 + f"  - name: DB_PASSWORD\n    value: {secret}\n"
        steps = []
        real = keyed_values.VALUE_FIELD

        class Counting:
            def search(self, text, position, limit):
                steps.append(limit - position)
                return real.search(text, position, limit)

        with mock.patch.object(keyed_values, "VALUE_FIELD", Counting()):
            found = keyed_values.sibling_values(text, lambda name: "strong")
        self.assertEqual(len(found), 2001)
        self.assertLessEqual(sum(steps), 2001 * keyed_values.SIBLING_REACH)  # each name field reads at most its reach
        self.assertIn(text.rindex(secret), [start for start, _, _ in found])

    def test_unclosed_calls_and_inserts(self):
        secret = password()
        text = ("login('" * 3000 + "\n" + "INSERT INTO t (password, " + "a, " * 2000 + "\n"
                + "echo x | " * 2000 + "\n" + f"server.login('ops', '{secret}')\n")
        clean, _ = Sanitizer().redact(text)
        self.assertFalse(survives(secret, clean))
        self.assertEqual(clean.count("\n"), text.count("\n"))

    def test_code_judgement_of_deep_brackets(self):
        value = "(" * 1000 + "x" + ")" * 1000 + ";"
        self.assertTrue(code_values.is_code_reference(value))
        self.assertFalse(code_values.is_code_reference("Ev1;71 w&tG0'4!9"))
        self.assertFalse(code_values.is_code_reference("ZR0xS; #BnQEG&2"))  # an INI value, not a statement

    def test_every_signature_row_is_documented(self):
        with open(__file__.replace("bastion_agent/sanitizing/test_keys.py", "docs/sanitize.md"), encoding="utf-8") as doc:
            text = doc.read()
        for signature in signatures.SIGNATURES:
            self.assertTrue(signature.name in text, f"{signature.name!r} is not in docs/sanitize.md")


class KeyedTests(unittest.TestCase):
    def test_each_form_goes_and_its_lookalike_stays(self):
        sanitizer = Sanitizer()
        for name, template, draw, lookalike in KEYED:
            with self.subTest(form=name):
                value = draw()
                clean, _ = sanitizer.redact(template.format(v=value))
                self.assertFalse(survives(value, clean), clean)
                self.assertEqual(sanitizer.redact(lookalike)[0], lookalike)

    def test_a_value_shaped_like_camel_case_by_chance_goes_wherever_the_key_sits(self):
        # One random key in fifteen reads as camelCase (a lower-case start, then capitals each before
        # lower case or digits); in a config file's data it is the string itself, not a variable.
        sanitizer = Sanitizer()
        shaped = [value for value in (password(12)[:9] + RNG.choice("23456789") + "x7" for _ in range(4000))
                  if assigned_values.REFERENCE_WORD.fullmatch(value)][:20]
        self.assertGreaterEqual(len(shaped), 5)
        letters = ["".join(RNG.choice(string.ascii_letters) for _ in range(12)) + "Pw" + "".join(
            RNG.choice(string.ascii_letters) for _ in range(12)) for _ in range(5)]  # letters alone, "Pw" inside
        for value in shaped + letters + ["fribxUdl7d76", "hHqn4ww3Xj38", "rS9pZ6PwY9x7", "veNeDkApSJvBOHFPYXPpwZQ"]:
            for template in ("env:\n  - name: DB_PASSWORD\n    value: {v}\n", "db:\n  password: {v}\n",
                             "DB_PASSWORD={v}\n"):
                with self.subTest(value=value, template=template):
                    self.assertFalse(survives(value, sanitizer.redact(template.format(v=value))[0]))
        for lookalike in ("env:\n  - name: DB_PASSWORD\n    value: db_password\n",  # a name of another setting
                          "engine = connect(\n    user=\"postgres\",\n    password=PGPASSWORD\n)\n"):  # a variable
            self.assertEqual(sanitizer.redact(lookalike)[0], lookalike)

    def test_a_guid_of_digits_first_is_a_value_not_a_subtraction(self):
        sanitizer = Sanitizer()
        drawn = (str(uuid.uuid4()) for _ in range(2000))
        for value in ["95433402-e7fa-4a36-8d77-9cfd50e1ef69", "85992714-5903-4449-b461-fef53deea1c2"] + [
                value for value in drawn if value[:8].isdigit()][:10]:
            with self.subTest(value=value):
                self.assertFalse(survives(value, sanitizer.redact(f"client_secret: {value}\n")[0]))
        kept = "timeout: 3600 - 60\n"  # arithmetic stays
        self.assertEqual(sanitizer.redact(kept)[0], kept)

    def test_base64_that_starts_with_a_slash_or_a_sum_is_a_value(self):
        # One base64 key in 64 starts with "/" (read as a path), one in 30 with a digit and "+" (a sum).
        sanitizer = Sanitizer()
        drawn = [base64.b64encode(secrets.token_bytes(RNG.randint(18, 40))).decode() for _ in range(3000)]
        shaped = [value for value in drawn if value[0] == "/" or value[0].isdigit() and value[1] == "+"][:12]
        for value in shaped + ["/oK3fj3NOUKI+LIAh+hyJWZ2/WJTiQ==", "2+HoaiukYLKaw5IxNQb69FY2", "/RouyDeNon5WdJU3RqjSTQLQ",
                               "/uMz4HoUtJWAX8YmszsRzct8", "/TIliiaCn+BMMPloh+p/Z1+WWHD5"]:
            for template in ("jira_token: {v}\n", 'api_token = "{v}"\n'):
                with self.subTest(value=value, template=template):
                    self.assertFalse(survives(value, sanitizer.redact(template.format(v=value))[0]))
        for kept in ("password: /run/secrets/dbPassword\n", "token: /var/lib/app/tokenStore\n",
                     'api_token = "/Users/JohnDoe/Library/Keychains"\n', "password: /usr/include/c++/11\n",
                     "max_tokens: 4096 + reserve\n"):
            self.assertEqual(sanitizer.redact(kept)[0], kept)


class SignatureTests(unittest.TestCase):
    def test_each_signature_goes_and_its_lookalike_stays(self):
        sanitizer = Sanitizer()
        for name, template, lookalike in SIGNED:
            with self.subTest(form=name):
                value = password()
                clean, _ = sanitizer.redact(template.format(v=value))
                self.assertFalse(survives(value, clean), clean)
                self.assertEqual(sanitizer.redact(lookalike)[0], lookalike)


class ProseTests(unittest.TestCase):
    def test_each_prose_form_goes_and_its_lookalike_stays(self):
        sanitizer = Sanitizer()
        for name, template, lookalike in PROSE:
            with self.subTest(form=name):
                value = str(RNG.randint(1000, 9999)) if name == "PIN" else password()
                clean, _ = sanitizer.redact(template.format(v=value))
                self.assertFalse(survives(value, clean), clean)
                self.assertEqual(sanitizer.redact(lookalike)[0], lookalike)


class CodeTests(unittest.TestCase):
    def test_references_stay(self):
        sanitizer = Sanitizer()
        for line in REFERENCES:
            with self.subTest(line=line):
                self.assertEqual(sanitizer.redact(line + "\n")[0], line + "\n")

    def test_literals_go(self):
        sanitizer = Sanitizer()
        for template in LITERALS:
            with self.subTest(template=template):
                value = password()
                clean, _ = sanitizer.redact(template.format(v=value) + "\n")
                self.assertFalse(survives(value, clean), clean)

    def test_a_literal_inside_code_punctuation_is_not_a_reference(self):
        self.assertFalse(code_values.is_code_reference('[]byte("' + password() + '"),'))
        self.assertTrue(code_values.is_code_reference("credentials.password,"))


if __name__ == "__main__":
    unittest.main()
