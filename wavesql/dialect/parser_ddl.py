"""Parsing WaveSQL's DDL: ``CREATE [OR REPLACE] STREAM|SIGNAL|SINK`` and ``DROP`` of them.

``CREATE``/``DROP`` followed by one of the object kinds is WaveSQL's; anything else goes
to Spark's own ``CREATE``/``DROP`` parsers (a misspelt kind, ``CREATE STREEM``, fails here
with a did-you-mean rather than becoming an opaque ``Command``). The clauses each kind
takes are :data:`wavesql.dialect.syntax.CLAUSES`.
"""

from __future__ import annotations

import typing as t

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from wavesql.dialect.nodes import OBJECT_KINDS, CreateStream, DropObject
from wavesql.dialect.parser_base import ParserBase
from wavesql.dialect.syntax import CLAUSE_ARGS, CLAUSES, REQUIRED_CLAUSES

# Every clause, multi-word ones first (matched in this order).
_ALL_CLAUSES = ("EVENT TIME", "PROGRESS COLUMN", "FROM", "TO", "FORMAT", "OPTIONS",
                "WATERMARK", "HEARTBEAT", "RATE", "SEGMENT", "EPOCH", "AS")
# A complete statement of each kind, for the hints.
_EXAMPLES = {
    "STREAM": "CREATE STREAM s (ts TIMESTAMP, x DOUBLE) FROM 'data/s/' FORMAT parquet",
    "SIGNAL": "CREATE SIGNAL s (ch1 FLOAT) RATE 48000 HZ FROM 'rec/*.wav' FORMAT wav",
    "SINK": "CREATE SINK s TO 'out/s/' FORMAT parquet",
}


class DDLParser(ParserBase):
    """The DDL hooks of WaveSQL's parser."""

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
            elif clause == "AS":  # a signal defined by a query: the query ends the statement
                query = self._parse_ddl_select()
                if not isinstance(query, exp.Query):
                    self._fail("AS needs a query", token, hint="e.g. CREATE SIGNAL s (x FLOAT) "
                               "RATE 64 HZ OPTIONS (sample_column = 'n') AS SELECT n, x FROM t")
                args["query"] = query
                if self._curr:
                    self._fail(f"unexpected `{self._curr.text}` after the query of CREATE "
                               f"{kind} ... AS", hint="the query ends the statement: write "
                               "OPTIONS, SEGMENT and EPOCH before AS")
            else:
                args[CLAUSE_ARGS[clause]] = self._parse_ddl_clause(clause)
        if "AS" in seen:  # a query gives the samples: no files to read
            for clause in ("FROM", "FORMAT"):
                if clause in seen:
                    self._fail(f"a signal defined by a query (AS ...) has no {clause} clause",
                               seen[clause], hint="either FROM 'path' FORMAT ... or AS <query>")
        for clause in REQUIRED_CLAUSES[kind]:
            if "AS" in seen and clause in ("FROM", "FORMAT"):
                continue
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
