"""Local-disk primitives the commit protocols need beyond ``os``.

:func:`exchange` swaps two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``), so a
replace-mode job's new output takes the place of its old one with no moment where neither
is there -- ``os.replace`` cannot move a folder onto a non-empty one, and two renames leave
such a moment, which a kill could make last until the next run.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _renameat2():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):  # not glibc >= 2.28 (or not Linux)
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                   ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_SWAP = _renameat2()


def exchange(a: str, b: str) -> bool:
    """Swap the paths ``a`` and ``b`` (both must exist) atomically; False where this
    system or filesystem cannot (the caller then falls back to two renames)."""
    if _SWAP is None:
        return False
    if _SWAP(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False  # a filesystem without RENAME_EXCHANGE (or an old kernel)
    raise OSError(err, os.strerror(err), a, None, b)
