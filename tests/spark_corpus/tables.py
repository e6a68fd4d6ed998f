"""Deterministic test tables for the Spark SQL compatibility corpus.

`write_tables(directory)` writes five small tables in three file formats and returns a
`TableSpec` per table. Readers must load them with an EXPLICIT schema::

    spark.read.schema(ddl(spec)).format(spec.format).options(**spec.options).load(spec.path)

so that no schema inference (which differs between formats and Spark versions) can change
what the corpus queries see.

Design choices that keep query results independent of partitioning and evaluation order:

* Every "money-like" double (orders.amount, events.value, ticks.px) is a multiple of a power
  of two (0.25, 0.5, 0.125). Sums and averages of such values are exact in binary floating
  point, so ``SUM(amount)`` is bit-identical whichever order Spark adds the rows in, and
  ranking or filtering on an aggregate cannot flip between runs.
* Data deliberately contains NULLs, exact duplicate rows, duplicated keys and tied
  timestamps/amounts, so grouping, DISTINCT and window peer semantics are exercised.
* Referential gaps are intentional: some orders reference customers that do not exist and
  some customers have no orders, so outer/semi/anti joins all return something.
* Timestamps in CSV/JSON are written as ISO-8601 strings with an explicit ``Z`` offset, and
  parquet timestamps are UTC-adjusted, so all formats describe the same instants whatever the
  session time zone (the corpus runs with ``spark.sql.session.timeZone=UTC``).
* Only the Python standard library's ``random.Random``, seeded per table with a string, is
  used, so the data is the same on every machine and Python version (string seeding and
  the ``random()``/``randrange()``/``choice()`` streams are stable across CPython 3.x).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import math
import pathlib
import random
from dataclasses import dataclass, field
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq

SEED = 20240611

UTC = dt.timezone.utc
BASE_TS = dt.datetime(2024, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class TableSpec:
    """Where a generated table lives and how to read it."""

    name: str
    path: str
    format: str  # "parquet" | "csv" | "json"
    columns: list[tuple[str, str]]  # (column name, Spark SQL type string)
    options: dict[str, str] = field(default_factory=dict)


def ddl(spec: TableSpec) -> str:
    """The Spark DDL schema string, e.g. ``"order_id INT, amount DOUBLE"``."""
    return ", ".join(f"{name} {typ}" for name, typ in spec.columns)


# --------------------------------------------------------------------------- schemas

ORDERS_COLUMNS = [
    ("order_id", "INT"),
    ("customer_id", "INT"),
    ("order_ts", "TIMESTAMP"),
    ("amount", "DOUBLE"),
    ("status", "STRING"),
    ("items", "ARRAY<STRING>"),
]
CUSTOMERS_COLUMNS = [
    ("customer_id", "INT"),
    ("name", "STRING"),
    ("country", "STRING"),
    ("signup", "DATE"),
    ("last_login", "TIMESTAMP"),
]
EVENTS_COLUMNS = [
    ("id", "BIGINT"),
    ("user_id", "INT"),
    ("ts", "TIMESTAMP"),
    ("kind", "STRING"),
    ("value", "DOUBLE"),
    ("tags", "MAP<STRING, INT>"),
    ("device", "STRUCT<os: STRING, version: INT>"),
]
PRODUCTS_COLUMNS = [
    ("product_id", "INT"),
    ("sku", "STRING"),
    ("name", "STRING"),
    ("category", "STRING"),
    ("price", "DECIMAL(10,2)"),
    ("weight", "DOUBLE"),
    ("in_stock", "BOOLEAN"),
]
TICKS_COLUMNS = [
    ("sym", "STRING"),
    ("ts", "TIMESTAMP"),
    ("px", "DOUBLE"),
    ("qty", "INT"),
]

# Arrow types matching the Spark types above, for the parquet tables. Timestamps are
# UTC-adjusted microseconds so Spark reads them as TIMESTAMP (LTZ), not TIMESTAMP_NTZ.
_TS = pa.timestamp("us", tz="UTC")
ORDERS_ARROW = pa.schema(
    [
        ("order_id", pa.int32()),
        ("customer_id", pa.int32()),
        ("order_ts", _TS),
        ("amount", pa.float64()),
        ("status", pa.string()),
        ("items", pa.list_(pa.string())),
    ]
)
PRODUCTS_ARROW = pa.schema(
    [
        ("product_id", pa.int32()),
        ("sku", pa.string()),
        ("name", pa.string()),
        ("category", pa.string()),
        ("price", pa.decimal128(10, 2)),
        ("weight", pa.float64()),
        ("in_stock", pa.bool_()),
    ]
)
TICKS_ARROW = pa.schema(
    [("sym", pa.string()), ("ts", _TS), ("px", pa.float64()), ("qty", pa.int32())]
)


# --------------------------------------------------------------------------- generators

N_PRODUCTS = 40
N_CUSTOMERS = 60
N_ORDERS = 240
N_EVENTS = 300
N_TICKS = 400

FIRST = ["Ana", "Ben", "Chen", "Dana", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun"]
LAST = ["Smith", "Mueller", "Dubois", "Sato", "Silva", "Kim"]
COUNTRIES = ["US", "DE", "FR", "JP", "BR"]
STATUSES = ["new", "paid", "shipped", "cancelled", "returned"]
CATEGORIES = ["tools", "garden", "toys", "books"]
KINDS = ["click", "view", "purchase", "login", "logout"]
TAG_KEYS = ["a", "b", "c", "d"]
OSES = ["ios", "android", "web"]
SYMS = ["AAPL", "MSFT", "GOOG", "AMZN"]


def _sku(i: int) -> str:
    return f"P{i:03d}"


def _products(rng: random.Random) -> list[dict]:
    rows = []
    for pid in range(1, N_PRODUCTS + 1):
        price = None if pid % 13 == 0 else Decimal(rng.randrange(99, 20000)) / 100
        if pid in (7, 8):  # a price tie across categories
            price = Decimal("19.99")
        weight = None if pid % 11 == 0 else rng.randrange(1, 200) / 8
        if pid == 17:  # one NaN: Spark orders NaN above every other double
            weight = math.nan
        rows.append(
            {
                "product_id": pid,
                "sku": _sku(pid),
                "name": f"{rng.choice(['Red', 'Blue', 'Big', 'Tiny'])} "
                f"{rng.choice(['Hammer', 'Rake', 'Kite', 'Novel', 'Saw'])}",
                "category": None if pid % 9 == 0 else CATEGORIES[pid % len(CATEGORIES)],
                "price": price,
                "weight": weight,
                "in_stock": None if pid % 10 == 0 else rng.random() < 0.7,
            }
        )
    return rows


def _customers(rng: random.Random) -> list[dict]:
    rows = []
    for cid in range(1, N_CUSTOMERS + 1):
        signup = dt.date(2022, 1, 1) + dt.timedelta(days=rng.randrange(0, 730))
        login = BASE_TS + dt.timedelta(seconds=rng.randrange(0, 90 * 86400))
        rows.append(
            {
                "customer_id": cid,
                # small name pools so that names repeat (ties for ORDER BY name)
                "name": None if cid % 17 == 0 else f"{rng.choice(FIRST)} {rng.choice(LAST)}",
                "country": None if cid % 8 == 0 else rng.choice(COUNTRIES),
                "signup": None if cid % 15 == 0 else signup,
                "last_login": None if cid % 12 == 0 else login,
            }
        )
    return rows


def _orders(rng: random.Random) -> list[dict]:
    rows = []
    prev_ts = None
    for oid in range(1, N_ORDERS + 1):
        # ids 61..65 do not exist in customers; customers 56..60 never order.
        cid = None if oid % 23 == 0 else rng.randrange(1, 66)
        if cid is not None and 56 <= cid <= 60:
            cid -= 10
        ts = BASE_TS + dt.timedelta(seconds=rng.randrange(0, 90 * 86400))
        if oid % 19 == 0 and prev_ts is not None:  # tied timestamps
            ts = prev_ts
        prev_ts = ts
        amount = None if oid % 29 == 0 else rng.randrange(20, 2000) / 4
        if oid % 31 == 0:  # tied amounts
            amount = 100.0
        n_items = rng.randrange(0, 5)
        items = [_sku(rng.randrange(1, N_PRODUCTS + 6)) for _ in range(n_items)]
        if oid % 37 == 0:
            items.append(None)  # a NULL element inside an array
        rows.append(
            {
                "order_id": oid,
                "customer_id": cid,
                "order_ts": None if oid == 200 else ts,
                "amount": amount,
                "status": None if oid % 21 == 0 else rng.choice(STATUSES),
                "items": None if oid % 27 == 0 else items,
            }
        )
    return rows


def _events(rng: random.Random) -> list[dict]:
    rows = []
    for i in range(N_EVENTS):
        ts = BASE_TS + dt.timedelta(
            days=rng.randrange(0, 14), seconds=rng.randrange(0, 86400) // 60 * 60
        )
        tags = {k: rng.randrange(0, 5) for k in TAG_KEYS if rng.random() < 0.4}
        rows.append(
            {
                "id": 10_000_000_000 + i,  # does not fit an INT: exercises BIGINT
                "user_id": None if i % 25 == 0 else rng.randrange(1, 66),
                "ts": ts,
                "kind": None if i % 40 == 0 else rng.choice(KINDS),
                "value": None if i % 9 == 0 else rng.randrange(-20, 200) / 2,
                "tags": None if i % 16 == 0 else tags,
                "device": None
                if i % 33 == 0
                else {
                    "os": None if i % 14 == 0 else rng.choice(OSES),
                    "version": rng.randrange(10, 18),
                },
            }
        )
    # exact duplicate rows (an at-least-once source delivering twice)
    rows.extend(dict(rows[i]) for i in (3, 50, 51, 120, 299))
    return rows


def _ticks(rng: random.Random) -> list[dict]:
    rows = []
    start = dt.datetime(2024, 1, 2, 9, 30, tzinfo=UTC)
    per_sym = N_TICKS // len(SYMS)
    for sym_i, sym in enumerate(SYMS):
        ts = start
        px = 100.0 + 50 * sym_i
        for j in range(per_sym):
            # gaps of 0..40 s; a 0 gap gives tied timestamps within a symbol
            ts = ts + dt.timedelta(seconds=rng.choice([0, 5, 10, 15, 20, 30, 40]))
            px = max(1.0, px + rng.randrange(-8, 9) / 8)
            qty = None if (j + sym_i) % 41 == 0 else rng.randrange(1, 20) * 100
            rows.append({"sym": sym, "ts": ts, "px": px, "qty": qty})
    rows.append(dict(rows[10]))  # one exact duplicate tick
    return rows


# --------------------------------------------------------------------------- writers


def _iso_ts(value: dt.datetime | None) -> str | None:
    # e.g. 2024-01-05T10:15:30Z -- explicit offset, so the instant is unambiguous
    return None if value is None else value.strftime("%Y-%m-%dT%H:%M:%SZ")


def _write_parquet(rows: list[dict], schema: pa.Schema, path: pathlib.Path) -> None:
    table = pa.Table.from_pylist(rows, schema=schema)
    pq.write_table(table, path)


def _write_customers_csv(rows: list[dict], path: pathlib.Path) -> None:
    # Spark's CSV reader treats an empty unquoted field as NULL (nullValue="" by default).
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow([name for name, _ in CUSTOMERS_COLUMNS])
        for r in rows:
            writer.writerow(
                [
                    r["customer_id"],
                    r["name"] or "",
                    r["country"] or "",
                    r["signup"].isoformat() if r["signup"] else "",
                    _iso_ts(r["last_login"]) or "",
                ]
            )


def _write_events_json(rows: list[dict], path: pathlib.Path) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for r in rows:
            out = dict(r, ts=_iso_ts(r["ts"]))
            fh.write(json.dumps(out, sort_keys=True) + "\n")


# Text formats default to PERMISSIVE mode, which turns a value that does not parse under
# the declared type into a silent NULL; FAILFAST makes such a generator bug loud instead.
_STRICT = {"mode": "FAILFAST"}


def write_tables(directory: pathlib.Path) -> dict[str, TableSpec]:
    """Write all corpus tables under ``directory`` and return their specs by name.

    Calling it twice writes byte-identical data (the RNG is seeded per table, so adding a
    column to one table never changes another table's rows).
    """
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    specs: dict[str, TableSpec] = {}

    def rng(name: str) -> random.Random:
        return random.Random(f"{SEED}:{name}")

    path = directory / "orders.parquet"
    _write_parquet(_orders(rng("orders")), ORDERS_ARROW, path)
    specs["orders"] = TableSpec("orders", str(path), "parquet", ORDERS_COLUMNS)

    path = directory / "customers.csv"
    _write_customers_csv(_customers(rng("customers")), path)
    specs["customers"] = TableSpec(
        "customers", str(path), "csv", CUSTOMERS_COLUMNS, {"header": "true", **_STRICT}
    )

    path = directory / "events.jsonl"
    _write_events_json(_events(rng("events")), path)
    specs["events"] = TableSpec("events", str(path), "json", EVENTS_COLUMNS, dict(_STRICT))

    path = directory / "products.parquet"
    _write_parquet(_products(rng("products")), PRODUCTS_ARROW, path)
    specs["products"] = TableSpec("products", str(path), "parquet", PRODUCTS_COLUMNS)

    path = directory / "ticks.parquet"
    _write_parquet(_ticks(rng("ticks")), TICKS_ARROW, path)
    specs["ticks"] = TableSpec("ticks", str(path), "parquet", TICKS_COLUMNS)

    return specs


if __name__ == "__main__":  # pragma: no cover - manual inspection helper
    import sys
    import tempfile

    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(tempfile.mkdtemp())
    for spec in write_tables(out).values():
        print(f"{spec.name:10} {spec.format:8} {spec.path}\n    {ddl(spec)}")
