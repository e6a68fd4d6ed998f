"""WaveSQL's own settings: every ``wavesql.*`` key a user may ``SET``, in one table.

A setting lives in the Spark session's SQL conf (``SET wavesql.fused = false`` in SQL,
``spark.conf.set`` in Python), so it follows the session like Spark's own settings. This
module is the one place that names them, says what values each takes and what it does, and
reads them: :func:`get` parses a value (a bad one is ``INVALID_SETTING`` with an example,
not a silent default), :func:`check` refuses an unknown ``wavesql.*`` key or a bad value
when it is ``SET`` (the binder calls it, so the error points at the statement), and
:func:`reference_markdown` writes the table the README links to (``docs/settings.md``).

It imports no other WaveSQL module but ``wavesql.errors``: every layer may read settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from wavesql.errors import WaveSQLError, did_you_mean

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "g": 1 << 30, "gb": 1 << 30, "t": 1 << 40, "tb": 1 << 40}


def parse_size(text: str) -> int:
    """``'512m'`` -> bytes (Spark's size suffixes; a bare number is bytes).

    >>> parse_size("512m"), parse_size("2g"), parse_size("1024")
    (536870912, 2147483648, 1024)
    """
    value = str(text).strip().lower()
    digits = value.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = value[len(digits):]
    try:
        number = float(digits)
    except ValueError:
        number = -1.0
    if unit not in _UNITS or not number > 0:
        raise ValueError(f"not a size: {text!r} (e.g. 512m, 2g)")
    return max(1, int(number * _UNITS[unit]))


def _boolean(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"{text!r} is not true or false")
    return value == "true"


def _count(least: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError(f"{text!r} is not a whole number") from None
        if value < least:
            raise ValueError(f"{value} is below {least}")
        return value

    parse.__doc__ = f"a whole number >= {least}"
    return parse


def _location(text: str) -> str:
    value = text.strip()
    if not value:
        raise ValueError("an empty location")
    return value


_location.__doc__ = "a folder or URI: /srv/wavesql, s3a://bucket/wavesql, hdfs://nn/wavesql"


def _choice(*options: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in options:
            raise ValueError(f"{text!r} is not one of {', '.join(options)}")
        return value

    parse.__doc__ = ", ".join(options)
    return parse


_boolean.__doc__ = "true, false"


@dataclass(frozen=True)
class Setting:
    """One ``wavesql.*`` key: its default (already parsed; None: worked out from the
    session, as ``doc`` says), its parser, an example value and what it does."""

    name: str
    default: object
    parse: Callable[[str], object]
    example: str
    doc: str
    values: str = ""

    def describe_values(self) -> str:
        return self.values or (self.parse.__doc__ or "").strip().splitlines()[0]


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("wavesql.fused", True, _boolean, "false",
            "Chains of SELECTs with lag / RANGE windows over a Parquet stream run as one numpy "
            "pass per range of event time (planner/physical/fused_chains.py); false: Spark SQL."),
    Setting("wavesql.windows.chunked", "true", _choice("true", "all", "false"), "all",
            "RANGE-framed OVER windows run in parallel chunks of event time "
            "(planner/physical/chunked_windows.py): true for un-partitioned windows (those "
            "Spark runs in one partition), all for PARTITION BY windows too, false never."),
    Setting("wavesql.windows.chunk_rows", None, _count(1), "1000000",
            "Rows per chunk of a chunked window or direct pass; unset: 2^18 rows (2^17 on "
            "more than two cores), at least one chunk per core."),
    Setting("wavesql.windows.min_rows", 100_000, _count(0), "0",
            "Below this many (estimated) rows, windows stay Spark's."),
    Setting("wavesql.resample.direct", True, _boolean, "false",
            "An un-keyed RESAMPLE of a Parquet stream runs as a direct pass over the files in "
            "parallel ranges of time (planner/physical/direct_resample.py); false: Spark SQL."),
    Setting("wavesql.resample.min_rows", 100_000, _count(0), "0",
            "Below this many rows, RESAMPLE stays Spark SQL."),
    Setting("wavesql.asof.direct", True, _boolean, "false",
            "An un-keyed ASOF JOIN of two Parquet streams runs as a direct pass over the "
            "files in parallel ranges of the left side's time (planner/physical/"
            "direct_asof.py); false: Spark SQL."),
    Setting("wavesql.asof.min_rows", 100_000, _count(0), "0",
            "Below this many left rows, an un-keyed ASOF JOIN of Parquet streams stays "
            "Spark SQL."),
    Setting("wavesql.temporal.parallel", False, _boolean, "true",
            "true: an un-keyed RESAMPLE or ASOF JOIN that no direct pass takes (CSV or JSON "
            "streams, views, subqueries, ...) runs in parallel chunks of event time "
            "(planner/physical/chunked_temporal.py), reading each input once. Off by "
            "default: on this 2-core machine it has not yet measured faster than Spark "
            "SQL's one partition (benchmarks/temporal_parallel/results.md)."),
    Setting("wavesql.temporal.min_rows", 100_000, _count(0), "0",
            "Below this many rows (RESAMPLE's input, an ASOF JOIN's left side), un-keyed "
            "RESAMPLE and ASOF JOIN stay Spark SQL."),
    Setting("wavesql.temporal.chunk_rows", None, _count(1), "1000000",
            "Rows (and grid points) per chunk of the parallel RESAMPLE / ASOF JOIN; unset: "
            "about four chunks per core, at most 262,144 each."),
    Setting("wavesql.python.task_memory", None, parse_size, "'512m'",
            "What one Python task may hold; the direct passes cut their ranges until each "
            "fits half of it. Unset: each worker's share of spark.executor.pyspark.memory "
            "(divided by spark.executor.cores, as Spark does) less what a worker holds "
            "before any row (0.4 GB; 1.5 GB with pyarrow's mimalloc, which WaveSQL turns "
            "off when it starts Spark with that limit), else 2g.",
            values="a size: 512m, 2g, ..."),
    Setting("wavesql.wav.scan", "driver", _choice("driver", "source"), "source",
            "A batch WAV scan is planned on the driver and run as Arrow tasks (driver), or "
            "read through the wavesql_wav Python data source (source), as streams always are. "
            "The data source's partitions read no look-back, so a row-state function (cfar) "
            "runs there in one ordered pass, not speculatively in the partitions as EXPLAIN "
            "describes for the driver scan."),
    Setting("wavesql.sync.read", "files", _choice("files", "join"), "join",
            "A SYNC over a signal reads each range's samples from the WAV files it overlaps "
            "(files: the cost follows the ranges), or runs as a range join over the stored "
            "segments (join: the recording scanned once)."),
    Setting("wavesql.state.location", None, _location, "'s3a://bucket/wavesql'",
            "Where WaveSQL keeps state that belongs to no sink folder (a Kafka sink's jobs' "
            "checkpoints when the sink has no checkpoint option). Unset: next to an SQLite "
            "catalog file; with the shared catalog (--catalog spark), _wavesql_state in the "
            "catalog database's location in the Hive metastore (under Spark's "
            "spark.sql.warehouse.dir of the session that created it), which every host reads "
            "alike. Every host must see it (hdfs://, s3a://, ...) and set the same value."),
)}


def get(spark, name: str):
    """The value of setting ``name`` in ``spark``'s session, parsed (its default if unset).

    Raises ``INVALID_SETTING`` for a value the setting cannot take."""
    setting = SETTINGS[name]
    raw = spark.conf.get(name, None)
    if raw is None or not str(raw).strip():
        return setting.default
    return _parse(setting, str(raw))


def _parse(setting: Setting, raw: str):
    text = raw.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]  # SET k = '512m' keeps the quotes in Spark's conf
    try:
        return setting.parse(text)
    except ValueError as err:
        raise WaveSQLError("INVALID_SETTING", f"{setting.name} = {raw}: {err}",
                           hint=f"SET {setting.name} = {setting.example} "
                                f"({setting.describe_values()})") from None


def check(name: str, value: str | None, span=None) -> None:
    """Refuse ``SET name = value`` when ``name`` is a ``wavesql.*`` key WaveSQL does not
    have, or ``value`` one it cannot take (``value`` None: ``SET name`` shows it)."""
    if not name.lower().startswith("wavesql."):
        return
    setting = SETTINGS.get(name)
    if setting is None:  # Spark's conf keys are case-sensitive: a wrong case is unknown too
        raise WaveSQLError("INVALID_SETTING", f"unknown setting {name}", span,
                           hint=did_you_mean(name, SETTINGS, "settings (docs/settings.md)"))
    if value is not None:
        try:
            _parse(setting, value)
        except WaveSQLError as err:
            raise WaveSQLError(err.code, err.message, span, hint=err.hint) from None


def reference_markdown() -> str:
    """docs/settings.md: every setting, its values, default and effect."""
    lines = ["# WaveSQL settings", "",
             "Set in SQL (`SET wavesql.fused = false`) or in Python "
             "(`ws.spark.conf.set(...)`); they last for the Spark session. Generated from "
             "`wavesql/settings.py` by `python -m wavesql.settings`.", "",
             "| setting | values | default | what it does |", "|---|---|---|---|"]
    for s in SETTINGS.values():
        default = "(see text)" if s.default is None else str(s.default).lower()
        lines.append(f"| `{s.name}` | {s.describe_values()} | {default} | {s.doc} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(reference_markdown(), end="")
