"""Literals that stand in for a credential stay; credentials beside them, and in their place, go.

Test code and documentation assign words to credential keys: ``access_token:
"fake-token"``, ``password = the-password-to-your-cluster``, a prompt
``"Enter password: "``, ``(password=AB*)`` in an LDAP filter. Blanking them costs
a reader a line of real code and hides nothing. The rules that keep them
(code_values.is_stand_in, context's form bodies, entity quotes and LDAP
wildcards) must never keep a value that has a credential's shape: the hostile
tests come first and draw fresh values each run.
"""

from __future__ import annotations

import base64
import json
import string
import unittest

from bastion_agent.sanitizing import code_values
from bastion_agent.sanitizing.scanner import Sanitizer
from bastion_agent.testing.fresh_values import RNG, credential


def lower_word(length: int) -> str:
    return "".join(RNG.choice(string.ascii_lowercase) for _ in range(length))


def spoken_word(length: int) -> str:
    """A word a person could say, of ``length`` letters: syllables of a consonant and a vowel, some closed
    by a second consonant (never more than two consonants in a row)."""
    consonants, vowels = "bcdfghjklmnpqrstvwxz", "aeiou"
    letters = []
    while len(letters) < length:
        letters += [RNG.choice(consonants), RNG.choice(vowels)]
        if RNG.random() < 0.3:
            letters.append(RNG.choice(consonants))
    return "".join(letters[:length])


def drawn_letters(length: int) -> str:
    """Lower-case letters drawn at random that no one would say: a run of four consonants at least."""
    while True:
        letters = lower_word(length)
        if not code_values.is_wordlike(letters):
            return letters


class HostileStandInTests(unittest.TestCase):
    """Values of a credential's shape, written where stand-ins live, are removed whole."""

    def setUp(self):
        self.sanitizer = Sanitizer()

    def assert_gone(self, text: str, value: str):
        out, counts = self.sanitizer.redact(text)
        self.assertNotIn(value, out)
        for piece in (value[i:i + 6] for i in range(0, len(value) - 5, 3)):
            self.assertNotIn(piece, out, f"a piece of the value survived in {out!r}")
        self.assertGreater(sum(counts.values()), 0)

    def test_a_real_looking_password_in_a_test_file_stays_redacted(self):
        for template in ('    self.client.login(username="ann", password="{v}")\n',
                         "  const fixture = {{ password: '{v}' }};\n",
                         'user.password = "{v}"\n',
                         'expect(res.body).toEqual({{"access_token": "{v}"}})\n',
                         "token = `{v}`\n"):
            value = credential()
            self.assert_gone(template.format(v=value), value)

    def test_a_token_of_letters_of_mixed_case_or_a_long_one_stays_redacted(self):
        for value in (lower_word(6) + "Q" + lower_word(7), lower_word(20)):
            self.assert_gone(f'{{"access_token": "{value}"}}\n', value)

    def test_a_password_may_be_one_word_and_stays_redacted(self):
        value = lower_word(9)  # no vocabulary: a password chosen from a dictionary is still a password
        self.assert_gone(f'db_password = "{value}"\n', value)

    def test_a_form_body_in_a_string_loses_each_of_its_secrets(self):
        token, secret = credential(30), credential(32)
        self.assert_gone(f'body = "oauth_token={token}&oauth_token_secret={secret}"\n', token)
        self.assert_gone(f'body = "oauth_token={token}&oauth_token_secret={secret}"\n', secret)

    def test_an_entity_quoted_password_in_a_page_of_code_stays_redacted(self):
        value = credential()
        self.assert_gone(f"<pre>String KEY_PASSWORD = &#34;{value}&#34;;</pre>\n", value)

    def test_an_ldap_filter_without_a_wildcard_keeps_nothing(self):
        value = credential()
        self.assert_gone(f"(&(uid=ann)(userPassword={value}))\n", value)

    def test_an_alias_does_not_hide_a_password_assigned_after_it(self):
        value = credential()
        self.assert_gone(f"alias deploy='run-deploy'\nexport DEPLOY_PASSWORD='{value}'\n", value)

    def test_a_quoted_phrase_of_plain_words_stays_redacted(self):
        value = f"{lower_word(5)} with {lower_word(6)} and {lower_word(4)}"  # detect-secrets' own example's shape
        self.assert_gone(f'password_super_secure = "{value}"\n', value)

    def test_a_value_that_only_shares_some_words_with_its_key_stays_redacted(self):
        value = "reset-" + credential(10) + "-token"
        self.assert_gone(f"var resetPasswordToken = '{value}';\n", value)

    def test_a_list_ending_with_a_credential_key_does_not_crash_the_scan(self):
        self.assertEqual(self.sanitizer.redact("Fields: 'ResetPassword',")[0], "Fields: 'ResetPassword',")
        self.assertEqual(self.sanitizer.redact("('password',")[0], "('password',")

    def test_a_backtick_literal_without_a_command_stays_redacted(self):
        value = credential()
        self.assert_gone(f"Passwd=`{value}`\n", value)


def stand_in_phrase() -> str:
    """Fresh words of a test's fake: ``other-fake-token``, ``Sample_Secret``..."""
    stand_in = RNG.choice(sorted(code_values.STAND_IN_WORDS - code_values.FUNCTION_WORDS))
    own = RNG.choice(["token", "secret", "key", "password", "verifier"])
    words = [stand_in, own] if RNG.random() < 0.5 else [own, stand_in]
    joined = RNG.choice("-_ .").join(words)
    return joined.title() if RNG.random() < 0.3 else joined


class StandInTests(unittest.TestCase):
    """Each kind of stand-in, in fresh invented lines, is kept whole."""

    def setUp(self):
        self.sanitizer = Sanitizer()

    def assert_kept(self, text: str):
        out, counts = self.sanitizer.redact(text)
        self.assertEqual(out, text, f"changed: {out!r}")

    def test_words_of_a_fake_stay(self):
        for _ in range(5):
            phrase = stand_in_phrase()
            self.assertTrue(code_values.is_stand_in(phrase), phrase)
            self.assert_kept(f'    client.refresh_token = "{phrase}"\n')

    def test_a_fakes_words_written_together_stay_and_drawn_letters_beside_the_mark_go(self):
        """``password = "somefakekey"``: a fake's words without separators; ``fake`` then drawn consonants is a
        password someone chose, and goes."""
        for _ in range(5):
            words = [RNG.choice(sorted(code_values.FAKE_MARKS)),
                     RNG.choice(sorted(code_values.CREDENTIAL_WORDS - {"pw"})),
                     RNG.choice(["", "some", "my", "the", "other", "test"])]
            RNG.shuffle(words)
            self.assert_kept(f'password = "{"".join(words)}"\n')
            mark = RNG.choice(sorted(code_values.FAKE_MARKS))
            drawn = "".join(RNG.choice("bcdfghjklmnqrstvxz") for _ in range(8))  # no vowel: no word of a fake
            for value in (mark + drawn, drawn + mark):
                out, _ = self.sanitizer.redact(f'password = "{value}"\n')
                self.assertNotIn(value, out)
                self.assertNotIn(drawn, out)

    def test_a_description_of_what_to_put_there_stays(self):
        place = lower_word(7)
        self.assert_kept(f"store.password = the-password-to-your-{place}\n")
        self.assert_kept(f"'API_TOKEN': 'insert-token-from-{place}'\n")

    def test_one_lower_case_word_under_a_token_key_stays(self):
        word = spoken_word(RNG.randint(3, 12))
        self.assertTrue(code_values.is_wordlike(word), word)
        self.assert_kept(f'self.assertEqual(token, {{"access_token": "{word}"}})\n')
        self.assert_kept(f'client.token = "{word}"\n')

    def test_letters_drawn_at_random_under_a_token_key_go(self):
        """Past nine letters a token's one lower-case word must be one a person could say: drawn letters
        (``export DO_API_TOKEN='kqzvbrtmwnpx'`` in a docstring's example) are a token."""
        letters = drawn_letters(RNG.randint(10, 12))
        for text in (f"    export DO_API_TOKEN='{letters}' or\n", f'client.token = "{letters}"\n',
                     f"    export DO_API_TOKEN={letters}\n"):
            out, _ = self.sanitizer.redact(text)
            self.assertNotIn(letters, out)

    def test_one_piece_repeated_under_a_token_key_stays_and_a_drawn_hex_token_goes(self):
        """``deadbeefdeadbeef…``: a person typed one piece again and again; a machine draws a token."""
        piece = "".join(RNG.choice("abcdef") for _ in range(RNG.randint(4, 8)))
        self.assert_kept(f"export GITROB_ACCESS_TOKEN={piece * (40 // len(piece) + 1)}\n")
        drawn = "".join(RNG.choice("0123456789abcdef") for _ in range(40))
        out, _ = self.sanitizer.redact(f"export GITROB_ACCESS_TOKEN={drawn}\n")
        self.assertNotIn(drawn[:20], out)
        self.assertNotIn(drawn[20:], out)

    def test_a_value_shown_cut_short_stays_and_the_whole_value_goes(self):
        """``fPk/Gya[...]4/j5bSuhDQ``, ``eyJ….eyJzdWIiOiIxMj...Fh7HgQ``: a document quotes a credential's shape
        with characters left out; the same characters unbroken are a credential."""
        alphabet = string.ascii_letters + string.digits + "/+"
        head, tail = "".join(RNG.choice(alphabet) for _ in range(7)), "".join(RNG.choice(alphabet) for _ in range(10))
        self.assert_kept(f"export AWS_SECRET_ACCESS_KEY={head}[...]{tail}\n")
        whole = head + "".join(RNG.choice(alphabet) for _ in range(23)) + tail
        out, _ = self.sanitizer.redact(f"export AWS_SECRET_ACCESS_KEY={whole}\n")
        self.assertNotIn(whole[8:24], out)
        header = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("=")
        claims = base64.urlsafe_b64encode(json.dumps({"sub": lower_word(12)}).encode()).decode().rstrip("=")
        signature = "".join(RNG.choice(string.ascii_letters + string.digits + "-_") for _ in range(43))
        self.assert_kept(f"{header}.{claims[:14]}...{signature[-6:]}:secret\n")
        out, _ = self.sanitizer.redact(f"token: {header}.{claims}.{signature}\n")
        self.assertNotIn(signature, out)

    def test_a_prompt_and_a_message_template_stay(self):
        self.assert_kept("ConfirmSecret = `Repeat your secret: `\n")
        self.assert_kept('PasswordFailed = "password for %q rejected: %v"\n')

    def test_a_path_to_a_key_file_stays(self):
        name = lower_word(6)
        self.assert_kept(f'"client_key": "certs/{name}/client.key"\n')
        self.assert_kept(f"tool --client-key={name}-key.pem --embed\n")

    def test_a_command_substitution_and_an_alias_stay(self):
        self.assert_kept("Passwd=`awk '/'$host'/{print $3}' hosts.txt`\n")
        self.assert_kept(f"alias {lower_word(2)}pwd='wp widget {lower_word(5)}'\n")

    def test_stand_ins_in_a_url_query_and_a_form_body_stay(self):
        self.assert_kept(f'"https://api.example.org/v1/me?access_token={stand_in_phrase().replace(" ", "-")}"\n')
        self.assert_kept(f'send("oauth_token={lower_word(4)}&oauth_token_secret={lower_word(4)}")\n')

    def test_an_entity_quoted_placeholder_stays(self):
        self.assert_kept("String STORE_PASSWORD = &#34;password&#34;;\n")

    def test_an_ldap_wildcard_search_stays(self):
        letters = "".join(RNG.choice(string.ascii_uppercase) for _ in range(RNG.randint(1, 3)))
        self.assert_kept(f"(&(sn=admin)(password={letters}*)) : OK\n")

    def test_a_value_that_names_its_own_key_stays(self):
        self.assert_kept("var resetPasswordToken = 'password-reset-token';\n")
        self.assert_kept(">>> consumer_key = 'consumer key'\n")
        self.assert_kept("ResetPassword: 'ResetPassword',\n")

    def test_a_path_like_name_stays(self):
        self.assert_kept('user_credentials="path_to_creds_file",\n')

    def test_an_api_listing_a_scheme_and_a_version_stay(self):
        name = lower_word(5).upper()
        self.assert_kept(f'const Lib.Crypt.KeyFunctions.KDF_{name} = "{name}" -> string\n')
        self.assert_kept("default_pass_scheme = SHA512-CRYPT\n")
        self.assert_kept(f"  - credentials-binding:1.{RNG.randint(10, 99)}\n")

    def test_a_public_key_token_and_a_package_commit_stay(self):
        token = "".join(RNG.choice("0123456789abcdef") for _ in range(16))
        self.assert_kept(f"type = 'Lib.Asm, Version=4.0.0.0, Culture=neutral, PublicKeyToken={token}'\n")
        self.assert_kept(f"pkg_{lower_word(4)}_passwd_commit = master\n")


if __name__ == "__main__":
    unittest.main()
