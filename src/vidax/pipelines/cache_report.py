"""What a step cache did in one call (:class:`CacheReport`, for :class:`vidax.stats.RunStats`):
which steps and blocks ran or were skipped, and the seconds that saved."""

from __future__ import annotations

import dataclasses
import json

import numpy as np


@dataclasses.dataclass
class CacheReport:
    """What a step cache did in one call (for :class:`vidax.stats.RunStats`).

    Attributes:
        method: e.g. ``"first_block threshold=0.05"``. num_blocks: blocks per transformer pass.
        patterns: per branch label (``"cond"``, ``"uncond"``, ``"all"``), one letter per step:
            ``C`` computed, ``S`` skipped (the reference's decision).
        blocks_run, blocks_skipped: block evaluations per transformer pass as the reference counts
            them (a First-Block Cache skip still runs the first block).
        step_kind: per step, ``"full"``, ``"skipped"`` (no branch ran the remaining blocks) or
            ``"partial"`` (one branch skipped, computed with the batch).
        step_s: the steps' seconds (as in ``RunStats.step_s``).
        step_warm: per step, whether it is the first step of its call or expert segment (its first
            execution after the compile, slower: left out of :attr:`saved_s`).
        calibration: MagCache's calibration run: per branch label, the ratios of each step
            (float; the reference keeps one state per branch and prints each); None otherwise.
        unit: what ``num_blocks`` counts: ``"block"``, or ``"hooked module"`` (TaylorSeer's modes
            that predict modules while the blocks run).
        blocks_always: every block runs on every step (TaylorSeer predicting ``proj_out`` only):
            nothing is saved.
    """

    method: str
    num_blocks: int
    patterns: dict = dataclasses.field(default_factory=dict)
    blocks_run: int = 0
    blocks_skipped: int = 0
    step_kind: list = dataclasses.field(default_factory=list)
    step_s: list = dataclasses.field(default_factory=list)
    step_warm: list = dataclasses.field(default_factory=list)
    calibration: dict | None = None
    unit: str = "block"
    blocks_always: bool = False

    #: The records :meth:`StepCache.restore` puts back (the rest is set when the report is made).
    RECORDS = ("patterns", "blocks_run", "blocks_skipped", "step_kind", "step_s", "step_warm", "calibration")

    def records(self) -> dict:
        """A copy of the records so far, in JSON types."""
        return json.loads(json.dumps({name: getattr(self, name) for name in self.RECORDS}))

    def record(self, label: str, computed: bool, head_only: bool) -> None:
        self.patterns[label] = self.patterns.get(label, "") + ("C" if computed else "S")
        if computed:
            self.blocks_run += self.num_blocks
        else:
            self.blocks_run += int(head_only)
            self.blocks_skipped += self.num_blocks - int(head_only)

    @property
    def saved_s(self) -> float | None:
        """Seconds saved: (median computed step - median skipped step) x skipped steps, from this
        call's step times with the first step of each call / segment left out (its warm-up).
        None when it cannot be measured: every block ran (:attr:`blocks_always`), a kind of step
        is missing, or the skipped steps were not all faster than every computed one (the
        difference is within the steps' spread)."""
        if self.blocks_always:
            return None
        warm = self.step_warm + [False] * (len(self.step_s) - len(self.step_warm))
        timed = [(t, k) for t, k, w in zip(self.step_s, self.step_kind, warm) if not w]
        full = [t for t, k in timed if k != "skipped"]
        skipped = [t for t, k in timed if k == "skipped"]
        if not full or not skipped or max(skipped) >= min(full):
            return None
        n_skipped = sum(k == "skipped" for k in self.step_kind)
        return (float(np.median(full)) - float(np.median(skipped))) * n_skipped

    def _saved_text(self) -> str:
        saved = self.saved_s
        if saved is not None:
            return f"~{saved:.2f} s saved"
        if self.blocks_always or not any(k == "skipped" for k in self.step_kind):
            return "no time saved"
        return "time saved not measurable (first steps left out, the skipped steps were not all faster)"

    def describe(self) -> str:
        total = self.blocks_run + self.blocks_skipped
        pats = ", ".join(f"{k} {v}" for k, v in self.patterns.items())
        n_skip = sum(k == "skipped" for k in self.step_kind)
        if self.unit == "block":
            return (
                f"{self.method}: {self.blocks_run} of {total} block evaluations run, {self.blocks_skipped} skipped "
                f"(per step: {pats}); {n_skip} of {len(self.step_kind)} steps skipped the blocks, "
                f"{self._saved_text()}"
            )
        ran = "every block ran on every step" if self.blocks_always else "the modules not hooked ran on every step"
        return (
            f"{self.method}: {self.blocks_run} of {total} {self.unit} evaluations run, {self.blocks_skipped} "
            f"predicted instead (per step: {pats}, S = predicted); {ran}, {self._saved_text()}"
        )
