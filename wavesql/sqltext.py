"""Names put into generated Spark SQL text, quoted so that any name is safe there.

Every identifier WaveSQL writes into SQL it generates -- column, channel, alias, view and
relation names that came from a user -- goes through :func:`quote`: backticks around it,
inner backticks doubled, so a name with a backtick, a space, a quote or a non-ASCII letter
is one identifier, never SQL (``a` = 1 OR `b`` stays a name).

>>> quote("v"), quote("odd `name"), quote_relation("db.view")
('`v`', '`odd ``name`', '`db`.`view`')
"""

from __future__ import annotations


#: ``to_json`` options that keep a timestamp's microseconds (Spark's default writes
#: milliseconds, so two rows a few microseconds apart would read as one): the JSON of a
#: late row, a Kafka record and its key.
JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
                "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"}


def quote(name: str) -> str:
    """A Spark SQL identifier: ``name`` in backticks, inner backticks doubled."""
    return "`" + str(name).replace("`", "``") + "`"


def quote_relation(name: str) -> str:
    """A relation name, each dotted part quoted (``db.view`` -> ```db`.`view```)."""
    return ".".join(quote(part) for part in name.split("."))


def status_frame(spark, message: str):
    """A statement's one-row ``status`` DataFrame, the message a SQL parameter. A literal
    ``VALUES`` list is a local relation, which Spark collects without running a job;
    ``createDataFrame`` of a Python list runs two (measured: 0.2-1 s each on a 2-core
    machine, the first of a process several seconds) -- for every CREATE ... IF NOT EXISTS of
    a query file run from cron."""
    return spark.sql("SELECT * FROM VALUES (:message) AS t(status)", args={"message": message})
