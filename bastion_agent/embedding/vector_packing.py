"""Vectors as the vector store keeps them: little-endian float32 bytes, checked before they are kept.

A server's answer gives each vector as JSON floats or base64 float32; both
become ``4 * dim`` bytes here, refused whole (``RequestFailure``) when one
vector is not base64, not numbers, empty, non-finite or all zeros.
"""

from __future__ import annotations

import base64
import binascii
import math
import sys
from array import array

from bastion_agent.embedding.failures import REJECTED, RequestFailure


def pack_all(vectors: list, expected: int, where: str) -> list[bytes]:
    """Every vector as float32 bytes, checked; ``RequestFailure`` names the first problem."""
    if len(vectors) != expected:
        raise RequestFailure(REJECTED, "wrong_count", f"{where} returned {len(vectors)} vectors for {expected} inputs")
    return [pack_one(vector, where) for vector in vectors]


def pack_one(vector: object, where: str) -> bytes:
    if isinstance(vector, str):
        try:
            blob = base64.b64decode(vector, validate=True)
        except (binascii.Error, ValueError):
            raise RequestFailure(REJECTED, "bad_response", f"{where} returned a vector that is not base64") from None
        if not blob or len(blob) % 4:
            raise RequestFailure(REJECTED, "bad_response", f"{where} returned a base64 vector of {len(blob)} bytes")
        values = array("f")
        values.frombytes(blob)
        if sys.byteorder != "little":
            values.byteswap()
    elif isinstance(vector, list) and vector:
        if not all(type(value) in (int, float) for value in vector):
            raise RequestFailure(REJECTED, "bad_response", f"{where} returned a vector with a non-numeric value")
        values = array("f", vector)  # a value beyond float32 becomes inf and is caught below
    else:
        raise RequestFailure(REJECTED, "bad_response", f"{where} returned an empty or malformed vector")
    if not math.isfinite(sum(values)):  # any NaN or infinity makes the sum non-finite
        raise RequestFailure(REJECTED, "non_finite", f"{where} returned a vector with a non-finite value")
    if not any(values):
        raise RequestFailure(REJECTED, "zero_vector", f"{where} returned an all-zero vector")
    if sys.byteorder != "little":
        values.byteswap()
    return values.tobytes()


def unpack_floats(blob: bytes) -> list[float]:
    """Little-endian float32 bytes as a list of floats."""
    values = array("f")
    values.frombytes(blob)
    if sys.byteorder != "little":
        values.byteswap()
    return values.tolist()
