"""The catalog the fuzz tests bind against, and the tables of the differential test.

:func:`make_bind_data` writes small files; :func:`register_bind_catalog` defines over them
the streams, signal, views and sink whose names :mod:`tests.fuzz.strategies` uses:

=========  =========================================================================
trades     stream (sym STRING, px DOUBLE, qty INT, ts TIMESTAMP), EVENT TIME ts
quotes     stream (sym STRING, bid DOUBLE, ts TIMESTAMP), EVENT TIME ts
refs       stream (sym STRING, name STRING) from CSV, no event time
dets       stream (t_from TIMESTAMP, t_to TIMESTAMP, k INT): SYNC control rows
counting   signal (voice FLOAT) RATE 44100 HZ over examples/data/counting_44k1.wav
busy       view: trades counted per sym
frames     view keeping segments: start_time(voice) AS t, voice FROM counting [SAMPLES 4096]
alerts     sink to out/
orders...  the Spark SQL corpus tables (tests/spark_corpus/tables.py) as streams
=========  =========================================================================

:func:`make_diff_tables` writes the two Parquet tables of the differential test
(:mod:`tests.fuzz.grammar` describes their columns).
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
WAV = ROOT / "examples" / "data" / "counting_44k1.wav"


def _ts(seconds: float) -> dt.datetime:
    return dt.datetime(2026, 1, 1) + dt.timedelta(seconds=seconds)


def make_bind_data(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    syms = ["AAPL", "MSFT", "GOOG"]
    (root / "trades").mkdir(exist_ok=True)
    pq.write_table(pa.table({
        "sym": [syms[i % 3] for i in range(12)],
        "px": [100.0 + i for i in range(12)],
        "qty": pa.array(list(range(1, 13)), pa.int32()),
        "ts": pa.array([_ts(i * 2) for i in range(12)], pa.timestamp("us")),
    }), root / "trades" / "part-0.parquet")
    (root / "quotes").mkdir(exist_ok=True)
    pq.write_table(pa.table({
        "sym": [syms[i % 3] for i in range(9)],
        "bid": [99.5 + i for i in range(9)],
        "ts": pa.array([_ts(i * 3 + 1) for i in range(9)], pa.timestamp("us")),
    }), root / "quotes" / "part-0.parquet")
    (root / "refs.csv").write_text("sym,name\nAAPL,Apple\nMSFT,Microsoft\n")
    (root / "dets").mkdir(exist_ok=True)
    pq.write_table(pa.table({
        "t_from": pa.array([_ts(0.5), _ts(2.0)], pa.timestamp("us")),
        "t_to": pa.array([_ts(0.75), _ts(2.1)], pa.timestamp("us")),
        "k": pa.array([1, 2], pa.int32()),
    }), root / "dets" / "part-0.parquet")
    shutil.copy(WAV, root / "counting_44k1.wav")
    (root / "out").mkdir(exist_ok=True)
    return root


BIND_DDL = """
CREATE STREAM trades (sym STRING, px DOUBLE, qty INT, ts TIMESTAMP)
  FROM 'trades/' FORMAT parquet EVENT TIME ts WATERMARK 5 SECONDS;
CREATE STREAM quotes (sym STRING, bid DOUBLE, ts TIMESTAMP)
  FROM 'quotes/' FORMAT parquet EVENT TIME ts WATERMARK 5 SECONDS;
CREATE STREAM refs (sym STRING, name STRING) FROM 'refs.csv' FORMAT csv;
CREATE STREAM dets (t_from TIMESTAMP, t_to TIMESTAMP, k INT) FROM 'dets/' FORMAT parquet
  EVENT TIME t_from;
CREATE SIGNAL counting (voice FLOAT) RATE 44100 HZ FROM 'counting_44k1.wav' FORMAT wav
  SEGMENT 4096;
CREATE VIEW busy AS SELECT sym, count(*) AS n FROM trades GROUP BY sym;
CREATE VIEW frames AS SELECT start_time(voice) AS t, voice FROM counting [SAMPLES 4096];
CREATE SINK alerts TO 'out/' FORMAT parquet;
"""


def register_bind_catalog(session, root: Path) -> None:
    """The objects above, plus the Spark SQL corpus tables (orders, customers, events,
    products, ticks) as streams, so that mutated corpus queries bind past name lookup."""
    from tests.spark_corpus.tables import ddl, write_tables

    session.sql(BIND_DDL, base_dir=root)
    for spec in write_tables(root / "corpus").values():
        options = ", ".join(f"{k} = '{v}'" for k, v in spec.options.items())
        session.sql(f"CREATE STREAM {spec.name} ({ddl(spec)}) FROM '{spec.path}' "
                    f"FORMAT {spec.format}" + (f" OPTIONS ({options})" if options else ""))


# ------------------------------------------------------------------ differential tables
def make_diff_tables(root: Path) -> dict[str, Path]:
    """Two small Parquet tables with NULLs, duplicate rows and keys, ties, negative values,
    and strings with quotes, backslashes, LIKE wildcards and non-ASCII letters; ``a.rid``
    is unique (a total order for window functions).

    Doubles are multiples of 0.25 so sums are exact whatever order Spark adds them in.
    """
    from tests.fuzz.grammar import TABLES

    root.mkdir(parents=True, exist_ok=True)
    names = ["ab", "Ab", "b%c", "a_b", "it's", "x\\y", "é", "", None, "zz", "ab", "a b"]
    base = dt.datetime(2024, 1, 1)
    rows_a = []
    for i in range(24):
        rows_a.append({
            "rid": i,
            "id": None if i == 7 else i % 10,
            "g": names[i % len(names)],
            "x": None if i % 9 == 4 else (i % 7 - 3) * 0.25 * (1 + i % 3),
            "n": None if i % 11 == 5 else (i * 7) % 13 - 4,
            "flag": None if i % 8 == 3 else i % 2 == 0,
            # tied instants, a NULL, and a midnight
            "ts": None if i % 10 == 6 else base + dt.timedelta(minutes=(i * 37) % 600),
        })
    rows_a.append(dict(rows_a[2], rid=24))  # a duplicate of row 2 but for its unique rid
    rows_b = []
    for i in range(14):
        rows_b.append({
            "id": None if i == 3 else (i * 3) % 12,
            "g": names[(i * 5) % len(names)],
            "w": None if i % 6 == 1 else (i % 5 - 2) * 0.5,
            "m": None if i % 7 == 2 else i % 4,
            "d": None if i % 5 == 4 else (base + dt.timedelta(days=(i * 3) % 10)).date(),
        })
    rows_b.append(dict(rows_b[1]))  # an exact duplicate row
    paths = {}
    for name, rows in (("a", rows_a), ("b", rows_b)):
        columns = TABLES[name]
        arrow_types = {"INT": pa.int32(), "STRING": pa.string(), "DOUBLE": pa.float64(),
                       "BOOLEAN": pa.bool_(), "TIMESTAMP": pa.timestamp("us"),
                       "DATE": pa.date32()}
        table = pa.table({c: pa.array([r[c] for r in rows], arrow_types[t])
                          for c, t in columns})
        path = root / name
        path.mkdir(exist_ok=True)
        # Two files, so the scan has more than one partition.
        half = table.num_rows // 2
        pq.write_table(table.slice(0, half), path / "part-0.parquet")
        pq.write_table(table.slice(half), path / "part-1.parquet")
        paths[name] = path
    return paths
