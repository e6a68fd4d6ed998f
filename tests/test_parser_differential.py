"""WaveSQL's front end against Spark's own SQL parser, on mutated Spark SQL.

Spark SQL is WaveSQL's base language, so Spark's parser (``sessionState.sqlParser``, the one
``spark.sql`` uses) is the oracle for what is syntactically Spark SQL. The inputs are the
Spark SQL compatibility corpus (``tests/spark_corpus/queries.sql``), each query mutated a
few ways with a fixed seed (a word deleted, doubled, swapped with another, replaced by a
keyword, the text cut short), so that most are no longer valid.

**Every text Spark's parser rejects, WaveSQL rejects with a positioned error**: running it
(``Session.sql``: parse, analysis, Spark's analysis; a query's DataFrame is not collected)
raises a ``WaveSQLError`` that honours the error contract (a registered code, a span inside
the text, a rendered line and column: ``tests/fuzz/harness.check_error``) -- unless WaveSQL
reads it as one of its own constructs (WaveSQL is a superset of Spark SQL), which is counted
and must be rare. A text of comments only is ``EMPTY_QUERY`` (no position to give).

The converse does not hold and is not asserted: Spark's default parser takes most keywords
as identifiers (``SELECT OR, ts FROM ticks``, ``LEFT JOIN orders ON ON.id = ...``), which
sqlglot's grammar, and so WaveSQL's, refuses with a positioned ``PARSE_ERROR``.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

import wavesql
from tests.fuzz.harness import check_error
from tests.spark_corpus.compare import load_queries
from tests.spark_corpus.tables import ddl, write_tables
from wavesql.dialect import parse_statements, wavesql_nodes
from wavesql.errors import WaveSQLError

pytestmark = pytest.mark.spark

CORPUS = [sql for _, sql, _ in load_queries(Path(__file__).parent / "spark_corpus" /
                                            "queries.sql")]
KEYWORDS = ("SELECT", "FROM", "WHERE", "GROUP", "BY", "ORDER", "JOIN", "ON", "AS", "AND",
            "OR", "NOT", "(", ")", ",", "CASE", "END", "OVER", "HAVING", "LIMIT", "UNION",
            "WITH", "INTERVAL", "*", "=", "IN")
_WORDS = re.compile(r"\s+|[A-Za-z_][A-Za-z_0-9]*|\d+(?:\.\d+)?|'[^']*'|`[^`]*`|.")


def _mutations(text: str, rng: random.Random) -> list[str]:
    """Five mutants of ``text``: a word deleted, doubled, swapped, replaced; cut short."""
    tokens = _WORDS.findall(text)
    words = [i for i, t in enumerate(tokens) if not t.isspace()]
    if len(words) < 3:
        return []
    out = []
    for op in ("delete", "double", "swap", "replace", "cut"):
        t = list(tokens)
        i, j = rng.sample(words, 2)
        if op == "delete":
            t[i] = ""
        elif op == "double":
            t[i] = t[i] + " " + t[i]
        elif op == "swap":
            t[i], t[j] = t[j], t[i]
        elif op == "replace":
            t[i] = rng.choice(KEYWORDS)
        else:
            t = t[:i]
        out.append("".join(t).strip())
    return out


def _inputs() -> list[str]:
    rng = random.Random(20261128)
    seen, out = set(), []
    for query in CORPUS:
        for text in _mutations(query, rng):
            if text and ";" not in text and text not in seen:
                seen.add(text)
                out.append(text)
    return out


INPUTS = _inputs()


@pytest.fixture(scope="module")
def env(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("differential")
    specs = write_tables(root / "tables")
    ws = wavesql.connect(spark=spark, catalog=root / "catalog.db")
    for spec in specs.values():
        options = ", ".join(f"{k} = '{v}'" for k, v in spec.options.items())
        ws.sql(f"CREATE STREAM {spec.name} ({ddl(spec)}) FROM '{spec.path}' "
               f"FORMAT {spec.format}" + (f" OPTIONS ({options})" if options else ""))
    parser = spark._jsparkSession.sessionState().sqlParser()
    yield ws, parser
    ws.close()
    for table in spark.catalog.listTables():
        if table.isTemporary:
            spark.catalog.dropTempView(table.name)


#: Spark's parser's verdict on each input, asked once: both tests below need it for all of
#: them (600 Py4J calls, most raising a Java exception: ~13 s of CI time each)
_SPARK_VERDICTS: dict[str, bool] = {}


def _spark_parses(parser, text: str) -> bool:
    if text not in _SPARK_VERDICTS:
        try:
            parser.parsePlan(text)
            _SPARK_VERDICTS[text] = True
        except Exception:  # noqa: BLE001 - Spark's ParseException (a Py4JJavaError here)
            _SPARK_VERDICTS[text] = False
    return _SPARK_VERDICTS[text]


def _wavesql_parse(text: str):
    """``(statements, error)`` of WaveSQL's parser."""
    try:
        return parse_statements(text), None
    except WaveSQLError as err:
        return None, err


def test_the_inputs_are_many_and_mostly_invalid(env):
    _, parser = env
    assert len(INPUTS) >= 600
    rejected = sum(not _spark_parses(parser, t) for t in INPUTS)
    assert rejected >= len(INPUTS) // 3, rejected


def test_what_spark_rejects_wavesql_rejects_with_a_position(env):
    ws, parser = env
    own, failures = [], []
    for text in INPUTS:
        if _spark_parses(parser, text):
            continue
        statements, error = _wavesql_parse(text)
        if statements is not None and any(next(wavesql_nodes(s.node), None) is not None
                                          for s in statements):
            own.append(text)  # WaveSQL's own syntax (it is a superset of Spark SQL)
            continue
        if error is None:
            try:
                ws.sql(text)
            except WaveSQLError as err:
                error = err
        if error is None:
            failures.append(f"accepted: {text!r}")
            continue
        if error.code == "EMPTY_QUERY" and statements == []:
            continue  # comments only: nothing to point at
        try:
            check_error(error, text, "Session.sql")
        except AssertionError as bad:
            failures.append(f"{text!r}: {bad}")
    assert not failures, f"{len(failures)} texts Spark rejects:\n" + "\n".join(failures[:20])
    assert len(own) <= len(INPUTS) // 50, own[:10]
