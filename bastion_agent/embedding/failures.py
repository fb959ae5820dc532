"""What a failed request means for the embed stage: ``RequestFailure`` and its ``kind``.

Every failure of a request is classified so the stage can tell what to do:
wait and retry, split the batch, retry one input truncated, record one
chunk as failed, or stop. The kinds, and what the stage does with each:

::

    TRANSIENT        connection refused/reset, timeout, 429/502/503/504, a cut answer: wait and retry
    BATCH_TOO_LARGE  the server's batch or body limit: split, remember the smaller size
    INPUT_TOO_LONG   one input over the context: isolate it, resend truncated, or fail it
    REJECTED         another refusal of this content: isolate, then fail it
    FATAL            the server cannot serve this run at all: stop
    WRONG_API        this route does not speak this wire format (the probe tries the next)
"""

from __future__ import annotations

import re

from bastion_agent.embedding.transport import HTTPFailure

# Request failure kinds (RequestFailure.kind).
TRANSIENT = "transient"  # connection refused/reset, timeout, 429/502/503/504, a cut answer: wait and retry
BATCH_TOO_LARGE = "batch_too_large"  # the server's batch or body limit: split, remember the smaller size
INPUT_TOO_LONG = "input_too_long"  # one input over the context or physical batch: isolate, truncate or fail
REJECTED = "rejected"  # another refusal of this content (400, 500, 424, a bad vector): isolate, then fail
FATAL = "fatal"  # the server cannot serve this run at all (auth, model gone, dimension changed): stop
WRONG_API = "wrong_api"  # this path does not speak this wire format (another may)
CONNECTION_LOST = "connection_lost"  # reason of a TRANSIENT failure: the server dropped a request it had taken

RETRY_STATUSES = frozenset({408, 429, 502, 503, 504})
FATAL_STATUSES = frozenset({401, 403, 404, 405, 501})
_BATCH_LIMIT_RE = re.compile(r"batch size (\d+) > maximum allowed batch size (\d+)", re.I)
_TOO_LONG_RE = re.compile(
    r"context length|context size|exceeds? the (?:maximum )?context|too large to process|"
    r"must have less than \d+ tokens|input is too large|too many tokens|input \(\d+ tokens\)",
    re.I,
)
_BATCH_WORDS_RE = re.compile(r"batch|payload|body|length limit|request entity|too large", re.I)


class RequestFailure(Exception):
    """One request that did not give usable vectors, and what kind of failure it was.

    ``reason`` is the short label failed chunks are counted under in the
    summary (``http_500``, ``too_long``, ``non_finite``...); ``limit`` is the
    server's batch limit when its message names one; ``retry_after`` is the
    server's ``Retry-After`` in seconds.
    """

    def __init__(self, kind: str, reason: str, detail: str, status: int | None = None,
                 retry_after: float | None = None, limit: int | None = None):
        super().__init__(detail)
        self.kind = kind
        self.reason = reason
        self.detail = detail
        self.status = status
        self.retry_after = retry_after
        self.limit = limit


def classify_http(exc: HTTPFailure, model: str) -> RequestFailure:
    """What an HTTP error answer means for the stage (see the module docstring)."""
    status, message = exc.status, exc.message
    reason = f"http_{status}"
    detail = str(exc)
    if status in RETRY_STATUSES:
        return RequestFailure(TRANSIENT, reason, detail, status, exc.retry_after)
    if status in (404, 405, 501) and not names_the_model(message, model):
        return RequestFailure(WRONG_API, reason, detail, status)
    if status in FATAL_STATUSES:
        return RequestFailure(FATAL, reason, detail, status)
    limit = _BATCH_LIMIT_RE.search(message)
    if limit:
        return RequestFailure(BATCH_TOO_LARGE, reason, detail, status, limit=int(limit.group(2)))
    if _TOO_LONG_RE.search(message):
        return RequestFailure(INPUT_TOO_LONG, "too_long", detail, status)
    if status == 413 or (status == 422 and _BATCH_WORDS_RE.search(message)) or "too large" in message.lower():
        return RequestFailure(BATCH_TOO_LARGE, reason, detail, status)
    return RequestFailure(REJECTED, reason, detail, status)


def names_the_model(message: str, model: str) -> bool:
    """Ollama answers 404 "model ... not found" on the right path: that is final."""
    lowered = message.lower()
    return "model" in lowered and ("not found" in lowered or model.lower() in lowered)


def _connection_kind(exc: BaseException) -> str:
    """``connection_lost`` when the server took the request and then dropped it (reset, closed, cut short:
    what a crashing server does), else ``connection`` (refused, unreachable: a server that is not there)."""
    reason = getattr(exc, "reason", None)
    cause = reason if isinstance(reason, BaseException) else exc
    lost = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
    return CONNECTION_LOST if isinstance(cause, lost) else "connection"


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or exc
    return str(reason) or type(reason).__name__


def _plain_http_answered(exc: BaseException) -> bool:
    """Whether a TLS handshake failed because the server answered in plain HTTP (OpenSSL's WRONG_VERSION_NUMBER)."""
    import ssl

    reason = getattr(exc, "reason", None)
    cause = reason if isinstance(reason, BaseException) else exc
    if not isinstance(cause, ssl.SSLError):
        return False
    text = f"{getattr(cause, 'reason', '')} {cause}".upper()
    return "WRONG_VERSION_NUMBER" in text or "HTTP_REQUEST" in text or "RECORD_LAYER_FAILURE" in text


def classify_os_error(exc: BaseException, display_url: str) -> "RequestFailure":
    """A connection that failed: a TLS client talking to plain HTTP (fatal: the URL is wrong), else transient."""
    if _plain_http_answered(exc):
        plain = "http" + display_url[len("https"):]
        return RequestFailure(FATAL, "tls_to_plain_http",
                              f"EMBED_URL says https:// but the server there answers plain HTTP, without TLS: "
                              f"use EMBED_URL={plain} (or put TLS in front of it)")
    kind = "timeout" if isinstance(exc, TimeoutError) or "timed out" in _reason(exc) else _connection_kind(exc)
    return RequestFailure(TRANSIENT, kind, f"cannot reach the model server: {_reason(exc)}")
