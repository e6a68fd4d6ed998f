"""Local-disk primitives beyond ``os``: an atomic swap, and where a relative path leads.

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

from wavesql import storage

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


def escaping(raw: str, base_dir: str, roots: tuple[str, ...]) -> str | None:
    """Where the relative local path ``raw`` resolves against ``base_dir``, when that is
    outside every folder of ``roots`` (a query file's ``..`` reaching out of the file's
    folder and of the folder it is run from); None when inside one, when ``roots`` is empty
    (no rule) or when ``raw`` is absolute or a URI (the author said exactly where)."""
    if not roots or storage.scheme(raw) != "file" or raw.lower().startswith("file://") \
            or os.path.isabs(os.path.expanduser(raw)):
        return None
    resolved = os.path.normpath(os.path.join(os.path.abspath(base_dir), raw))
    for root in roots:
        root = os.path.normpath(os.path.abspath(root))
        if resolved == root or resolved.startswith(root.rstrip(os.sep) + os.sep):
            return None
    return resolved
