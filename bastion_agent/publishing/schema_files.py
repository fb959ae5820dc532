"""The central schema's migration SQL kept as files: statements that must stay byte for byte what ran.

A migration that has run is never edited (a change is a new migration), so
its statements are data, not code to be rebuilt from today's constants: a
file per migration (or per step of one) in ``publishing/sql/``, shipped as
package data (``pyproject.toml``), read here. Each statement follows a
``-- statement:`` line; the header and those lines are not sent. A value
known only on the server (pgvector's schema) is a ``{name}`` placeholder,
filled in by ``statements``. ``test_schema_files.py`` hashes each file's
statements, so an edit of a migration that has run fails there.
"""

from __future__ import annotations

import re
from importlib import resources

_STATEMENT = re.compile(r"^-- statement:[^\n]*\n", re.MULTILINE)
PLACEHOLDERS = ("vec",)  # pgvector's schema, quoted as an identifier


def read_sql(name: str) -> str:
    """The text of ``sql/NAME.sql`` from the installed package."""
    return resources.files(__package__).joinpath("sql", f"{name}.sql").read_text(encoding="utf-8")


def statements(name: str, **values: str) -> list[str]:
    """The statements of ``sql/NAME.sql`` in order, each placeholder it holds filled from ``values``."""
    text = read_sql(name)
    missing = [key for key in PLACEHOLDERS if "{" + key + "}" in text and key not in values]
    unknown = sorted(set(values) - set(PLACEHOLDERS))
    if missing or unknown:
        raise ValueError(f"{name}.sql: placeholders missing {missing}, unknown {unknown}")
    found = []
    for chunk in _STATEMENT.split(text)[1:]:
        statement = chunk[:-1] if chunk.endswith("\n") else chunk
        for key, value in values.items():
            statement = statement.replace("{" + key + "}", value)
        found.append(statement)
    if not found:
        raise ValueError(f"{name}.sql holds no statement")
    return found
