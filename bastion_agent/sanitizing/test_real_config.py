"""Config and code as other people write them: compose, Kubernetes, Helm, .env, connection strings, code.

Each class comes from files of public repositories that the bench
``bench/sanitize/real_config.py`` plants fresh values in (those files stay
outside the repository; the fixtures here are small, realistic copies of
their shapes, with fresh values each run). For every class a value planted
where the authors put a credential must go, and beside it a look-alike
that names a credential without holding one must stay byte for byte. The
hostile tests come first: what must never leak, and what must never swallow
the lines around it.
"""

from __future__ import annotations

import random
import string
import unittest

from bastion_agent.sanitizing.scanner import Sanitizer
from bastion_agent.testing.fresh_values import RNG, credential

# Letters that spell no credential's word by chance (no p, k, t, s, e, w: no "pw", "key", "token", "secret").
PLAIN_LETTERS = "abcdfghijlmnoruvxyz"
# Words of a passphrase list, none a function word of a sentence, none a credential's word.
PHRASE_WORDS = ("amber", "anchor", "bamboo", "barrel", "cabin", "candle", "canyon", "cobalt", "coral", "crater",
                "dragon", "ember", "falcon", "fennel", "glacier", "granite", "harbor", "hazel", "island", "jungle",
                "lantern", "lizard", "marble", "meadow", "nickel", "orchid", "otter", "pebble", "quartz", "raven",
                "saddle", "salmon", "timber", "tunnel", "velvet", "walnut", "willow", "zephyr")


def word(length: int = 9) -> str:
    return "".join(RNG.choice(PLAIN_LETTERS) for _ in range(length))


def phrase(count: int) -> str:
    return " ".join(RNG.sample(PHRASE_WORDS, count))


def mixed(length: int = 16) -> str:
    """Letters and digits, a digit inside (not a name: digits between letters)."""
    head = "".join(RNG.choice(string.ascii_letters) for _ in range(length // 2))
    tail = "".join(RNG.choice(string.ascii_letters + string.digits) for _ in range(length - length // 2 - 2))
    return head + RNG.choice("23456789") + RNG.choice(string.ascii_lowercase) + tail


class RealConfigTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sanitizer = Sanitizer()

    def redact(self, text: str) -> str:
        return self.sanitizer.redact(text)[0]

    def assert_gone(self, text: str, value: str) -> str:
        out = self.redact(text)
        for start in range(max(1, len(value) - 7)):
            self.assertNotIn(value[start:start + 8], out, f"{value!r} survives in {out!r}")
        return out

    def assert_kept(self, text: str) -> None:
        self.assertEqual(self.redact(text), text)

    # --- hostile: nothing leaks, nothing swallows its neighbours --------------------------------------

    def test_a_secret_in_a_dotenv_file_goes_and_the_lines_after_it_stay(self):
        value = mixed()
        region = f"{word(2)}-{word(4)}-{RNG.randrange(1, 9)}"
        text = (f"AWS_ACCESS_KEY_ID=\nAWS_SECRET_ACCESS_KEY={value}\nAWS_DEFAULT_REGION={region}\nAWS_BUCKET=\n"
                "AWS_USE_PATH_STYLE_ENDPOINT=false\n")
        out = self.assert_gone(text, value)
        for line in (f"AWS_DEFAULT_REGION={region}", "AWS_BUCKET=", "AWS_USE_PATH_STYLE_ENDPOINT=false"):
            self.assertIn(line + "\n", out)
        name = word(6).upper()
        value = word(10)
        out = self.assert_gone(f"{name}_USER={word(6)}\n{name}_PW={value}\n{name}_DB={word(6)}\n", value)
        self.assertIn(f"{name}_DB=", out)

    def test_a_long_file_of_the_new_shapes_keeps_none_of_its_values(self):
        values = [word(12) for _ in range(300)]
        lines = []
        for index, value in enumerate(values):
            lines.append(f"  - {{ username: u{index}, password: {value} }}")
            lines.append(f"{{{{- $password := .Values.auth.p{index} }}}}")
            lines.append(f"# DB_PASSWORD_{index}={value[::-1]}")
        out = self.redact("\n".join(lines) + "\n")
        for value in values:
            self.assertNotIn(value, out)
            self.assertNotIn(value[::-1], out)
        self.assertEqual(out.count("{{- $password := .Values.auth.p"), len(values))

    def test_a_key_written_a_piece_per_line_still_goes(self):
        key = "AKIA" + "".join(RNG.choice(string.ascii_uppercase + "234567") for _ in range(16))
        pieces = "\n".join(f"  {key[i:i + 5]}" for i in range(0, 20, 5))
        self.assert_gone(f"aws key:\n{pieces}\n", key)

    def test_a_value_planted_in_a_secrets_list_still_goes(self):
        value = mixed(24)
        self.assert_gone(f"secrets:\n  - {value}\n", value)

    # --- Compose ----------------------------------------------------------------------------------------

    def test_compose_secrets_names_and_files_stay(self):
        name = f"{word(5)}-password"
        self.assert_kept(f"services:\n  db:\n    image: mysql\n    secrets:\n      - {name}\n"
                         f"    environment:\n      - MYSQL_ROOT_PASSWORD_FILE=/run/secrets/{name}\n"
                         f"secrets:\n  {name}:\n    file: {word(3)}/password.txt\n")
        other = word(7)
        self.assert_kept(f"  backend:\n    secrets:\n      - {other}\nsecrets:\n  {other}:\n    environment: {word(6).upper()}\n")

    def test_a_password_read_by_a_command_substitution_stays_and_a_literal_goes(self):
        name = f"{word(4)}-password"
        self.assert_kept(f"      test: ['CMD-SHELL', 'mysqladmin ping -h 127.0.0.1 --password=\"$$(cat /run/secrets/{name})\" --silent']\n")
        self.assert_kept(f'MYSQL_ROOT_PASSWORD="$(openssl rand -base64 {RNG.randrange(16, 40)})"; export MYSQL_ROOT_PASSWORD\n')
        value = mixed()
        self.assert_gone(f"      test: ['CMD-SHELL', 'mysqladmin ping --password=\"{value}\" --silent']\n", value)

    # --- Helm values and templates ---------------------------------------------------------------------

    def test_a_block_about_a_password_stays_and_a_block_of_passwords_goes(self):
        settings = (f"passwordUpdateJob:\n  enabled: false\n  podSecurityContext:\n    enabled: true\n"
                    f"    fsGroup: {RNG.randrange(1000, 2000)}\n  seccompProfile:\n    type: \"RuntimeDefault\"\n")
        self.assert_kept(settings)
        values = [mixed(), mixed()]
        out = self.assert_gone(f"[{word(6)}]\nsecrets_for_{word(5)} =\n    {values[0]}\n    {values[1]}\n", values[0])
        self.assertNotIn(values[1][:8], out)
        root, user = mixed(), phrase(4)
        out = self.assert_gone(f"previousPasswords:\n  rootPassword: \"{root}\"\n  password: \"{user}\"\n", root)
        self.assertNotIn(user.split()[0] + " " + user.split()[1], out)

    def test_a_template_expression_stays_and_a_quoted_literal_in_a_template_goes(self):
        self.assert_kept("{{- $password := .Values.auth.password }}\n{{- $rootPassword := .Values.passwordUpdateJob."
                         "previousPasswords.rootPassword }}\n")
        value = mixed()
        self.assert_gone(f'{{{{- $password := "{value}" }}}}\n', value)

    def test_the_name_of_a_secrets_key_stays_and_a_password_named_like_one_goes(self):
        engine = word(6)
        self.assert_kept(f"  adminPasswordKey: {engine}-password\n  replicationPasswordKey: replication-password\n")
        head = word(7)
        self.assert_gone(f"password: {head}-password\n", head)

    def test_a_volume_of_a_secret_with_chart_conditions_stays(self):
        name = f"{word(6)}-root-password"
        self.assert_kept(f"        - name: {word(5)}\n          secret:\n            secretName: {{{{ include \"x.secretName\" . }}}}\n"
                         f"            {{{{- if .Values.auth.usePasswordFiles }}}}\n            items:\n"
                         f"              - key: {name}\n                path: {name}\n            {{{{- end }}}}\n")

    def test_a_label_key_stays_and_a_random_value_under_key_goes(self):
        self.assert_kept(f'    ## key: "kubernetes.io/{word(3)}-{word(2)}-name"\n')
        value = mixed(32)
        self.assert_gone(f'    key: "{value}"\n', value)

    def test_github_actions_secrets_inherit_stays(self):
        self.assert_kept(f"jobs:\n  {word(6)}:\n    uses: ./.github/workflows/{word(5)}.yml\n    secrets: inherit\n")

    def test_a_sql_select_list_stays_and_a_csv_of_names_goes(self):
        view = word(6)
        self.assert_kept(f"CREATE OR REPLACE VIEW v_{view}\nAS\nSELECT\n    emp_no,\n    first_name , last_name ,\n"
                         f"    birth_date , hire_date,\n    {view}_name(emp_no) as department\nfrom\n    {view};\n")
        self.assert_kept(f"SELECT\n    emp_no,\n    first_name , last_name ,\n    birth_date , gender,\n    hire_date,\n"
                         f"from\n    {view};\n")  # ``gender`` under ``last_name``: a column's name, not a person's
        first, last = word(6).capitalize(), word(8).capitalize()
        out = self.redact(f"id,first_name,last_name,city\n{RNG.randrange(1, 99)},{first},{last},{word(5)}\n")
        self.assertNotIn(first, out)
        self.assertNotIn(last, out)

    # --- passphrases ----------------------------------------------------------------------------------

    def test_a_passphrase_of_six_words_or_more_goes_in_each_syntax(self):
        for template in ('  password: "{v}"\n', '{{"host": "127.0.0.1", "password": "{v}", "database": "x"}}\n',
                         'conn = pymysql.connect(user="u", password="{v}", **db)\n', '  "passwd": "{v}",\n',
                         '<user username="role1" password="{v}" roles="role1"/>\n'):
            value = phrase(RNG.randrange(6, 10))
            with self.subTest(template=template):
                self.assert_gone(template.format(v=value), value)

    def test_a_validation_message_in_a_list_stays_and_a_list_of_passwords_goes(self):
        self.assert_kept("    throw new HttpException(422, {errors: {password: [\"can't be blank\"]}});\n")
        values = [mixed(), mixed()]
        self.assert_gone(f'  "passwords": ["{values[0]}", "{values[1]}"]\n', values[1])

    def test_a_message_of_as_many_words_stays(self):
        for message in ("must be at least eight characters long", "the password you entered does not match",
                        "enter the new password for your account here"):
            with self.subTest(message=message):
                self.assert_kept(f'  password: "{message}"\n')
                self.assert_kept(f'msg = "{message}"\n')

    # --- name/value pairs and connection strings -------------------------------------------------------

    def test_a_kubernetes_value_of_letters_alone_goes(self):
        value = word(13)
        self.assert_gone(f"        - name: MYSQL_ROOT_PASSWORD\n          value: {value}\n", value)

    def test_kubernetes_switches_and_file_paths_stay(self):
        self.assert_kept('            - name: ALLOW_EMPTY_PASSWORD\n              value: "yes"\n'
                         f"            - name: POSTGRES_PASSWORD_FILE\n              value: /opt/{word(6)}/secrets/password\n")

    def test_a_connection_strings_password_of_letters_alone_goes(self):
        value = word(13)
        self.assert_gone(f'"CatalogConnection": "Server={word(5)},1433;Initial Catalog={word(6)};User Id=sa;'
                         f'Password={value};TrustServerCertificate=true"\n', value)

    def test_a_passphrase_that_ends_a_quoted_connection_string_goes(self):
        value = phrase(RNG.randrange(4, 8))
        self.assert_gone(f'    "{word(6)}DB": "Host=localhost;Database={word(6)};Username=postgres;Password={value}"\n', value)

    def test_code_that_sets_a_password_from_a_variable_stays(self):
        self.assert_kept(f"a = {RNG.randrange(9)}; password = userinput;\n")

    def test_a_yaml_flow_mapping_value_of_letters_alone_goes_and_a_javascript_object_stays(self):
        value = word(12)
        self.assert_gone(f"        - {{ username: {word(5)}, password: {value} }}\n", value)
        self.assert_kept(f"const {word(4)} = {{ user: u, password: pass }};\n")

    def test_a_quoted_token_after_the_word_password_goes_and_a_prompt_stays(self):
        value = word(13)
        self.assert_gone(f'# a user called "{word(6)}" with password "{value}"\n', value)
        value = mixed(20)
        self.assert_gone(f"echo {word(7)}-server/root_password password '{value}' | debconf-set-selections\n", value)
        value = phrase(RNG.randrange(4, 7))
        self.assert_gone(f"echo {word(7)}-server/root_password password '{value}' | debconf-set-selections\n", value)
        self.assert_kept('the password "is not set here" yet\n')
        self.assert_kept('read -p "Enter password " pw\n')
        self.assert_kept('set password "${PW}"\n')

    def test_a_commented_out_setting_goes_and_a_commented_note_stays(self):
        value = word(13)
        self.assert_gone(f"# DB_PASSWORD={value}\n", value)
        value = word(12)
        self.assert_gone(f"# truststore_password: {value}\n", value)
        self.assert_kept("# DB_PASSWORD: change this\n# Password: see the vault\n// PASSWORD: required\n")

    def test_a_container_environment_flag_of_letters_alone_goes_and_its_references_stay(self):
        value = word(13)
        self.assert_gone(f"docker run -e POSTGRES_PASSWORD={value} -d postgres\n", value)
        value = word(12)
        self.assert_gone(f"echo >&2 '  Did you forget to add -e WSREP_SST_PASSWORD={value} ?'\n", value)
        self.assert_kept("docker run -e POSTGRES_PASSWORD=$PW --env DB_PASSWORD_FILE=/run/secrets/db -d postgres\n")

    def test_a_chart_functions_arguments_stay(self):
        self.assert_kept(f'  admin-password: {{{{ include "common.secrets.passwords.manage" (dict "secret" $name "key" '
                         f'"admin-password" "length" {RNG.randrange(8, 20)} "providedValues" (list "auth.adminPassword")) }}}}\n')

    # --- code that names a credential ----------------------------------------------------------------

    def test_references_in_code_stay(self):
        self.assert_kept(f'        user="{word(6)}", password=pass_{word(4)}, host=host, port=port, ssl=None\n')
        self.assert_kept('                b"mysql_cleartext_password": TestAuthentication.DefectiveHandler\n')
        self.assert_kept("  password_wo = !local.is_replica && var.manage_master_user_password ? null : var.password_wo\n")
        self.assert_kept("            'password' => static::$password ??= Hash::make('password'),\n")
        self.assert_kept("        :param passwd: **DEPRECATED** Alias for password.\n")
        self.assert_kept(f"PASSWORD_NO_MATCH = {RNG.randrange(1000, 2000)}\nPASSWORD_NOT_ALLOWED = {RNG.randrange(1000, 2000)}\n")

    def test_literals_beside_those_references_go(self):
        value = mixed()
        self.assert_gone(f'        user="{word(6)}", password={value}, host=host\n', value)
        value = mixed()
        self.assert_gone(f"            'password' => '{value}',\n", value)
        value = "".join(random.SystemRandom().choice(string.digits) for _ in range(6))
        self.assert_gone(f"DB_PASSWORD={value}\n", value)


    # --- the leftovers of the real config bench -----------------------------------------------------

    def test_a_helm_set_password_of_letters_alone_goes(self):
        """``--set a.b.password=X`` on a helm command line is a chart value, data as in the values file."""
        value = word(13)
        self.assert_gone(f"helm install rel bitnami/wordpress --set externalDatabase.password={value} --set x=1\n", value)
        value = word(14)
        self.assert_gone(f"and set a value for the external database password (--set externalDatabase.password={value})\n",
                         value)
        value, user = word(12), word(7)
        out = self.assert_gone(f"helm upgrade app ./chart --set-string auth.password={value},auth.username={user}\n", value)
        self.assertIn(f",auth.username={user}", out)  # the next pair of the list is no part of the value
        value = word(15)
        out = self.assert_gone(f'You can attach it by specifying "--set auth.rootPassword={value}" when installing\n', value)
        self.assertIn('" when installing', out)

    def test_helm_set_switches_references_and_settings_stay(self):
        self.assert_kept(f"helm upgrade app ./chart --set image.tag={word(6)} --set auth.enabled=true "
                         f"--set auth.password=$DB_PASSWORD --set automountServiceAccountToken=false\n")
        self.assert_kept(f"helm install {word(5)} ./chart --set auth.password=changeme --set replicaCount=3\n")

    def test_a_shell_default_read_from_a_file_or_a_variable_stays(self):
        """``"${PW:-$(< "$F")}"``: the quotes inside the command substitution are the command's."""
        name = word(8).upper()
        self.assert_kept(f'PGPASSWORD="${{PGPASSWORD:-$(< "${name}_FILE")}}" pg_dumpall --clean '
                         f'--file="${{DIR}}/dump-$(date \'+%Y-%m-%d\').pgdump"\n')
        self.assert_kept(f'export TOKEN="${{TOKEN:=${name}}}"\nDB_PASSWORD="$(cat /run/secrets/{name.lower()})"\n')
        value = mixed()
        self.assert_gone(f'PGPASSWORD="{value}" pg_dumpall --clean\n', value)

    def test_a_shell_defaults_literal_goes(self):
        """``${PW:-X}``: the literal a shell uses when the variable is unset is the password then."""
        for template in ('PGPASSWORD="${{PGPASSWORD:-{v}}}" psql\n', "PGPASSWORD=${{PGPASSWORD:-{v}}}\n",
                         'DB_PASSWORD="${{DB_PASSWORD:-"{v}"}}"\n', ': "${{API_TOKEN:={v}}}"\n'):
            value = mixed()
            self.assert_gone(template.format(v=value), value)
        value = word(13)
        self.assert_gone(f"psql -h db ${{PASSWORD:-{value}}}\n", value)

    def test_an_openpgp_fingerprint_beside_gpg_stays_and_the_same_digits_under_a_secret_go(self):
        fingerprint = "".join(RNG.choice("0123456789ABCDEF") for _ in range(40))
        grouped = " ".join(fingerprint[i:i + 4] for i in range(0, 40, 4))
        self.assert_kept(f"\tkey='{fingerprint}'; \\\n\tgpg --batch --keyserver keyserver.ubuntu.com --recv-keys \"$key\"\n")
        self.assert_kept(f"\tkey='{grouped}'; \\\n\tgpg --batch --recv-keys \"$key\"\n")
        self.assert_kept(f"ENV GPG_KEY {fingerprint}\nENV GPG_KEYS={fingerprint}\nRUN gpg --recv-keys \"$GPG_KEYS\"\n")
        secret = fingerprint.lower()
        self.assert_gone(f'secret_key = "{secret}"  # checked with gpg --verify\n', secret)
        key_id = "".join(RNG.choice("ABCDEF") for _ in range(16))  # shares no 8 characters with the secret
        self.assert_gone(f"api_key={secret}\ngpg --recv-keys {key_id}\n", secret)
        self.assert_gone(f'key = "{secret}"\n', secret)  # no GPG named near: 40 hex digits under a key go

    def test_digit_groups_inside_a_fingerprint_are_no_phone_and_alone_they_are(self):
        digits = [f"0{RNG.randrange(100, 1000)}", str(RNG.randrange(1000, 10000)), str(RNG.randrange(1000, 10000))]
        hexes = [RNG.choice("ABCDEF") + "".join(RNG.choice("0123456789ABCDEF") for _ in range(3)) for _ in range(7)]
        grouped = " ".join(hexes[:3] + digits + hexes[3:])
        self.assert_kept(f"\tkey='{grouped}'; \\\n\tgpg --batch --recv-keys \"$key\"\n")
        out = self.redact(f"Tel {' '.join(digits)} please\n")
        self.assertNotIn(" ".join(digits), out)


    # --- shapes of the second folder of other people's repositories --------------------------------

    def test_a_schema_block_about_a_password_stays_and_a_block_of_passwords_goes(self):
        prose = f"{word(8)} defines a key of a Secret containing the password for\n"
        crd = ("      password:\n        description: |-\n          " + prose + "          " + word(9) + ".\n"
               "        properties:\n          key:\n            description: The key of the secret to select.\n"
               "            type: string\n        required:\n        - key\n        type: object\n"
               "        x-kubernetes-map-type: atomic\n")
        self.assert_kept(crd)
        self.assert_kept(f"    {word(6).capitalize()}Token:\n      type: object\n      properties:\n"
                         f"        access:\n          $ref: '#/components/schemas/{word(5)}'\n")
        self.assert_kept(f"  bearerTokenSecret:\n    description: |-\n      {word(7)} defines a key of a Secret\n"
                         f"      used by the {word(6)} for authentication.\n\n      Deprecated: use it.\n")
        value = mixed()
        self.assert_gone(f"db_passwords:\n  {word(5)}: {value}\n  {word(6)}: {mixed()}\n", value)
        listed = mixed()
        self.assert_gone(f"secrets:\n  {word(4)}:\n    - {listed}\n", listed)

    def test_fields_nested_in_a_secrets_block_keep_their_own_names(self):
        user, value = word(6), word(11)
        text = (f"secrets:\n  {word(5)}-creds:\n    annotations:\n      my-annotation: Test secret for {word(6)}\n"
                f"    stringData:\n      user: {user}\n      password: {value}\n")
        out = self.assert_gone(text, value)
        self.assertIn(f"user: {user}\n", out)
        self.assertIn("my-annotation: Test secret for", out)

    def test_a_chart_template_inside_a_secrets_data_stays(self):
        text = ("apiVersion: v1\nkind: Secret\nmetadata:\n  name: x\nstringData:\n  my.cnf: |\n      [client]\n"
                "      host={{ .Values.mysql.host }}\n      {{- if .Values.mysql.pass }}\n"
                f"      password={{{{ .Values.{word(5)}.pass }}}}\n      {{{{- end }}}}\n")
        self.assert_kept(text)

    def test_a_bare_value_ends_at_a_trailing_comment(self):
        for key in ("SRCDS_TOKEN", "PAPERLESS_SECRET_KEY", "OIDC_RP_CLIENT_SECRET"):
            value = word(14)
            out = self.assert_gone(f"    environment:\n      - {key}={value}        # {word(4)} from https://x.io/y\n",
                                   value)
            self.assertIn(" from https://x.io/y\n", out)
            value = word(13)
            self.assert_gone(f"      {key}: {value} # adjust this {word(5)} if you plan to\n", value)
        self.assert_kept("      - SECRET_DISABLE_USERS=false        # Disable user registration\n")
        self.assert_kept(f"      - SECRET_{word(5).upper()}=true # {word(6)} it\n")

    def test_a_setting_commented_out_of_a_list_or_an_indented_block_goes(self):
        for template in ("      #- OIDC_RP_CLIENT_SECRET={v}\n", "  # snmpAuthenticationPassword: {v}\n",
                         "#     #password: {v}\n", "#     token: {v}\n", "# - DNS_ADMIN_PASSWORD={v} #DNS console\n",
                         "#      crowdsecApiKey: {v} # <--- replace this later\n"):
            value = word(13)
            self.assert_gone(template.format(v=value), value)
        self.assert_kept(f"# token: the {word(5)} of the session\n")
        self.assert_kept(f"# password: {word(6)} {word(5)} {word(4)}\n")

    def test_a_shell_parameters_error_message_stays_and_its_default_goes(self):
        name = word(5).upper()
        self.assert_kept(f': "${{{name}_PASS:?Missing {name}_PASS}}"\n: "${{{name}_TOKEN?unset}}"\n')
        value = word(12)
        self.assert_gone(f'POSTGRES_PASSWORD: ${{PG_PASS:-{value}}}\n', value)

    def test_a_libpq_keyword_connection_strings_password_of_letters_alone_goes(self):
        value = word(13)
        text = f"dataSourceName = host=db port=5432 user={word(6)} password={value} dbname={word(6)} sslmode=disable\n"
        out = self.assert_gone(text, value)
        self.assertIn("sslmode=disable", out)
        self.assert_kept(f"{word(6)} password={word(6)} ok\n")  # prose: no host, port, user or dbname before it

    def test_a_compose_list_items_quoted_password_of_letters_alone_goes(self):
        for quote in "'\"":
            value = word(13)
            self.assert_gone(f"    environment:\n      - {quote}MYSQL_ROOT_PASSWORD={value}{quote}\n", value)
        self.assert_kept("    environment:\n      - 'MYSQL_ROOT_PASSWORD=${ROOT_PW}'\n")

    def test_type_annotations_and_type_tests_stay(self):
        self.assert_kept('    password: bytes = b""\n    needs_password: bool = False\n')
        self.assert_kept("  token?: string;\n  password: Optional[str] = None\n")
        self.assert_kept("    if (typeof this.password === 'function') {\n")
        value = mixed()
        self.assert_gone(f'    password: str = "{value}"\n', value)
        value = mixed()
        self.assert_gone(f"    if (this.password === '{value}') {{\n", value)

    def test_names_of_mechanisms_and_ctypes_signatures_stay(self):
        self.assert_kept("PQchangePassword.restype = PGresult_ptr\nPQchangePassword.argtypes = [PGconn_ptr]\n")
        self.assert_kept("SET password_encryption = 'scram-sha-256';\n")
        self.assert_kept('PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]\n')
        value = mixed()
        self.assert_gone(f"password_encryption_key = '{value}'\n", value)

    def test_a_network_range_stays_and_a_hosts_address_goes(self):
        first = RNG.choice((104, 141, 162, 188))  # globally routable whatever follows
        prefix = RNG.randrange(13, 17)
        second = RNG.randrange(16, 250) & ~((1 << (16 - prefix)) - 1)  # host bits zero: a network
        network = f"{first}.{second}.0.0/{prefix}"
        self.assert_kept(f"      - {network}\n#set_real_ip_from {network};\n")
        host = f"{first}.{RNG.randrange(16, 250)}.{RNG.randrange(1, 250)}.{RNG.randrange(1, 250)}"
        out = self.redact(f"      - {host}/24\nserver {host}\n")
        self.assertNotIn(host, out)

    def test_settings_aligned_beside_their_comments_are_no_table(self):
        value, name, user = mixed(), word(7), word(5)
        text = (f"MYSQL_ROOT_PASSWORD = '{value}'                 # Database password\n"
                f"MYSQL_DATABASE = '{name}'                         # Database name\n"
                f"MYSQL_USER = '{user}'                                 # Database username\n")
        out = self.assert_gone(text, value)
        self.assertIn(f"MYSQL_DATABASE = '{name}'                         # Database name\n", out)
        self.assertIn(f"MYSQL_USER = '{user}'                                 # Database username\n", out)
        cell = mixed(10)
        self.assert_gone(f"name      password     role\n{word(6)}    {cell}    admin\n", cell)

    def test_a_name_closing_its_call_and_nginx_upstreams_stay(self):
        name = word(6).upper()
        self.assert_kept(f"repo = Github(login_or_token={name}_TOKEN).get_repo({name}_REPO)\n")
        self.assert_kept(f"    fastcgi_pass {word(5)}:9000;\n    proxy_pass http://{word(5)}:8080;\n")
        self.assert_kept(f"    uwsgi_pass unix:/run/{word(5)}.sock;\n")
        value = mixed()
        self.assert_gone(f"proxy_password = {value}\n", value)
        value = mixed()
        self.assert_gone(f"connect(host, password={value})\n", value)

    def test_hostile_lookups_and_labels_end_and_keep_the_secret_beside_them_out(self):
        # a call of thousands of name-shaped arguments, a label closing in a run of quotes and options
        names = ", ".join(f"'{word(3)}_{word(3)}'" for _ in range(5000))
        value = mixed()
        text = (f"$token = lookup({names});\n" + 'x = "password:" ' + "-a " * 20000 + "\n"
                + '"' * 50000 + "\n" + f"DB_PASSWORD={value}\n")
        out = self.assert_gone(text, value)
        self.assertIn(f"$token = lookup({names});\n", out)

    def test_names_around_a_credential_word_that_hold_no_value_stay(self):
        # a Secret's namespace, an annotation's key, a lexer's position, a cipher suite's name
        space = f"{word(5)}-{word(7)}"
        self.assert_kept(f'#        secretNamespace: "{space}"\n')
        self.assert_kept(f'\t\t\tcmapi.CertificateRequestPrivateKeyAnnotationKey: "{word(6)}",\n')
        self.assert_kept(f"    currTokenBeg = {word(5)}Ofs++ - 1;\n    tokenStart = {word(6)}Pos;\n")
        suite = f"TLS_PSK_WITH_{word(4).upper()}_128_GCM_SHA256"
        self.assert_kept(f'    "{suite}": "PSK-{word(4).upper()}128-GCM-SHA256",\n')
        # the same words before a credential word leave it one, and a value under it goes
        for key in ("secret", "namespace_password", "sort_token", "private_key", "PrimaryKey"):
            value = mixed()
            self.assert_gone(f'{key}: "{value}"\n', value)
        value = mixed()
        self.assert_gone(f'"TLS_PSK": "{value}"\n', value)

    def test_a_generated_function_name_called_stays_and_a_random_run_goes(self):
        name = f"Convert_v1_{word(6).capitalize()}Solver{word(5).capitalize()}Meta_To_{word(4)}_{word(7).capitalize()}"
        self.assert_kept(f"\tif err := {name}(&in.Solver, &out.Solver, s); err != nil {{\n")
        value = f"{mixed(20)}+{mixed(20)}/{mixed(6)}"  # a random run keeps going, before a bracket too
        self.assert_gone(f'\tdigest = "{value}"\n', value)
        value = f"{mixed(20)}+{mixed(20)}/{mixed(6)}"
        self.assert_gone(f'\tdigest = "{value}(a)"\n', value)

    def test_php_lookups_casts_and_interpolations_stay_and_literals_go(self):
        name = word(6).upper()
        self.assert_kept(f"        $existingPassword = (string) env('{name}_PASSWORD');\n")
        self.assert_kept(f"        $accessToken = Cache::get('{word(7)}_access_token');\n")
        self.assert_kept(f"            token: self::stringInput($request, '{RNG.choice(string.ascii_lowercase)}'),\n")
        field = RNG.choice(("token", "password", "secret"))
        self.assert_kept(f"        $token = $response->{word(6)}Data('{field}');\n")
        self.assert_kept(f'            ->getJson("/rest/{word(6)}.view?apiKey={{$user->{word(5)}_api_key}}&f=json")\n')
        value = mixed()
        self.assert_gone(f"        $password = (string) '{value}';\n", value)
        value = mixed()
        self.assert_gone(f"        $user = create_user(['password' => Hash::make('{value}')]);\n", value)
        value = mixed()
        self.assert_gone(f"        $token = self::stringInput($request, '{value}');\n", value)
        value = mixed()
        self.assert_gone(f'            ->getJson("/rest/{word(6)}.view?apiKey={value}&f=json")\n', value)

    def test_letters_alone_right_after_a_connection_field_go_and_names_there_stay(self):
        value, user = word(15), word(6)
        self.assert_gone(f'new NpgsqlConnection("User ID={user}_tests;Password={value};Database={user}");\n', value)
        value = word(12)
        self.assert_gone(f"Host={word(5)};Password={value};Database={user}\n", value)
        self.assert_kept(f'var cs = $"Host={word(5)};Password={{password}};Database={user}";\n')
        owner = RNG.choice(("db", "admin", "user", "root", "app"))  # a name of a credential: code's
        self.assert_kept(f"Host={word(5)};Password={owner}Password;Database={user}\n")

    def test_a_makefile_recipe_under_secrets_stays_and_a_tabbed_value_goes(self):
        name = f"{word(6)}-{word(5)}"
        recipe = (f"secrets:\n\tdocker rm -f {name} || true\n\tdocker run --name {name} -i -w /tmp \\\n"
                  f"\t\t$(IMAGE) \\\n\t\t/bin/sh -c \"{word(7)} ca --out /tmp/{word(5)}.p12\" && \\\n"
                  f"\tkubectl create secret generic {name} --from-file={word(5)}.p12\n")
        self.assert_kept(recipe)
        value = mixed()
        self.assert_gone(f"password:\n\t{value}\n", value)
        value = mixed()
        self.assert_gone(f"secrets:\n\t{word(4)}: {value}\n", value)

    def test_a_label_that_closes_its_message_holds_no_value(self):
        self.assert_kept(f'    Write-Host "ACR ${word(8)} credentials:" -ForegroundColor Yellow\n')
        self.assert_kept(f'args = "--user {word(5)} --password:" + {word(4)}\n')
        value = mixed()
        self.assert_gone(f'cfg = "user={word(5)} password:"{value}""\n', value)
        value = mixed()
        self.assert_gone(f"  - 'password: {value}'\n", value)

    def test_a_member_set_from_its_own_parameter_stays_and_a_literal_there_goes(self):
        number = RNG.randrange(1, 9)
        self.assert_kept(f"        self._password{number} = password{number}\n        self.token{number} = token{number}\n")
        self.assert_kept(f"        this.secret{number} = secret{number};\n")
        value = mixed()
        self.assert_gone(f"        self._password{number} = {value}\n", value)
        value = f"{word(4)}{number}{word(5)}{RNG.randrange(10, 99)}"  # a parameter's name with more to it is data
        self.assert_gone(f"        self.token{number} = {value}\n", value)


if __name__ == "__main__":
    unittest.main()
