"""Shared by the training benchmarks: a trainer callback that times training steps only."""

from __future__ import annotations

import time
from typing import Any

from transformers import TrainerCallback


class StepTimer(TrainerCallback):
    """Sums the wall time of training steps (forward, backward, optimizer step); evaluation and saving excluded."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.steps = 0
        self._start: float | None = None

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._start = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._start is not None:
            self.seconds += time.perf_counter() - self._start
            self.steps += 1
            self._start = None
