"""Seed queries for mutation fuzzing: everything the repository already knows is (in)valid."""

from __future__ import annotations

import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _split_wsql(text: str) -> list[str]:
    """Statements of a .wsql file (split by the WaveSQL front end itself when it can)."""
    from wavesql.dialect import parse_statements
    from wavesql.errors import WaveSQLError

    try:
        return [s.text for s in parse_statements(text)]
    except WaveSQLError:
        return [text]


@functools.lru_cache(maxsize=None)
def dialect_seeds() -> tuple[str, ...]:
    """The round-trip, normalising, Spark pass-through and parse-error lists of
    ``tests/test_dialect.py``."""
    from tests import test_dialect as td

    seeds = list(td.IDENTITY)
    seeds += [sql for sql, _ in td.NORMALISING]
    seeds += list(td.SPARK_QUERIES) + list(td.SPARK_CANONICALISED)
    seeds += [text for text, _, _ in td.ERRORS]
    return tuple(seeds)


@functools.lru_cache(maxsize=None)
def corpus_seeds() -> tuple[str, ...]:
    """The Spark SQL compatibility corpus (``tests/spark_corpus/queries.sql``)."""
    from tests.spark_corpus.compare import load_queries

    return tuple(sql for _, sql, _ in load_queries(ROOT / "tests" / "spark_corpus" / "queries.sql"))


@functools.lru_cache(maxsize=None)
def example_files() -> tuple[str, ...]:
    """Whole ``.wsql`` files: examples/, examples/tilt/ and the demo."""
    paths = sorted(ROOT.glob("examples/**/*.wsql")) + [ROOT / "wavesql" / "demo.wsql"]
    return tuple(p.read_text() for p in paths if p.is_file())


@functools.lru_cache(maxsize=None)
def example_seeds() -> tuple[str, ...]:
    """The statements of the ``.wsql`` files, one by one."""
    return tuple(s for text in example_files() for s in _split_wsql(text))


@functools.lru_cache(maxsize=None)
def all_seeds() -> tuple[str, ...]:
    return dialect_seeds() + corpus_seeds() + example_seeds() + example_files()
