"""Is the right-hand side of a credential-named key a literal, or code that refers to one?

``password = getPassword();``, ``this.token = token;``, ``password:
credentials.password,``, ``token: string | null = null;``, ``ERROR_PASSWORD
= 0x0532,``, ``"Password": (str, True),``: code names a credential without
holding one, and blanking such a line costs a reader real code in every
search result. A person tells the two apart by the language's syntax, and
the syntaxes of Python, JavaScript/TypeScript, Java/Kotlin, C#, Go, PHP,
Ruby, shell and C/C++ agree on the parts that matter here:

- a **quoted literal** can be a secret: it is never judged here (the caller
  only asks about unquoted values), and a literal that is assigned stays
  redacted, so this module cuts false flags, never recall;
- a **bare value that ends a line with nothing after it** is a config value
  (``.env``, INI, YAML, ``.properties``) and can be a secret, unless it is
  plainly an expression (a call, an operator, ``await``/``new``, a command
  substitution, a null);
- a bare value **ended by code punctuation** (``,``, ``;`` or a bracket
  closing one opened before it) is an expression of a program: an
  identifier, a member access, a call, a type annotation, a number, an
  enum's value or a null is a reference, not a credential. A quoted literal
  inside it (``[]byte("s3cr3t")``) keeps it undecided here.

The same syntax shows where code holds a secret as data rather than as a
quoted literal: a byte array (``[]byte{0xaf, …}``), a random literal handed
to a decoding call (``splitHexString("9ac3…")``), the fallback after an
environment lookup (``os.getenv("PW") or "…"``); the patterns for them are
at the end of this module, and ``context`` reads them at a key's value.

Everything is a few linear scans of one value (at most ``context.MAX_VALUE``
characters): no backtracking regular expression.
"""

from __future__ import annotations

import re

from bastion_agent.sanitizing import code_lookups

# The version of what this module finds: bump it with any change that makes some text
# sanitize differently (detection_version.py; docs/sanitize.md, "The cache key").
DETECTION_VERSION = 15

NULLS = frozenset({"null", "nil", "none", "undefined", "nullptr", "null_mut()", "true", "false", "void 0",
                   "default", "string.empty", '""', "''", "[]", "{}", "()"})
# An identifier chain: ``token``, ``this.token``, ``$this->pw``, ``@pw``, ``self::PW``, ``cfg?.pw``, ``*pw``.
CHAIN = re.compile(r"[!&*@$]{0,2}[A-Za-z_$][\w$]*(?:(?:\?\.|\.|::|->)[A-Za-z_$][\w$]*)*")
HEX = re.compile(r"-?0[xX][0-9a-fA-F]{1,16}[uUlL]{0,3}")  # a number; 32 hex digits are a key
ARITHMETIC = re.compile(r"-?\d+(?:\s*(?:[-+*/|&^]|<<|>>)\s*-?\w+)+")
# ``95433402-e7fa-4a36-8d77-…``: a GUID whose first group is all digits reads as a subtraction; it is a value
GUID = re.compile(r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")
BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{16,512}={0,2}")  # sixteen characters or more: a key's length

# A PowerShell cmdlet call, ``ConvertTo-SecureString 'x' -AsPlainText``: its argument is the signature table's.
CMDLET = re.compile(r"(?:Get|Set|New|ConvertTo|ConvertFrom|Read|Invoke|Import|Export)-[A-Z]\w+(?:\s|$)")
OPERATOR_LEAD = ("&&", "||", "??", "not ", "await ", "new ", "typeof ", "yield ", "$(", "`", "(${", "<%=",
                 "sizeof(", "(char", "(const", "(void")
WEAK_LEAD = ("!", "+", "^", "|", "?", "-", "*")  # code only when punctuation ends the expression too
API_LISTING = " -> "  # ``Name.FIELD = 7 -> Type``: a .NET public-API listing, not an assignment
OPENERS, CLOSERS = "([{", ")]}"


# The characters ``head`` acts on: it jumps from one to the next, so a long value costs one regex walk.
HEAD_MARK = re.compile(r"[\\\"'`()\[\]{},;]")


def head(value: str) -> tuple[str, bool]:
    """The expression before the first ``,``/``;`` or unbalanced closing bracket outside quotes,
    and whether code punctuation ended it there."""
    depth, quote = 0, ""
    found = HEAD_MARK.search(value)
    while found is not None:
        index, ch = found.start(), found.group()
        if quote:
            if ch == "\\":
                index += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'`":
            quote = ch
        elif ch in OPENERS:
            depth += 1
        elif ch in CLOSERS:
            if depth == 0:
                return value[:index].strip(), _code_tail(value[index:])
            depth -= 1
        elif ch in ",;" and depth == 0:
            return value[:index].strip(), _code_tail(value[index:])
        found = HEAD_MARK.search(value, index + 1)
    return value.strip(), False


QUOTED = re.compile(r"\"[^\"\n]*\"|'[^'\n]*'")
COMMENT = re.compile(r"\s//")  # not ``#``: in INI and shell a ``#`` inside a value is the value's own


def _code_tail(tail: str) -> bool:
    """What follows the expression is only punctuation (``;``, ``,``, ``)})``), quoted keys or a ``//`` comment:
    the end of a statement, not more of a value (``Ev1;71 w&tG0`` goes on)."""
    if KEYWORD_ARGUMENT.match(tail):
        return True  # ``password=pass_sha256, host=host``: the next keyword argument of a call
    comment = COMMENT.search(tail)
    if comment:
        tail = tail[:comment.start()]
    return not any(ch.isalnum() for ch in QUOTED.sub("", tail))


# ``, host=host``: a comma, a space (mount options ``user=x,password=y`` have none), a name and "=".
KEYWORD_ARGUMENT = re.compile(r",[ \t]+[A-Za-z_]\w*[ \t]*=(?!=)")


# A name as people write one (``CHAIN``'s shape): each part letters (and _ or $), digits only at its end
# (``dbPassword2``, ``self->pw``).
NAME_LIKE = re.compile(r"[!&*@$]{0,2}[A-Za-z_$][A-Za-z_$]*\d*(?:(?:\?\.|\.|::|->)[A-Za-z_$][A-Za-z_$]*\d*)*")


# One word of a camelCase or PascalCase name: letters, then the digits that close it (``S3``, ``sha256``,
# ``Base64``); ``S1kq6eFgV`` has a digit inside a word and is no name.
NAME_PIECE = re.compile(r"(?:[A-Z]?[a-z]+|[A-Z]+)\d*")


def is_worded_name(expression: str) -> bool:
    """``awsS3Config``, ``sha256Digest``, ``this.base64Key``: each camelCase word letters then digits, one word
    of three lower-case letters or more: a programmer's name, not a generated value."""
    worded = False
    for part in re.split(r"\?\.|\.|::|->", expression.lstrip("!&*@$")):
        pieces = re.findall(r"[A-Z]*[^A-Z]*", part.replace("_", ""))
        if not all(NAME_PIECE.fullmatch(piece) for piece in pieces if piece):
            return False
        worded = worded or any(sum(ch.islower() for ch in piece) >= 3 for piece in pieces)
    return worded


# A path's segment or a name: lower case (``postgresql``, ``c++``), capitals (``DB``), or words each with a vowel
# (``SomeUser``, ``dbPassword``, ``Keychains``); ``KcYnUskt`` mixes cases as only drawn characters do.
NAME_SEGMENT = re.compile(r"[a-z0-9+]+|[A-Z0-9]+|[a-z]*(?:[A-Z][a-z]*[aeiouy][a-z]*)+\d*")


def is_base64_blob(value: str) -> bool:
    """``/oK3fj3NOUKI+LIAh+hyJWZ2/WJTiQ==``, ``2+HoaiukYLKaw5IxNQb69FY2``: base64 of random bytes may start
    with ``/`` or with a digit and ``+``, and is then neither a path nor a sum. Base64's alphabet alone,
    and ``=`` padding, a ``+`` between letters or digits (``c++/11`` is a path), or a segment between
    slashes that is no name (``NAME_SEGMENT``)."""
    if not BASE64_RUN.fullmatch(value):
        return False
    if value.endswith("=") or re.search(r"[A-Za-z0-9]\+[A-Za-z0-9]", value):
        return True
    return not all(NAME_SEGMENT.fullmatch(segment) for segment in value.split("/") if segment)


def is_code_reference(value: str) -> bool:
    """Is this unquoted value code that names or computes a credential rather than holding one?"""
    value = code_lookups.without_cast(value.strip())  # ``(string) env('PW')``: a cast changes a type, not a source
    if not value:
        return True
    listing = value.find(API_LISTING)
    if listing > 0:
        return True
    expression, punctuated = head(value)
    lowered = expression.lower()
    if not expression or lowered in NULLS or HEX.fullmatch(expression) or (
            ARITHMETIC.fullmatch(expression) and not GUID.fullmatch(expression) and not is_base64_blob(expression)):
        return True
    if lowered.startswith(OPERATOR_LEAD) or (punctuated and lowered.startswith(WEAK_LEAD)) or CMDLET.match(value):
        return True
    if COMPARED_CALL.search(expression):
        return True  # ``0!=b.indexOf("gme-")?"InvalidClientId":null``: a comparison of a call's result
    if CONNECTIVE.match(expression):
        return True  # ``token or {}``, ``refresh_token or self.token.get(...)``
    if CLOSING_ARGUMENT.match(value):
        return True  # ``Github(login_or_token=GITHUB_TOKEN).get_repo(...)``: a name closing its call
    quoted = any(ch in expression for ch in "\"'`")
    if _call_or_type(expression) and (not quoted or code_lookups.names_only(expression)):
        return True
    if not punctuated:
        return False
    if quoted:
        return False
    if CHAIN.fullmatch(expression) and not NAME_LIKE.fullmatch(expression) and not is_worded_name(expression):
        return False  # ``S1kq6eFgV;``: digits between letters, a generated value ended by a ';', not a name
    if CHAIN.fullmatch(expression) or _typed(expression) or expression[:1] in OPENERS:
        return True
    return expression.isdigit() and value[len(expression):].lstrip().startswith(",") and len(expression) > 8


def _call_or_type(expression: str) -> bool:
    """``getPassword()``, ``os.Getenv("X")``-shaped (any arguments), ``[]byte(x)``, ``struct{}{}``,
    ``Foo<T>``, ``protocol.Token{16, …`` (a composite cut short), ``(password, hash) =>`` (parameters)."""
    if expression.startswith("[]"):
        return True
    if expression.startswith("(") and PARAMETERS.match(expression):
        return True
    bracket = next((i for i, ch in enumerate(expression) if ch in "([{<"), -1)
    if bracket <= 0:
        return False
    name = expression[:bracket]
    if not CHAIN.fullmatch(name) or name.endswith("$"):
        return False  # ``pre${X}post`` is a value holding a template, not a call
    if expression[bracket] == "<":
        return name[:1].isupper() or name.lstrip("&*")[:1].isupper()
    return True


# A comparison with a call on one side (``0!=b.indexOf(x)``, ``s.find(x) == -1``): an expression.
COMPARED_CALL = re.compile(r"[!=]==?[ \t]*[\w.$]+\(|\w\([^()\n]*\)[ \t]*[!=]==?")
PARAMETERS = re.compile(r"\([A-Za-z_$][\w$]*[ \t]*(?:[,:)]|$)")
# ``token or {}``, ``!local.is_replica && ...``, PHP's ``static::$password ??= Hash::make(...)``.
CONNECTIVE = re.compile(r"!?[A-Za-z_$][\w$]*(?:(?:\?\.|\.|::|->)[A-Za-z_$][\w$]*)*[ \t]+"
                        r"(?:or|and|if|\|\||&&|\?\?=?|\?)[ \t]")


def _typed(expression: str) -> bool:
    """``string | null = null``, ``String``, ``Map<String, String>``, ``str | None``: a type annotation."""
    parts = re.split(r"\s*[|=]\s*", expression)
    return all(CHAIN.fullmatch(part) or part.lower() in NULLS for part in parts if part)


NAME_CONSTANT = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|[A-Z]{10,64}")
# ``allauth.account.forms.SetPasswordForm``: a module or class path (three dotted identifiers or more).
MODULE_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*){2,}")
# ``passwordMock.newPassword``: a camelCase identifier, a dot, another (an object's property, bound by a template).
PROPERTY_PATH = re.compile(r"[a-z][a-z]*(?:[A-Z][a-z]+)*(?:\.[a-z][a-z]*(?:[A-Z][a-z]+)*)+")
NAMED_CREDENTIALS = frozenset({"password", "passwd", "pwd", "secret", "token", "passphrase", "credential", "credentials"})
VERSION = re.compile(r"[~^=v]?\d+(?:\.\d+){1,3}(?:[\-+.][\w.]+)?")
ARN = re.compile(r"arn:aws[\w\-]*:[\w\-]+:[\w\-]*:\d*:\S+")


def is_name_constant(value: str, key: str = "") -> bool:
    """A quoted value that names something rather than holding a secret: an UPPER_SNAKE constant
    with at most two digits (``"PKCS8_PRIVATEKEY"``, ``"PRIVATEBLOB"``), the key's own name
    (``ResetPassword: 'ResetPassword'``), a module path (``'allauth.account.forms.SetPasswordForm'``),
    a version (``"^1.4.6"``) or an AWS resource name."""
    if NAME_CONSTANT.fullmatch(value) and sum(ch.isdigit() for ch in value) <= 2 and (
            "_" in value or is_spelled_in_capitals(value) and not SEED_KEY.search(key)):
        return True  # ``ADMIN_2024`` has too many digits for a constant's name: it may be a password
    if VERSION.fullmatch(value) or ARN.fullmatch(value):
        return True
    if MODULE_PATH.fullmatch(value) and not any(ch.isdigit() for ch in value):
        return True
    if PROPERTY_PATH.fullmatch(value) and any(word.lower() in NAMED_CREDENTIALS
                                              for word in KEY_WORD.findall(value.rsplit(".", 1)[-1])):
        return True  # ``ng-model="passwordMock.newPassword"``: a property path to the field that holds one
    folded = value.lower().replace("_", "").replace("-", "")
    folded_key = key.lower().replace("_", "").replace("-", "").rsplit(".", 1)[-1]
    if bool(key) and folded == folded_key:
        return True
    # the key's name behind a short namespace prefix (``SN_id_Gost_KeyMeshing = "id-Gost-KeyMeshing"``,
    # ``NID_x``): a constant table maps names to the names they stand for
    return (len(value) >= 10 and bool(re.search(r"[-_]|[a-z][A-Z]", value)) and folded_key.endswith(folded)
            and 0 < len(folded_key) - len(folded) <= 4)


# A one-time code's seed is base32, capitals alone one time in 28: under such a key they are the seed, never a name.
SEED_KEY = re.compile(r"(?i)otp|seed|mfa|2fa")
# The words a constant about key material is named with (``PRIVATEBLOB``, ``RSAPRIVATEKEY``).
KEY_MATERIAL_WORDS = ("KEY", "BLOB", "SECRET", "PASS", "TOKEN", "PRIVATE", "PUBLIC", "CERT", "HASH", "CRED", "AUTH")


def is_spelled_in_capitals(value: str) -> bool:
    """``PRIVATEBLOB``, ``RSAPRIVATEKEY``: capitals with no separator name a constant when they read as words
    (``is_wordlike``, few rare letters) and one of them names key material; ``HSMFNYPOVOFVTNNZ``, a base32
    seed, does neither."""
    rare = sum(ch in "JKQVWXZ" for ch in value)
    return is_wordlike(value) and rare <= 2 and any(word in value for word in KEY_MATERIAL_WORDS)


# ``"&password=" + mydomval("password")`` read as the quoted value ``+ mydomval(``: the quotes closed
# one string and opened the next, the value is the code between them.
CONCATENATION = re.compile(r"""\s*[`'"]?\s*[+.](?:\s|[\w.]+\()|.*(?:\w\(|\s[+.]\s*[`'"]?\s*)$""", re.DOTALL)
CAMEL_NAME = re.compile(r"(?:[A-Z][a-z]+|[A-Z]{2,}(?=[A-Z][a-z]|$)){3,}")


def is_code_between_strings(value: str) -> bool:
    """A quoted value that starts or ends with a concatenation: ``+ escape(x(``, ``` + newpw + ```."""
    return bool(CONCATENATION.match(value))


def is_camel_name(value: str) -> bool:
    """``KDFKeySecret``, ``CipherKeyBlob``: three capitalised words or more, letters only (a type or a
    property's name). ``myPassword`` or ``Summer2021`` are not."""
    return bool(CAMEL_NAME.fullmatch(value))


# --- literals that stand in for a credential -------------------------------------------------
#
# A literal that is assigned stays redacted when it could be a secret; these are the shapes that
# say it cannot: the words of an example or a test's fake, a prompt, a command, a file's path.

# Words that say a value stands in for a credential: a test's fake, an example, an instruction.
STAND_IN_WORDS = frozenset("""
    fake dummy mock sample example demo different another other some something else correct wrong bad
    invalid insert here received put placeholder the your to from of for this is not same origin hello world
    foo bar baz
    """.split())
# Words a stand-in repeats from the credential it stands for.
CREDENTIAL_WORDS = frozenset("""
    password passwd pass pwd pw secret token key api access refresh auth session client verifier credential
    credentials cred creds oauth bearer private signing encryption consumer code user username login admin new
    my test super hash
    """.split())
# Words of a sentence that describes what to put there: "the-password-to-your-cluster".
FUNCTION_WORDS = frozenset("the a an to your from for of with here into".split())
KEY_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
WORD_SEPARATORS = re.compile(r"[-_ .]+")
# A token or a verifier is generated by a machine: never a dictionary word, as a password may be.
GENERATED_KEY = re.compile(r"(?i)(?:token|verifier)$")  # the key names the token itself
CALL_CHAIN = re.compile(r"[A-Za-z_]\w*\([\w ,]*\)(?:\.[A-Za-z_]\w*\([\w ,]*\))*")
PROMPT = re.compile(r"[A-Za-z][A-Za-z ]*:[ \t]*")  # "Enter password: "
PRINTF_VERB = re.compile(r"%[-+# 0-9.]*[qvsdwx]")
FILE_PATH = re.compile(r"[\w.\-]+(?:/[\w.\-]+)*\.(?:pem|key|crt|cer|der|p12|pfx|jks|keystore|pub|json|ya?ml|conf|cfg|ini)")
COMMAND = re.compile(r"[a-z][\w\-]*[ \t]")  # ``awk '{print $2}' list``: a command's words
COMMAND_ARGUMENT = re.compile(r"[ \t](?:/|--?[A-Za-z])")  # an argument that is a path or an option
# A key or a token is drawn at random by a machine; a run in counting order (``123456789``,
# ``1234567890abcdef``, ``abcdef123456``) or a hex word (``0xdeadbeef``) is what a person types in
# its place. A password keeps them: people do choose ``12345678``.
RANDOM_KEY = re.compile(r"(?i)(?:token|key|verifier|nonce)\d{0,2}$")  # ``token1``, ``key2``: one of several
# A vendor's prefix before a token's random part (``xoxp-``, ``ghp_``, ``sk_live_``): ``xoxp-1234567890``
# counts as its body does.
VENDOR_PREFIX = re.compile(r"(?i)[a-z]{2,5}(?:[-_][a-z]{2,5})?[-_]")
COUNTING = ("0123456789", "1234567890", "abcdefghijklmnopqrstuvwxyz")
# ``deadbeefdeadbeef…``, ``abcabcabc``: one piece typed again and again, as no machine draws a key.
REPEATED = re.compile(r"(.{1,8})\1{2,}")
HEX_WORDS = frozenset("deadbeef cafebabe feedface deadc0de badc0ffee c0ffee 8badf00d".split())
# What a stored credential's name ends with (``traefik-cert``, ``jenkins-secrets``, ``db-creds``):
# lower-case words joined by hyphens, as Kubernetes and vaults name the objects that hold secrets.
# Not ``-password`` nor ``-token``: people do choose ``rally-password`` as the password itself.
OBJECT_NAME = re.compile(r"[a-z]+(?:-[a-z]+){1,3}")
OBJECT_KINDS = frozenset("""
    cert certs certificate certificates tls secret secrets key keys cred creds credentials
    """.split())
# Lower-case words joined by ``-``, ``_`` or ``.``, perhaps a small index last (``etcd-cluster-0``,
# ``session.app``): under a key or a token's name that shares one of its words, the name of a thing.
DERIVED_NAME = re.compile(r"[a-z]+(?:[-_.][a-z]+)*[-_.](?:[a-z]+|\d{1,3})")
# ``Token: (empty), ``: a label, its colon and a space, at the start of a message.
MESSAGE_LABEL = re.compile(r"[A-Za-z][A-Za-z ]{0,30}:[ \t]")
# ``Your S3 access key password``: a sentence telling the reader what goes there.
DESCRIPTION = re.compile(r"(?i)your(?:[ \t]+[\w\-]+){2,8}\.?")
# An LDAP extensible-match filter (RFC 4515): ``userPassword:2.5.13.18:=\xx``, ``cn:dn:=x``. The
# attribute and a matching rule's id or ``dn`` before ``:=``: a search assertion, a guess being tried.
LDAP_EXTENSIBLE = re.compile(r":(?:dn:(?:\d+(?:\.\d+)+:)?|\d+(?:\.\d+)+:|[A-Za-z]\w*Match:)=")
# ``eyJrefresh``: the first letters every JWT shares, then a word: a token's stand-in (a real one is
# base64 with two dots).
JWT_STUB = re.compile(r"eyJ[a-z]{1,16}")
# `` --timeout= --socket= --no-timeout``: a program's options listed (shell completion, usage text).
OPTION_LIST = re.compile(r"\s*(?:--?[A-Za-z][\w\-]*=?|--)(?:\s+(?:--?[A-Za-z][\w\-]*=?|--))+\s*")


def is_counting(value: str) -> bool:
    """Characters in counting order, in at most three runs of three or more (``1234567890abcdef``,
    ``abcdef123456``, ``123456789``), six at least; or a hex word (``0xdeadbeef``)."""
    lowered = value.lower()
    if lowered.startswith("0x"):
        lowered = lowered[2:]
    if lowered in HEX_WORDS:
        return True
    if len(lowered) < 6 or not lowered.isascii() or not lowered.isalnum():
        return False
    runs, run = [], lowered[0]
    for previous, current in zip(lowered, lowered[1:]):
        if any(previous + current in order for order in COUNTING):
            run += current
        else:
            runs.append(run)
            run = current
    runs.append(run)
    return len(runs) <= 3 and all(len(piece) >= 3 for piece in runs)


def _counting_shape(value: str) -> bool:
    """Counting characters (``1234567890``), also after a vendor's prefix (``xoxp-1234567890``); a hex
    word after a prefix (``qts-deadbeef``) is too short a body to tell a test's value from a real one."""
    if is_counting(value):
        return True
    body = VENDOR_PREFIX.sub("", value, 1)
    return body != value and body.lower() not in HEX_WORDS and is_counting(body)


# An OpenPGP fingerprint (40 hex digits, maybe in groups of four) or a long key id (16): public, published on
# keyservers so that anyone can check a signature. Named by a bare ``key`` or a GPG key's id, and read where the
# text says it is GPG's (``gpg --recv-keys``, a keyserver, apt's ``signed-by``), it names a key, it is none.
PGP_ID = re.compile(r"(?:0x)?(?:[0-9A-Fa-f]{40}|[0-9A-Fa-f]{16}|[0-9A-Fa-f]{4}(?: {1,2}[0-9A-Fa-f]{4}){9})")
PGP_KEY_WORDS = frozenset({"key", "keys", "gpg", "pgp", "gnupg", "id", "ids", "keyid", "fingerprint", "fpr",
                           "release", "repo", "apt", "signing"})
PGP_CONTEXT = re.compile(r"(?i)\bgpg\b|\bpgp\b|gnupg|--recv-keys?\b|keyserver|signed-by|apt-key|--keyring")
PGP_REACH = 400


def is_pgp_fingerprint(text: str, position: int, key: str, value: str) -> bool:
    """Is ``value`` (at ``position`` of ``text``, under ``key``) an OpenPGP fingerprint or key id: its shape,
    a key named only by GPG's words, GPG named within ``PGP_REACH`` characters? A secret's key (``secret_key``,
    ``api_key``, ``private_key``) holding 40 hex digits is a secret whatever the text says."""
    if not PGP_ID.fullmatch(value.strip()):
        return False
    words = {word.lower() for word in KEY_WORD.findall(key)}
    if not words or not words <= PGP_KEY_WORDS or not words & {"key", "keys", "keyid", "fingerprint", "fpr"}:
        return False
    if "signing" in words and not words & {"gpg", "pgp", "gnupg"}:
        return False  # ``signing_key``: an HMAC key unless it says it is GPG's
    return PGP_CONTEXT.search(text, max(0, position - PGP_REACH), position + PGP_REACH) is not None


CONSONANT_RUN = re.compile(r"[^aeiouy]+")


def is_wordlike(word: str) -> bool:
    """Could a person say it: a vowel in four letters at least, never four consonants in a row (``fitbit``,
    ``testtoken``). Letters drawn at random (``kqzvbrtmwnpx``) rarely are."""
    runs = CONSONANT_RUN.findall(word.lower())
    return max((len(run) for run in runs), default=0) <= 3 and 4 * sum(ch in "aeiouy" for ch in word.lower()) >= len(word)


# Words a test writes where a token's drawn part would be: ``sk-lf-invalid``, ``hvb.shorttoken``,
# ``duffel_test_abc123``, ``FlyV1 fm2_short``.
STUB_WORDS = ("invalid", "short", "truncated", "fake", "dummy", "example", "sample", "placeholder", "test",
              "abc123", "token", "key", "secret")
PREFIX_PART = re.compile(r"[A-Za-z]{1,6}\d?")  # ``sk``, ``hvb``, ``CFPAT``, ``FlyV1``, ``fm2``: no drawn part


def is_vendor_stub(value: str) -> bool:
    """A vendor's prefix with nothing drawn after it: the prefix alone (``CFPAT-``), then only words of a
    test (``sk-abc123invalid``, ``hvb.shorttoken``), or a count of at most four digits (``API-1234``,
    ``tfp_1``). A token's secret is the random part after its prefix; 1234 or "invalid" is none, and four
    digits are too few to be drawn. Every part before the last is a vendor's prefix, a few letters and
    at most one digit (``PREFIX_PART``): a value in groups of random characters (``7Kq2-x9Pz-invalid``)
    keeps its drawn groups and stays a secret."""
    parts = re.split(r"[-_. ]", value.strip())
    if len(parts) < 2 or len(value) > 32 or not all(part.isascii() and (part.isalnum() or not part)
                                                    for part in parts):
        return False
    *prefix, last = parts
    if not all(PREFIX_PART.fullmatch(part) for part in prefix):
        return False
    if last.isdigit():
        return len(last) <= 4 and last in "0123456789"
    rest = last.lower()
    for word in STUB_WORDS:
        rest = rest.replace(word, "")
    return not rest


def is_stand_in(value: str, key: str = "", *, backtick: bool = False) -> bool:
    """A quoted literal that stands in for a credential rather than being one:

    - words of an example or a fake, joined (``different-token``, ``fake_verifier``,
      ``something-else``): every word a stand-in's or the credential's own, one of them a
      stand-in's; or three words or more with a credential's word and a function word
      (``the-password-to-your-cluster``, ``insert-token-received-from-botfather``), a description;
    - one lower-case word under a token's key (``access_token: "fitbit"``, ``token: "text"``): a
      token is generated, a word is a test's label (a password may be a word and keeps it); past
      nine letters only a word a person could say (``is_wordlike``): ``kqzvbrtmwnpx`` was drawn;
    - a prompt or a message with a format verb (``Enter password: ``, ``password for %q failed``);
    - a relative path to a file of keys or settings (``certs/client.key``, ``admin-key.pem``);
    - the words of its own key again, in any order (``resetPasswordToken = 'password-reset-token'``,
      ``client_key = 'client key'``): the value names the setting;
    - the name of a stored credential (``traefik-cert``, ``jenkins-secrets``: lower-case words joined
      by hyphens, the last a kind of credential), as Kubernetes and vaults name the objects that
      hold secrets; a sentence addressed to the reader (``Your S3 access key password``);
    - ``backtick``: a shell command substitution (`` `awk '{print $2}' list` ``), a program's output;
    - under a key or token's name, characters in counting order, a hex word or one piece repeated
      (``1234567890abcdef``, ``0xdeadbeef``, ``deadbeefdeadbeef``): a machine draws keys at random, a
      person types these in their place;
    - under a key or token's name, a vendor's prefix with nothing drawn after it (``sk-lf-invalid``,
      ``API-1234``, ``CFPAT-``: ``is_vendor_stub``);
    - ``eyJ`` and a word (``eyJrefresh``): a JWT's first letters standing in for one; a list of
      command-line options (`` --timeout= --socket=``): a program's usage; a format verb alone
      (``Token: %#x``): the program fills it in.

    Otherwise digits, capitals inside a word or symbols are a credential's shape: such a value is never a
    stand-in here (``Fk9-tq2Zp``, ``s3cr3t!Pw``)."""
    value = value.strip()
    if not value or len(value) > 80:
        return False
    if backtick and COMMAND.match(value) and ("$" in value or "|" in value or COMMAND_ARGUMENT.search(value)):
        return True  # `` `etcdctl get /app_secret` ``: a command reading the secret, as ``$(…)`` is
    if backtick and CALL_CHAIN.fullmatch(value):
        return True  # `` `Base64(Header).Base64(Data)` ``: an expression in inline code, how a value is made
    if FILE_PATH.fullmatch(value):
        return True
    if " " in value and (PROMPT.fullmatch(value) or PRINTF_VERB.search(value)):
        return True
    if JWT_STUB.fullmatch(value) or OPTION_LIST.fullmatch(value) or PRINTF_VERB.fullmatch(value.rstrip("})]")):
        return True
    if OBJECT_NAME.fullmatch(value) and value.rsplit("-", 1)[-1] in OBJECT_KINDS:
        return True
    if DESCRIPTION.fullmatch(value) and any(word.lower() in CREDENTIAL_WORDS for word in value.split()[1:]):
        return True
    if RANDOM_KEY.search(key.strip("\"'`[] ")) and (
            _counting_shape(value) or REPEATED.fullmatch(value.lower()) or is_vendor_stub(value)):
        return True
    key_words = sorted(word.lower() for word in KEY_WORD.findall(key.rsplit(".", 1)[-1]))
    if key_words and value.isascii() and all(ch.isalpha() or ch in "-_ ." for ch in value):
        value_words = [word.lower() for word in KEY_WORD.findall(value)]
        if sorted(value_words) == key_words:
            return True  # ``resetPasswordToken = 'password-reset-token'``: the setting's name
        if value_words and set(value_words) < {word for word in key_words if len(word) > 1 and word.isalpha()}:
            return True  # ``authKey: auth``, ``oauth_token=token``: one of the setting's own words
    if key_words and RANDOM_KEY.search(key.strip("\"'`[] ")) and DERIVED_NAME.fullmatch(value):
        value_words = set(WORD_SEPARATORS.split(value))
        if key_words[-1:] and KEY_WORD.findall(key)[-1].lower() not in value_words and value_words & set(key_words):
            return True  # ``--initial-cluster-token=etcd-cluster-0``, ``sessionKey: "session.app"``: a name, not drawn
    if key_words and MESSAGE_LABEL.match(value) and value.split(":", 1)[0].strip().lower() in key_words:
        return True  # ``token = "Token: (empty), "``: a message that labels the value it prints
    words = [word for word in WORD_SEPARATORS.split(value) if word]
    if not words or not all(word.isalpha() and word.isascii() and (word.islower() or word.istitle())
                            for word in words):
        return False
    lowered = [word.lower() for word in words]
    if len(words) == 1 and spelled_stand_in(lowered[0]):
        return True  # ``password = "somefakekey"``: a fake's words written together
    if len(words) == 1:
        return (bool(GENERATED_KEY.search(key.strip("\"'`[]"))) and words[0].islower()
                and (len(value) <= 9 or len(value) <= 12 and is_wordlike(value)))
    if all(word in STAND_IN_WORDS or word in CREDENTIAL_WORDS for word in lowered) and any(
            word in STAND_IN_WORDS for word in lowered):
        return True
    return (len(words) >= 3 and any(word in CREDENTIAL_WORDS for word in lowered)
            and any(word in FUNCTION_WORDS for word in lowered))


# Words that say outright that a value is not a real one; a word spelled from a stand-in's words needs one.
FAKE_MARKS = frozenset("fake dummy mock sample example placeholder".split())
SPELLING_WORDS = STAND_IN_WORDS | CREDENTIAL_WORDS | FUNCTION_WORDS


def spelled_stand_in(word: str) -> bool:
    """A word that splits whole into a stand-in's, a credential's and function words, one of them a mark of a fake
    (``somefakekey``, ``dummypassword``, ``myexamplesecret``): the words of a test's fake written without
    separators. A drawn or chosen password leaves a piece no such word covers (``fakeqzvrtm``)."""
    if not word.isalpha() or len(word) > 40:
        return False
    # states[i]: the ways word[:i] splits into known words: (False,) without a mark yet, (True,) with one
    states: list[set[bool]] = [{False}] + [set() for _ in range(len(word))]
    for i in range(len(word)):
        if not states[i]:
            continue
        for j in range(i + 2, min(len(word), i + 12) + 1):
            piece = word[i:j]
            if piece in SPELLING_WORDS:
                states[j].update(mark or piece in FAKE_MARKS for mark in states[i])
    return True in states[len(word)]


# --- secrets written as code's data ---------------------------------------------------------

JSON_STRING = re.compile(r"\"([^\"\n]{1,1024})\"")
# A byte array written out (``[]byte{0xaf, 0xbf, …}``, ``new byte[]{(byte) 0x1f, …}``,
# ``StatelessResetToken{0x00, …}``): eight bytes or more, the key's value even in code.
BYTE_ARRAY = re.compile(r"(?:new[ \t]+\w+[ \t]*\[\][ \t]*|\[\][\w.]*|[\w.]{1,80})?[ \t]*[{\[(][ \t]*"
                        r"(?P<bytes>(?:(?:\(byte\)[ \t]*)?0[xX][0-9a-fA-F]{1,2}[ \t]*,[ \t]*){7,}"
                        r"(?:\(byte\)[ \t]*)?0[xX][0-9a-fA-F]{1,2})")
# A lookup, then ``or``/``||``/``??`` and a quoted literal: the fallback a program runs with when the lookup is
# empty (``os.getenv("DB_PASS") or "X"``, ``process.env.TOKEN ?? 'X'``, ``ENV["PW"] || "X"``).
DEFAULTED = re.compile(r"""[\w.$]{1,120}(?:\([^()\n]{0,120}\)|\[[^\[\]\n]{0,120}\])?(?:[ \t]*(?:\|\||\?\?)[ \t]*|[ \t]+or[ \t]+)"""
                       r"""(?P<q>["'])(?P<literal>[^"'\n]{1,1024})(?P=q)""")
# SQL's ``SET password = PASSWORD('x')``: the hashing function's argument is the password itself.
HASHED = re.compile(r"(?i)(?:old_)?password\([ \t]*(?P<q>['\"])(?P<literal>[^'\"\n]{1,200})(?P=q)[ \t]*\)")
# A literal handed to a decoding call (``splitHexString("9ac3…")``, ``bytes.fromhex('…')``,
# ``Base64.decode("…")``): the call only changes the secret's form.
DECODED = re.compile(r"[\w.]{1,60}\([ \t]*(?P<q>[\"'])(?P<literal>[A-Za-z0-9+/=_\- ]{16,512})(?P=q)[ \t]*\)")


def byte_array(text: str, position: int, line_end: int) -> tuple[int, int] | None:
    """The span of the bytes of a byte array written at ``position`` (six of them different at least);
    ``(position, position)`` for one of fewer different bytes (``{0x00, 0x00, …}``); None for no byte array."""
    found = BYTE_ARRAY.match(text, position, line_end)
    if found is None:
        return None
    numbers = re.findall(r"0[xX]([0-9a-fA-F]{1,2})", found.group("bytes"))
    return found.span("bytes") if len({n.lower().zfill(2) for n in numbers}) >= 6 else (position, position)


# An identifier that closes the call it is handed to, the call's result then used (``X).get_repo(``,
# ``X)[0]``): code; prose's ``(password=hunter2)`` ends its parenthesis with nothing after it.
CLOSING_ARGUMENT = re.compile(r"[A-Za-z_][\w.]*\)+[.\[]")
# ``password: bytes = b""``, ``password: Optional[str] = None``, ``password: string;``: Python's and
# TypeScript's annotation of a field's type (a built-in type's name, then a default or the statement's end).
ANNOTATION = re.compile(r"[ \t]*(?:Optional\[)?(?:str|bytes|bool|int|float|string|boolean|number|any|unknown)\b"
                        r"\]?(?:[ \t]*\|[ \t]*(?:None|null|undefined))?[ \t]*(?:=(?!=)|;|$)", re.M)
# ``typeof x.password ===``: JavaScript's type test, compared with a type's name.
TYPE_TEST = re.compile(r"\btypeof(?:[ \t(]+[\w.$]*)?\Z")


def names_no_value(text: str, kind: str, position: int, width: int, line_end: int, key_quoted: bool, before: str,
                   opening: str) -> bool:
    """The operator after a credential's name starts no value: a declared type, an LDAP assertion, a tuple,
    a type test, a tag that is not one."""
    if kind == ":" and not key_quoted and ANNOTATION.match(text, position + width, line_end):
        return True  # ``password: bytes = b""``, ``password: string;``: a declared type, not a value
    if kind == ":" and LDAP_EXTENSIBLE.match(text, position):
        return True  # ``userPassword:2.5.13.18:=\xx``: an LDAP filter's assertion, a guess being tried
    if kind == "," and not key_quoted:
        return True  # ``token, rest = ...``: a tuple, not a pair
    if kind == ":" and not key_quoted and code_lookups.closes_a_label(text, before, position + width, line_end):
        return True  # ``Write-Host "ACR $name credentials:" -ForegroundColor Yellow``: a message's label, closed
    if kind == "=" and TYPE_TEST.search(before):
        return True  # ``typeof this.password === 'function'``: a type's name, not the value
    return kind == ">" and opening != "<"
