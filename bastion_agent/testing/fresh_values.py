"""Fresh random values for the sanitizer's tests: made anew each run, so no test passes on a value it knows."""

from __future__ import annotations

import random
import string

RNG = random.SystemRandom()
B62 = string.ascii_letters + string.digits


def credential(length: int = 14) -> str:
    """A value with a credential's shape: letters of both cases, digits and a symbol; never a word, a name or a
    counting run."""
    while True:
        body = "".join(RNG.choice(B62) for _ in range(length - 2)) + RNG.choice("#%!") + RNG.choice(string.digits)
        if any(ch.isupper() for ch in body) and any(ch.islower() for ch in body):
            return body
