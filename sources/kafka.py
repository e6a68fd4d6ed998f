"""Kafka topics as WaveSQL streams: reading them through Spark's Kafka source.

A stream declared ``FROM KAFKA 'topic' OPTIONS (bootstrap = 'host:9092') FORMAT json``
is read with Spark's own Kafka source (``spark-sql-kafka``; ``connectors/pom.xml``):

* a **batch** query reads the topic from ``starting`` (default ``earliest``) up to the
  offsets current when the query starts (Spark resolves ``endingOffsets = latest`` once,
  when it plans the read);
* a **continuous** query reads it live, its offsets in the query's checkpoint
  (``streaming/runner.py``).

Each record's payload (``value``) is parsed into the declared columns by Spark's own
parsers (``from_json``, ``from_csv``, ``from_avro``), and the record's envelope is there as
five more columns, appended to the declared ones at ``CREATE`` (:data:`METADATA`):
``_key`` (the key as UTF-8 text), ``_topic``, ``_partition``, ``_offset`` and
``_timestamp`` (the record's Kafka timestamp, which may be the ``EVENT TIME``).

Bad payloads are never turned into silent NULLs (as for CSV/JSON files,
``planner/bad_rows.py``): a payload that is not a record of the declared schema -- bad
JSON/CSV, a field of the wrong type, a CSV line with the wrong number of fields, an Avro
datum that is not one of the schema, a NULL payload -- keeps its text in the corrupt-record
column and is located by ``kafka:<topic>/<partition>/<offset>`` in the ``__file`` column,
so a batch query fails with ``MALFORMED_ROW`` naming the record and a continuous query
quarantines it with topic, partition, offset and reason.

A **sink** ``CREATE SINK alerts TO KAFKA 'alerts' OPTIONS (bootstrap = ...) FORMAT json``
receives each result row as one record (:func:`write`), ``_progress`` and ``_final`` among
its fields. Delivery is **at least once**: Spark's Kafka sink has no transactions, so a
micro-batch re-run after a crash sends its rows again -- with the same deterministic keys
(:func:`records`), by which a consumer (or a compacted topic) recognises the repeats.

Avro payloads are plain Avro binary datums of the record schema derived from the DDL
(:func:`avro_schema`; every field nullable), without a schema-registry header; ``OPTIONS
(avroSchema = '...')`` gives the writer's schema explicitly. A datum is well formed iff
re-encoding what Spark decoded gives back the very same bytes (Avro's binary encoding is
canonical), which catches garbage and trailing bytes that Spark's permissive decoder would
turn into NULLs.
"""

from __future__ import annotations

import json

from wavesql.catalog.objects import Column
from wavesql.errors import WaveSQLError
from wavesql.sqltext import JSON_OPTIONS, quote

#: The record's envelope, as columns of every Kafka stream (appended to the declared ones).
METADATA = (Column("_key", "STRING"), Column("_topic", "STRING"),
            Column("_partition", "INT"), Column("_offset", "BIGINT"),
            Column("_timestamp", "TIMESTAMP"))
METADATA_NAMES = tuple(c.name for c in METADATA)

#: Payload formats of a Kafka stream.
FORMATS = ("json", "csv", "avro")

#: The corrupt-record column (``planner/bad_rows.py`` uses the same name for files).
CORRUPT_COLUMN = "__wavesql_corrupt"

#: Options of Spark's Kafka source (lower case) passed to it as written; ``kafka.*`` are
#: the consumer's own settings (security, SASL, timeouts). Every other option is the
#: payload parser's (``from_json``/``from_csv``: ``sep``, ``timestampFormat``, ...).
_SOURCE_OPTIONS = {
    "startingoffsets", "startingtimestamp", "startingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy", "endingoffsets", "endingtimestamp",
    "endingoffsetsbytimestamp", "failondataloss", "kafkaconsumer.polltimeoutms",
    "fetchoffset.numretries", "fetchoffset.retryintervalms", "maxoffsetspertrigger",
    "minoffsetspertrigger", "maxtriggerdelay", "minpartitions", "groupidprefix",
    "includeheaders",
}
#: WaveSQL's short spellings.
_ALIASES = {"bootstrap": "kafka.bootstrap.servers", "starting": "startingOffsets",
            "ending": "endingOffsets"}


def columns_with_metadata(declared, where=None) -> tuple[Column, ...]:
    """The declared payload columns followed by :data:`METADATA`; a declared column named
    like one of them is refused (``DUPLICATE_COLUMN``)."""
    for col in declared:
        if col.name.lower() in METADATA_NAMES:
            raise WaveSQLError(
                "DUPLICATE_COLUMN", f"column `{col.name}` is a column every Kafka stream has "
                "(the record's " + col.name[1:] + ")", where,
                hint="rename the payload column; the record's envelope is in "
                     + ", ".join(METADATA_NAMES))
    return tuple(declared) + METADATA


def payload_columns(stream) -> tuple[Column, ...]:
    """The stream's columns parsed from the payload (all but the envelope)."""
    return tuple(c for c in stream.columns if c.name not in METADATA_NAMES)


def bootstrap(options) -> str:
    """The bootstrap servers of OPTIONS, or a clear error."""
    for key, value in options:
        if key.lower() in ("bootstrap", "kafka.bootstrap.servers"):
            return value
    raise WaveSQLError("INVALID_OPTION", "a Kafka stream or sink needs its brokers",
                       hint="OPTIONS (bootstrap = 'host:9092')")


def split_options(options) -> tuple[dict, dict]:
    """``(source options, parser options)`` of a Kafka stream's OPTIONS."""
    source, parser = {"startingOffsets": "earliest"}, {}
    for key, value in options:
        name = _ALIASES.get(key.lower(), key)
        if name.lower().startswith("kafka.") or name.lower() in _SOURCE_OPTIONS \
                or name in _ALIASES.values():
            source[name] = value
        elif name.lower() in ("subscribe", "subscribepattern", "assign"):
            raise WaveSQLError("INVALID_OPTION", f"option `{key}`: the topic is the one named "
                               "in FROM KAFKA 'topic'", hint=f"remove `{key}`")
        else:
            parser[name] = value
    return source, parser


def load(spark, stream, *, streaming: bool, partition: int | None = None,
         offsets: dict[int, tuple[int, int]] | None = None):
    """Spark's Kafka source over the stream's topic (``spark.read`` or ``readStream``), or
    over one of its partitions; ``offsets`` (a batch read): only these partitions, each
    from its first offset up to (not including) its second."""
    options, _ = split_options(stream.options)
    reader = spark.readStream if streaming else spark.read
    if streaming:
        options.pop("endingOffsets", None)  # a live read has no end
    reader = reader.format("kafka").options(**options)
    if offsets is not None:
        topic = stream.path
        return (reader.option("assign", json.dumps({topic: sorted(offsets)}))
                .option("startingOffsets", json.dumps(
                    {topic: {str(p): lo for p, (lo, _) in offsets.items()}}))
                .option("endingOffsets", json.dumps(
                    {topic: {str(p): hi for p, (_, hi) in offsets.items()}}))
                .load())
    if partition is None:
        reader = reader.option("subscribe", stream.path)
    else:
        reader = reader.option("assign", json.dumps({stream.path: [partition]}))
        start = options.get("startingOffsets", "earliest")
        if start.strip().startswith("{"):  # per-partition offsets: this partition's
            given = json.loads(start).get(stream.path, {})
            mine = given.get(str(partition))
            reader = reader.option("startingOffsets", json.dumps(
                {stream.path: {str(partition): mine if mine is not None else -2}}))
    return reader.load()


def parse(raw, stream):
    """The records of ``raw`` (Spark's Kafka columns) as the stream's rows: the payload
    columns, the envelope (:data:`METADATA`), the corrupt-record column (the text of a
    payload that is not a record of the schema, else NULL) and ``__file`` (where the record
    is: ``kafka:<topic>/<partition>/<offset>``)."""
    from pyspark.sql import functions as F

    payload = payload_columns(stream)
    ddl = ", ".join(f"{quote(c.name)} {c.type}" for c in payload)
    _, parser = split_options(stream.options)
    fmt = stream.format
    if fmt in ("json", "csv"):
        parse_with = F.from_json if fmt == "json" else F.from_csv
        text = F.col("value").cast("string")
        parsed = parse_with(text, f"{ddl}, {quote(CORRUPT_COLUMN)} STRING", {
            **parser, "mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN})
        bad = F.col(f"__p.{quote(CORRUPT_COLUMN)}")
        if fmt == "csv":
            # from_csv keeps a short line's missing fields as NULL without marking it
            fields = F.size(F.split(text, _csv_separator(parser), -1))
            bad = F.when(fields != len(payload), text).otherwise(bad)
    elif fmt == "avro":
        from pyspark.sql.avro.functions import from_avro, to_avro

        schema = parser.pop("avroSchema", None) or avro_schema(payload)
        parsed = from_avro(F.col("value"), schema, {"mode": "PERMISSIVE"})
        # a datum of the schema re-encodes to its own bytes (module docstring)
        same = to_avro(parsed, schema) == F.col("value")
        bad = F.when(~same, F.base64("value"))
    else:  # pragma: no cover - the binder allows FORMATS only
        raise WaveSQLError("UNKNOWN_FORMAT", f"unsupported Kafka payload format `{fmt}`")
    bad = F.when(F.col("value").isNull(), F.lit("(no payload: the record's value is NULL)")) \
        .otherwise(bad)
    framed = raw.select(parsed.alias("__p"), bad.alias(CORRUPT_COLUMN), "key", "topic",
                        "partition", "offset", "timestamp")
    return framed.select(
        *[F.col(f"__p.{quote(c.name)}").alias(c.name) for c in payload],
        F.col("key").cast("string").alias("_key"), F.col("topic").alias("_topic"),
        F.col("partition").alias("_partition"), F.col("offset").alias("_offset"),
        F.col("timestamp").alias("_timestamp"), F.col(CORRUPT_COLUMN),
        F.concat(F.lit("kafka:"), F.col("topic"), F.lit("/"), F.col("partition"), F.lit("/"),
                 F.col("offset")).alias("__file"))


def _csv_separator(parser: dict) -> str:
    import re

    sep = parser.get("sep", parser.get("delimiter", ","))
    return re.escape(sep)


_AVRO_TYPES = {
    "STRING": "string", "INT": "int", "INTEGER": "int", "BIGINT": "long", "LONG": "long",
    "FLOAT": "float", "DOUBLE": "double", "BOOLEAN": "boolean", "BINARY": "bytes",
    "TIMESTAMP": {"type": "long", "logicalType": "timestamp-micros"},
    "DATE": {"type": "int", "logicalType": "date"},
}


def avro_schema(columns) -> str:
    """The Avro record schema (JSON) of ``columns``: each field nullable, in order.

    >>> json.loads(avro_schema([Column("v", "DOUBLE")]))["fields"]
    [{'name': 'v', 'type': ['null', 'double'], 'default': None}]
    """
    fields = []
    for c in columns:
        kind = _AVRO_TYPES.get(c.type.upper())
        if kind is None:
            raise WaveSQLError("UNKNOWN_TYPE", f"column `{c.name}` {c.type} has no Avro "
                               "type WaveSQL derives", hint="give the writer's schema with "
                               "OPTIONS (avroSchema = '{...}'), or use FORMAT json")
        fields.append({"name": c.name, "type": ["null", kind], "default": None})
    return json.dumps({"type": "record", "name": "record", "fields": fields})


def describe_topic(spark, options, topic: str, timeout_s: float = 10.0) -> int:
    """The number of partitions of ``topic``, asked of the brokers with the Kafka client
    Spark's Kafka source uses (so the same settings reach it): ``KAFKA_UNREACHABLE`` when
    no broker answers within ``timeout_s``, ``MISSING_TOPIC`` when there is no such topic."""
    servers = bootstrap(options)
    jvm = spark.sparkContext._jvm
    props = jvm.java.util.Properties()
    source, _ = split_options(options)
    given = source.get("kafka.default.api.timeout.ms")
    if given is not None and given.isdigit():  # the stream's own bound on a client call
        timeout_s = int(given) / 1000.0
    ms = str(int(timeout_s * 1000))
    for key in ("request.timeout.ms", "default.api.timeout.ms"):
        props.setProperty(key, ms)
    props.setProperty("socket.connection.setup.timeout.max.ms", ms)
    for key, value in source.items():
        if key.startswith("kafka."):
            props.setProperty(key[len("kafka."):], value)
    admin_class = getattr(jvm, "org.apache.kafka.clients.admin.AdminClient")
    try:
        admin = admin_class.create(props)
    except Exception as err:  # noqa: BLE001 - py4j: no Kafka client on the class path
        if "AdminClient" in str(err) or "JavaPackage" in type(err).__name__:
            raise WaveSQLError("NOT_INSTALLED", "Spark's Kafka connector is not on the class "
                               "path", hint="run `make connectors`, or on a cluster give Spark "
                               "org.apache.spark:spark-sql-kafka-0-10 (README)") from None
        raise _client_error(err, servers, topic) from None
    try:
        names = jvm.java.util.Collections.singleton(topic)
        described = admin.describeTopics(names).allTopicNames().get(
            int(timeout_s * 1000) + 2000, jvm.java.util.concurrent.TimeUnit.MILLISECONDS)
        return int(described.get(topic).partitions().size())
    except Exception as err:  # noqa: BLE001 - the broker's answer, as a WaveSQL error
        raise _client_error(err, servers, topic) from None
    finally:
        admin.close()


def _client_error(err, servers: str, topic: str) -> WaveSQLError:
    text = str(err)
    if "UnknownTopicOrPartition" in text:
        return WaveSQLError("MISSING_TOPIC", f"Kafka topic `{topic}` does not exist on "
                            f"{servers}", hint="create the topic first (kafka-topics.sh "
                            "--create), or fix its name")
    if "Timeout" in text or "DisconnectException" in text or "No resolvable" in text:
        return WaveSQLError("KAFKA_UNREACHABLE", f"no Kafka broker answered at {servers}",
                            hint="check OPTIONS (bootstrap = 'host:port') and that the broker "
                                 "is running and reachable from here")
    first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    return WaveSQLError("KAFKA_ERROR", f"Kafka at {servers}: {first[:300]}")


# -- sinks ------------------------------------------------------------------------------

def records(df, fmt: str, batch_id: int):
    """``df``'s rows as Kafka records (``key``, ``value``) in payload format ``fmt``.

    The key is deterministic: the SHA-256 (hex) of the batch id, the row's JSON and the
    row's occurrence among identical rows of the batch -- so a micro-batch sent again after
    a crash (delivery is at least once) repeats the very same keys, and a consumer or a
    compacted topic drops the repeats by key, while two equal result rows keep two keys."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    framed = df.select(_row_json(df).alias("__json"), _value(df, fmt).alias("value"))
    nth = F.row_number().over(Window.partitionBy("__json").orderBy("__json"))
    key = F.sha2(F.concat_ws("/", F.lit(str(batch_id)), F.col("__json"), nth.cast("string")),
                 256)
    return framed.select(key.alias("key"), "value")


def row_records(df, fmt: str):
    """``df``'s rows as Kafka records keyed by the SHA-256 of the row alone (a streaming
    plan with no batches to number rows in: streaming/realtime.py)."""
    from pyspark.sql import functions as F

    return df.select(F.sha2(_row_json(df), 256).alias("key"), _value(df, fmt).alias("value"))


def _row_json(df):
    from pyspark.sql import functions as F

    return F.to_json(F.struct(*[F.col(quote(name)) for name in df.columns]), JSON_OPTIONS)


def _value(df, fmt: str):
    """A row's payload in format ``fmt`` (the inverse of :func:`parse`)."""
    from pyspark.sql import functions as F

    cols = [F.col(quote(name)) for name in df.columns]
    if fmt == "json":
        return F.to_json(F.struct(*cols), JSON_OPTIONS)
    if fmt == "csv":
        return F.to_csv(F.struct(*cols), {"timestampFormat": "yyyy-MM-dd HH:mm:ss.SSSSSS"})
    if fmt == "avro":
        from pyspark.sql.avro.functions import to_avro

        schema = avro_schema([Column(f.name, f.dataType.simpleString()) for f in
                              df.schema.fields])
        return to_avro(F.struct(*cols), schema)
    raise WaveSQLError("UNKNOWN_FORMAT", f"unsupported Kafka payload format `{fmt}`")


def write(df, sink, batch_id: int, results: bool = True) -> None:
    """Send ``df`` to the sink's topic through Spark's Kafka sink (at least once: see
    :func:`records` for the keys that make repeats recognisable). ``results``: the rows are
    a query's results (a row-by-row result gets ``_final`` true), not its late rows."""
    from pyspark.sql import functions as F

    source, _ = split_options(sink.options)
    options = {k: v for k, v in source.items() if k.startswith("kafka.")}
    if results and "_final" not in df.columns:  # a row-by-row result: every row is final
        df = df.withColumn("_final", F.lit(True))
    (records(df, sink.format, batch_id).write.format("kafka").options(**options)
     .option("topic", sink.path).save())
