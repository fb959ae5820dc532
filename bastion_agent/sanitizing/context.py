"""Credential values found by their context: the key they are assigned to, then the syntax.

A detector that decides by a value's *shape* misses ``db_password =
p@ss;word#2024`` (its characters end a token) and cuts ``Tr0ub4dor&3-prod``
at the ``&``. A person decides by the key: a value assigned to a
credential-named key is a secret whatever it holds, up to where its syntax
says it ends. This module is that one mechanism:

- a **key vocabulary** (``credential_key``): the words of an identifier
  (``db_password``, ``db.password``, ``DB_PASSWORD``, ``dbPassword``,
  ``bindpw``) name a credential (password, passwd, pwd, pw, pass,
  passphrase, secret, token, api key, credential, PIN...), unless a later
  word says the value only describes one (``password_length``,
  ``token_url``) or an earlier one negates it (``max_password``);
- a **value scanner per syntax** (``_value``): after the key, the operator
  and what surrounds it say which syntax this is, and each syntax ends its
  value at its own terminator: the closing quote (escapes honoured) of a
  quoted value, the end of the line in INI/TOML/YAML/.properties/.env, ``;``
  in a connection string, ``&`` in a URL query, the next whitespace on a
  command line, in ``export`` and in prose, ``</`` for an XML element, the
  quote of a string that holds ``KEY=value`` (``putenv("PW=...")``);
- a few **positional** command lines whose password has no key at all
  (``net use ... /user:X PASS``, ``net user NAME PASS``, ``htpasswd -b``,
  ``smbclient -U user%PASS``, ``sqlplus user/PASS@db``).

What stays: a value that is *entirely* a reference (``${DB_PASSWORD}``,
``{{ .Values.pw }}``, ``%(pw)s``, ``<secret>``, ``$PW``, ``%PW%``), an
obvious placeholder, code (``getPassword()``, ``config.password``), a
boolean, a path or URL, a sentence. A value that merely *contains* ``${``
goes whole. ``scan`` returns ``(start, end)`` spans; ``Sanitizer.findings``
turns them into findings of the rule ``credential-value``.

The scan is driven by a few literal stems (``pass``, ``pw``, ``secret``,
``token``, ``key``, ``cred``, ``auth``, ``pin``) searched with
``str.find`` in the lowered text, so text without them costs a handful of
memchr-speed passes; each hit costs a look at its identifier and its line.
"""

from __future__ import annotations

import re

from bastion_agent.sanitizing import code_lookups, code_values, command_lines, keyed_values, signatures, validators
from bastion_agent.sanitizing.assigned_values import (
    CODE_EXPRESSION,
    CONFIG_WORDS,
    ENV_ASSIGNMENT,
    REFERENCE_WORD,
    credential_key,
    is_directive_value,
    is_telling,
    value_ok,
)
from bastion_agent.sanitizing.validators import (
    SOURCE_FILE_KEY,
    encodes_placeholder,
    in_template_action,
    is_doc_field,
    names_a_credential,
    is_passphrase,
    is_whole_reference,
    key_words,
    looks_random,
)

# The version of what this module finds or how it replaces it: bump it with any
# change that makes some text sanitize differently, so that every installation
# sanitizes its texts again (detection_version.py; docs/sanitize.md, "The cache key").
DETECTION_VERSION = 15

STEMS = ("pass", "pw", "secret", "token", "key", "cred", "auth", "pin", "psk", "verifier", "salt", "nonce",
         "secert", "sercet", "secrect", "seed",
         # the password words of de, nl, pt, es, pl, sv, no/da (fr "mot de passe" and de "Passwort" hold "pass")
         "kennw", "wachtw", "senha", "contrase", "hasl", "hasł", "senord", "geheim")
# Letters of the key names of European languages count too (``contraseña``, ``lösenord``, ``hasło``).
IDENT = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-"
                  "ñçãõáéíóúàèìòùâêîôûäëïöüåøæłśżźćńęÑÇÃÕÁÉÍÓÚÀÈÌÒÙÂÊÎÔÛÄËÏÖÜÅØÆŁŚŻŹĆŃĘß")
QUOTES = "\"'`"
MAX_NAME = 100  # a longer identifier is no key name (and its scan stops there)
REACH = 4096  # how far from a key its line is read, either way
MAX_VALUE = 1024  # a value longer than this on its line is a blob, not a credential: its first 1 KiB goes
# Words of a password's family: the only keys whose value is read from prose ("the password is X").
PROSE_WORDS = frozenset({"password", "passwort", "passphrase", "passcode", "pw", "pwd", "pin", "passwd"})
SPACE = " \t"
FORMATTED = re.compile(r"\.(?:format|formatted|replace|join|split|strip)\(|[ \t]*%[ \t]*[(\w]|[ \t]*\+[ \t]*\w")


# --- the scanner -------------------------------------------------------------------------


def scan(text: str, lowered: str | None = None) -> list[tuple[int, int]]:
    """The spans of credential values in ``text`` (keyed and positional); ``lowered``: ``text.lower()``, if at hand."""
    lowered = text.lower() if lowered is None else lowered
    if len(lowered) != len(text):
        lowered = "".join(ch.lower() if len(ch.lower()) == 1 else ch for ch in text)
    spans: list[tuple[int, int]] = []
    seen: set[int] = set()
    for stem in STEMS:
        position = lowered.find(stem)
        while position != -1:
            start, floor = position, max(0, position - MAX_NAME)
            while start > floor and text[start - 1] in IDENT:
                start -= 1
            end, ceiling = position + len(stem), min(len(text), position + len(stem) + MAX_NAME)
            while end < ceiling and text[end] in IDENT:
                end += 1
            if start not in seen and (start == 0 or text[start - 1] not in IDENT) and (
                    end == len(text) or text[end] not in IDENT):
                seen.add(start)
                span = _keyed(text, start, end)
                if span is not None:
                    spans.append(span)
            position = lowered.find(stem, end)  # the rest of this identifier was seen
    for start, end in signatures.scan(text, lowered):
        span = _accept(text, start, end, "strong", quoted=True, label=False, by_position=True)
        if span is not None:
            spans.append(span)
    if ("name" in lowered and "value" in lowered) or ("variable" in lowered and "default" in lowered):
        spans.extend(_siblings(text))
    for start, end in keyed_values.wrapped_values(text):
        span = _accept(text, start, end, "strong", quoted=True, label=False)
        if span is not None:
            spans.append(span)
    for start, end, bare in command_lines.candidates(text, lowered):
        span = _accept(text, start, end, "strong", quoted=not bare, label=bare)
        if span is not None:
            spans.append(span)
    return spans


def _siblings(text: str) -> list[tuple[int, int]]:
    """Values named by a sibling field: k8s ``- name:``/``value:``, ECS, Hadoop XML, Terraform (``keyed_values``)."""
    spans = []
    for start, end, strength in keyed_values.sibling_values(text, _sibling_strength):
        quoted = text[start - 1:start] in QUOTES or text[start - 1:start] in ">["
        # ``value: kxqmvbnrtwpzla`` on its own line is YAML data to the line's end, as in a config file
        line_start = text.rfind("\n", 0, start) + 1
        config = not quoted and keyed_values.YAML_VALUE_FIELD.fullmatch(text, line_start, start) is not None
        span = _accept(text, start, end, strength, quoted=quoted, label=False, config=config)
        if span is not None:
            spans.append(span)
    return spans


def _sibling_strength(name: str) -> str | None:
    strength = credential_key(name)
    return None if strength is None or name.lower() == "key" or SOURCE_FILE_KEY.fullmatch(name) else strength


def _keyed(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The value assigned to the identifier ``text[start:end]``, when it names a credential."""
    name = text[start:end].strip(".-")
    if not name or len(name) > 100:
        return None
    if text[max(0, start - 6):start] == "alias ":
        return None  # ``alias wpwd='wp widget delete'``: a shell alias names a command
    if is_doc_field(text, start):
        return None  # ``:param passwd: **DEPRECATED**``: a docstring names a parameter
    template = in_template_action(text, start)
    strength = credential_key(name)
    if strength is None or name.lower() == "key" or SOURCE_FILE_KEY.fullmatch(name):
        return None  # a bare ``key`` names a map's key (XML key="..."); ``src/chpasswd.c:`` a change log's file
    opening = text[start - 1] if start > 0 else ""
    if opening == "{" and text[start - 2:start] == "${" and (text[end:end + 2] in (":?", "?") or SHELL_DEFAULT.match(text, end)):
        default = SHELL_DEFAULT.match(text, end)  # ``${PW:?Missing PW}``: the message a shell prints when unset
        return _accept(text, *default.span("literal"), strength, quoted=True, label=False, key=name) if default else None
    flag = text[start] == "-"  # ``--password=X``: an option on a command line, whose value is one word
    after = end
    key_quoted = opening in QUOTES and text[end:end + 1] == opening
    if key_quoted:
        after += 1
    if text[after:after + 1] == "]":
        after += 1
    newline = text.rfind("\n", max(0, start - REACH), start)  # bounded: a megabyte line costs no more than itself
    line_start = newline + 1 if newline != -1 else max(0, start - REACH)
    line_end = text.find("\n", after, after + REACH)
    line_end = min(len(text), after + REACH) if line_end == -1 else line_end
    before = text[line_start:start - (1 if opening else 0)]
    position = after
    while position < line_end and text[position] in SPACE:
        position += 1
    operator = _operator(text, position, line_end)
    at_line_start = _line_start(before, opening)
    if operator is None:
        return _unmarked(text, start, end, position, line_end, strength, before, opening, key_quoted, at_line_start)
    kind, width = operator
    if code_values.names_no_value(text, kind, position, width, line_end, key_quoted, before, opening):
        return None
    position += width
    if kind == ">" and text.startswith("<![CDATA[", position):
        cdata = keyed_values.cdata_value(text, position, line_end)
        return _accept(text, *cdata, strength, quoted=True, label=False) if cdata else None
    if kind == ">":
        close = text.find("<", position, min(len(text), position + MAX_VALUE))
        if close == -1:
            return None
        return _accept(text, position, close, strength, quoted=True, label=False)
    while position < line_end and text[position] in SPACE:
        position += 1
    if kind == "," and (position >= line_end or text[position] not in QUOTES):  # ("" is in every string)
        return None  # ``("password", variable)``: a name handed to code
    if kind == ",":
        close = _closing(text, position, line_end) if text[position:position + 1] in QUOTES else None
        inner = text[position + 1:close] if close is not None else ""
        if REFERENCE_WORD.fullmatch(inner) or re.fullmatch(r"[A-Za-z]+", inner):
            return None  # ``("password", "password_confirm")``: a list of field names
    if kind == ":" and not key_quoted and at_line_start and name[:1].isupper() and not name.isupper():
        label = True  # ``Password: ...`` at the start of a line: a form label in prose
    else:
        label = kind == ":" and not at_line_start and not key_quoted
    flow = kind == ":" and not key_quoted and keyed_values.FLOW_MAPPING.search(before) is not None
    helm, line_end = _helm_set(text, before, kind, position, line_end)
    commented = (keyed_values.commented_setting(text, name, before, position, line_end)
                 or kind == "=" and keyed_values.ENV_FLAG.search(before) is not None or helm is not None)
    if flow or commented:
        label = False  # ``- { username: user1, password: X }``, ``# DB_PASSWORD=X``: data, not a label
    terminator = "," if flow else HELM_PAIR if helm is not None else _terminator(
        text, start, "" if key_quoted else ("-" if flag and not opening.strip() else opening), before, at_line_start, label)
    if flag and text[position:position + 1] == "-":
        return None  # ``--password=-``, ``(-p+ --password=-)``: standard input, or an option's usage
    if opening == "(" and kind == "=" and LDAP_WILDCARD.match(text, position):
        return None  # ``(password=MA*)``: an LDAP filter's substring search, a guess being tried
    listed = kind == "=" and opening in "\"'" and opening and before.strip() == "-"  # compose's ``- 'PW=X'``
    connection = flow or commented or listed or (terminator == ";" and keyed_values.CONNECTION_FIELD.search(text, line_start, start) is not None
                                       or terminator == " " and keyed_values.KEYWORD_CONNECTION.search(before) is not None)
    return _read_value(text, position, line_end, strength, terminator, label, phrase="phrase" in name.lower(),
                       key=name, data=flag and kind == "=", config=connection, template=template)


# ``${DB_PASSWORD:-X}``, ``${PW:=X}``, ``"${PW:-"X"}"``: the literal a shell uses when the variable is unset
# (not another expansion: ``${PW:-$(< "$F")}`` is a reference).
SHELL_DEFAULT = re.compile(r":?[-=](?P<q>[\"']?)(?P<literal>[^\"'$`}\s][^\"'$`}\n]{0,1000}?)(?P=q)\}")


def _helm_set(text: str, before: str, kind: str, position: int, line_end: int) -> tuple[re.Match | None, int]:
    """``--set a.password=X`` on a helm command line: the match of the option before the key (or None), and
    where the value's line ends: at the parenthesis or quote that opened before ``--set``, if one did."""
    helm = keyed_values.HELM_SET.search(before) if kind == "=" and "--set" in before else None
    if helm is not None and helm.group(0)[:1] in "(\"'":
        line_end = _option_closing(text, position, line_end, {"(": ")"}.get(helm.group(0)[0], helm.group(0)[0]))
    return helm, line_end


def _option_closing(text: str, position: int, line_end: int, closer: str) -> int:
    """``(--set a.password=X)``, ``"--set a.password=X"``: where the parenthesis or quote opened before the
    option closes (at a ``closer`` before a space, a stop or the line's end), or ``line_end``."""
    close = text.find(closer, position, line_end)
    while close != -1 and close + 1 < line_end and not text[close + 1].isspace() and text[close + 1] not in ".,;:)":
        close = text.find(closer, close + 1, line_end)
    return line_end if close == -1 else close


def _operator(text: str, position: int, line_end: int) -> tuple[str, int] | None:
    ahead = text[position:position + 3]
    for token in (":::=", "::=", ":=", "=>", "+=", "?=", "===", "==", "="):
        if ahead.startswith(token) or text[position:position + len(token)] == token:
            return "=", len(token)
    if ahead.startswith(":") and not ahead.startswith("::"):
        return ":", 1
    if ahead.startswith(","):
        return ",", 1
    if ahead.startswith(">"):
        return ">", 1
    return None


def _line_start(before: str, opening: str) -> bool:
    """Only indentation, a list dash, ``export``/``set``/``$``/``-D`` or a quote before the key."""
    stripped = before.strip()
    if opening in QUOTES + "$":
        stripped = stripped[:-1] if stripped.endswith(opening) else stripped
    return stripped in ("", "-", "export", "set", "\\set", "setx", "declare -x", "ENV", "-D", "readonly", "local", "$",
                        "var", "let", "const", "my", "our", "static")


def _terminator(text: str, start: int, opening: str, before: str, at_line_start: bool, label: bool) -> str:
    """Which syntax the value is in, by what stands before its key."""
    if opening in "\"'`" and opening:
        return opening  # ``putenv("PW=...")``, ``"--password=..."``: the string's own quote ends it
    previous = before.rstrip()[-1:] if before.rstrip() else ""
    if opening in ("?", "&"):
        return "&"  # a URL query or a form body: ``&`` right before the key says so, whatever came earlier
    if opening == ";" or previous == ";" or (";" in before and "=" in before):
        return ";"  # a connection string: Server=...;Password=...;
    if opening == "," or previous == ",":
        return ","  # mount -o user=x,password=y
    if opening in ("-", "/") or before.strip().startswith("export ") or before.strip() == "export":
        return " "  # a command line flag, shell export: a word
    if label or not at_line_start:
        return " "
    return "\n"  # INI, TOML, YAML, .properties, .env: the end of the line


# what ends an unquoted value, by the terminator its syntax implies (a quote ends a URL's query value:
# inside a URL it would be percent-encoded); in a word-delimited value the full-width comma, semicolon
# and full stops of Chinese and Japanese prose end it as their ASCII forms do
# A template's field in braces (``str.format``, docs): lower-case words or an index. Not after ``;``,
# where ODBC quotes a password in braces (``Pwd={a;b}``).
TEMPLATE_FIELD = re.compile(r"[a-z_][a-z0-9_]*(?: [a-z0-9_]+){0,4}|\d+")
# ``--set a=b,auth.password=X``: a chart value on a command line, ended by the comma of the next pair, a
# space or the shell's quote (helm reads ``\,`` for a comma inside a value).
HELM_PAIR = "--set"
_WIDE_STOPS = "\uff0c\uff1b\u3001\u3002"
_STOPS = {terminator: re.compile(f"[{re.escape(stops)}]") for terminator, stops in
          {" ": " \t" + _WIDE_STOPS, ";": ";\"", "&": "&# \t\"'`", ",": ", \t" + _WIDE_STOPS,
                              HELM_PAIR: ", \t\"'"}.items()}


def _read_value(text: str, position: int, line_end: int, strength: str, terminator: str,
                label: bool, phrase: bool = False, key: str = "", data: bool = False, config: bool = False,
                template: bool = False) -> tuple[int, int] | None:
    """The span of the value at ``position``, ended by its syntax's ``terminator``; ``data``: an option's
    ``--name=value`` on a command line, where no code is: a bare word is the value; ``config``: a field of
    a connection string, data like a config file's (letters alone can be its password); ``template``: the
    key sits inside a ``{{ ... }}`` action, where only a quoted value is a literal."""
    literal = _literal_in_code(text, position, line_end, strength)
    if literal is not None:
        return literal if literal[1] > literal[0] else None
    default = code_values.DEFAULTED.match(text, position, line_end)
    if default is not None:  # ``os.getenv("PW") or "X"``, ``process.env.PW || "X"``: the literal is used when unset
        return _accept(text, *default.span("literal"), strength, quoted=True, label=False, key=key)
    if (position := validators.after_tag(text, position, line_end)) is None:  # ``!Sub "X…"``: the value follows
        return None  # ``Password: !GetAtt DbSecret.Password``, ``api_key: !env_var API_KEY``: where it lives
    first = text[position:position + 1]
    entity = ENTITY_QUOTE.match(text, position)
    if entity:  # ``&#34;value&#34;``: code shown in a web page, its quotes written as entities
        close = text.find(entity.group(0), entity.end(), line_end)
        return _accept(text, entity.end(), close, strength, quoted=True, label=False, key=key) if close != -1 else None
    if first == "\\" and text[position + 1:position + 2] == '"':
        close = text.find('\\"', position + 2, line_end)
        return _accept(text, position + 2, close, strength, quoted=True, label=False, key=key) if close != -1 else None
    if template and first not in QUOTES:
        return None  # ``{{- $password := .Values.auth.password }}``: an expression of the template
    doubled = keyed_values.DOUBLED_QUOTED.match(text, position, line_end)
    if doubled is not None:  # ``EXEC('CREATE LOGIN x WITH PASSWORD = ''X'' ')``: SQL run from a string
        return _accept(text, *doubled.span("literal"), strength, quoted=True, label=False, key=key)
    statement = validators.CODE_SPAN_STATEMENT.match(text, position + 1) if first == "`" else None
    if statement is not None and credential_key(statement.group("name")) is not None:
        return None  # ``Token: `export DO_API_TOKEN=…` ``: a command in a code span; its own key is read on its own
    if first and first in QUOTES and first != terminator:
        close = _shell_closing(text, position, line_end) if first == '"' else _closing(text, position, line_end)
        if close is None:  # unclosed: the value runs on, at most a value's longest
            return _accept(text, position + 1, min(line_end, position + 1 + MAX_VALUE), strength, quoted=False, label=label)
        if FORMATTED.match(text, close + 1) or text.startswith(code_values.API_LISTING, close + 1):
            return None  # ``'{0}:{1}'.format(user, pw)``, ``"%s" % pw``: a format string of code; an API listing
        return _accept(text, position + 1, close, strength, quoted=True, label=False, key=key, phrase=phrase)
    if terminator in QUOTES:
        form = FORM_FIELD.search(text, position, line_end)  # ``"token=abc&secret=xyz"``: a form body in a string
        if form is not None and text.find(terminator, position, form.start()) == -1:
            line_end = form.start()
    if first == "[" and strength == "strong":
        return _list_value(text, position, line_end)
    if first == "{" and text[position + 1:position + 2] in "\"'" and terminator != ";" and not any(
            len(item) >= 16 and looks_random(item, base64_bits=3.5)
            for item in code_values.JSON_STRING.findall(text, position, line_end)):
        return None  # ``signingKey: {"kty": "oct", "k": "--"}``: an object holding no key material
    if first == "{" and terminator != ";":
        close = text.find("}", position, line_end)
        if close != -1 and TEMPLATE_FIELD.fullmatch(text, position + 1, close):
            return None  # ``{your token}``, ``{resp}``, ``{0}``: a template's field, filled in later
    if first == "{" and terminator == ";":
        close = text.find("}", position, line_end)  # ODBC: Pwd={a;b}
        if close != -1:
            return _accept(text, position + 1, close, strength, quoted=True, label=False)
    if terminator == "\n":
        comment = keyed_values.TRAILING_COMMENT.search(text, position, line_end)
        end = comment.start() if comment is not None else line_end
    else:
        limit = min(line_end, position + MAX_VALUE)  # never past a value's longest: repeated keys stay linear
        stop = _STOPS.get(terminator) or re.compile(re.escape(terminator))
        found = stop.search(text, position, limit)
        end = found.start() if found else limit
    end = min(end, position + MAX_VALUE)
    while end > position and text[end - 1] in " \t\r":
        end -= 1
    if terminator in QUOTES:
        while end > position and text[end - 1] == "&":
            end -= 1  # ``"oauth_token=abc&" "oauth_token_secret=…"``: a form body continued in the next string
    if terminator == " " and label:
        while end > position and text[end - 1] in ".,;:!?)\"'":
            end -= 1
    return _accept(text, position, end, strength, quoted=False, label=label,
                   config=(terminator == "\n" and not label) or data or config, phrase=phrase, key=key)


def _literal_in_code(text: str, position: int, line_end: int, strength: str) -> tuple[int, int] | None:
    """A secret written as code's data: a byte array, or a random literal in a decoding call; ``(p, p)``
    when the value is such code but holds nothing secret; None when it is neither."""
    if strength == "pin":
        return None
    found = code_values.byte_array(text, position, line_end)
    if found is not None:
        return found
    found = code_values.HASHED.match(text, position, line_end) if strength == "strong" else None
    if found is not None:
        return _accept(text, *found.span("literal"), strength, quoted=True, label=False) or (position, position)
    found = code_values.DECODED.match(text, position, line_end)
    if found is not None:
        compact = found.group("literal").replace(" ", "").replace("-", "")
        if len(compact) >= 16 and looks_random(compact) and not code_values.NAME_CONSTANT.fullmatch(compact):
            return found.span("literal")
    return None


def _list_value(text: str, position: int, line_end: int) -> tuple[int, int] | None:
    """``"tokens": ["99b8…", "79eb…"]``: the items, when every one looks like a credential (not ``["read", "write"]``)."""
    items = keyed_values.list_items(text, position, line_end)
    if not items or not all(e - s >= 8 and is_telling(text[s:e]) and value_ok(text[s:e], "strong", quoted=True, label=False)
                            for s, e in items):
        return None
    return items[0][0], items[-1][1]


# The characters ``_shell_closing`` acts on: it jumps from one to the next.
SHELL_MARK = re.compile(r"[\\\"'$)}]")


def _shell_closing(text: str, position: int, line_end: int) -> int | None:
    """Where a double quote opened at ``position`` closes when what it holds starts as shell's ``${...}`` or
    ``$(...)``: quotes inside the expansion are its own (``"${PW:-$(< "$F")}"``), so the closing quote is
    the first one after the expansion's end, looked for within a value's longest so that a line of keys
    whose expansions never close stays linear. Any other string: ``_closing``."""
    if text[position + 1:position + 3] not in ("${", "$("):
        return _closing(text, position, line_end)
    line_end = min(line_end, position + 2 + MAX_VALUE)
    depth, inner = 0, None  # ``inner``: the quote open inside the expansion
    found = SHELL_MARK.search(text, position + 1, line_end)
    while found is not None:
        index, ch = found.start(), found.group()
        if ch == "\\":
            index += 1
        elif inner is not None:
            if ch == inner:
                inner = None
        elif ch in "\"'" and depth > 0:
            inner = ch
        elif ch == '"':
            return index
        elif ch == "$" and text[index + 1:index + 2] in "({":
            depth += 1
            index += 1
        elif ch in ")}" and depth > 0:
            depth -= 1
        found = SHELL_MARK.search(text, index + 1, line_end)
    return None


def _closing(text: str, position: int, line_end: int) -> int | None:
    """Where the quote opened at ``position`` closes on its line (backslash escapes; '' in single quotes)."""
    quote = text[position]
    index = position + 1
    while index < line_end:
        ch = text[index]
        if ch == "\\" and quote != "'" or ch == "\\" and text[index + 1:index + 2] == "'":
            index += 2
            continue
        if ch == quote:
            if quote == "'" and text[index + 1:index + 2] == "'":
                index += 2
                continue
            return index
        index += 1
    return None


def _accept(text: str, start: int, end: int, strength: str, *, quoted: bool, label: bool, config: bool = False,
            phrase: bool = False, by_position: bool = False, key: str = "") -> tuple[int, int] | None:
    """The span of an accepted value. ``by_position``: a signature's argument (``ConvertTo-SecureString
    'PlainTextPassword'``), which is a credential even when it reads like a name. ``key``: the name the
    value is assigned to, when it has one (a token's key says the value is generated)."""
    if end <= start:
        return None
    value = text[start:end]
    if not quoted:
        stripped = value.rstrip()
        end = start + len(stripped)
        value = stripped
        if value.endswith(";") and CODE_EXPRESSION.fullmatch(value[:-1].strip() or "x"):
            return None
        if code_values.is_code_reference(value) or (key and code_lookups.is_same_name_member(value, key)):
            return None  # ``getPassword();``, ``credentials.password,``, ``X = pkg.X``: code, not a value
    if quoted and not by_position and (code_values.is_name_constant(value, key) or code_values.is_code_between_strings(value)
                   or (code_values.is_camel_name(value) and credential_key(value) is not None
                       and (text[end + 1:end + 2] == ";" or text.startswith(" ->", end + 1)))):
        return None  # ``BLOB = "PKCS8_PRIVATEKEY"``, ``X = "KDFKeySecret";``, ``"&pw=" + f(x)``: a name, code
    if not by_position and code_values.is_stand_in(value, key, backtick=quoted and text[start - 1:start] == "`"):
        return None  # ``token=different-token``, ``"Enter password: "``: a stand-in, a prompt, a path
    if not by_position and encodes_placeholder(value):
        return None  # ``token: MGE6eHh4eHh4…``: "0a:xxxxxx…" in base64, an example encoded as the field wants it
    if not quoted and value.isdigit() and key and credential_key(key_words(key)[-1] if key_words(key) else key) is None:
        return None  # ``PASSWORD_NO_MATCH = 1133``: a number under a name ending in another word, a code
    if key and names_a_credential(value, key):
        return None  # ``adminPasswordKey: postgres-password``: the name of a Secret's key
    if key and code_values.is_pgp_fingerprint(text, start, key, value):
        return None  # ``GPG_KEY=BCA4…785C`` beside ``gpg --recv-keys``: a public key's fingerprint
    env_line = not quoted and ENV_ASSIGNMENT.match(text, text.rfind("\n", 0, start) + 1, start) is not None
    if not value_ok(value, strength, quoted=quoted, label=label, config=config, phrase=phrase, env_line=env_line):
        return None
    lead = len(value) - len(value.lstrip())
    end -= len(value) - len(value.rstrip())
    return (start + lead, end) if end > start + lead else None


def _unmarked(text, start, end, position, line_end, strength, before, opening, key_quoted, at_line_start):
    """No operator after the key: an XML key/value attribute pair, an element with attributes, a setter's
    argument, a directive, or prose."""
    if key_quoted and re.search(r"(?i)(?:key|name|id|property)\s*=\s*$", before):
        return _attribute_pair(text, end + 1, strength)
    if opening == "<":
        tag = XML_ATTRIBUTES.match(text, end, line_end)  # ``<password name="admin">value</password>``
        close = text.find("<", tag.end(), min(len(text), tag.end() + MAX_VALUE)) if tag else -1
        return _accept(text, tag.end(), close, strength, quoted=True, label=False) if close != -1 else None
    if text[end:end + 1] == "(" and key_words(re.split(r"\.|->|::", text[start:end])[-1])[:1] == ["set"]:
        argument = SETTER_ARGUMENT.match(text, end, line_end)  # ``user.set_password("X")``, ``setApiKey('X')``
        return _accept(text, *argument.span("literal"), strength, quoted=True, label=False,
                       key=text[start:end]) if argument else None
    if strength == "weak":
        return None
    name = text[start:end]
    if strength == "pin":
        return _pin(text, start, end, line_end)
    if at_line_start and position < line_end and position > end:
        # ``bindpw Tp4!Zx8c``, ``requirepass ...``, netrc ``password X``: a directive and one word
        rest = text[position:line_end].rstrip()
        last = key_words(name)[-1] if key_words(name) else ""
        setter = before.strip() in ("set", "\\set")  # psql ``\set PGPASS X``, a console's ``set SMBPass X``
        if (rest and " " not in rest and "\t" not in rest and (name.islower() or setter) and rest[0] not in QUOTES + "<"
                and rest[0] != "(" and ("pass" in last or last.endswith("pw")) and is_directive_value(rest)):
            return _accept(text, position, position + len(rest), strength, quoted=False, label=False)
        return None
    words = key_words(name)
    if not words or words[-1] not in PROSE_WORDS:
        return None
    quoted = QUOTED_WORD.match(text, position, line_end) if position > end and not key_quoted else None
    if quoted is not None and in_template_action(text, start):
        quoted = None  # ``"key" "admin-password" "length" 10``: a template function's arguments
    if quoted is not None and _quoted_word(quoted.group("value")):
        # ``with password "rsqrhxrisgpeo"``, debconf's ``root_password password 'X'``: the word, a quoted token
        return _accept(text, *quoted.span("value"), strength, quoted=True, label=False)
    prose = PROSE_VERB.match(text, position, line_end)
    if prose is None:
        return None
    return _read_value(text, prose.end(), line_end, strength, " ", True)


# "PIN 4711", "your PIN is 0815", "pin code: 2468": a PIN in prose. A lower-case "pin" needs "is" or
# "code" (``pin 13`` is a GPIO pin); four to eight digits, nothing word-like after them.
PIN_PROSE = re.compile(r"[ \t]+(?:code[ \t]+)?(?P<verb>(?:is|was|lautet|est|es|:)[ \t]+)?(?P<pin>\d{4,8})(?![\w.,]\d|[\w\-])")


def _pin(text: str, start: int, end: int, line_end: int) -> tuple[int, int] | None:
    match = PIN_PROSE.match(text, end, line_end)
    if match is None or (text[start:end] != "PIN" and not match.group("verb") and "code" not in match.group(0)):
        return None
    return match.span("pin")


# The attributes of an element named after a credential, up to the ``>`` that opens its value.
XML_ATTRIBUTES = re.compile(r"""(?:[ \t]+[\w:.\-]+[ \t]*=[ \t]*(?:"[^"<>\n]*"|'[^'<>\n]*'))+[ \t]*>""")
# A setter's one quoted argument: ``set_password("X")``, ``setToken('X')``.
SETTER_ARGUMENT = re.compile(r"""\([ \t]*(?P<q>["'])(?P<literal>[^"'\n]{1,1024})(?P=q)[ \t]*\)""")


# One quoted token of six characters or more, or a passphrase's words, right after a password word.
QUOTED_WORD = re.compile(r"""(?P<q>["'\u201c])(?P<value>[^\s"'\u201d]{6,64}|[a-z]{2,12}(?: [a-z]{2,12}){2,11})"""
                         r"""(?:(?P=q)|\u201d)(?![\w"'])""")
SNAKE_NAME = re.compile(r"[a-z]+(?:_[a-z0-9]+)+|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")


def _quoted_word(value: str) -> bool:
    """A quoted token (or a passphrase's words) after "password" that is a value: not a stand-in word,
    not a name of code, not a reference."""
    if " " in value:
        return is_passphrase(value)
    return (value.lower() not in CONFIG_WORDS and not SNAKE_NAME.fullmatch(value) and not is_whole_reference(value)
            and not code_values.is_camel_name(value)
            and not (code_values.NAME_LIKE.fullmatch(value) and credential_key(value) is not None))


ENTITY_QUOTE = re.compile(r"&#34;|&quot;|&#39;|&apos;")
FORM_FIELD = re.compile(r"&[A-Za-z_][\w.\-]*=")  # the next field of ``a=1&b=2``
# ``(password=MA*)``: in an LDAP filter a value ending in ``*`` asks for a prefix.
LDAP_WILDCARD = re.compile(r"[^()\s]*\*\)")
PROSE_VERB = re.compile(r"(?i)(?:is|was|will be|is now|is set to|has been changed to|changed to|ist|lautet)[ \t]+"
                        r"(?:now[ \t]+|still[ \t]+)?[:\u201c\u2018\"']?")


def _attribute_pair(text: str, position: int, strength: str) -> tuple[int, int] | None:
    """``<entry key="db.password" value="..."/>``: the ``value`` attribute of the same tag."""
    tag_end = text.find(">", position, position + MAX_VALUE)
    if tag_end == -1:
        return None
    match = re.compile(r"""(?i)\s(?:value|content|default)\s*=\s*(["'])""").search(text, position, tag_end)
    if match is None:
        return None
    close = text.find(match.group(1), match.end(), tag_end + 1 + MAX_VALUE)
    return _accept(text, match.end(), close, strength, quoted=True, label=False) if close != -1 else None


# --- positional passwords on command lines ----------------------------------------------
