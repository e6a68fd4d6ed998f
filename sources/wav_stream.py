"""Streaming reads of WAV files: micro-batches over a growing directory of recordings.

:class:`WavStreamReader` is the stream reader of the ``wavesql_wav`` source
(:mod:`.wav_source`). Each micro-batch plans the listed files again (:func:`.wav_plan.plan`)
and reads its new windows with :mod:`.wav_scan`.

Offsets
-------
Offsets are ``{"end": e, "files": [...], "final": bool}``: every window piece with grid
start below ``e`` (a multiple of m; ``null`` before the first batch) has been emitted, and
``files`` are the paths read, in timeline order. Each micro-batch re-lists ``path``; new
files must come after every known one in the timeline (in ``concatenate`` mode: in natural
name order) -- a file that would land before an already-read one is ``OUT_OF_ORDER_FILE``.
A batch emits the windows whose data is complete: every piece of a run followed by a later
file (a gap ends the run), and the windows of the last run that end at or before its last
sample. **The partial tail window is never emitted in streaming** until the stream is
marked finished by a file ``*.eof`` in the directory (``final: true``); a ``.wav`` arriving
after the marker is ``OUT_OF_ORDER_FILE``. So the union of all micro-batches equals the batch
read of the same files (without the marker: minus the tail piece(s) still waiting). Files
already read must stay in place and unchanged.

**Files still being written** are deferred, not read in part: a new file is taken only once
it is complete -- its header parses and declares exactly the data present, or, for a header
that does not say where the data ends (a streaming recorder's unpatched size 0/0xFFFFFFFF)
or a file shorter than its header says (being copied in place), once it has not been
modified for ``settle_ms`` (``_TRUNCATED_GRACE`` times that for a truncated file, which is
then read leniently as a truncated file, as before). A deferred file holds back every file
after it in timeline order, so the timeline never changes; a later trigger takes them (with
``availableNow``, the run waits for them instead, up to the same bounds). Offsets record each
file's size (``"sizes"``): a file read by an earlier micro-batch whose size changed is
``FILE_CHANGED`` -- its samples are already on the timeline, and moving them would duplicate
or drop windows. Writing ``x.wav.part`` and renaming it into place avoids all of this.
Headers are read once per (path, size, modification time), not on every micro-batch.
Signals stored as tables stream through a subclass (:mod:`.table_stream`) that overrides how
files are listed, placed (rows, not WAV headers), judged complete and ordered (``_list``,
``_plan_of``, ``_not_ready``, ``_order_key``, ``_check_order``, ``_timeline_files``) and
how a partition's samples are read; offsets, the tail window, the marker and state are
these.
Without ``state_dir``, stateful programs need a finite look-back (the Evaluator does not
survive between micro-batches, so each batch warms up from the look-back region);
``sequential`` or an unbounded look-back in streaming is then ``NOT_IMPLEMENTED``.

**Checkpointed state** (``state_dir``): a stateful program of unbounded look-back
(detectors, ``degap``, ``resample``, an IIR filter that never forgets) then runs each
micro-batch as *one* partition holding all its new windows in order, whose Evaluator starts
from the states saved at the batch's start offset (``state_dir/k=<k_from>.state``) and saves
its states at the batch's end offset (``k=<k_to>.state``, written atomically; JSON with
numpy arrays, :mod:`wavesql.udfs.states`, never a pickle: the checkpoint is the user's, and
a pickle would run code; the files: :mod:`.wav_scan`). So the program sees every window
exactly once, in order, with the state the previous window left: the same output as one
sequential batch pass, however the recording is cut into files and micro-batches. A re-run
of a micro-batch (after a crash) reads the same start state and rewrites the same end state,
so it is exactly once; the pending output of detectors (``Evaluator.finish``) comes with the
final batch (the ``*.eof`` marker), from a partition of no windows when nothing else is
left. Warm-up replay was not used for this because it cannot be exact for an unbounded
look-back (IIR) and re-reads the look-back on every batch.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Sequence

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from wavesql import storage
from wavesql.udfs.wav import WavError, read_info
from wavesql.udfs.wav.timeline import natural_key, parse_file_timestamp

from .wav_plan import (WavPartition, WavPlan, bad_option, k_range, list_wav_files, plan,
                       plan_partitions)
from .wav_scan import WavScan, state_file

__all__ = ["WavStreamReader"]

_log = logging.getLogger("wavesql.wav_source")

#: A new file whose header declares more data than it holds is read (leniently) once it
#: has not been modified for this many times ``settle_ms`` (*Files still being written*).
_TRUNCATED_GRACE = 10


def _eof_marked(path: str) -> bool:
    """Whether the stream under ``path`` is finished: a ``*.eof`` file next to its files."""
    folder = path if storage.is_dir(path) else storage.dirname(path) or "."
    return bool(storage.list_files(folder, suffix=".eof"))


class WavStreamReader(WavScan, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over a growing directory of WAV files (offsets: module docstring)."""

    def __init__(self, options, schema):
        #: header cache: path -> ((size, mtime_ns), WavInfo); filled before the first plan
        self._infos: dict[str, tuple[tuple[int, int], object]] = {}
        self._init_scan(options, schema, streaming=True)
        self._frozen: tuple[list[str], bool] | None = None  # availableNow: listing, eof
        self._cached: tuple[tuple[str, ...], WavPlan] | None = None
        self._stats: dict[str, storage.Entry] = {}  # this latestOffset call's stats

    def initialOffset(self) -> dict:
        return {"end": None, "files": [], "final": False}

    def _stat(self, path: str) -> storage.Entry:
        """Size and modification time, once per file and ``latestOffset`` call
        (``self._stats``); ``FileNotFoundError`` when it is gone."""
        st = self._stats.get(path)
        if st is None:
            st = self._stats[path] = storage.stat(path)
        return st

    def _identity(self, path: str):
        """Device and inode: one file under two names is placed once (as realpath would
        tell, without its per-component lstat calls). An object's key is its identity."""
        try:
            st = self._stat(path)
        except OSError:
            return os.path.realpath(path)  # read_info then says what is wrong
        return st.inode or path

    def _info(self, path: str, *, strict: bool = False):
        """``read_info`` once per (path, size, modification time)."""
        return self._memo(path, lambda: read_info(path, strict=strict))

    def _memo(self, path: str, compute):
        """What ``compute()`` learns of file ``path`` (its header), once per (path, size,
        modification time)."""
        st = self._stat(path)
        key = (st.size, st.mtime_ns)
        hit = self._infos.get(path)
        if hit is not None and hit[0] == key:
            return hit[1]
        value = compute()
        self._infos[path] = (key, value)
        return value

    def _not_ready(self, path: str, now: float) -> bool:
        """Whether the new file ``path`` may still be being written (module docstring)."""
        settle = self.options.settle_ms / 1000.0
        try:
            st = self._stat(path)
        except FileNotFoundError:
            return True  # renamed away between the listing and now
        quiet = now - st.mtime_ns / 1e9
        try:
            info = self._info(path)
        except WavError:
            return quiet < settle  # a header not written yet; once quiet, plan() says why
        if info.truncated:
            return quiet < settle * _TRUNCATED_GRACE
        return info.open_ended and quiet < settle

    def _admit(self, start: dict, listed: list[str]) -> tuple[list[str], bool]:
        """The files a micro-batch may read: the known ones (checked unchanged), then the
        new ones in timeline order up to the first that is not complete yet. Returns them
        and whether one was held back."""
        known = list(start.get("files") or [])
        self._check_sizes(known, start.get("sizes"), "read by an earlier micro-batch")
        seen = set(known)
        new = sorted((f for f in listed if f not in seen), key=self._order_key)
        now, admitted = time.time(), []
        for path in new:
            if self._not_ready(path, now):
                _log.info("%s: not complete yet; deferred with the files after it", path)
                # where a file lands is only known once it is read: then hold back them all
                return known + (admitted if self._named_in_order else []), True
            admitted.append(path)
        return known + admitted, False

    #: whether ``_order_key`` is the timeline order of new files (not so for table rows
    #: placed by their sample numbers: sources/table_stream.py)
    _named_in_order = True

    def complete(self, now: float) -> tuple[list, bool]:
        """``(placements, pending)``: the files complete at wall-clock time ``now``, placed
        on the timeline, and whether a file still being written may yet land among them.
        Where names give the timeline order, a file still being written holds back the
        files after it (``pending`` is then False: nothing can land before them); where a
        file's place is only known once it is read (rows placed by their sample numbers
        or timestamps), the complete files are placed and ``pending`` says one is not.
        What a continuous SYNC's control rows are covered by (streaming/sync_state.py);
        the same hooks as the micro-batches' (``_list``, ``_order_key``, ``_not_ready``,
        ``_plan_of``)."""
        self._stats = {}
        try:
            ready, pending = [], False
            for path in sorted(self._list(), key=self._order_key):
                if not self._not_ready(path, now):
                    ready.append(path)
                elif self._named_in_order:
                    break
                else:
                    pending = True
            return (self._plan_of(ready).placements if ready else []), pending
        finally:
            self._stats = {}

    def _list(self) -> list[str]:
        """The stream's files now."""
        return list_wav_files(self.options.path)

    def _order_key(self, path: str):
        """Timeline order of new files, from their names alone."""
        if self.options.timeline == "timestamped":
            try:
                return (0, parse_file_timestamp(path), natural_key(path))
            except WavError:
                return (1, 0, natural_key(path))  # plan() reports the bad name
        return (0, 0, natural_key(path))

    def prepareForTriggerAvailableNow(self) -> None:
        # availableNow: read what is there now and not what arrives during the run.
        self._frozen = (self._list(), _eof_marked(self.options.path))

    def _plan_files(self, known: Sequence[str], files: list[str]) -> WavPlan:
        # latestOffset and then partitions plan the same files: read their headers once.
        key = tuple(sorted(files))
        if self._cached is not None and self._cached[0] == key:
            p = self._cached[1]
        else:
            p = self._plan_of(files)
            self._cached = (key, p)
        self._check_order(known, p)
        return p

    def _plan_of(self, files: list[str]) -> WavPlan:
        """``files`` placed on the timeline."""
        return plan(self.options, streaming=True, files=files, read=self._info,
                    identity=self._identity)

    def _timeline_files(self, known: Sequence[str], p: WavPlan,
                        files: Sequence[str]) -> list[str]:
        """The files of plan ``p`` of ``files`` in timeline order, the ``known`` ones first
        (``_check_order`` saw to that)."""
        return [x.path for x in p.placements]

    def _check_order(self, known: Sequence[str], p: WavPlan) -> None:
        """``OUT_OF_ORDER_FILE`` when a new file lands before a known one on the timeline
        (``MISSING_PATH`` when a known file is gone)."""
        order = [x.path for x in p.placements]
        if order[:len(known)] != list(known):
            known_set, listed = set(known), set(order)
            gone = [f for f in known if f not in listed]
            if gone:
                raise WavError("MISSING_PATH", gone[0], "the file was read by an earlier "
                               "micro-batch and is gone", "files of a stream must stay in "
                               "place (the timeline is computed from all of them)")
            early = next(f for f in order if f not in known_set)
            later = next(f for f in known if order.index(f) > order.index(early))
            raise WavError("OUT_OF_ORDER_FILE", early, f"the new file sorts before {later}, "
                           "which an earlier micro-batch already read",
                           "name files so that new recordings sort last (e.g. by start time)")

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        self._stats = {}  # stat each file once per call (readiness, sizes, header cache)
        try:
            return self._latest(start or self.initialOffset())
        finally:
            self._stats = {}

    def _latest(self, start: dict) -> dict:
        known = list(start.get("files") or [])
        listed, eof = self._frozen or (self._list(), _eof_marked(self.options.path))
        if start.get("final") and set(listed) - set(known):
            new = sorted(set(listed) - set(known))[0]
            raise WavError("OUT_OF_ORDER_FILE", new, "the file arrived after the stream was "
                           "marked finished (*.eof)", "remove the .eof marker before adding "
                           "files, and restart the query from a fresh checkpoint")
        listed, held = self._admit(start, listed)
        if held and self._frozen is not None:
            # availableNow: wait for the files present at the start rather than end the
            # run without them (bounded: the truncated-file grace)
            deadline = time.time() + self.options.settle_ms / 1000.0 * (_TRUNCATED_GRACE + 1)
            while held and time.time() < deadline:
                time.sleep(min(0.1, self.options.settle_ms / 4000.0 + 0.01))
                self._stats = {}
                listed, held = self._admit(start, self._frozen[0])
        # the end of the recording is only final once every file before the marker is in
        final = bool(start.get("final")) or (eof and not held)
        p = self._plan_files(known, listed)
        files = self._timeline_files(known, p, listed)
        cap = self.options.max_files_per_trigger
        if cap is not None and len(files) > len(known) + cap:
            # Rate limit: the next `cap` files in timeline order; the end is not final
            # until every listed file has been read.
            files = files[:len(known) + cap]
            p, final = self._plan_files(known, files), bool(start.get("final"))
        n, m = self.options.window, self.options.slide
        if not p.runs:
            k_end = None
        elif final:
            k_end = k_range(p.runs[-1], n, m)[1]
        else:  # the first window of the open last run that is not yet complete
            k_end = (p.runs[-1].end - n) // m + 1
        if start.get("end") is not None:
            k_end = max(k_end, start["end"] // m) if k_end is not None else start["end"] // m
        return {"end": None if k_end is None else k_end * m, "files": files,
                "final": final, "sizes": [self._size(f) for f in files]}

    def _check_sizes(self, files: Sequence[str], sizes, when: str) -> None:
        """``FILE_CHANGED`` when one of ``files`` no longer has the size an offset recorded
        for it (``sizes``; None: an offset written before sizes were kept)."""
        if sizes is None or len(sizes) != len(files):
            return
        for path, size in zip(files, sizes):
            try:
                now_size = self._stat(path).size
            except FileNotFoundError:
                continue  # _plan_files reports it (MISSING_PATH)
            if now_size != size:
                raise WavError("FILE_CHANGED", path, f"the file was {when} with {size} bytes "
                               f"and now has {now_size}", "files of a stream must not change "
                               "once read: write each file aside and rename it into place; "
                               "restore the file, or start the query from a fresh checkpoint")

    def _size(self, path: str) -> int | None:
        try:
            return self._stat(path).size
        except OSError:
            return None

    def partitions(self, start: dict, end: dict):
        self._stats = {}
        m = self.options.slide
        if end.get("end") is None:
            return []
        if end["end"] % m or (start.get("end") is not None and start["end"] % m):
            raise bad_option(self.options.path, "the checkpoint's offsets were written with "
                             f"another window slide than {m}",
                             "start the query from a fresh checkpoint")
        # a micro-batch run again after a crash places its files from disk now: each must
        # still be what the offset logged (else windows already emitted would move)
        self._check_sizes(end["files"], end.get("sizes"), "logged for this micro-batch")
        p = self._plan_files(start.get("files") or [], list(end["files"]))
        k_from = None if start.get("end") is None else start["end"] // m
        k_to = end["end"] // m
        if self.options.state_dir and p.stateful and p.sequential:
            return self._stateful_partitions(p, start, end, k_from, k_to)
        # Finite look-back (stateless, FIR, IIR filters: udfs/kernels/filters.py): the new
        # windows run in parallel partitions, each warmed up on the files before it.
        return p.partitions(k_from, k_to, flush=bool(end.get("final")),
                            partition_samples=self._batch_partition_samples(p, k_from, k_to))

    def _batch_partition_samples(self, p: WavPlan, k_from, k_to) -> int | None:
        o = self.options
        if o.tasks is None:
            return None
        first = k_from if k_from is not None else (k_range(p.runs[0], o.window, o.slide)[0]
                                                  if p.runs else k_to)
        new = max(0, k_to - first) * o.slide
        return min(o.partition_samples, max(1 << 20, -(-new // o.tasks)))

    def _stateful_partitions(self, p: WavPlan, start: dict, end: dict, k_from, k_to):
        """One partition of all the new windows, in order, carrying the Evaluator's state
        through ``state_dir`` (module docstring, *Checkpointed state*)."""
        o = self.options
        flush = bool(end.get("final")) and not start.get("final")
        found = plan_partitions(p.runs, o.window, o.slide, o.partition_samples, p.rate,
                                k_from=k_from, k_to=k_to, sequential=True, flush=flush)
        tasks = tuple(t for part in found for t in part.tasks)
        if not tasks and not flush:
            return []
        # No window before k_from (e.g. the first file was shorter than a window): the
        # program starts fresh, as in a batch read.
        first_k = k_range(p.runs[0], o.window, o.slide)[0] if p.runs else None
        fresh = k_from is None or first_k is None or k_from <= first_k
        state_in = None if fresh else state_file(o.state_dir, k_from)
        return [WavPartition(0, p.rate, tasks, (), None, flush, state_in,
                             state_file(o.state_dir, k_to))]

    def commit(self, end: dict) -> None:
        pass  # nothing buffered: every batch is re-read from the files
