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

#: the Hadoop settings that reach GCS beyond ``fs.gs.*`` (Settings copies these too)
SETTING_PREFIXES = ("google.cloud.auth.null.enable",)

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
