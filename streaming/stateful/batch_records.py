"""Small per-micro-batch records a stateful query keeps beside Spark's checkpoint.

Some facts are the whole query's, not a bucket's, so Spark's state store (per key) cannot
hold them: RESAMPLE's per-bucket caps, the ASOF join's left-stream progress. The driver
writes them as versioned JSON, one file per micro-batch (``<folder>/000000007.json``), and
batch N reads the record of the latest batch *before* N -- the one its first run read,
whether or not an interrupted run of N wrote its own since -- so a batch redone after a
kill sees what it saw the first time. The last two records are kept.
"""

from __future__ import annotations

import json

from wavesql import storage
from wavesql.errors import WaveSQLError


def ids(folder: str) -> list[int]:
    """The batch ids with a record in ``folder``, ascending."""
    if not storage.is_dir(folder):
        return []
    return sorted(int(name[:-5]) for name, _ in storage.children(folder)
                  if name.endswith(".json") and name[:-5].isdigit())


def before(folder: str, batch_id: int, version: int) -> dict:
    """The record of the latest batch before ``batch_id`` (empty: none), checked to be of
    format ``version``."""
    earlier = [i for i in ids(folder) if i < batch_id]
    if not earlier:
        return {}
    path = storage.join(folder, f"{earlier[-1]:09d}.json")
    try:
        record = json.loads(storage.read_text(path))
    except (OSError, ValueError) as err:
        raise WaveSQLError("CHECKPOINT_CORRUPT", f"{path} cannot be read: {err}",
                           hint="start the query from a fresh checkpoint") from None
    if record.get("version") != version:
        raise WaveSQLError("CHECKPOINT_MISMATCH", f"{path} was written in format "
                           f"{record.get('version')!r}; this WaveSQL reads {version}",
                           hint="start the query from a fresh checkpoint")
    return record


def write(folder: str, batch_id: int, version: int, record: dict) -> None:
    """Batch ``batch_id``'s record (whole or not at all; replaced by a re-run); the older
    ones but the last are removed."""
    storage.write_text(storage.join(folder, f"{batch_id:09d}.json"),
                       json.dumps({"version": version, **record}))
    for old in ids(folder):
        if old < batch_id - 1:
            storage.delete(storage.join(folder, f"{old:09d}.json"))
