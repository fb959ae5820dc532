"""Code and config read by their syntax: names and references stay, secrets written as code's data go.

Real files name credentials without holding them (``authKey: auth``,
``sessionKey: "session.app"``, ``"KeyId": "6962…"``, ``x ? "Create credential"
: "Save credential"``, ``--password=NATS_PASSWORD``) and hold them in forms a
key-then-literal reader misses (``quicSalt = []byte{0xaf, …}``, ``secret :=
splitHexString("9ac3…")``, ``set password = PASSWORD('…')``, ``\\set PGPASS
…``, ``-CertFilePassword …``). Each rule that keeps a look-alike is tested
beside the real form it must not keep (hostile tests first); every value is
drawn fresh each run.
"""

from __future__ import annotations

import string
import unittest

from bastion_agent.sanitizing import code_values
from bastion_agent.testing.fresh_values import RNG, credential
from bastion_agent.testing.sanitizer_case import SanitizerCase


def word(length: int) -> str:
    return "".join(RNG.choice(string.ascii_lowercase) for _ in range(length))


def hex_string(length: int) -> str:
    return "".join(RNG.choice("0123456789abcdef") for _ in range(length))


def byte_list(count: int) -> list[str]:
    values = RNG.sample(range(256), count)  # distinct bytes: a drawn key, not a pattern
    return [f"0x{value:02x}" for value in values]


class HostileSyntaxTests(SanitizerCase):
    """The real forms beside each look-alike that stays: none of them is kept."""

    def test_a_drawn_value_under_a_key_named_like_it_stays_redacted(self):
        value = credential(24)
        self.assert_gone(f'sessionKey: "{value}"\n', value)
        self.assert_gone(f"--initial-cluster-token={value} \\\n", value)
        value = word(5) + "-" + credential(12)  # a word and a drawn part: not a name
        self.assert_gone(f'NONCE_SESSION_KEY = "{value}"\n', value)

    def test_a_value_that_repeats_the_credential_word_is_no_derived_name(self):
        value = f"{word(7)}-reset-token"  # the word of the credential itself: CredData labels this one real
        self.assert_gone(f"resetPasswordToken: '{value}'\n", value)

    def test_a_password_that_is_the_keys_name_with_a_digit_stays_redacted(self):
        self.assert_gone('public static final String V3_PRIVACYPASSPHRASE = "privacypassphrase";\n',
                         "privacypassphrase")

    def test_a_camel_case_value_with_a_digit_inside_a_word_stays_redacted(self):
        value = word(3) + "7" + word(2) + "Q" + word(3) + "4"  # ``abc7deQfgh4``: digits inside words
        self.assert_gone(f"options.credentials = {value};\n", value)

    def test_a_random_hex_key_under_a_secret_key_stays_redacted(self):
        value = hex_string(32)
        self.assert_gone(f'{{"SecretKey":"{value}","Parameters":{{}}}}\n', value)

    def test_an_option_with_a_real_value_after_the_flag_stays_redacted(self):
        value = credential()
        self.assert_gone(f"--password={value}  the admin password\n", value)
        self.assert_gone(f"ldapsearch -x -D cn=admin -w {value} -b dc=example\n", value)

    def test_a_json_object_holding_key_material_stays_redacted(self):
        value = credential(40)
        self.assert_gone(f'signingKey: {{"kty":"oct","kid":"{word(6)}","k":"{value}"}},\n', value)

    def test_a_sentence_under_a_password_column_that_is_not_addressed_to_the_reader_goes(self):
        value = credential(10)
        self.assert_gone(f"<tr><th>Password:</th> <td>{value}</td></tr>\n", value)

    def test_a_ternary_does_not_hide_a_password_assigned_in_a_string_map(self):
        value = credential()
        self.assert_gone(f'cfg = {{"password" : "{value}"}}\n', value)

    def test_a_property_path_of_digits_and_symbols_stays_redacted(self):
        value = credential(8) + "." + credential(8)
        self.assert_gone(f'password: "{value}"\n', value)


class MaskedValueTests(SanitizerCase):
    """A value partly masked still shows the rest of a credential; a mask over nearly all of it is a stand-in."""

    def test_a_partly_masked_token_with_a_long_random_rest_goes(self):
        head, tail = credential(18), credential(8)
        value = f"{head}XXXXXXXX{tail}"
        self.assert_gone(f'-H "Authorization: Bearer {value}"\n', head)
        self.assert_gone(f'    "SecretAccessKey" : "{head}xxxxxxxx{tail}",\n', head)

    def test_a_mask_over_most_of_the_value_stays(self):
        self.assert_kept('token = "ghp_' + "x" * 36 + '"\n')
        self.assert_kept("resetPassword: 'd-d-" + "*" * 36 + "',\n")
        ids = "-".join(str(RNG.randint(10 ** 11, 10 ** 12 - 1)) for _ in range(3))
        self.assert_kept(f'"token4": "xoxp-{ids}-' + "#" * 20 + '"\n')  # ids in the clear, the secret masked
        middle = ''.join(RNG.choice(string.ascii_uppercase) for _ in range(3))
        self.assert_kept(f"verification_token: '{'X' * 15}{middle}{'X' * 15}'\n")


class KeptLookAlikeTests(SanitizerCase):
    """What names a credential, or describes one, by its syntax stays whole."""

    def test_a_value_made_of_the_keys_own_words_stays(self):
        self.assert_kept("authKey: auth\n")
        self.assert_kept(f'"{word(5)}_token=token&"\n')

    def test_a_name_derived_from_a_generated_keys_words_stays(self):
        name = word(6)
        self.assert_kept(f'{name}Key: "{name}.{word(3)}"\n')
        self.assert_kept(f"--initial-{name}-token={word(4)}-{name}-{RNG.randint(0, 9)} \\\n")
        self.assert_kept(f'NONCE_SESSION_KEY = "{word(7)}_{word(8)}_nonce"\n')

    def test_a_slot_of_an_object_named_after_a_secret_stays(self):
        self.assert_kept(f'secretProperty: "{word(5)}"\n')
        self.assert_kept(f"data.secretProperty = `secret-${{data.{word(6)}}}`;\n")

    def test_a_pam_password_quality_checker_is_no_password(self):
        self.assert_kept("os_packages_pam_passwdqc: 'libpam-passwdqc'\n")

    def test_a_camel_case_name_whose_digits_close_a_word_is_code(self):
        self.assert_kept(f"options.credentials = {word(3)}S3{word(5).title()};\n")
        self.assertTrue(code_values.is_worded_name("sha256Digest"))
        self.assertFalse(code_values.is_worded_name("S1kq6eFgV"))

    def test_a_hex_id_under_an_id_key_stays(self):
        self.assert_kept(f'{{"KeyId":"{hex_string(32)}","Parameters":{{}}}}\n')

    def test_a_bare_key_of_a_map_or_cache_stays(self):
        self.assert_kept(f'key: "{word(5)}-$CI_USER_LOGIN-2"\n')

    def test_the_strings_of_a_conditional_stay(self):
        self.assert_kept(f'= f.submit @credential.new? ? "Create credential" : "{word(4).title()} credential"\n')

    def test_a_metavar_or_a_missing_value_of_an_option_stays(self):
        self.assert_kept("--password=NATS_PASSWORD  Password\n")
        self.assert_kept("'(-p+ --password=-)'{-p+,--password=-}'[password for use with sudo]: :' \\\n")
        self.assert_kept('ldapsearch -x -h\xa0 -D "@" -w\xa0 -b "dc=<>,dc=<>"\n')

    def test_a_json_object_without_key_material_stays(self):
        self.assert_kept('signingKey: {"kty":"oct","kid":"--","alg":"HS256","k":"--"},\n')

    def test_a_bracketed_placeholder_in_a_user_password_pair_stays(self):
        self.assert_kept(f"docker run -d --env NEO4J_AUTH={word(5)}/[password] neo4j:3.5\n")

    def test_a_message_labelling_the_token_stays(self):
        self.assert_kept('token = "Token: (empty), "\n')

    def test_a_description_of_a_hash_stays(self):
        self.assertTrue(code_values.is_stand_in("bcrypt_hash_of_qwerty", "password"))

    def test_inline_code_that_computes_a_value_stays(self):
        self.assert_kept("JSON Web Token : `Base64(Header).Base64(Data).Base64(Signature)`\n")

    def test_a_property_path_to_a_password_field_stays(self):
        self.assert_kept('<input password-verify="passwordMock.newPassword" required>\n')

    def test_a_comparison_of_a_calls_result_is_code(self):
        self.assert_kept('case "k":return 0==b.indexOf("x-")?"ClientIdLooksLikeCryptoKey":0!=b.indexOf("gme-")?'
                         '"InvalidClientId":null;case "c":\n')

    def test_a_query_value_ends_at_the_next_field_after_a_semicolon(self):
        self.assert_kept('login=1&user=<?php system("id");?>&pass=password&lang=en_us.php\n')

    def test_a_guide_addressed_to_the_reader_under_a_password_header_stays(self):
        self.assert_kept("<tr><th>Password:</th> <td>Your mail password.</td></tr>\n")

    def test_a_parenthesised_reference_after_a_password_word_stays(self):
        self.assert_kept("set_password (``allauth.account.forms.SetPasswordForm``)\n")

    def test_a_placeholder_for_a_generated_password_is_no_key(self):
        self.assert_kept("hacker:GENERATED_PASSWORD_HERE:0:0:Hacker:/root:/bin/bash\n")


class CodeDataTests(SanitizerCase):
    """Secrets written as code's data go; the same syntax holding no secret stays."""

    def test_a_byte_array_under_a_secret_key_goes(self):
        numbers = byte_list(20)
        text = f"quicSaltOld     = []byte{{{', '.join(numbers)}}}\n"
        out, _ = self.sanitizer.redact(text)
        for number in numbers[1:-1]:
            self.assertNotIn(number, out)
        numbers = byte_list(16)
        out, _ = self.sanitizer.redact(f"  Token: protocol.StatelessResetToken{{{', '.join(numbers)}}},\n")
        self.assertNotIn(", ".join(numbers[2:6]), out)
        out, _ = self.sanitizer.redact(f"byte[] aesKey = new byte[]{{{', '.join(byte_list(12))}}};\n")
        self.assertIn("REDACTED", out)

    def test_a_byte_array_of_a_repeated_byte_stays(self):
        self.assert_kept("quicSalt = []byte{" + ", ".join(["0x00"] * 16) + "}\n")

    def test_a_random_literal_in_a_decoding_call_goes(self):
        value = hex_string(32) + " " + hex_string(32)
        self.assert_gone(f'secret := splitHexString("{value}")\n', value.replace(" ", ""))
        self.assert_gone(f'secret := splitHexString("{value}")\n', value[:32])

    def test_a_name_in_a_call_stays(self):
        self.assert_kept('private static final String AUTH_PASSWORD = System.getenv("HUB_DXIA2_PASSWORD");\n')

    def test_a_salt_under_its_key_goes_and_a_count_of_rounds_stays(self):
        value = credential(22) + "=="
        self.assert_gone(f"``OCELOT_SALT={value}``\n", value)
        value = hex_string(64)
        self.assert_gone(f"# Salt:               {value}\n", value)
        self.assert_kept(f"salt_rounds = {RNG.randint(8, 14)}\n")
        self.assert_kept(f"password_salt = {word(8)}\n")

    def test_sql_password_function_argument_goes(self):
        value = credential(10)
        self.assert_gone(f"update user set password=password('{value}') where user='root';\n", value)
        self.assert_kept("update user set password=password('passwd') where user='root'\n")

    def test_psql_and_console_set_commands_lose_their_password(self):
        value = credential(10)
        self.assert_gone(f"\\set POSTGRES_PASS {value}\n", value)
        value = hex_string(32) + ":" + hex_string(32)
        self.assert_gone(f"set SMBPass {value}\n", value)
        self.assert_kept(f"set SMBPass {word(7)}\n")

    def test_a_powershell_parameter_named_after_a_password_loses_its_value(self):
        value = credential(10) + "!"
        self.assert_gone(f"PS> .\\Tool.ps1 -Certificate C:\\t\\server.pfx -CertFilePassword {value} -Force\n", value)
        self.assert_kept("PS> New-Thing -NoPassword -Force\n")

    def test_an_options_value_of_letters_goes(self):
        value = word(9)
        self.assert_gone(f"ntop --set-admin-password={value}\n", value)
        self.assert_kept("--password=PASSWORD\n")


class FallbackSetterAndSpellingTests(SanitizerCase):
    """A fallback after an environment lookup, an element with attributes, a setter's argument, a misspelt
    key, a one-time-code seed and a passphrase of words are credentials; their look-alikes stay."""

    def test_the_fallback_of_an_environment_lookup_goes(self):
        value = credential()
        for template in ('DB_PASS = os.getenv("DB_PASS") or "{v}"\n',
                         'const pw = process.env.DB_PASSWORD || "{v}";\n',
                         "const token = process.env.TOKEN ?? '{v}';\n", 'const pw = process.env.PW||"{v}";\n',
                         'password = ENV["DB_PASSWORD"] || "{v}"\n'):
            self.assert_gone(template.format(v=value), value)

    def test_a_lookup_with_an_empty_or_no_fallback_stays(self):
        self.assert_kept('const pw = process.env.DB_PASSWORD || "";\n')
        self.assert_kept("token = token or {}\n")

    def test_an_element_with_attributes_loses_its_value(self):
        value = credential()
        self.assert_gone(f'<password name="{word(5)}" encrypted="false">{value}</password>\n', value)
        self.assert_kept('<password name="admin" encrypted="false">${ADMIN_PASSWORD}</password>\n')

    def test_a_setters_literal_goes_and_its_variable_or_stand_in_stays(self):
        value = credential()
        for template in ('user.set_password("{v}")\n', 'user.setPassword("{v}");\n', "$conn->setPassword('{v}');\n",
                         'client.setApiKey("{v}");\n'):
            self.assert_gone(template.format(v=value), value)
        self.assert_kept("user.setPassword(password);\n")
        self.assert_kept('user.setPassword("fake-password");\n')
        self.assert_kept(f'user.setName("{word(6)}");\n')

    def test_a_misspelt_secret_key_is_read_as_meant(self):
        value = credential()
        for key in ("secert", "sercet", "client_secert"):
            self.assert_gone(f'{key}: "{value}"\n', value)

    def test_a_one_time_code_seed_goes_and_a_random_seed_stays(self):
        value = "".join(RNG.choice(string.ascii_uppercase + "234567") for _ in range(16))
        self.assert_gone(f'otp_seed = "{value}"\n', value)
        self.assert_gone(f"TOTP_SEED={value}\n", value)
        self.assert_kept(f"random_seed = {RNG.randint(1, 10 ** 6)}\n")
        self.assert_kept(f'seed = "{word(8)}"\n')

    def test_a_seed_of_capitals_alone_is_no_constant_name(self):
        # One base32 seed in 28 has no digit; capitals alone read as a constant's name only when they
        # spell words about key material (``"PRIVATEBLOB"``), as the look-alike does.
        for value in ["HSMFNYPOVOFVTNNZ", "TLOHLLQUFXAOVADY", "TRUYRARHSUANRKEY"] + [
                "".join(RNG.choice(string.ascii_uppercase) for _ in range(16)) for _ in range(20)]:
            self.assert_gone(f'otp_seed = "{value}"\n', value)
        self.assert_kept('NCRYPT_PRIVATE_KEY_BLOB = "PRIVATEBLOB"\n')

    def test_a_quoted_passphrase_of_six_words_goes(self):
        value = " ".join(word(RNG.randint(4, 7)) for _ in range(6))
        self.assert_gone(f'passphrase: "{value}"\n', value)
        self.assert_gone(f'wifi_passphrase = "{value}"\n', value)


if __name__ == "__main__":
    unittest.main()
