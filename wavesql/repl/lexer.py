"""The REPL's vocabulary and its highlighting: the words WaveSQL adds to Spark SQL, the
Spark SQL words worth completing, and :class:`WaveSQLLexer`, the Pygments lexer the prompt
colours the buffer with (:mod:`wavesql.repl.completion` completes the same words).
"""

from __future__ import annotations

from pygments.lexer import inherit, words
from pygments.lexers.sql import SqlLexer
from pygments.token import Keyword, Name

#: Words WaveSQL adds to Spark SQL (DDL clauses, windows, relation-to-stream, emit/late,
#: signal joins, the REPL's own STREAM prefix). Highlighted as keywords and completed.
WAVESQL_KEYWORDS = (
    "STREAM", "STREAMS", "SIGNAL", "SIGNALS", "SINK", "SINKS", "VIEWS", "SAMPLES", "SLIDE",
    "RANGE", "ROWS", "NOW", "UNBOUNDED", "ISTREAM", "DSTREAM", "RSTREAM", "EMIT", "FINAL",
    "CHANGES", "LATE", "INTO", "SYNC", "MISSING", "RESAMPLE", "ASOF", "WATERMARK", "PROGRESS",
    "HEARTBEAT", "EVENT", "TIME", "RATE", "HZ", "KHZ", "SEGMENT", "EPOCH", "FORMAT", "OPTIONS",
    "COLUMN", "PARTITION", "REPLICATE", "TRUNCATE", "BACKGROUND", "IR", "AST", "KAFKA",
    "REALTIME",
)

#: The Spark SQL words worth completing (the full reserved-word list would mostly be noise).
SQL_KEYWORDS = (
    "SELECT", "FROM", "WHERE", "GROUP", "BY", "HAVING", "ORDER", "LIMIT", "OFFSET", "QUALIFY",
    "JOIN", "INNER", "LEFT", "RIGHT", "FULL", "OUTER", "CROSS", "SEMI", "ANTI", "ON", "USING",
    "LATERAL", "VIEW", "EXPLODE", "UNION", "INTERSECT", "EXCEPT", "ALL", "DISTINCT", "AS",
    "WITH", "CASE", "WHEN", "THEN", "ELSE", "END", "AND", "OR", "NOT", "IN", "IS", "NULL",
    "LIKE", "RLIKE", "BETWEEN", "EXISTS", "ASC", "DESC", "NULLS", "FIRST", "LAST", "OVER",
    "WINDOW", "PRECEDING", "FOLLOWING", "CURRENT", "ROW", "INTERVAL", "CAST", "TRUE", "FALSE",
    "CREATE", "REPLACE", "TEMPORARY", "DROP", "IF", "SHOW", "DESCRIBE", "EXPLAIN", "EXTENDED",
    "FORMATTED", "CODEGEN", "COST", "INSERT", "OVERWRITE", "VALUES", "TABLE", "TABLES", "PIVOT",
    "TO", "SECOND", "SECONDS", "MINUTE", "MINUTES", "HOUR", "HOURS", "DAY", "DAYS",
    "MILLISECOND", "MILLISECONDS", "MICROSECOND", "MICROSECONDS", "STRING", "DOUBLE", "FLOAT",
    "INT", "BIGINT", "BOOLEAN", "TIMESTAMP", "DATE", "ARRAY", "MAP", "STRUCT", "DECIMAL",
)


class WaveSQLLexer(SqlLexer):
    """Pygments' SQL lexer with WaveSQL's words as keywords and ``\\meta`` commands."""

    name = "WaveSQL"
    aliases = ["wavesql"]
    filenames = ["*.wsql"]
    # Rules listed here are tried before the inherited SQL rules (``inherit``), so a WaveSQL
    # word is a Keyword even where plain SQL would call it a Name (SAMPLES, HZ, ...).
    tokens = {
        "root": [
            (r"\\[a-zA-Z?]+", Keyword.Pseudo),
            (words(WAVESQL_KEYWORDS, prefix=r"\b", suffix=r"\b"), Keyword),
            (r"`[^`]*`", Name.Variable),
            inherit,
        ],
    }
