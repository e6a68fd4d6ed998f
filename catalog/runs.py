"""The run history of query files (``wavesql run``, ``wavesql schedule``, ``wavesql runs``).

It lives in the catalog file (the ``runs`` table, format version 2) because a run is about
the catalog's objects and the scheduler needs one place every process writes with the same
transactions.
"""

from __future__ import annotations

import os

from .schema import utc_now
from .sqlite_file import CatalogFile


class RunHistory(CatalogFile):
    """The run-history operations of :class:`wavesql.catalog.Catalog`."""

    RUN_COLUMNS = ("id", "file", "trigger", "started_at", "ended_at", "status", "statements",
                   "rows_in", "rows_out", "rows_late", "error", "pid", "host")

    def start_run(self, file: str, trigger: str, *, status: str = "running",
                  error: str | None = None) -> int:
        """Record that a run of query file ``file`` began (``trigger``: ``run`` or
        ``schedule``); return its id. ``status="skipped"`` records a refused run, ended."""
        import socket

        now = utc_now()
        with self._write() as conn:
            cur = conn.execute(
                "INSERT INTO runs (file, trigger, started_at, ended_at, status, error, pid, host)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (file, trigger, now, None if status == "running" else now, status, error,
                 os.getpid(), socket.gethostname()))
            return int(cur.lastrowid)

    def finish_run(self, run_id: int, status: str, *, statements: int = 0,
                   rows_in: int | None = None, rows_out: int | None = None,
                   rows_late: int | None = None, error: str | None = None) -> None:
        """Record how run ``run_id`` ended."""
        with self._write() as conn:
            conn.execute(
                "UPDATE runs SET ended_at = ?, status = ?, statements = ?, rows_in = ?, "
                "rows_out = ?, rows_late = ?, error = ? WHERE id = ?",
                (utc_now(), status, statements, rows_in, rows_out, rows_late, error, run_id))

    def runs(self, file: str | None = None, limit: int | None = 20) -> list[dict]:
        """The run history, newest first (of ``file`` if given), as dicts of
        :attr:`RUN_COLUMNS`."""
        sql = f"SELECT {', '.join(self.RUN_COLUMNS)} FROM runs"
        params: list = []
        if file is not None:
            sql += " WHERE file = ?"
            params.append(file)
        sql += " ORDER BY id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        with self._read() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [dict(zip(self.RUN_COLUMNS, row)) for row in rows]
