"""A credential's key and the value assigned to it: does a name name a credential, and is its value one?

The scanner in ``context`` finds a key and reads the value its syntax gives
it; this module judges both, apart from where they were found: the key
vocabulary (English, eight other languages' password words, misspellings,
``bindpw``-like names) and the tests a value must pass to be a credential
rather than a reference, a placeholder, code or prose. ``signatures`` and
``columns`` judge their values with the same ``value_ok``.
"""

from __future__ import annotations

import functools
import re
import unicodedata

from bastion_agent.sanitizing import code_values
from bastion_agent.sanitizing.validators import (
    BOOLEANISH,
    FUNCTION_WORDS,
    HEADER_NAME,
    MESSAGE_WORD,
    SEQUENCES,
    TEMPLATE_PARTS,
    classify_key_words,
    is_padded_binary_base64,
    is_passphrase,
    is_placeholder,
    is_reference,
    is_whole_reference,
    key_words,
    looks_like_code,
    looks_random_for_a_weak_key,
)

# The version of what this module finds: bump it with any change that makes some text sanitize
# differently (detection_version.py; docs/sanitize.md, "The cache key").
DETECTION_VERSION = 6

CODE_EXPRESSION = re.compile(r"[A-Za-z_$][\w.$]*(?:\s*(?:\(|\[|\.\w+\().*|\s*(?:\|\||&&|\?\?|\?|\+)\s*.*)")
REFERENCE_WORD = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|[a-z]+(?:_[a-z0-9]+)+|[a-z]+(?:[A-Z][a-z0-9]+)+")
# ``export DB_PASSWORD=X``, ``WACHTWOORD=X``: an environment variable set in shell or ``.env`` syntax, where a bare
# value is the string itself (a reference would be written ``$X``).
ENV_ASSIGNMENT = re.compile(r"[ \t]*(?:export[ \t]+)?[A-Z][A-Z0-9_]*=\Z")


# A mark that says characters were left out: ``[...]``, ``[…]``, ``…`` inside a value.
ELIDED = re.compile(r"\[(?:\.\.\.|…)\]|\w…\w")


# --- the key vocabulary -------------------------------------------------------------


@functools.lru_cache(maxsize=4096)  # code repeats its identifiers: classify each once
def credential_key(name: str) -> str | None:
    """"strong", "weak", "pin" or None: does the identifier ``name`` name a credential?

    Strong: a password-, secret- or token-like word (``db.password``,
    ``bindpw``, ``apiKey``, ``client_secret``); weak: ``key``, ``auth``,
    ``cred``-like words, whose value must also look random; "pin": a PIN,
    whose value is 4 to 12 digits.
    """
    words = key_words(_ascii(name))
    strength = classify_key_words(words, pins=True, strong_word=_pw_word)
    if strength == "weak" and "consumer" in words:
        return "strong"  # OAuth 1 ``oauth_consumer_key``: the client's credential
    return strength


# The password and secret words of German, Dutch, Portuguese, Spanish, French, Polish, Swedish and
# Norwegian/Danish (Italian writes "password"), ASCII-folded: ``WACHTWOORD``, ``SENHA_BANCO``,
# ``contraseña_db``, ``mot_de_passe``, ``hasło``, ``lösenord``; and words of other credentials.
FOREIGN_WORDS = frozenset({"passwort", "kennwort", "wachtwoord", "senha", "contrasena", "contrasenya", "passe",
                           "motdepasse", "haslo", "hasla", "losenord", "passord", "geheim", "geheimnis",
                           "psk", "verifier",
                           # the common misspellings of secret: a key is read as its author meant it
                           "secert", "sercet", "secrect"})
FOLD = str.maketrans("łŁøØæÆß", "lLoOaAs")


@functools.lru_cache(maxsize=4096)
def _ascii(name: str) -> str:
    """The name with its accents dropped (``contraseña`` -> ``contrasena``), for the key vocabulary."""
    if name.isascii():
        return name
    decomposed = unicodedata.normalize("NFKD", name.translate(FOLD))
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def _pw_word(word: str) -> bool:
    """``bindpw``, ``rootpw``, ``adminpw``: a short word ending in ``pw`` (nslcd, slapd, kickstart);
    or a password word of another language."""
    return (word.endswith("pw") and 2 < len(word) <= 8) or word in FOREIGN_WORDS


# --- values ---------------------------------------------------------------------------


def value_ok(value: str, strength: str, *, quoted: bool, label: bool, config: bool = False,
             phrase: bool = False, env_line: bool = False) -> bool:
    """Is this value of a credential key a credential (not a reference, a placeholder, code or prose)?

    ``config``: the key starts its line and its value runs to the line's end (``.env``, INI, YAML),
    where a bare value is data, not a variable: letters alone can be a password there.
    ``phrase``: the key names a passphrase, whose value may be several words.
    ``env_line``: the key is an environment variable set in shell or ``.env`` syntax (``ENV_ASSIGNMENT``),
    where a camelCase or snake_case word is the string itself, never a variable.
    """
    value = value.strip()
    if not value or is_whole_reference(value):
        return False
    if strength == "pin":
        return value.isdigit() and 4 <= len(value) <= 12
    lowered = value.lower()
    if lowered in BOOLEANISH or is_placeholder(value) or not any(ch.isalnum() for ch in value):
        return False
    if re.match(r"[a-z][a-z0-9+.\-]*://", value, re.I) or value.startswith(("/", "./", "~/", "../", "<", "unix:/")) and (
            not code_values.is_base64_blob(value)):
        return False  # a URL (its user-info is the URL rule's) or a path (not base64 that starts with a slash)
    if code_values.VERSION.fullmatch(value):
        return False  # ``credentials-binding:1.17``: a plugin's version
    if SEQUENCES.search(value) or HEADER_NAME.fullmatch(value) or ELIDED.search(value):
        return False  # ``fPk/Gya[...]4/j5bSuhDQ``: a value shown cut short, as documents quote a key's shape
    words = value.split()
    if (len(words) >= 3 and not phrase and all(MESSAGE_WORD.fullmatch(w) for w in words)
            and any(credential_key(word.strip(".,:;()")) or word.lower().strip(".,:;!?()") in FUNCTION_WORDS
                    for word in words)):
        return False  # "changes the master password", "can't be blank": a description, a message
    if len(words) >= 6 and not (phrase and len(words) <= 12 and all(w.isalnum() for w in words)
                                or strength == "strong" and is_passphrase(value)):
        return False  # a sentence, a message (a passphrase's words are its value)
    if not quoted and (config or env_line) and re.fullmatch(r"[A-Za-z]+", value) and _config_word(value, strength):
        return True  # ``SMTP_PASSWORD=kxqmvbnrtwpzla``, ``export DO_API_TOKEN=kxq…``: letters alone, as data
    if not quoted:
        if value.endswith(":") or value.startswith(":") or CODE_EXPRESSION.fullmatch(value) and (
                not is_padded_binary_base64(value)):
            return False  # ``user + ":" + pw``: code; ``CmnmcixuxhcE+cLfExZnDQ==`` is base64 of random bytes
        if re.fullmatch(r"[A-Za-z]+", value) or is_reference(value) or (
                REFERENCE_WORD.fullmatch(value) and not env_line and not _config_camel(value, strength, config)):
            return False  # a word or an identifier: in code a variable, in text a label
        if looks_like_code(value, ""):
            return False  # settings.API_TOKEN, config.db.password
        if label and not is_telling(value):
            return False  # "Password: see the vault": a label and prose
    if strength == "weak":
        compact = TEMPLATE_PARTS.sub("", value).replace("-", "")  # ``neo4j/[password]``: the placeholder is no part of it
        return len(compact) >= 16 and " " not in value and looks_random_for_a_weak_key(compact)
    return len(value) >= 4


# Letters-only values of a config key that are not passwords: types, switches, stand-ins.
CONFIG_WORDS = frozenset({"string", "str", "text", "int", "integer", "number", "bool", "boolean", "secret",
                          "password", "passwd", "token", "required", "optional", "changeme", "empty", "none",
                          "null", "nil", "undefined", "unset", "default", "hidden", "redacted", "masked",
                          "sensitive", "value", "example", "sample", "dummy", "test", "prompt", "ask", "env",
                          "vault", "file", "disabled", "enabled", "auto", "random", "generated", "secure",
                          "omitted", "notset", "placeholder", "xxx", "your", "mypassword", "yourpassword",
                          "inherit"})  # GitHub Actions: ``secrets: inherit`` passes the caller's secrets on


def _config_word(value: str, strength: str) -> bool:
    """A letters-only config value that can be a password (``SMTP_PASSWORD=kxqmvbnrtwpzla``): a strong
    key, four letters or more, not a type, a switch or a stand-in, and not a camelCase or capitals name of
    a credential (``mySecret = clientSecret``, ``password=PGPASSWORD`` are code; ``kxqpwdzl`` and
    ``veNeDkApSJvBOHFPYXPpwZQ`` hold "pw" by chance and go)."""
    named = (any(ch.isupper() for ch in value[1:]) and credential_key(value) is not None
             and (value.isupper() or _spoken_name(value)))  # ``rS9pZ6PwY9x7`` holds "Pw" by chance
    return strength == "strong" and len(value) >= 4 and value.lower() not in CONFIG_WORDS and not named


def _spoken_name(value: str) -> bool:
    """``clientSecret``, ``dbPassword2``: a programmer's name, each camelCase word letters then digits
    (``is_worded_name``) and each of four letters or more one a person could say (``is_wordlike``);
    ``YfbigneTmbwnPwFyahk`` splits into such pieces by chance, but ``Tmbwn`` is no word, and
    ``sifNpygWiwHwPwFq`` has more pieces of one or two letters than a name has."""
    pieces = re.findall(r"[A-Z]?[a-z]+|[A-Z]+", value)
    return (code_values.is_worded_name(value) and sum(len(piece) < 3 for piece in pieces) <= 2
            and all(code_values.is_wordlike(piece) for piece in pieces if len(piece) >= 4))


def _config_camel(value: str, strength: str, config: bool) -> bool:
    """``value: fribxUdl7d76`` in a config file: data shaped like camelCase by chance, which goes as letters
    alone do there (``_config_word``); snake_case and UPPER_CASE stay the names of other settings."""
    return config and "_" not in value and _config_word(value, strength)


def is_directive_value(value: str) -> bool:
    """A directive's value has a digit, or a symbol that is not the punctuation of a sentence."""
    return any(ch.isdigit() for ch in value) or any(not ch.isalnum() and ch not in ".,;:!?" for ch in value)


def is_telling(value: str) -> bool:
    """Has a digit, a symbol or a capital after its first letter: not a word of a sentence."""
    return (any(ch.isdigit() for ch in value) or any(not ch.isalnum() and not ch.isspace() for ch in value)
            or any(ch.isupper() for ch in value[1:]))
