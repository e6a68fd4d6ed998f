"""``hdfs://`` for WaveSQL's own I/O: libhdfs where it loads, else WebHDFS.

Spark reaches HDFS through its own Hadoop client (a JVM library PySpark ships). WaveSQL's
own I/O runs in Python (the driver, and Spark's Python workers reading WAV samples), where
pyarrow's :class:`pyarrow.fs.HadoopFileSystem` needs libhdfs: a native library that comes
only with a Hadoop binary distribution (not with PySpark, not on PyPI or Maven Central),
plus a JVM and Hadoop's CLASSPATH in every Python worker. Where that is installed it is
used. Everywhere else WaveSQL speaks **WebHDFS**, the namenode's REST interface (on by
default since Hadoop 2.x, ``dfs.webhdfs.enabled``), through fsspec's ``webhdfs``
filesystem wrapped as a pyarrow filesystem: plain HTTP from Python, nothing to install on
the cluster, and the same files and permissions Spark sees.

Configured from the Spark session's Hadoop settings, as Spark's client is (the user sets
them once): the namenode's HTTP address is ``dfs.namenode.http-address`` (for an HA
nameservice ``dfs.namenode.http-address.<ns>.<nn>`` of the first of
``dfs.ha.namenodes.<ns>``; a wildcard host is the URI's host), HTTPS when
``dfs.http.policy`` is ``HTTPS_ONLY`` (``dfs.namenode.https-address``), ``hdfs:///path``
means ``fs.defaultFS``'s namenode. The user is ``HADOOP_USER_NAME`` or the login user, as
in Hadoop's simple authentication (Kerberos is not supported over WebHDFS here).

Writes are whole or not at all, as on local disk and object stores: the bytes go to a
hidden temporary name beside the target, then one RENAME with ``renameoptions=OVERWRITE``
(atomic in the namenode) puts them in place -- a reader never sees half a record.
"""

from __future__ import annotations

import datetime as _dt
import getpass
import io
import os
import uuid

#: the Hadoop settings that reach HDFS (Settings copies these from Spark's configuration)
SETTING_PREFIXES = ("fs.defaultFS", "dfs.namenode.http-address", "dfs.namenode.https-address",
                    "dfs.http.policy", "dfs.webhdfs.enabled", "dfs.nameservices",
                    "dfs.ha.namenodes.")

#: what to check when a namenode does not answer or refuses (errors' hints)
CONFIGURE = ("fs.defaultFS and dfs.namenode.http-address (WebHDFS, dfs.webhdfs.enabled), "
             "HADOOP_USER_NAME")

_DEFAULT_HTTP_PORT, _DEFAULT_HTTPS_PORT = 9870, 9871


def filesystem(kind: str, authority: str, settings):
    """A pyarrow filesystem for ``hdfs://authority`` (or ``viewfs://``)."""
    import pyarrow.fs as pafs

    if not authority:  # hdfs:///path: the default filesystem's namenode
        default = settings.get("fs.defaultFS") or ""
        if default.lower().startswith(kind + "://"):
            authority = default[len(kind) + 3:].strip("/")
    try:  # libhdfs, where a Hadoop distribution provides it (pyarrow's own HDFS client)
        return pafs.HadoopFileSystem.from_uri(f"{kind}://{authority}")
    except Exception as libhdfs_error:  # noqa: BLE001 - no libhdfs / no CLASSPATH here
        if kind != "hdfs":  # viewfs: a client-side mount table only libhdfs reads
            raise
        if (settings.get("dfs.webhdfs.enabled", "true") or "").lower() == "false":
            raise RuntimeError(f"libhdfs is not available ({libhdfs_error}) and WebHDFS "
                               "is disabled (dfs.webhdfs.enabled=false)") from None
    return pafs.PyFileSystem(WebHdfsHandler(_webhdfs(authority, settings)))


def http_address(authority: str, settings) -> tuple[str, int, bool]:
    """``(host, port, https)`` of the WebHDFS endpoint of the namenode ``authority``."""
    host = authority.rpartition("@")[2].split(":")[0] or "localhost"
    https = (settings.get("dfs.http.policy") or "").upper() == "HTTPS_ONLY"
    key = "dfs.namenode.https-address" if https else "dfs.namenode.http-address"
    namenodes = settings.get(f"dfs.ha.namenodes.{host}")
    address = settings.get(f"{key}.{host}.{namenodes.split(',')[0].strip()}") \
        if namenodes else settings.get(f"{key}.{host}")  # a nameservice's own address
    if address:
        return _host_port(address, host) + (https,)
    # the one address of a single namenode: the host it names if that is the URI's host
    # (or a wildcard), otherwise another namenode, found at the URI's host on that port
    address = settings.get(key)
    if not address:
        return host, _DEFAULT_HTTPS_PORT if https else _DEFAULT_HTTP_PORT, https
    at_host, port = _host_port(address, host)
    return (at_host if at_host == host else host), port, https


def _host_port(address: str, uri_host: str) -> tuple[str, int]:
    at_host, _, port = address.rpartition(":")
    if at_host in ("", "0.0.0.0", "[::]", "::"):  # the namenode listens everywhere
        at_host = uri_host
    return at_host, int(port)


def _webhdfs(authority: str, settings):
    from fsspec.implementations.webhdfs import WebHDFS

    host, port, https = http_address(authority, settings)
    user = os.environ.get("HADOOP_USER_NAME") or getpass.getuser()
    # skip_instance_cache: one client per (authority, settings), which storage caches
    fs = WebHDFS(host, port=port, user=user, use_https=https, skip_instance_cache=True)
    # requests waits forever by default: a namenode that does not answer within 10 s is
    # unreachable (STORAGE_UNREACHABLE), and a datanode's transfer gets 120 s
    request = fs.session.request
    fs.session.request = lambda *a, **kw: request(*a, timeout=kw.pop("timeout", (10, 120)),
                                                  **kw)
    return fs


def _handler_base():
    from pyarrow.fs import FSSpecHandler

    return FSSpecHandler


class WebHdfsHandler(_handler_base()):
    """pyarrow's FSSpecHandler over fsspec's WebHDFS, with modification times (WebHDFS
    reports them in ms; fsspec passes them through as ``modificationTime``) and atomic
    whole-file writes."""

    @staticmethod
    def _create_file_info(path, info):
        from pyarrow.fs import FileInfo, FileType

        kind = {"file": FileType.File, "directory": FileType.Directory}.get(info["type"],
                                                                           FileType.Unknown)
        ms = info.get("modificationTime")
        mtime = (_dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc)
                 if ms is not None else None)
        return FileInfo(path, kind, size=info["size"] if kind == FileType.File else None,
                        mtime=mtime)

    def open_output_stream(self, path, metadata):
        from pyarrow import PythonFile

        return PythonFile(_AtomicWrite(self.fs, path), mode="w")

    def open_append_stream(self, path, metadata):
        raise NotImplementedError("WaveSQL writes whole files to HDFS")


class _AtomicWrite(io.RawIOBase):
    """The bytes written, kept in memory and put in place at ``close``: CREATE under a
    hidden temporary name in the target's folder, then RENAME over the target (the
    namenode replaces it in one step). WaveSQL's own files are records and markers of a
    few KB; bulk data is written by Spark."""

    def __init__(self, fs, path: str):
        self.fs, self.path, self.buffer = fs, "/" + path.lstrip("/"), io.BytesIO()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        return self.buffer.write(data)

    def close(self) -> None:
        if self.closed:
            return
        folder, _, name = self.path.rpartition("/")
        tmp = f"{folder}/.{name}.{uuid.uuid4().hex}.tmp"
        try:
            self.fs.pipe_file(tmp, self.buffer.getvalue())
            answer = self.fs._call("RENAME", method="put", path=tmp, destination=self.path,
                                   renameoptions="OVERWRITE")
            if answer.status_code != 200:
                raise OSError(f"renaming {tmp} to {self.path} failed: {answer.text[:200]}")
        except BaseException:
            try:
                self.fs.rm(tmp)
            except Exception:  # noqa: BLE001 - the write's own error is the one to raise
                pass
            raise
        finally:
            super().close()
