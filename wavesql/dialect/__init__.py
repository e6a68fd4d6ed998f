"""WaveSQL's front end: text -> statements -> sqlglot ASTs, and ASTs -> SQL text.

WaveSQL is Spark SQL plus streams, signals and windows (README: The language). This package is
the only place that knows sqlglot's internals; the planner uses exactly these names:

* :class:`WaveSQL` -- the sqlglot dialect (``read="wavesql"`` once this package is imported).
* :func:`parse_statements` / :func:`parse_one` -- text to ASTs, raising
  :class:`~wavesql.errors.WaveSQLError` ``PARSE_ERROR`` with exact offsets.
* :func:`split_statements` / :func:`is_complete` / :func:`unclosed` -- where statements
  end, without parsing them (the REPL and ``wavesql check`` use these, never the tokens).
* :func:`to_sql` / :func:`to_spark_sql` -- ASTs back to text.
* :func:`is_wavesql_node` / :func:`wavesql_nodes` -- tell WaveSQL constructs from Spark SQL.

The AST node classes are in :mod:`wavesql.dialect.nodes` (re-exported here).

Examples
--------
>>> from wavesql.dialect import parse_statements, to_sql
>>> [s.text for s in parse_statements("SHOW STREAMS; SELECT 1 -- done")]
['SHOW STREAMS', 'SELECT 1']
>>> to_sql(parse_one("SELECT * FROM trades [RANGE 1 MINUTE] t"))
'SELECT * FROM trades [RANGE 1 MINUTE] AS t'
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Iterator

from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.errors import ErrorLevel, ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from wavesql.dialect.dialect import SparkOut, WaveSQL
from wavesql.dialect.nodes import (
    OBJECT_KINDS,
    RELATION_TO_STREAM_KINDS,
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
    WaveSQLNode,
)
from wavesql.errors import Span, WaveSQLError

__all__ = [
    "WaveSQL",
    "Statement",
    "parse_statements",
    "parse_one",
    "split_statements",
    "is_complete",
    "unclosed",
    "to_sql",
    "to_spark_sql",
    "unqualified",
    "is_wavesql_node",
    "wavesql_nodes",
    "WaveSQLNode",
    "CreateStream",
    "DropObject",
    "ShowObjects",
    "Explain",
    "StreamWindow",
    "SyncRange",
    "RelationToStream",
    "Emit",
    "LateInto",
    "Resample",
    "Combine",
    "ZipInput",
]


@dataclass(frozen=True)
class Statement:
    """One parsed statement of a (possibly multi-statement) text.

    Attributes
    ----------
    node : sqlglot.exp.Expression
        The statement's AST.
    text : str
        ``full_text[start:end]``: the statement's source from its first token to its last,
        without the separating ``;`` (and without comments before the first token).
    start, end : int
        Half-open character offsets of ``text`` in the full text.
    error : WaveSQLError, optional
        Set when sqlglot could not parse a statement that is not WaveSQL-specific: ``node``
        is then an ``exp.Command`` holding the text, and the binder asks Spark's own parser
        before reporting ``error`` (sqlglot lags Spark on some syntax, e.g. ``a !< b``, and
        a query Spark accepts must still run).
    names : tuple of str
        For such a statement, the identifiers in it (to find the catalog objects it uses).
    """

    node: exp.Expression
    text: str
    start: int
    end: int
    error: WaveSQLError | None = None
    names: tuple[str, ...] = ()


def parse_statements(text: str, *, lenient: bool = False) -> list[Statement]:
    """Split ``text`` on ``;`` and parse every statement with the WaveSQL dialect.

    Semicolons inside string literals, quoted identifiers and comments do not split.
    Empty statements and comment-only text are skipped (``""`` -> ``[]``).

    Parameters
    ----------
    text : str
        One or more WaveSQL / Spark SQL statements.
    lenient : bool
        Return a statement sqlglot cannot parse -- unless it is WaveSQL-specific -- with
        ``error`` set instead of raising, for a caller that can ask Spark's parser.

    Returns
    -------
    list of Statement
        In source order. Spark statements WaveSQL does not model (``SET x=1``,
        ``SHOW TABLES``) come back as sqlglot's own nodes or as ``exp.Command`` with their
        full text; WaveSQL statements never do.

    Raises
    ------
    WaveSQLError
        ``PARSE_ERROR`` at the offending token (absolute offsets into ``text``), with a
        hint where one helps.

    Examples
    --------
    >>> [type(s.node).__name__ for s in parse_statements("SHOW STREAMS; DROP SIGNAL mic")]
    ['ShowObjects', 'DropObject']
    >>> parse_statements("SELECT FROM")
    Traceback (most recent call last):
    ...
    wavesql.errors.WaveSQLError: error[PARSE_ERROR]: expected a table name, got end of input
    ...
    """
    surrogate = _LONE_SURROGATE.search(text)
    if surrogate:
        # what Python makes of a byte that is not UTF-8 (sys.argv, a mis-decoded file)
        raise WaveSQLError("PARSE_ERROR", f"the text holds a byte that is not UTF-8 "
                           f"({surrogate.group()!r})",
                           Span(surrogate.start(), surrogate.end()),
                           hint="save the file (or the terminal's input) as UTF-8", query=text)
    dialect = WaveSQL()
    statements = []
    for chunk, semicolon in _split(_tokenize(dialect, text)):
        parser = dialect.parser(error_level=ErrorLevel.IMMEDIATE)
        start, end = chunk[0].start, _chunk_end(chunk, semicolon, text)
        try:
            parsed = deep(parser.parse, chunk, text)
        except RecursionError:
            raise WaveSQLError(
                "PARSE_ERROR", "the statement is nested too deeply to parse",
                Span(start, end), hint="split it into views or common table expressions",
                query=text) from None
        except (ParseError, TokenError, IndexError, KeyError, ValueError, TypeError,
                AttributeError) as error:
            # sqlglot's own builders fail on some malformed calls (map() with an odd number
            # of arguments raises IndexError, ``INTERVAL `` .5`` AttributeError; a hint's
            # text is tokenized again, ``/*+" x */`` raises TokenError): a syntax error too,
            # not a crash.
            failure = (_parse_error(error, text) if isinstance(error, ParseError) else
                       WaveSQLError("PARSE_ERROR", f"malformed statement ({error!r})",
                                    Span(start, end), query=text))
            failure = _misspelled_keyword(chunk, failure, text) or failure
            if not lenient or _is_wavesql_statement(chunk) or any(
                    t.token_type == TokenType.L_BRACKET for t in chunk) or \
                    _has_wavesql_table_function(chunk):
                raise failure from error
            names = tuple(t.text for t in chunk if t.token_type in (TokenType.VAR,
                                                                     TokenType.IDENTIFIER))
            statements.append(Statement(exp.Command(this="SPARK"), text[start:end], start,
                                        end, failure, names))
            continue
        node = parsed[0] if parsed else None
        if node is None or (isinstance(node, exp.Command) and _is_wavesql_statement(chunk)):
            # Never let a WaveSQL statement degrade into an opaque Command.
            raise WaveSQLError("PARSE_ERROR", "could not parse this statement",
                               Span(start, end), query=text)
        _check_generatable(node, text, Span(start, end))
        statements.append(Statement(node, text[start:end], start, end))
    return statements


# Python's default recursion limit (1000) stops sqlglot's recursive-descent parser and
# generator at about 40 nested calls; a deep statement is retried on a thread with a large
# stack and a higher limit (Python 3.11 frames live on the heap, the C stack only backs the
# calls through C), so real queries -- generated ones included -- nest a few hundred deep.
_DEEP_STACK = 512 * 1024 * 1024
_DEEP_LIMIT = 40_000


def deep(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, retried with a deep stack if it hits the recursion limit."""
    import sys
    import threading

    try:
        return fn(*args, **kwargs)
    except RecursionError:
        pass
    outcome: dict = {}

    def run():
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, _DEEP_LIMIT))
        try:
            outcome["value"] = fn(*args, **kwargs)
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
            outcome["error"] = error
        finally:
            sys.setrecursionlimit(limit)

    with _DEEP_LOCK:
        previous = threading.stack_size(_DEEP_STACK)
        try:
            worker = threading.Thread(target=run, name="wavesql-deep-parse")
            worker.start()
        finally:
            threading.stack_size(previous)
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _check_generatable(node: exp.Expression, text: str, statement: Span) -> None:
    """Types sqlglot accepts but cannot write back (``FLOAT(())``) fail here, at the type,
    as a PARSE_ERROR -- not later as a ValueError when a view body is regenerated."""
    for dtype in node.find_all(exp.DataType):
        try:
            Spark().generate(dtype)
        except (ValueError, KeyError, TypeError):
            span = Span.of(dtype) or _type_span(dtype, text, statement)
            raise WaveSQLError("PARSE_ERROR", f"malformed type `{text[span.start:span.end]}`",
                               span, hint="e.g. FLOAT, DECIMAL(10, 2), ARRAY<DOUBLE>",
                               query=text) from None


_DEEP_LOCK = threading.Lock()
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def parse_one(text: str) -> exp.Expression:
    """Parse text that must hold exactly one statement.

    Parameters
    ----------
    text : str
        One statement; a trailing ``;`` is allowed.

    Returns
    -------
    sqlglot.exp.Expression

    Raises
    ------
    WaveSQLError
        ``PARSE_ERROR`` on a syntax error, on empty text, or on more than one statement.

    Examples
    --------
    >>> parse_one("DROP STREAM IF EXISTS trades").args["kind"]
    'STREAM'
    """
    statements = parse_statements(text)
    if len(statements) == 1:
        return statements[0].node
    if not statements:
        raise WaveSQLError("PARSE_ERROR", "no statement to parse", Span(0, len(text)),
                           hint="write a statement, e.g. SELECT * FROM trades", query=text)
    extra = statements[1]
    raise WaveSQLError("PARSE_ERROR", f"expected one statement, found {len(statements)}",
                       Span(extra.start, extra.end),
                       hint="run them one at a time, or use parse_statements", query=text)


def to_sql(node: exp.Expression, pretty: bool = False) -> str:
    """Generate WaveSQL text for an AST (WaveSQL constructs included).

    ``parse_one(to_sql(parse_one(q))) == parse_one(q)`` for every accepted ``q``. Function
    names are written as they were parsed (``seg_std``, not ``SEG_STD``).

    Examples
    --------
    >>> to_sql(parse_one("select * from mic [samples 256 slide 128]"))
    'SELECT * FROM mic [SAMPLES 256 SLIDE 128]'
    """
    return deep(WaveSQL().generate, node, pretty=pretty, normalize_functions=False)


def unqualified(node: exp.Expression) -> exp.Expression:
    """A copy of ``node`` with its column references' table qualifiers dropped (``t.px`` ->
    ``px``): for expressions evaluated over one stream's own rows."""
    def strip(n):
        if isinstance(n, exp.Column) and n.args.get("table") is not None:
            return exp.column(n.name, quoted=n.this.args.get("quoted"))
        return n
    return node.copy().transform(strip)


def to_spark_sql(node: exp.Expression, pretty: bool = False) -> str:
    """Generate Spark SQL for an AST that contains no WaveSQL constructs.

    Raises
    ------
    ValueError
        If ``node`` contains a WaveSQL construct: Spark's generator would silently drop
        windows and EMIT clauses, so this is refused (a planner bug, not a user error).

    Examples
    --------
    >>> to_spark_sql(parse_one("SELECT transform(arr, x -> x + 1) FROM t"))
    'SELECT TRANSFORM(arr, x -> x + 1) FROM t'
    """
    found = next(wavesql_nodes(node), None)
    if found is not None:
        raise ValueError(f"to_spark_sql: the tree still contains a WaveSQL construct "
                         f"({type(found).__name__}: {to_sql(found)[:80]}); lower it first")
    return deep(SparkOut().generate, node, pretty=pretty, normalize_functions=False)


def is_wavesql_node(node: exp.Expr) -> bool:
    """Whether ``node`` is a WaveSQL construct Spark SQL does not have.

    True for every :class:`~wavesql.dialect.nodes.WaveSQLNode` and for ``ASOF`` joins
    (sqlglot models ``ASOF JOIN`` as ``exp.Join(method="ASOF")``; Spark SQL has no such
    join, so the planner must lower it).
    """
    return isinstance(node, WaveSQLNode) or (
        isinstance(node, exp.Join) and node.text("method").upper() == "ASOF")


def wavesql_nodes(tree: exp.Expr | None) -> Iterator[exp.Expr]:
    """Yield the WaveSQL constructs in ``tree`` (breadth first); none for pure Spark SQL.

    Examples
    --------
    >>> [type(n).__name__ for n in wavesql_nodes(parse_one("SELECT * FROM t [NOW] EMIT FINAL"))]
    ['Emit', 'StreamWindow']
    """
    if tree is None:
        return
    for node in tree.walk():
        if is_wavesql_node(node):
            yield node


def split_statements(text: str, *, lenient: bool = False) -> list[Span]:
    """Where the statements of ``text`` are, as :func:`parse_statements` reads them: each
    from its first token to its last, without its ``;`` and the comments around it. A ``;``
    in a string, quoted name or comment ends nothing; empty statements are left out. Raises
    ``PARSE_ERROR`` where the text cannot be read (an unterminated string), unless
    ``lenient`` (text being typed): then the statement there runs to the end of the text.

    >>> text = "SELECT 1; SELECT 'a;b' -- c;\\n;  /* d; */ ;SHOW STREAMS"
    >>> [text[s.start:s.end] for s in split_statements(text)]
    ['SELECT 1', "SELECT 'a;b'", 'SHOW STREAMS']
    >>> split_statements("SELECT 1; SELECT 'it''s", lenient=True)
    [Span(start=0, end=8), Span(start=10, end=23)]
    """
    tokens, error, _ = _read(text)
    if error is not None and not lenient:
        raise error
    spans = [Span(chunk[0].start, _chunk_end(chunk, semicolon, text))
             for chunk, semicolon in _split(tokens)]
    if error is not None:  # the unreadable rest belongs to the last statement, if no ; ended it
        ended = not spans or tokens[-1].token_type == TokenType.SEMICOLON
        at = error.span.start if ended else spans.pop().start
        spans.append(Span(at, max(len(text.rstrip()), at + 1)))
    return spans


def is_complete(text: str) -> bool:
    """Whether ``text`` ends with a statement's ``;`` (outside strings, quoted names and
    comments; comments may follow it): the REPL's Enter runs the buffer, or adds a line.
    >>> [is_complete(t) for t in ("SELECT 1;", "SELECT 1; -- c", "SELECT 1", "SELECT ';'",
    ...  "SELECT 1 /* ; */", "SELECT 'it''s;", "  ")]
    [True, True, False, False, False, False, False]
    """
    tokens, error, open_at = _read(text)
    if error is None:
        return bool(tokens) and tokens[-1].token_type == TokenType.SEMICOLON
    # unreadable but closed (x'zz' is no hex string): complete at a `;`, to show the error
    return open_at is None and text.rstrip().endswith(";")


def unclosed(text: str) -> int | None:
    """Where the string, quoted name or ``/*`` comment ``text`` ends inside of opens (its
    quote, or ``/*``); None when it ends outside any.
    >>> unclosed("FROM 'data/"), unclosed("SELECT r'x"), unclosed("SELECT 'a;b'")
    (5, 8, None)
    """
    return _read(text)[2]


def _read(text: str) -> tuple[list[Token], WaveSQLError | None, int | None]:
    """``text``'s tokens; where it cannot be read, those before that place, the error and
    where the literal left open there opens (None: a closed one is malformed, ``x'zz'``)."""
    try:
        return _tokenize(WaveSQL(), text), None, None
    except WaveSQLError as error:
        at = error.span.start
        tokens = _read(text[:at])[0] if at < len(text) else []
        inner = getattr(error.__cause__, "__cause__", None)
        if not error.message.startswith("unterminated") or (
                isinstance(inner, TokenError) and not str(inner).startswith("Missing")):
            return tokens, error, None
        prefix = re.compile(r"[A-Za-z&]{1,2}(?=['\"])").match(text, at)  # r'..', x'..'
        return tokens, error, prefix.end() if prefix else at


# --------------------------------------------------------------------------- internals
def _tokenize(dialect: WaveSQL, text: str) -> list[Token]:
    tokenizer = dialect.tokenizer()
    try:
        return tokenizer.tokenize(text)
    except TokenError as error:
        # The tokenizer's wrapped message quotes ~100 chars of context but not the
        # position; its scanner state still holds where the failing token started.
        start = getattr(getattr(tokenizer, "_core", None), "_start", None)
        if not isinstance(start, int) or not 0 <= start < len(text):
            start = 0
        line_end = text.find("\n", start)
        span = Span(start, len(text) if line_end < 0 else line_end)
        opener = text[start:start + 2]
        if opener.startswith("/*"):
            message, hint = "unterminated /* comment", "close it with */"
        elif opener[:1] in ("'", '"') or (opener[:1] in "rRxXbBnN" and opener[1:] in ("'", '"')):
            message, hint = "unterminated string literal", "close it with a matching quote"
        elif opener[:1] == "`":
            message, hint = "unterminated quoted identifier", "close it with a backtick (`)"
        else:
            message, hint = f"cannot read the query here ({error.__cause__ or error})", None
        raise WaveSQLError("PARSE_ERROR", message, span, hint=hint, query=text) from error


def _split(tokens: list[Token]) -> Iterator[tuple[list[Token], Token | None]]:
    """Yield ``(tokens of one statement, its terminating ; or None)``, skipping empty ones."""
    chunk: list[Token] = []
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            if chunk:
                yield chunk, token
            chunk = []
        else:
            chunk.append(token)
    if chunk:
        yield chunk, None


def _chunk_end(chunk: list[Token], semicolon: Token | None, text: str) -> int:
    last = chunk[-1]
    if last.end >= last.start:
        return last.end + 1
    # sqlglot folds the rest of a command (CALL ...) into one string token whose offsets
    # are not reliable; end the statement at its semicolon instead.
    end = semicolon.start if semicolon is not None else len(text)
    return len(text[:end].rstrip())


def _is_wavesql_statement(chunk: list[Token]) -> bool:
    words = [tok.text.upper() for tok in chunk[:4]]
    if words[0] in ("EXPLAIN", *RELATION_TO_STREAM_KINDS):
        return True
    if words[0] == "SHOW":
        return len(words) > 1 and words[1] in ("STREAMS", "SIGNALS", "SINKS")
    return words[0] in ("CREATE", "DROP") and any(w in OBJECT_KINDS for w in words[1:])


def _has_wavesql_table_function(chunk: list[Token]) -> bool:
    """``FROM/JOIN RESAMPLE|MERGE|ZIP (``: WaveSQL's table sources, which Spark lacks."""
    for before, word, after in zip(chunk, chunk[1:], chunk[2:]):
        if (before.text.upper() in ("FROM", "JOIN") and after.token_type == TokenType.L_PAREN
                and word.text.upper() in ("RESAMPLE", "MERGE", "ZIP")):
            return True
    return False


_TOKEN_REPR = re.compile(r"<Token token_type: TokenType\.(\w+), text: (.*?), line: [^>]*>")
_MISSING_ARG = re.compile(r"Required keyword: '(\w+)' missing for <class '[\w.]*?(\w+)'>")


def _parse_error(error: ParseError, text: str) -> WaveSQLError:
    span = getattr(error, "wavesql_span", None)
    message = getattr(error, "wavesql_message", None)
    if span is None:  # not raised through the parser's raise_error: use line/col
        info = error.errors[0] if error.errors else {}
        span = _span_from_line_col(text, info)
        message = info.get("description") or str(error)
    return WaveSQLError("PARSE_ERROR", _clean_message(message or "syntax error", text, span),
                        Span(*span), hint=getattr(error, "wavesql_hint", None), query=text)


#: Keywords a misspelling is checked against (where a query's clauses and statements start).
_KEYWORDS = ("SELECT", "FROM", "WHERE", "GROUP", "ORDER", "HAVING", "LIMIT", "JOIN", "INNER",
             "LEFT", "RIGHT", "OUTER", "CROSS", "UNION", "INTERSECT", "EXCEPT", "WITH",
             "DISTINCT", "CREATE", "INSERT", "INTO", "VALUES", "DROP", "SHOW", "DESCRIBE",
             "EXPLAIN", "SYNC", "MERGE", "EMIT", "WINDOW", "PARTITION", "BETWEEN", "QUALIFY",
             "OFFSET", "STREAM", "SIGNAL", "SINK", "ISTREAM", "DSTREAM", "RSTREAM", "RESAMPLE")


def _edit_distance(a: str, b: str) -> int:
    """Optimal-string-alignment distance: insertions, deletions, substitutions and
    transpositions of neighbours (``FORM`` -> ``FROM`` is 1)."""
    d = [[i + j if not i * j else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


def _misspelled_keyword(chunk: list[Token], failure: WaveSQLError, text: str):
    """A syntax error re-pointed at a misspelled keyword (``SELEC``, ``FORM``, ``WERE``)
    near where the parser gave up, with a did-you-mean; None when no word there is one.

    The parser fails *after* a misspelling (``SELECT id FORM t`` reads ``FORM`` as an alias
    and stops at ``t``), so the words checked are the statement's first and those up to
    three tokens before the failure; only unquoted words of 4+ letters one edit from a
    keyword count, so a short column name is never taken for one."""
    span = getattr(failure, "span", None)
    at = span.start if span is not None else len(text)
    words = [i for i, t in enumerate(chunk) if t.start <= at]
    near = ([0] if chunk else []) + words[-4:]
    for i in sorted(set(near), key=lambda i: (i != 0, -i)):
        token = chunk[i]
        word = token.text.upper()
        if token.token_type != TokenType.VAR or len(word) < 4 or word in _KEYWORDS:
            continue
        if token.start == at and failure.hint:  # the parser's own word on it (STREEM)
            return None
        close = [k for k in _KEYWORDS if abs(len(k) - len(word)) <= 1
                 and _edit_distance(word, k) == 1 and word != k + "S"]  # STREAMS: a word
        if close:
            return WaveSQLError(
                "PARSE_ERROR", f"`{token.text}` is not a keyword: did you mean {close[0]}?",
                Span(token.start, token.end + 1), hint=f"write {close[0]}", query=text)
    return None


def _span_from_line_col(text: str, info: dict) -> tuple[int, int]:
    line, col = info.get("line"), info.get("col")
    if not line or not col:
        return 0, len(text)
    line_start = 0
    for _ in range(line - 1):
        line_start = text.find("\n", line_start) + 1
    # sqlglot's col is the 1-based column of the token's last character.
    end = min(line_start + col, len(text))
    return max(end - len(info.get("highlight") or " "), line_start), end


def _clean_message(message: str, text: str, span: tuple[int, int]) -> str:
    """Turn sqlglot's internal wording (token reprs, class paths) into user wording."""
    found = text[span[0]:span[1]]
    if message == "Invalid expression / Unexpected token":
        return f"unexpected `{found}`" if found else "unexpected end of input"
    message = _TOKEN_REPR.sub(
        lambda m: "end of input" if m.group(1) == "SENTINEL" else f"`{m.group(2)}`", message)
    message = _MISSING_ARG.sub(lambda m: f"incomplete {m.group(2).upper()} (missing its "
                                         f"{'operand' if m.group(1) == 'this' else m.group(1)})",
                               message)
    message = message.replace("Expected table name but got", "expected a table name, got")
    message = re.sub(r"^Expecting ", "expected ", message)
    message = re.sub(r"^Expected ", "expected ", message)
    return message


def _type_span(dtype: exp.DataType, text: str, statement: Span) -> Span:
    """Where a (position-less) type is written: its name and parenthesised arguments."""
    found = re.compile(rf"\b{re.escape(dtype.this.name)}\s*\(", re.IGNORECASE).search(
        text, statement.start, statement.end)
    if not found:
        return statement
    depth, i = 0, found.end() - 1
    while i < statement.end:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
        if depth == 0:
            break
    return Span(found.start(), i)
