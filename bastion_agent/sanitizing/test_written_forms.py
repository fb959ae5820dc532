"""Forms a writer puts around a value, read by what the form says: armour, identities, code spans, templates,
base64, SQL in a string, the references of file formats.

Each class of text below is read by a rule that holds wherever the form is
written, not by the lines it was first seen on:

- a private key's armour around a few symbols typed over and over
  (``s3cr3ts3cr3t…``) holds no key material: a key's body is base64 of DER;
- ``--user=system:kube-scheduler`` names one of the identities Kubernetes
  reserves, not a ``user:password`` pair;
- ``Token: `export DO_API_TOKEN=[token here]` ``: a code span that assigns to
  a credential's name is a statement, whose own key and value are read
  where they stand;
- ``key: v1-deps-{{ checksum "yarn.lock" }}``: words a template completes
  are a cache key's fixed part, not a generated key;
- padded base64 of random bytes under a salt's or a key's name is random
  even without a digit (``zzWITpnDximUNKYLiUam/w==``);
- SQL run from a string (``EXEC('... PASSWORD = ''X'' ')``) doubles the
  quotes of the statement it runs: the value ends at the same run of quotes;
- a reference whose syntax a file format declares names where the value
  lives: CloudFormation's ``!Ref``/``!GetAtt``, Home Assistant's ``!secret``,
  an ARM template's ``[parameters('x')]``, Concourse's ``((x))``, Ruby's
  ``"#{ENV['X']}"``, Razor's ``@Model.X``; any other YAML tag is passed and
  the value after it read (``!Sub "X…${AWS::Region}"`` loses X).

Hostile tests first: each real form beside the look-alike that stays; every
value is drawn fresh each run.
"""

from __future__ import annotations

import base64
import os
import string
import unittest

from bastion_agent.sanitizing import context, validators
from bastion_agent.testing.fresh_values import RNG, credential
from bastion_agent.testing.sanitizer_case import SanitizerCase

CACHE_WORDS = ("deps", "dependencies", "cache", "gems", "yarn", "node", "modules", "build", "venv", "pip")
STAND_IN_PIECES = ("s3cr3t", "secret", "xxxx", "XXXX", "key", "abcd", "0000")


def letters(length: int) -> str:
    """Lower-case letters drawn at random, holding no stem of a credential's name (``xkeyq…`` would read as
    one) and no stand-in word."""
    while True:
        value = "".join(RNG.choice(string.ascii_lowercase) for _ in range(length))
        if value not in validators.PLACEHOLDER_WORDS and not any(stem in value for stem in context.STEMS):
            return value


def drawn_letters(length: int) -> str:
    """Letters of both cases drawn at random, holding no stem of a credential's name in any case."""
    while True:
        value = "".join(RNG.choice(string.ascii_letters) for _ in range(length))
        if not any(stem in value.lower() for stem in context.STEMS):
            return value


def key_body(lines: int = 4) -> str:
    """Base64 of random bytes, in 64-character lines, as a key's body is written."""
    encoded = base64.b64encode(os.urandom(48 * lines)).decode()
    return "\n".join(encoded[i:i + 64] for i in range(0, len(encoded), 64))


def digitless_salt() -> str:
    """16 random bytes in padded base64 with no digit among its characters (one draw in forty has none)."""
    while True:
        value = base64.b64encode(os.urandom(16)).decode()
        if not any(ch.isdigit() for ch in value) and value.lower() != value and value.upper() != value:
            return value


def armour(body: str) -> str:
    return f"-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\n"


class HostileFormTests(SanitizerCase):
    """The real form beside each look-alike that stays: none of them is kept."""

    def test_a_drawn_key_body_in_armour_goes(self):
        body = key_body()
        self.assert_gone(armour(body), body.replace("\n", ""))
        self.assert_gone('"certificate_key": """' + armour(body) + '"""\n', body.replace("\n", ""))

    def test_a_short_key_body_of_a_few_symbols_still_goes(self):
        body = "".join(RNG.choice("abc") for _ in range(24))  # under the measured length: the old rule holds
        out, counts = self.sanitizer.redact(armour(body))
        self.assertNotIn(body, out)
        self.assertEqual(counts["private-key"], 1)

    def test_a_password_after_system_is_no_kubernetes_identity(self):
        password = credential(14)
        self.assert_gone(f"curl --user=system:{password} https://api.internal/\n", password)
        self.assert_gone(f"curl --user admin:{password} https://api.internal/\n", password)

    def test_a_value_in_a_code_span_after_a_label_goes(self):
        value = credential(20)
        self.assert_gone(f"Set your access token: `{value}`\n", value)
        self.assert_gone(f"Set your access token: `export DO_API_TOKEN={value}`\n", value)
        self.assert_gone(f"Password: `ab={value}`\n", "ab=" + value)  # ``ab`` names no credential: all of it

    def test_a_drawn_prefix_before_a_template_goes(self):
        value = drawn_letters(18) + str(RNG.randint(10, 99))
        self.assert_gone(f"secret_key: {value}-{{{{ .Branch }}}}\n", value)

    def test_padded_base64_of_random_bytes_goes_without_a_digit(self):
        for _ in range(3):
            value = digitless_salt()
            self.assert_gone(f"``OCELOT_SALT={value}``\n", value)
            self.assert_gone(f"resource_key: {value}\n", value)
        value = base64.b64encode(os.urandom(16)).decode()
        self.assert_gone(f"APP_SALT={value}\n", value)

    def test_a_password_in_sql_run_from_a_string_goes(self):
        value = credential(12)
        q2, q4 = "'" * 2, "'" * 4
        self.assert_gone(f"EXEC('CREATE LOGIN {letters(6)} WITH PASSWORD = {q2}{value}{q2} ')\n", value)
        self.assert_gone(f"exec sp_executesql N'ALTER LOGIN sa WITH PASSWORD = {q2}{value}{q2}'\n", value)
        self.assert_gone(f"EXECUTE('EXECUTE({q2}CREATE LOGIN x WITH PASSWORD = {q4}{value}{q4} {q2}) AT \"S1\"')\n", value)
        self.assert_gone(f"  EXECUTE 'ALTER ROLE {letters(5)} LOGIN PASSWORD {q2}{value}{q2}';\n", value)

    def test_a_literal_after_a_yaml_tag_or_in_a_template_expression_goes(self):
        value = credential(14)
        self.assert_gone(f'  MasterUserPassword: !Sub "{value}${{AWS::Region}}"\n', value)
        self.assert_gone(f"  token: !Base64 {value}\n", value)
        self.assert_gone(f"password=!{value} {letters(4)}\n", value)  # ``=`` is no mapping: no tag there
        self.assert_gone(f"db_password: !{value}\n", value)
        self.assert_gone(f"api_key: !env_var API_KEY {value}\n", value)  # a default after the name is a literal
        self.assert_gone(f"\"adminPassword\": \"[concat('{value}', parameters('suffix'))]\",\n", value)
        self.assert_gone(f"password: (({value}))\n", value)


class LookAlikeTests(SanitizerCase):
    """What each rule keeps: forms that describe a credential without holding one."""

    def test_armour_around_a_repeated_stand_in_stays(self):
        piece = RNG.choice(STAND_IN_PIECES)
        body = piece * RNG.randint(12, 30)
        self.assert_kept(armour("\n".join(body[i:i + 64] for i in range(0, len(body), 64))))
        self.assert_kept(armour("X" * RNG.randint(40, 200)))

    def test_kubernetes_identities_stay(self):
        node = f"worker-{RNG.randint(1, 99)}"
        for user in ("system:kube-scheduler", "system:kube-controller-manager", f"system:node:{node}",
                     f"system:serviceaccount:kube-system:{letters(6)}", "system:masters"):
            with self.subTest(user=user):
                self.assert_kept(f"kubectl config set-context default --cluster=kubernetes --user={user} \\\n")

    def test_a_statement_in_a_code_span_with_a_placeholder_stays(self):
        self.assert_kept("1. Set your DigitalOcean Personal Access Token: `export DO_API_TOKEN=[token here]`\n")
        self.assert_kept("Then the token: `export GITHUB_TOKEN=${{ secrets.GITHUB_TOKEN }}`\n")

    def test_a_cache_key_a_template_completes_stays(self):
        words = "-".join(RNG.sample(CACHE_WORDS, 2))
        version = RNG.randint(1, 9)
        self.assert_kept(f"      - restore_cache:\n          key: v{version}-{words}-{{{{ checksum \"package.json\" }}}}\n")
        self.assert_kept(f"          key: {words}-v{version}-{{{{ .Branch }}}}-{{{{ checksum \"yarn.lock\" }}}}\n")

    def test_base64_of_text_under_a_salt_stays(self):
        sentence = " ".join(letters(RNG.randint(3, 7)) for _ in range(4)).capitalize()
        value = base64.b64encode(sentence.encode()).decode()
        if "=" not in value:
            value = base64.b64encode((sentence + ".").encode()).decode()
        self.assertFalse(validators.is_padded_binary_base64(value))
        self.assertFalse(validators.looks_random_for_a_weak_key("A" * 22 + "=="))  # zeros: a fill, not a draw

    def test_a_password_joined_into_sql_run_from_a_string_stays(self):
        q3, q4 = "'" * 3, "'" * 4
        self.assert_kept(f"  EXECUTE 'ALTER ROLE app LOGIN PASSWORD {q3} || {letters(6)} || {q4};\n")
        self.assert_kept("SET @pw = ''; SELECT 1;\n")

    def test_references_a_file_format_declares_stay(self):
        name = letters(6)
        for line in (f"  MasterUserPassword: !Ref {name.capitalize()}Password",
                     f"      Password: !GetAtt {name.capitalize()}Secret.Password",
                     f"  ApiKey: !ImportValue {name}-api-key",
                     f"  DbPassword: !FindInMap [Secrets, {name}, Password]",
                     f"  MasterUserPassword: !Sub '{{{{resolve:secretsmanager:{name}:SecretString:password}}}}'",
                     f"mqtt_password: !secret {name}_password",
                     "api_key: !env_var API_KEY",
                     f"    \"adminPassword\": \"[parameters('{name}Password')]\",",
                     f"    \"secret\": \"[variables('{name}')]\",",
                     f"  password: (({name}_password))",
                     "  password = \"#{ENV['PASSWORD']}\"",
                     '<input type="password" name="password" value="@Model.Password" />'):
            with self.subTest(line=line):
                self.assert_kept(line + "\n")

if __name__ == "__main__":
    unittest.main()
