"""A query file's relative paths stay inside its folder or the folder it is run from unless
the run allows otherwise (issue 23, safe by construction): `..` leading elsewhere is
PATH_ESCAPES at the path, in `wavesql run`, `wavesql check`, `LATE INTO` and the Python
API; absolute paths and URIs are taken as written; typed statements are not limited."""

from __future__ import annotations

import os

import pytest

from wavesql.storage.local import escaping


def test_the_rule_on_hand_made_cases(tmp_path):
    files, here = str(tmp_path / "proj" / "jobs"), str(tmp_path / "proj")
    roots = (files, here)
    assert escaping("in/", files, roots) is None
    assert escaping("../in/", files, roots) is None  # inside the run's folder
    assert escaping("../../x", files, roots) == str(tmp_path / "x")
    assert escaping("a/../../../x", files, roots) == str(tmp_path / "x")
    assert escaping("..", files, (files,)) == here
    assert escaping("/abs/path", files, roots) is None  # written out: as given
    assert escaping("s3a://bucket/../x", files, roots) is None
    assert escaping("file:///etc", files, roots) is None
    assert escaping("../../x", files, ()) is None  # no rule
    # a sibling whose name starts like the root is outside it
    assert escaping("../jobs2/x", files, (files,)) == os.path.join(here, "jobs2", "x")


@pytest.mark.spark
def test_a_query_file_cannot_reach_out_unless_the_run_allows_it(ws, tmp_path, monkeypatch):
    from wavesql.cli import check_text
    from wavesql.errors import WaveSQLError

    (tmp_path / "outside").mkdir()
    proj = tmp_path / "proj"
    (proj / "jobs").mkdir(parents=True)
    monkeypatch.chdir(proj)
    job = proj / "jobs" / "job.wsql"
    job.write_text("-- reads beside the project\n"
                   "CREATE STREAM s (v DOUBLE, ts TIMESTAMP) FROM '../../outside/' "
                   "FORMAT parquet EVENT TIME ts;\n")
    with pytest.raises(WaveSQLError) as err:
        ws.execute_file(job)
    assert err.value.code == "PATH_ESCAPES" and str(tmp_path / "outside") in err.value.message
    assert err.value.line == 2 and err.value.column == 47  # at the path literal
    assert "--allow-parent-paths" in err.value.hint
    assert [e.code for e in check_text(ws, job.read_text(), str(job.parent), str(job))] == [
        "PATH_ESCAPES"]
    assert ws.catalog.get("s") is None
    # typed (not a file): the user said exactly this
    ws.sql(f"CREATE STREAM s (v DOUBLE, ts TIMESTAMP) FROM '{tmp_path / 'outside'}' "
           "FORMAT parquet EVENT TIME ts")
    ws.sql("DROP STREAM s")
    ws.allow_parent_paths = True
    ws.execute_file(job)
    assert ws.catalog.get("s").path == str(tmp_path / "outside")
    # LATE INTO a path, in an INSERT INTO job
    ws.allow_parent_paths = False
    (proj / "in").mkdir()
    late = proj / "jobs" / "late.wsql"
    late.write_text("CREATE STREAM IF NOT EXISTS r (v DOUBLE, ts TIMESTAMP) FROM '../in/' "
                    "FORMAT parquet EVENT TIME ts;\n"
                    "CREATE SINK IF NOT EXISTS o TO '../out/' FORMAT parquet;\n"
                    "INSERT INTO o SELECT v, ts FROM r LATE INTO '../../late/';\n")
    with pytest.raises(WaveSQLError) as err:
        ws.execute_file(late)
    assert err.value.code == "PATH_ESCAPES" and err.value.line == 3
