"""Generating SQL back from WaveSQL's AST: WaveSQL text, and Spark SQL for Spark to run.

:class:`SparkOutGenerator` is Spark's generator with the fixes needed to hand user SQL back
to Spark unchanged in meaning; :class:`WaveSQLGenerator` adds WaveSQL's nodes and the extra
args WaveSQL hangs on sqlglot's (a table's window, a join's sync range, ``EMIT``, ``LATE
INTO``), written so that the parser reads them back to the same tree.
"""

from __future__ import annotations

import re

from sqlglot import exp
from sqlglot.generators.spark import SparkGenerator

from wavesql.dialect.nodes import (
    Combine,
    CreateStream,
    DropObject,
    Emit,
    Explain,
    LateInto,
    RelationToStream,
    Resample,
    ShowObjects,
    StreamWindow,
    SyncRange,
    ZipInput,
)
from wavesql.dialect.syntax import CLAUSE_ARGS, CLAUSES, TIME_UNITS

# An interval value the parser reads back as one NUMBER token (the short ``5 SECONDS`` form).
_PLAIN_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?")


def _regexp_replace_sql(self, e: exp.RegexpReplace) -> str:
    # sqlglot parses regexp_replace(s, p) (Spark needs 3 arguments) but its Spark generator
    # then fails with KeyError('replacement'); writing the call back as given lets Spark
    # report WRONG_NUM_ARGS at the call instead.
    return self.func("REGEXP_REPLACE", e.this, e.expression, e.args.get("replacement"),
                     e.args.get("position"))


def _within_group_sql(self, e: exp.WithinGroup) -> str:
    # sqlglot writes percentile_cont/percentile_disc(p) WITHIN GROUP (ORDER BY x) for Spark
    # as percentile_approx(x, p): an approximation, and DESC is lost. Spark 3.3+ has the
    # exact ordered-set aggregates, so write them as the user did.
    inner = e.this
    if isinstance(inner, (exp.PercentileCont, exp.PercentileDisc)) and not inner.expression:
        name = "PERCENTILE_CONT" if isinstance(inner, exp.PercentileCont) else "PERCENTILE_DISC"
        return f"{self.func(name, inner.this)} WITHIN GROUP ({self.sql(e, 'expression').strip()})"
    return SparkGenerator.TRANSFORMS[exp.WithinGroup](self, e)


class SparkOutGenerator(SparkGenerator):
    """Spark's generator with the fixes WaveSQL needs to hand user SQL back to Spark."""

    # Spark's strict-non-reserved words cannot be a bare alias even outside ANSI mode
    # (`FROM t AS right` is a syntax error): back-quote them, as a user who wrote them had to.
    RESERVED_KEYWORDS = SparkGenerator.RESERVED_KEYWORDS | {
        "anti", "cross", "except", "full", "inner", "intersect", "join", "lateral", "left",
        "minus", "natural", "on", "right", "semi", "setminus", "union", "using"}

    TRANSFORMS = {
        **SparkGenerator.TRANSFORMS,
        exp.RegexpReplace: _regexp_replace_sql,
        # sqlglot drops to_char's format for Spark (CAST(x AS STRING)); Spark has to_char
        exp.ToChar: lambda self, e: self.func("TO_CHAR", e.this, e.args.get("format")),
        exp.WithinGroup: _within_group_sql,
    }


class WaveSQLGenerator(SparkOutGenerator):
    """Spark's generator plus WaveSQL's nodes and extra args."""

    TRANSFORMS = {
        **SparkOutGenerator.TRANSFORMS,
        CreateStream: lambda self, e: self.createstream_sql(e),
        DropObject: lambda self, e: self.dropobject_sql(e),
        ShowObjects: lambda self, e: f"SHOW {e.kind}",
        Explain: lambda self, e: self.explain_sql(e),
        StreamWindow: lambda self, e: self.streamwindow_sql(e),
        SyncRange: lambda self, e: (
            f"RANGE ({self.sql(e, 'start')}, {self.sql(e, 'end')})"
            + (f" MISSING {e.args['missing']}" if e.args.get("missing") else "")),
        RelationToStream: lambda self, e: self.relationtostream_sql(e),
        Emit: lambda self, e: self.seg(f"EMIT {e.kind}"),
        LateInto: lambda self, e: self.seg(f"LATE INTO {self.sql(e, 'this')}"),
        Resample: lambda self, e: self.resample_sql(e),
        Combine: lambda self, e: self.combine_sql(e),
        ZipInput: lambda self, e: self.sql(e, "this") + (
            f" AS {self.sql(e, 'alias')}" if e.args.get("alias") else "") + (
            f" BY {self.sql(e, 'order')}" if e.args.get("order") else ""),
    }

    def wave_interval_sql(self, node: exp.Expr | None, keyword: bool = False) -> str:
        """``5 SECONDS`` for simple intervals (``INTERVAL 5 SECONDS`` with ``keyword``)."""
        if (isinstance(node, exp.Interval) and isinstance(node.this, exp.Literal)
                and isinstance(node.args.get("unit"), exp.Var)
                and node.args["unit"].name in TIME_UNITS.values()):
            value = node.this.name
            # The short form is only for what the parser reads back as one NUMBER token;
            # '-1', '.5', '+2', 'nan' keep the INTERVAL '...' form.
            if not _PLAIN_NUMBER.fullmatch(value):
                return f"INTERVAL {self.sql(node.this)} {node.args['unit'].name}"
            unit = node.args["unit"].name + ("" if value == "1" else "S")
            return f"{'INTERVAL ' if keyword else ''}{value} {unit}"
        return self.sql(node)

    def createstream_sql(self, e: CreateStream) -> str:
        head = ["CREATE"]
        head += ["OR REPLACE"] if e.args.get("replace") else []
        head += [e.kind]
        head += ["IF NOT EXISTS"] if e.args.get("exists") else []
        sql = " ".join(head) + f" {self.sql(e, 'this')}"
        if e.args.get("columns"):
            sql += f" ({self.expressions(e, key='columns', flat=True)})"
        for clause in CLAUSES[e.kind]:
            arg = CLAUSE_ARGS[clause]
            value = e.args.get(arg)
            if not value:
                continue
            if clause == "OPTIONS":
                text = ", ".join(f"{self.sql(p, 'this')} = {self.sql(p, 'expression')}"
                                 for p in value)
                text = f"({text})"
            elif clause in ("WATERMARK", "HEARTBEAT"):
                text = self.wave_interval_sql(value)
            elif clause == "RATE" and e.args.get("rate_unit"):
                text = f"{self.sql(value)} {e.args['rate_unit']}"
            elif clause == "AS":
                text = self.sql(value)
            elif clause in ("FROM", "TO") and e.args.get("source"):
                text = f"{self.sql(e, 'source')} {self.sql(value)}"
            else:
                text = self.sql(value)
            sql += self.seg(f"{clause} {text}")
        return sql

    def dropobject_sql(self, e: DropObject) -> str:
        exists = " IF EXISTS" if e.args.get("exists") else ""
        return f"DROP {e.kind}{exists} {self.sql(e, 'this')}"

    def explain_sql(self, e: Explain) -> str:
        kind = f" {e.kind}" if e.kind else ""
        return f"EXPLAIN{kind} {self.sql(e, 'this')}"

    def streamwindow_sql(self, e: StreamWindow) -> str:
        kind = e.kind
        size, slide = e.args.get("size"), e.args.get("slide")
        if kind == "RANGE":
            body = f"RANGE {self.wave_interval_sql(size)}"
            body += f" SLIDE {self.wave_interval_sql(slide)}" if slide else ""
        elif kind == "UNBOUNDED":
            body = "RANGE UNBOUNDED"
        elif kind == "ROWS":
            body = f"ROWS {self.sql(size)}"
        elif kind == "PARTITION_ROWS":
            keys = self.expressions(e, key="partition_by", flat=True)
            body = f"PARTITION BY {keys} ROWS {self.sql(size)}"
        elif kind == "SPLIT":
            body = f"PARTITION INTO {self.sql(e, 'into')} BY {self.sql(e, 'by')}"
            when = self.sql(e, "replicate_when")
            body += f" REPLICATE WHEN {when}" if when else ""
        elif kind == "SAMPLES":
            body = f"SAMPLES {self.sql(size)}" + (f" SLIDE {self.sql(slide)}" if slide else "")
        else:
            body = kind
        return f"[{body}]"

    def relationtostream_sql(self, e: RelationToStream) -> str:
        alias = self.sql(e, "alias")
        return f"{e.kind} {self.wrap(e)}" + (f" AS {alias}" if alias else "")

    def combine_sql(self, e: Combine) -> str:
        alias = self.sql(e, "alias")
        return (f"{e.kind}({self.expressions(e, flat=True)})"
                + (f" AS {alias}" if alias else ""))

    def resample_sql(self, e: Resample) -> str:
        args = [self.sql(e, "this"), self.sql(e, "time"),
                self.wave_interval_sql(e.args.get("period"), keyword=True)]
        if e.args.get("method"):
            args.append(self.sql(e, "method"))
        keys = e.args.get("partition_by")
        by = f" PARTITION BY {', '.join(self.sql(k) for k in keys)}" if keys else ""
        alias = self.sql(e, "alias")
        return f"RESAMPLE({', '.join(args)}{by})" + (f" AS {alias}" if alias else "")

    def subquery_sql(self, expression: exp.Subquery, sep: str = " AS ") -> str:
        # A window over a subquery sits between it and its alias: (SELECT ...) [RANGE 1
        # MINUTE] AS s
        window = expression.args.get("window")
        if window is None:
            return super().subquery_sql(expression, sep)
        bare = expression.copy()
        bare.set("window", None)
        alias = bare.args.get("alias")
        bare.set("alias", None)
        sql = f"{super().subquery_sql(bare, sep)} {self.sql(window)}"
        return f"{sql}{sep}{self.sql(alias)}" if alias else sql

    def table_parts(self, expression: exp.Table) -> str:
        # The window sits between the table name and its alias: trades [RANGE 1 MINUTE] t
        sql = super().table_parts(expression)
        window = expression.args.get("window")
        return f"{sql} {self.sql(window)}" if window else sql

    def join_sql(self, expression: exp.Join, join_op: str | None = None) -> str:
        sync = expression.args.get("sync")
        if sync is None:
            return super().join_sql(expression, join_op)
        return f"{self.seg('SYNC JOIN')} {self.sql(expression, 'this')} ON {self.sql(sync)}"

    def after_limit_modifiers(self, expression: exp.Expr) -> list[str]:
        return [*super().after_limit_modifiers(expression),
                self.sql(expression, "emit"), self.sql(expression, "late_into")]
