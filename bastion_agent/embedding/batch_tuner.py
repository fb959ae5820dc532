"""Finding the model server's best batch size and concurrency while embedding.

The fastest batch depends on the server, not on us: llama.cpp's server was
faster one input at a time (22.8 windows/s at batch 1 against 16.5 at 32),
the embedded model server the other way round (9.8 at 32 against 8.0 at 1).
So the embed stage starts at ``EMBED_BATCH`` and lets ``BatchTuner`` move:

- **What is measured.** Each batch that succeeded in one request reports
  its windows and the seconds that request took. With ``c`` requests in
  flight the server completes ``c`` batches per request time (Little's law),
  so the batch's rate is ``c * windows / seconds``. A trial's rate is the
  *median* of its batches' rates: one slow answer (another process on the
  machine, a garbage collection) does not move a median of five.
- **How long a trial lasts.** At least ``min_batches`` batches and
  ``min_windows`` windows, after dropping the first batch of each trial
  (the server's warm-up at a new size, and batches cut before the change).
  A batch of another size (the last one of a run, one split after a
  refusal) is not counted.
- **How it moves.** Batch first, at concurrency 1: measure the start, then
  double; if doubling is not faster, halve instead. It keeps stepping the
  same way while each step is faster than the best so far (a server
  fastest at batch 1 may gain only a few per cent per halving from 32),
  and then takes the fastest size measured **if** it beats the start by
  more than ``margin`` (10 %), else stays at the start. Then concurrency,
  at that batch: 2, 4, ... up to ``EMBED_CONCURRENCY`` (the last step
  clamped to it), the same way. Steps go one way only, no setting is
  measured twice, and once settled nothing moves again: the tuner cannot
  oscillate, whatever the noise; noise can cost exploring, not a move.
- **Bounds.** Batch 1 to ``EMBED_BATCH`` when the user set it (a ceiling:
  one sets it because the server refuses larger batches), else 1 to
  ``MAX_BATCH`` from the default start of 32; never above a limit the
  server has shown (a batch refused as too large, ``cap``).

- **Paired.** While a batch size is on trial, every other batch is cut at
  the best size so far, and the trial is judged against the best's rate
  measured in those same minutes: a machine that gets busier or quieter
  while tuning (two cores shared with others) shifts both alike. The gain
  over the start is the product of those paired ratios.

It is a pure object: the engine feeds it measurements (``record``) and asks
for the setting to cut the next batch with (``next_setting``); tests feed
it made-up timings. ``EMBED_BATCH_FIXED=1`` does without it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

MAX_BATCH = 256  # the largest batch the tuner tries (unless EMBED_BATCH starts above it)
MIN_TRIAL_BATCHES = 5
MIN_TRIAL_WINDOWS = 64
MARGIN = 0.10  # a step must be this much faster to be taken

TUNING, SETTLED = "tuning", "settled"


@dataclass(frozen=True)
class Setting:
    """What the next batch is cut with: its size and how many requests may be in flight."""

    batch: int
    concurrency: int


@dataclass
class Trial:
    """The measurements of one setting."""

    setting: Setting
    rates: list[float] = field(default_factory=list)
    reference: list[float] = field(default_factory=list)  # the best setting's rates, measured in turn with these
    windows: int = 0
    skipped: int = 0  # batches dropped at the start of the trial

    @property
    def rate(self) -> float | None:
        return statistics.median(self.rates) if self.rates else None


class BatchTuner:
    """Hill-climbing on batch size, then on concurrency; see the module docstring."""

    def __init__(self, start_batch: int, max_concurrency: int = 1, *, max_batch: int = MAX_BATCH,
                 min_batches: int = MIN_TRIAL_BATCHES, min_windows: int = MIN_TRIAL_WINDOWS,
                 margin: float = MARGIN, skip_first: int = 1):
        self.max_batch = max(max_batch, start_batch)
        self.max_concurrency = max(1, max_concurrency)
        self.min_batches = min_batches
        self.min_windows = min_windows
        self.margin = margin
        self.skip_first = skip_first
        self.trials: list[Trial] = []
        self.best: Trial | None = None  # the fastest trial of this phase
        self.anchor: Trial | None = None  # the phase's first trial: what the best must beat by the margin
        self.phase = "batch"
        self.direction = 2  # batch phase: double (2) or halve (0.5)
        self.turned = False  # whether the batch phase already turned from doubling to halving
        self.gain = 1.0  # how much faster the best is than the anchor, from the paired comparisons
        self.state = TUNING
        self.current = Trial(Setting(start_batch, 1))
        self._reference_next = False

    # -- what the engine asks ----------------------------------------------

    def setting(self) -> Setting:
        """The setting to cut the next batch with."""
        return self.current.setting

    def next_setting(self) -> Setting:
        """The setting to cut the next batch with. While a batch size is on trial, every other batch is
        cut at the best size so far: both are measured under the same load on the machine, so a machine
        that gets busier or quieter while tuning does not make a size look faster than it is."""
        if not self._paired():
            return self.current.setting
        self._reference_next = not self._reference_next
        return self.best.setting if self._reference_next else self.current.setting

    def _paired(self) -> bool:
        return (self.state == TUNING and self.phase == "batch" and self.best is not None
                and self.best.setting != self.current.setting)

    def record(self, setting: Setting, windows: int, seconds: float) -> Setting:
        """One batch of ``windows`` cut at ``setting`` took ``seconds`` in one request; the next setting."""
        trial = self.current
        if self.state == SETTLED or windows != setting.batch or seconds <= 0:
            return self.setting()
        rate = setting.concurrency * windows / seconds
        if self._paired() and setting == self.best.setting:
            trial.reference.append(rate)
        elif setting != trial.setting:
            return self.setting()
        elif trial.skipped < self.skip_first:
            trial.skipped += 1
            return self.setting()
        else:
            trial.rates.append(rate)
            trial.windows += windows
        enough_reference = not self._paired() or len(trial.reference) >= self.min_batches
        if len(trial.rates) >= self.min_batches and trial.windows >= self.min_windows and enough_reference:
            self._finish(trial)
        return self.setting()

    def cap(self, limit: int) -> Setting:
        """The server refused a batch larger than ``limit``: never try above it again."""
        self.max_batch = min(self.max_batch, max(1, limit))
        setting = self.current.setting
        if setting.batch <= self.max_batch:
            return self.setting()
        if self.state == SETTLED or self.best is None:  # settled, or the start itself too large: use the limit
            self.current = Trial(Setting(self.max_batch, setting.concurrency))
        else:  # a step up went over the limit: as good as a step that did not help
            self._after_trial(improved=False)
        return self.setting()

    @property
    def settled(self) -> Setting:
        """The best setting measured so far (the start while nothing is measured)."""
        if self.state == SETTLED:
            return self.current.setting
        winner = self._winner()
        return winner.setting if winner else self.current.setting

    def report(self) -> dict:
        """The summary's view: where it settled, whether it finished, and every trial's rate."""
        return {
            "batch_settled": self.settled.batch,
            "concurrency_settled": self.settled.concurrency,
            "batch_tuning": self.state if self.state == SETTLED else "unfinished",
            "batch_trials": [{"batch": t.setting.batch, "concurrency": t.setting.concurrency,
                              "windows_per_s": round(t.rate, 2), "batches": len(t.rates)}
                             for t in self.trials if t.rate is not None],
        }

    # -- moving ------------------------------------------------------------

    def _finish(self, trial: Trial) -> None:
        self.trials.append(trial)
        if self.best is None:
            self.best = self.anchor = trial
            self.gain = 1.0
            self._step()
            return
        reference = statistics.median(trial.reference) if trial.reference else self.best.rate
        ratio = trial.rate / reference
        improved = ratio > 1.0
        if improved:
            self.best = trial
            self.gain *= ratio
        self._after_trial(improved)

    def _winner(self) -> Trial | None:
        """The phase's best, if it beats where the phase started by the margin; else where it started."""
        if self.best is None or self.anchor is None:
            return self.best
        return self.best if self.gain > 1 + self.margin else self.anchor

    def _after_trial(self, improved: bool) -> None:
        """Keep going the same way after a step that helped; after the first step up that did not, try down once."""
        if improved:
            self._step()
        elif self.phase == "batch" and self.direction == 2 and not self.turned and self._only_start_measured():
            self._turn()
        else:
            self._next_phase()

    def _only_start_measured(self) -> bool:
        """Whether the best batch is still the first one measured (so a step down was never tried)."""
        return self.best is self.trials[0]

    def _turn(self) -> None:
        self.turned = True
        self.direction = 0.5
        self._step()

    def _step(self) -> None:
        """Move from the best setting one step in the current direction; at a bound, what a failed step does."""
        best = self.best.setting
        if self.phase == "batch":
            batch = min(self.max_batch, best.batch * 2) if self.direction == 2 else best.batch // 2
            candidate = Setting(batch, best.concurrency)
        else:
            candidate = Setting(best.batch, min(self.max_concurrency, best.concurrency * 2))
        if candidate == best or candidate.batch < 1 or self._measured(candidate):
            self._after_trial(improved=False)
            return
        self.current = Trial(candidate)

    def _next_phase(self) -> None:
        if self.phase == "batch" and self.max_concurrency > 1:
            self.phase = "concurrency"
            self.best = self.anchor = self._winner()
            self.gain = 1.0
            self._step()
        else:
            self._settle()

    def _settle(self) -> None:
        self.state = SETTLED
        self.best = self._winner()
        setting = self.best.setting if self.best else self.current.setting
        self.current = Trial(Setting(min(setting.batch, self.max_batch), setting.concurrency))

    def _measured(self, setting: Setting) -> bool:
        return any(t.setting == setting for t in self.trials)
