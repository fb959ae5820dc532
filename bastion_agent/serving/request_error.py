"""A request the server refuses, as the search service, the query checks and the HTTP layer raise it.

It carries the HTTP status and one line for the client, so every layer can
refuse in the client's words and only the HTTP layer decides how to send it.
"""

from __future__ import annotations


class RequestError(Exception):
    """A request the server refuses: its HTTP status and one line for the client."""

    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}
