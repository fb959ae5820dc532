"""A model's canonical name: the one name its vectors are keyed by, whatever the server calls it.

One model goes by several names: the embedded server and Ollama list
``multilingual-e5-small:latest``, a manifest written without a server says
``multilingual-e5-small``, llama.cpp serves ``/models/multilingual-e5-small.gguf``
and a hub gives ``intfloat/multilingual-e5-small``. Vectors keyed by the
string re-embedded a whole folder when only the name's form changed, so
the key (``EmbedSettings.vector_key``) and the identity check
(``server_info.served_match``) use this one normalisation.

It lives in ``config`` because the manifest computes the key; the model
server part imports it from here.
"""

from __future__ import annotations

SUFFIXES = (".gguf", ":latest")


def canonical_name(name: str) -> str:
    """``name`` lowercased, without a folder or hub owner, ``.gguf`` or ``:latest``.

    A tag other than ``latest`` (``:q8_0``, ``:v1.5``) stays: it is another
    model's weights.
    """
    name = name.strip().lower().replace("\\", "/").rsplit("/", 1)[-1]
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name
