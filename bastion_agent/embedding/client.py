"""The model server client: embeds texts with the pinned model, after a probe that checks the server.

What each API sends and answers is its wire format (``wire_formats.py``);
the network below is ``transport.py``; what a failure means is
``failures.py``; the endpoint's settings are ``endpoint.py``. The client
asks the format in use and never branches on its name.
"""

from __future__ import annotations

import http.client
from typing import Callable, Sequence

from bastion_agent.core.errors import ModelServerError, ModelServerUnreachable
from bastion_agent.embedding.endpoint import EndpointConfig
from bastion_agent.embedding.failures import (
    CONNECTION_LOST,
    FATAL,
    REJECTED,
    TRANSIENT,
    WRONG_API,
    RequestFailure,
    classify_http,
    classify_os_error,
    names_the_model,
)
from bastion_agent.embedding.transport import BadAnswer, HTTPFailure, answer_limit, get_json, post_json, within
from bastion_agent.embedding.vector_packing import pack_all, unpack_floats
from bastion_agent.embedding.wire_formats import WIRE_FORMATS, WireFormat, listed_names, listing_routes, wire_format

PROBE_TEXT = "bastion agent probe: is this the pinned model?"
START_HINT = ("start one (the embedded model: python3 -m bastion_agent model-server; or ollama serve) "
              "or point EMBED_URL at yours")


class EmbedClient:
    """Embeds texts with ``model`` at the endpoint of ``config``.

    ``probe(dim)`` must be called first: it settles the wire format (the
    configured one, or the one that answers), the vector encoding, and
    refuses a server whose vectors do not have the pinned dimension. The
    probe fails fast (no retries): a server that is not there, or not the
    pinned model, stops the stage before anything is opened.
    """

    def __init__(self, config: EndpointConfig, model: str, post: Callable = post_json):
        self.config = config
        self.model = model
        self.wire_format: WireFormat | None = config.wire_format  # settled by the probe when None
        self.dim: int | None = None
        self.encoding = "float"
        self.probe_tokens: int | None = None  # the server's token count of the probe text, when it gave one
        self._post = post

    @property
    def can_truncate(self) -> bool:
        """Whether one too-long input can be resent asking the server to truncate it (see ``WireFormat``)."""
        return self.wire_format is not None and self.wire_format.can_truncate

    def probe(self, dim: int) -> str:
        """Embed the probe text; return the name of the wire format in use. Raises ``ModelServerError``."""
        candidates = [self.wire_format] if self.wire_format else list(WIRE_FORMATS.values())
        failures = []
        for fmt in candidates:
            try:
                vectors, encoding = self._probe_with(fmt)
            except RequestFailure as exc:
                if exc.kind == WRONG_API:
                    failures.append(f"{fmt.embed_path}: {exc.detail}")
                    continue
                unreachable = exc.reason in ("connection", CONNECTION_LOST, "timeout")
                raise (ModelServerUnreachable if unreachable else ModelServerError)(self._failure_message(fmt, exc)) from None
            served = len(vectors[0])
            if served != dim:
                raise ModelServerError(
                    f"model {self.model!r} at {self.config.display_url} ({fmt.name}) serves {served}-dimensional "
                    f"vectors but the manifest pins dim = {dim}; nothing was stored"
                )
            self.wire_format, self.dim, self.encoding = fmt, dim, encoding
            return fmt.name
        raise ModelServerError(
            f"{self.config.display_url} did not answer as an embedding server ({'; '.join(failures)}); "
            "check EMBED_URL and EMBED_API"
        )

    def measure(self, fmt: WireFormat | str) -> int:
        """The dimension of the probe text's vector in wire format ``fmt`` (``init`` learns it; no pinned dim yet).

        Raises ``RequestFailure`` when this wire format does not answer with a vector.
        """
        vectors, _ = self._probe_with(wire_format(fmt))
        return len(vectors[0]) if vectors else 0

    def _probe_with(self, fmt: WireFormat) -> tuple[list, str]:
        """The probe text's vector (as floats) and the encoding that gave it: each of the format's
        ``probe_encodings`` in turn, the next one when the server refuses this one (400, 422)."""
        encodings = fmt.probe_encodings
        for number, encoding in enumerate(encodings):
            try:
                answer = self._request(fmt, [PROBE_TEXT], encoding, False)
            except RequestFailure as exc:
                if exc.status in (400, 422) and number + 1 < len(encodings):
                    continue  # this encoding refused: the next
                raise
            self.probe_tokens = fmt.prompt_tokens(answer)
            vectors = fmt.vectors(answer)
            if vectors is None:
                raise RequestFailure(WRONG_API, "bad_response", "the answer does not have the shape of this API")
            sent = "base64" if vectors and isinstance(vectors[0], str) else "float"
            packed = pack_all(vectors, 1, self.config.display_url)
            return [unpack_floats(blob) for blob in packed], sent
        raise AssertionError("a wire format has at least one probe encoding")

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One request for ``texts``; vectors in input order, checked. Raises ``ModelServerError``.

        For a query (``search``, ``serve``): no retries, any failure is final.
        """
        self._require_probe()
        try:
            blobs = self.embed_packed(texts)
        except RequestFailure as exc:
            raise ModelServerError(self._failure_message(self.wire_format, exc)) from None
        return [list(unpack_floats(blob)) for blob in blobs]

    def embed_packed(self, texts: Sequence[str], truncate: bool = False) -> list[bytes]:
        """One request; each vector as checked little-endian float32 bytes. Raises ``RequestFailure``.

        The answer is checked whole before anything is returned: one vector
        per input, the pinned dimension, finite values, a non-zero norm
        (llama.cpp answers all-zero vectors when it cannot read an embedding).
        """
        self._require_probe()
        answer = self._request(self.wire_format, list(texts), self.encoding, truncate)
        vectors = self.wire_format.vectors(answer)
        if vectors is None:
            raise RequestFailure(REJECTED, "bad_response", "the answer does not have the shape of this API")
        blobs = pack_all(vectors, len(texts), self.config.display_url)
        for blob in blobs:
            if len(blob) != 4 * self.dim:
                raise RequestFailure(
                    FATAL, "wrong_dim",
                    f"{self.config.display_url} returned a {len(blob) // 4}-dimensional vector, expected {self.dim} "
                    "(was the model on the server changed?)",
                )
        return blobs

    def _require_probe(self) -> None:
        if self.wire_format is None or self.dim is None:
            raise RuntimeError("probe() must succeed before embed()")

    def _request(self, fmt: WireFormat, texts: list[str], encoding: str, truncate: bool) -> object:
        """POST one batch; the parsed answer, or a classified ``RequestFailure``."""
        url = self.config.url + fmt.embed_path
        body = fmt.request_body(self.model, texts, encoding, truncate)
        try:
            return self._post(url, body, self.config.timeout, limit=answer_limit(len(texts), self.dim))
        except HTTPFailure as exc:
            raise classify_http(exc, self.model) from None
        except BadAnswer as exc:
            raise RequestFailure(TRANSIENT, "bad_response", str(exc)) from None
        except (OSError, TimeoutError) as exc:
            raise classify_os_error(exc, self.config.display_url) from None

    def _failure_message(self, fmt: WireFormat | None, exc: RequestFailure) -> str:
        where = self.config.display_url
        route = fmt.embed_path if fmt else ""
        if exc.reason == "tls_to_plain_http":
            return f"{where}: {exc.detail}"
        if exc.status == 404 and names_the_model(exc.detail, self.model):
            return self._not_served(route)
        if exc.reason in ("connection", CONNECTION_LOST, "timeout"):
            return (f"cannot reach the model server at {where} (EMBED_URL): {exc.detail.split(': ', 1)[-1]}; "
                    f"{START_HINT}")
        if exc.status is not None:
            return f"{where}{route} refused the request: {exc.detail}"
        return f"{where}{route}: {exc.detail}"

    def _not_served(self, route: str) -> str:
        """Model not found: the names the server has (Ollama said "try pulling it first": nothing to pull)."""
        where = self.config.display_url
        names = served_names(self.config.url, min(self.config.timeout, 10.0))
        if names:
            shown = ", ".join(repr(name) for name in names[:12]) + (" ..." if len(names) > 12 else "")
            has = f"it serves {shown}: set [embed] model to one of them (init --update MANIFEST does it)"
        else:
            has = "it does not list the models it has"
        return f"{where}{route} has no model {self.model!r}; {has}, or serve that model"


def served_names(base: str, timeout: float) -> list[str]:
    """The model names the server lists (each format's ``listing_routes``: ``/api/tags``, then ``/v1/models``),
    bounded; [] when none answer."""
    for path in listing_routes():
        try:
            answer = within(timeout, get_json, base + path, timeout)
        except (TimeoutError, OSError, http.client.HTTPException, ValueError, BadAnswer, RecursionError):
            continue
        names = [name for name in listed_names(path, answer) if 0 < len(name) <= 200 and name.isprintable()]
        if names:
            return names
    return []
