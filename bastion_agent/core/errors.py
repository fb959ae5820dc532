"""The one family of errors the library raises and the CLI prints.

Every failure a user can cause or meet (a bad manifest, an unreachable model
server, a wrong dimension, a missing store) is a ``BastionError``. The CLI
turns it into one line, ``bastion_agent STAGE: message``, and the exit status
of its class; anything else is a bug and keeps its traceback.
"""


class BastionError(Exception):
    """A failure the user can act on; printed as one line."""

    exit_code = 1


class ManifestError(BastionError):
    """The manifest is missing, unreadable or invalid."""

    exit_code = 2


class SignatureError(BastionError):
    """The manifest's signature is missing, bad or untrusted."""

    exit_code = 3


class StoreError(BastionError):
    """A store the stage reads is missing or inconsistent (run the stage before)."""

    exit_code = 4


class ModelServerError(BastionError):
    """The model server is unreachable or answered something unusable."""

    exit_code = 5


class ModelServerUnreachable(ModelServerError):
    """No answer at all from the model server (refused, reset, timed out): nothing about the store is in doubt.

    Unlike a wrong answer (a dimension, an API, a model it lacks), this leaves
    the windows worth indexing: embed still writes them, so keyword search
    finds them while their vectors wait."""


class ConfigError(BastionError):
    """An environment variable or command-line value is invalid."""

    exit_code = 2


class DatabaseError(BastionError):
    """The central PostgreSQL (publish, --remote search) is unreachable or refused the work."""

    exit_code = 6


# Not an error: the job is done, every other file is searchable, but some files could not be
# read or sanitized (hostile, over budget, damaged, unreadable). A status of its own, apart from
# every failure above (1 to 6), so cron or systemd can tell "look at these files" from "broken".
EXIT_DONE_WITH_SKIPPED = 10
