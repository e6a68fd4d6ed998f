"""``wavesql.*`` settings (wavesql/settings.py): parsed, checked when SET, documented.

The oracle is the settings' documented values (docs/settings.md) and hand-written cases."""

import pytest

from wavesql import settings
from wavesql.errors import WaveSQLError


class FakeConf:
    """Spark's RuntimeConfig as far as settings.get uses it: a dict of strings."""

    def __init__(self, values):
        self.values = values

    def get(self, key, default=None):
        return self.values.get(key, default)


class FakeSpark:
    def __init__(self, values=None):
        self.conf = FakeConf(dict(values or {}))


def spark_with(name, value):
    return FakeSpark({name: value})


def test_defaults_when_unset():
    s = FakeSpark()
    assert settings.get(s, "wavesql.fused") is True
    assert settings.get(s, "wavesql.windows.chunked") == "true"
    assert settings.get(s, "wavesql.windows.min_rows") == 100_000
    assert settings.get(s, "wavesql.windows.chunk_rows") is None
    assert settings.get(s, "wavesql.python.task_memory") is None
    assert settings.get(s, "wavesql.sync.read") == "files"


@pytest.mark.parametrize("name, raw, want", [
    ("wavesql.fused", "FALSE", False),
    ("wavesql.fused", " true ", True),
    ("wavesql.windows.chunked", "ALL", "all"),
    ("wavesql.windows.chunk_rows", "500", 500),
    ("wavesql.windows.min_rows", "0", 0),
    ("wavesql.python.task_memory", "'512m'", 512 * 2**20),  # SET keeps SQL's quotes
    ("wavesql.python.task_memory", "2g", 2 * 2**30),
    ("wavesql.python.task_memory", "1.5k", 1536),
    ("wavesql.sync.read", "join", "join"),
    ("wavesql.wav.scan", "source", "source"),
])
def test_values_are_parsed(name, raw, want):
    assert settings.get(spark_with(name, raw), name) == want


@pytest.mark.parametrize("name, raw", [
    ("wavesql.fused", "yes"),
    ("wavesql.windows.chunked", "some"),
    ("wavesql.windows.chunk_rows", "0"),        # at least one row per chunk
    ("wavesql.windows.chunk_rows", "many"),
    ("wavesql.windows.min_rows", "-1"),
    ("wavesql.python.task_memory", "lots"),
    ("wavesql.python.task_memory", "0m"),
    ("wavesql.python.task_memory", "5 parsecs"),
    ("wavesql.sync.read", "maybe"),
])
def test_a_bad_value_is_an_error_with_an_example(name, raw):
    with pytest.raises(WaveSQLError) as e:
        settings.get(spark_with(name, raw), name)
    assert e.value.code == "INVALID_SETTING"
    assert name in e.value.message and raw in e.value.message
    assert e.value.hint.startswith(f"SET {name} = ")


def test_check_refuses_unknown_keys_with_a_suggestion_and_ignores_spark_keys():
    settings.check("spark.sql.shuffle.partitions", "4")  # Spark's own: not WaveSQL's to judge
    settings.check("wavesql.fused", "false")
    settings.check("wavesql.fused", None)  # SET key: shows the value
    with pytest.raises(WaveSQLError) as e:
        settings.check("wavesql.fuesd", "false")
    assert e.value.code == "INVALID_SETTING" and "wavesql.fused" in e.value.hint
    with pytest.raises(WaveSQLError) as e:
        settings.check("wavesql.Fused", "false")  # Spark's keys are case-sensitive
    assert e.value.code == "INVALID_SETTING"
    with pytest.raises(WaveSQLError) as e:
        settings.check("wavesql.windows.chunk_rows", "-3")
    assert e.value.code == "INVALID_SETTING" and "-3" in e.value.message


def test_the_settings_reference_is_current():
    from pathlib import Path

    doc = Path(__file__).resolve().parent.parent / "docs" / "settings.md"
    assert doc.read_text() == settings.reference_markdown(), \
        "regenerate it: python -m wavesql.settings > docs/settings.md"
    for name in settings.SETTINGS:
        assert f"`{name}`" in doc.read_text()


@pytest.mark.spark
def test_set_is_checked_where_it_is_typed_and_read_as_spark_stores_it(ws):
    text = "SET wavesql.windows.chunkd = all"
    with pytest.raises(WaveSQLError) as e:
        ws.sql(text)
    assert e.value.code == "INVALID_SETTING" and "wavesql.windows.chunked" in e.value.hint
    assert e.value.span is not None and e.value.span.start == text.index("wavesql")
    with pytest.raises(WaveSQLError) as e:
        ws.sql("SET wavesql.fused = sometimes")
    assert e.value.code == "INVALID_SETTING"
    try:
        ws.sql("SET wavesql.python.task_memory = '64k'")
        assert settings.get(ws.spark, "wavesql.python.task_memory") == 64 << 10
        ws.sql("SET wavesql.fused = false")
        assert settings.get(ws.spark, "wavesql.fused") is False
        ws.sql("SET spark.sql.shuffle.partitions = 3")  # Spark's keys pass through
        assert ws.spark.conf.get("spark.sql.shuffle.partitions") == "3"
    finally:
        for key in ("wavesql.python.task_memory", "wavesql.fused"):
            ws.spark.conf.unset(key)
        ws.spark.conf.set("spark.sql.shuffle.partitions", "2")
