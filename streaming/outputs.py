"""Where a continuous query writes: its output and its late rows, resolved before it starts.

An output is a folder (or an object store's location) or a catalog's Kafka sink
(:func:`kafka_sink`); late rows go to ``LATE INTO`` a path or a file sink
(:func:`late_path`), never to a Kafka sink yet (:func:`no_kafka_late`, which ``INSERT
INTO`` jobs check too). Local paths are made absolute here, against this process's current
directory (:func:`absolute`).
"""

from __future__ import annotations

import os

from sqlglot import exp

from wavesql import storage
from wavesql.catalog import objects as cat
from wavesql.errors import Span, WaveSQLError


def kafka_sink(output, catalog):
    """The catalog's Kafka sink named by ``output`` (a string), else None."""
    if not isinstance(output, str):
        return None
    defn = catalog.get(output) if output.replace("_", "").isalnum() else None
    return defn if isinstance(defn, cat.SinkDef) and defn.source == "kafka" else None


def late_path(target: exp.Expression, catalog) -> tuple[str, str]:
    """``LATE INTO 'path'`` (Parquet) or ``LATE INTO sink``: (path, format). Late rows are
    flat (``_stream``, ``_reason``, ``_row`` as JSON), so any sink format holds them."""
    if isinstance(target, exp.Literal) and target.is_string:
        return target.name, "parquet"
    defn = catalog.get(target.name)
    if not isinstance(defn, cat.SinkDef):
        from wavesql.errors import did_you_mean

        sinks = [d.name for d in catalog.list("SINK")]
        raise WaveSQLError("UNKNOWN_STREAM", f"LATE INTO `{target.name}`: no such sink",
                           Span.of(target), hint=did_you_mean(target.name, sinks, "sinks")
                           or "CREATE SINK late_rows TO 'late/' FORMAT parquet, or give a path")
    no_kafka_late(defn, target)
    return defn.path, defn.format


def no_kafka_late(defn, target) -> None:
    """Late rows go to a folder: a Kafka sink cannot take them yet."""
    if getattr(defn, "source", "files") == "kafka":
        raise WaveSQLError("NOT_IMPLEMENTED", f"LATE INTO `{defn.name}`: late rows go to a "
                           "file sink, and this one is a Kafka topic", Span.of(target),
                           hint="CREATE SINK late_rows TO 'late/' FORMAT json, or give a path")


def absolute(path) -> str:
    """A local path made absolute (``~`` expanded); a URI (``s3a://...``) as it is."""
    return storage.normalize(os.fspath(path), os.getcwd())
