"""Analysis: the rules that turn a WaveSQL query into plain Spark SQL over named inputs.

``planner.bind.bind_query`` applies :data:`RULES` in order to a query's AST. Each rule is
one module here, named after what it does, and has one signature::

    rule(node: exp.Expression, ctx: BindContext, found: Found) -> exp.Expression

It returns ``node`` itself when it has nothing to do, else a rewritten copy -- never the
tree it was given changed, since ``bind_query`` tells the user's own SQL (sent to Spark as
typed) from a rewritten one by identity -- and records in ``found``
(planner/analyze/context.py) the inputs it made: each WaveSQL construct it takes out of
the SQL becomes an input of the IR (``ir.WindowScan``, ``ir.SignalStage``...) that the SQL
reads by a generated name. A check is a rule that returns ``node`` or raises a positioned
``WaveSQLError``. After the last rule the AST is Spark SQL, which Spark's analyzer types
(``Environment.analyze``). Each module's docstring shows its rule on an example.

The order matters: MERGE/ZIP become subqueries first, so that no other rule needs to know
them; functions are checked next, on the calls the user wrote (before signal stages
replace them with columns); a SYNC JOIN's control may be an input that the ISTREAM,
window and temporal rules made, so they run before it; pass-through subqueries merge
before the signal stages are taken out, so that the merged SELECT becomes one stage; the
rejections run on what no rule took; the inputs rule runs last, over the names the SQL
still reads.

The layout follows sqlglot's optimizer (``sqlglot/optimizer/optimizer.py``: a ``RULES``
tuple, one rule per module) and DataFusion's analyzer (named rules, semantic analysis
apart from optimisation, which is ``planner.optimize``'s). DDL and INSERT INTO a sink bind
in ``ddl.py`` and ``insert_into.py``; ``resolve.py`` resolves names for all of them.
"""

from . import (band_joins, checks, combine, inputs, passthrough, relation_to_stream,
               signal_stages, sync, temporal, windowed_subqueries, windows)

RULES = (
    # MERGE(...) / ZIP(...) -> subqueries, so every later rule binds them as such
    combine.expand_combines,
    # every function sqlglot does not know is Spark's or a signal function
    checks.check_functions,
    # ISTREAM/DSTREAM/RSTREAM (query) read as a table -> a named input (ir.StreamOf)
    relation_to_stream.extract_relation_to_streams,
    # `(SELECT ...) s [RANGE ...]` -> a CTE `s`, windowed as CTEs are
    windowed_subqueries.hoist_windowed_subqueries,
    # SELECT over `s [RANGE ...]` -> per-instant SQL over a named ir.WindowScan
    windows.extract_windows,
    # RESAMPLE(...) and ASOF JOIN -> named inputs computed by planner/temporal.py's SQL
    temporal.extract_temporal,
    # control SYNC JOIN signal ON RANGE (a, b) -> a named ir.SyncJoin
    sync.extract_syncs,
    # interval joins of two streams -> an extra equality on time bins
    band_joins.bin_band_joins,
    # SELECT over a pass-through subquery of a signal -> one SELECT over the signal
    passthrough.merge_passthrough,
    # SELECT over a signal (or a view of its segments) -> a named ir.SignalStage
    signal_stages.extract_signal_stages,
    # a WaveSQL construct no rule took is NOT_IMPLEMENTED where it stands
    checks.reject_wavesql_constructs,
    # a signal function left over is applied to something that is not a signal
    checks.reject_stray_signal_calls,
    # the names the SQL still reads -> catalog objects or Spark tables (found.read)
    inputs.read_inputs,
)
