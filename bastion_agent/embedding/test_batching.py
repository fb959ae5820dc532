"""The embed stage's batch size and concurrency, one input that crashes the server, and honest counters.

Against ``fault_stub.FaultStub`` on loopback with the injected clock and
sleep of ``fault_case.FakeTime``. Where the tuner must see request times,
the stub advances that fake clock by a cost it computes from the batch, so
the times are exact and no test depends on how fast the machine is.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import unittest
from pathlib import Path

from bastion_agent.commands.stage_lines import summary_line
from bastion_agent.core.errors import ConfigError, ModelServerError
from bastion_agent.embedding.endpoint import EndpointConfig
from bastion_agent.testing.fault_case import FakeTime, FaultCase
from bastion_agent.testing.fault_stub import Fault, FaultStub, model_tokens, overloaded
from bastion_agent.testing.testsupport import clean_env

LONG_WORD = "x" * 200  # 50 tokens by fault_stub.model_tokens: the input the crashing server dies on
CRASH_OVER = 30


def costly(time: FakeTime, seconds_for):
    """A stub rule whose every answer after the probe takes ``seconds_for(batch length)`` of fake time."""
    def rule(number, texts, body):
        if number:
            with time.lock:
                time.now += seconds_for(len(texts))
        return None
    return rule


def vector_rows(layout) -> list[tuple]:
    with sqlite3.connect(layout.vectors_db) as db:
        return db.execute("SELECT chunk_id, model, dim, vec FROM vectors ORDER BY chunk_id").fetchall()


class DownwardTuningTests(FaultCase):
    """Below a ceiling the user set: the tuner halves toward the server's fastest batch."""

    doc_count = 320  # 960 windows: enough for three paired trials from 16

    def peaked(self, batch: int) -> float:
        """Seconds per request of a server fastest at batch 8 (30.3 windows/s at 4, 35.1 at 8, 26.1 at 16)."""
        return 0.1 + 0.002 * batch ** 2

    def test_the_batch_moves_to_the_servers_fastest_and_the_summary_says_so(self):
        with FaultStub(rule=costly(self.time, self.peaked)) as stub:
            summary = self.embed_with(stub, EMBED_BATCH="16")
            sizes = [len(body["input"]) for _, body in stub.requests[1:]]
        self.assertEqual((summary["batch_settled"], summary["concurrency_settled"]), (8, 1))
        self.assertEqual(summary["batch_tuning"], "settled")
        self.assertEqual([t["batch"] for t in summary["batch_trials"]], [16, 8, 4])  # 16 is the ceiling: down only
        self.assertEqual(sizes[0], 16)
        self.assertEqual(set(sizes[-10:-1]), {8})  # the last batch is what was left
        self.assertLessEqual(max(sizes), 16)
        self.assertEqual(summary["failed"], 0)
        self.assert_every_vector_right()
        self.assertIn("batch 8, 1 in flight", summary_line("embed", summary))


class TuningTests(FaultCase):
    doc_count = 160  # 480 windows of 8 tokens

    def peaked(self, batch: int) -> float:
        """Seconds per request of a server fastest at batch 8 (30.3 windows/s at 4, 35.1 at 8, 26.1 at 16)."""
        return 0.1 + 0.002 * batch ** 2

    def test_embed_batch_set_by_the_user_is_a_ceiling(self):
        """Regression: EMBED_BATCH=5 sent requests of up to 80 windows to a server that refuses more than 5."""
        flat = lambda batch: 0.1  # noqa: E731 - a server where a larger batch is always faster
        with FaultStub(rule=costly(self.time, flat)) as stub:
            summary = self.embed_with(stub, EMBED_BATCH="5")
            sizes = [len(body["input"]) for _, body in stub.requests[1:]]
        self.assertEqual(max(sizes), 5)
        self.assertLessEqual(summary["batch_settled"], 5)
        self.assertEqual(summary["embedded"], 480)

    def test_unset_the_tuner_starts_at_32_and_may_go_up(self):
        flat = lambda batch: 0.1  # noqa: E731
        with FaultStub(rule=costly(self.time, flat)) as stub:
            self.embed_with(stub)
            sizes = [len(body["input"]) for _, body in stub.requests[1:]]
        self.assertEqual(sizes[0], 32)
        self.assertGreater(max(sizes), 32)

    def embed_noting(self, seconds_per_request: float) -> tuple[dict, str]:
        import contextlib
        import io

        err = io.StringIO()
        with FaultStub(rule=costly(self.time, lambda batch: seconds_per_request)) as stub, contextlib.redirect_stderr(err):
            summary = self.embed_with(stub, EMBED_BATCH="4", EMBED_BATCH_FIXED="1")
        return summary, err.getvalue()

    def test_the_expected_time_is_said_before_the_wait(self):
        """Regression: 25,841 windows took 4 hours, and nothing said so before embed started."""
        summary, err = self.embed_noting(2.0)  # 4 windows each 2 s: 2 windows/s, 468 windows left after 3 batches
        self.assertEqual(summary["embedded"], 480)
        estimates = [line for line in err.splitlines() if "windows to embed" in line]
        self.assertEqual(estimates, ["embed: 468 windows to embed at 2.0 windows/s (measured on the first batches): "
                                     "about 4 min"])

    def test_hours_say_that_a_gpu_server_is_the_fix(self):
        summary, err = self.embed_noting(40.0)  # 0.1 window/s: 468 windows are 1 h 18 min
        estimate = [line for line in err.splitlines() if "windows to embed" in line]
        self.assertEqual(len(estimate), 1)
        self.assertIn("about 1 h 18 min; a model server on a GPU is the fix", estimate[0])
        self.assertIn("EMBED_URL=", estimate[0])

    def test_a_short_run_gets_no_estimate(self):
        summary, err = self.embed_noting(0.01)
        self.assertNotIn("windows to embed", err)

    def test_batch_fixed_keeps_the_batch_and_concurrency_as_given(self):
        with FaultStub(rule=costly(self.time, self.peaked)) as stub:
            summary = self.embed_with(stub, EMBED_BATCH="4", EMBED_BATCH_FIXED="1", EMBED_CONCURRENCY="2")
            sizes = [len(body["input"]) for _, body in stub.requests[1:]]
        self.assertEqual(set(sizes), {4})
        self.assertEqual((summary["batch_settled"], summary["concurrency_settled"]), (4, 2))
        self.assertEqual((summary["batch_tuning"], summary["batch_trials"]), ("fixed", []))
        self.assertIn("batch 4 (fixed), 2 in flight", summary_line("embed", summary))

    def test_the_stored_vectors_do_not_depend_on_the_batch_size(self):
        runs = {}
        for name, env in {"fixed 1": {"EMBED_BATCH": "1", "EMBED_BATCH_FIXED": "1"},
                          "fixed 32": {"EMBED_BATCH": "32", "EMBED_BATCH_FIXED": "1"},
                          "tuned from 4": {"EMBED_BATCH": "4"},
                          "tuned, 2 in flight": {"EMBED_BATCH": "16", "EMBED_CONCURRENCY": "2"}}.items():
            for path in self.layout.root.glob("vectors.db*"):
                path.unlink()
            with self.subTest(run=name), FaultStub(rule=costly(self.time, self.peaked)) as stub:
                summary = self.embed_with(stub, **env)
                self.assertEqual((summary["embedded"], summary["failed"]), (480, 0))
                runs[name] = vector_rows(self.layout)
        self.assertEqual(len(runs["fixed 1"]), 480)
        for name, rows in runs.items():
            self.assertEqual(rows, runs["fixed 1"], name)

    def test_a_bad_batch_fixed_value_is_refused(self):
        with clean_env(EMBED_BATCH_FIXED="maybe"):
            with self.assertRaisesRegex(ConfigError, "EMBED_BATCH_FIXED must be 1 or 0"):
                EndpointConfig.from_env()
        with clean_env(EMBED_BATCH_FIXED="0"):
            self.assertFalse(EndpointConfig.from_env().batch_fixed)


class CrashCase(FaultCase):
    """One window of one document holds a word the crashing stub counts as 50 tokens."""

    doc_count = 6

    def documents(self) -> dict[str, list[str]]:
        docs = super().documents()
        text, paths = next(iter(docs.items()))
        words = text.split()
        words[12] = LONG_WORD
        del docs[text]
        docs[" ".join(words)] = paths
        return docs

    def crasher(self) -> str:
        (text,) = [text for text in self.chunk_texts() if LONG_WORD in text]
        return text


class ServerCrashTests(CrashCase):
    def test_the_stub_counts_a_long_word_as_many_tokens(self):
        self.assertEqual(model_tokens("passage: " + LONG_WORD), 3 + 50)
        self.assertLess(model_tokens("passage: " + " ".join(f"d1w{n}" for n in range(8))), CRASH_OVER)

    def restart_when_slept(self, stub):
        self.time.on_sleep = lambda count: stub.come_back() if stub.down else None

    def test_one_input_that_crashes_the_server_is_isolated_and_the_run_goes_on(self):
        stub = FaultStub(crash_over=CRASH_OVER)
        self.restart_when_slept(stub)
        with stub:
            with self.assertRaisesRegex(ModelServerError, r"refused 1 of 18 chunks \(server_crash: 1\)"):
                self.embed_with(stub, deadline=30.0, EMBED_BATCH="8")
            crashes, posts = stub.crashes, stub.posts
        summary = self.summary()
        self.assertEqual(summary["failed_by_reason"], {"server_crash": 1})
        self.assertIsNone(summary["stopped"])
        self.assertEqual(summary["embedded"], 17)
        self.assert_every_vector_right(except_texts={self.crasher()})
        # twice for the batch holding it, then once for each half holding it: at most 4, 2, 1 of a batch of 8
        self.assertGreater(crashes, 2)
        self.assertLessEqual(crashes, 2 + 3)
        # every try after the probe: those the stub answered or crashed on, and those refused while it was down
        self.assertGreaterEqual(summary["requests"], posts - 1)
        self.assertEqual(summary["retries"], len(self.time.sleeps))
        self.assertNotIn(LONG_WORD, self.layout.summary_path("embed").read_text())

    def test_requests_in_flight_when_the_server_crashes_are_not_blamed(self):
        stub = FaultStub(crash_over=CRASH_OVER, rule=lambda n, texts, body: Fault(delay=0.05))
        self.restart_when_slept(stub)
        with stub:
            with self.assertRaises(ModelServerError):
                self.embed_with(stub, deadline=30.0, EMBED_BATCH="2", EMBED_CONCURRENCY="3",
                                EMBED_BATCH_FIXED="1")
        summary = self.summary()
        self.assertEqual((summary["failed_by_reason"], summary["embedded"]), ({"server_crash": 1}, 17))
        self.assert_every_vector_right(except_texts={self.crasher()})

    def test_a_server_that_stays_down_after_a_crash_is_still_an_outage(self):
        with FaultStub(crash_over=CRASH_OVER) as stub:
            with self.assertRaises(ModelServerError) as caught:
                self.embed_with(stub, deadline=30.0, EMBED_BATCH="8")
        self.assertIn("did not recover within EMBED_RETRY_DEADLINE=30s", str(caught.exception))
        self.assertEqual(self.summary()["stopped"], "retry_deadline")

    def test_a_server_restarting_by_itself_through_the_cli(self):
        root = Path(__file__).resolve().parents[2]
        with FaultStub(crash_over=CRASH_OVER, restart_after=0.2) as stub:
            env = {key: value for key, value in os.environ.items() if not key.startswith(("EMBED_", "BASTION_"))}
            env.update(EMBED_URL=stub.url, EMBED_BATCH="4", EMBED_RETRY_DEADLINE="60", PYTHONPATH=str(root))
            process = subprocess.run(
                [sys.executable, "-m", "bastion_agent", "embed", str(self.manifest_path), "--out", str(self.layout.root)],
                cwd=root, env=env, capture_output=True, text=True, timeout=120)
            crashes = stub.crashes
        self.assertEqual(process.returncode, ModelServerError.exit_code, process.stderr)
        self.assertIn("server_crash: 1", process.stderr)
        summary = self.summary()
        self.assertEqual((summary["embedded"], summary["stopped"]), (17, None))
        self.assertGreaterEqual(crashes, 2)
        self.assert_every_vector_right(except_texts={self.crasher()})


class CounterTests(FaultCase):
    def test_a_run_stopped_at_the_deadline_counts_its_requests_and_retries(self):
        with FaultStub(rule=lambda n, texts, body: overloaded(503) if n else None) as stub:
            with self.assertRaises(ModelServerError):
                self.embed_with(stub, deadline=30.0, EMBED_BATCH="4")
            posts = stub.posts
        summary = self.summary()
        self.assertEqual(summary["stopped"], "retry_deadline")
        self.assertEqual(summary["requests"], posts - 1)
        self.assertEqual(summary["retries"], len(self.time.sleeps))
        self.assertGreater(summary["retries"], 0)

    def test_a_batch_that_never_succeeded_is_counted(self):
        gone = Fault(status=404, message='model "stub-model" not found, try pulling it first')
        with FaultStub(plan=[Fault(), Fault(), overloaded(503), gone]) as stub:
            with self.assertRaises(ModelServerError):
                self.embed_with(stub, EMBED_BATCH="4", EMBED_BATCH_FIXED="1")
            posts = stub.posts
        summary = self.summary()
        self.assertEqual(posts, 4)
        self.assertEqual((summary["requests"], summary["retries"], summary["embedded"]), (3, 1, 4))

    def test_splits_and_retries_are_all_counted_in_a_run_that_succeeds(self):
        def rule(n, texts, body):
            if n == 1:
                return overloaded(429)
            return Fault(status=500) if len(texts) > 2 else None

        with FaultStub(rule=rule) as stub:
            summary = self.embed_with(stub, EMBED_BATCH="4", EMBED_BATCH_FIXED="1")
            posts = stub.posts
        self.assertEqual(summary["failed"], 0)
        self.assertEqual(summary["requests"], posts - 1)
        self.assertEqual(summary["retries"], 1)
        self.assert_every_vector_right()


if __name__ == "__main__":
    unittest.main()
