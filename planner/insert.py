"""``INSERT INTO <sink> <query>``: the bound form of an insert into a catalog sink.

The binder (``planner.bind``) produces :class:`InsertInto` when the target of an ``INSERT``
is a catalog sink (an ``INSERT`` into a Spark table stays Spark's business). Running it is
``wavesql.jobs``' work: a query that reads catalog streams runs as an incremental,
exactly-once continuous query (trigger ``availableNow``); see that module for where the
output, the checkpoint and the late rows go.

Why the IR node lives here and not in ``planner.ir``: an insert is a statement *around* a
query -- the query is bound like any other, and the node adds only the sink and the text
the continuous runner re-reads -- so it is kept beside the code that builds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from . import ir


@dataclass(frozen=True)
class InsertInto(ir.Statement):
    """Write the result of ``query`` to the catalog sink ``sink``.

    Attributes
    ----------
    sink : wavesql.catalog.SinkDef
    query : ir.Relation
        The bound (not yet rewritten) query.
    query_span : tuple of int
        Where the query is in the text the statement came from (offsets).
    late_into : Any
        The ``LATE INTO`` target (``exp.Literal`` path or ``exp.Table`` sink), or None.
    late_span : tuple of int, optional
        Where ``LATE INTO ...`` is in that text: the runner is given the query with it
        blanked out and the late sink as a parameter, so row-by-row queries may say it too.
    continuous : bool
        Whether the query reads a catalog stream (then it runs incrementally).
    statement_text : str
        The statement's own text (``INSERT INTO ...``), which names the job.
    """

    sink: Any
    query: ir.Relation
    query_span: tuple[int, int]
    late_into: Any
    late_span: tuple[int, int] | None
    continuous: bool
    statement_text: str
    kind: ClassVar[str] = "insert"

    def relations(self):
        return (self.query,)


def reads_streams(rel: ir.Relation) -> bool:
    """Whether ``rel`` reads a catalog stream anywhere (through views and windows too)."""
    return any(isinstance(r, ir.StreamScan) for r in ir.walk(rel))


def blank_outside(text: str, keep: list[tuple[int, int]]) -> str:
    """``text`` with every character outside the ``keep`` ranges replaced by a space
    (newlines stay), so offsets, lines and columns of what is kept are unchanged."""
    out = [ch if ch == "\n" else " " for ch in text]
    for start, end in keep:
        out[start:end] = text[start:end]
    return "".join(out)


def flat_format_problem(fmt: str, fields) -> str | None:
    """The first field (``name type``) a ``fmt`` file cannot hold, or None.

    ``fields`` are ``planner.ir.Field``-like objects with ``name`` and ``type`` (Spark DDL).
    """
    if fmt != "csv":
        return None
    for f in fields:
        kind = str(f.type).strip().lower()
        if kind.startswith(("array", "struct", "map", "variant")):
            return f"{f.name} {f.type}"
    return None
