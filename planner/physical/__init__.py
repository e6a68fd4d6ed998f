"""Physical planning: the rules that choose how a query's Spark SQL runs.

``planner.lower`` lowers an ``ir.SqlQuery`` (Spark SQL over named inputs) by applying
:data:`RULES` in order to a :class:`SqlPlan` -- the query, the statement's Runtime, its
inputs lowered to DataFrames, its AST -- and then running the query over the inputs and
the views the rules made: its own text when no rule changed it, else the rewritten AST
rendered to Spark SQL once, after the last rule. Each rule is one module here, named after
what it does, and has one signature::

    rule(plan: SqlPlan) -> SqlPlan

It returns ``plan`` itself when it has nothing to do; else a new plan
(``dataclasses.replace``) whose AST (a copy: ``plan.ast()``) reads views the rule made
(``plan.views``: name -> DataFrame) in place of what it took out, or whose ``result`` is
the whole query's DataFrame -- no later rule and no SQL runs then. A rule changes how the
query runs, not its result: it applies only where its pass gives the rows, names and types
Spark's plan of the SQL would, leaves the SQL to Spark wherever it cannot be sure, and has
a setting that turns it off (wavesql/settings.py), which the tests use to compare the two.

What they share: Spark runs a window over a whole un-partitioned series (an OVER window
without PARTITION BY, a ``lag``, a RESAMPLE) in one partition, on one core, after a scan, a
shuffle and a sort. The rules cut such work into ranges of event time evaluated in
parallel by numpy kernels (udfs/), each range handed the rows its frames reach before it
(TiLT's boundary resolution). Where the input is a catalog Parquet stream read as it is,
each task reads its range straight from the files (file_ranges.py,
sources/parquet_chunks.py), cut to fit a Python task's memory (task_memory.py). No rule
applies to a continuous query's micro-batch (``rt.streams`` set): the continuous runner
has its own operators.

The order matters: the direct RESAMPLE and ASOF JOIN (direct_asof.py) come first because
they replace the whole query (its SQL never runs), and the chunked RESAMPLE / ASOF JOIN
(chunked_temporal.py) next, for the inputs the direct passes leave; fused chains come before chunked windows because a chain takes a
whole stack of SELECTs, their RANGE windows included, into one pass, and the chunked
windows then take, one SELECT at a time, the windows left in the SQL (reading the fused
views as inputs). A fused total over a RESAMPLE reuses the ranges the RESAMPLE's own
lowering planned (``rt.prepared``): inputs are lowered before the query that reads them.
Pushing a signal program into its WAV scan is an IR rewrite, not a rule here
(``planner.optimize``).

The layout mirrors planner/analyze/ (a ``RULES`` tuple, one rule per module). The modules
without a rule are what the rules share: sql_shapes.py (what they recognise in the SQL),
file_ranges.py and task_memory.py (ranges planned from the files' footers), row_filter.py
(a WHERE applied in the pass), and the fused chains' parts: fused_pass.py (the pass),
fused_compiler.py and fused_types.py (a SELECT compiled), fused_joins.py.
"""

from . import chunked_temporal, chunked_windows, direct_asof, direct_resample, fused_chains
from .plan import SqlPlan

__all__ = ["RULES", "SqlPlan"]

RULES = (
    # an un-keyed RESAMPLE of a Parquet stream -> the whole result, in parallel time ranges
    direct_resample.resample_in_ranges,
    # an un-keyed ASOF JOIN of two Parquet streams -> the whole result, in parallel ranges
    direct_asof.asof_in_ranges,
    # an un-keyed RESAMPLE or ASOF JOIN of any other input -> its result, in parallel chunks
    chunked_temporal.temporal_in_chunks,
    # chains of SELECTs with lag / RANGE windows over a Parquet stream -> one numpy pass each
    fused_chains.fuse_chains,
    # RANGE-framed OVER windows left in the SQL -> passes over chunks of event time
    chunked_windows.chunk_windows,
)
