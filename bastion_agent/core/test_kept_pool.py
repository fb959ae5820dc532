"""The watcher's kept pool: workers outlive a stage, never a failure, and serve one budget only."""

from __future__ import annotations

import os
import time
import unittest

from bastion_agent.core.budget import REASON_TIME, Budget, Call, KeptPool, WorkerPool, pool_for


def worker_pid() -> str:
    """Run in a worker: which process answered."""
    return str(os.getpid())


def hang() -> str:
    """Run in a worker: a job that never ends within its budget."""
    time.sleep(600)
    return "never"


def pid_of(pool) -> int:
    answer = pool.run(Call("call", (__name__, "worker_pid"), 0))
    return int(answer.data)


class KeptPoolTests(unittest.TestCase):
    def test_a_job_over_budget_costs_its_worker_and_the_next_job_gets_a_new_one(self):
        pool = KeptPool(Budget(seconds=0.5), workers=1)
        self.addCleanup(pool.close)
        with pool:
            before = pid_of(pool)
            answer = pool.run(Call("call", (__name__, "hang"), 0))
        self.assertEqual(answer.reason, REASON_TIME)
        with pool:
            after = pid_of(pool)
        self.assertNotEqual(before, after)
        self.assertEqual(pool.workers_started, 2)

    def test_workers_outlive_the_block_that_used_them(self):
        pool = KeptPool(Budget(), workers=1)
        self.addCleanup(pool.close)
        with pool:
            first = pid_of(pool)
        with pool:
            second = pid_of(pool)
        self.assertEqual(first, second)
        self.assertEqual(pool.workers_started, 1)

    def test_an_exception_in_the_block_ends_the_workers(self):
        pool = KeptPool(Budget(), workers=1)
        self.addCleanup(pool.close)
        with self.assertRaises(RuntimeError):
            with pool:
                first = pid_of(pool)
                raise RuntimeError("a stage failed mid-way")
        with pool:
            second = pid_of(pool)
        self.assertNotEqual(first, second)
        self.assertEqual(pool.workers_started, 2)

    def test_a_pool_serves_its_own_budget_only(self):
        pool = KeptPool(Budget(seconds=7), workers=1)
        self.addCleanup(pool.close)
        self.assertIs(pool_for(Budget(seconds=7), pool), pool)
        other = pool_for(Budget(seconds=8), pool)
        self.assertIsNot(other, pool)
        self.assertIsInstance(other, WorkerPool)
        self.assertIsNot(pool_for(Budget(seconds=7), pool, workers=3), pool)
        self.assertIsNot(pool_for(Budget(seconds=7), None), pool)


if __name__ == "__main__":
    unittest.main()
