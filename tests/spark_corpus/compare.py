"""Helpers shared by the corpus check script and the pytest suite.

* :func:`load_queries` splits ``queries.sql`` into named queries.
* :func:`assert_same_rows` compares two query results as multisets of rows.

Results are compared order-insensitively because Spark gives no row order without a
top-level ORDER BY, and even with one, ties may come back in any order. Floats are compared
with a relative tolerance because a different (but equivalent) plan may add doubles in a
different order.
"""

from __future__ import annotations

import datetime as dt
import math
import pathlib
import re
from decimal import Decimal
from typing import Any, Iterable, Sequence

_HEADER = re.compile(r"^--\s*name:\s*(\S+)\s*$")
_SLUG = re.compile(r"^[A-Za-z0-9_]+$")


def load_queries(path: str | pathlib.Path) -> list[tuple[str, str, int]]:
    """Parse a corpus file into ``(slug, sql, line_number)`` triples, in file order.

    A query starts at a line ``-- name: <slug>`` and runs up to the next such line.
    ``line_number`` is the 1-based line of the header, so failures can point at the file.
    Trailing blank and comment-only lines and one trailing ``;`` are stripped; comments
    inside or before a query's SQL are kept (Spark and sqlglot both accept ``--`` comments). Raises ``ValueError`` for SQL
    before the first header, a malformed or duplicate slug, or an empty query, because a
    silently skipped query would be a silently untested query.
    """
    path = pathlib.Path(path)
    queries: list[tuple[str, str, int]] = []
    seen: dict[str, int] = {}
    slug: str | None = None
    start = 0
    body: list[str] = []

    def flush() -> None:
        if slug is None:
            return
        # Comment lines after the last SQL line introduce the *next* query or section,
        # so they are not part of this query.
        while body and (not body[-1].strip() or body[-1].strip().startswith("--")):
            body.pop()
        sql = "\n".join(body).strip()
        if sql.endswith(";"):
            sql = sql[:-1].rstrip()
        if not _strip_comments(sql):
            raise ValueError(f"{path}:{start}: query {slug!r} is empty")
        queries.append((slug, sql, start))

    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = _HEADER.match(line.strip())
        if match:
            flush()
            slug, start, body = match.group(1), lineno, []
            if not _SLUG.match(slug):
                raise ValueError(f"{path}:{lineno}: bad slug {slug!r} (use [A-Za-z0-9_])")
            if slug in seen:
                raise ValueError(
                    f"{path}:{lineno}: duplicate slug {slug!r} (first at line {seen[slug]})"
                )
            seen[slug] = lineno
        elif slug is None:
            if _strip_comments(line):
                raise ValueError(f"{path}:{lineno}: SQL before the first '-- name:' header")
        else:
            body.append(line)
    flush()
    return queries


def _strip_comments(text: str) -> str:
    return "\n".join(
        ln for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("--")
    ).strip()


# --------------------------------------------------------------------------- normalising

# Type ranks give a total order over mixed values so rows can be sorted before pairing.
# NaN sorts after every number (as in Spark); None sorts first.
_NONE, _BOOL, _NUM, _NAN, _STR, _BYTES, _DATE, _DATETIME, _DELTA, _SEQ, _MAP, _OTHER = range(12)


def _normalize(value: Any) -> Any:
    """Turn a collected value into plain, comparable Python data.

    Rows/structs become ``("struct", names, values)`` so that field names are part of the
    value (a round trip that renames a struct field changes the result). Maps become a
    sorted tuple of pairs: Spark map entry order is an implementation detail.
    """
    if value is None or isinstance(value, (bool, int, float, Decimal, str, dt.date, dt.timedelta)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if hasattr(value, "asDict") and isinstance(value, tuple):  # pyspark Row
        names = tuple(value.__fields__) if hasattr(value, "__fields__") else ()
        return ("struct", names, tuple(_normalize(v) for v in value))
    if isinstance(value, dict):
        pairs = [(_normalize(k), _normalize(v)) for k, v in value.items()]
        return ("map", tuple(sorted(pairs, key=lambda kv: _sort_key(kv[0]))))
    if isinstance(value, (list, tuple)):
        return ("array", tuple(_normalize(v) for v in value))
    return value


def _sort_key(value: Any) -> tuple:
    """A key that totally orders normalized values of mixed types."""
    if value is None:
        return (_NONE,)
    if isinstance(value, bool):
        return (_BOOL, value)
    if isinstance(value, float) and math.isnan(value):
        return (_NAN,)
    if isinstance(value, (int, float, Decimal)):
        return (_NUM, value)
    if isinstance(value, str):
        return (_STR, value)
    if isinstance(value, bytes):
        return (_BYTES, value)
    if isinstance(value, dt.datetime):  # before dt.date: datetime is a date subclass
        # naive and aware datetimes cannot be compared; order aware ones by UTC instant
        if value.tzinfo is not None:
            return (_DATETIME, 1, value.astimezone(dt.timezone.utc).replace(tzinfo=None))
        return (_DATETIME, 0, value)
    if isinstance(value, dt.date):
        return (_DATE, value)
    if isinstance(value, dt.timedelta):
        return (_DELTA, value)
    if isinstance(value, tuple) and value and value[0] == "struct":
        return (_SEQ, 0, value[1], tuple(_sort_key(v) for v in value[2]))
    if isinstance(value, tuple) and value and value[0] == "array":
        return (_SEQ, 1, tuple(_sort_key(v) for v in value[1]))
    if isinstance(value, tuple) and value and value[0] == "map":
        return (_MAP, tuple((_sort_key(k), _sort_key(v)) for k, v in value[1]))
    return (_OTHER, type(value).__name__, repr(value))


def _equal(a: Any, b: Any, rel_tol: float, abs_tol: float) -> bool:
    """Structural equality of normalized values; floats within tolerance, NaN == NaN."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    # Numbers must also agree in kind: PySpark returns float for DOUBLE/FLOAT, int for the
    # integral types and Decimal for DECIMAL, so 1 vs 1.0 means the SQL type changed.
    if isinstance(a, float) or isinstance(b, float):
        if not (isinstance(a, float) and isinstance(b, float)):
            return False
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b or math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)
    if isinstance(a, Decimal) or isinstance(b, Decimal):
        # exact value; scale is not compared (Decimal('1.50') == Decimal('1.5'))
        return isinstance(a, Decimal) and isinstance(b, Decimal) and a == b
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, dt.datetime) or isinstance(b, dt.datetime):
        return (
            isinstance(a, dt.datetime)
            and isinstance(b, dt.datetime)
            and _sort_key(a) == _sort_key(b)
        )
    if isinstance(a, tuple) and isinstance(b, tuple):
        if len(a) != len(b) or (a and b and a[0] != b[0]):
            return False
        if a[0] == "struct":
            return a[1] == b[1] and _seq_equal(a[2], b[2], rel_tol, abs_tol)
        if a[0] == "array":
            return _seq_equal(a[1], b[1], rel_tol, abs_tol)
        if a[0] == "map":
            return len(a[1]) == len(b[1]) and all(
                _equal(ka, kb, rel_tol, abs_tol) and _equal(va, vb, rel_tol, abs_tol)
                for (ka, va), (kb, vb) in zip(a[1], b[1])
            )
        return _seq_equal(a, b, rel_tol, abs_tol)
    return type(a) is type(b) and a == b


def _seq_equal(a: Sequence, b: Sequence, rel_tol: float, abs_tol: float) -> bool:
    return len(a) == len(b) and all(_equal(x, y, rel_tol, abs_tol) for x, y in zip(a, b))


def _row_values(row: Any) -> tuple:
    # Top-level rows are compared by position only: column *names* are checked separately
    # (see column_names_differ) because Spark's auto-generated names for unaliased
    # expressions are not part of a query's result set.
    if isinstance(row, (list, tuple)):
        return tuple(_normalize(v) for v in row)
    return (_normalize(row),)


def _fmt_row(row: tuple) -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, tuple) and v and v[0] == "struct":
            inner = ", ".join(f"{n}={fmt(x)}" for n, x in zip(v[1], v[2])) if v[1] else ", ".join(
                fmt(x) for x in v[2]
            )
            return "{" + inner + "}"
        if isinstance(v, tuple) and v and v[0] == "array":
            return "[" + ", ".join(fmt(x) for x in v[1]) + "]"
        if isinstance(v, tuple) and v and v[0] == "map":
            return "map(" + ", ".join(f"{fmt(k)}->{fmt(x)}" for k, x in v[1]) + ")"
        return repr(v)

    return "(" + ", ".join(fmt(v) for v in row) + ")"


# --------------------------------------------------------------------------- comparing


def diff_rows(
    actual_rows: Iterable[Any],
    expected_rows: Iterable[Any],
    rel_tol: float = 1e-9,
    abs_tol: float = 1e-12,
    max_shown: int = 5,
) -> str | None:
    """Describe how two row multisets differ, or return ``None`` if they match."""
    actual = sorted((_row_values(r) for r in actual_rows), key=_sort_key)
    expected = sorted((_row_values(r) for r in expected_rows), key=_sort_key)
    if len(actual) == len(expected) and all(
        _seq_equal(a, e, rel_tol, abs_tol) for a, e in zip(actual, expected)
    ):
        return None

    # Sorting may pair rows wrongly when floats differ in the last bits (a tiny
    # difference can reorder rows), so match the leftovers greedily with tolerance.
    only_expected = list(expected)
    only_actual = []
    for row in actual:
        for i, candidate in enumerate(only_expected):
            if _seq_equal(row, candidate, rel_tol, abs_tol):
                del only_expected[i]
                break
        else:
            only_actual.append(row)
    if not only_actual and not only_expected:
        return None

    lines = [
        f"row multisets differ: {len(actual)} actual vs {len(expected)} expected rows; "
        f"{len(only_actual)} only in actual, {len(only_expected)} only in expected"
    ]
    for label, rows in (("actual", only_actual), ("expected", only_expected)):
        for row in rows[:max_shown]:
            lines.append(f"  only in {label}: {_fmt_row(row)}")
        if len(rows) > max_shown:
            lines.append(f"  ... and {len(rows) - max_shown} more only in {label}")
    return "\n".join(lines)


def assert_same_rows(
    actual_rows: Iterable[Any],
    expected_rows: Iterable[Any],
    rel_tol: float = 1e-9,
    *,
    abs_tol: float = 1e-12,
) -> None:
    """Assert two lists of pyspark ``Row`` s are equal as multisets.

    Values are compared positionally per row; nested structs (with field names), arrays,
    maps (entry order ignored), ``Decimal`` (exact value), dates and datetimes are handled.
    Numbers must be of the same kind (``1`` does not match ``1.0`` or ``Decimal(1)``),
    since a different kind means a different SQL result type.
    Floats match within ``rel_tol`` (plus a tiny ``abs_tol`` so that an exact 0.0 matches
    a cancelled sum like 1e-17); NaN equals NaN and NULL equals NULL. Raises
    ``AssertionError`` with the first differing rows.
    """
    problem = diff_rows(actual_rows, expected_rows, rel_tol, abs_tol)
    if problem is not None:
        raise AssertionError(problem)


def column_names_differ(actual_names: Sequence[str], expected_names: Sequence[str]) -> str | None:
    """Describe a difference in result column names, or ``None``."""
    if list(actual_names) == list(expected_names):
        return None
    return f"column names differ: {list(actual_names)} vs {list(expected_names)}"
