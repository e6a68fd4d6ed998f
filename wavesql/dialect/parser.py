"""WaveSQL's parser: Spark's, plus WaveSQL's statements, windows, joins and table sources.

How the additions hook in, and why they cannot change how plain Spark SQL parses:

* ``CREATE|DROP STREAM|SIGNAL|SINK`` (:mod:`wavesql.dialect.parser_ddl`), ``SHOW
  STREAMS|SIGNALS|SINKS|VIEWS``, ``EXPLAIN`` and ``ISTREAM|DSTREAM|RSTREAM (...)`` are
  recognised by their leading words before sqlglot's own statement parsers run. Spark has no
  statement starting with those words (``EXPLAIN`` we model ourselves; any other ``SHOW``
  stays sqlglot's ``Command`` with its full text).
* A stream window ``[...]`` is only taken right after a table name, and only when the
  first word inside is a window keyword; ``t[0]`` on a table is not Spark SQL anyway and
  ``arr[0]`` in expressions never reaches this hook.
* ``SYNC JOIN``, ``EMIT FINAL|CHANGES`` and ``LATE INTO`` are two-word sequences; the
  first word stays usable as an alias/column name unless the second word follows.
* ``RESAMPLE(`` in a FROM/JOIN position is WaveSQL's table function (Spark has no
  table-valued function of that name); ``resample(...)`` in expressions stays a call.
"""

from __future__ import annotations

import difflib
import typing as t

from sqlglot import exp
from sqlglot.tokens import TokenType

from wavesql.dialect.nodes import (
    EXPLAIN_KINDS,
    RELATION_TO_STREAM_KINDS,
    SYNC_MISSING,
    Combine,
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
from wavesql.dialect.parser_base import WINDOW_HINT
from wavesql.dialect.parser_ddl import DDLParser

# Words after SHOW that are Spark's own statements (never "did you mean STREAMS").
_SPARK_SHOW_WORDS = {"TABLES", "TABLE", "VIEWS", "COLUMNS", "CREATE", "DATABASES", "SCHEMAS",
                     "FUNCTIONS", "USER", "SYSTEM", "ALL", "PARTITIONS", "TBLPROPERTIES",
                     "CATALOGS", "CURRENT", "NAMESPACES"}


class WaveSQLParser(DDLParser):
    """Spark's parser plus WaveSQL's statements, clauses and table sources."""

    STATEMENT_PARSERS = {
        **DDLParser.STATEMENT_PARSERS,
        TokenType.SHOW: lambda self: self._parse_wave_show(),
    }

    # ---------------------------------------------------------------------- statements
    def _parse_statement(self) -> exp.Expr | None:
        word = self._word() if self._curr.token_type == TokenType.VAR else ""
        if word == "EXPLAIN":
            return self._parse_wave_explain()
        if word in RELATION_TO_STREAM_KINDS:
            return self._parse_relation_to_stream(with_alias=False)
        node = super()._parse_statement()
        outer = node.args.get("with_") if isinstance(node, RelationToStream) else None
        if outer is not None:
            # `WITH c AS (...) ISTREAM (SELECT ... FROM c ...)`: the CTEs belong to the query
            # ISTREAM wraps (the form written inside the parentheses means the same)
            node.set("with_", None)
            inner = node.this.args.get("with_")
            if inner is not None:
                outer.set("expressions", outer.expressions + inner.expressions)
                outer.set("recursive", outer.args.get("recursive") or inner.args.get("recursive"))
            node.this.set("with_", outer)
        return node

    def _parse_wave_explain(self) -> Explain:
        first = self._curr
        self._advance()
        kind = None
        if self._word() in EXPLAIN_KINDS:
            kind = self._word()
            self._advance()
        if not self._curr:
            self._fail("EXPLAIN needs a statement to explain",
                       hint="e.g. EXPLAIN IR SELECT * FROM trades")
        this = self._parse_statement()
        return self._positioned(Explain(this=this, kind=kind), first)

    def _parse_wave_show(self) -> exp.Expr:
        first = self._prev
        word = self._word() if self._curr.token_type == TokenType.VAR else ""
        # Spark's SHOW VIEWS [IN db] [LIKE ...] keeps its own meaning when qualified.
        if word in ("STREAMS", "SIGNALS", "SINKS") or (word == "VIEWS" and not self._next):
            self._advance()
            return self._positioned(ShowObjects(kind=word), first)
        if word not in _SPARK_SHOW_WORDS:
            self._reject_near_miss(self._index, ("STREAMS", "SIGNALS", "SINKS"), "SHOW")
        return self._parse_as_command(first)

    def _parse_relation_to_stream(self, with_alias: bool) -> RelationToStream:
        first = self._curr
        kind = self._word()
        self._advance()
        if not self._match(TokenType.L_PAREN):
            self._fail(f"{kind} needs a query in parentheses",
                       hint=f"e.g. {kind} (SELECT sym, avg(px) FROM trades [RANGE 1 MINUTE] "
                            "GROUP BY sym)")
        query = self._parse_select()
        if not isinstance(query, exp.Query):
            self._fail(f"expected a query inside {kind} ( ... )")
        if not self._match(TokenType.R_PAREN):
            self._fail(f"expected ) to close {kind} (")
        alias = self._parse_table_alias() if with_alias else None
        return self._positioned(RelationToStream(this=query, kind=kind, alias=alias), first)

    def _parse_insert(self) -> exp.Expr:
        # `INSERT INTO <sink> ISTREAM (...)`: the query of a job may be a relation-to-stream
        # query, as a continuous query may; only here (a view or CREATE TABLE AS keeps
        # sqlglot's query parser: no binder of theirs reads a RelationToStream)
        self._in_insert = True
        try:
            return super()._parse_insert()
        finally:
            self._in_insert = False

    def _parse_ddl_select(self) -> exp.Expr | None:
        if getattr(self, "_in_insert", False) and self._curr is not None \
                and self._curr.token_type == TokenType.VAR \
                and self._word() in RELATION_TO_STREAM_KINDS \
                and self._next is not None and self._next.token_type == TokenType.L_PAREN:
            return self._parse_relation_to_stream(with_alias=False)
        return super()._parse_ddl_select()

    # ----------------------------------------------------------------- table sources
    def _parse_table(self, schema: bool = False, joins: bool = False,
                     alias_tokens: t.Collection[TokenType] | None = None,
                     parse_bracket: bool = False, is_db_reference: bool = False,
                     parse_partition: bool = False, consume_pipe: bool = False) -> exp.Expr | None:
        if not schema and not is_db_reference and self._next.token_type == TokenType.L_PAREN:
            word = self._word() if self._curr.token_type in (TokenType.VAR, TokenType.MERGE) \
                else ""
            if word == "RESAMPLE":
                return self._parse_resample(alias_tokens)
            if word in ("MERGE", "ZIP"):
                return self._parse_combine(word, alias_tokens)
            if word in RELATION_TO_STREAM_KINDS:
                return self._parse_relation_to_stream(with_alias=True)
        table = super()._parse_table(schema=schema, joins=joins, alias_tokens=alias_tokens,
                                     parse_bracket=parse_bracket, is_db_reference=is_db_reference,
                                     parse_partition=parse_partition, consume_pipe=consume_pipe)
        if isinstance(table, (exp.Subquery, exp.Table)) and self._curr is not None \
                and self._curr.token_type == TokenType.L_BRACKET \
                and table.args.get("window") is None:
            # a window after the alias -- `(SELECT ...) s [RANGE 1 MINUTE]`, `trades t [NOW]`
            # -- or before it, as `trades [NOW] t` (Spark has no `[` after a table alias)
            table.set("window", self._parse_stream_window())
            if table.args.get("alias") is None:
                alias = self._parse_table_alias(alias_tokens or self.TABLE_ALIAS_TOKENS)
                if alias:
                    table.set("alias", alias)
        return table

    def _parse_combine(self, kind: str, alias_tokens: t.Collection[TokenType] | None) -> Combine:
        first = self._curr
        usage = ("MERGE(stream [AS name], stream [AS name][, ...])" if kind == "MERGE"
                 else "ZIP(stream [AS name] [BY column], stream [AS name] [BY column][, ...])")
        self._advance(2)
        inputs = []
        while True:
            start = self._curr
            table = self._parse_table_parts()
            if table is None or not table.name:
                self._fail(f"expected a stream name in {kind}(", hint=usage)
            name = None
            if self._match(TokenType.ALIAS):  # explicit AS only: `BY` would read as an alias
                name = self._parse_id_var(any_token=True)
                if name is None or name.name.upper() == "BY":
                    self._fail(f"expected a name after AS in {kind}(", hint=usage)
            order = None
            if kind == "ZIP" and self._match_text_seq("BY"):
                order = self._parse_column()
                if order is None:
                    self._fail("expected a column after BY", hint=usage)
            inputs.append(self._positioned(ZipInput(this=table, alias=name, order=order), start))
            if not self._match(TokenType.COMMA):
                break
        if not self._match(TokenType.R_PAREN):
            self._fail(f"expected `,` or ) in {kind}(", hint=usage)
        if len(inputs) < 2:
            self._fail(f"{kind} needs two or more inputs", first, hint=usage)
        node = self._positioned(Combine(kind=kind, expressions=inputs), first)
        alias = self._parse_table_alias(alias_tokens or self.TABLE_ALIAS_TOKENS)
        if alias:
            node.set("alias", alias)
        return node

    def _parse_resample(self, alias_tokens: t.Collection[TokenType] | None) -> Resample:
        first = self._curr
        usage = ("RESAMPLE(stream or (subquery), time_column, period[, 'method'] "
                 "[PARTITION BY key, ...])")
        self._advance(2)
        if self._curr is not None and self._curr.token_type == TokenType.L_PAREN:
            table = super()._parse_table(alias_tokens=self.TABLE_ALIAS_TOKENS)
            if not isinstance(table, exp.Subquery):
                self._fail("expected a stream name or a (subquery) as the RESAMPLE input",
                           hint=usage)
        else:
            table = self._parse_table_parts()
        if not self._match(TokenType.COMMA):
            self._fail("expected `,` after the RESAMPLE input", hint=usage)
        time = self._parse_column()
        if time is None or not self._match(TokenType.COMMA):
            self._fail("expected a time column and `,` in RESAMPLE", hint=usage)
        period = self._parse_wave_interval("the time column")
        method = None
        if self._match(TokenType.COMMA):
            method = self._parse_string()
            if not (isinstance(method, exp.Literal) and method.is_string):
                self._fail("the RESAMPLE method must be a quoted string", hint=usage)
        keys = None
        if self._match(TokenType.PARTITION_BY):
            keys = []
            while True:
                key = self._parse_column()
                if not isinstance(key, exp.Column):
                    self._fail("expected a key column after PARTITION BY", hint=usage)
                keys.append(key)
                if not self._match(TokenType.COMMA):
                    break
        if not self._match(TokenType.R_PAREN):
            self._fail("expected ) to close RESAMPLE(", hint=usage)
        node = self._positioned(Resample(this=table, time=time, period=period, method=method,
                                         partition_by=keys), first)
        alias = self._parse_table_alias(alias_tokens or self.TABLE_ALIAS_TOKENS)
        if alias:
            node.set("alias", alias)
        return node

    def _parse_bracket(self, this: exp.Expr | None = None) -> exp.Expr | None:
        # Spark has no `table[...]`, so a bracket after a table name is always a window.
        if isinstance(this, exp.Table) and self._curr.token_type == TokenType.L_BRACKET:
            this.set("window", self._parse_stream_window())
            return this
        return super()._parse_bracket(this)

    def _parse_stream_window(self) -> StreamWindow:
        first = self._curr
        self._advance()  # [
        args: dict[str, t.Any]
        if self._match(TokenType.RANGE):
            if self._match_text_seq("UNBOUNDED"):
                args = {"kind": "UNBOUNDED"}
            else:
                size = self._parse_wave_interval("RANGE")
                slide = (self._parse_wave_interval("SLIDE")
                         if self._match_text_seq("SLIDE") else None)
                args = {"kind": "RANGE", "size": size, "slide": slide}
        elif self._match(TokenType.ROWS):
            args = {"kind": "ROWS", "size": self._parse_count("ROWS")}
        elif self._match(TokenType.PARTITION_BY):
            keys = self._parse_csv(self._parse_disjunction)
            if not keys or not self._match(TokenType.ROWS):
                self._fail("expected ROWS n after PARTITION BY keys",
                           hint="e.g. [PARTITION BY sym ROWS 10]")
            args = {"kind": "PARTITION_ROWS", "partition_by": keys,
                    "size": self._parse_count("ROWS")}
        elif self._match(TokenType.PARTITION):
            if not self._match(TokenType.INTO):
                self._fail("expected BY or INTO after PARTITION", hint=WINDOW_HINT)
            into = self._parse_count("PARTITION INTO")
            by = self._parse_disjunction() if self._match_text_seq("BY") else None
            if by is None:
                self._fail("expected BY <expression> after PARTITION INTO n",
                           hint="e.g. [PARTITION INTO 64 BY xway]")
            when = None
            if self._match_text_seq("REPLICATE"):
                if not self._match(TokenType.WHEN):
                    self._fail("expected WHEN after REPLICATE",
                               hint="e.g. [PARTITION INTO 64 BY xway REPLICATE WHEN kind = 2]")
                when = self._parse_disjunction()
            args = {"kind": "SPLIT", "into": into, "by": by, "replicate_when": when}
        elif self._match_text_seq("NOW"):
            args = {"kind": "NOW"}
        elif self._match_text_seq("SAMPLES"):
            size = self._parse_count("SAMPLES")
            slide = self._parse_count("SLIDE") if self._match_text_seq("SLIDE") else None
            args = {"kind": "SAMPLES", "size": size, "slide": slide}
        else:
            word = self._word() if self._curr.text[:1].isalpha() else ""
            close = difflib.get_close_matches(word, ("RANGE", "ROWS", "NOW", "SAMPLES",
                                                     "PARTITION"), n=1, cutoff=0.6)
            self._fail(f"unknown stream window `{self._curr.text}`" if word else
                       "expected a stream window after [",
                       hint=f"did you mean {close[0]}?" if close else WINDOW_HINT)
        if not self._match(TokenType.R_BRACKET):
            self._fail("expected ] to close the stream window", hint=WINDOW_HINT)
        return self._positioned(StreamWindow(**args), first)

    def _parse_table_alias(self, alias_tokens: t.Collection[TokenType] | None = None
                           ) -> exp.TableAlias | None:
        if self._at_wave_clause():
            return None
        return super()._parse_table_alias(alias_tokens)

    def _parse_alias(self, this: exp.Expr | None, explicit: bool = False) -> exp.Expr | None:
        if self._at_wave_clause():
            return this
        return super()._parse_alias(this, explicit)

    # --------------------------------------------------------------------- joins
    def _parse_join(self, skip_join_token: bool = False, parse_bracket: bool = False,
                    alias_tokens: t.Collection[TokenType] | None = None) -> exp.Join | None:
        if skip_join_token or not (self._word() == "SYNC"
                                   and self._next.token_type == TokenType.JOIN):
            return super()._parse_join(skip_join_token=skip_join_token,
                                       parse_bracket=parse_bracket, alias_tokens=alias_tokens)
        first = self._curr
        hint = "e.g. FROM detections d SYNC JOIN mic m ON RANGE (d.t_from, d.t_to)"
        self._advance(2)
        table = self._parse_table(parse_bracket=parse_bracket, alias_tokens=alias_tokens)
        on = self._curr
        if not (self._match(TokenType.ON) and self._match(TokenType.RANGE)
                and self._match(TokenType.L_PAREN)):
            self._fail("SYNC JOIN needs ON RANGE (start, end)", hint=hint)
        start = self._parse_disjunction()
        if start is None or not self._match(TokenType.COMMA):
            self._fail("expected `start, end` in ON RANGE (...)", hint=hint)
        end = self._parse_disjunction()
        if end is None or not self._match(TokenType.R_PAREN):
            self._fail("expected ) to close ON RANGE (start, end)", hint=hint)
        missing = None
        if self._word() == "MISSING":
            self._advance()
            missing = self._word()
            if missing not in SYNC_MISSING:
                self._fail("expected NULL, TRUNCATE or ERROR after MISSING",
                           hint="MISSING says what a range the recording does not fully "
                                "cover gives: NULL (default), TRUNCATE or ERROR")
            self._advance()
        sync = self._positioned(SyncRange(start=start, end=end, missing=missing), on)
        join = self._positioned(exp.Join(this=table, sync=sync), first)
        return t.cast(exp.Join, join)

    def _parse_group(self, skip_group_by_token: bool = False) -> exp.Group | None:
        # sqlglot ends GROUP BY at a leading WINDOW token (taking it for the WINDOW clause),
        # so Spark's streaming idiom `GROUP BY window(ts, '10 minutes')` fails to parse.
        # Read `window(` there as the call it is -- the same Anonymous node sqlglot builds
        # for `window(...)` anywhere else.
        index = self._index + (0 if skip_group_by_token else 1)
        if (skip_group_by_token or self._curr.token_type == TokenType.GROUP_BY) and (
                index + 1 < len(self._tokens)
                and self._tokens[index].token_type == TokenType.WINDOW
                and self._tokens[index + 1].token_type == TokenType.L_PAREN):
            self._tokens[index].token_type = TokenType.VAR
        return super()._parse_group(skip_group_by_token)

    # ------------------------------------------------------------- trailing clauses
    def _parse_query_modifiers(self, this):  # type: ignore[override]
        this = super()._parse_query_modifiers(this)
        if not isinstance(this, exp.Select):
            return this
        while True:
            first = self._curr
            if self._match_text_seq("EMIT"):
                if not self._match_texts(("FINAL", "CHANGES")):
                    self._fail("EMIT must be followed by FINAL or CHANGES",
                               hint="EMIT FINAL (default) or EMIT CHANGES")
                key, node = "emit", Emit(kind=self._prev.text.upper())
            elif self._match_pair(TokenType.VAR, TokenType.INTO, advance=False) and (
                    self._word() == "LATE"):
                self._advance(2)
                target = self._parse_string()
                if not (isinstance(target, exp.Literal) and target.is_string):
                    target = self._parse_table_parts() if self._curr.token_type in (
                        TokenType.VAR, TokenType.IDENTIFIER) else None
                if target is None:
                    self._fail("LATE INTO needs a quoted path or a sink name",
                               hint="e.g. LATE INTO 'late/alerts'")
                key, node = "late_into", LateInto(this=target)
            else:
                return this
            if this.args.get(key):
                self._fail(f"duplicate {'EMIT' if key == 'emit' else 'LATE INTO'} clause",
                           first)
            this.set(key, self._positioned(node, first))
