"""The machinery every WaveSQL parser hook shares: errors with exact spans, positions, words.

sqlglot's ``ParseError`` carries a line, a column and a context string; WaveSQL reports
character spans and hints, and its errors after a committed WaveSQL keyword must survive
sqlglot's backtracking. :class:`ParserBase` adds that to Spark's parser, with the small
readers the DDL and query hooks both use (bare words, near-miss keywords, intervals,
counts). :mod:`wavesql.dialect.parser` builds the dialect's parser on it.
"""

from __future__ import annotations

import difflib
import typing as t

from sqlglot import exp
from sqlglot.errors import ParseError
from sqlglot.parser import SENTINEL_NONE
from sqlglot.parsers.spark import SparkParser
from sqlglot.tokens import Token, TokenType

from wavesql.dialect.syntax import TIME_UNITS

#: The stream windows there are, for the hint of a malformed one.
WINDOW_HINT = ("windows are [RANGE 1 MINUTE], [RANGE 1 MINUTE SLIDE 10 SECONDS], "
               "[RANGE UNBOUNDED], [ROWS n], [PARTITION BY k ROWS n], [NOW], [SAMPLES n], "
               "[SAMPLES n SLIDE m], [PARTITION INTO n BY k [REPLICATE WHEN p]]")
# Words that follow an interval in WaveSQL syntax, so they are never its unit.
_NOT_UNITS = {"FROM", "TO", "FORMAT", "OPTIONS", "EVENT", "WATERMARK", "PROGRESS", "HEARTBEAT",
              "RATE", "SEGMENT", "EPOCH", "SLIDE", "AS"}


class ParserBase(SparkParser):
    """Spark's parser with WaveSQL's error reporting and shared readers (no new syntax)."""

    # ---------------------------------------------------------------- lists
    def _parse_csv(self, parse_method: t.Callable[[], t.Any],
                   sep: TokenType = TokenType.COMMA) -> list:
        """sqlglot's lists without its leniency: a separator must be followed by an item.
        sqlglot drops a dangling one silently (``GROUP BY a, b,``, ``IN (1, 2,)``), which
        Spark's parser refuses; regenerated SQL would hide it from Spark
        (tests/test_parser_differential.py)."""
        parse_result = parse_method()
        items = [parse_result] if parse_result is not None else []
        while self._match(sep):
            separator = self._prev
            if isinstance(parse_result, exp.Expr):
                self._add_comments(parse_result)
            parse_result = parse_method()
            if parse_result is None:
                self.raise_error(f"nothing after `{separator.text}`: a list item is missing",
                                 separator)
                continue
            items.append(parse_result)
        return items

    def _parse_distinct_arg_function(self, func, distinct_index: int = 0):
        """sqlglot's ``PERCENTILE(...)`` / ``PERCENTILE_APPROX(...)`` without dropping
        arguments its node has no place for: ``percentile(v, 0.5, f)`` (Spark's third
        argument, each value's frequency) became ``PERCENTILE(v, 0.5)`` -- an unweighted
        answer, silently. Such a call is kept as Spark's own, argument for argument."""
        start = self._index
        node = super()._parse_distinct_arg_function(func, distinct_index)
        if func.is_var_len_args or len(node.args) >= self._arguments_read(start):
            return node
        self._retreat(start)
        name = self._tokens[start - 2].text  # the function's name, as written (then "(")
        distinct = self._match(TokenType.DISTINCT)
        if not distinct:
            self._match(TokenType.ALL)
        args = [self._parse_lambda()]
        if self._match(TokenType.COMMA):
            args.extend(self._parse_function_args())
        if distinct:
            args[0] = self.expression(exp.Distinct(expressions=[args[0]]))
        return self.expression(exp.Anonymous(this=name, expressions=args))

    def _arguments_read(self, start: int) -> int:
        """How many top-level arguments the tokens from ``start`` to here held."""
        depth, count = 0, 1
        for token in self._tokens[start:self._index]:
            if token.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET):
                depth += 1
            elif token.token_type in (TokenType.R_PAREN, TokenType.R_BRACKET):
                depth -= 1
            elif token.token_type == TokenType.COMMA and depth == 0:
                count += 1
        return count

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

    def _reject_near_miss(self, index: int, words: t.Sequence[str], statement: str) -> None:
        """Fail on a misspelt WaveSQL word (CREATE STREEM) that sqlglot took for a Command."""
        token = self._tokens[index] if index < len(self._tokens) else None
        word = self._word(token) if token else ""
        close = [w for w in difflib.get_close_matches(word, words, n=1, cutoff=0.75)
                 if abs(len(w) - len(word)) <= 2]  # not Databricks' CREATE STREAMING TABLE
        if close and word not in words:
            self._fail(f"unknown {statement} `{token.text}`", token,
                       hint=f"did you mean {statement} {close[0]}?")

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

    def _parse_count(self, after: str, hint: str = WINDOW_HINT) -> exp.Expr:
        number = self._parse_number()
        if not (isinstance(number, exp.Literal) and number.is_int):
            self._fail(f"{after} needs a whole number", hint=hint)
        return number
