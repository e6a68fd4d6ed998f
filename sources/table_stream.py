"""Streaming reads of signals stored as tables: CSV, Parquet or JSON files arriving in a folder.

:class:`TableStreamReader` is the WAV stream reader (:mod:`.wav_stream`) over rows placed on
the timeline the way a batch read places them (:mod:`.table_signal`): the same offsets (the
grid position up to which windows were emitted, the files read and their sizes), the same
pending tail window flushed by a ``*.eof`` marker, the same state handling (finite look-back
warmed up on the files before, unbounded look-back carried in ``state_dir``) and the same
exactly-once re-runs. Only what is particular to tables is here:

- **Placement** (:func:`.table_signal.file_runs`, :func:`.table_signal.place`): each new
  file's runs of rows are learnt once per (path, size, modification time) -- a Parquet
  file's row counts (and sample-number statistics) from its footer, a CSV or JSON file
  parsed (its position column, or one channel to count its rows).
- **Order**: rows in file order put the files in name order back to back, so a new file
  must sort after every file already read; with ``sample_column`` / ``time_column`` a new
  file's samples must all come after every sample already read. Otherwise
  ``OUT_OF_ORDER_FILE`` naming the file (its samples would change windows already emitted).
  Gaps inside and between files are gaps, as in batch.
- **Files still being written**: a Parquet file is complete once its footer is readable
  (written last); until then it is deferred for up to ``_TRUNCATED_GRACE`` x ``settle_ms``
  of quiet, then read (and a broken file reported). A CSV or JSON file cannot say that it is
  complete: it is read once it has not been modified for ``settle_ms`` (``_TRUNCATED_GRACE``
  times that when its last line has no end: a writer may have stalled mid-value). With sample numbers
  or timestamps a deferred file holds back every new file (where it lands is only known once
  it is read); in file order, the files after it in name order.
- **Reading** (:meth:`TableStreamReader.read`): a partition's placements get their rows
  (:func:`.placed.filled`, :func:`.table_signal.sampler`) and run the WAV scan's window code.
- **Continuous SYNC** (streaming/sync_state.py): :meth:`TableStreamReader.complete` (the WAV
  reader's, over these hooks) says which files are complete and where they sit; its
  placements (:class:`SyncedRows`) read their own frames for the SYNC's ranges.

Malformed rows raise as in batch (``MALFORMED_ROW``, ``OVERLAPPING_SAMPLES``, ``UNKNOWN_COLUMN``
naming file and row), when a micro-batch plans or reads the file: nothing is dropped.

The ``wavesql_wav`` data source hands its stream to this reader when its options carry a
``layout`` (:func:`layout_option`); streaming/signals.py sets it for a table signal.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Sequence

import numpy as np

from wavesql import storage
from wavesql.errors import WaveSQLError
from wavesql.udfs.wav import WavError

from .arrow import conform
from .placed import filled
from .table_signal import (Layout, RowsPlacement, file_runs, list_files, place, sampler,
                           unit_samples)
from .wav_plan import WavPlan, plan
from .wav_scan import read_partition
from .wav_stream import _TRUNCATED_GRACE, WavStreamReader

__all__ = ["SyncedRows", "TableStreamReader", "layout_option"]


def layout_option(signal) -> str:
    """The ``layout`` option of a table signal's stream: its :class:`Layout` as JSON."""
    return json.dumps(dataclasses.asdict(Layout.of(signal)))


class TableStreamReader(WavStreamReader):
    """Micro-batches over a growing folder of a table signal's files (module docstring)."""

    def __init__(self, options, schema):
        options = {str(k).lower(): v for k, v in dict(options).items()}
        fields = json.loads(options.pop("layout"))
        self.layout = Layout(**{**fields, "channels": tuple(fields["channels"])})
        self._named_in_order = self.layout.position is None
        super().__init__(options, schema)

    def _init_scan(self, options, schema, streaming: bool, **plan_options):
        # the options and the program checked; no file read (one may be being written):
        # each micro-batch places the files
        super()._init_scan(options, schema, streaming, place=lambda paths: [],
                           files=list_files(options["path"], self.layout.format)[:1])

    def _list(self) -> list[str]:
        return list_files(self.options.path, self.layout.format)

    def _order_key(self, path: str):
        return path  # name order, as the batch read lists the files

    def _runs(self, path: str):
        """:func:`.table_signal.file_runs` of ``path``, once per (size, modification time)."""
        return self._memo(path, lambda: file_runs(path, self.layout))

    def _not_ready(self, path: str, now: float) -> bool:
        import pyarrow as pa

        settle = self.options.settle_ms / 1000.0
        try:
            quiet = now - self._stat(path).mtime_ns / 1e9
        except FileNotFoundError:
            return True  # renamed away between the listing and now
        if self.layout.format != "parquet":
            # a text file whose last line has no end may be a writer stalled mid-value
            # ("7.2" of "7.25"): it waits the truncated-file grace, as a footerless Parquet
            return quiet < (settle if _ends_a_line(path) else settle * _TRUNCATED_GRACE)
        try:
            self._runs(path)
        except (pa.ArrowInvalid, OSError):  # no footer yet; once quiet, _place says why
            return quiet < settle * _TRUNCATED_GRACE
        except WaveSQLError:
            return False  # complete, and wrong: the micro-batch reports it
        return False

    def _place(self, paths: Sequence[str]):
        import pyarrow as pa

        files, found = sorted(paths), []
        for path in files:
            try:
                found.append(self._runs(path))
            except FileNotFoundError:
                raise WavError("MISSING_PATH", path, "the file is gone (listed for, or "
                               "read by, an earlier micro-batch)", "files of a stream must "
                               "stay in place (the timeline is computed from all of them)"
                               ) from None
            except pa.ArrowInvalid as err:
                raise WavError("CORRUPT_FILE", path, f"not a readable {self.layout.format} "
                               f"file ({err})", "write each file aside and rename it into "
                               "place once complete") from None
        return place(files, found, self.layout)

    def _plan_of(self, files: list[str]) -> WavPlan:
        return plan(self.options, streaming=True, files=files, place=self._place)

    def complete(self, now: float) -> tuple[list, bool]:
        placements, pending = super().complete(now)
        return [SyncedRows(**{f.name: getattr(p, f.name) for f in dataclasses.fields(p)},
                           layout=self.layout) for p in placements], pending

    def _timeline_files(self, known, p: WavPlan, files) -> list[str]:
        # a file may hold several runs (gaps, row groups) or none (no rows)
        first: dict[str, int] = {}
        for i, x in enumerate(p.placements):
            first.setdefault(x.path, i)
        seen = set(known)
        new = sorted({f for f in files if f not in seen},
                     key=lambda f: (first.get(f, len(first)), f))
        return list(known) + new

    def _check_order(self, known: Sequence[str], p: WavPlan) -> None:
        seen = set(known)
        new = [x for x in p.placements if x.path not in seen and x.info.frames]
        if not known or not new:
            return
        if self.layout.position is None:  # files in name order, back to back
            early = min(x.path for x in new)
            # a read file without rows (a CSV's header alone) holds no sample to land before
            holding = {x.path for x in p.placements if x.path in seen and x.info.frames}
            later = [f for f in known if f > early and f in holding]
            if later:
                raise WavError("OUT_OF_ORDER_FILE", early, f"the new file sorts before "
                               f"{min(later)}, which an earlier micro-batch already read "
                               "(rows in file order: the files follow each other in name "
                               "order)", "name files so that new ones sort last (e.g. by "
                               "time or a zero-padded counter)")
            return
        ends = [x for x in p.placements if x.path in seen]
        last = max(ends, key=lambda x: x.end_sample) if ends else None
        early = min(new, key=lambda x: x.start_sample)
        if last is not None and early.start_sample < last.end_sample:
            raise WavError("OUT_OF_ORDER_FILE", early.path, f"the new file holds sample "
                           f"{early.start_sample}, before sample {last.end_sample} where the "
                           f"samples earlier micro-batches read end ({last.path})",
                           f"each new file's `{self.layout.position}` must come after every "
                           "sample already read (it would change windows already emitted); "
                           "run a batch query over the complete files, or start the query "
                           "from a fresh checkpoint")

    def read(self, partition):
        o = self.options
        with sampler(self.layout) as samples_of:
            part = filled(partition, o.window, o.slide, samples_of)
            for batch in read_partition(part, o, self._program_json, self._channels,
                                        self._stateful):
                yield conform(batch, self._target)


@dataclasses.dataclass(frozen=True)
class SyncedRows(RowsPlacement):
    """A run of a table signal's rows that reads its own frames: what a continuous SYNC's
    ranges are cut from (udfs/sync.py ``read_batch``, in the task), as a WAV file's
    placement is read through its header."""

    layout: Layout | None = None

    def read(self, offset: int, count: int) -> np.ndarray:
        """Frames ``offset .. offset + count - 1`` of the run, ``(count, channels)``."""
        first = self.row + offset
        return _unit(self.path, self.layout, self.group)[:, first:first + count].T


#: The units (a file, or a Parquet row group) a Python worker read last, by path, group,
#: layout, size and modification time: a SYNC's ranges over one file each read it once,
#: not once per range (two kept, as the scan's sampler keeps them).
_UNITS: dict = {}


def _unit(path: str, layout: Layout, group: int) -> np.ndarray:
    try:
        st = storage.stat(path)
        key = (path, group, layout, st.size, st.mtime_ns)
        if key not in _UNITS:
            if len(_UNITS) >= 2:
                del _UNITS[next(iter(_UNITS))]
            _UNITS[key] = unit_samples(path, layout, group)
    except FileNotFoundError:
        raise WavError("MISSING_PATH", path, "the file disappeared after the query was "
                       "planned", "files of a signal must stay in place while it is read"
                       ) from None
    return _UNITS[key]


def _ends_a_line(path: str) -> bool:
    """Whether the file ``path`` is empty or ends with a newline (its last byte only)."""
    with storage.open_input(path) as f:
        size = storage.file_size(f)
        if size == 0:
            return True
        f.seek(size - 1)
        return f.read(1) == b"\n"
