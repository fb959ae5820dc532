"""The batch tuner as a pure unit: made-up request times fed in, the settings it chooses read out.

No clock and no server: each "server" here is a function from a setting to
the seconds one request takes, so every test is exact and instant.
"""

from __future__ import annotations

import itertools
import unittest

from bastion_agent.embedding.batch_tuner import MAX_BATCH, SETTLED, BatchTuner, Setting


def run(tuner: BatchTuner, seconds_for, batches: int = 2000) -> list[Setting]:
    """Feed ``batches`` batches, each cut at the tuner's setting; the settings used, in order."""
    used = []
    for n in range(batches):
        setting = tuner.next_setting()
        used.append(setting)
        tuner.record(setting, setting.batch, seconds_for(setting, n))
    return used


def serial(per_request: float, per_input: float, quadratic: float = 0.0):
    """A server that runs one request at a time: a fixed cost, a cost per input, and a cost that grows
    with the square of the batch (padding, attention over long batches)."""
    def seconds(setting: Setting, n: int) -> float:
        one = per_request + per_input * setting.batch + quadratic * setting.batch ** 2
        return one * setting.concurrency  # requests in flight queue behind each other
    return seconds


class BatchTunerTests(unittest.TestCase):
    def test_a_server_slow_with_big_batches_makes_it_halve_to_its_best(self):
        tuner = BatchTuner(32)
        run(tuner, serial(0.01, 0.01, quadratic=0.002))  # 13.5 windows/s at 32 ... 48.8 at 4, 52.6 at 2, 45.5 at 1
        self.assertEqual(tuner.state, SETTLED)
        self.assertEqual(tuner.settled, Setting(2, 1))
        self.assertEqual([t["batch"] for t in tuner.report()["batch_trials"]], [32, 64, 16, 8, 4, 2, 1])

    def test_small_gains_per_step_still_add_up(self):
        """llama.cpp's server: 38 % faster at batch 1 than at 32, a few per cent per halving."""
        def gentle(setting: Setting, n: int) -> float:
            return setting.batch / (12.4 - 0.1 * setting.batch)  # 12.3 windows/s at 1, 9.2 at 32

        tuner = BatchTuner(32)
        run(tuner, gentle)
        self.assertEqual(tuner.settled, Setting(1, 1))

    def test_a_best_within_the_margin_of_the_start_does_not_move_it(self):
        def slightly(setting: Setting, n: int) -> float:
            return setting.batch / (100 + (5 if setting.batch == 16 else 0))  # 16 is 5 % faster only

        tuner = BatchTuner(32)
        run(tuner, slightly)
        self.assertEqual(tuner.settled, Setting(32, 1))

    def test_a_server_with_a_big_fixed_cost_makes_it_double(self):
        tuner = BatchTuner(32)
        run(tuner, serial(2.0, 0.01))
        self.assertEqual(tuner.settled, Setting(MAX_BATCH, 1))
        self.assertEqual(tuner.state, SETTLED)

    def test_it_stays_within_one_and_the_maximum(self):
        for seconds in (serial(0.0, 0.01, quadratic=0.01), serial(5.0, 0.001)):
            with self.subTest(seconds=seconds):
                tuner = BatchTuner(4, max_batch=64)
                used = run(tuner, seconds)
                self.assertTrue(all(1 <= s.batch <= 64 for s in used))
        self.assertEqual(BatchTuner(4, max_batch=64).max_batch, 64)
        self.assertEqual(BatchTuner(500).max_batch, 500)  # EMBED_BATCH above the maximum is its own bound

    def test_noise_below_the_margin_never_moves_it_and_it_never_oscillates(self):
        """Every batch size equally fast, each request off by up to 8 % either way, in a pattern
        that makes every other trial look better: it must settle where it started."""
        wobble = itertools.cycle([0.92, 1.08, 1.0, 0.95, 1.05])

        def flat(setting: Setting, n: int) -> float:
            return setting.batch * 0.01 * next(wobble)

        tuner = BatchTuner(32, max_concurrency=4)
        used = run(tuner, flat, batches=5000)
        self.assertEqual(tuner.settled.batch, 32)
        self.assertEqual(used[-1000:], [used[-1]] * 1000)  # settled for good
        self.assertLessEqual(len(set(used)), len(tuner.trials))  # no setting but those tried, each tried once
        tried = [(t["batch"], t["concurrency"]) for t in tuner.report()["batch_trials"]]
        self.assertEqual(len(tried), len(set(tried)))

    def test_a_machine_getting_quieter_while_it_tunes_does_not_move_it(self):
        """Every size equally fast, but each request faster than the one before (other work ending):
        compared one after the other, each new size would look better; measured in turn, none is."""
        def easing(setting: Setting, n: int) -> float:
            return setting.batch * 0.01 * (2.0 - n / 2000)

        tuner = BatchTuner(32)
        run(tuner, easing, batches=1800)
        self.assertEqual(tuner.settled.batch, 32)

    def test_one_very_slow_answer_in_a_trial_does_not_decide(self):
        def with_outlier(setting: Setting, n: int) -> float:
            seconds = serial(0.5, 0.01)(setting, n)
            return seconds * 50 if n == 8 else seconds  # one answer 50 times slower, during the first trial

        tuner = BatchTuner(32)
        run(tuner, with_outlier)
        self.assertEqual(tuner.settled.batch, MAX_BATCH)  # bigger batches still win

    def test_concurrency_rises_while_the_server_runs_requests_in_parallel(self):
        def two_cores(setting: Setting, n: int) -> float:
            one = 0.05 + 0.01 * setting.batch
            return one * max(1, setting.concurrency / 2)  # two requests at once cost nothing more

        tuner = BatchTuner(32, max_concurrency=8, max_batch=32)
        run(tuner, two_cores)
        self.assertEqual(tuner.settled, Setting(32, 2))
        clamped = BatchTuner(32, max_concurrency=3, max_batch=32)
        run(clamped, lambda setting, n: 0.1)  # any number in flight is free: up to the maximum, 3
        self.assertEqual(clamped.settled, Setting(32, 3))
        self.assertEqual(BatchTuner(32).setting().concurrency, 1)

    def test_the_servers_batch_limit_is_never_exceeded(self):
        tuner = BatchTuner(8)
        used = []
        for n in range(3000):
            setting = tuner.next_setting()
            if setting.batch > 16:  # the server refuses it: the engine tells the tuner the limit
                tuner.cap(16)
                continue
            used.append(setting)
            tuner.record(setting, setting.batch, serial(2.0, 0.01)(setting, n))
        self.assertEqual(tuner.settled, Setting(16, 1))
        self.assertLessEqual(max(s.batch for s in used), 16)

    def test_a_start_above_the_servers_limit_starts_again_at_the_limit(self):
        tuner = BatchTuner(64)
        tuner.cap(20)
        self.assertEqual(tuner.setting(), Setting(20, 1))

    def test_batches_of_another_size_or_setting_are_not_counted(self):
        tuner = BatchTuner(32, min_batches=2, min_windows=1, skip_first=0)
        tuner.record(Setting(32, 1), 7, 0.1)  # the last, short batch of a run
        tuner.record(Setting(16, 1), 16, 0.1)  # cut before the last change
        tuner.record(Setting(32, 1), 32, 0.0)  # no time measured
        self.assertEqual(tuner.current.rates, [])
        tuner.record(Setting(32, 1), 32, 0.1)
        self.assertEqual(tuner.current.rates, [320.0])

    def test_the_report_says_where_it_settled_and_what_it_measured(self):
        tuner = BatchTuner(32)
        self.assertEqual(tuner.report(), {"batch_settled": 32, "concurrency_settled": 1,
                                          "batch_tuning": "unfinished", "batch_trials": []})
        run(tuner, serial(0.01, 0.01, quadratic=0.002))
        report = tuner.report()
        self.assertEqual((report["batch_settled"], report["batch_tuning"]), (2, "settled"))
        self.assertEqual(report["batch_trials"][0]["windows_per_s"], round(32 / (0.01 + 0.32 + 0.002 * 32 ** 2), 2))


if __name__ == "__main__":
    unittest.main()
