"""What the incremental window kernel computes and the data it takes and gives back.

An :class:`Operator` (one windowed aggregate: its window, output stream, group keys and
aggregates) is planned by :mod:`wavesql.streaming.stateful.plan`; :class:`Rows` are a
bucket's new rows, encoded, and :class:`Results` the rows the kernel emits, in a
:class:`Step` with the bucket's next state and timer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

#: The spreads: a pane keeps their count, mean and sum of squared deviations (``M2``).
MOMENTS = ("var_samp", "var_pop", "stddev_samp", "stddev_pop")
#: Holistic aggregates keep the values themselves (:mod:`.window_holistic`).
HOLISTIC = ("percentile", "percentile_approx", "collect_list", "collect_set",
            "count_distinct", "sum_distinct")
FUNCTIONS = ("count", "sum", "avg", "min", "max") + MOMENTS + HOLISTIC
WINDOWS = ("SLIDE", "RANGE", "ROWS")
OUTPUTS = ("RSTREAM", "ISTREAM", "DSTREAM")


@dataclass(frozen=True, repr=False)
class Aggregate:
    """``func(argument arg)``; ``arg`` None is ``count(*)``. ``integral``: the argument is
    an integer type (its sum is a BIGINT, exact, an overflow an error). ``param``:
    percentile's fractions, an array of results when ``many``."""

    func: str
    arg: int | None = None
    integral: bool = False
    param: tuple = ()
    many: bool = False

    def __repr__(self) -> str:
        # a checkpoint's fingerprint holds the operator's repr: the fields added later
        # appear only when set, so checkpoints of the earlier aggregates still match
        extra = "".join(f", {name}={getattr(self, name)!r}" for name in ("param", "many")
                        if getattr(self, name))
        return (f"Aggregate(func={self.func!r}, arg={self.arg!r}, "
                f"integral={self.integral!r}{extra})")


@dataclass(frozen=True)
class Operator:
    """What one incremental windowed aggregate computes.

    ``window``: ``SLIDE`` (``[RANGE size SLIDE slide]``, tumbling when equal), ``RANGE``
    (unslid, ``[NOW]`` is ``RANGE 1 µs``) or ``ROWS`` (``[ROWS n]`` or ``[PARTITION BY k
    ROWS n]``, the partition being the group keys). ``keys``: number of group-key columns;
    ``order``: number of tie-order columns (``ROWS``: the stream's columns in declared
    order); ``changes``: ``EMIT CHANGES`` (SLIDE RSTREAM: windows not final yet too)."""

    window: str
    size: int
    slide: int = 0
    output: str = "RSTREAM"
    keys: int = 0
    aggregates: tuple[Aggregate, ...] = ()
    order: int = 0
    changes: bool = False

    def __post_init__(self):
        if self.window not in WINDOWS or self.output not in OUTPUTS or self.size <= 0:
            raise ValueError(f"bad operator {self}")
        if self.window != "SLIDE" and self.output == "RSTREAM":
            raise ValueError("RSTREAM of an unslid window emits every key at every instant "
                             "of any key: not incremental")
        if any(a.func not in FUNCTIONS for a in self.aggregates):
            raise ValueError(f"unknown aggregate in {self.aggregates}")

    @property
    def kind(self) -> str:
        return f"windowed-{self.window.lower()}"

    @property
    def pane(self) -> int:
        return math.gcd(self.size, self.slide)


@dataclass
class Rows:
    """A bucket's rows: ``ts`` (µs), ``passes`` (the WHERE holds), per key / argument /
    order column its values and its NULL mask."""

    ts: np.ndarray
    passes: np.ndarray
    keys: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    args: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    order: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ts)

    def take(self, idx) -> "Rows":
        pick = (lambda cols: [(v[idx], n[idx]) for v, n in cols])
        return Rows(self.ts[idx], self.passes[idx], pick(self.keys), pick(self.args),
                    pick(self.order))


@dataclass
class Results:
    """Output rows: instant (µs), final or not, key columns and aggregate values (each
    values + NULL mask)."""

    time: np.ndarray
    final: np.ndarray
    keys: list[tuple[np.ndarray, np.ndarray]]
    values: list[tuple[np.ndarray, np.ndarray]]

    def __len__(self) -> int:
        return len(self.time)


@dataclass
class Step:
    results: Results
    late: np.ndarray  # mask over the new rows: event time below the progress
    state: bytes | None  # None: nothing left to keep
    timer: int | None  # the next instant (µs) that becomes final work once progress passes it
    state_rows: int  # panes or rows kept
