"""The ``wavesql`` sqlglot dialect: Spark SQL plus WaveSQL's streams, windows and DDL.

Laid out as sqlglot lays out its own dialects: this module assembles the dialect classes
(with the tokenizer, small enough to stay here), the parser is in
:mod:`wavesql.dialect.parser` (on :mod:`~wavesql.dialect.parser_ddl` and
:mod:`~wavesql.dialect.parser_base`) and the generator in :mod:`wavesql.dialect.generator`;
:mod:`wavesql.dialect.syntax` holds the words both share. ``pyproject.toml`` registers
:class:`WaveSQL` as the ``wavesql`` dialect entry point.

These modules are the only place that touches sqlglot's parser and generator internals
(``_parse_*`` hooks, token types, ``TRANSFORMS``); sqlglot changes them between majors,
which is why pyproject pins ``sqlglot>=30,<31``. Everything else in WaveSQL goes through
the public functions of :mod:`wavesql.dialect`. :mod:`wavesql.dialect.parser` says how the
additions hook in and why they cannot change how plain Spark SQL parses.
"""

from __future__ import annotations

from sqlglot.dialects.spark import Spark
from sqlglot.tokens import TokenType

from wavesql.dialect.generator import SparkOutGenerator, WaveSQLGenerator
from wavesql.dialect.parser import WaveSQLParser


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


class SparkOut(Spark):
    """Spark SQL as WaveSQL generates it (``to_spark_sql``)."""

    Generator = SparkOutGenerator


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
