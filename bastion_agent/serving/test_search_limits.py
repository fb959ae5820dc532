"""The per-token search limit (``search_limits``): a burst, then the rate, then 429 with ``Retry-After``."""

from __future__ import annotations

import random
import unittest

from bastion_agent.serving.request_error import RequestError
from bastion_agent.serving.search_limits import SearchLimits


class Clock:
    def __init__(self):
        self.now = random.uniform(1e3, 1e6)

    def __call__(self) -> float:
        return self.now


class SearchLimitTests(unittest.TestCase):
    def test_a_flood_is_refused_after_the_burst_and_answered_at_the_rate(self):
        clock, said = Clock(), []
        burst = random.randint(3, 9)
        limits = SearchLimits(per_minute=60, burst=burst, clock=clock, log=said.append)
        for _ in range(burst):
            limits.take("insider")
        refused = 0
        for _ in range(1000):  # a thousand more at the same instant: all refused, logged once
            with self.assertRaises(RequestError) as caught:
                limits.take("insider")
            refused += 1
        self.assertEqual((caught.exception.status, caught.exception.headers), (429, {"Retry-After": "1"}))
        self.assertEqual((refused, len(said)), (1000, 1))
        limits.take("bystander")  # another token's budget is its own
        clock.now += 1.0  # one a second comes back
        limits.take("insider")
        with self.assertRaises(RequestError):
            limits.take("insider")
        clock.now += 3600.0  # never more than the burst, however long it waited
        for _ in range(burst):
            limits.take("insider")
        with self.assertRaises(RequestError):
            limits.take("insider")

    def test_retry_after_says_how_long_until_one_search_is_back(self):
        clock = Clock()
        limits = SearchLimits(per_minute=2, burst=1, clock=clock)
        limits.take("slow")
        clock.now += 10.0
        with self.assertRaises(RequestError) as caught:
            limits.take("slow")
        self.assertEqual(caught.exception.headers["Retry-After"], "20")


if __name__ == "__main__":
    unittest.main()
