"""``wavesql demo``: generate a small, realistic data set and run ``demo.wsql`` over it.

The data is generated, not downloaded: a fleet of 12 sensors on 3 sites reporting
temperature and vibration every second for 30 minutes (Parquet, one file per 10 minutes),
the sensor list (CSV) and alarms raised when vibration spikes (JSON lines). Seeded, so every
run shows the same results.

The results print as the command line prints them (:mod:`wavesql.render`'s CLI style).
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

DEMO_QUERIES = Path(__file__).with_name("demo.wsql")


def generate(directory: str | Path, seed: int = 7) -> Path:
    """Write the demo data set under ``directory`` (created if missing); returns it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = Path(directory)
    (root / "readings").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    sensors = [f"s{i:02d}" for i in range(12)]
    sites = ["north", "harbour", "plant"]
    start = datetime(2026, 1, 5, 8, 0, tzinfo=timezone.utc)

    with open(root / "sensors.csv", "w") as f:
        f.write("sensor,site,installed\n")
        for i, s in enumerate(sensors):
            f.write(f"{s},{sites[i % 3]},2025-{1 + i % 12:02d}-15\n")

    seconds = 30 * 60
    alarms = []
    for part in range(3):  # three files: a stream's directory grows file by file
        ts, sensor, temp, vib = [], [], [], []
        for k in range(part * seconds // 3, (part + 1) * seconds // 3):
            t = start + timedelta(seconds=k)
            for j, s in enumerate(sensors):
                base = 20 + j + 3 * np.sin(2 * np.pi * k / 900 + j)
                v = abs(rng.normal(0.2, 0.05))
                if rng.random() < 0.0015:  # a rare spike raises an alarm two seconds later
                    v += rng.uniform(1.5, 3.0)
                    alarms.append({"sensor": s, "ts": (t + timedelta(seconds=2)).isoformat(),
                                   "level": int(1 + (v > 2.5)), "message": "vibration spike"})
                ts.append(t)
                sensor.append(s)
                temp.append(round(float(base + rng.normal(0, 0.4)), 3))
                vib.append(round(float(v), 4))
        table = pa.table({"sensor": sensor, "ts": pa.array(ts, pa.timestamp("us", "UTC")),
                          "temperature": temp, "vibration": vib})
        pq.write_table(table, root / "readings" / f"part-{part}.parquet")
    with open(root / "alarms.jsonl", "w") as f:
        for a in alarms:
            f.write(json.dumps(a) + "\n")
    _vibration(root / "vibration.wav", rng)
    (root / "demo.wsql").write_text(DEMO_QUERIES.read_text())
    return root


def _vibration(path: Path, rng, rate: int = 8000, seconds: int = 60) -> None:
    """Two accelerometer channels: a 50 Hz hum plus noise, with bearing-fault bursts
    (impulsive, high kurtosis) on channel 1 during seconds 20-25 and 41-43."""
    from wavesql.udfs.wav import write_wav

    t = np.arange(rate * seconds) / rate
    hum = 0.2 * np.sin(2 * np.pi * 50 * t)
    x = np.stack([hum + rng.normal(0, 0.02, t.size), 0.5 * hum + rng.normal(0, 0.02, t.size)], 1)
    for lo, hi in ((20, 25), (41, 43)):
        clicks = np.arange(lo * rate, hi * rate, rate // 37)  # a defect ringing at ~37 Hz
        for c in clicks:
            ring = 0.8 * np.exp(-np.arange(80) / 12.0) * np.sin(np.arange(80) * 1.9)
            x[c:c + 80, 0] += ring
    write_wav(path, np.clip(x, -1, 1), rate, "int16")


def run_demo(directory: str | Path = "wavesql_demo", master: str | None = None,
             max_rows: int = 50) -> int:
    """Generate the data, then run every demo statement, printing each result."""
    import wavesql
    from wavesql import render

    out = render.console()
    root = generate(directory)
    out.print(f"generated demo data in {root.resolve()}", markup=False)
    started = time.perf_counter()
    ws = wavesql.connect(master=master, catalog=root / "catalog.db")
    out.print(f"Spark ready in {time.perf_counter() - started:.1f} s", markup=False)
    for result in ws.execute_file(root / "demo.wsql"):
        out.rule(" ".join(result.statement.text.split())[:100], style="dim")
        render.show(result, out, max_rows, render.CLI)
    command = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else "wavesql"
    out.print(f"demo finished in {time.perf_counter() - started:.1f} s; explore it with: "
              f"{command} --catalog {root / 'catalog.db'}", markup=False)
    return 0
