"""``gs://`` for WaveSQL's own I/O: pyarrow's GcsFileSystem, configured from the same Hadoop
settings as Spark's GCS connector (Google's ``gcs-connector``), so a user sets them once.

=====================================  ==============================================
Hadoop setting (connector 3.x / 2.x)   pyarrow's GcsFileSystem
=====================================  ==============================================
``fs.gs.storage.root.url``             ``scheme`` and ``endpoint_override`` (an emulator,
(``fs.gs.storage.http.root.url``)      a private endpoint); Google's own when unset
``fs.gs.auth.type=UNAUTHENTICATED``    ``anonymous=True``
(``google.cloud.auth.null.enable``)
``fs.gs.project.id``                   ``project_id``
=====================================  ==============================================

Other credentials are Google's application-default chain, in pyarrow as in the connector
(``GOOGLE_APPLICATION_CREDENTIALS``, the metadata server): a key file named only in
``fs.gs.auth.service.account.json.keyfile`` is not read here -- name it in that
environment variable too.
"""

from __future__ import annotations

import datetime as _dt
import re

#: the Hadoop settings that reach GCS (Settings copies these): the connector's, and 2.x's
#: switch for no credentials
SETTING_PREFIXES = ("fs.gs.", "google.cloud.auth.null.enable")

#: what to check when the store does not answer or refuses (errors' hints)
CONFIGURE = ("fs.gs.storage.root.url, fs.gs.auth.type (or GOOGLE_APPLICATION_CREDENTIALS), "
             "fs.gs.project.id")

#: how long one operation retries a store that does not answer before it is
#: STORAGE_UNREACHABLE (pyarrow's default is 15 minutes)
RETRY_SECONDS = 10


def filesystem(settings):
    import pyarrow.fs as pafs

    kwargs: dict = {"retry_time_limit": _dt.timedelta(seconds=RETRY_SECONDS)}
    root = settings.get("fs.gs.storage.root.url") or settings.get("fs.gs.storage.http.root.url")
    if root:
        m = re.match(r"^(https?)://([^/]+)", root.strip())
        if not m:
            raise ValueError(f"fs.gs.storage.root.url `{root}` is not an http(s):// URL")
        kwargs["scheme"], kwargs["endpoint_override"] = m.group(1), m.group(2)
    auth = (settings.get("fs.gs.auth.type") or "").upper()
    null = (settings.get("google.cloud.auth.null.enable") or "").lower() == "true"
    if auth == "UNAUTHENTICATED" or null:
        kwargs["anonymous"] = True
    if settings.get("fs.gs.project.id"):
        kwargs["project_id"] = settings.get("fs.gs.project.id")
    return pafs.GcsFileSystem(**kwargs)


def children(fs, path: str) -> list:
    """What is directly in the folder ``path``, as pyarrow FileInfos. pyarrow's own
    listing of a folder reports a subfolder only where a marker object (``a/``) stands for
    it, and Spark's connector leaves none for most folders it writes into (``job=x/``
    under a sink): the subfolders are the first parts of the names below ``path``, from
    one listing of the whole subtree."""
    import pyarrow.fs as pafs

    base = path.rstrip("/") + "/"
    found: dict[str, bool] = {}
    for info in fs.get_file_info(pafs.FileSelector(path, allow_not_found=True,
                                                   recursive=True)):
        head, sep, _ = info.path[len(base):].partition("/")
        if head:
            found[head] = found.get(head, False) or bool(sep) or \
                info.type == pafs.FileType.Directory
    return [pafs.FileInfo(base + name, pafs.FileType.Directory if is_dir else
                          pafs.FileType.File) for name, is_dir in found.items()]
