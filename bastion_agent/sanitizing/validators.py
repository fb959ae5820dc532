"""Checks a candidate must pass before it is redacted: checksums and heuristics.

A pattern finds text *shaped* like a secret; these functions decide whether
it *is* one. Checksums (Luhn for card numbers, mod-97 for IBANs) turn a
shape into near-certainty; the heuristics (Shannon entropy, placeholders,
templated values, indirect references) keep ``password = "${DB_PASSWORD}"``
or ``api_key = "xxxxxxxx"`` from being redacted, in the manner of
detect-secrets' filters. Every function here is pure and cheap.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import math
import re
import string
from collections import Counter

from bastion_agent.sanitizing import code_lookups, code_values

# The version of what this module finds or how it replaces it: bump it with any
# change that makes some text sanitize differently, so that every installation
# sanitizes its texts again (detection_version.py; docs/sanitize.md, "The cache key").
DETECTION_VERSION = 18

# --- entropy --------------------------------------------------------------


def shannon_entropy(value: str) -> float:
    """Bits per character of ``value`` (0 for the empty string)."""
    if not value:
        return 0.0
    length = len(value)
    return -sum(n / length * math.log2(n / length) for n in Counter(value).values())


HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def is_hex(value: str) -> bool:
    return bool(value) and all(ch in HEX_DIGITS for ch in value)


def looks_random(value: str, *, base64_bits: float = 4.5, hex_bits: float = 3.0) -> bool:
    """High entropy for its alphabet, with both letters and digits.

    The limits are detect-secrets' defaults: 4.5 bits per character for a
    base64-like string and 3.0 for a hex string.
    """
    has_digit = any(ch.isdigit() for ch in value)
    has_alpha = any(ch.isalpha() for ch in value)
    if not (has_digit and has_alpha):
        return False
    limit = hex_bits if is_hex(value) else base64_bits
    return shannon_entropy(value) >= limit


def looks_random_for_a_weak_key(value: str) -> bool:
    """``looks_random`` with the entropy bound a value under a weak key (``resource_key``, ``token``) must reach.

    3.5 bits a character, lowered for short values toward what random strings
    of that length reach: 16 characters drawn at random from 62 read 3.5 bits
    or less three times in a hundred (a repeated character or two is enough),
    and 3.1 or less about once in ten thousand. Words and identifiers are
    told apart by the checks before this one, not by their entropy.
    """
    bits = min(3.5, math.log2(max(len(value), 2)) - 0.9)
    return looks_random(value, base64_bits=bits) or (is_padded_binary_base64(value)
                                                     and shannon_entropy(value) >= PADDED_BINARY_BITS)


# Bytes that decode to no text are the strong sign; the entropy only keeps out a fill (``AAAA…==``, zeros).
PADDED_BINARY_BITS = 3.0
PADDED_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)")


def is_padded_binary_base64(value: str) -> bool:
    """Base64 with its ``=`` padding (RFC 4648) of bytes that are no text (not printable UTF-8): random bytes
    encoded, as a salt, a key or a nonce is written (``zzWITpnDximUNKYLiUam/w==`` is 16 bytes). Such a value
    need not hold a digit: 22 characters drawn from 64 hold none once in forty draws, so the digit that
    ``looks_random`` asks of a drawn string is asked only of values without this shape."""
    if not PADDED_BASE64.fullmatch(value):
        return False
    try:
        decoded = base64.b64decode(value, validate=True)
    except ValueError:
        return False
    try:
        text = decoded.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return not all(ch.isprintable() or ch in "\t\r\n" for ch in text)


# --- placeholders, templates, references -----------------------------------

PLACEHOLDER_WORDS = frozenset(
    """
    changeme change_me change-me changethis password passwd secret token apikey api_key
    example sample placeholder dummy fake redacted masked hidden none null nil true false
    yes no on off undefined empty todo fixme tbd test testing string str int bool boolean
    required optional value your_password your_token your_api_key mypassword mysecret
    secretpassword notasecret not_a_secret insert_here replace_me replaceme foo bar foobar
    bearer basic xxx pass abc123
    """.split()
)

# Whole-value templates: ${VAR}, {{ var }}, <placeholder>, %(name)s, $VAR, %VAR%, [PASSWORD]
TEMPLATE_PARTS = re.compile(
    r"\$\{[^{}\s]*\}|\{\{[^{}]*\}\}|\{%[^{}]*%\}|<[^<>]*>|%\(\w+\)[sd]|%[sd]|\$\(?[A-Za-z_]\w*\)?|%[A-Za-z_]\w*%|"
    r"\[[A-Z_ ]+\]|\[[a-z][a-z_ ]{2,40}\]|\{[A-Za-z_][A-Za-z_.]*\d?\}|\{\d*\}|\$\d|"
    # PHP's interpolation inside a double-quoted string: ``"?apiKey={$user->api_key}"``, ``{$cfg['pw']}``
    r"\{\$[A-Za-z_]\w*(?:(?:\??->|::)[A-Za-z_]\w*|\[[^\[\]{}\n]{1,80}\])*\}"
)

# An indirect reference to where the secret really lives.
REFERENCE = re.compile(
    r"(?i)^(?:os\.environ|os\.getenv|getenv|env\[|env\.|process\.env|system\.getenv|environment\.|"
    r"settings\.|config\.|conf\.|cfg\.|self\.|this\.|params\.|args\.|options\.|opts\.|secrets\.|vault\.|"
    r"var\.|local\.|data\.|module\.|input\(|request\.|req\.)"
)


# A quote written as an HTML entity (``&#34;password&#34;`` in a page that shows code): still a quote.
ENTITY_QUOTES = re.compile(r"^(?:&#34;|&quot;|&#39;|&apos;)|(?:&#34;|&quot;|&#39;|&apos;)$")


def _mixed(value: str) -> bool:
    return any(ch.isupper() for ch in value) and any(ch.islower() for ch in value) and any(ch.isdigit() for ch in value)


MASKED_RUN = re.compile(r"x{4,}|X{4,}|\*{3,}|\.{3,}|#{4,}")


def is_placeholder(value: str) -> bool:
    """An obvious stand-in rather than a real value."""
    stripped = ENTITY_QUOTES.sub("", value.strip()).strip("\"'`")
    lowered = stripped.lower()
    if not stripped or lowered in PLACEHOLDER_WORDS:
        return True
    if re.fullmatch(r"[xX*#._\-0]+|(.)\1+", stripped):
        return True
    # A value partly masked still shows the rest of a real credential (``ya29.c.EmKeBq9XI09_1HK1XXXXXXXXT0rJSA``):
    # when twelve characters or more of a random shape (both cases and digits) are left unmasked, it is no
    # stand-in. ``xoxp-5723…-####`` keeps only ids in the clear: its secret part is the masked one.
    unmasked = MASKED_RUN.sub("", stripped)
    if unmasked == stripped or len(unmasked) < 12 or not _mixed(unmasked) or not looks_random(unmasked, base64_bits=3.5):
        if re.search(r"x{6,}|X{6,}|\*{6,}|#{6,}|\.{6,}|0{8,}", stripped):
            return True
        # Runs of x/X/* stand for elided characters: ghp_xxxxxxxx..., sha256~XXXX_PUT_YOUR_TOKEN_HERE
        elided = sum(len(run) for run in re.findall(r"x{4,}|X{4,}|\*{3,}|\.{3,}|#{4,}", stripped))
        if elided and elided * 2 >= len(stripped):
            return True
    counts = Counter(lowered)
    if len(stripped) >= 8 and counts.most_common(1)[0][1] / len(stripped) > 0.6:
        return True
    if re.search(r"(?i)your[_\- ]?(?:own[_\- ]?)?(?:api[_\- ]?)?(?:key|token|secret|password|pass)|put[_\- ]your|"
                 r"_here\b|here_?$|\benter[_\- ]your|replace[_\- ]?(?:me|with)|<[^>]*>", stripped):
        return True
    return False


# A shell command substitution that reads the secret from where it lives or makes a new one
# (``$(cat /run/secrets/db-password)``, ``$(< "$FILE")``, ``$(openssl rand -base64 24)``); Compose writes
# the "$" twice. One that prints a literal (``$(echo ...)``, ``$(printf ...)``) is not a reference.
COMMAND_SUBSTITUTION = r"\$\$?\((?![ \t]*(?:echo|printf)\b)[^()\n]{1,200}\)|\$\$\{[^}\n]*\}|\$\$[A-Za-z_]\w*"
WHOLE_REFERENCE = re.compile(
    r"(?:\s*(?:" + TEMPLATE_PARTS.pattern + r"|\$[A-Za-z_]\w*|%[A-Za-z_]\w*%|\$\{[^}\n]*\}|\{\{[^\n]*?\}\}|"
    + COMMAND_SUBSTITUTION + r"))+\s*"
)


# References whose syntax a file format declares, each the whole value: an Azure Resource Manager template's
# ``[parameters('adminPassword')]`` / ``[variables('pw')]``, Concourse's ``((db_password))``, a Ruby or
# CoffeeScript string that is one interpolation (``"#{ENV['PASSWORD']}"``), a Razor view's ``@Model.Password``.
FORMAT_REFERENCE = re.compile(
    r"\s*(?:\[(?:parameters|variables)\('[\w.\-]{1,100}'\)(?:\.[\w.]+)?\]|\(\([\w.\-/: ]{1,100}\)\)"
    r"|#\{[^{}\n]{1,200}\}|@(?:Model|ViewBag|ViewData)\.[\w.]{1,100})\s*")
# YAML tags that name where a value is: CloudFormation's ``!Ref DbPassword``, ``!GetAtt Secret.Password``,
# ``!ImportValue Name``, ``!FindInMap [Map, Key, Name]``; Home Assistant's ``!secret mqtt_password`` and
# ``!env_var API_KEY`` (without a default: a default after the name is a literal). ``!Sub`` is judged by
# the string it substitutes into.
TAGGED_REFERENCE = re.compile(
    r"!(?:Ref|GetAtt|ImportValue)[ \t]+[A-Za-z][\w:.\-]{0,100}|!FindInMap[ \t]+\[[\w\s,:.\-!]{1,200}\]"
    r"|!secret[ \t]+[\w.\-]{1,100}|!env_var[ \t]+[A-Za-z_]\w{0,100}|!Sub[ \t]+(?P<q>[\"']?)(?P<sub>[^\n]{1,500})(?P=q)")


def is_tagged_reference(text: str, start: int) -> bool:
    """Does a YAML tag that names where the value lives (``TAGGED_REFERENCE``) fill the rest of the line
    from ``start``? ``!Sub '{{resolve:secretsmanager:db}}'`` is one; ``!Sub 'Pa55${Suffix}'`` is not."""
    end = text.find("\n", start, start + 1024)
    rest = text[start:end if end != -1 else start + 1024].rstrip(" \t\r,;")
    found = TAGGED_REFERENCE.fullmatch(rest) if rest.startswith("!") else None
    return found is not None and (found.group("sub") is None or is_whole_reference(found.group("sub")))


# A YAML tag before a value (``!Sub "…"``, ``!Base64 …``, ``!vault |``, ``!env_var``): it says how to read
# the value. Only after a mapping's ``:``, and a name of letters (``password=!Xq7 mLp`` is a password).
YAML_TAG = re.compile(r"(?<=:)[ \t]*!(?!!)[A-Za-z][A-Za-z_]{1,40}[ \t]+(?=\S)")


def after_tag(text: str, position: int, line_end: int) -> int | None:
    """Where the value at ``position`` starts once a YAML tag is passed (the tag is no part of it), or None
    when the tag names where the value lives (``is_tagged_reference``): ``!Sub "Xq7#…${AWS::Region}"``
    loses its literal, ``!Ref DbPassword`` stays."""
    if text[position:position + 1] != "!":
        return position
    colon, floor = position - 1, max(-1, position - 64)  # the tag's match starts at the mapping's ``:``
    while colon > floor and text[colon] in " \t":
        colon -= 1  # bounded: a long run of blanks costs no more than 64 steps, whatever the text's length
    tag = YAML_TAG.match(text, colon + 1, line_end) if colon > floor and text[colon] == ":" else None
    if tag is None:
        return position
    return None if is_tagged_reference(text, position) else tag.end()


def is_whole_reference(value: str) -> bool:
    """The value is nothing but references: ``${DB_PASSWORD}``, ``{{ .Values.pw }}``, ``%(pw)s``, ``<secret>``.

    Punctuation between references counts as part of them (``{0}:{1}``,
    ``${USER}:${PASS}``); a letter or digit outside does not: ``pre${X}post`` goes.
    """
    if WHOLE_REFERENCE.fullmatch(value) or FORMAT_REFERENCE.fullmatch(value):
        return True
    rest = TEMPLATE_PARTS.sub("", value)
    return rest != value and not any(ch.isalnum() for ch in rest)


def is_templated(value: str) -> bool:
    """The value is mostly a template expression or a variable reference."""
    if not TEMPLATE_PARTS.search(value) and not value.startswith(("$", "%")):
        return False
    rest = TEMPLATE_PARTS.sub("", value)
    return sum(ch.isalnum() for ch in rest) < 3


def is_reference(value: str) -> bool:
    """``os.environ[...]``, ``settings.SECRET``, ``var.db_password``: where a secret is, not the secret."""
    return bool(REFERENCE.match(value))


def has_alnum(value: str) -> bool:
    return any(ch.isalnum() for ch in value)


# Words that name a credential and a count alike: ``pass: 1289`` (a test run's passes), ``tokens: 4096``.
COUNT_KEY = re.compile(r"(?i)(?<![\w\-])(?:pass|passes|passed|tokens|max_tokens|num_tokens|n_tokens|token_count|"
                       r"total_tokens|tokens_used)[\"']?[ \t]*[:=][ \t]*[\"']?\Z")


def is_count(text: str, start: int, end: int) -> bool:
    """Is ``text[start:end]`` a bare number of at most nine digits under a key that also names a count?"""
    value = text[start:end]
    return value.isdigit() and len(value) <= 9 and COUNT_KEY.search(text, max(0, start - 40), start) is not None


BASE64_TEXT = re.compile(r"[A-Za-z0-9+/]{8,512}={0,2}")


def encodes_placeholder(value: str) -> bool:
    """Base64 whose decoding is printable text that masks or asks for a value (``MGE6eHh4eHh4…`` is
    ``0a:xxxxxx…``, ``eW91cl90b2tlbl9oZXJl`` is ``your_token_here``): a Kubernetes Secret's or a
    token's example, encoded as the field wants it. A single placeholder word is not enough here:
    ``bXlwYXNzd29yZA==`` (``mypassword``) or ``changeme`` in a Secret is the default a chart deploys
    with, a password in use. A drawn key decodes to bytes, almost never to printable text."""
    if not BASE64_TEXT.fullmatch(value) or len(value) % 4 == 1:
        return False
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True).decode("ascii")
    except (ValueError, UnicodeDecodeError):
        return False
    return decoded.isprintable() and decoded.strip().lower() not in PLACEHOLDER_WORDS and is_placeholder(decoded)


def plausible_secret(value: str) -> bool:
    """Neither a placeholder, nor a template, nor a reference, and has a letter or digit."""
    return (has_alnum(value) and not is_placeholder(value) and not is_templated(value) and not is_reference(value)
            and not is_whole_reference(value))


# --- checksums ---------------------------------------------------------------


def luhn_ok(digits: str) -> bool:
    """The Luhn checksum of a string of digits (other characters ignored)."""
    numbers = [int(ch) for ch in digits if ch.isdigit()]
    if not numbers:
        return False
    total = 0
    for index, digit in enumerate(reversed(numbers)):
        if index % 2 == 1:
            digit *= 2
            if digit > 9:
                digit -= 9
        total += digit
    return total % 10 == 0


# Length of the IBAN of each country that issues them (ISO 13616 registry).
IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BI": 27,
    "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27, "DK": 18, "DO": 28,
    "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23,
    "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27,
    "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25,
    "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18,
    "NO": 15, "OM": 23, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33,
    "SA": 24, "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}


def iban_ok(value: str) -> bool:
    """Country length and the ISO 7064 mod-97 check of an IBAN (spaces ignored)."""
    iban = re.sub(r"[\s-]", "", value).upper()
    if IBAN_LENGTHS.get(iban[:2]) != len(iban) or not iban.isalnum():
        return False
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(ch, 36)) for ch in rearranged)) % 97 == 1


# --- network addresses -------------------------------------------------------


def public_ip(value: str) -> bool:
    """A globally routable address: not private, loopback, link-local, documentation or reserved."""
    try:
        address = ipaddress.ip_address(value.strip("[]"))
    except ValueError:
        return False
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


RESERVED_EMAIL_DOMAINS = ("example.com", "example.org", "example.net")
RESERVED_EMAIL_TLDS = (".example", ".test", ".invalid", ".localhost", ".local")
# Hosts of URLs whose user-info stays: only the names reserved for documentation (RFC 2606,
# RFC 6761). ``.local`` and ``localhost`` are real hosts (Active Directory, mDNS, a developer's database).
RESERVED_URL_HOSTS = ("example.com", "example.org", "example.net")
RESERVED_URL_TLDS = (".example", ".test", ".invalid")


# Mailboxes no person reads: a service sends from them and bounces come back to them (a sender's "do not
# reply", RFC 5321's postmaster, a mailer daemon). The whole local part must be one of these: a VERP
# return path (``bounces+jane=corp.io@lists.org``) or ``123+jane@users.noreply.github.com`` names a person.
NOBODY_MAILBOX = re.compile(r"(?i)no-?reply|do-?not-?reply|mailer-daemon|postmaster|bounces?")


def personal_email(value: str) -> bool:
    """An address outside the documentation domains of RFC 2606 / RFC 6761, and not a mailbox nobody reads."""
    local, _, domain = value.rpartition("@")
    if NOBODY_MAILBOX.fullmatch(local):
        return False
    domain = domain.lower().rstrip(".")
    if domain in RESERVED_EMAIL_DOMAINS or domain.endswith(tuple("." + d for d in RESERVED_EMAIL_DOMAINS)):
        return False
    if domain.endswith(RESERVED_EMAIL_TLDS) or "." not in domain:
        return False
    # icon@2x.png (retina assets) is a file name, not an address
    tld = domain.rsplit(".", 1)[-1]
    punycode = tld.startswith("xn--") and tld[4:].replace("-", "").isalnum()  # an IDN top-level domain (.рф)
    return (tld.isalpha() or punycode) and not re.fullmatch(r"\d+(?:\.\d+)?x", domain.split(".")[0])


def digit_count(value: str) -> int:
    return sum(ch.isdigit() for ch in value)


# --- checks a rule names in its ``validator`` field ----------------------------
#
# Each takes the match and the span of the secret and returns True (redact the
# span), False (not a finding) or a list of (start, end) spans to redact instead.

Spans = list[tuple[int, int]]

STRONG_WORDS = ("password", "passwd", "passphrase", "passcode", "secret", "token", "apikey", "credential",
                "creds", "pwd", "privatekey", "accesskey", "secretkey", "authtoken", "sessionkey", "signingkey",
                "masterkey", "encryptionkey", "accountkey", "clientsecret")
STRONG_EXACT = frozenset({"pass", "pw", "psw", "pword"})
KEY_COMPANIONS = frozenset({"api", "private", "access", "secret", "encryption", "signing", "master", "account",
                            "session", "auth", "license", "app", "client", "service", "shared", "storage", "crypt",
                            "cipher", "hmac", "jwt", "webhook", "deploy", "admin", "root"})
NOT_SECRET_WORDS = frozenset({
    "jsonwebtoken", "tokenizer", "tokenizers", "tokenize", "tokenized", "tokenization", "tokenise", "keyboard", "keyword",
    "keywords", "keyframe", "keyframes", "monkey", "donkey", "turkey", "hockey", "jockey", "whiskey", "keychain",
    "keymap", "keypress", "keydown", "keyup", "keycode", "hotkey", "keystore", "keytab", "keyring", "passenger",
    "passengers", "passage", "compass", "bypass", "passport", "surpass", "secretary", "secretion", "secreted",
    "author", "authors", "authority", "authored", "authoring", "keyed", "keystroke", "keyset", "passive",
    "passed", "passes", "passing", "encrypted", "turnkey", "credit", "credits", "pubkey", "publickey",
    "passwdqc", "pwquality",  # PAM's password-quality checkers, named after what they check
})
NON_SECRET_SUFFIX = frozenset({
    "id", "ids", "url", "uri", "urls", "endpoint", "host", "hostname", "port", "path", "paths", "file", "filename",
    "files", "dir", "directory", "folder", "name", "names", "type", "types", "length", "len", "size", "count",
    "max", "min", "limit", "ttl", "timeout", "expiry", "expires", "expiration", "expire", "lifetime", "duration",
    "age", "time", "date", "at", "ts", "timestamp", "enabled", "enable", "disabled", "required", "optional",
    "field", "fields", "header", "headers", "param", "params", "parameter", "prefix", "suffix", "regex",
    "pattern", "format", "mode", "policy", "policies", "version", "algorithm", "alg", "method", "methods",
    "provider", "store", "vault", "manager", "label", "hint", "text", "message", "msg", "error", "errors", "placeholder",
    "description", "desc", "title", "class", "style", "icon", "button", "input", "form", "link", "template",
    "validator", "validation", "selector", "index", "idx", "column", "col", "table", "schema", "source", "src",
    "reset", "rotation", "strength", "env", "var", "variable", "ref", "location", "kind", "category", "scope",
    "scopes", "audience", "issuer", "usage", "generator", "results", "result", "status", "state", "flag",
    "callback", "request", "response", "spec", "store", "service", "handler", "helper", "util", "utils",
    "config", "settings", "option", "options", "id_", "ttl", "lock", "mask", "masked", "visible", "hidden",
    "changed", "updated", "created", "valid", "invalid", "check", "input", "prompt", "dialog", "modal",
    "commit", "branch",  # ``pkg_passwd_commit = master``: a revision of a package named after passwords
    "scheme", "placement", "realm",  # ``default_pass_scheme = SHA512-CRYPT``: how a credential is kept or sent
    "here",  # ``GENERATED_PASSWORD_HERE``: a stand-in saying where a password goes, not a key holding one
    # ``secretProperty``, ``passwordAttr``: a slot of an object or a form, named after what it will hold
    "property", "properties", "prop", "props", "attribute", "attributes", "attr", "attrs",
    # ``PQchangePassword.restype``: ctypes declares a foreign function's signature on these attributes
    "restype", "argtypes", "errcheck",
    # ``password_encryption = 'scram-sha-256'``, ``PASSWORD_HASHERS``: the mechanism applied to a credential
    "encryption", "hasher", "hashers", "encoder",
    # ``secretNamespace``, ``privateKeyAnnotationKey``: where a Secret lives, the metadata that marks one
    "namespace", "namespaces", "annotation", "annotations",
    # ``currTokenBeg``, ``tokenStart``, ``passwordOffset``: a lexer's position in a text, a number
    "beg", "begin", "start", "end", "pos", "position", "offset",
})
# ``public``: a public key, a .NET ``PublicKeyToken``, a publishable token are meant to be shared.
NON_SECRET_PREFIX = frozenset({"max", "min", "num", "count", "is", "has", "show", "hide", "enable", "disable",
                               "require", "allow", "forgot", "len", "no", "skip", "validate", "check", "public",
                               # anti-forgery tokens: a nonce bound to one page's session, no credential
                               "csrf", "xsrf", "authenticity"})
BOOLEANISH = frozenset({"true", "false", "yes", "no", "on", "off", "null", "none", "nil", "undefined"})
# The random inputs of a keyed hash or a cipher: a configured salt or nonce keys a hash as a secret does
# (a weak word: its value must look random, so ``salt_rounds = 10`` stays).
RANDOM_INPUTS = frozenset({"salt", "nonce"})
OTP_WORDS = frozenset({"otp", "totp", "hotp", "mfa", "2fa", "twofactor"})

_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def key_words(key: str) -> list[str]:
    """``mySecretString`` -> ``["my", "secret", "string"]``; ``API_KEY`` -> ``["api", "key"]``."""
    return [word.lower() for word in _WORDS.findall(key)]


def key_strength(key: str) -> str | None:
    """"strong" for a password/secret/token-like name, "weak" for key/auth/cred-like, None otherwise."""
    return classify_key_words(key_words(key))


def classify_key_words(words: list[str], *, pins: bool = False, strong_word=None) -> str | None:
    """The strength of a key named by ``words``: "strong", "weak", None, or "pin" when ``pins`` is set.

    One scan for every caller, so that what names a secret is decided in one
    place: the last credential word decides, a word after it that names
    something else (``password_length``) or a word before it that counts or
    switches (``max_password``) makes it no credential. ``strong_word`` lets
    a caller count more words as strong (the context scanner's ``bindpw``).
    """
    if words[:1] in (["tls"], ["ssl"]) and "with" in words[2:]:
        return None  # ``TLS_PSK_WITH_AES_128_GCM_SHA256``: a cipher suite's IANA name, a list of algorithms
    words = _head_words(words)
    strength, last = None, -1
    for index, word in enumerate(words):
        if word in NOT_SECRET_WORDS:
            continue
        if word == "key" and index > 0 and words[index - 1] in OBJECT_KEY_OWNERS:
            continue  # ``bucket_key``, ``object_key``: an object store names an object by its key
        if word == "pass" and index > 0 and words[index - 1] in UPSTREAM_PROTOCOLS:
            continue  # nginx's ``fastcgi_pass php:9000;``, ``proxy_pass``: where a request is passed on
        if pins and (word == "pin" or (word == "code" and index and words[index - 1] == "pin")):
            strength, last = strength or "pin", index
        elif (word in STRONG_EXACT or any(strong in word for strong in STRONG_WORDS)
              or (strong_word is not None and strong_word(word))):
            strength, last = "strong", index
        elif word == "key" and index > 0 and words[index - 1] in KEY_COMPANIONS:
            strength, last = "strong", index
        elif word.endswith("key") or word.startswith("auth") or "cred" in word:
            strength, last = strength or "weak", index
        elif word == "seed" and index and words[index - 1] in OTP_WORDS:
            strength, last = "strong", index  # ``otp_seed``, ``totp_seed``: the shared secret of one-time codes
        elif word in RANDOM_INPUTS and strength is None:
            strength, last = "weak", index  # ``OCELOT_SALT``; after a credential word it describes one
    if strength is None:
        return None
    if any(word in NON_SECRET_SUFFIX or word in NAME_SUFFIX for word in words[last + 1:]):
        return None
    if any(word in NON_SECRET_PREFIX for word in words[:last]):
        return None
    return strength


# The protocols of nginx's ``X_pass`` directives, which name the upstream a request is handed to.
UPSTREAM_PROTOCOLS = frozenset({"proxy", "fastcgi", "uwsgi", "scgi", "grpc", "memcached"})
# A bucket's or an object's key is the name of a stored object (S3, GCS, Azure blobs), not a secret.
# An annotation's, a label's, a cache's or a sort's key names an entry of a map the same way (not Azure's
# ``PrimaryKey``: that one is an access key).
OBJECT_KEY_OWNERS = frozenset({"bucket", "object", "blob", "annotation", "label", "cache", "sort", "lookup",
                               "partition"})
# Words that start a phrase describing the name before them: ``tokenWithNoneAlg`` is a token (with no
# algorithm), ``keyVaultToStoreSecrets`` a vault (to store secrets in).
PREPOSITIONS = frozenset({"with", "without", "for", "to", "from"})


def _head_words(words: list[str]) -> list[str]:
    """The words of a name before its first preposition: they say what the name holds, the phrase after
    it says what that thing is for or made of. A name that starts with one is left whole."""
    for index, word in enumerate(words[1:], 1):
        if word in PREPOSITIONS:
            return words[:index]
    return words


# Words after a credential word that make the identifier describe one, not hold one
# (``validKeyChars``, ``passwordAlphabet``, ``tokenKind``, ``secret_name``).
NAME_SUFFIX = frozenset({"chars", "characters", "alphabet", "charset", "symbols", "re", "regexp", "kind",
                         "ref", "refs", "name", "keys", "hash", "hashed", "digest", "salt"})
# A value of this shape reads as an HTTP header name (``contentTypeToken = "Content-Type"``).
HEADER_NAME = re.compile(r"[A-Z][a-z]+(?:-[A-Z][a-z0-9]*)+")
# An attribute of a tag named ``key``/``name``/``id`` holds the name of a setting, not its value.
ATTRIBUTE_NAMES = frozenset({"key", "name", "id"})


def unquote(raw: str, start: int) -> tuple[str, int, int, bool]:
    """Strip the quotes around a matched value; return (value, start, end, quoted)."""
    for opening in ('\\"', '"', "'", "`"):
        if raw.startswith(opening):
            closing = opening
            if raw.endswith(closing) and len(raw) >= 2 * len(opening):
                inner = raw[len(opening): len(raw) - len(closing)]
                return inner, start + len(opening), start + len(raw) - len(closing), True
    return raw, start, start + len(raw), False


_REFERENCE_LIKE = re.compile(r"[A-Z][A-Z_]*_[A-Z_]*|[a-z]+(?:_[a-z]+)+|[A-Za-z]+")
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def looks_like_code(value: str, following: str) -> bool:
    """``base64.encodebytes(...)``, ``config.token``, ``user_password``: code, not a value.

    A dotted path counts as code when none of its parts looks random
    (``s.ZC9Ecf4M5g9o34Q6RkzGsj0z`` is a token, ``win32api.RegOpenKeyEx`` is not).
    """
    if following[:1] in ("(", "[") or _REFERENCE_LIKE.fullmatch(value):
        return True
    if _DOTTED.fullmatch(value):
        return all(len(part) < 16 or shannon_entropy(part) < 3.5 or CAMEL_WORDS.fullmatch(part)
                   for part in value.split("."))
    return False


# A Kubernetes label or annotation key: a DNS name, "/", a lower-case name (``kubernetes.io/e2e-az-name``).
QUALIFIED_NAME = re.compile(r"[a-z0-9\-]+(?:\.[a-z0-9\-]+)*\.[a-z]{2,}/[a-z0-9][a-z0-9._\-]*")
# ``TestAuthentication``, ``defectiveHandler``: words of three letters or more, each capitalised; a name.
CAMEL_WORDS = re.compile(r"(?:[A-Z][a-z]{2,})+|[a-z]{3,}(?:[A-Z][a-z]{2,})+")
# ``:param passwd:``, ``@param password``: documentation names a parameter, it does not assign one.
DOC_FIELD = re.compile(r"[:@](?:param|parameter|arg|argument|type|ivar|cvar|var|keyword|kwarg)[ \t]+\Z")


# ``postgres-password``, ``mariadb-root-password``: words joined by "-", "_" or "." ending in a credential word.
CREDENTIAL_NAME = re.compile(r"[a-z][a-z0-9]*(?:[-_.][a-z0-9]+)+")


def names_a_credential(value: str, key: str) -> bool:
    """Is the value the name of a credential rather than one: under a key that names where a password
    is kept (Helm's ``adminPasswordKey: postgres-password``, the key of a Kubernetes Secret), lower-case
    words whose last names a credential? Under ``password:`` itself such a value is the password."""
    key_parts = key_words(key)
    if len(key_parts) < 2 or key_parts[-1] != "key" or key_parts[-2] not in POINTER_WORDS:
        return False
    if not CREDENTIAL_NAME.fullmatch(value):
        return False
    words = key_words(value)
    return len(words) >= 2 and classify_key_words(words[-1:]) is not None


POINTER_WORDS = frozenset({"password", "passwords", "passwd", "pwd", "token", "tokens"})


def in_template_action(text: str, position: int) -> bool:
    """Is ``position`` inside a ``{{ ... }}`` action on its line (Go templates, Helm, Jinja), where
    ``$password := .Values.auth.password`` is template code, not a value?"""
    line_start = text.rfind("\n", 0, position) + 1
    opening = text.rfind("{{", line_start, position)
    return opening != -1 and text.find("}}", opening, position) == -1


def is_doc_field(text: str, key_start: int) -> bool:
    """Is the key at ``key_start`` the name of a docstring's parameter field (``:param passwd: ...``)?"""
    return DOC_FIELD.search(text, max(0, key_start - 16), key_start) is not None


MESSAGE_WORD = re.compile(r"\(?[A-Za-z][A-Za-z'\-]*[.,:;!?)]?")  # a word of a message, not of a password
# The small words every sentence needs and a passphrase drawn from a word list almost never holds.
FUNCTION_WORDS = frozenset({"a", "an", "the", "is", "are", "was", "be", "been", "to", "of", "for", "in", "on", "at",
                            "and", "or", "not", "no", "with", "your", "you", "this", "that", "it", "its", "will",
                            "must", "should", "can", "from", "by", "as", "if", "please", "here", "there", "we",
                            "our", "my", "has", "have", "do", "does", "set", "use", "used", "enter", "new", "when"})


def is_passphrase(value: str) -> bool:
    """``"amber beacon goblet violet velvet signal"``: three to twelve lower-case words, one space apart,
    none of them a function word: a passphrase drawn from a word list, where a message of as many words
    has "the", "to", "is", "your"."""
    words = value.split(" ")
    return (3 <= len(words) <= 12 and all(2 <= len(word) <= 12 and word.isalpha() and word.islower() for word in words)
            and not any(word in FUNCTION_WORDS for word in words))



def assignment_value_ok(value: str, strength: str, quoted: bool, following: str) -> bool:
    """Is the value of ``<secret-ish name> = value`` a secret? (detect-secrets-style filters)."""
    if not plausible_secret(value) or value.lower() in BOOLEANISH:
        return False
    if not quoted and (value.startswith(":") or value.endswith(":")):
        return False  # ``node::credentials::HasOnly``, ``password: label:``: code or a label
    if not quoted and re.fullmatch(r"[A-Za-z]+[.:]", value):
        return False  # ``(check_password): Likewise.``: a sentence of a GNU change log
    if re.match(r"[a-z][a-z0-9+.\-]*://", value, re.I) or value.startswith(("<", "/", "./", "~/", "../")) and (
            not code_values.is_base64_blob(value)):
        return False  # a URL or a path, not base64 that starts with a slash
    if len(value.split()) >= 6 and not (strength == "strong" and is_passphrase(value)):
        return False  # a sentence (a message, a label), not a secret; a passphrase's words are its value
    words = value.split()
    if len(words) >= 3 and all(MESSAGE_WORD.fullmatch(w) for w in words) and any(
            key_strength(word.strip(".,:;()")) for word in words):
        return False  # "Enter new password: ", "super amazing secret": a message about a credential
    if SEQUENCES.search(value) or HEADER_NAME.fullmatch(value):
        return False  # an alphabet constant, a header name

    if not quoted and looks_like_code(value, following):
        return False
    if strength == "weak" and QUALIFIED_NAME.fullmatch(value):
        return False  # ``key: "kubernetes.io/e2e-az-name"``: a label's key, a domain then a name
    if strength == "weak":
        compact = value.replace("-", "")
        return len(value) >= 16 and not any(ch.isspace() for ch in value) and looks_random_for_a_weak_key(compact)
    if quoted:
        return len(value) >= 4
    return len(value) >= 6


SOURCE_FILE_KEY = re.compile(r"(?i).+\.(?:[ch]|cc|cpp|hh|hpp|py|js|ts|go|rs|java|rb|pl|pm|sh|el|md|txt|in|am|ac|[1-9])")


# ``cond ? "Create credential" :``: the ``:`` after a string that follows ``?`` is a conditional's, not a key's.
TERNARY = re.compile(r"\?[ \t]*[\"'][^\"'\n]*\Z")


# ``"${PGPASSWORD:-$(< "$F")}"``, ``"${TOKEN:=$DEFAULT_TOKEN}"``: a shell default that is itself an expansion
# (a command's output, a file read, another variable) is a reference; the quotes inside ``$( )`` belong to the
# command, so the string seen up to the next quote is no value.
SHELL_DEFAULT_REFERENCE = re.compile(r"\"\$\{[A-Za-z_]\w*:?[-=]\$[({A-Za-z_]")


def check_assignment(match: re.Match, start: int, end: int):
    key = match.group("key")
    if SOURCE_FILE_KEY.fullmatch(key):
        return False  # ``src/chpasswd.c: s/exit/...``: a change-log entry names a file, not a key
    strength = key_strength(key)
    if strength is None:
        return False
    if code_values.LDAP_EXTENSIBLE.match(match.string, match.end("key")):
        return False  # ``userPassword:2.5.13.18:=\xx``: an LDAP filter's assertion, a guess being tried
    if match.string[max(0, match.start("key") - 6):match.start("key")] == "alias ":
        return False  # ``alias wpwd='wp widget delete'``: a shell alias names a command
    if is_doc_field(match.string, match.start("key")):
        return False  # ``:param passwd: **DEPRECATED** Alias for password.``: a docstring's field
    if match.group("value")[:1] not in "\"'`" and in_template_action(match.string, match.start("key")):
        return False  # ``{{- $password := .Values.auth.password }}``: template code
    groups = match.groupdict()
    if key.lower() == "key" and groups.get("op") == ":" and not groups.get("kq") and _starts_entry(
            match.string, match.start("key")) and not _random_string(match.group("value")):
        return False  # ``key: "heads-$CI_USER-2"``: a bare ``key`` entry names a map's or a cache's key
    if groups.get("op") == ":" and groups.get("kq") and TERNARY.search(
            match.string, max(0, match.start("key") - 200), match.start("key")):
        return False  # ``x ? "Create credential" : "Save credential"``: a conditional's two strings
    if key.lower() in ATTRIBUTE_NAMES and groups.get("op") == "=" and _inside_tag(match.string, match.start("key")):
        return False  # <entry key="jetbrains.mps.v8_elimination" value="..."/>: key= names the setting
    if groups.get("op") == ",":
        if not groups.get("kq"):
            return False  # ``token, value = ...``: tuple unpacking, not an assignment
        strength = "weak"  # ("API_TOKEN", "...") is a pair only when the value looks random
    raw = match.group("value")
    vstart = match.start("value")
    if groups.get("xop") and (raw[:1] in "\"'`\\" or match.string[match.start("key") - 1: match.start("key")] != "<"):
        return False  # ``<password>value</password>`` only: an XML element holds a bare value
    if SHELL_DEFAULT_REFERENCE.match(raw):
        return False  # ``PW="${PW:-$(< "$F")}"``: unset, the variable is read from a file; the quotes are the command's
    if raw[:1] == "!" and after_tag(match.string, vstart, len(match.string)) != vstart:
        return False  # ``!Ref DbPassword``, ``!Sub "X…"``: a YAML tag, no value; the context scanner reads past it
    statement = CODE_SPAN_STATEMENT.match(raw, 1) if raw[:1] == "`" else None
    if statement is not None and key_strength(statement.group("name")) is not None:
        return False  # ``Token: `export DO_API_TOKEN=…` ``: a command in a code span; its own key is read on its own
    if strength == "weak" and raw[:1] not in "\"'`" and TEMPLATE_OPENING.match(match.string, match.end("value")) and (
            _worded_prefix(raw)):
        return False  # ``key: v1-deps-{{ checksum "yarn.lock" }}``: words a template completes, not a generated key
    value, vstart, vend, quoted = unquote(raw, vstart)
    following = match.string[vend + (1 if quoted else 0): vend + 2]
    if quoted and code_values.is_name_constant(value, key):
        return False  # ``NCRYPT_PKCS8_PRIVATE_KEY_BLOB = "PKCS8_PRIVATEKEY"``: the name of a setting
    if quoted and (code_values.is_code_between_strings(value)
                   or (code_values.is_camel_name(value) and key_strength(value) is not None
                       and re.fullmatch(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+", key.rsplit(".", 1)[-1]))):
        return False  # ``"&pw=" + f("pw")``; ``NCRYPT_KDF_SECRET_VALUE = "KDFKeySecret"``: code, a name
    if quoted and match.string.startswith(code_values.API_LISTING, vend + 1):
        return False  # ``Type.FIELD = "HMAC" -> string``: a .NET public-API listing, not an assignment
    if names_a_credential(value, key):
        return False  # ``adminPasswordKey: postgres-password``: the name of a Secret's key
    if code_values.is_pgp_fingerprint(match.string, vstart, key, value):
        return False  # ``key='BCA4…785C'; gpg --recv-keys "$key"``: a public key's fingerprint
    if code_values.is_stand_in(value, key, backtick=raw.startswith("`")):
        return False  # ``"access_token": "fake-token"``, ``"Enter password: "``: a stand-in, a prompt
    if quoted and strength == "weak" and re.fullmatch(r"[a-z]+(?:_[a-z0-9]+){2,}", value):
        return False  # ``"key": "benchmark_ml_job_2"``: a snake_case name under a map's key
    if not quoted and code_lookups.is_same_name_member(value, key):
        return False  # ``Signatures = Ed25519.Signatures``: a name re-exported from another module
    if not quoted:
        line_end = match.string.find("\n", vend, vend + 1024)
        if code_values.is_code_reference(match.string[vstart:line_end if line_end != -1 else vend + 1024]):
            return False  # ``ERROR_PASSWORD = 0x052B,``, ``password: cfg?.password,``: code, not a value
    if not assignment_value_ok(value, strength, quoted, following) or encodes_placeholder(value):
        return False
    return [(vstart, vend)]


# A code span (Markdown's backticks) that starts by assigning to a credential's name, shell ``export`` or not:
# a statement shown to the reader, whose own key and value the rules read where they stand inside it (any
# other name before ``=`` may be a password's own characters: ``Password: `ab=cd` ``).
CODE_SPAN_STATEMENT = re.compile(r"(?:(?:export|set|setx|\$)[ \t]+)?(?P<name>[A-Za-z_][\w.\-]*)=")
# A template expression that continues an unquoted value: Jinja, Go templates, CircleCI, GitHub Actions, shell.
TEMPLATE_OPENING = re.compile(r"\{\{|\{%|\$\{")


def _worded_prefix(value: str) -> bool:
    """``v1-dependencies-``, ``npm-cache-v2-``: words (and a short count or version) joined by ``-``, ``_`` or
    ``.``, as a cache key's fixed part reads; a drawn string (``Xk9pQ2mZ7fRt…``) is no such prefix."""
    pieces = [piece for piece in re.split(r"[-_.]+", value) if piece]
    return bool(pieces) and all(
        re.fullmatch(r"[A-Za-z]*\d{0,3}", piece) and (len(piece.rstrip("0123456789")) <= 3
                                                    or code_values.is_wordlike(piece.rstrip("0123456789")))
        for piece in pieces)


def _random_string(raw: str) -> bool:
    """A value, quoted or not, that reads as random characters, as a generated key does: not a name, and
    not a string that interpolates a variable (``heads-$CI_USER-2``)."""
    value = raw.strip().strip("\"'`")
    if re.search(r"\$\{?[A-Za-z_]", value):
        return False
    return len(value) >= 16 and looks_random_for_a_weak_key(value)


def _starts_entry(text: str, position: int) -> bool:
    """Only indentation, a list dash or an opening ``{``/``,`` before ``position`` on its line: a mapping's entry
    (``access key: X`` in prose has a word before it)."""
    before = text[text.rfind("\n", 0, position) + 1:position].strip()
    return before in ("", "-") or before.endswith(("{", ","))


def _inside_tag(text: str, position: int) -> bool:
    """Is ``position`` inside an XML/HTML tag (a ``<`` before it on its line, no ``>`` between)?"""
    line_start = text.rfind("\n", 0, position) + 1
    opening = text.rfind("<", line_start, position)
    return opening != -1 and text.find(">", opening, position) == -1


# ``password={{ .Values.mysql.pass }}``, ``{{- end }}``: a line whose value is a chart's template action
# (an INI file rendered into a Secret): a reference, filled in when the chart is installed.
TEMPLATE_VALUE = re.compile(r"(?:[\w.\-]+[ \t]*[=:][ \t]*)?[\"']?\{\{[^{}]*\}\}[\"']?")
# ``podSecurityContext:`` alone on its line opens a nested mapping: a key, never a value.
MAPPING_OPENER = re.compile(r"\s*-?\s*[\w.\-\"']+\s*:\s*")


def block_value_spans(block: str, offset: int, *, minimum: int = 4) -> Spans:
    """The values of the lines of an indented block (``key: value`` keeps its key; a nested mapping's
    own key line is no value)."""
    spans: Spans = []
    position = offset
    for line in block.splitlines(keepends=True):
        content = line.rstrip("\r\n")
        stripped = content.strip()
        lead = len(content) - len(content.lstrip())
        if (stripped and not stripped.startswith(("#", ";", "//")) and not MAPPING_OPENER.fullmatch(content)
                and not TEMPLATE_VALUE.fullmatch(stripped)):
            value_start = lead
            mapping = re.match(r"\s*-?\s*[\w.\-\"']+\s*:\s+(?=\S)", content)
            if mapping:
                value_start = mapping.end()
            elif stripped.startswith("- "):
                value_start = lead + 2
            value = content[value_start:].strip().strip("\"'")
            if (len(value) >= minimum and value not in (">", "|", ">-", "|-") and plausible_secret(value)
                    and not encodes_placeholder(value)):
                first = content.index(value, value_start) if value in content[value_start:] else value_start
                spans.append((position + first, position + first + len(value)))
        position += len(line)
    return spans


# The fields of a block that points at a secret kept elsewhere (a Kubernetes volume's ``secret:``,
# ``secretKeyRef:``): names, keys, paths and modes, never the secret itself.
# Compose's top-level ``secrets:`` names each secret and says where it is read from (``file:``,
# ``environment:``, ``external:``); only ``content:`` would hold the value itself.
REFERENCE_FIELDS = frozenset({"secretname", "name", "key", "items", "path", "defaultmode", "mode", "optional",
                              "file", "environment", "external"})
# ``{{- if .Values.auth.usePasswordFiles }}``, ``# a comment``: a Helm chart's control line, no field of the block.
TEMPLATE_LINE = re.compile(r"\s*(?:\{\{.*\}\}|#.*)\s*")
# A name in a service's ``secrets:`` list (``- db-password``): lower-case words, as Compose and Kubernetes name things.
SECRET_NAME = re.compile(r"[a-z0-9][a-z0-9_.\-]{0,62}")
BLOCK_MAPPING = re.compile(r"\s*-?\s*(?P<key>[\w.\-]+)\s*:(?:\s|$)")


# The marks of a shell command line: a continuation, a chain, a substitution, an option.
RECIPE_MARK = re.compile(r"\\$|&&|\|\||\$\(|[ \t]--?[A-Za-z]")


def check_secret_block(match: re.Match, start: int, end: int):
    words = key_words(match.group("key"))
    if key_strength(match.group("key")) != "strong":
        return False
    lines = [line for line in match.group("block").splitlines()
             if line.strip() and not MAPPING_OPENER.fullmatch(line) and not TEMPLATE_LINE.fullmatch(line)]
    if classify_key_words(words[-1:]) is None and all(BLOCK_MAPPING.match(line) for line in lines):
        return False  # ``passwordUpdateJob:`` opens a mapping of a job's settings, not a password
    if not match.group("indent") and lines and all(line.startswith("\t") for line in lines) and any(
            RECIPE_MARK.search(line) for line in lines):
        return False  # a Makefile target ``secrets:`` and its recipe: commands indented by a tab (YAML allows none)
    if words == ["secrets"] and lines and all(_names_a_secret(line.strip(), match.string) for line in lines):
        return False  # a Compose service's ``secrets:`` list: the names of secrets defined below
    if _schema_block(lines):
        return False  # a CRD's or an OpenAPI document's ``password:`` describes the field: type, prose, nesting
    mappings = [BLOCK_MAPPING.match(line) for line in lines]
    if lines and all(mappings) and all(m.group("key").replace("-", "").replace("_", "").lower() in REFERENCE_FIELDS
                                       for m in mappings):
        return False  # a Kubernetes volume's ``secret:`` holds ``secretName:``/``items:``: fields, not a value
    spans = block_value_spans(match.group("block"), match.start("block"))
    return _own_values(match.string, match.group("block"), match.start("block"), spans) or False


def _own_values(text: str, block: str, offset: int, spans: Spans) -> Spans:
    """The spans that are the block's own values: a value deeper in the block belongs to the nearest key
    above it (``stringData:`` / ``user: admin``, ``description: |-`` / its prose), and stays when that key
    names no credential and the value does not look random."""
    lines, position = [], offset
    for line in block.splitlines(keepends=True):
        content = line.rstrip("\r\n")
        if content.strip():
            field = SCHEMA_FIELD.match(content)
            lines.append((position, position + len(content), len(content) - len(content.lstrip()),
                          field.group("key") if field else None, content[field.end():].strip() if field else ""))
        position += len(line)
    if not lines:
        return spans
    first = min(row[2] for row in lines)
    kept = []
    for start, end in spans:
        index = next((i for i, row in enumerate(lines) if row[0] <= start <= row[1]), None)
        if index is None:
            kept.append((start, end))
            continue
        _start, _end, indent, key, value = lines[index]
        owner = key if key is not None and value else None
        if owner is not None and indent == first:
            kept.append((start, end))
            continue
        owner_indent = indent
        if owner is None:
            row = next((row for row in reversed(lines[:index]) if row[2] < indent and row[3] is not None), None)
            owner, owner_indent = (row[3], row[2]) if row is not None else (None, indent)
        value = text[start:end]
        if owner is None or key_strength(owner) is not None or looks_random(value):
            kept.append((start, end))
        elif owner_indent == first and owner.lower() not in SCHEMA_FIELDS and value.count(" ") < 2:
            kept.append((start, end))  # ``api:`` / ``- X``: a first field of ``secrets:`` names what it holds
    return kept


# The keywords of a JSON Schema (Kubernetes CRDs, OpenAPI components): a block whose own fields are these
# describes a field, and the prose of its ``description`` is documentation.
SCHEMA_FIELDS = frozenset({"type", "description", "properties", "items", "required", "format", "default", "enum",
                           "pattern", "minlength", "maxlength", "minimum", "maximum", "title", "nullable",
                           "example", "examples", "additionalproperties", "oneof", "anyof", "allof", "readonly",
                           "writeonly", "deprecated", "$ref"})
SCHEMA_SHAPE = frozenset({"type", "properties", "items", "$ref", "oneof", "anyof", "allof"})
SCHEMA_FIELD = re.compile(r"\s*-?\s*[\"']?(?P<key>\$?[\w.\-]+)[\"']?\s*:(?:\s|$)")


def _schema_block(lines: list[str]) -> bool:
    """Every field at the block's own indentation is a JSON Schema keyword (or an ``x-`` extension), and
    one of them gives the field a type or a shape."""
    if not lines:
        return False
    indent = min(len(line) - len(line.lstrip()) for line in lines)
    keys = []
    for line in lines:
        if len(line) - len(line.lstrip()) != indent:
            continue
        field = SCHEMA_FIELD.match(line)
        if field is None and line.lstrip().startswith("- "):
            continue  # ``required:`` / ``- key``: YAML may write a list at its key's indentation
        if field is None:
            return False
        keys.append(field.group("key").lower())
    return (all(key in SCHEMA_FIELDS or key.startswith("x-") for key in keys)
            and any(key in SCHEMA_SHAPE for key in keys))


def _names_a_secret(line: str, text: str) -> bool:
    """``- db-password`` in a ``secrets:`` list: a name that names a credential, or that the file defines
    as a key of its own (Compose's top-level ``secrets:`` mapping)."""
    if not line.startswith("- "):
        return False
    name = line[2:].strip()
    if not SECRET_NAME.fullmatch(name):
        return False
    return key_strength(name) is not None or re.search(r"(?m)^[ \t]+" + re.escape(name) + r":[ \t]*$", text) is not None


KIND_SECRET = re.compile(r"(?im)^[ \t]*kind:[ \t]*[\"']?secret\b")


def check_kubernetes_secret(match: re.Match, start: int, end: int):
    if not KIND_SECRET.search(match.string):
        return False
    return block_value_spans(match.group("block"), match.start("block")) or False


def check_key_block(match: re.Match, start: int, end: int):
    body = match.group("body")
    if body is None:  # no END within the budget: the armour lines that follow
        body = match.group("open") or ""
    body = re.sub(r"\\[nr]|[\s\"'+,]", "", body)
    if len(body) >= KEY_BODY_MEASURED and shannon_entropy(body) < KEY_BODY_BITS:
        return False  # ``s3cr3ts3cr3t…``, ``XXXX…`` between the armour lines: a stand-in, no key material
    return len(body) >= 16


# A key's body is base64 of DER (or of ciphertext, once encrypted): 32 base64 characters of it carry
# more than 4 bits each. A body of a few symbols repeated (a word typed over and over, a mask) is
# written by a person in a key's place: under 2.5 bits a character (five symbols or so) over 32 or more.
KEY_BODY_MEASURED = 32
KEY_BODY_BITS = 2.5


def check_slack_token(match: re.Match, start: int, end: int):
    token = match.string[start:end]
    if digit_count(token) < 2:
        return False
    if token[:5] in ("xoxb-", "xoxp-", "xoxs-", "xoxe-", "xoxo-") and len(token) - 5 < 15:
        return False
    return not is_placeholder(token)


def check_plausible(match: re.Match, start: int, end: int):
    return plausible_secret(match.string[start:end])


def check_auth_header(match: re.Match, start: int, end: int):
    value = match.string[start:end]
    return plausible_secret(value) and not looks_like_code(value, match.string[end:end + 1])


def check_url_credentials(match: re.Match, start: int, end: int):
    user, _, password = match.string[start:end].partition(":")
    host = re.match(r"[^\s/?#:\"'<>]*", match.string[end + 1:end + 256]).group(0).lower().rstrip(".")
    if host in RESERVED_URL_HOSTS or host.endswith(tuple("." + name for name in RESERVED_URL_HOSTS)) or host.endswith(RESERVED_URL_TLDS):
        return False  # https://abc:xyz@example.com is documentation (RFC 2606), not a credential
    # Only a password that is entirely a reference stays: ``O$pwLeEtq1`` is a password with a "$" in it.
    return len(password) >= 3 and has_alnum(password) and not is_placeholder(password) and not is_whole_reference(password)


# The users and groups Kubernetes reserves under ``system:`` (its RBAC documentation): ``kubectl config
# set-context --user=system:kube-scheduler`` names a kubeconfig entry, it is no ``user:password`` pair.
KUBERNETES_IDENTITY = re.compile(
    r"system:(?:kube-[a-z][a-z\-]*|masters|nodes|anonymous|authenticated|unauthenticated|monitoring"
    r"|node:[a-z0-9][a-z0-9.\-]*|serviceaccounts?(?::[a-z0-9][a-z0-9.\-]*){0,2}"
    r"|bootstrappers(?::[a-z0-9][a-z0-9:.\-]*)?)")


def check_cli_user(match: re.Match, start: int, end: int):
    value = match.string[start:end]
    bare = value.replace('"', "").replace("'", "")
    if ":" not in bare or is_placeholder(bare) or is_templated(bare) or KUBERNETES_IDENTITY.fullmatch(bare):
        return False
    parts = [part for part in bare.split(":", 1) if part]
    usable = [part for part in parts if plausible_secret(part) and not part.startswith(("[", "{$"))]
    return bool(usable) and len(usable) == len(parts)


SEQUENCES = re.compile(r"(?i)0123456789|abcdefghij|qwertyuiop")


DIGEST_LENGTHS = frozenset({40, 56, 64, 96, 128})  # hex SHA-1, SHA-224, SHA-256, SHA-384, SHA-512
NOT_A_KEY_PREFIXES = ("sha256-", "sha384-", "sha512-", "_Z")  # integrity hashes, C++ mangled names


# The name a value is assigned to, just before it on its line: ``public_key = "``, ``"publicToken": "``.
NAME_BEFORE = re.compile(r"([A-Za-z_][\w.\-]{0,80})[\"'`]?\s*(?::=|=>|[:=])\s*[\"'`]?$")


# Names of values that are random and no credential: a public key or a publishable token is shared by
# design; an anti-forgery token is a nonce bound to one page's session.
HARMLESS_NAME_WORDS = frozenset({"public", "pubkey", "publickey", "publishable", "csrf", "xsrf", "authenticity"})


def named_harmless(text: str, start: int) -> bool:
    """Is the value at ``start`` assigned to a name that says it is no credential (``public_key``,
    ``csrf-token``, ``name="authenticity_token" value="``)?"""
    line_start = text.rfind("\n", max(0, start - 200), start) + 1
    head = text[max(line_start, start - 160):start]
    attribute = re.search(r"""name=["']([\w.\-]{1,80})["'][^<>]{0,40}value=["']$""", head)
    name = attribute or NAME_BEFORE.search(head)
    return bool(name) and any(word in HARMLESS_NAME_WORDS for word in key_words(name.group(1)))


# A key that names an identifier (``KeyId``, ``request_id``, ``"kid"``) right before a value.
ID_KEY = re.compile(r"(?:(?<=[a-z])Id|(?<![A-Za-z])[Ii]d|ID|[_\-.]id|(?<![A-Za-z])kid)[\"']?[ \t]*[:=][ \t]*[\"']?\Z")


# A word of an identifier (``Sponsored``, ``pagination``), an acronym (``RHF``) or a number, as camelCase and
# snake_case names are built; a pronounceable word has vowels, but no four consonants in a row.
NAME_PART = re.compile(r"[A-Z]{2,}(?![a-z])|[A-Z]?[a-z]+|\d+")
SPELT_WORD = re.compile(r"[A-Z]?[a-z]{3,}")
VOWEL_LETTERS = frozenset("aeiouAEIOU")
CONSONANT_RUN = re.compile(r"[^aeiouAEIOU]{4,}")


def reads_as_words(value: str) -> bool:
    """Is the value a long name made of words (five at least, 5.5 letters each on average, three quarters
    of its letters and digits)? A machine's random characters fall into such words too rarely to count
    (none of 225,000 random draws of 20 to 64 characters did); a long name spelt in words
    (``SponsoredProductsRemoteSearchClickPagination``) is a person's."""
    words = covered = 0
    for part in NAME_PART.findall(value):
        if SPELT_WORD.fullmatch(part) and not CONSONANT_RUN.search(part) and (
                0.2 <= sum(ch in VOWEL_LETTERS for ch in part) / len(part) <= 0.6):
            words, covered = words + 1, covered + len(part)
    return words >= 5 and covered >= 5.5 * words and covered >= 0.75 * sum(ch.isalnum() for ch in value)


IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_high_entropy(match: re.Match, start: int, end: int):
    value = match.string[start:end].rstrip("=")
    text = match.string
    if named_harmless(text, start):
        return False
    quoted = start > 0 and text[start - 1] in "\"'`" and text[end:end + 1] == text[start - 1]
    if is_hex(value) and (len(value) < 32 or not quoted or len(value) in DIGEST_LENGTHS):
        return False
    if is_hex(value) and ID_KEY.search(text, max(0, start - 40), start):
        return False  # ``"KeyId": "6962…"``, ``trace_id``: the name of a key or a record, not its secret
    if value.count("/") >= 2 and re.fullmatch(r"[a-z]+", value.split("/", 1)[0]):
        return False  # tools/javac/lambda/T8129740/CaptureInCtorChainingTest: a path
    if value.startswith("eyJ") and is_jwt_header(value):
        return False  # the first part of a JWT: the jwt rule judges the token it starts
    if text[end:end + 1] == "(" and IDENTIFIER.fullmatch(value) and "_" in value:
        return False  # ``err := Convert_v1_Foo_To_v2_Foo(in, out)``: a generated function's name, called
    if SEQUENCES.search(value) or value.startswith(NOT_A_KEY_PREFIXES):
        # Bare hex strings are digests: commit hashes, checksums, key fingerprints (a hex
        # secret behind ``secret =`` is secret-assignment's; a quoted one still counts).
        return False
    # ``desktop-rhf_SponsoredProductsRemoteRHFSearch…``: an identifier spelt in words, random only by its letters
    return looks_random(value) and not is_placeholder(value) and not reads_as_words(value)


FILE_EXTENSIONS = frozenset("txt md pdf doc docx odt rtf csv tsv xls xlsx ods json xml yaml yml html htm eml msg "
                            "png jpg jpeg gif svg webp zip gz tar log ini cfg conf".split())


def _json_part(part: str):
    """A JWT part decoded (base64url, padding restored) and parsed as JSON, or None."""
    try:
        return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (ValueError, UnicodeDecodeError):
        return None


# The fields of a JWT's (JOSE) header: what algorithm signs it, which key, which type.
JWT_HEADER_FIELDS = frozenset("alg typ kid cty jku jwk x5u x5c x5t x5t#S256 crit enc zip b64".split())


def is_jwt_header(part: str) -> bool:
    """Does ``part`` decode to a JWT header (a JSON object of header fields only, ``alg`` among them)?
    A header says how a token is signed and holds no secret; any other encoded JSON may."""
    header = _json_part(part)
    return isinstance(header, dict) and "alg" in header and set(header) <= JWT_HEADER_FIELDS


def check_jwt(match: re.Match, start: int, end: int):
    """A signed JWT is a bearer credential; an unsigned one is not: without a signature, or with
    ``"alg": "none"`` (RFC 7519's unsecured JWT), anyone may write the same token, so it proves
    nothing. Such a token stays when its header and claims decode to JSON and hold no ``@`` (no
    address hidden in base64); anything else that looks like a token goes."""
    value = match.string[start:end]
    if not value.startswith("eyJ"):
        return True
    if ".." in value:
        return False  # ``eyJhbGci….eyJzdWIiOiIxMj...Fh7HgQ``: a token shown cut short (a JWT never holds "..")
    parts = value.split(".")
    header, claims = _json_part(parts[0]), _json_part(parts[1]) if len(parts) > 1 else None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        return True
    unsigned = len(parts) < 3 or not parts[2] or str(header.get("alg", "")).lower() == "none"
    return not (unsigned and "@" not in json.dumps(claims, ensure_ascii=False))


# The URL's scheme and user information up to the match: ``ftp://name:`` before ``pw@host``.
URL_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s/@?#\"'<>]*:$")


def check_email(match: re.Match, start: int, end: int):
    """An address; in a file name the extension after it (``.pdf``, ``.txt``) stays.

    In ``scheme://user:password@host`` the text before ``@`` is a URL's user name or password, not
    the local part of an address: the URL credential rules judge it (a placeholder such as
    ``ftp://xxx:xxx@xxx.com`` stays, a real password goes under their name)."""
    if URL_USERINFO.search(match.string, max(0, start - 300), start):
        return False
    value = match.string[start:end]
    head, _, extension = value.rpartition(".")
    if extension.lower() in FILE_EXTENSIONS and "." in head.rsplit("@", 1)[-1]:
        end -= len(extension) + 1
        value = head
    last_label = value.rsplit(".", 1)[-1]
    if "-" in last_label and not last_label.lower().startswith("xn--"):
        # no top-level domain has a dash: ``corp.com-cv`` is ``corp.com`` then a word
        cut = len(last_label) - last_label.index("-")
        end -= cut
        value = value[:-cut]
    return [(start, end)] if personal_email(value) else False


def left_ok(text: str, start: int, extra: str = "") -> bool:
    """The character before ``start`` does not continue a word (or one of ``extra``)."""
    if start == 0:
        return True
    before = text[start - 1]
    return not (before.isalnum() or before == "_" or before in extra)


# An IBAN's head and the groups of four after it, up to the match: ``BE71 0961 `` before ``2345 6760``.
IBAN_HEAD = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: [A-Z0-9]{4})* $")


# Groups of four hex digits, and a group with a letter beside them: the quads of a fingerprint or a hex dump.
QUADS = re.compile(r"[0-9A-Fa-f]{4}(?: {1,2}[0-9A-Fa-f]{4})+")
QUAD_BEFORE = re.compile(r"(?<![0-9A-Za-z])[0-9A-Fa-f]{4} {1,2}$")
QUAD_AFTER = re.compile(r" {1,2}[0-9A-Fa-f]{4}(?![0-9A-Za-z])")
MAX_QUADS = 16  # a fingerprint has ten; a hex dump's line sixteen


def inside_hex_quads(text: str, start: int, end: int) -> bool:
    """Are the quads at ``start:end`` (digits, or hex digits: an IBAN's ``BE87 630B …``) among quads of hex
    digits one of which has a letter: a fingerprint's groups (``C252 0441 5082 7590 6BA8 …``), no phone,
    card or IBAN?"""
    if QUADS.fullmatch(text, start, end) is None:
        return False
    neighbours, left, right = [], start, end
    for _ in range(MAX_QUADS):
        found = QUAD_BEFORE.search(text, max(0, left - 7), left)
        if found is None:
            break
        neighbours.append(found.group().strip())
        left = found.start()
    for _ in range(MAX_QUADS):
        found = QUAD_AFTER.match(text, right)
        if found is None:
            break
        neighbours.append(found.group().strip())
        right = found.end()
    return any(not quad.isdigit() for quad in neighbours)


def check_phone(match: re.Match, start: int, end: int):
    if not left_ok(match.string, start, "+-./~:"):
        return False
    if IBAN_HEAD.search(match.string, max(0, start - 48), start):
        return False  # the digit groups of an IBAN-shaped value: the iban rule judges it (its checksum)
    value = match.string[start:end]
    digits = digit_count(value)
    if re.fullmatch(r"\+?\d+\.\d+", value):
        return False  # a signed decimal number
    if inside_hex_quads(match.string, start, end):
        return False  # ``C252 0441 5082 7590 6BA8 …``: digit groups inside a run of hex quads (a key's fingerprint)
    if value.startswith("+"):
        return 8 <= digits <= 15
    if value.startswith("00"):
        return 10 <= digits <= 17
    if value.startswith("0"):
        groups = re.split(r"[ .\-/]", value)
        if len(groups) >= 4 and all(group.startswith("0") for group in groups):
            return False  # 01 02 03 04 05: a byte dump, not a number with a trunk 0
        return 10 <= digits <= 12 and any(sep in value for sep in " .-/")
    return 10 <= digits <= 11


def check_phone_labelled(match: re.Match, start: int, end: int):
    return 7 <= digit_count(match.string[start:end]) <= 15


CARD_PREFIXES = re.compile(
    r"4|5[1-5]|2(?:2[2-9][1-9]|2[3-9]|[3-6]|7[01]|720)|3[47]|6011|65|64[4-9]|35(?:2[89]|[3-8])|30[0-5]|3[689]|62|5[06-8]|6[37]"
)


# A card named just before the number (``my credit card:``, ``Kreditkarte Nr.``): any issuer's prefix counts.
CARD_LABEL = re.compile(r"(?i)\b(?:credit|debit|payment)[ _\-]?card\b[^\n\d]{0,24}$|\bkreditkarte[^\n\d]{0,24}$")


def check_card(match: re.Match, start: int, end: int):
    """Luhn and an issuer's prefix (UATP's 15 digits from 1 among them); under a card's label, Luhn alone."""
    if not left_ok(match.string, start, "-."):
        return False
    digits = re.sub(r"\D", "", match.string[start:end])
    if not (13 <= len(digits) <= 19 and luhn_ok(digits)) or inside_hex_quads(match.string, start, end):
        return False
    if IBAN_HEAD.search(match.string, max(0, start - 48), start):
        return False  # the digit groups of an IBAN-shaped value (``RS35 2600 0560 …``): the iban rule judges it
    if CARD_PREFIXES.match(digits) or (len(digits) == 15 and digits[0] == "1"):
        return True
    return bool(CARD_LABEL.search(match.string, max(0, start - 48), start))


def check_iban(match: re.Match, start: int, end: int):
    if not left_ok(match.string, start) or inside_hex_quads(match.string, start, end):
        return False
    text = match.string[start:end]
    expected = IBAN_LENGTHS.get(text[:2].upper())
    if expected is None:
        return False
    taken, index = 0, 0
    while index < len(text) and taken < expected:
        if text[index] != " ":
            taken += 1
        index += 1
    if taken != expected or (index < len(text) and text[index] != " "):
        return False
    letters = [ch for ch in text[:index] if ch.isalpha()]
    if not (all(ch.isupper() for ch in letters) or all(ch.islower() for ch in letters)):
        return False  # ``LV80 bANK …``: an IBAN is written in one case
    return [(start, start + index)] if iban_ok(text[:index]) else False


def check_ssn(match: re.Match, start: int, end: int):
    if not left_ok(match.string, start, "-." if "." in match.string[start:end] else "-"):
        return False  # 1.078.05.1123 is a version or an address, not an SSN written with dots
    digits = re.sub(r"\D", "", match.string[start:end])
    return len(digits) == 9 and not digits.startswith(("000", "666", "9")) and digits[3:5] != "00" and digits[5:] != "0000"


NOT_AN_ADDRESS_BEFORE = re.compile(
    r"(?i)(?:\bEC|\bversions?|\brelease|\bv(?:er)?\.?|\bOID|\bSNMP|\bsections?|\bchapters?|\bclauses?|§|\bstep|"
    r"\bfigure|\bfig\.|\btable)[ :\-#\"']*$"
)


VERSION_WORDS = re.compile(
    r"(?i)\b(?:versions?|releases?|released|upgraded?|updated?|bump(?:ed)?|upstream|backport(?:ed)?|"
    r"fixed in|patch|changelog)\b[^\n]{0,40}$"
)
SECTION_TITLE = re.compile(r"\.?[ \t]+[A-Z][a-z]")


def check_public_ip(match: re.Match, start: int, end: int):
    """The match starts at the first dot: take back the first number."""
    text = match.string
    first = start
    while first > 0 and start - first < 3 and text[first - 1].isdigit():
        first -= 1
    if first == start:
        return False
    start = first
    if not left_ok(text, start, ".:-_~+(") or NOT_AN_ADDRESS_BEFORE.search(text, max(0, start - 16), start):
        return False  # "EC 1.14.16.2" is an enzyme, "version 1.2.3.4" a release, "libfoo-1.2.3.4" a package
    if text[end:end + 1] in ("-", "~", "+", "_") or VERSION_WORDS.search(text, max(0, start - 48), start):
        return False  # "1.8.1.2-1", "upgrade to 2.39.90.1": a version
    parts = text[start:end].split(".")
    if len(parts[0]) == 1 and len(set(parts)) > 1 and all(len(part) <= 2 for part in parts):
        return False  # 4.3.99.16, 1.2.8.1: shaped like a version (8.8.8.8, 1.1.1.1 are addresses)
    line_start = text.rfind("\n", 0, start) + 1
    if not text[line_start:start].strip() and SECTION_TITLE.match(text, end):
        return False  # "2.3.4.1 Arrays": a section number at the start of its line
    if _network_range(text, start, end):
        return False  # ``103.21.244.0/22``: a network's range (host bits zero), no one host's address
    return [(start, end)] if public_ip(text[start:end]) else False


PREFIX_LENGTH = re.compile(r"/(\d{1,2})(?![\d.])")


def _network_range(text: str, start: int, end: int) -> bool:
    """The address is a CIDR block whose host bits are all zero (``104.16.0.0/13``): firewall, proxy and
    resolver settings list such ranges; an address with host bits set (``203.0.113.7/24``) is one host."""
    prefix = PREFIX_LENGTH.match(text, end)
    if prefix is None or not 0 < int(prefix.group(1)) < 32:
        return False
    try:
        ipaddress.ip_network(f"{text[start:end]}/{prefix.group(1)}", strict=True)
    except ValueError:
        return False
    return True


HEX_OR_COLON = frozenset("0123456789abcdefABCDEF")


def check_public_ipv6(match: re.Match, start: int, end: int):
    """The match starts at the first colon: take back the hex digits of the first group."""
    text = match.string
    first = start
    while first > 0 and start - first < 4 and text[first - 1] in HEX_OR_COLON:
        first -= 1
    if not left_ok(text, first, ":."):
        return False
    value = text[first:end]
    embedded = "." in value  # a trailing IPv4 part (``::ffff:129.144.52.38``) fills two groups
    if ("::" not in value and value.count(":") < 7 - embedded
            or sum(1 for group in value.split(":") if group) + embedded < 3):
        return False  # slices such as [1::2] are not addresses
    if not any(len(group) >= 3 for group in value.split(":")):
        return False  # 2:4:6:8:10:12:14:16 or 0:1:2:3:4:5:6:7 is a list of numbers
    return [(first, end)] if public_ip(value) else False


def check_has_digit(match: re.Match, start: int, end: int):
    value = match.string[start:end]
    return any(ch.isdigit() for ch in value) and any(ch.isalpha() for ch in value)


# Inside the quotes, the host language's string closed, a variable joined and the string opened
# again (``'` + newpw + `'``, ``'" . $pw . "'``, ``'" || pw || "'``; in SQL run from a string, PL/pgSQL's
# ``PASSWORD ''' || pw || ''''``, whose statement doubles its quote): the value is a reference.
CONCATENATED = re.compile(r"""\s*(''|[`"'])\s*(?:\+|\.|\|\|)\s*[A-Za-z_$][\w.$\[\]()]*\s*(?:\+|\.|\|\|)\s*\1\s*""")


def check_cli_password(match: re.Match, start: int, end: int):
    """``mysql -pX`` / ``sshpass -p 'X'``: the value without its quotes, unless a placeholder."""
    value, start, end, _ = unquote(match.string[start:end], start)
    if CONCATENATED.fullmatch(value):
        return False  # ``PASSWORD '` + newpw + `'``: the string closed, a variable joined in
    return [(start, end)] if plausible_secret(value) and not value.startswith(("$", "%")) else False


def check_flag_password(match: re.Match, start: int, end: int):
    """``--admin-password X``, ``redis-cli -a X``: as ``cli_password``, and X does not read as a word.

    Change logs and manuals name the options in prose ("--password was
    supplied", "--ask-password wins"): a value needs a digit, a symbol or a
    capital after its first letter to be one.
    """
    value, start, end, quoted = unquote(match.string[start:end], start)
    if not quoted:  # the full stop or comma of the sentence is not part of it
        value = value.rstrip(".,;:!?)")
        end = start + len(value)
    if not plausible_secret(value) or value.startswith(("$", "%", "(")):
        return False
    if not quoted and value[:1] == "-" and value[1:2].isalpha():
        return False  # ``ldapsearch -w -b dc=…``: the option had no value, the next option follows
    telling = any(ch.isdigit() for ch in value) or any(not ch.isalnum() for ch in value) or any(
        ch.isupper() for ch in value[1:])
    return [(start, end)] if telling else False


def check_prose_secret(match: re.Match, start: int, end: int):
    """"the password is X", "PIN is 4921": X is a secret when it does not read as a word.

    A PIN is 4 to 8 digits; a password needs a digit, a symbol or a capital
    after its first letter ("the password is stored..." names no password).
    """
    value = match.string[start:end].rstrip(".:")
    end = start + len(value)
    label = match.group(0)[: match.start("secret") - match.start()].lower()
    if label.startswith("pin"):
        return [(start, end)] if value.isdigit() and 4 <= len(value) <= 8 else False
    if not plausible_secret(value) or is_templated(value) or len(value) < 4:
        return False
    telling = any(ch.isdigit() for ch in value) or any(not ch.isalnum() for ch in value) or any(
        ch.isupper() for ch in value[1:])
    return [(start, end)] if telling and not value.lower().startswith(("http", "www.")) else False


NINO_BAD_PREFIXES = frozenset({"BG", "GB", "NK", "KN", "TN", "NT", "ZZ"})


def check_uk_nino(match: re.Match, start: int, end: int):
    """A UK National Insurance number: two letters (not the unused pairs), six digits, A-D, its
    letters in one case (``tw987654a`` as typed in a form; ``Ab123456c`` is no number)."""
    letters = [ch for ch in match.string[start:end] if ch.isalpha()]
    if not (all(ch.isupper() for ch in letters) or all(ch.islower() for ch in letters)):
        return False
    return match.string[start:start + 2].upper() not in NINO_BAD_PREFIXES


def de_tax_id_ok(digits: str) -> bool:
    """The German tax id (Steuer-ID): 11 digits, first not 0, one digit repeated in the first ten
    (twice, or three times but not three in a row), and the ISO 7064 MOD 11,10 check digit."""
    if len(digits) != 11 or digits[0] == "0":
        return False
    counts = Counter(digits[:10])
    repeated = [d for d, n in counts.items() if n > 1]
    if len(repeated) != 1 or counts[repeated[0]] > 3 or repeated[0] * 3 in digits[:10]:
        return False
    return de_tax_check_digit_ok(digits)


def de_tax_check_digit_ok(digits: str) -> bool:
    """The ISO 7064 MOD 11,10 check digit of an 11-digit German tax id."""
    if len(digits) != 11 or digits[0] == "0":
        return False
    product = 10
    for ch in digits[:10]:
        total = (int(ch) + product) % 10 or 10
        product = (total * 2) % 11
    check = (11 - product) % 10
    return check == int(digits[10])


# The tax id named just before the number: ``Steuer-ID:``, ``IdNr.``, ``Identifikationsnummer``.
DE_TAX_LABEL = re.compile(r"(?i)\b(?:steuer[ \-]?id|steuer[ \-]?identifikationsnummer|identifikationsnummer|idnr)\b"
                          r"[^\n\d]{0,20}$")


HEX_RUN = 32  # a hash's or a fingerprint's hex digits: MD5 has 32, SHA-1 and OpenPGP 40


def inside_hex_run(text: str, start: int, end: int) -> bool:
    """Is ``text[start:end]`` part of a run of ``HEX_RUN`` hex digits or more, with a hex letter right
    beside it (``…AE2CA88421638572F921…``): digits of a hash, not a number of their own?"""
    left, right = start, end
    while left > 0 and left > start - 64 and text[left - 1] in string.hexdigits:
        left -= 1
    while right < len(text) and right < end + 64 and text[right] in string.hexdigits:
        right += 1
    beside = text[start - 1:start] + text[end:end + 1]
    return right - left >= HEX_RUN and any(ch in "abcdefABCDEF" for ch in beside)


def check_de_tax_id(match: re.Match, start: int, end: int):
    """The full structure check; under the id's own label, the check digit alone (a number written
    where the form asks for the tax id is one, even if its digits break the repetition rule)."""
    if inside_hex_run(match.string, start, end):
        return False  # ``…AE2CA88421638572F921…``: digits inside a hash or a key's fingerprint
    digits = re.sub(r"\D", "", match.string[start:end])
    if de_tax_id_ok(digits):
        return True
    return de_tax_check_digit_ok(digits) and bool(DE_TAX_LABEL.search(match.string, max(0, start - 48), start))



def reads_as_secret(value: str) -> bool:
    """A letter and a digit, a symbol or a capital after the first letter: not a word of prose."""
    return any(ch.isalpha() for ch in value) and (
        any(ch.isdigit() for ch in value) or any(not ch.isalnum() for ch in value)
        or any(ch.isupper() for ch in value[1:]))


# How a documented example of a key marks itself: the word, or a counting run where random characters would be.
EXAMPLE_MARK = re.compile(r"(?i)example|012345|123456|abcdef")


def check_vendor_token(match: re.Match, start: int, end: int):
    """A vendor's token shape, unless it marks itself as an example (``…tokenexample``, ``sbp_…abcdef``)."""
    return not EXAMPLE_MARK.search(match.string[start:end])

COMPARED_WORD = re.compile(r"(?i)secret|token|pass|pwd")


def check_compared_secret(match: re.Match, start: int, end: int):
    """``if (password !== "X")``: a literal compared with a credential is one, when it reads as one.

    Code compares a credential with names of modes and states too
    (``token === "Bearer"``), so the literal must not read as a word. A
    name whose only credential word is a bare ``key`` names a key of a map,
    a keyboard or a cache (``event.key === "ArrowUp"``, ``sortKey != "Name"``):
    only a key a secret is made of (``api_key``, ``private_key``) counts.
    """
    key = match.group("key")
    if key_strength(key) != "strong" and not COMPARED_WORD.search(key):
        return False
    spans = check_assignment(match, start, end)
    if not spans:
        return False
    (vstart, vend), = spans
    return spans if reads_as_secret(match.string[vstart:vend]) else False


# A module or package path: Go's ``secretmanager "cloud.google.com/go/secretmanager/apiv1"`` import alias has the
# shape of a directive, and ``crypto/rand`` or ``golang.org/x/crypto/ssh`` is what it names: a host then a path,
# or lower-case segments (a password with a slash has capitals or symbols: ``Kq7v/Lm2x!``).
MODULE_PATH = re.compile(r"[a-z0-9\-]+(?:\.[a-z0-9\-]+)+(?:/[\w.\-~@]+)+/?|[a-z0-9_\-]+(?:/[a-z0-9_.\-]+)+")


def check_directive_secret(match: re.Match, start: int, end: int):
    """``password "X";``: a credential word used as a directive or a call without parentheses, its one
    argument a quoted literal, is the credential when the literal reads as one (as a compared literal),
    unless it is a module's path (a Go import under an alias that names a secret manager)."""
    if MODULE_PATH.fullmatch(match.group("value")[1:-1]):
        return False
    return check_compared_secret(match, start, end)


def check_flag_token(match: re.Match, start: int, end: int):
    """``--token X``, ``-secret X``: X is a token when it is eight characters or more with a letter and a digit.

    Usage texts name the option's argument in capitals (``--api-token
    API_TOKEN``) and prose names the option ("--token is read from"); a
    token, unlike those, carries digits.
    """
    value, start, end, quoted = unquote(match.string[start:end], start)
    if not quoted:
        value = value.rstrip(".,;:!?)]")
        end = start + len(value)
    if len(value) < 8 or not plausible_secret(value) or value.startswith(("$", "%", "(", "{", "<", "[")):
        return False
    if _REFERENCE_LIKE.fullmatch(value) or not any(ch.isdigit() for ch in value):
        return False
    return [(start, end)] if any(ch.isalpha() for ch in value) else False

def check_short_password(match: re.Match, start: int, end: int):
    """``PSWD:=X``, ``user:admin pw:X``: a shortened password key, so the value must read as a secret.

    These keys also abbreviate other words (``pw`` for power, a width), so
    the value needs six characters, a letter and a digit or symbol or inner
    capital, and must not be code, a reference or a template.
    """
    value, vstart, vend, quoted = unquote(match.group("value"), match.start("value"))
    if not quoted:
        value = value.rstrip(".,;:)")
        vend = vstart + len(value)
    if len(value) < 6 or not plausible_secret(value) or value.startswith(("$", "%", "(", "{", "<")):
        return False
    if "(" in value or (not quoted and looks_like_code(value, match.string[vend:vend + 1])):
        return False
    return [(vstart, vend)] if reads_as_secret(value) else False

CHECKS = {
    "cli_password": check_cli_password,
    "compared_secret": check_compared_secret,
    "directive_secret": check_directive_secret,
    "flag_token": check_flag_token,
    "vendor_token": check_vendor_token,
    "short_password": check_short_password,
    "flag_password": check_flag_password,
    "prose_secret": check_prose_secret,
    "uk_nino": check_uk_nino,
    "de_tax_id": check_de_tax_id,
    "has_digit": check_has_digit,
    "assignment": check_assignment,
    "secret_block": check_secret_block,
    "kubernetes_secret": check_kubernetes_secret,
    "key_block": check_key_block,
    "slack_token": check_slack_token,
    "plausible": check_plausible,
    "auth_header": check_auth_header,
    "url_credentials": check_url_credentials,
    "cli_user": check_cli_user,
    "high_entropy": check_high_entropy,
    "email": check_email,
    "jwt": check_jwt,
    "phone": check_phone,
    "phone_labelled": check_phone_labelled,
    "card": check_card,
    "iban": check_iban,
    "ssn": check_ssn,
    "public_ip": check_public_ip,
    "public_ipv6": check_public_ipv6,
}
