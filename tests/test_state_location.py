"""Where state that belongs to no sink folder goes (wavesql/jobs.py ``state_root``): a Kafka
sink's jobs' default checkpoints. Next to an SQLite catalog file by default; the setting
``wavesql.state.location`` (a URI every host sees) overrides it. (The shared catalog's
default, the same for every host, is tested in tests/test_shared_catalog.py.)"""

from __future__ import annotations

import os

import pytest

from wavesql import jobs
from wavesql.catalog import Catalog, SinkDef
from wavesql.errors import WaveSQLError


class _Conf(dict):
    def get(self, key, default=None):  # (SparkConf's signature)
        return super().get(key, default)


class _Session:
    """What state_root reads of a session: the catalog and the Spark conf (no JVM)."""

    def __init__(self, catalog, **conf):
        self.catalog = catalog
        self.spark = type("Spark", (), {"conf": _Conf(conf)})()


KAFKA = SinkDef("Alarms", "alarms", "json", options={"bootstrap": "x:9"}, source="kafka")


def test_default_is_next_to_the_catalog_file(tmp_path):
    with Catalog(tmp_path / "db" / "cat.db") as cat:
        assert not cat.shared
        assert jobs._kafka_root(_Session(cat), KAFKA) == \
            os.path.join(str(tmp_path / "db"), "kafka_sinks", "alarms")
        assert jobs.lock_dir(cat) == tmp_path / "db" / ".wavesql_locks"


@pytest.mark.parametrize("given, expected", [
    ("s3a://bkt/ws", "s3a://bkt/ws/kafka_sinks/alarms"),
    ("'hdfs://nn:8020/ws/'", "hdfs://nn:8020/ws/kafka_sinks/alarms"),
])
def test_the_setting_overrides_it(tmp_path, given, expected):
    with Catalog(tmp_path / "cat.db") as cat:
        session = _Session(cat, **{"wavesql.state.location": given})
        assert jobs._kafka_root(session, KAFKA) == expected
    with Catalog(":memory:") as cat:  # an in-memory catalog has no folder: the setting
        assert jobs._kafka_root(_Session(cat, **{"wavesql.state.location": given}),
                                KAFKA) == expected


def test_an_in_memory_catalog_without_the_setting_is_refused():
    with Catalog(":memory:") as cat, pytest.raises(WaveSQLError) as info:
        jobs._kafka_root(_Session(cat), KAFKA)
    assert info.value.code == "INVALID_OPTION"
    assert "wavesql.state.location" in info.value.hint


def test_a_sink_checkpoint_option_wins(tmp_path):
    sink = SinkDef("a", "a", "json", options={"checkpoint": "s3a://b/cp"}, source="kafka")
    with Catalog(tmp_path / "cat.db") as cat:
        session = _Session(cat, **{"wavesql.state.location": "s3a://other/"})
        assert jobs._kafka_root(session, sink) == "s3a://b/cp"
