"""Hypothesis strategies for fuzzing the WaveSQL front end.

Three families of inputs, all plain ``str``:

* :func:`token_soups` -- random sequences of WaveSQL/SQL keywords, identifiers, literals,
  brackets, operators and comment openers, and raw random characters;
* :func:`mutated_queries` -- a seed query (see :mod:`tests.fuzz.seeds`) with 1-4 token- or
  character-level mutations (delete/duplicate/swap/replace tokens, truncate, insert nasty
  characters, very long identifiers, moderate extra nesting);
* :func:`wavesql_statements` -- every WaveSQL construct (stream windows, SYNC/ASOF JOIN,
  RESAMPLE, ISTREAM, EMIT, LATE INTO, EXPLAIN, CREATE/DROP/SHOW/DESCRIBE) with arguments
  drawn from pools of valid and invalid values, and clauses in random order and number.

The names used by :func:`wavesql_statements` match the catalog that ``tests/test_fuzz.py``
binds against, so a good share of the generated statements get past name resolution.
"""

from __future__ import annotations

import functools
import re

from hypothesis import strategies as st

from tests.fuzz import seeds as seed_lists


@functools.lru_cache(maxsize=None)
def _pick(*options) -> st.SearchStrategy:
    # Cached: building (and validating) a fresh strategy per draw dominated generation time.
    return st.sampled_from(options)


@functools.lru_cache(maxsize=None)
def _ints(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(low, high)


@functools.lru_cache(maxsize=None)
def _lists(elements: st.SearchStrategy, min_size: int = 0, max_size: int = 3):
    return st.lists(elements, min_size=min_size, max_size=max_size)

# ------------------------------------------------------------------------------ vocabulary
SQL_KEYWORDS = (
    "SELECT FROM WHERE GROUP BY HAVING ORDER LIMIT OFFSET JOIN LEFT RIGHT FULL OUTER INNER "
    "CROSS SEMI ANTI ON USING AS AND OR NOT IN IS NULL TRUE FALSE BETWEEN LIKE RLIKE ILIKE "
    "CASE WHEN THEN ELSE END DISTINCT ALL UNION INTERSECT EXCEPT WITH RECURSIVE OVER "
    "PARTITION WINDOW ROWS RANGE PRECEDING FOLLOWING CURRENT ROW UNBOUNDED INTERVAL CAST "
    "TRY_CAST LATERAL VIEW PIVOT UNPIVOT FOR INSERT INTO OVERWRITE TABLE VALUES CREATE "
    "REPLACE TEMPORARY DROP IF EXISTS SHOW DESCRIBE SET CACHE USE QUALIFY FILTER TABLESAMPLE "
    "DISTRIBUTE SORT CLUSTER MERGE UPDATE DELETE ASC DESC NULLS FIRST LAST GROUPING SETS "
    "ROLLUP CUBE DIV STRUCT ARRAY MAP TABLES FUNCTIONS CALL ADD JAR MSCK"
).split()
WAVE_KEYWORDS = (
    "STREAM STREAMS SIGNAL SIGNALS SINK SINKS VIEWS EXPLAIN AST IR SPARK EXTENDED FORMATTED "
    "CODEGEN COST ISTREAM DSTREAM RSTREAM SYNC MISSING TRUNCATE ERROR EMIT FINAL CHANGES LATE "
    "RESAMPLE ASOF SAMPLES SLIDE NOW REPLICATE FORMAT OPTIONS EVENT TIME WATERMARK PROGRESS "
    "COLUMN HEARTBEAT RATE HZ KHZ SEGMENT EPOCH TO SECOND SECONDS MILLISECOND MILLISECONDS "
    "MICROSECONDS MINUTE MINUTES HOUR HOURS DAY DAYS FORTNIGHTS parquet csv json wav avro"
).split()
IDENTIFIERS = [
    "trades", "quotes", "refs", "dets", "counting", "busy", "frames", "alerts", "t", "q", "m",
    "sym", "px", "qty", "ts", "voice", "t_from", "t_to", "a", "b", "x", "k", "_time",
    "seg_std", "fft", "hanning", "band_energy", "lowpass", "start_time", "count", "avg",
    "window", "explode", "range", "samples", "emit", "late", "sync", "now", "rate", "segment",
    "`quoted id`", "`a;b`", "`a``b`", "``", "`SELECT`", "données", "名前", "x1$", "_", "a.b.c",
]
LITERALS = [
    "0", "1", "-1", "42", "3.14", "1e10", "1e400", "-1e400", ".5", "5.", "1.", "0x1F",
    "99999999999999999999999", "1L", "2S", "3Y", "1.5BD", "0.1D", "1.5F", "'str'", "''",
    "'it''s'", "'a\\'b'", "'\\\\'", "'%_'", "\"dq\"", "X'AB'", "r'raw\\d'", "DATE '2024-01-01'",
    "TIMESTAMP '2024-01-01 00:00:00'", "INTERVAL '1' DAY", "INTERVAL 5 SECONDS", "NULL", "TRUE",
    "'\u00e9\u540d\U0001f3b5'", "'\\u0041'", "'line\nbreak'",
]
PUNCTUATION = [
    "(", ")", "[", "]", "{", "}", ",", ";", ".", "*", "+", "-", "/", "%", "=", "==", "<>",
    "!=", "<", "<=", ">", ">=", "<=>", "!", "~", "&", "|", "^", "||", "->", "=>", "::", ":",
    "?", "@", "$", "#", "\\", "'", '"', "`", "--", "/*", "*/", "!<", "!>", "${x}", "%s",
]
SEPARATORS = [" ", " ", " ", "", "\n", "\t", "  ", "\r\n"]
# Characters that break lexers: quotes, escapes, NUL and other controls, comment openers,
# non-ASCII letters, combining marks, bidi/zero-width/BOM, emoji, a lone surrogate.
NASTY_CHARS = (
    "'\"`\\\x00\x01\x07\x1b\x7f\r\n\t;/*-#$@?:[](){}<>|&^~!%="
    "\u00e9\u00df\u0130\u0131\u540d\u0301\u202e\u200b\ufeff\u2028\U0001f3b5\ud800"
)

VOCABULARY = SQL_KEYWORDS + WAVE_KEYWORDS + IDENTIFIERS + LITERALS + PUNCTUATION


@functools.lru_cache(maxsize=None)
def vocabulary_tokens() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(SQL_KEYWORDS), st.sampled_from(WAVE_KEYWORDS),
        st.sampled_from(IDENTIFIERS), st.sampled_from(LITERALS), st.sampled_from(PUNCTUATION),
        st.sampled_from(SQL_KEYWORDS + WAVE_KEYWORDS).map(str.lower),
    )


nasty_text = st.text(alphabet=st.sampled_from(NASTY_CHARS), min_size=1, max_size=4)


def long_identifier() -> st.SearchStrategy[str]:
    return st.one_of(
        _ints(200, 5000).map(lambda n: "x" * n),
        _ints(200, 2000).map(lambda n: "`" + "y" * n + "`"),
        _ints(100, 2000).map(lambda n: "'" + "s" * n + "'"),
        _ints(30, 400).map(lambda n: "9" * n),
    )


# ------------------------------------------------------------------------------- soups
@functools.lru_cache(maxsize=None)
@st.composite
def token_soups(draw) -> str:
    """Up to 40 vocabulary tokens joined by random whitespace (or none)."""
    tokens = draw(_lists(vocabulary_tokens(), 0, 40))
    out = []
    for token in tokens:
        out.append(token)
        out.append(draw(_pick(*SEPARATORS)))
    return "".join(out)


def random_text() -> st.SearchStrategy[str]:
    """Raw random characters: ASCII punctuation-heavy, and any unicode."""
    return st.one_of(
        st.text(alphabet=st.sampled_from(
            "SELECTFROMWHERE selectfrom()[]{},.;*+-/%=<>!'\"`\\\n\t0123456789abc_"), max_size=60),
        st.text(max_size=40),
    )


def soups() -> st.SearchStrategy[str]:
    return st.one_of(token_soups(), random_text())


# ---------------------------------------------------------------------------- mutations
# A rough SQL lexer, for mutation only (it need not agree with sqlglot's).
_LEX = re.compile(r"""
    '(?:[^'\\]|\\.|'')*'? | "(?:[^"\\]|\\.)*"? | `(?:[^`]|``)*`? |   # quoted
    --[^\n]* | /\*.*?(?:\*/|$) |                                      # comments
    \d+(?:\.\d*)?(?:[eE][+-]?\d+)? | \.\d+ |                          # numbers
    \w+ |                                                             # words
    <=>|<>|!=|<=|>=|==|\|\||->|=>|:: |                                # operators
    \s+ | .                                                           # the rest
""", re.VERBOSE | re.DOTALL)


def lex(text: str) -> list[str]:
    """Split text into tokens (whitespace tokens included) such that ``"".join`` is ``text``."""
    return _LEX.findall(text)


@st.composite
def _mutate_once(draw, text: str) -> str:
    tokens = lex(text)
    words = [i for i, t in enumerate(tokens) if not t.isspace()] or [0]
    op = draw(_pick("delete", "duplicate", "swap", "replace", "insert", "truncate", "chars",
                    "long", "nest", "delete_span", "case"))

    def word() -> int:
        return words[draw(_ints(0, len(words) - 1))]

    if not tokens:
        tokens = [""]
    if op == "delete":
        del tokens[word()]
    elif op == "duplicate":
        i = word()
        tokens.insert(i, tokens[i] + draw(_pick(*SEPARATORS)))
    elif op == "swap":
        i, j = word(), word()
        tokens[i], tokens[j] = tokens[j], tokens[i]
    elif op == "replace":
        tokens[word()] = draw(vocabulary_tokens())
    elif op == "insert":
        i = draw(_ints(0, len(tokens)))
        tokens.insert(i, " " + draw(vocabulary_tokens()) + " ")
    elif op == "truncate":
        return text[:draw(_ints(0, len(text)))]
    elif op == "chars":
        p = draw(_ints(0, len(text)))
        return text[:p] + draw(nasty_text) + text[p:]
    elif op == "long":
        p = draw(_ints(0, len(text)))
        return text[:p] + " " + draw(long_identifier()) + " " + text[p:]
    elif op == "nest":
        # Moderate extra nesting only: deep nesting is tested separately (test_fuzz.py).
        n = draw(_ints(1, 12))
        i = word()
        later = [w for w in words if w >= i] or [i]
        j = later[draw(_ints(0, len(later) - 1))]
        opener, closer = draw(_pick(("(", ")"), ("[", "]"), ("(SELECT ", ")"), ("NOT (", ")"),
                                    ("-(", ")"), ("(", "")))
        tokens[i] = opener * n + tokens[i]
        tokens[j] = tokens[j] + closer * n
    elif op == "delete_span":
        p = draw(_ints(0, len(text)))
        q = draw(_ints(p, min(len(text), p + 40)))
        return text[:p] + text[q:]
    elif op == "case":
        i = word()
        tokens[i] = draw(_pick(str.lower, str.upper, str.swapcase))(tokens[i])
    return "".join(tokens)


@st.composite
def mutated(draw, seeds: st.SearchStrategy[str], max_mutations: int = 4) -> str:
    text = draw(seeds)
    for _ in range(draw(_ints(1, max_mutations))):
        text = draw(_mutate_once(text))
    return text


def seed_texts() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(seed_lists.dialect_seeds()),
        st.sampled_from(seed_lists.corpus_seeds()),
        st.sampled_from(seed_lists.example_seeds()),
        st.sampled_from(seed_lists.example_files()),
    )


def mutated_queries() -> st.SearchStrategy[str]:
    return mutated(seed_texts())


# ------------------------------------------------------------ WaveSQL constructs, fuzzed
NUMBERS = _pick("1", "2", "5", "10", "128", "256", "4096", "0", "-1", "1.5", "1e400", "0.0001",
                "99999999999999999999", "'5'", "NULL", "x", "", "(1)", "1 + 1", "-0")
COUNTS = _pick("1", "3", "10", "32", "256", "4096", "0", "-3", "2.5", "1e3", "'4'", "n", "",
               "99999999999999999999", "NULL", "(4)")
UNITS = _pick("SECOND", "SECONDS", "MILLISECONDS", "MICROSECOND", "MINUTE", "MINUTES", "HOUR",
              "HOURS", "DAY", "DAYS", "seconds", "YEAR", "MONTH", "WEEK", "FORTNIGHTS", "", "HZ",
              "SLIDE", "FROM")
STREAM_NAMES = _pick("trades", "quotes", "refs", "dets", "busy", "counting", "frames",
                     "alerts", "nosuch", "db.trades", "`trades`", "range(10)")
SIGNAL_NAMES = _pick("counting", "frames", "trades", "nosuch")
COLUMNS = _pick("sym", "px", "qty", "ts", "voice", "t_from", "t_to", "k", "bid", "name",
                "t.sym", "t.ts", "q.ts", "d.t_from", "d.t_to", "m.voice", "nosuch", "_time",
                "t.nosuch")
ALIASES = _pick("", "", " t", " AS t", " q", " d", " m", " AS m", " emit", " sync", " late")
SIGNAL_CALLS = _pick(
    "seg_std(voice)", "seg_avg(voice)", "start_time(voice)", "width(voice)",
    "band_energy(fft(hanning(voice)), 3, 4)", "lowpass(voice, 1000.0)", "lowpass(voice, 1e9)",
    "highpass(voice, -5)", "dwt(voice, 40)", "subseg(voice, 0, 10)", "subseg(voice, -5, 1e9)",
    "resample(voice, 8000)", "fft(voice)", "magnitude(fft(voice))", "seg_std(px)",
    "seg_std()", "seg_std(voice, voice)", "spectrogram(voice, 0)", "degap(voice, 'error')",
    "band_energy_hz(fft(voice), 100, 50)", "zero_crossings(voice)", "trimpeak(voice, 'x')",
    "threshold_ranges(voice, 0.1)", "cfar(voice, 4, 2, 1.5)", "seg_kurtosis(lowpass(voice, 1))",
)
EXPRESSIONS = _pick(
    "*", "sym", "px", "count(*)", "avg(px)", "sum(qty)", "t.*", "px * 2 AS y", "ts",
    "_time", "max(ts)", "k", "CASE WHEN px > 1 THEN 'hi' END", "nosuch(px)", "1",
    "avg(px) OVER (ORDER BY ts RANGE BETWEEN INTERVAL 20 SECONDS PRECEDING AND CURRENT ROW)",
    "lag(px) OVER (PARTITION BY sym ORDER BY ts)", "row_number() OVER (ORDER BY ts)",
    "window(ts, '10 seconds')", "voice",
)
PROJECTIONS = st.one_of(EXPRESSIONS, SIGNAL_CALLS)
CONDITIONS = _pick("px > 1", "sym = 'AAPL'", "seg_std(voice) > 0.01", "qty IS NULL",
                   "t.sym = q.sym AND t.ts >= q.ts", "t.sym = q.sym", "t.ts >= q.ts",
                   "t.ts > q.ts", "t.ts = q.ts", "nosuch = 1", "width(voice) = 4096", "TRUE",
                   "1", "px")


@functools.lru_cache(maxsize=None)
@st.composite
def durations(draw) -> str:
    form = draw(_ints(0, 5))
    num, unit = draw(NUMBERS), draw(UNITS)
    if form == 0:
        return f"INTERVAL '{num}' {unit}"
    if form == 1:
        return f"INTERVAL {num} {unit}"
    if form == 2:
        return draw(_pick("UNBOUNDED", "'5 seconds'", "INTERVAL '1 minute 30 seconds'",
                          "INTERVAL", "1 SECOND 2 SECONDS"))
    return f"{num} {unit}"


@functools.lru_cache(maxsize=None)
@st.composite
def windows(draw) -> str:
    kind = draw(_ints(0, 9))
    if kind == 0:
        body = f"RANGE {draw(durations())}"
        if draw(st.booleans()):
            body += f" SLIDE {draw(durations())}"
    elif kind == 1:
        body = "RANGE UNBOUNDED"
    elif kind == 2:
        body = f"ROWS {draw(COUNTS)}"
    elif kind == 3:
        keys = ", ".join(draw(_lists(COLUMNS, 0, 3)))
        body = f"PARTITION BY {keys} ROWS {draw(COUNTS)}"
    elif kind == 4:
        body = f"PARTITION INTO {draw(COUNTS)} BY {draw(COLUMNS)}"
        if draw(st.booleans()):
            body += f" REPLICATE WHEN {draw(CONDITIONS)}"
    elif kind == 5:
        body = "NOW"
    elif kind == 6:
        body = f"SAMPLES {draw(COUNTS)}"
        if draw(st.booleans()):
            body += f" SLIDE {draw(COUNTS)}"
    elif kind == 7:
        body = draw(_pick("", "SAMPLE 4096", "RANGE", "ROWS", "PARTITION", "PARTITION INTO",
                          "NOW NOW", "0", "SAMPLES 4 SLIDE", "RANGE 1 MINUTE SLIDE"))
    else:
        body = f"SAMPLES {draw(COUNTS)} SLIDE {draw(COUNTS)}"
    close = draw(_pick("]", "]", "]", "", "]]", ")"))
    return f"[{body}{close}"


@functools.lru_cache(maxsize=None)
@st.composite
def table_refs(draw) -> str:
    name = draw(STREAM_NAMES)
    window = f" {draw(windows())}" if draw(st.booleans()) else ""
    return f"{name}{window}{draw(ALIASES)}"


@functools.lru_cache(maxsize=None)
@st.composite
def resamples(draw) -> str:
    args = [draw(STREAM_NAMES), draw(COLUMNS), draw(durations())]
    if draw(st.booleans()):
        args.append(draw(_pick("'linear'", "'prev'", "'previous'", "'null'", "'zero'",
                               "'cubic'", "linear", "1", "''")))
    if draw(_ints(0, 5)) == 0:  # wrong arity / order
        args = draw(_lists(_pick(*args), 0, 5))
    return f"RESAMPLE({', '.join(args)}){draw(ALIASES)}"


@functools.lru_cache(maxsize=None)
@st.composite
def joins(draw) -> str:
    kind = draw(_ints(0, 4))
    if kind == 0:
        missing = draw(_pick("", "", " MISSING NULL", " MISSING TRUNCATE", " MISSING ERROR",
                             " MISSING", " MISSING ZERO"))
        bounds = draw(_pick("(d.t_from, d.t_to)", "(d.t_from, d.t_from + INTERVAL 1 SECOND)",
                            "(d.k, d.k + 100)", "(d.t_to, d.t_from)", "(1, 2)", "(d.t_from)",
                            "d.t_from, d.t_to", "(d.nosuch, d.t_to)", "('a', 'b')", "()"))
        on = draw(_pick("ON RANGE ", "ON RANGE ", "ON ", "RANGE ", "ON RANGE"))
        return f" SYNC JOIN {draw(SIGNAL_NAMES)}{draw(ALIASES)} {on}{bounds}{missing}"
    if kind == 1:
        side = draw(_pick("", "LEFT ", "RIGHT ", "FULL "))
        return f" ASOF {side}JOIN {draw(table_refs())} ON {draw(CONDITIONS)}"
    if kind == 2:
        return f" JOIN {draw(table_refs())} ON {draw(CONDITIONS)}"
    if kind == 3:
        return f" CROSS JOIN {draw(table_refs())}"
    return f", {draw(table_refs())}"


@functools.lru_cache(maxsize=None)
@st.composite
def selects(draw, depth: int = 0) -> str:
    projections = ", ".join(draw(_lists(PROJECTIONS, 1, 3)))
    source_kind = draw(_ints(0, 5 if depth < 2 else 2))
    if source_kind <= 2:
        source = draw(table_refs())
    elif source_kind == 3:
        source = draw(resamples())
    elif source_kind == 4:
        source = f"{draw(_pick('ISTREAM', 'DSTREAM', 'RSTREAM'))} ({draw(selects(depth + 1))})" \
                 f"{draw(ALIASES)}"
    else:
        source = f"({draw(selects(depth + 1))}){draw(ALIASES)}"
    sql = f"SELECT {projections} FROM {source}"
    sql += "".join(draw(_lists(joins(), 0, 2)))
    if draw(st.booleans()):
        sql += f" WHERE {draw(CONDITIONS)}"
    if draw(st.booleans()):
        sql += f" GROUP BY {draw(COLUMNS)}"
    if draw(_ints(0, 3)) == 0:
        sql += f" ORDER BY {draw(COLUMNS)} LIMIT {draw(COUNTS)}"
    if draw(_ints(0, 2)) == 0:
        sql += draw(_pick(" EMIT FINAL", " EMIT CHANGES", " EMIT", " EMIT SOON",
                          " EMIT FINAL EMIT CHANGES"))
    if draw(_ints(0, 2)) == 0:
        sql += draw(_pick(" LATE INTO 'late/x'", " LATE INTO alerts", " LATE INTO nosuch",
                          " LATE INTO", " LATE INTO 5", " LATE INTO 'a' LATE INTO 'b'"))
    return sql


@functools.lru_cache(maxsize=None)
@st.composite
def queries(draw) -> str:
    kind = draw(_ints(0, 5))
    body = draw(selects())
    if kind == 0:
        return f"{draw(_pick('ISTREAM', 'DSTREAM', 'RSTREAM', 'istream'))} ({body})"
    if kind == 1:
        return f"WITH c AS ({body}) SELECT * FROM c{draw(_pick('', ' [NOW]', ' [ROWS 2]'))}"
    if kind == 2:
        return f"{body} UNION ALL {draw(selects())}"
    if kind == 3:
        return f"INSERT INTO {draw(_pick('alerts', 'nosuch', 'trades'))} {body}"
    return body


TYPES = _pick("STRING", "DOUBLE", "FLOAT", "INT", "BIGINT", "TIMESTAMP", "BOOLEAN", "DATE",
              "DECIMAL(10, 2)", "ARRAY<FLOAT>", "MAP<STRING, INT>", "STRUCT<a: INT>", "FLOT",
              "SIGSEG", "", "ARRAY<", "VARCHAR(3)", "INTERVAL DAY")
COLUMN_DEFS = st.tuples(_pick("a", "ts", "voice", "sym", "A", "_time", "`c c`", ""), TYPES)


@functools.lru_cache(maxsize=None)
@st.composite
def ddl_values(draw, clause: str) -> str:
    if clause in ("FROM", "TO"):
        return draw(_pick("'trades/'", "'refs.csv'", "'counting_44k1.wav'", "'*.wav'",
                          "'no/such/dir/'", "''", "'out/'", "trades", "'~/x'", "'a''b'", "1"))
    if clause == "FORMAT":
        return draw(_pick("parquet", "csv", "json", "wav", "avro", "PARQUET", "'csv'", "", "("))
    if clause == "OPTIONS":
        pairs = draw(_lists(_pick("header = 'true'", "delimiter = ';'", "'k' = -2",
                                    "spark.sql.x = 1", "`weird key` = 'a'", "a = b",
                                    "x = TRUE", "= 1", "k = NULL", "k"), 0, 3))
        return f"({', '.join(pairs)})" if draw(_ints(0, 5)) else ", ".join(pairs)
    if clause in ("EVENT TIME", "PROGRESS COLUMN"):
        return draw(_pick("ts", "sym", "nosuch", "`ts`", "'ts'", "", "ts, sym"))
    if clause in ("WATERMARK", "HEARTBEAT"):
        return draw(durations())
    if clause == "RATE":
        return f"{draw(NUMBERS)} {draw(_pick('HZ', 'KHZ', '', 'MHZ', 'hz'))}"
    if clause == "SEGMENT":
        return draw(COUNTS)
    if clause == "EPOCH":
        return draw(_pick("'2024-01-01 00:00:00'", "'2024-01-01T00:00:00Z'", "'yesterday'",
                          "''", "'2024-13-45'", "2024", "'+99999-01-01'"))
    return ""


CLAUSE_NAMES = ("FROM", "TO", "FORMAT", "OPTIONS", "EVENT TIME", "WATERMARK",
                "PROGRESS COLUMN", "HEARTBEAT", "RATE", "SEGMENT", "EPOCH")
TYPICAL_CLAUSES = {
    "STREAM": ("FROM", "FORMAT", "OPTIONS", "EVENT TIME", "WATERMARK", "PROGRESS COLUMN",
               "HEARTBEAT"),
    "SIGNAL": ("RATE", "FROM", "FORMAT", "OPTIONS", "SEGMENT", "EPOCH"),
    "SINK": ("TO", "FORMAT", "OPTIONS"),
}


@functools.lru_cache(maxsize=None)
@st.composite
def creates(draw) -> str:
    kind = draw(_pick("STREAM", "SIGNAL", "SINK", "stream", "VIEW"))
    if kind == "VIEW":
        return f"CREATE {draw(_pick('', 'OR REPLACE '))}VIEW " \
               f"{draw(_pick('v', 'busy', 'trades', 'v2'))} AS {draw(selects())}"
    head = "CREATE " + draw(_pick("", "OR REPLACE ")) + kind + " " + draw(
        _pick("", "IF NOT EXISTS ", "IF EXISTS ")) + draw(
        _pick("s", "trades", "counting", "alerts", "new_obj", "`odd name`", "", "1x", "db.s"))
    if draw(_ints(0, 6)):
        cols = draw(_lists(COLUMN_DEFS, 0, 4))
        head += " (" + ", ".join(f"{n} {t}" for n, t in cols) + ")"
    upper = kind.upper()
    pool = TYPICAL_CLAUSES[upper] if draw(_ints(0, 4)) else CLAUSE_NAMES
    clauses = draw(_lists(_pick(*pool), 0, 7))
    if draw(_ints(0, 2)):  # usually the required ones are there, in a random place
        for required in {"STREAM": ("FROM", "FORMAT"), "SIGNAL": ("RATE", "FROM", "FORMAT"),
                         "SINK": ("TO", "FORMAT")}[upper]:
            if required not in clauses:
                clauses.insert(draw(_ints(0, len(clauses))), required)
    return head + "".join(f" {c} {draw(ddl_values(c))}" for c in clauses)


@functools.lru_cache(maxsize=None)
@st.composite
def other_statements(draw) -> str:
    kind = draw(_ints(0, 5))
    name = draw(_pick("trades", "counting", "alerts", "busy", "nosuch", "refs", ""))
    if kind == 0:
        return f"DROP {draw(_pick('STREAM', 'SIGNAL', 'SINK', 'VIEW', 'TABLE'))} " \
               f"{draw(_pick('', 'IF EXISTS '))}{name}"
    if kind == 1:
        return f"SHOW {draw(_pick('STREAMS', 'SIGNALS', 'SINKS', 'VIEWS', 'TABLES', 'STREEMS', ''))}"
    if kind == 2:
        return f"DESCRIBE {name}"
    if kind == 3:
        return draw(_pick("SET x = 1", "SHOW TABLES", "CACHE TABLE trades", "USE default",
                          "SELECT 1", "VALUES (1, 2)", "SET"))
    return f"SELECT * FROM {name}"


@functools.lru_cache(maxsize=None)
@st.composite
def wavesql_statements(draw) -> str:
    kind = draw(_ints(0, 9))
    if kind <= 4:
        sql = draw(queries())
    elif kind <= 7:
        sql = draw(creates())
    else:
        sql = draw(other_statements())
    if draw(_ints(0, 7)) == 0:
        sql = f"EXPLAIN {draw(_pick('', 'AST ', 'IR ', 'SPARK ', 'EXTENDED ', 'COST '))}{sql}"
    return sql


def wavesql_scripts() -> st.SearchStrategy[str]:
    """One to three statements separated by ``;`` (later ones may use earlier DDL)."""
    return _lists(wavesql_statements(), 1, 3).map(";\n".join)


# ------------------------------------------------------- WaveSQL constructs, all valid syntax
# Every statement below parses (the binder may still reject it: a window on a stream without
# EVENT TIME, a SYNC over a non-signal, ...). Used for the round-trip property and to get
# deep into the binder.
V_UNITS = _pick("SECOND", "SECONDS", "MILLISECOND", "MILLISECONDS", "MICROSECONDS", "MINUTE",
                "MINUTES", "HOUR", "DAYS", "seconds")
V_NUMBERS = _pick("1", "2", "5", "10", "30", "100", "250", "1.5")
V_COUNTS = _pick("1", "2", "3", "10", "32", "256", "1024", "4096")
V_STREAMS = _pick("trades", "quotes", "refs", "dets", "busy")
V_ALIASES = _pick("", " t", " AS t", " x", " AS emit", " late", " AS sync")
V_KEYS = _pick("sym", "qty", "upper(sym)", "t.sym", "qty % 2")
V_CONDITIONS = _pick("px > 100", "sym = 'AAPL'", "qty BETWEEN 2 AND 5", "sym IN ('AAPL', 'MSFT')",
                     "px > 100 AND NOT qty = 3", "TRUE")


@functools.lru_cache(maxsize=None)
@st.composite
def valid_durations(draw) -> str:
    num, unit = draw(V_NUMBERS), draw(V_UNITS)
    form = draw(_ints(0, 2))
    if form == 0:
        return f"{num} {unit}"
    if form == 1:
        return f"INTERVAL {num} {unit}"
    return f"INTERVAL '{num}' {unit.rstrip('Ss') if unit.upper() != 'SECONDS' else 'SECOND'}"


@functools.lru_cache(maxsize=None)
@st.composite
def valid_windows(draw, signal: bool = False) -> str:
    if signal:
        body = f"SAMPLES {draw(V_COUNTS)}" + (f" SLIDE {draw(V_COUNTS)}" if draw(st.booleans())
                                              else "")
        if draw(_ints(0, 3)) == 0:
            body = f"RANGE {draw(valid_durations())}"
        return f"[{body}]"
    kind = draw(_ints(0, 6))
    if kind == 0:
        body = f"RANGE {draw(valid_durations())}"
    elif kind == 1:
        body = f"RANGE {draw(valid_durations())} SLIDE {draw(valid_durations())}"
    elif kind == 2:
        body = "RANGE UNBOUNDED"
    elif kind == 3:
        body = f"ROWS {draw(V_COUNTS)}"
    elif kind == 4:
        body = f"PARTITION BY {', '.join(draw(_lists(V_KEYS, 1, 2)))} ROWS {draw(V_COUNTS)}"
    elif kind == 5:
        body = "NOW"
    else:
        body = f"PARTITION INTO {draw(V_COUNTS)} BY {draw(V_KEYS)}" + (
            f" REPLICATE WHEN {draw(V_CONDITIONS)}" if draw(st.booleans()) else "")
    return f"[{body}]"


@functools.lru_cache(maxsize=None)
@st.composite
def valid_signal_selects(draw) -> str:
    calls = draw(_lists(_pick(
        "start_time(voice) AS t", "seg_std(voice) AS sd", "seg_avg(voice)", "width(voice) AS w",
        "band_energy(fft(hanning(voice)), 3, 4) AS score", "lowpass(voice, 1000.0) AS lp",
        "seg_rms(voice)", "zero_crossings(voice)", "magnitude(fft(voice)) AS mag", "voice",
        "subseg(voice, 0, 10) AS head", "crest_factor(voice)", "seg_max(voice) - seg_min(voice)",
    ), 1, 3))
    window = f" {draw(valid_windows(signal=True))}" if draw(_ints(0, 3)) else ""
    source = draw(_pick("counting", "frames"))
    sql = f"SELECT {', '.join(calls)} FROM {source}{window}{draw(_pick('', ' c', ' AS s'))}"
    if draw(st.booleans()):
        sql += f" WHERE {draw(_pick('seg_std(voice) > 0.01', 'seg_avg(voice) < 0.001', 'width(voice) = 4096', 'seg_std(voice) > 0.01 AND seg_avg(voice) < 0.001'))}"
    return sql


@functools.lru_cache(maxsize=None)
@st.composite
def valid_stream_selects(draw, depth: int = 0) -> str:
    kind = draw(_ints(0, 7 if depth == 0 else 3))
    alias = draw(V_ALIASES)
    if kind <= 3:
        window = f" {draw(valid_windows())}" if draw(_ints(0, 2)) else ""
        source = f"{draw(V_STREAMS)}{window}{alias}"
    elif kind == 4:
        method = draw(_pick("", ", 'linear'", ", 'prev'", ", 'null'", ", 'zero'"))
        source = f"RESAMPLE({draw(_pick('trades', 'quotes'))}, ts, {draw(valid_durations())}" \
                 f"{method}){alias}"
    elif kind == 5:
        source = f"trades t ASOF {draw(_pick('', 'LEFT '))}JOIN quotes q ON " \
                 f"{draw(_pick('t.sym = q.sym AND t.ts >= q.ts', 't.ts >= q.ts', 't.sym = q.sym AND q.ts <= t.ts'))}"
    elif kind == 6:
        source = f"dets d SYNC JOIN counting m ON RANGE ({draw(_pick('d.t_from, d.t_to', 'd.t_from, d.t_from + INTERVAL 100 MILLISECONDS'))})" \
                 f"{draw(_pick('', ' MISSING NULL', ' MISSING TRUNCATE', ' MISSING ERROR'))}"
    else:
        inner = draw(valid_stream_selects(depth + 1))
        r2s = draw(_pick("ISTREAM", "DSTREAM", "RSTREAM"))
        source = f"{r2s} ({inner}){alias or ' AS r'}"
    columns = draw(_pick("*", "sym, px", "sym, count(*) AS n", "_time, sym, avg(px) AS a",
                         "count(*)", "ts", "d.t_from, m.voice", "t.sym, q.bid"))
    sql = f"SELECT {columns} FROM {source}"
    if draw(st.booleans()):
        sql += f" WHERE {draw(V_CONDITIONS)}"
    if "count(" in columns or "avg(" in columns:
        sql += draw(_pick(" GROUP BY sym", " GROUP BY _time, sym", ""))
    if depth == 0:
        if draw(_ints(0, 3)) == 0:
            sql += f" EMIT {draw(_pick('FINAL', 'CHANGES'))}"
        if draw(_ints(0, 3)) == 0:
            sql += f" LATE INTO {draw(_pick(chr(39) + 'late/x' + chr(39), 'alerts'))}"
    return sql


@functools.lru_cache(maxsize=None)
@st.composite
def valid_creates(draw) -> str:
    kind = draw(_pick("STREAM", "SIGNAL", "SINK"))
    name = draw(_pick("s", "trades", "counting", "alerts", "new_obj", "`odd name`"))
    head = f"CREATE {draw(_pick('', 'OR REPLACE '))}{kind} " \
           f"{draw(_pick('', 'IF NOT EXISTS '))}{name}"
    if kind == "STREAM":
        head += draw(_pick(" (sym STRING, px DOUBLE, qty INT, ts TIMESTAMP)",
                           " (sym STRING, name STRING)", " (ts TIMESTAMP, v DOUBLE, p BOOLEAN)"))
        has_ts = "ts TIMESTAMP" in head
        clauses = {"FROM": draw(_pick("'trades/'", "'refs.csv'", "'quotes/'")),
                   "FORMAT": draw(_pick("parquet", "csv", "json"))}
        if draw(st.booleans()):
            clauses["OPTIONS"] = draw(_pick("(header = 'true')", "(delimiter = ';', 'k' = -2)"))
        if has_ts and draw(st.booleans()):
            clauses["EVENT TIME"] = "ts"
            if draw(st.booleans()):
                clauses["WATERMARK"] = draw(valid_durations())
            if draw(_ints(0, 3)) == 0:
                clauses["HEARTBEAT"] = draw(valid_durations())
        if "p BOOLEAN" in head and draw(st.booleans()):
            clauses["PROGRESS COLUMN"] = "p"
    elif kind == "SIGNAL":
        head += draw(_pick(" (voice FLOAT)", " (voice DOUBLE)", " (a FLOAT, b FLOAT)"))
        clauses = {"RATE": draw(_pick("44100 HZ", "44.1 KHZ", "48000 HZ", "44100")),
                   "FROM": draw(_pick("'counting_44k1.wav'", "'*.wav'", "'.'")),
                   "FORMAT": "wav"}
        if draw(st.booleans()):
            clauses["SEGMENT"] = draw(V_COUNTS)
        if draw(_ints(0, 3)) == 0:
            clauses["EPOCH"] = draw(_pick("'2024-01-01 00:00:00'", "'2026-01-01T00:00:00Z'"))
    else:
        head += draw(_pick("", " (sym STRING, n BIGINT)"))
        clauses = {"TO": draw(_pick("'out/'", "'out/new/'")),
                   "FORMAT": draw(_pick("parquet", "csv", "json"))}
        if draw(st.booleans()):
            clauses["OPTIONS"] = "(compression = 'snappy')"
    order = draw(st.permutations(sorted(clauses)))
    if "WATERMARK" in clauses and "EVENT TIME" in clauses:
        pass  # any order is allowed
    return head + "".join(f" {c} {clauses[c]}" for c in order)


@functools.lru_cache(maxsize=None)
@st.composite
def valid_wavesql_statements(draw) -> str:
    kind = draw(_ints(0, 9))
    if kind <= 4:
        sql = draw(valid_stream_selects())
    elif kind <= 6:
        sql = draw(valid_signal_selects())
    elif kind == 7:
        sql = draw(valid_creates())
    elif kind == 8:
        sql = f"CREATE {draw(_pick('', 'OR REPLACE '))}VIEW {draw(_pick('v', 'v2', 'busy'))} AS " \
              f"{draw(st.one_of(valid_stream_selects(1), valid_signal_selects()))}"
    else:
        sql = draw(_pick("SHOW STREAMS", "SHOW SIGNALS", "SHOW SINKS", "SHOW VIEWS",
                         "DESCRIBE trades", "DESCRIBE counting", "DROP STREAM IF EXISTS nosuch",
                         "DROP SIGNAL counting", "DROP SINK alerts", "DROP VIEW busy",
                         "DROP STREAM refs"))
    if draw(_ints(0, 9)) == 0:
        sql = f"EXPLAIN {draw(_pick('', 'AST ', 'IR ', 'SPARK '))}{sql}"
    return sql
