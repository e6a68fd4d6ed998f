"""Fused query chains: a chain of SELECTs over one stream -- scalar expressions, WHEREs,
``lag`` and RANGE-framed OVER windows ordered by event time, GROUP BY tumbling windows, a
join with a small per-window aggregate -- evaluated in one numpy pass over one range of
event time (no Spark import).

This is TiLT's whole-query compilation on WaveSQL's terms. planner/physical/fused_compiler.py
compiles a chain such as TiLT's RSI (``d = v - lag(v)``, two sums of ``max(d, 0)``-like CASEs
over 14 ms, then ``100 - 100 / (1 + gain / loss)``) into a :class:`Program`; each Spark task
reads its range of the stream's Parquet files (sources/parquet_chunks.py) with enough rows
before it for every level's reach, runs the whole program over them here (:func:`run`), and
returns only its own rows. No intermediate result crosses into the JVM, and no level runs in
Spark's single partition.

**Completeness.** A task reads every row from some time ``T0`` on (all row groups that reach
it); rows before ``T0`` may be missing. A level's value at a row is *complete* when it depends
only on complete values of the level below: a frame ``[t - a, t]`` is complete once ``t - a``
is at or after the lower level's complete-from time, ``lag(x, n)`` once the row ``n`` places
back is complete. :func:`run` carries that time through the levels and returns None when the
range's first own row is not complete at the top; the planner then reads further back. (A
read that starts at the stream's first row is complete throughout.)

**Semantics are Spark's** (tests/test_fused_chain.py compares every construct with Spark's own
plan): see udfs/fused/evaluate.py for expressions and udfs/fused/windows.py for windows and
aggregates. Integer literals are INT (BIGINT beyond), decimal literals meet only FLOAT/DOUBLE
(then DOUBLE): the planner types every node before it gets here.

The modules, in reading order:

- ``expr``: the expression nodes (one frozen dataclass per construct);
- ``program``: :class:`Program` and its levels, windows and lookups (:class:`Level`,
  :class:`Window`, :class:`Lookup`);
- ``kinds``: the Spark types and their numpy / Arrow representations;
- ``evaluate``: the expression evaluator (a visitor over the nodes);
- ``windows``: the window, group and total kernels of a level;
- ``range_pass``: :func:`run`, the pass over one range, and its join.
"""

from .evaluate import ChainError
from .kinds import NUMERIC, result_type, to_arrow
from .program import Level, Lookup, Program, Window
from .range_pass import run

__all__ = ["ChainError", "Level", "Lookup", "NUMERIC", "Program", "Window", "result_type",
           "run", "to_arrow"]
