"""Leases in the catalog: who holds a named job, where no file lock exists.

The kernel's ``flock`` keeps two runs of a job on local disk apart; a job whose sink is in
an object store has no lock to take there, so the catalog every such process uses keeps a
lease instead (the ``leases`` table, format version 3).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Iterator

from wavesql.errors import WaveSQLError

from .schema import utc_now
from .sqlite_file import CatalogFile


def _alive(pid: int) -> bool:
    """Whether process ``pid`` of this host exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


class Leases(CatalogFile):
    """The lease operations of :class:`wavesql.catalog.Catalog`."""

    #: Seconds a lease lasts unless renewed; its holder renews it every third of that.
    LEASE_SECONDS = 30.0

    @contextlib.contextmanager
    def lease(self, name: str, what: str, hint: str, *, seconds: float | None = None,
              wait: float = 0.0) -> Iterator[None]:
        """Hold the lease ``name`` while the block runs, or raise ``RUN_IN_PROGRESS`` (after
        up to ``wait`` seconds) if a live holder has it.

        The kernel's ``flock`` is what keeps two runs of a job on local disk apart; on an
        object store there is no lock to take, so the catalog every such process uses keeps
        the lease instead. A holder renews it (a daemon thread) while it works; a lease
        whose holder died is free again once it expires, or at once when its holder was a
        process of this host that no longer exists (a SIGKILLed run)."""
        import socket
        import uuid

        seconds = self.LEASE_SECONDS if seconds is None else float(seconds)
        me, host, pid = uuid.uuid4().hex, socket.gethostname(), os.getpid()
        deadline = time.monotonic() + wait
        while True:
            holder = self._try_lease(name, me, host, pid, seconds)
            if holder is None:
                break
            if time.monotonic() >= deadline:
                raise WaveSQLError("RUN_IN_PROGRESS", f"{what} is already running ({holder})",
                                   hint=hint)
            time.sleep(0.2)
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(seconds / 3):
                try:
                    with self._write() as conn:
                        conn.execute("UPDATE leases SET expires = ? WHERE name = ? AND holder = ?",
                                     (time.time() + seconds, name, me))
                except Exception:  # noqa: BLE001 - a busy catalog: the next round renews
                    continue

        renewer = threading.Thread(target=renew, name=f"wavesql-lease-{name}", daemon=True)
        renewer.start()
        try:
            yield
        finally:
            stop.set()
            renewer.join(timeout=5)
            with self._write() as conn:
                conn.execute("DELETE FROM leases WHERE name = ? AND holder = ?", (name, me))

    def _try_lease(self, name: str, me: str, host: str, pid: int, seconds: float) -> str | None:
        """Take the lease if it is free (or its holder is gone); else who holds it."""
        with self._write() as conn:
            row = conn.execute("SELECT host, pid, acquired_at, expires FROM leases "
                               "WHERE name = ?", (name,)).fetchone()
            if row is not None:
                their_host, their_pid, since, expires = row
                gone = expires < time.time() or (their_host == host and not _alive(their_pid))
                if not gone:
                    return f"pid {their_pid} on {their_host} since {since}"
            conn.execute("INSERT OR REPLACE INTO leases (name, holder, host, pid, acquired_at, "
                         "expires) VALUES (?, ?, ?, ?, ?, ?)",
                         (name, me, host, pid, utc_now(), time.time() + seconds))
        return None
