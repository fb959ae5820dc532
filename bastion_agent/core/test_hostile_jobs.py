"""Hostile jobs in the worker pool: one that never ends, one that allocates without end, one that dies.

The functions below run in the pool's workers, which import them by this
module's name.
"""

from __future__ import annotations

import os
import unittest

from bastion_agent.core.budget import REASON_MEMORY, REASON_TIME, Budget, Call, WorkerPool


def spin_for_ever() -> str:
    while True:
        pass


def allocate_four_gib() -> str:
    return str(len(bytearray(4 << 30)))


def crash_hard() -> str:
    os._exit(3)


def echo(text: str) -> str:
    return text


class BudgetTests(unittest.TestCase):
    def call(self, name: str, *args) -> Call:
        return Call("call", ("bastion_agent.core.test_hostile_jobs", name, *args), 0)

    def test_a_job_that_never_ends_is_killed_and_the_next_one_runs(self):
        with WorkerPool(Budget(seconds=1), workers=1) as pool:
            answers = [answer for _, answer in pool.ordered([(1, self.call("spin_for_ever")), (2, self.call("echo", "after"))])]
        self.assertEqual(answers[0].reason, REASON_TIME)
        self.assertEqual((answers[1].reason, answers[1].data), (None, b"after"))

    def test_a_job_that_allocates_without_end_is_stopped_by_the_memory_budget(self):
        with WorkerPool(Budget(memory_mb=256), workers=1) as pool:
            answers = [answer for _, answer in pool.ordered([(1, self.call("allocate_four_gib")), (2, self.call("echo", "ok"))])]
        self.assertEqual(answers[0].reason, REASON_MEMORY)
        self.assertEqual(answers[1].data, b"ok")

    def test_a_worker_that_dies_is_replaced(self):
        with WorkerPool(Budget(), workers=1) as pool:
            self.assertEqual(pool.run(self.call("crash_hard")).reason, REASON_MEMORY)
            self.assertEqual(pool.run(self.call("echo", "again")).data, b"again")

    def test_answers_come_back_in_submission_order(self):
        with WorkerPool(Budget(), workers=2) as pool:
            got = [payload for payload, _ in pool.ordered((n, self.call("echo", str(n)) if n % 3 else None) for n in range(12))]
        self.assertEqual(got, list(range(12)))


if __name__ == "__main__":
    unittest.main()
