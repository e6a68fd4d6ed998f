"""Where a continuous query writes: its output and its late rows, resolved before it starts.

An output is a folder (or an object store's location) or a catalog's Kafka sink
(:func:`kafka_sink`); late rows go to ``LATE INTO`` a path, a file sink or a Kafka sink
(:func:`late_path`; ``INSERT INTO`` jobs too). Local paths are made absolute here, against
this process's current directory (:func:`absolute`).
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


def late_path(target: exp.Expression, catalog) -> tuple:
    """``LATE INTO 'path'`` (Parquet) or ``LATE INTO sink``: (path, format), or for a Kafka
    sink (its records, ``"kafka"``). Late rows are flat (``_stream``, ``_reason``, ``_row``
    as JSON), so any sink format holds them."""
    if isinstance(target, exp.Literal) and target.is_string:
        return target.name, "parquet"
    defn = catalog.get(target.name)
    if not isinstance(defn, cat.SinkDef):
        from wavesql.errors import did_you_mean

        sinks = [d.name for d in catalog.list("SINK")]
        raise WaveSQLError("UNKNOWN_STREAM", f"LATE INTO `{target.name}`: no such sink",
                           Span.of(target), hint=did_you_mean(target.name, sinks, "sinks")
                           or "CREATE SINK late_rows TO 'late/' FORMAT parquet, or give a path")
    return late_target(defn)


def late_target(defn: cat.SinkDef) -> tuple:
    """Where the late rows of ``LATE INTO sink`` go: ``(folder, format)``, or for a Kafka
    sink ``(its records, "kafka")`` (at least once, keyed as results are: sources/kafka.py)."""
    if defn.source == "kafka":
        from .sinks import KafkaOutput

        return KafkaOutput(defn, late=True), "kafka"
    return defn.path, defn.format


def absolute(path) -> str:
    """A local path made absolute (``~`` expanded); a URI (``s3a://...``) as it is."""
    return storage.normalize(os.fspath(path), os.getcwd())
