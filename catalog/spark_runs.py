"""The run history and the leases of the shared catalog (:mod:`.spark_catalog`), in the Hive
metastore: the counterparts of :mod:`.runs` and :mod:`.leases` for the SQLite file, with
the same API and guarantees (:mod:`.spark_catalog`'s docstring gives the layout and how run
ids and lease generations are claimed without compare-and-swap).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import re
import socket
import threading
import time
from typing import Iterator

from wavesql.errors import WaveSQLError

from .leases import _alive
from .runs import RunHistory
from .schema import utc_now

_RUN = re.compile(r"r(\d{12})")


class SharedRuns:
    """The run-history and lease operations of :class:`.spark_catalog.SparkCatalog` (it
    provides ``store``, ``runs_db``, ``leases_db``, ``busy_timeout``, ``_check_open`` and
    ``_busy``)."""

    RUN_COLUMNS = RunHistory.RUN_COLUMNS
    LEASE_SECONDS = 30.0

    # -- run history (wavesql runs) --------------------------------------------------------
    def start_run(self, file: str, trigger: str, *, status: str = "running",
                  error: str | None = None) -> int:
        """Record that a run of ``file`` began; its id (see :class:`.runs.RunHistory`)."""
        self._check_open()
        now = utc_now()
        props = {"file": file, "trigger": trigger, "started_at": now, "status": status,
                 "statements": "0", "pid": str(os.getpid()), "host": socket.gethostname()}
        if status != "running":
            props["ended_at"] = now
        if error is not None:
            props["error"] = error
        deadline = time.monotonic() + self.busy_timeout
        while True:
            ids = [int(m.group(1)) for m in map(_RUN.fullmatch, self.store.tables(self.runs_db))
                   if m]
            run_id = max(ids, default=0) + 1
            if self.store.claim(self.runs_db, f"r{run_id:012d}",
                                {f"wavesql.run.{k}": v for k, v in props.items()}) is not None:
                return run_id
            if time.monotonic() > deadline:
                raise self._busy("the run history")
            time.sleep(random.uniform(0.01, 0.1))

    def finish_run(self, run_id: int, status: str, *, statements: int = 0,
                   rows_in: int | None = None, rows_out: int | None = None,
                   rows_late: int | None = None, error: str | None = None) -> None:
        """Record how run ``run_id`` ended."""
        values = {"ended_at": utc_now(), "status": status, "statements": statements,
                  "rows_in": rows_in, "rows_out": rows_out, "rows_late": rows_late,
                  "error": error}
        self.store.set_properties(self.runs_db, f"r{int(run_id):012d}", {
            f"wavesql.run.{k}": str(v) for k, v in values.items() if v is not None})

    def runs(self, file: str | None = None, limit: int | None = 20) -> list[dict]:
        """The run history, newest first (of ``file`` if given), as dicts of RUN_COLUMNS."""
        ids = sorted((int(m.group(1)) for m in map(_RUN.fullmatch,
                                                   self.store.tables(self.runs_db)) if m),
                     reverse=True)
        out = []
        for run_id in ids:
            if limit is not None and len(out) >= limit:
                break
            props = self.store.properties(self.runs_db, f"r{run_id:012d}")
            if props is None:  # pruned since the listing
                continue
            row = {"id": run_id}
            for col in self.RUN_COLUMNS[1:]:
                value = props.get(f"wavesql.run.{col}")
                if value is not None and col in ("statements", "rows_in", "rows_out",
                                                 "rows_late", "pid"):
                    value = int(value)
                row[col] = value
            if row["statements"] is None:
                row["statements"] = 0
            if file is None or row["file"] == file:
                out.append(row)
        return out

    def _prune_runs(self, keep: int) -> int:
        """Drop all but the newest ``keep`` run records of every file (``running`` ones
        kept); how many were dropped (:meth:`SparkCatalog.prune`)."""
        kept: dict[str, int] = {}
        removed = 0
        for row in self.runs(limit=None):  # newest first
            seen = kept.get(row["file"], 0)
            kept[row["file"]] = seen + 1
            if seen >= keep and row["status"] != "running":
                self.store.drop_view(self.runs_db, f"r{int(row['id']):012d}")
                removed += 1
        return removed

    # -- leases ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def lease(self, name: str, what: str, hint: str, *, seconds: float | None = None,
              wait: float = 0.0) -> Iterator[None]:
        """Hold the lease ``name`` while the block runs, or raise ``RUN_IN_PROGRESS`` (after
        up to ``wait`` seconds) if a live holder has it (module docstring; the guarantees
        of :meth:`.leases.Leases.lease`)."""
        import uuid

        seconds = self.LEASE_SECONDS if seconds is None else float(seconds)
        me, host, pid = uuid.uuid4().hex, socket.gethostname(), os.getpid()
        prefix = "l" + hashlib.sha256(name.encode()).hexdigest()[:24] + "__g"
        deadline = time.monotonic() + wait
        while True:
            taken = self._try_lease(prefix, name, me, host, pid, seconds)
            if isinstance(taken, int):
                break
            if time.monotonic() >= deadline:
                raise WaveSQLError("RUN_IN_PROGRESS", f"{what} is already running ({taken})",
                                   hint=hint)
            time.sleep(0.5)
        table = f"{prefix}{taken:09d}"
        stop, lock = threading.Event(), threading.Lock()

        def renew() -> None:
            while not stop.wait(seconds / 3):
                with lock:
                    if stop.is_set():
                        return
                    try:
                        self.store.set_properties(self.leases_db, table, {
                            "wavesql.lease.expires": repr(time.time() + seconds)})
                    except Exception:  # noqa: BLE001 - a busy metastore: the next round
                        continue

        renewer = threading.Thread(target=renew, name=f"wavesql-lease-{name}", daemon=True)
        renewer.start()
        try:
            yield
        finally:
            with lock:
                stop.set()
            renewer.join(timeout=5)
            with contextlib.suppress(Exception):  # unreleased, it expires
                self.store.set_properties(self.leases_db, table, {
                    "wavesql.lease.state": "free", "wavesql.lease.expires": "0"})

    def _try_lease(self, prefix: str, name: str, me: str, host: str, pid: int,
                   seconds: float) -> int | str:
        """Take the lease: its generation, or who holds it."""
        for _ in range(20):
            gens = sorted(int(t[len(prefix):]) for t in self.store.tables(self.leases_db,
                                                                            prefix)
                          if t.startswith(prefix) and t[len(prefix):].isdigit())
            gen = 1
            if gens:
                top = self.store.properties(self.leases_db, f"{prefix}{gens[-1]:09d}")
                if top is None:  # it changed hands while we listed: look again
                    continue
                their_host = top.get("wavesql.lease.host", "")
                their_pid = int(top.get("wavesql.lease.pid", "0") or 0)
                gone = (top.get("wavesql.lease.state") == "free"
                        or float(top.get("wavesql.lease.expires", "0")) < time.time()
                        or (their_host == host and not _alive(their_pid)))
                if not gone:
                    return (f"pid {their_pid} on {their_host} since "
                            f"{top.get('wavesql.lease.acquired_at')}")
                gen = gens[-1] + 1
            if self.store.claim(self.leases_db, f"{prefix}{gen:09d}", {
                    "wavesql.lease.name": name, "wavesql.lease.holder": me,
                    "wavesql.lease.host": host, "wavesql.lease.pid": str(pid),
                    "wavesql.lease.acquired_at": utc_now(), "wavesql.lease.state": "held",
                    "wavesql.lease.expires": repr(time.time() + seconds)}) is not None:
                for old in gens:  # superseded generations: nobody reads them again
                    with contextlib.suppress(Exception):
                        self.store.drop_view(self.leases_db, f"{prefix}{old:09d}")
                return gen
        return "it keeps changing hands"
