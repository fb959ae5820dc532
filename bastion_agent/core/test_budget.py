"""Worker tasks are a checked registry: a misspelt name fails in the parent, and every task resolves."""

from __future__ import annotations

import unittest

from bastion_agent.core import budget
from bastion_agent.core.budget import Budget, Call, Task, WorkerPool


class TaskRegistryTests(unittest.TestCase):
    def test_a_misspelt_task_fails_when_the_call_is_made(self):
        with self.assertRaisesRegex(ValueError, r"no worker task 'raed' \(known: call, read, redact\)"):
            Call("raed", (), 0)

    def test_a_task_given_by_name_becomes_the_task(self):
        self.assertIs(Call("read", (), 0).task, Task.READ)

    def test_every_task_resolves_to_a_function(self):
        self.assertEqual(set(budget._TASK_FUNCTIONS), set(Task))
        for task in Task:
            with self.subTest(task.value):
                self.assertTrue(callable(budget.task_function(task)))

    def test_a_task_runs_in_a_worker_by_its_registered_function(self):
        with WorkerPool(Budget(), workers=1) as pool:
            answer = pool.run(Call(Task.CALL, ("bastion_agent.extracting.readers", "normalise", "a\r\nb"), 0))
        self.assertEqual((answer.reason, answer.data), (None, b"a\nb"))


if __name__ == "__main__":
    unittest.main()
