"""The planner's analysis and optimisation rules, tested from fixture files with no JVM.

Each file under ``tests/fixtures/plans/`` is a catalog set-up and a list of cases (the model
is sqlglot's ``tests/fixtures/optimizer/*.sql``): a query, and below ``---`` the IR the
planner must produce for it (``EXPLAIN IR``'s text), or the error (``error[CODE]: message``)
it must stop with. The queries are bound by the real binder and optimizer against a real
SQLite catalog; what Spark would answer (the schema of a Spark SQL fragment, which
functions exist) comes from ``planner.dict_environment`` instead of a Spark session.

The expected plans were written by running the planner once and reading every line against
the rule it exercises (the case names say which); after an intended change of a plan,
regenerate with ``WAVESQL_UPDATE_GOLDEN=1 pytest tests/test_plan_fixtures.py`` and review
the diff line by line.

File format::

    # a comment
    === setup
    @wav mic/a.wav 8000 2 0.5          (a WAV file: rate, channels, seconds; zeros)
    @dir trades/                       (a folder)
    @table refs sym STRING, name STRING (a Spark table the environment knows)
    CREATE STREAM ...;                 (statements applied to the catalog, in order)
    === case name
    # rule: windows.extract_windows    (the rules the case exercises; every rule has a case)
    SELECT ...
    ---
    Query
      ...
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.io.wavfile

from wavesql import planner
from wavesql.catalog import Catalog
from wavesql.dialect import parse_statements
from wavesql.errors import WaveSQLError
from wavesql.planner import ir
from wavesql.planner.dict_environment import DictEnvironment

FIXTURES = Path(__file__).parent / "fixtures" / "plans"
UPDATE = os.environ.get("WAVESQL_UPDATE_GOLDEN") == "1"


def _blocks(path: Path) -> list[tuple[str, str, str | None]]:
    """``(name, input, expected or None)`` of each ``=== name`` block of ``path``."""
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    text = "\n".join(lines)
    out = []
    for chunk in re.split(r"^=== ", text, flags=re.MULTILINE)[1:]:
        name, _, body = chunk.partition("\n")
        query, sep, expected = body.partition("\n---\n")
        out.append((name.strip(), query.strip(), expected.strip() if sep else None))
    return out


def _setup(block: str, root: Path):
    """The catalog and environment a file's ``setup`` block describes, files made in
    ``root``."""
    tables, ddl = {}, []
    for line in block.splitlines():
        if line.startswith("@wav "):
            name, rate, channels, seconds = line.split()[1:]
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            frames = int(int(rate) * float(seconds))
            samples = np.zeros((frames, int(channels)), dtype=np.float32)
            scipy.io.wavfile.write(path, int(rate), samples)
        elif line.startswith("@dir "):
            (root / line.split()[1]).mkdir(parents=True, exist_ok=True)
        elif line.startswith("@table "):
            _, name, schema = line.split(" ", 2)
            tables[name] = schema
        else:
            ddl.append(line)
    catalog = Catalog(":memory:")
    env = DictEnvironment(tables=tables, topics={"clicks": 3})
    for stmt in parse_statements("\n".join(ddl)):
        _apply(_plan(stmt, catalog, env, root), catalog)
    return catalog, env


def _plan(stmt, catalog, env, root: Path) -> ir.Statement:
    return planner.optimize(planner.bind(stmt, catalog, env, str(root)))


def _apply(bound: ir.Statement, catalog) -> None:
    if isinstance(bound, ir.CreateObject):
        catalog.create(bound.definition, replace=bound.replace,
                       if_not_exists=bound.if_not_exists)
    elif isinstance(bound, ir.DropObject):
        catalog.drop(bound.name, bound.object_kind, if_exists=bound.if_exists)


def _render(query: str, catalog, env, root: Path) -> str:
    """The IR of the last statement of ``query`` (earlier ones applied), or its error."""
    try:
        statements = parse_statements(query)
        for stmt in statements[:-1]:
            _apply(_plan(stmt, catalog, env, root), catalog)
        bound = _plan(statements[-1], catalog, env, root)
    except WaveSQLError as err:
        text = f"error[{err.code}]: {err.message}"
    else:
        text = ir.explain_ir(bound)
        if isinstance(bound, ir.CreateObject):  # what the catalog will hold, in full
            text += "\n  " + repr(bound.definition)
    # the files live in a fresh temporary folder each run: shown relative to it
    return text.replace(str(root), "<root>")


def _cases():
    for path in sorted(FIXTURES.glob("*.txt")):
        for name, query, expected in _blocks(path):
            if name != "setup":
                yield pytest.param(path, name, id=f"{path.stem}:{name}")


@pytest.mark.parametrize("path, name", list(_cases()))
def test_plan(path, name, tmp_path):
    blocks = {n: (q, e) for n, q, e in _blocks(path)}
    catalog, env = _setup(blocks.get("setup", ("", None))[0], tmp_path)
    query, expected = blocks[name]
    got = _render(query, catalog, env, tmp_path)
    if UPDATE:
        _rewrite(path, name, got)
        return
    assert expected is not None, f"{name}: no expected plan (run with WAVESQL_UPDATE_GOLDEN=1)"
    assert got == expected


def _rewrite(path: Path, name: str, got: str) -> None:
    """Put ``got`` under case ``name``'s query; the comments that introduce the next case
    (at the end of this case's block) stay where they are."""
    text = path.read_text()
    head = f"=== {name}\n"
    start = text.index(head) + len(head)
    end = text.find("\n=== ", start)
    end = len(text) if end < 0 else end + 1
    lines = text[start:end].rstrip("\n").split("\n")
    tail = []
    while lines and (lines[-1].startswith("#") or not lines[-1].strip()):
        tail.insert(0, lines.pop())
    query = "\n".join(lines).split("\n---\n")[0].rstrip("\n")
    block = query + "\n---\n" + got + "\n"
    if tail and any(line.strip() for line in tail):
        block += "\n" + "\n".join(line for line in tail if line.strip()) + "\n"
    path.write_text(text[:start] + block + ("\n" + text[end:] if end < len(text) else ""))


def test_every_analysis_and_optimisation_rule_has_a_case():
    from wavesql.planner import analyze
    from wavesql.planner.optimize import RULES as OPTIMIZE_RULES

    named = {line.split(":", 1)[1].strip() for path in FIXTURES.glob("*.txt")
             for line in path.read_text().splitlines() if line.startswith("# rule:")}
    rules = {f"{r.__module__.rpartition('.')[2]}.{r.__name__}" for r in analyze.RULES}
    rules |= {f"optimize.{r.__name__}" for r in OPTIMIZE_RULES}
    assert rules - named == set(), "rules without a fixture case"
    assert named - rules == set(), "fixture cases naming rules that do not exist"


def test_every_fixture_file_has_cases():
    files = sorted(FIXTURES.glob("*.txt"))
    assert files, "no fixture files"
    for path in files:
        assert [n for n, _, _ in _blocks(path) if n != "setup"], path.name
