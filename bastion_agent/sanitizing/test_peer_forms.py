"""Key formats and syntaxes that the peers' own test suites label as credentials and we kept.

Scoring bastion on CredSweeper's and detect-secrets' sample files
(``bench/sanitize/peer_suites.py``) showed vendor token formats with no rule here and
a few syntaxes of code and command lines. Each is tested with values drawn
fresh each run, never the peers' sample strings, beside a look-alike that
must come out byte for byte unchanged. The hostile tests come first: the new
patterns must finish on input built to make them backtrack, and leak nothing.
"""

from __future__ import annotations

import random
import secrets
import string
import unittest

from bastion_agent.sanitizing import validators
from bastion_agent.sanitizing.scanner import Sanitizer

RNG = random.Random(secrets.randbits(64))
ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "_-"


def draw(alphabet: str, length: int) -> str:
    """``length`` characters of ``alphabet`` with at least one digit and one letter (a real token has both)."""
    while True:
        value = "".join(RNG.choice(alphabet) for _ in range(length))
        if any(ch.isdigit() for ch in value) and any(ch.isalpha() for ch in value):
            return value


def hex_digits(length: int) -> str:
    return draw("0123456789abcdef", length)


def password(length: int = 12) -> str:
    """Letters, digits and a symbol, safe inside any quote (no quote, backslash, space or separator)."""
    return draw(ALNUM, length - 3) + RNG.choice(string.digits) + RNG.choice("!#%*@") + RNG.choice(string.ascii_uppercase)


def survives(value: str, clean: str) -> bool:
    piece = min(8, len(value))
    return any(value[i:i + piece] in clean for i in range(len(value) - piece + 1))


# (format, a fresh value, a look-alike that must stay)
TOKENS = [
    ("figma", lambda: "figd_" + draw(URLSAFE, 40), "see figd_settings in the Figma docs"),
    ("google oauth client secret", lambda: "GOCSPX-" + draw(URLSAFE, 28), "prefix GOCSPX- marks a client secret"),
    ("google oauth access token", lambda: "ya29." + draw(URLSAFE, 80), "ya29.html was served"),
    ("google oauth refresh token", lambda: "1//0" + draw(URLSAFE, 90), "http://0.0.0.0/ and 1//0 in a fraction"),
    ("cloudflare account token", lambda: "cfat_" + draw(ALNUM, 48), "cfat_config = load()"),
    ("cloudflare user token", lambda: "cfut_" + draw(ALNUM, 48), "the cfut_ prefix"),
    ("netlify", lambda: "nfp_" + draw(ALNUM, 36), "nfp_build_hook = true"),
    ("vercel", lambda: "vcp_" + draw(ALNUM, 56), "vcp_version: 2"),
    ("supabase", lambda: "sbp_" + hex_digits(40), "sbp_ is the prefix of a Supabase token"),
    ("supabase v0", lambda: "sbp_v0_" + hex_digits(40), "sbp_v0_ tokens replace the old ones"),
    ("akamai", lambda: "akab-" + draw(string.ascii_lowercase + string.digits, 16) + "-"
     + draw(string.ascii_lowercase + string.digits, 16),
     "the API host akab-" + "x1y2z3w4v5u6t7s8" + "-" + "a1b2c3d4e5f6g7h8" + ".luna.akamaiapis.net"),
    ("salesforce session", lambda: "00D" + draw(ALNUM, 15) + "!" + draw(ALNUM + "._", 90), "org id 00D5g000004XyzA"),
    ("posthog personal", lambda: "phx_" + draw(ALNUM, 47), "phx_ keys are personal"),
    ("postman collection", lambda: "PMAT-" + draw(string.ascii_uppercase + string.digits, 26), "PMAT-EXPORT done"),
    ("wundergraph", lambda: "cosmo_" + hex_digits(32), "cosmo_router_config.json"),
    ("instagram", lambda: "IGQV" + draw(URLSAFE, 150), "IGQVJ is how they begin"),
    ("new relic license", lambda: hex_digits(36) + "NRAL", "NRAL stands for a license key"),
    ("new relic eu license", lambda: "eu01x" + hex_digits(31) + "NRAL", "eu01x.example.org"),
    ("mailgun", lambda: hex_digits(32) + "-" + hex_digits(8) + "-" + hex_digits(8),
     "build 2024-01-15-release-candidate"),
    ("tavily", lambda: "tvly-dev-" + draw(ALNUM, 32), "tvly-dev- keys are for development"),
    ("together", lambda: "tgp_v1_" + draw(URLSAFE, 43), "tgp_v1_ is the prefix"),
    ("llamacloud", lambda: "llx-" + draw(URLSAFE, 48), "llx-tool --help"),
    ("sk- and 32 hex", lambda: "sk-" + hex_digits(32), "pip install scikit-learn sk-video"),
    ("gitlab runner registration", lambda: "glrtr-" + draw(URLSAFE, 20), "glrtr- tokens are deprecated"),
    ("gitlab workspace", lambda: "glwt-" + draw(URLSAFE, 30), "glwt- marks a workspace token"),
    ("gitlab routable", lambda: "glpat-" + draw(URLSAFE, 27) + ".01." + draw(ALNUM, 9), "glpat- then the body"),
    ("heroku", lambda: "HRKU-" + draw(URLSAFE, 60), "HRKU- is Heroku's prefix"),
    ("1password service account", lambda: "ops_eyJ" + draw(URLSAFE, 400), "ops_eyJ alone is no token"),
    ("defined networking, capitals", lambda: "dnkey-" + draw(string.ascii_uppercase + "234567", 26) + "-"
     + draw(string.ascii_uppercase + "234567", 52), "dnkey- prefix"),
]

# (form, template holding the value as {v}, how to draw it, look-alikes that must stay)
FORMS = [
    ("C #define", '#define DB_PASSWORD "{v}"\n', password, ["#define PASSWORD_MAX_LEN 64\n"]),
    ("RPM %global", '%global api_token "{v}"\n', password, ["%global debug_package %{nil}\n"]),
    ("RPM %define, bare", "%define token {v}\nName: tool\n", lambda: hex_digits(64),
     ["#define PASS_THROUGH 0x0004\n", "#define PASSWD_FILE _PATH_PASSWD\n", "#define TOKEN_EOF (-1)\n"]),
    ("#define JSON-escaped", '"#define\\tpassword\\t\\"{v}\\""', password, ['"#define\\tVERSION\\t\\"1.2.3\\""']),
    ("JS !== literal", 'if (password !== "{v}") {{\n', password,
     ['if (password !== confirmPassword) {\n', 'if (token === "Bearer") {\n']),
    ("Python == literal", 'if secret == "{v}":\n', password, ['if secret == "":\n']),
    # found by reading detect-secrets' own test tables (bench/sanitize/peer_cases.py --detect-secrets)
    ("literal on the left", 'if ("{v}" == password) {{\n', password,
     ['if ("" == password) {\n', 'if ("admin" === password) {\n', 'if ("Bearer" == token_type) {\n',
      'if ("ArrowUp" === event.key) {\n', 'if (expected != password) {\n']),
    ("literal on the left, key name", "assert '{v}' !== my_private_key\n", password,
     ["assert 'Title2' !== sortKey\n"]),
    ("!= and a key's name", 'if (api_key != "{v}") {{\n', password,
     ['if (event.key != "Enter2") {\n', 'if (api_key != "") {\n']),
    ("C array declarator", 'static const char password[] = "{v}";\n', password,
     ['char password[PASS_MAX];\n', 'char password[64] = "";\n', 'char password[128] = {0};\n',
      'if (password[0] == \'\\0\') return;\n']),
    ("C array declarator, sized", 'char api_secret[41] = "{v}";\n', password,
     ["tokens[3] = \"the\";\n", "char db_pass[] = 'Kq7vLm2x9!';\n"]),
    ("directive", 'password "{v}";\n', password,
     ['password "Enter your password";\n', 'passwd "alice"\n', 'password "#{db_password}"\n',
      'token "${TOKEN}";\n', "private_key \"half-quoted';\n",
      'import (\n\tsecretmanager "cloud.google.com/go/secretmanager/apiv1"\n\ttoken "golang.org/x/oauth2"\n)\n']),
    ("paren-less call in a block", 'user "deploy" do\n  password "{v}"\n  action :create\nend\n', password,
     ['user "deploy" do\n  password node["app"]["password"]\nend\n']),
    ("PSWD", "X3_PSWD={v}\n", password, ["X3_PSWD=$X3_PASSWORD_FROM_VAULT\n"]),
    ("PASWRD :=", "PASWRD:={v}\n", password, ["PASWRD := getPaswrd()\n"]),
    ("pw: in a pair", "user:admin pw:{v}\n", password, ["pw: 120\n", "pw = 300\n"]),
    ("CURLOPT_PASSWORD", 'curl_easy_setopt(h, CURLOPT_PASSWORD, "{v}");\n', password,
     ["#define CURLOPT_PASSWORD 3\n", "curl_easy_setopt(h, CURLOPT_PASSWORD, pass);\n"]),
    ("CURLOPT_USERPWD", 'curl_setopt($ch, CURLOPT_USERPWD, "ops:{v}");\n', password,
     ['curl_setopt($ch, CURLOPT_USERPWD, $user . ":" . $pass);\n']),
    ("CURLOPT_PROXYUSERPWD wide", 'curl_easy_setopt(h, CURLOPT_PROXYUSERPWD, L"svc:{v}");\n', password, []),
    ("gpg --passphrase", "gpg --batch --passphrase {v} -d backup.tar.gpg\n", password,
     ["gpg --batch --passphrase-file ~/.pp -d backup.tar.gpg\n"]),
    ("--token", "vault login --token {v}\n", lambda: draw(ALNUM, 24),
     ["pass the --token flag to log in\n", 'gh auth login --token "$GH_TOKEN"\n',
      "  --api-token API_TOKEN, -a API_TOKEN\n"]),
    ("-secret", "tool sync -secret {v}\n", lambda: draw(ALNUM, 20), ["a top-secret plan v2\n"]),
    ("--oauth2-bearer", 'curl --oauth2-bearer "{v}" https://api.example.org\n', lambda: draw(ALNUM + "+/", 32), []),
    ("ConvertTo-SecureString -String", 'ConvertTo-SecureString -String "{v}" -AsPlainText -Force\n', password,
     ["$s = ConvertTo-SecureString $plain -AsPlainText -Force\n"]),
    ("ConvertTo-SecureString bare", "ConvertTo-SecureString -AsPlainText -Force {v}\n", password,
     ["Read-Host -AsSecureString | ConvertFrom-SecureString\n"]),
]


class HostileTests(unittest.TestCase):
    """The new patterns on input built to make them backtrack: they finish, and the planted value still goes."""

    def test_long_unfinished_forms(self):
        secret = password()
        text = ("#define password " + "\\t" * 20000 + "\n"
                + "if (password !== " + "'" * 20000 + "\n"
                + "pw:" * 1000 + "\n"  # kept short: 20,000 of these cost the existing keyed scan seconds
                + 'curl_easy_setopt(h, CURLOPT_USERPWD, "' + "a" * 50000 + "\n"
                + "--token " * 20000 + "\n"
                + "ConvertTo-SecureString " + "-Force " * 20000 + "\n"
                + "sk-" + "a" * 50000 + "\n"
                + f"X3_PSWD={secret}\n")
        clean, _ = Sanitizer().redact(text)
        self.assertFalse(survives(secret, clean))
        self.assertEqual(clean.count("\n"), text.count("\n"))
        self.assertIn("a" * 50000, clean)  # no rule took the unfinished runs

    def test_long_unfinished_comparisons_directives_and_declarators(self):
        """A literal on the left, a directive and an array declarator, each left open or repeated: the scan
        finishes, leaves the runs alone and still removes the value planted after them."""
        secret = password()
        text = ('"' * 20000 + " == password\n"
                + "password " + '"' * 20000 + "\n"
                + "password \"" + "b" * 50000 + "\n"
                + "char password[" + "9" * 20000 + "\n"
                + ('"x" == ' * 5000) + "token\n"
                + f'if ("{secret}" == password) {{}}\n')
        clean, _ = Sanitizer().redact(text)
        self.assertFalse(survives(secret, clean))
        self.assertEqual(clean.count("\n"), text.count("\n"))
        self.assertIn("b" * 50000, clean)
        self.assertIn("9" * 20000, clean)

    def test_a_found_flag_value_does_not_spread_to_names(self):
        """A usage line's metavariable is no token, so its name elsewhere in the file stays."""
        text = "usage: inv [--api-token API_TOKEN]\nself.api_token = api_token\n"
        self.assertEqual(Sanitizer().redact(text)[0], text)


class TokenFormatTests(unittest.TestCase):
    def test_each_format_goes_and_its_lookalike_stays(self):
        sanitizer = Sanitizer()
        for name, make, lookalike in TOKENS:
            with self.subTest(format=name):
                value = make()
                for template in ("{v}\n", 'token = "{v}"\n', "export X={v}\n"):
                    clean, _ = sanitizer.redact(template.format(v=value))
                    self.assertFalse(survives(value, clean), clean)
                self.assertEqual(sanitizer.redact(lookalike)[0], lookalike)

    def test_a_documented_example_stays(self):
        """A vendor shape that marks itself as an example (the word, a counting run) is left for the reader."""
        sanitizer = Sanitizer()
        for text in ("cfat_" + draw(ALNUM, 36) + "tokenexample", "nfp_" + draw(ALNUM, 29) + "EXAMPLE",
                     "sbp_" + hex_digits(34) + "abcdef", "tvly-dev-" + draw(ALNUM, 26) + "012345"):
            with self.subTest(text=text):
                self.assertEqual(sanitizer.redact(text + "\n")[0], text + "\n")

class SyntaxTests(unittest.TestCase):
    def test_each_form_goes_and_its_lookalikes_stay(self):
        sanitizer = Sanitizer()
        for name, template, make, lookalikes in FORMS:
            with self.subTest(form=name):
                value = make()
                clean, _ = sanitizer.redact(template.format(v=value))
                self.assertFalse(survives(value, clean), clean)
                for lookalike in lookalikes:
                    self.assertEqual(sanitizer.redact(lookalike)[0], lookalike)

    def test_the_checks_by_themselves(self):
        self.assertTrue(validators.reads_as_secret("q4c1a2oPd"))
        self.assertFalse(validators.reads_as_secret("bearer"))
        self.assertFalse(validators.reads_as_secret("12345678"))


if __name__ == "__main__":
    unittest.main()
