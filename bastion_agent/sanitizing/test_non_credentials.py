"""Shapes that look like credentials and are not: unsigned JWTs, counting runs, names, references.

CredData's harmless lines hold them: a JWT without a signature (anyone may
write one), ``"resource_key": "1234567890abcdef"``, ``0xdeadbeef``, a
Kubernetes Secret's name (``secret: traefik-cert``) copied into every command
that mounts it, ``ALTER USER ... PASSWORD '` + newpw + `'`` (the string closed
and a variable joined in), an LDAP extensible-match filter, the user name of
``ftp://user:pw@host`` read as an e-mail address. Each rule must keep nothing
with a credential's shape: the hostile tests come first, with fresh values.
"""

from __future__ import annotations

import base64
import json
import unittest

from bastion_agent.sanitizing import code_values, validators
from bastion_agent.sanitizing.scanner import Sanitizer
from bastion_agent.testing.fresh_values import B62, RNG, credential


# Letters that spell no credential's word by chance (no p, k, t, s, e, w: no "pw", "key", "token").
PLAIN_LETTERS = "abcdfghijlmnoruvxyz"


def word(length: int = 7) -> str:
    return "".join(RNG.choice(PLAIN_LETTERS) for _ in range(length))


def b64url(obj) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def jwt(header: dict, claims: dict, signature: str | None) -> str:
    token = f"{b64url(header)}.{b64url(claims)}"
    return token if signature is None else f"{token}.{signature}"


def signature() -> str:
    return "".join(RNG.choice(B62 + "-_") for _ in range(43))


class HostileTests(unittest.TestCase):
    """What still looks like a secret, written beside the new exceptions, goes whole."""

    def setUp(self):
        self.sanitizer = Sanitizer()

    def assert_gone(self, text: str, value: str):
        out, counts = self.sanitizer.redact(text)
        self.assertGreater(sum(counts.values()), 0, out)
        for piece in (value[i:i + 6] for i in range(0, max(1, len(value) - 5), 3)):
            self.assertNotIn(piece, out, f"a piece of {value!r} survived in {out!r}")

    def test_a_signed_jwt_goes_whatever_its_claims(self):
        for claims in ({"sub": word(), "iat": RNG.randrange(10 ** 9, 2 * 10 ** 9)}, {"test": "test"}):
            token = jwt({"alg": "HS256", "typ": "JWT"}, claims, signature())
            self.assert_gone(f'verifier("{token}")\n', token)

    def test_an_unsigned_jwt_that_carries_an_address_goes(self):
        address = f"{word()}.{word()}@{word()}.org"
        token = jwt({"alg": "none"}, {"email": address, "sub": word()}, "")
        out, _ = self.sanitizer.redact(f"token = '{token}'\n")
        self.assertNotIn(b64url({"email": address, "sub": ""})[:12], out)
        self.assertNotIn(token.split(".")[1][:20], out)

    def test_base64_json_that_is_no_jwt_header_still_counts_as_high_entropy(self):
        blob = base64.b64encode(json.dumps({"auths": {word(): {"auth": credential(24)}}}).encode()).decode()
        self.assertTrue(blob.startswith("eyJ"))
        self.assertFalse(validators.is_jwt_header(blob))
        self.assert_gone(f'config = "{blob}"\n', blob)

    def test_random_keys_and_tokens_go_and_a_counting_password_stays_a_password(self):
        value = credential(16)
        self.assert_gone(f'"resource_key": "{value}"\n', value)
        value = credential(12)
        self.assert_gone(f"curl -H 'X-Api-Key:{value}' https://h\n", value)
        hex_key = "".join(RNG.choice("0123456789abcdef") for _ in range(32))
        self.assertFalse(code_values.is_counting(hex_key))
        self.assert_gone(f'"resource_key": "{hex_key}"\n', hex_key)
        self.assertFalse(code_values.is_stand_in("12345678", "password"))
        self.assert_gone('db_password = "12345678"\n', "12345678")

    def test_a_short_random_key_with_repeated_characters_goes(self):
        # Three in a hundred random 16-character values repeat enough characters to read 3.3-3.5 bits a
        # character; a weak key's value was kept below 3.5 whatever its length.
        value = credential(16)
        while not 3.3 <= validators.shannon_entropy(value) < 3.5:
            value = credential(16)
        self.assert_gone(f'"resource_key": "{value}"\n', value)
        self.assert_gone(f"session_token = '{value}'\n", value)
        self.assertEqual(self.sanitizer.redact('"resource_key": "aaaabbbbccccdd12"\n')[0],
                         '"resource_key": "aaaabbbbccccdd12"\n')  # runs of letters: 2.5 bits, no key

    def test_an_env_line_value_that_reads_like_a_camel_case_name_goes(self):
        # A random value can read as a camelCase identifier (``vvOhyeFhEc94``); in shell and ``.env``
        # syntax a bare value is the string itself, so it goes. In code, with spaces around ``=``, a
        # camelCase word is a variable and stays.
        value = "".join(RNG.choice("bcdfghjkmnpqrstvwxz") for _ in range(2)) + "".join(
            RNG.choice("BCDFGHJKLMNPQRSTVWXZ") + RNG.choice("aeiouy") + RNG.choice("bcdfghjkmnpqrstvwxz")
            for _ in range(3)) + str(RNG.randrange(10, 100))
        for line in (f"WACHTWOORD={value}\n", f"export SMTP_PASSWORD={value}\n", f"x=1\nSENHA_BANCO={value}\n"):
            with self.subTest(line=line):
                self.assert_gone(line, value)
        for code in ("password = userPassword\n", "PASSWORD = defaultPassword\n", "db.password=configPassword;\n"):
            with self.subTest(code=code):
                self.assertEqual(self.sanitizer.redact(code)[0], code)

    def test_a_password_in_sql_or_an_ldap_assignment_or_go_goes(self):
        value = credential()
        self.assert_gone(f"ALTER USER {word()} PASSWORD '{value}';\n", value)
        value = credential()
        self.assert_gone(f"(&(uid={word()})(userPassword={value}))\n", value)
        value = credential()
        self.assert_gone(f'db_password := "{value}"\n', value)

    def test_a_url_password_goes_though_the_address_rule_steps_aside(self):
        value = credential()
        self.assert_gone(f"wget ftp://{word()}:{value}@{word()}.{word(5)}.io/file\n", value)
        address = f"{word()}.{word()}@{word()}.org"
        self.assert_gone(f"Write to {address} today\n", address)

    def test_a_credential_shaped_name_or_a_password_named_like_one_goes(self):
        for head, tail, key in ((f"{word(4)}{RNG.randrange(10, 99)}", "-cert", "secret"),
                                (word(), "-password", "password"), (word(), "-token", "password")):
            out, _ = self.sanitizer.redact(f"{key}: {head}{tail}\n")
            self.assertNotIn(head, out)

    def test_a_braced_value_of_a_credentials_shape_or_an_odbc_password_goes(self):
        value = credential()
        self.assert_gone(f"token: {{{value}}}\n", value)
        value = word(9)
        self.assert_gone(f"Driver={{ODBC}};Server=db;Uid=sa;Pwd={{{value}}};\n", value)

    def test_a_value_before_a_wide_comma_goes_and_the_prose_after_it_stays(self):
        value, prose = credential(), "以便后面挂载"
        out, _ = self.sanitizer.redact(f"## 创建 secret: {value}，{prose}\n")
        self.assertNotIn(value[:8], out)
        self.assertIn(prose, out)


class KeptTests(unittest.TestCase):
    """The shapes CredData labels harmless stay, with the reason each rule names."""

    def setUp(self):
        self.sanitizer = Sanitizer()

    def assert_kept(self, text: str):
        out, counts = self.sanitizer.redact(text)
        self.assertEqual(out, text)
        self.assertEqual(sum(counts.values()), 0)

    def test_an_unsigned_jwt_stays(self):
        claims = {"login": word(), "iat": str(RNG.randrange(10 ** 9, 2 * 10 ** 9))}
        self.assert_kept(f"{jwt({'typ': 'JWT', 'alg': 'none'}, claims, '')}\n")
        self.assert_kept(f'def withoutSignature = "{jwt({"alg": "ES512", "typ": "JWT"}, claims, None)}"\n')

    def test_counting_runs_and_hex_words_under_a_key_or_token_name_stay(self):
        start = RNG.randrange(1, 4)
        run = "1234567890"[start - 1:] + "abcdef"[:RNG.randrange(3, 7)]
        self.assertTrue(code_values.is_counting(run))
        self.assertFalse(code_values.is_counting(credential()))
        self.assert_kept(f'"resource_key": "{run}"\n')
        self.assert_kept("ContainSubstring(\"-> &wire.NewTokenFrame{Token: 0xdeadbeef\")\n")

    def test_a_jwt_stub_and_an_option_list_stay(self):
        self.assert_kept(f'"refresh_token": "eyJ{word(6)}",\n')
        self.assert_kept(f'__comp_{word()}_credential_default=" --{word()}= --no-{word()} -- --{word()}"\n')

    def test_a_concatenated_sql_password_stays(self):
        self.assert_kept(f"db.Exec(`ALTER USER ` + user + ` PASSWORD '` + {word()} + `'`)\n")

    def test_an_ldap_extensible_match_stays(self):
        self.assert_kept(f"userPassword:2.5.13.{RNG.randrange(10, 40)}:=\\xx\\xx\n")

    def test_a_url_user_name_is_no_address(self):
        self.assert_kept(f"wget -m ftp://xxx:xxx@{word()}.com/xxx\n")

    def test_a_port_then_an_empty_fragment_is_no_password(self):
        self.assert_kept(f"http://{word()}.com:{RNG.randrange(80, 9000)}#@www.{word()}.tld/\n")

    def test_a_secrets_name_and_its_copies_stay(self):
        name = f"{word()}-cert"
        self.assert_kept(f"# create the secret: {name}\n$ kubectl create secret tls {name} --key=tls.key\n")

    def test_a_template_field_and_a_format_verb_stay(self):
        self.assert_kept(f"docker run -e GITHUB_TOKEN={{your token}} {word()}/{word()}\n")
        self.assert_kept(f'"no token: {{{word()}}}".format({word()}=token), token\n')
        self.assert_kept('logger.Debugf("%s &wire.NewTokenFrame{Token: %#x}", dir, f.Token)\n')

    def test_a_sentence_addressed_to_the_reader_stays(self):
        self.assert_kept(f"S3_SECRET_ACCESS_KEY: Your {word(2).upper()}{RNG.randrange(2, 9)} access key password\n")

    def test_a_mailbox_nobody_reads_stays_and_a_persons_address_beside_it_goes(self):
        domain = f"{word(6)}.{RNG.choice(['com', 'io', 'de', 'org'])}"
        person = f"{word(5)}.{word(6)}"
        for mailbox in ("noreply", "no-reply", "NoReply", "do-not-reply", "donotreply", "mailer-daemon",
                        "postmaster", "bounces"):
            with self.subTest(mailbox=mailbox):
                self.assert_kept(f"From: {mailbox}@{domain}\n")
        for address in (f"{person}@{domain}", f"{RNG.randrange(10 ** 6, 10 ** 8)}+{word(6)}@users.noreply.github.com",
                        f"bounces+{word(5)}={domain}@lists.{domain}", f"noreply.{word(5)}@{domain}"):
            with self.subTest(address=address):
                out, _ = self.sanitizer.redact(f"From: noreply@{domain}\nReply-To: {address}\n")
                self.assertNotIn(address.split("@")[0], out)
                self.assertIn(f"noreply@{domain}", out)


if __name__ == "__main__":
    unittest.main()
