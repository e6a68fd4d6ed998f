"""The ``wavesql`` sqlglot dialect: Spark SQL plus WaveSQL's streams, windows and DDL.

This module is the only place that touches sqlglot's parser and generator internals
(``_parse_*`` hooks, token types, ``TRANSFORMS``); sqlglot changes them between majors,
which is why pyproject pins ``sqlglot>=30,<31``. Everything else in WaveSQL goes through
the public functions of :mod:`wavesql.dialect`.

How the additions hook in, and why they cannot change how plain Spark SQL parses:

* ``CREATE|DROP STREAM|SIGNAL|SINK``, ``SHOW STREAMS|SIGNALS|SINKS|VIEWS``, ``EXPLAIN`` and
  ``ISTREAM|DSTREAM|RSTREAM (...)`` are recognised by their leading words before sqlglot's
  own statement parsers run. Spark has no statement starting with those words (``EXPLAIN``
  we model ourselves; any other ``SHOW`` stays sqlglot's ``Command`` with its full text).
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
import re
import typing as t

from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.errors import ParseError
from sqlglot.generators.spark import SparkGenerator
from sqlglot.parser import SENTINEL_NONE
from sqlglot.parsers.spark import SparkParser
from sqlglot.tokens import Token, TokenType

from wavesql.dialect.nodes import (
    EXPLAIN_KINDS,
    OBJECT_KINDS,
    RELATION_TO_STREAM_KINDS,
    SYNC_MISSING,
    CreateStream,
    DropObject,
    Emit,
    Explain,
    LateInto,
    RelationToStream,
    Resample,
    Combine,
    ZipInput,
    ShowObjects,
    StreamWindow,
    SyncRange,
)

#: Spellings accepted for interval units in WaveSQL positions -> canonical singular unit.
TIME_UNITS: dict[str, str] = {
    spelling: unit
    for unit in ("MICROSECOND", "MILLISECOND", "SECOND", "MINUTE", "HOUR", "DAY")
    for spelling in (unit, unit + "S")
}

#: DDL clauses by object kind, in the order the generator writes them.
CLAUSES: dict[str, tuple[str, ...]] = {
    "STREAM": ("FROM", "FORMAT", "OPTIONS", "EVENT TIME", "WATERMARK", "PROGRESS COLUMN",
               "HEARTBEAT"),
    "SIGNAL": ("RATE", "FROM", "FORMAT", "OPTIONS", "SEGMENT", "EPOCH"),
    "SINK": ("TO", "FORMAT", "OPTIONS"),
}
REQUIRED_CLAUSES: dict[str, tuple[str, ...]] = {
    "STREAM": ("FROM", "FORMAT"),
    "SIGNAL": ("RATE", "FROM", "FORMAT"),
    "SINK": ("TO", "FORMAT"),
}
# Words that follow an interval in WaveSQL syntax, so they are never its unit.
_PLAIN_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?")
_NOT_UNITS = {"FROM", "TO", "FORMAT", "OPTIONS", "EVENT", "WATERMARK", "PROGRESS", "HEARTBEAT",
              "RATE", "SEGMENT", "EPOCH", "SLIDE", "AS"}
_ALL_CLAUSES = ("EVENT TIME", "PROGRESS COLUMN", "FROM", "TO", "FORMAT", "OPTIONS",
                "WATERMARK", "HEARTBEAT", "RATE", "SEGMENT", "EPOCH")
# DDL clause -> CreateStream arg it fills.
_CLAUSE_ARGS = {"FROM": "path", "TO": "path", "FORMAT": "format", "OPTIONS": "options",
                "EVENT TIME": "event_time", "WATERMARK": "watermark",
                "PROGRESS COLUMN": "progress_column", "HEARTBEAT": "heartbeat", "RATE": "rate",
                "SEGMENT": "segment", "EPOCH": "epoch"}
_EXAMPLES = {
    "STREAM": "CREATE STREAM s (ts TIMESTAMP, x DOUBLE) FROM 'data/s/' FORMAT parquet",
    "SIGNAL": "CREATE SIGNAL s (ch1 FLOAT) RATE 48000 HZ FROM 'rec/*.wav' FORMAT wav",
    "SINK": "CREATE SINK s TO 'out/s/' FORMAT parquet",
}
_WINDOW_HINT = ("windows are [RANGE 1 MINUTE], [RANGE 1 MINUTE SLIDE 10 SECONDS], "
                "[RANGE UNBOUNDED], [ROWS n], [PARTITION BY k ROWS n], [NOW], [SAMPLES n], "
                "[SAMPLES n SLIDE m], [PARTITION INTO n BY k [REPLICATE WHEN p]]")
# Words after SHOW that are Spark's own statements (never "did you mean STREAMS").
_SPARK_SHOW_WORDS = {"TABLES", "TABLE", "VIEWS", "COLUMNS", "CREATE", "DATABASES", "SCHEMAS",
                     "FUNCTIONS", "USER", "SYSTEM", "ALL", "PARTITIONS", "TBLPROPERTIES",
                     "CATALOGS", "CURRENT", "NAMESPACES"}


class WaveSQLTokenizer(Spark.Tokenizer):
    """Spark's tokenizer, except that ``EXPLAIN`` and ``SHOW`` are tokenized normally.

    sqlglot swallows everything after a "command" keyword into one string token; we
    parse ``EXPLAIN <statement>`` and ``SHOW STREAMS`` ourselves, so they must not be
    commands.
    """

    KEYWORDS = {k: v for k, v in Spark.Tokenizer.KEYWORDS.items() if k != "EXPLAIN"}
    # Spark's "not less than" / "not greater than" (a !< b is a >= b, NULLs alike), which
    # sqlglot 30 does not know.
    KEYWORDS.update({"!<": TokenType.GTE, "!>": TokenType.LTE})
    COMMANDS = Spark.Tokenizer.COMMANDS - {TokenType.SHOW}
    # Spark reads a doubled quote inside a string as one quote ('O''Brien' is O'Brien);
    # sqlglot's Spark tokenizer splits it into two adjacent literals and concatenates them,
    # which would silently change such strings in regenerated SQL.
    STRING_ESCAPES = ["\\", "'"]


class WaveSQLParser(SparkParser):
    """Spark's parser plus WaveSQL's statements, clauses and table sources."""

    STATEMENT_PARSERS = {
        **SparkParser.STATEMENT_PARSERS,
        TokenType.SHOW: lambda self: self._parse_wave_show(),
    }

    # ---------------------------------------------------------------- errors and positions
    def raise_error(self, message: str, token: Token = SENTINEL_NONE) -> None:
        # sqlglot's ParseError carries line/col and a context string, not offsets; record
        # the exact span here, where the offending token is known, for WaveSQLError.
        span = self._error_span(token)
        try:
            super().raise_error(message, token)
        except ParseError as error:
            if not hasattr(error, "wavesql_span"):
                error.wavesql_span = span  # type: ignore[attr-defined]
                error.wavesql_message = message  # type: ignore[attr-defined]
            raise
        if self.errors and not hasattr(self.errors[-1], "wavesql_span"):
            self.errors[-1].wavesql_span = span  # type: ignore[attr-defined]
            self.errors[-1].wavesql_message = message  # type: ignore[attr-defined]

    def _error_span(self, token: Token) -> tuple[int, int]:
        if token:
            return token.start, token.end + 1
        if self._curr:
            return self._curr.start, self._curr.end + 1
        if self._prev:  # end of the statement: point just past its last token
            return self._prev.end + 1, self._prev.end + 1
        return 0, 0

    def _fail(self, message: str, token: Token | None = None,
              hint: str | None = None) -> t.NoReturn:
        try:
            self.raise_error(message, token or SENTINEL_NONE)
        except ParseError as error:
            error.wavesql_hint = hint  # type: ignore[attr-defined]
            error.wavesql_definite = True  # type: ignore[attr-defined]
            raise
        raise ParseError(message)  # only reached with a non-raising error level

    def _try_parse(self, parse_method: t.Callable[[], t.Any], retreat: bool = False) -> t.Any:
        # sqlglot backtracks by swallowing every ParseError (e.g. around the table after a
        # comma in FROM). Our errors come after a WaveSQL keyword committed the parse, so
        # they are definite: let them through instead of a vaguer error later on.
        definite: list[ParseError] = []

        def guarded() -> t.Any:
            try:
                return parse_method()
            except ParseError as error:
                if getattr(error, "wavesql_definite", False):
                    definite.append(error)
                raise

        result = super()._try_parse(guarded, retreat)
        if definite:
            raise definite[0]
        return result

    def _positioned(self, node: exp.Expression, first: Token) -> exp.Expression:
        """Validate ``node`` and give it the span from ``first`` to the last consumed token."""
        node = self.expression(node)
        node.meta.update(line=first.line, col=first.col, start=first.start,
                         end=max(self._prev.end, first.end))
        return node

    def _warn_unsupported(self) -> None:
        # Command fallback is by design for Spark statements WaveSQL does not model
        # (SHOW TABLES, CALL ...): they pass through to Spark with their full text.
        return

    def _word(self, token: Token | None = None) -> str:
        """Upper-cased text of a bare word token, or ``""`` for strings/quoted names."""
        token = self._curr if token is None else token
        if not token or token.token_type in self.TEXT_MATCH_EXCLUDED_TOKENS:
            return ""
        return token.text.upper()

    def _at_wave_clause(self) -> bool:
        """Whether the next tokens start ``SYNC JOIN``, ``EMIT ...`` or ``LATE INTO``."""
        word, nxt = self._word(), self._word(self._next)
        return ((word == "SYNC" and self._next.token_type == TokenType.JOIN)
                or (word == "EMIT" and nxt in ("FINAL", "CHANGES"))
                or (word == "LATE" and self._next.token_type == TokenType.INTO))

    # ---------------------------------------------------------------------- statements
    def _parse_statement(self) -> exp.Expr | None:
        word = self._word() if self._curr.token_type == TokenType.VAR else ""
        if word == "EXPLAIN":
            return self._parse_wave_explain()
        if word in RELATION_TO_STREAM_KINDS:
            return self._parse_relation_to_stream(with_alias=False)
        return super()._parse_statement()

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

    def _reject_near_miss(self, index: int, words: t.Sequence[str], statement: str) -> None:
        """Fail on a misspelt WaveSQL word (CREATE STREEM) that sqlglot took for a Command."""
        token = self._tokens[index] if index < len(self._tokens) else None
        word = self._word(token) if token else ""
        close = [w for w in difflib.get_close_matches(word, words, n=1, cutoff=0.75)
                 if abs(len(w) - len(word)) <= 2]  # not Databricks' CREATE STREAMING TABLE
        if close and word not in words:
            self._fail(f"unknown {statement} `{token.text}`", token,
                       hint=f"did you mean {statement} {close[0]}?")

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

    # ------------------------------------------------------------------------ DDL
    def _parse_create(self) -> exp.Expr:
        first = self._prev
        index = self._index
        replace = self._match_pair(TokenType.OR, TokenType.REPLACE)
        if self._curr.token_type == TokenType.VAR and self._word() in OBJECT_KINDS:
            return self._parse_create_object(first, replace)
        self._retreat(index)
        result = super()._parse_create()
        if isinstance(result, exp.Command):
            self._reject_near_miss(index + (2 if replace else 0), OBJECT_KINDS, "CREATE")
        return result

    def _parse_drop(self, exists: bool = False, kind: str | None = None) -> exp.Expr:
        if kind or self._curr.token_type != TokenType.VAR or self._word() not in OBJECT_KINDS:
            index = self._index
            result = super()._parse_drop(exists=exists, kind=kind)
            if isinstance(result, exp.Command):
                self._reject_near_miss(index, OBJECT_KINDS, "DROP")
            return result
        first = self._prev
        kind = self._word()
        self._advance()
        if_exists = self._parse_exists() or None
        name = self._parse_object_name(kind, f"DROP {kind} IF EXISTS name")
        return self._positioned(DropObject(this=name, kind=kind, exists=if_exists), first)

    def _parse_object_name(self, kind: str, example: str) -> exp.Expr:
        name = self._parse_id_var(any_token=False)
        if not isinstance(name, exp.Identifier):
            self._fail(f"expected a {kind.lower()} name", hint=f"e.g. {example}")
        return name

    def _parse_create_object(self, first: Token, replace: bool) -> CreateStream:
        kind = self._word()
        self._advance()
        exists = self._parse_exists(not_=True) or None
        name = self._parse_object_name(kind, _EXAMPLES[kind])
        columns = None
        if self._match(TokenType.L_PAREN, advance=False):
            columns = self._parse_wrapped_csv(self._parse_object_column)
        elif kind != "SINK":
            self._fail(f"CREATE {kind} needs a column list after the name",
                       hint=f"e.g. {_EXAMPLES[kind]}")
        after_columns = self._curr
        allowed = CLAUSES[kind]
        args: dict[str, t.Any] = {}
        seen: dict[str, Token] = {}
        while self._curr:
            token = self._curr
            clause = next((c for c in _ALL_CLAUSES if self._match_text_seq(*c.split())), None)
            if clause is None:
                self._fail(f"unexpected `{token.text}` in CREATE {kind}",
                           hint=f"CREATE {kind} clauses are: {', '.join(allowed)}")
            if clause not in allowed:
                self._fail(f"{clause} is not a clause of CREATE {kind}", token,
                           hint=f"CREATE {kind} clauses are: {', '.join(allowed)}")
            if clause in seen:
                self._fail(f"duplicate {clause} clause in CREATE {kind}", token,
                           hint=f"{clause} may appear only once")
            seen[clause] = token
            if clause == "RATE":
                args["rate"], args["rate_unit"] = self._parse_rate()
            elif clause in ("FROM", "TO") and self._curr and self._curr.text.upper() == "KAFKA" \
                    and self._next and self._next.token_type == TokenType.STRING:
                # FROM KAFKA 'topic': a live source (or TO KAFKA 'topic': a sink)
                args["source"] = self.expression(exp.Var(this="KAFKA"), self._curr)
                self._advance()
                args["path"] = self._parse_ddl_clause(clause)
            else:
                args[_CLAUSE_ARGS[clause]] = self._parse_ddl_clause(clause)
        for clause in REQUIRED_CLAUSES[kind]:
            if clause not in seen:
                what = f"{clause} 'path'" if clause in ("FROM", "TO") else clause
                self._fail(f"CREATE {kind} needs a {what} clause", after_columns,
                           hint=f"e.g. {_EXAMPLES[kind]}")
        if "WATERMARK" in seen and "EVENT TIME" not in seen:
            self._fail("WATERMARK needs an EVENT TIME column", seen["WATERMARK"],
                       hint="e.g. EVENT TIME ts WATERMARK 5 SECONDS")
        node = CreateStream(this=name, kind=kind, columns=columns, replace=replace or None,
                            exists=exists, **args)
        return self._positioned(node, first)

    def _parse_ddl_clause(self, clause: str) -> t.Any:
        if clause in ("FROM", "TO", "EPOCH"):
            value = self._parse_string()
            if not (isinstance(value, exp.Literal) and value.is_string):
                example = ("EPOCH '2024-01-01 00:00:00'" if clause == "EPOCH"
                           else f"{clause} 'data/x/'")
                self._fail(f"{clause} needs a quoted string", hint=f"e.g. {example}")
            return value
        if clause == "FORMAT":
            token = self._curr
            if not token or token.token_type in (TokenType.L_PAREN, TokenType.R_PAREN,
                                                 TokenType.COMMA, TokenType.SEMICOLON):
                self._fail("FORMAT needs a format name", hint="e.g. FORMAT parquet")
            self._advance()
            return self.expression(exp.Var(this=token.text), token)
        if clause == "OPTIONS":
            if not self._match(TokenType.L_PAREN, advance=False):
                self._fail("OPTIONS needs a parenthesised list",
                           hint="e.g. OPTIONS (header = 'true')")
            return self._parse_wrapped_csv(self._parse_wave_option)
        if clause in ("EVENT TIME", "PROGRESS COLUMN"):
            column = self._parse_id_var(any_token=False)
            if not isinstance(column, exp.Identifier):
                self._fail(f"{clause} needs a column name", hint=f"e.g. {clause} ts")
            return column
        if clause in ("WATERMARK", "HEARTBEAT"):
            return self._parse_wave_interval(clause)
        return self._parse_count(clause, hint="e.g. SEGMENT 4096")  # SEGMENT

    def _parse_rate(self) -> tuple[exp.Expr, str | None]:
        first = self._curr
        negative = self._match(TokenType.DASH)
        number = self._parse_number()
        if not (isinstance(number, exp.Literal) and number.is_number):
            self._fail("RATE needs a number of samples per second", hint="e.g. RATE 48000 HZ")
        # A negative rate parses so that the binder can say INVALID_RATE with a good hint.
        rate: exp.Expr = self._positioned(exp.Neg(this=number), first) if negative else number
        unit = self._prev.text.upper() if self._match_texts(("HZ", "KHZ")) else None
        return rate, unit

    def _parse_wave_option(self) -> exp.EQ:
        first = self._curr
        if self._curr.token_type == TokenType.STRING:
            key: exp.Expr | None = self._parse_string()
        else:
            parts, quoted = [], False  # a word or dotted name (spark.sql.x) -> one key
            while True:
                text = self._curr.text if self._curr else ""
                quoted = quoted or self._curr.token_type == TokenType.IDENTIFIER
                if not (self._curr.token_type == TokenType.IDENTIFIER
                        or text[:1].isalpha() or text[:1] == "_"):
                    self._fail("expected an option name", hint="e.g. OPTIONS (header = 'true')")
                parts.append(text)
                self._advance()
                if not self._match(TokenType.DOT):
                    break
            # A `quoted` key may hold any character: keep it as a string so it prints back.
            key_class = exp.Literal.string if quoted else exp.var
            key = self._positioned(key_class(".".join(parts)), first)
        if not self._match(TokenType.EQ):
            self._fail("expected = after the option name", hint="e.g. OPTIONS (header = 'true')")
        value_token = self._curr
        value = self._parse_unary()
        literal = value.this if isinstance(value, exp.Neg) else value
        if not isinstance(literal, (exp.Literal, exp.Boolean, exp.Null)):
            self._fail("option values must be literals", value_token,
                       hint="quote the value: key = 'value'")
        return self._positioned(exp.EQ(this=key, expression=value), first)

    def _parse_object_column(self) -> exp.ColumnDef:
        first = self._curr
        name = self._parse_id_var(any_token=True)
        if not isinstance(name, exp.Identifier):
            self._fail("expected a column name", hint="columns are written `name TYPE`")
        self._wave_udt = True
        try:
            kind = self._parse_types(schema=True)
        finally:
            self._wave_udt = False
        if kind is None:
            self._fail(f"expected a type for column `{name.name}`", hint="e.g. ts TIMESTAMP")
        constraints = list(iter(self._parse_column_constraint, None))
        return self._positioned(
            exp.ColumnDef(this=name, kind=kind, constraints=constraints or None), first)

    def _parse_types(self, check_func: bool = False, schema: bool = False,
                     allow_identifiers: bool = True,
                     with_collation: bool = False) -> exp.Expr | None:
        this = super()._parse_types(check_func=check_func, schema=schema,
                                    allow_identifiers=allow_identifiers,
                                    with_collation=with_collation)
        # In WaveSQL DDL an unknown type name (FLOT) is kept as a positioned USERDEFINED
        # type, so that the binder -- not the parser -- can say "did you mean FLOAT".
        if (this is None and getattr(self, "_wave_udt", False)
                and self._curr.token_type in (TokenType.VAR, TokenType.IDENTIFIER)):
            token = self._curr
            self._advance()
            this = self.expression(exp.DataType(this=exp.DType.USERDEFINED, kind=token.text),
                                   token)
        return this

    # ------------------------------------------------------------- intervals and counts
    def _parse_wave_interval(self, after: str) -> exp.Expr:
        """``5 SECONDS`` | ``INTERVAL 5 SECONDS`` | ``INTERVAL '5' SECOND`` -> ``exp.Interval``.

        The value becomes a string literal and the unit its singular upper-case name
        (sqlglot's canonical interval form), so every spelling yields the same AST.
        """
        first = self._curr
        hint = "e.g. 5 SECONDS, 100 MILLISECONDS or INTERVAL '1' MINUTE"
        if first.token_type == TokenType.INTERVAL:
            node = self._parse_interval()
            if node is None:
                self._fail(f"expected a duration after {after}", hint=hint)
        elif first.token_type == TokenType.NUMBER:
            self._advance()
            word = self._word()
            # Any word is taken as the unit (the binder rejects `5 FORTNIGHTS` with a hint),
            # except one that starts the next clause: then the unit is simply missing.
            # A keyword (UNION, SELECT, ROWS, ...) is never a unit: taking it would store a
            # statement that cannot be generated back and re-parsed.
            if (not word[:1].isalpha() or word in _NOT_UNITS
                    or (word not in TIME_UNITS and self._curr.token_type != TokenType.VAR)):
                self._fail(f"expected a time unit after {first.text}",
                           hint="units are MICROSECOND(S), MILLISECOND(S), SECOND(S), "
                                "MINUTE(S), HOUR(S), DAY(S)")
            unit = TIME_UNITS.get(word, word)
            unit_token = self._curr
            self._advance()
            node = exp.Interval(this=self.expression(exp.Literal.string(first.text), first),
                                unit=self.expression(exp.Var(this=unit), unit_token))
        else:
            self._fail(f"expected a duration after {after}", hint=hint)
        for interval in node.find_all(exp.Interval):
            unit = interval.args.get("unit")
            if isinstance(unit, exp.Var) and unit.name.upper() in TIME_UNITS:
                unit.set("this", TIME_UNITS[unit.name.upper()])
        return self._positioned(node, first)

    def _parse_count(self, after: str, hint: str = _WINDOW_HINT) -> exp.Expr:
        number = self._parse_number()
        if not (isinstance(number, exp.Literal) and number.is_int):
            self._fail(f"{after} needs a whole number", hint=hint)
        return number

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
        return super()._parse_table(schema=schema, joins=joins, alias_tokens=alias_tokens,
                                    parse_bracket=parse_bracket, is_db_reference=is_db_reference,
                                    parse_partition=parse_partition, consume_pipe=consume_pipe)

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
        usage = "RESAMPLE(stream, time_column, period[, 'method'] [PARTITION BY key, ...])"
        self._advance(2)
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
                self._fail("expected BY or INTO after PARTITION", hint=_WINDOW_HINT)
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
                       hint=f"did you mean {close[0]}?" if close else _WINDOW_HINT)
        if not self._match(TokenType.R_BRACKET):
            self._fail("expected ] to close the stream window", hint=_WINDOW_HINT)
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


class SparkOut(Spark):
    """Spark SQL as WaveSQL generates it (``to_spark_sql``)."""

    Generator = SparkOutGenerator


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
            arg = _CLAUSE_ARGS[clause]
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


class WaveSQL(Spark):
    """The ``wavesql`` dialect: ``sqlglot.parse_one(text, read="wavesql")`` works.

    Examples
    --------
    >>> import sqlglot
    >>> import wavesql.dialect
    >>> sqlglot.parse_one("SELECT * FROM mic [SAMPLES 4096]", read="wavesql").sql("wavesql")
    'SELECT * FROM mic [SAMPLES 4096]'
    """

    Tokenizer = WaveSQLTokenizer
    Parser = WaveSQLParser
    Generator = WaveSQLGenerator
