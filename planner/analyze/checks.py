"""Rules that change nothing and refuse what cannot run, each with a WaveSQL error at the
user's text rather than a Spark error about SQL the user never wrote.

- :func:`check_functions` (before any rewrite): every function sqlglot does not know is
  Spark's or a signal function. ``SELECT avgg(px) FROM trades`` is ``UNKNOWN_FUNCTION``
  with "did you mean avg?", before Spark sees generated SQL.
- :func:`reject_wavesql_constructs` (after the rewrites): a WaveSQL construct no rule
  took is not implemented where it stands. ``SELECT * FROM trades EMIT FINAL`` (no
  window to emit) is ``NOT_IMPLEMENTED``, not a Spark parse error over generated text.
- :func:`reject_stray_signal_calls` (after the signal stages): a signal function left
  over is applied to something that is not a signal. ``SELECT seg_rms(x) FROM
  a_spark_table`` is ``NOT_IMPLEMENTED`` ("applied to a relation that is not a signal"),
  not Spark's unknown function.
"""

from __future__ import annotations

from sqlglot import exp

from wavesql.dialect import wavesql_nodes
from wavesql.errors import Span, WaveSQLError, did_you_mean
from wavesql.udfs import registry

from .context import BindContext, Found
from .resolve import resolve_relation


def check_functions(node: exp.Expression, ctx: BindContext, found: Found) -> exp.Expression:
    """Every function sqlglot does not know must be a Spark function or a signal function."""
    known: frozenset[str] | None = None
    for call in node.find_all(exp.Anonymous):
        if isinstance(call.parent, exp.Table) or call.find_ancestor(exp.Hint) is not None:
            continue  # table-valued functions in FROM and /*+ hints */ are Spark's to resolve
        name = call.name
        if registry.lookup(name) is not None:
            continue
        if known is None:
            known = ctx.env.function_names()
        if name.lower() in known:
            continue
        raise WaveSQLError(
            "UNKNOWN_FUNCTION", f"unknown function `{name}`", Span.of(call),
            hint=did_you_mean(name, list(known) + registry.names(), "functions"))
    return node


def reject_wavesql_constructs(node: exp.Expression, ctx: BindContext, found: Found
                              ) -> exp.Expression:
    """The rule form of :func:`check_no_wavesql_constructs`."""
    check_no_wavesql_constructs(node)
    return node


def check_no_wavesql_constructs(node: exp.Expression) -> None:
    """Refuse any WaveSQL construct left in ``node`` (also run on Spark commands)."""
    for construct in wavesql_nodes(node):
        what = type(construct).__name__
        raise WaveSQLError(
            "NOT_IMPLEMENTED",
            f"{_construct_name(construct)} parses but is not implemented yet",
            Span.of(construct),
            hint=f"this build plans plain Spark SQL over catalog streams; `{what}` lands "
                 "with the signals / time / sync work")


def _construct_name(node: exp.Expression) -> str:
    names = {
        "StreamWindow": "a stream window `[...]`",
        "Emit": "EMIT", "LateInto": "LATE INTO", "RelationToStream": "ISTREAM/DSTREAM/RSTREAM",
        "Resample": "RESAMPLE", "Combine": "MERGE/ZIP", "SyncRange": "SYNC JOIN", "SyncJoin": "SYNC JOIN",
    }
    return names.get(type(node).__name__, type(node).__name__)


def reject_stray_signal_calls(node: exp.Expression, ctx: BindContext, found: Found
                              ) -> exp.Expression:
    """A signal function left after stage extraction is applied to something that is not a
    signal in FROM (a view's or subquery's segments): say so, instead of letting Spark
    report an unknown function -- unless a FROM names nothing at all (a typo), which is
    the error to report."""
    for call in node.find_all(exp.Anonymous):
        if registry.lookup(call.name) is not None:
            ctes = {c.alias_or_name.lower() for c in node.find_all(exp.CTE)}
            for table in node.find_all(exp.Table):
                if (isinstance(table.this, exp.Identifier) and not table.args.get("db")
                        and table.name.lower() not in ctes
                        and not table.name.startswith("__wavesql_")):
                    resolve_relation(table.name, table.this, ctx)  # raises UNKNOWN_STREAM
            raise WaveSQLError(
                "NOT_IMPLEMENTED",
                f"signal function `{call.name}` is applied to a relation that is not a signal",
                Span.of(call),
                hint="signal functions run in the SELECT that reads a signal (FROM mic "
                     "[SAMPLES n]) or a catalog view of its segments; compute them there")
    return node
