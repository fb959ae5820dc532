"""``admin``: the administrator's side of publishing, what the SQL blocks of docs/publish.md do.

- ``admin migrate``: create or upgrade the schema (run it with the owner's DSN);
- ``admin add-bastion NAME``: its publishing role (``publish_NAME`` with
  dashes as underscores, or ``--role``), then its mapping and grants; with
  ``--own-graph``, graphs of its own rows too (faster one-bastion search,
  but every role then sees its name and approximate size in the catalogs);
- ``admin set-bastion NAME --own-graph on|off``: opt a registered bastion
  in or out of its own graphs (built, or dropped, in that transaction);
- ``admin remove-bastion NAME``: the role first (its sessions ended, its
  grants revoked, dropped), then its mapping, windows and documents;
- ``admin add-searcher ROLE``: a search role that reads every registered
  bastion, every group;
- ``admin add-searcher ROLE --groups hr,staff [--gateway GW] [--login]``: a
  reader, which row-level security limits to the rows sharing one of its
  groups; by default a role nobody logs in as (``NOLOGIN``), which the
  gateway ``GW`` may become (``SET ROLE``); run again with other groups,
  it has those instead;
- ``admin add-gateway ROLE``: the login role serve connects as, which reads
  nothing itself and may become the readers granted to it;
- ``admin add-model KEY --dim N``: register a model (publishing roles cannot).

The database is ``BASTION_ADMIN_DSN``: a role allowed to create roles (a
superuser before PostgreSQL 16, docs/publish.md says why). Passwords come
from ``--password-file`` or stdin, never the command line (which every
user of the machine can read in ``ps``), and reach the server as a
SCRAM-SHA-256 verifier, so the clear password is in no statement, log or
``--print`` output. Each step is idempotent: a command run twice ends
where it ended the first time. ``--print`` shows the SQL, each statement
under the role that runs it, instead of running it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
import sys
import unicodedata
from dataclasses import dataclass

from bastion_agent.core.errors import ConfigError, DatabaseError
from bastion_agent.publishing import connection

ADMIN_DSN_VARIABLE = "BASTION_ADMIN_DSN"
ROLE_RE = re.compile(r"[a-z_][a-z0-9_]{0,62}")  # no quoting needed, so none can go wrong
MIN_PASSWORD = 12
SCRAM_ITERATIONS = 4096  # PostgreSQL's default scram_iterations
OWN_GRAPH_VERSION = 8  # the schema migration that adds bastions.own_graph and set_own_graph
SCHEMA = "bastion_agent"  # publish_schema.SCHEMA (not imported: --help and --print need no psycopg)


@dataclass(frozen=True)
class Step:
    """One statement and the role that runs it (``superuser`` or ``owner``)."""

    runs_as: str
    sql: str


# --- names, passwords, literals ---------------------------------------------


def role_name(text: str) -> str:
    if not isinstance(text, str) or not ROLE_RE.fullmatch(text):
        raise ConfigError(f"a role name must be 1-63 lowercase letters, digits and underscores, not starting with"
                          f" a digit; got {text!r}")
    return text


def bastion_name(text: str) -> str:
    from bastion_agent.config.manifest import validate_bastion_name

    try:
        return validate_bastion_name(text)
    except ValueError as exc:
        raise ConfigError(f"the bastion name {exc}") from None


def group_names(text: str) -> list[str]:
    """``--groups hr,staff``: the sorted, distinct group names; one line for a name that is not one."""
    from bastion_agent.core import access

    names = [name.strip() for name in (text or "").split(",") if name.strip()]
    if not names:
        raise ConfigError("--groups needs at least one group name (a reader with none would read nothing)")
    try:
        return list(access.validate_groups(names))
    except ValueError as exc:
        raise ConfigError(f"--groups: {exc}") from None


def default_role(bastion: str) -> str:
    return "publish_" + bastion.replace("-", "_")


def literal(text: str) -> str:
    """A SQL string literal (standard_conforming_strings, on since PostgreSQL 9.1)."""
    if "\0" in text:
        raise ConfigError("a name must not contain a NUL character")
    return "'" + text.replace("'", "''") + "'"


def read_password(path: str | None, stdin=None) -> str:
    """The password from ``path`` (its first line) or stdin (a prompt when it is a terminal)."""
    stdin = sys.stdin if stdin is None else stdin
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.readline()
        except OSError as exc:
            raise ConfigError(f"cannot read the password file {path}: {exc.strerror}") from None
    elif stdin.isatty():
        import getpass

        text = getpass.getpass("password for the new role: ")
    else:
        text = stdin.readline()
    password = text.rstrip("\r\n")
    if len(password) < MIN_PASSWORD:
        raise ConfigError(f"the password must be at least {MIN_PASSWORD} characters (from --password-file or stdin)")
    return password


def scram_verifier(password: str, salt: bytes | None = None, iterations: int = SCRAM_ITERATIONS) -> str:
    """The SCRAM-SHA-256 verifier PostgreSQL stores for ``password`` (RFC 5802 and 7677).

    ``CREATE ROLE … PASSWORD 'SCRAM-SHA-256$…'`` stores it as given, so the
    clear password never reaches the server. The password is NFKC-normalised
    first, which is what SASLprep does to ordinary text.
    """
    salt = secrets.token_bytes(16) if salt is None else salt
    salted = hashlib.pbkdf2_hmac("sha256", unicodedata.normalize("NFKC", password).encode("utf-8"), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    b64 = lambda data: base64.b64encode(data).decode("ascii")  # noqa: E731
    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


# --- the steps ---------------------------------------------------------------


def login_role_steps(role: str, verifier: str | None) -> list[Step]:
    """Create the role, or bring an existing one back to a plain login role with this password
    (``verifier`` None: a role nobody logs in as, which only a gateway becomes)."""
    login = "LOGIN" if verifier is not None else "NOLOGIN"
    attributes = f"{login} NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS NOINHERIT"
    password = literal(verifier) if verifier is not None else "NULL"
    return [Step("superuser", f"""DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = {literal(role)}
               AND (rolsuper OR rolcreaterole OR rolcreatedb OR rolreplication OR rolbypassrls)) THEN
        RAISE EXCEPTION 'role % has administrative rights: choose another name', {literal(role)};
    ELSIF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = {literal(role)}) THEN
        ALTER ROLE {role} {attributes} PASSWORD {password};
    ELSE
        CREATE ROLE {role} {attributes} PASSWORD {password};
    END IF;
END $$""")]


def add_bastion_steps(bastion: str, role: str, verifier: str, own_graph: bool = False) -> list[Step]:
    """Without ``own_graph`` an existing opt-in is left as it is: re-running it to change a password keeps it."""
    steps = login_role_steps(role, verifier) + [
        Step("owner", f"SELECT {SCHEMA}.add_bastion({literal(bastion)}, {literal(role)})")]
    return steps + (set_bastion_steps(bastion, True) if own_graph else [])


def set_bastion_steps(bastion: str, own_graph: bool) -> list[Step]:
    """Opt the bastion in or out of its own graphs: the owner's trigger builds or drops them."""
    return [Step("owner", f"SELECT {SCHEMA}.set_own_graph({literal(bastion)}, {'true' if own_graph else 'false'})")]


def remove_bastion_steps(bastion: str, role: str) -> list[Step]:
    """The role first (so nothing it holds outlives the first step), then its rows."""
    return [
        Step("superuser", f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = {literal(role)}"),
        Step("superuser", f"""DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = {literal(role)}) THEN
        DROP OWNED BY {role};
        DROP ROLE {role};
    END IF;
END $$"""),
        Step("owner", f"SELECT {SCHEMA}.remove_bastion({literal(bastion)})"),
    ]


def add_searcher_steps(role: str, verifier: str) -> list[Step]:
    return login_role_steps(role, verifier) + [Step("owner", f"SELECT {SCHEMA}.add_searcher({literal(role)})")]


def add_reader_steps(role: str, groups: list[str], gateway: str | None, verifier: str | None) -> list[Step]:
    """A reader: its role, its groups (the owner's ``add_reader``), then the gateway's right to become it."""
    array = "ARRAY[" + ", ".join(literal(group) for group in groups) + "]::text[]"
    steps = login_role_steps(role, verifier) + [Step("owner", f"SELECT {SCHEMA}.add_reader({literal(role)}, {array})")]
    if gateway:
        steps.append(Step("superuser", f"""DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM {SCHEMA}.gateways WHERE role_name = {literal(gateway)}) THEN
        RAISE EXCEPTION 'role % is not a gateway: bastion-agent admin add-gateway % first', {literal(gateway)}, {literal(gateway)};
    END IF;
    GRANT {role} TO {gateway};
END $$"""))
    return steps


def add_gateway_steps(role: str, verifier: str) -> list[Step]:
    return login_role_steps(role, verifier) + [Step("owner", f"SELECT {SCHEMA}.add_gateway({literal(role)})")]


def add_model_steps(model: str, dim: int) -> list[Step]:
    return [Step("owner", f"SELECT {SCHEMA}.ensure_model({literal(model)}, {int(dim)})")]


def show(steps: list[Step]) -> str:
    """The steps as a script an administrator can read or paste, each under the role that runs it."""
    lines, current = [], None
    for step in steps:
        if step.runs_as != current:
            lines.append(f"-- as {'a superuser' if step.runs_as == 'superuser' else 'the schema owner'}")
            current = step.runs_as
        lines.append(step.sql + ";")
    return "\n".join(lines)


# --- running them -------------------------------------------------------------


def admin_dsn() -> str:
    dsn = os.environ.get(ADMIN_DSN_VARIABLE, "").strip()
    if not dsn:
        raise ConfigError(f"{ADMIN_DSN_VARIABLE} is not set: give a libpq connection string of a role allowed to"
                          " create roles (docs/publish.md)")
    connection.describe_dsn(dsn, ADMIN_DSN_VARIABLE)
    return dsn


def run_steps(steps: list[Step], needs_schema: bool = True, needs_version: int = 1) -> None:
    """Every step on one connection (``BASTION_ADMIN_DSN``), in order; one line when one fails
    (``needs_version``: the schema version whose functions the steps call)."""

    dsn = admin_dsn()
    psycopg = connection.psycopg_module()
    warnings: list[str] = []
    conn = connection.connect(dsn, warnings=warnings)
    where = connection.describe_dsn(dsn, ADMIN_DSN_VARIABLE)
    try:
        version = publish_schema_version(conn) if needs_schema else None
        if version == 0:
            raise DatabaseError(f"PostgreSQL ({where}) has no {SCHEMA} schema yet: run bastion-agent admin migrate"
                                " with the schema owner's DSN first")
        if version is not None and version < needs_version:
            raise DatabaseError(f"PostgreSQL ({where}) has the {SCHEMA} schema at version {version}: this needs"
                                f" version {needs_version} (bastion-agent admin migrate)")
        for step in steps:
            conn.execute(step.sql)
    except psycopg.Error as exc:
        raise DatabaseError(f"PostgreSQL ({where}) refused it: {connection.scrub(exc, dsn)}") from None
    finally:
        conn.close()
    connection.say_warnings("admin", warnings)


def publish_schema_version(conn) -> int:
    from bastion_agent.publishing import publish_schema

    return publish_schema.current_version(conn)


def mapped_role(bastion: str) -> str | None:
    """The role ``bastions`` maps the bastion to on the server (None when none, or no schema)."""

    dsn = admin_dsn()
    conn = connection.connect(dsn)
    try:
        if conn.execute(f"SELECT to_regclass('{SCHEMA}.bastions')").fetchone()[0] is None:
            return None
        row = conn.execute(f"SELECT role_name FROM {SCHEMA}.bastions WHERE bastion = %s", (bastion,)).fetchone()
        return row[0] if row and row[0] else None
    finally:
        conn.close()


# --- the command line ------------------------------------------------------------


def add_admin_arguments(parser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    sub = actions.add_parser("migrate", help="create or upgrade the schema (with the schema owner's DSN)")
    _print_option(sub)
    sub = actions.add_parser("add-bastion", help="a bastion's publishing role, mapped to it (idempotent)")
    sub.add_argument("name", help="the bastion, as its manifest's [publish] bastion says")
    sub.add_argument("--role", help="the role's name (default: publish_NAME, dashes as underscores)")
    sub.add_argument("--own-graph", action="store_true", help=OWN_GRAPH_HELP)
    _password_options(sub)
    sub = actions.add_parser("set-bastion", help="opt a registered bastion in or out of its own graphs")
    sub.add_argument("name")
    sub.add_argument("--own-graph", choices=("on", "off"), required=True, help=OWN_GRAPH_HELP)
    _print_option(sub)
    sub = actions.add_parser("remove-bastion", help="drop the bastion's role, then delete its mapping and rows")
    sub.add_argument("name")
    sub.add_argument("--role", help="the role's name (default: the one the server maps, else publish_NAME)")
    _print_option(sub)
    sub = actions.add_parser("add-searcher", help="a search role that reads every registered bastion, or with --groups"
                                                  " a reader limited to those groups (idempotent)")
    sub.add_argument("name", help="the role's name")
    sub.add_argument("--groups", metavar="G,…", help="a reader: it reads only the rows sharing one of these groups")
    sub.add_argument("--gateway", metavar="ROLE", help="with --groups: the gateway (admin add-gateway) that may become it")
    sub.add_argument("--login", action="store_true", help="with --groups: the reader logs in itself (asks a password);"
                                                          " by default only a gateway becomes it")
    _password_options(sub)
    sub = actions.add_parser("add-gateway", help="the login role serve --remote connects as: reads nothing itself,"
                                                 " becomes the readers granted to it (idempotent)")
    sub.add_argument("name", help="the role's name")
    _password_options(sub)
    sub = actions.add_parser("add-model", help="register a model, so bastions may publish it (idempotent)")
    sub.add_argument("name", help="the model's vector key, as publish's refusal names it")
    sub.add_argument("--dim", type=int, required=True)
    _print_option(sub)


OWN_GRAPH_HELP = ("a search graph of the bastion's own rows (about half the time of a one-bastion search), which"
                  " shows every role its name and approximate size; off by default")


def _print_option(parser) -> None:
    parser.add_argument("--print", action="store_true", help="print the SQL (and who runs it) instead of running it")


def _password_options(parser) -> None:
    parser.add_argument("--password-file", metavar="FILE", help="read the role's password from FILE's first line"
                                                                " (default: stdin)")
    _print_option(parser)


def run_admin(args) -> int:
    action = args.action
    if action == "migrate":
        if args.print:
            print(f"-- as the schema owner: every migration of bastion_agent/publishing/publish_schema.py, in one"
                  f" transaction")
            return 0
        return migrate_now()
    if action == "add-bastion":
        bastion = bastion_name(args.name)
        role = role_name(args.role or default_role(bastion))
        steps = add_bastion_steps(bastion, role, scram_verifier(read_password(args.password_file)), args.own_graph)
        done = f"bastion {bastion} publishes as role {role}" + (" (with its own graphs)" if args.own_graph else "")
    elif action == "set-bastion":
        bastion, on = bastion_name(args.name), args.own_graph == "on"
        steps = set_bastion_steps(bastion, on)
        done = f"bastion {bastion}: " + ("its own graphs built" if on else "no graphs of its own")
    elif action == "remove-bastion":
        bastion = bastion_name(args.name)
        role = args.role or (None if args.print else mapped_role(bastion)) or default_role(bastion)
        steps = remove_bastion_steps(bastion, role_name(role))
        done = f"bastion {bastion} removed: role {role} dropped, its rows deleted"
    elif action == "add-searcher" and args.groups is not None:
        role, groups = role_name(args.name), group_names(args.groups)
        gateway = role_name(args.gateway) if args.gateway else None
        verifier = scram_verifier(read_password(args.password_file)) if args.login else None
        steps = add_reader_steps(role, groups, gateway, verifier)
        done = f"role {role} reads the groups {', '.join(groups)}" + (f" (gateway {gateway} may become it)"
                                                                       if gateway else "")
    elif action == "add-searcher":
        if args.gateway or args.login:
            raise ConfigError("--gateway and --login belong to a reader: give its --groups")
        role = role_name(args.name)
        steps = add_searcher_steps(role, scram_verifier(read_password(args.password_file)))
        done = f"role {role} searches every registered bastion"
    elif action == "add-gateway":
        role = role_name(args.name)
        steps = add_gateway_steps(role, scram_verifier(read_password(args.password_file)))
        done = f"role {role} is a gateway: it reads nothing itself and may become the readers granted to it"
    else:
        if not 1 <= args.dim <= 4000:
            raise ConfigError(f"--dim must be 1..4000; got {args.dim}")
        if not args.name or len(args.name) > 500:
            raise ConfigError("a model name must be 1..500 characters")
        steps = add_model_steps(args.name, args.dim)
        done = f"model {args.name} (dim {args.dim}) registered"
    if args.print:
        print(show(steps))
        return 0
    own_graph = action == "set-bastion" or (action == "add-bastion" and args.own_graph)
    run_steps(steps, needs_version=OWN_GRAPH_VERSION if own_graph else 1)
    print(f"bastion_agent admin: {done}")
    return 0


def migrate_now() -> int:
    from bastion_agent.publishing import publish_schema

    dsn = admin_dsn()
    psycopg = connection.psycopg_module()
    warnings: list[str] = []
    conn = connection.connect(dsn, warnings=warnings)
    try:
        before = publish_schema.current_version(conn)
        after = publish_schema.migrate(conn)
    except psycopg.Error as exc:
        raise DatabaseError(f"PostgreSQL ({connection.describe_dsn(dsn, ADMIN_DSN_VARIABLE)}) refused the migration:"
                            f" {connection.scrub(exc, dsn)}") from None
    finally:
        conn.close()
    connection.say_warnings("admin", warnings)
    print(f"bastion_agent admin: schema at version {after}" + (f" (was {before})" if before != after else ""))
    return 0
