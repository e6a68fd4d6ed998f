"""Where WaveSQL's own bytes live: one filesystem layer over local disk and object stores.

Spark reads and writes a stream's files through its own connectors (Hadoop's S3A, ABFS,
GCS and HDFS filesystems). Everything WaveSQL reads or writes *itself* -- WAV headers and
samples in the tasks, Parquet chunks of the direct passes, file listings, progress records,
markers, signal state -- goes through this module, so that a location is a URI everywhere:

=====================  =================================================================
location               filesystem (pyarrow's)
=====================  =================================================================
``/a/b``, ``a/b``      local disk (relative paths are made absolute when stored)
``file:///a/b``        local disk
``s3a://bkt/key``      S3 or any S3-protocol store (also ``s3://``, ``s3n://``)
``gs://bkt/key``       Google Cloud Storage
``abfss://c@acct.dfs.core.windows.net/key``   Azure Data Lake Storage Gen2 (also ``abfs``)
``hdfs://nn:8020/key`` HDFS: libhdfs where it loads, else WebHDFS (storage/hdfs.py says why)
=====================  =================================================================

**One configuration.** A user configures storage once, the way Spark wants it (the Hadoop
settings ``fs.s3a.endpoint``, ``fs.s3a.access.key``, ``fs.s3a.path.style.access``, ...,
given as ``spark.hadoop.*`` or set on the Hadoop configuration). :meth:`Settings.from_spark`
copies the settings that matter here from the session's Hadoop configuration, and the
filesystems are built from them: endpoint (with ``http``/``https`` from the URL or
``fs.s3a.connection.ssl.enabled``), region, path-style addressing, static keys or the
anonymous provider, per-bucket overrides (``fs.s3a.bucket.<name>.*``). Without keys the
AWS default chain applies (environment, ``~/.aws``, instance profile), as in S3A. The
settings travel to Spark's Python tasks with the work (:func:`use` there): a task never
asks the driver.

**HDFS** without libhdfs (a native library only a Hadoop distribution brings; pyarrow's
HadoopFileSystem needs it in every Python worker) goes over WebHDFS, the namenode's REST
interface, configured from ``dfs.namenode.http-address``: see :mod:`wavesql.storage.hdfs`.

**Errors** are :class:`wavesql.errors.WaveSQLError` naming the location and what to
configure: ``UNSUPPORTED_SCHEME``, ``STORAGE_UNREACHABLE``, ``MISSING_BUCKET``,
``STORAGE_DENIED`` -- never a C++ or Java stack trace.

Local paths stay plain paths (not ``file://`` URIs) through this module, and the local
operations are the ``os`` ones: nothing changes for local data, and its speed is the
operating system's.
"""

from __future__ import annotations

import functools
import glob as _glob
import io
import os
import posixpath
import re
import tempfile
from dataclasses import dataclass
from typing import Iterable, Mapping

from wavesql.errors import WaveSQLError
from wavesql.storage import gcs, hdfs

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
S3_SCHEMES = ("s3a", "s3", "s3n")
REMOTE_SCHEMES = (*S3_SCHEMES, "gs", "gcs", "abfs", "abfss", "hdfs", "viewfs")


def scheme(location: str) -> str:
    """``"s3a"`` for ``s3a://b/k``; ``"file"`` for a local path or ``file://`` URI."""
    m = _SCHEME.match(location)
    return m.group(1).lower() if m else "file"


def is_remote(location: str) -> bool:
    """Whether ``location`` is anywhere but this machine's disk."""
    return scheme(location) != "file"


def normalize(raw: str, base_dir: str = ".") -> str:
    """A location as the catalog stores it: a URI with a scheme as given (``file://`` made a
    plain path), a local path made absolute against ``base_dir`` (``~`` expanded)."""
    s = scheme(raw)
    if s == "file":
        path = raw[len("file://"):] if raw.lower().startswith("file://") else raw
        return os.path.abspath(os.path.join(base_dir, os.path.expanduser(path)))
    return raw


def _split(location: str) -> tuple[str, str, str]:
    """``("s3a", "bucket", "a/b")`` for ``s3a://bucket/a/b/``."""
    kind = scheme(location)
    authority, _, key = location[len(kind) + 3:].partition("/")
    return kind, authority, key.strip("/")


def join(location: str, *parts: str) -> str:
    if not is_remote(location):
        return os.path.join(location, *parts)
    return "/".join([location.rstrip("/"), *(p.strip("/") for p in parts)])


def basename(location: str) -> str:
    if not is_remote(location):
        return os.path.basename(location)
    return posixpath.basename(_split(location)[2])


def dirname(location: str) -> str:
    if not is_remote(location):
        return os.path.dirname(location)
    kind, authority, key = _split(location)
    return "/".join(filter(None, [f"{kind}://{authority}", posixpath.dirname(key)]))


def has_magic(location: str) -> bool:
    """Whether the location is a glob pattern (``*``, ``?`` or ``[...]``)."""
    return _glob.has_magic(location)


# ---------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class Settings:
    """The Hadoop settings that reach storage (``fs.s3a.*``, ``fs.azure.*``, ``fs.gs.*``),
    as sorted pairs: small, hashable, picklable -- the form they travel to tasks in."""

    hadoop: tuple[tuple[str, str], ...] = ()

    _PREFIXES = ("fs.s3a.", "fs.azure.", *gcs.SETTING_PREFIXES, *hdfs.SETTING_PREFIXES)

    @classmethod
    def of(cls, mapping: Mapping[str, str]) -> "Settings":
        return cls(tuple(sorted((k, str(v)) for k, v in mapping.items()
                                if k.startswith(cls._PREFIXES))))

    @classmethod
    def from_spark(cls, spark) -> "Settings":
        """The settings of ``spark``'s Hadoop configuration (what its S3A connector uses).
        Empty where the session has no JVM to ask (Spark Connect): the AWS default chain
        and environment then apply."""
        try:
            conf = spark.sparkContext._jsc.hadoopConfiguration()
        except Exception:  # noqa: BLE001 - Spark Connect: no JVM here
            return cls()
        import json

        found: dict[str, str] = {}
        try:  # one call per prefix: iterating a Java map costs a round trip per entry
            mapper = spark.sparkContext._jvm.com.fasterxml.jackson.databind.ObjectMapper()
            props = {prefix: json.loads(mapper.writeValueAsString(conf.getPropsWithPrefix(prefix)))
                     for prefix in cls._PREFIXES}
        except Exception:  # noqa: BLE001 - no Jackson on this JVM: entry by entry
            props = {prefix: dict(conf.getPropsWithPrefix(prefix)) for prefix in cls._PREFIXES}
        for prefix, entries in props.items():
            for key, value in entries.items():
                found[prefix + key] = value
        return cls.of(found)

    def get(self, key: str, default: str | None = None) -> str | None:
        for k, v in self.hadoop:
            if k == key:
                return v
        return default

    def to_json(self) -> str:
        import json

        return json.dumps(dict(self.hadoop), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> "Settings":
        import json

        return cls.of(json.loads(text)) if text else cls()


_current = Settings()


def use(settings: Settings | None) -> None:
    """Make ``settings`` the ones this process reaches storage with (the driver at each
    statement; a task before it reads)."""
    global _current
    if settings is not None and settings != _current:
        _current = settings


def current() -> Settings:
    return _current


# ---------------------------------------------------------------------------- filesystems
def _s3(bucket: str, settings: Settings):
    import pyarrow.fs as pafs

    def opt(name: str, default: str | None = None) -> str | None:
        return settings.get(f"fs.s3a.bucket.{bucket}.{name}", settings.get(f"fs.s3a.{name}",
                                                                             default))

    kwargs: dict = {"connect_timeout": 5.0, "request_timeout": 30.0,
                    "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=3)}
    endpoint = opt("endpoint")
    ssl = (opt("connection.ssl.enabled", "true") or "true").lower() == "true"
    if endpoint:
        m = re.match(r"^(https?)://(.*?)/?$", endpoint)
        kwargs["scheme"], kwargs["endpoint_override"] = (
            (m.group(1), m.group(2)) if m else ("https" if ssl else "http", endpoint))
    region = opt("endpoint.region") or opt("region")
    if region:
        kwargs["region"] = region
    kwargs["force_virtual_addressing"] = (opt("path.style.access", "false") or "").lower() \
        != "true" and bool(endpoint)
    provider = opt("aws.credentials.provider") or ""
    access, secret = opt("access.key"), opt("secret.key")
    if "Anonymous" in provider:
        kwargs["anonymous"] = True
    elif access and secret:
        kwargs.update(access_key=access, secret_key=secret)
        if opt("session.token"):
            kwargs["session_token"] = opt("session.token")
    return pafs.S3FileSystem(**kwargs)


@functools.lru_cache(maxsize=64)
def _filesystem(kind: str, authority: str, settings: Settings):
    import pyarrow.fs as pafs

    if kind in S3_SCHEMES:
        return _s3(authority, settings)
    if kind in ("gs", "gcs"):
        return gcs.filesystem(settings)
    if kind in ("abfs", "abfss"):
        container, _, host = authority.partition("@")
        account = host.split(".", 1)[0]
        key = settings.get(f"fs.azure.account.key.{host}")
        return pafs.AzureFileSystem(account_name=account, account_key=key)
    if kind in ("hdfs", "viewfs"):
        return hdfs.filesystem(kind, authority, settings)
    raise KeyError(kind)


def resolve(location: str, settings: Settings | None = None):
    """``(pyarrow filesystem, path within it)`` for a remote location.

    Raises ``UNSUPPORTED_SCHEME`` for a scheme with no filesystem here."""
    kind, authority, key = _split(location)
    try:
        fs = _filesystem(kind, authority, settings or _current)
    except KeyError:
        raise WaveSQLError(
            "UNSUPPORTED_SCHEME", f"`{location}`: no filesystem for `{kind}://` locations",
            hint="WaveSQL reads local paths, file://, s3a:// (s3://), gs://, abfss:// and "
                 "hdfs:// locations") from None
    except Exception as e:  # noqa: BLE001 - pyarrow built without that filesystem, no libhdfs
        raise WaveSQLError(
            "UNSUPPORTED_SCHEME", f"`{location}`: the `{kind}://` filesystem is not "
            f"available here ({_first_line(e)})",
            hint="install pyarrow with that filesystem (for hdfs://, enable WebHDFS or "
                 "install libhdfs with Hadoop's CLASSPATH)") from None
    if kind in ("abfs", "abfss"):
        path = authority.partition("@")[0] + "/" + key
    elif kind in ("hdfs", "viewfs"):
        path = "/" + key
    else:
        path = authority + "/" + key
    return fs, path.rstrip("/") or "/"


def _uri(location: str, path: str) -> str:
    """The location of ``path`` (a path of ``location``'s filesystem) in ``location``'s
    scheme and authority (``s3a://b/x`` lists ``b/x/y`` as ``s3a://b/x/y``)."""
    kind, authority, _ = _split(location)
    if kind in ("abfs", "abfss"):
        return f"{kind}://{authority}/{path.partition('/')[2]}"
    if kind in ("hdfs", "viewfs"):
        return f"{kind}://{authority}{path}"
    return f"{kind}://{path}"


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def translate(error: BaseException, location: str, doing: str) -> WaveSQLError:
    """A storage failure as a WaveSQLError with a stable code, naming the location and what
    to configure (pyarrow's message says what the store answered)."""
    if isinstance(error, WaveSQLError):
        return error
    text = str(error)
    low = text.lower()
    kind = scheme(location)
    conf = ("fs.s3a.endpoint, fs.s3a.access.key / fs.s3a.secret.key (or the AWS default "
            "chain), fs.s3a.path.style.access" if kind in S3_SCHEMES else
            hdfs.CONFIGURE if kind == "hdfs" else gcs.CONFIGURE if kind in ("gs", "gcs") else
            "the filesystem's settings in Spark's Hadoop configuration")
    if "nosuchbucket" in low or "bucket does not exist" in low or "no such bucket" in low \
            or "containernotfound" in low:
        return WaveSQLError("MISSING_BUCKET", f"`{location}`: the bucket does not exist "
                            f"({doing})", hint="create it, or fix the bucket's name")
    if any(s in low for s in ("access denied", "accessdenied", "access_denied", "forbidden",
                              "403", "permission denied", "invalidaccesskeyid",
                              "signaturedoesnotmatch", "authorization")):
        return WaveSQLError("STORAGE_DENIED", f"`{location}`: the store refused the "
                            f"credentials ({doing}): {_first_line(error)}",
                            hint=f"check {conf}")
    if any(s in low for s in ("curl", "connect", "network", "timed out", "timeout",
                              "resolve host", "unreachable")):
        return WaveSQLError("STORAGE_UNREACHABLE", f"`{location}`: the store did not "
                            f"answer ({doing}): {_first_line(error)}", hint=f"check {conf}")
    if isinstance(error, FileNotFoundError) or "not found" in low or "nosuchkey" in low \
            or "does not exist" in low:
        return WaveSQLError("MISSING_PATH", f"`{location}` does not exist ({doing})",
                            hint="create it first or fix the location")
    return WaveSQLError("STORAGE_ERROR", f"`{location}`: {doing} failed: "
                        f"{_first_line(error)}", hint=f"check {conf}")


# ---------------------------------------------------------------------------- operations
@dataclass(frozen=True)
class Entry:
    """A file: its location, size in bytes and modification time (ns since 1970)."""

    location: str
    size: int
    mtime_ns: int
    #: (device, inode) of a local file: equal for two names of one file; None remotely
    inode: tuple[int, int] | None = None


def _info(location: str):
    fs, path = resolve(location)
    try:
        return fs.get_file_info(path)
    except Exception as e:  # noqa: BLE001 - see translate
        raise translate(e, location, "reading its status") from None


def file_type(location: str) -> str:
    """``"file"``, ``"dir"`` or ``"missing"``."""
    if not is_remote(location):
        return ("dir" if os.path.isdir(location) else "file" if os.path.isfile(location)
                else "missing")
    import pyarrow.fs as pafs

    t = _info(location).type
    found = {pafs.FileType.File: "file", pafs.FileType.Directory: "dir"}.get(t, "missing")
    kind, authority, key = _split(location)
    if found == "missing" and kind in (*S3_SCHEMES, "gs", "gcs") and key:
        # S3 and GCS answer "no such key" for a key of a missing bucket too: say which
        if _info(f"{kind}://{authority}").type == pafs.FileType.NotFound:
            raise WaveSQLError("MISSING_BUCKET", f"`{location}`: bucket `{authority}` does "
                               "not exist", hint="create it, or fix the bucket's name")
    return found


def exists(location: str) -> bool:
    if has_magic(location):
        return bool(glob(location))
    return file_type(location) != "missing"


def is_dir(location: str) -> bool:
    return file_type(location) == "dir"


def is_file(location: str) -> bool:
    return file_type(location) == "file"


def stat(location: str) -> Entry:
    """The file's size and modification time (``FileNotFoundError`` when missing)."""
    if not is_remote(location):
        st = os.stat(location)
        return Entry(location, st.st_size, st.st_mtime_ns, (st.st_dev, st.st_ino))
    info = _info(location)
    if info.size is None:
        raise FileNotFoundError(location)
    mtime = info.mtime_ns if info.mtime_ns is not None else 0
    return Entry(location, info.size, mtime)


def list_files(location: str, *, recursive: bool = False,
               suffix: str | tuple[str, ...] | None = None) -> list[Entry]:
    """The files in the folder ``location`` (case-insensitive ``suffix`` filter), sorted by
    location; empty when the folder does not exist."""
    suffixes = tuple(s.lower() for s in ((suffix,) if isinstance(suffix, str) else
                                          (suffix or ())))
    keep = (lambda name: name.lower().endswith(suffixes)) if suffixes else (lambda _: True)
    out: list[Entry] = []
    if not is_remote(location):
        if not os.path.isdir(location):
            return []
        walk = os.walk(location) if recursive else [(location, None, None)]
        for folder, _, _ in walk:
            with os.scandir(folder) as entries:
                for e in entries:
                    if keep(e.name) and e.is_file():
                        st = e.stat()
                        out.append(Entry(e.path, st.st_size, st.st_mtime_ns))
        return sorted(out, key=lambda e: e.location)
    import pyarrow.fs as pafs

    fs, path = resolve(location)
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True,
                                                   recursive=recursive))
    except Exception as e:  # noqa: BLE001 - see translate
        raise translate(e, location, "listing it") from None
    for info in infos:
        if info.type == pafs.FileType.File and keep(info.base_name):
            out.append(Entry(_uri(location, info.path), info.size or 0, info.mtime_ns or 0))
    return sorted(out, key=lambda e: e.location)


def glob(pattern: str) -> list[Entry]:
    """The files matching a glob pattern (``*``, ``?``, ``[...]``; ``**`` crosses folders),
    sorted by location."""
    if not is_remote(pattern):
        out = []
        for p in sorted(_glob.glob(pattern, recursive=True)):
            if os.path.isfile(p):
                st = os.stat(p)
                out.append(Entry(p, st.st_size, st.st_mtime_ns))
        return out
    kind = scheme(pattern)
    head, parts = pattern[:len(kind) + 3], pattern[len(kind) + 3:].split("/")
    fixed = []
    for part in parts:
        if _glob.has_magic(part):
            break
        fixed.append(part)
    base = head + "/".join(fixed)
    if len(fixed) == len(parts):
        return [stat(base)] if is_file(base) else []
    regex = _glob_regex(pattern)
    deep = len(parts) - len(fixed) > 1 or "**" in pattern
    return [e for e in list_files(base, recursive=deep) if regex.fullmatch(e.location)]


def _glob_regex(pattern: str) -> "re.Pattern":
    """A glob as Python's ``glob(recursive=True)`` reads it: ``*`` and ``?`` stay within a
    folder, ``**/`` is any number of folders (none included), ``[...]`` a character class."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2:]:
            j = pattern.index("]", i + 2)
            body = pattern[i + 1:j]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = j + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def files(location: str, suffix: str | tuple[str, ...] | None = None) -> list[Entry]:
    """The files a location names: itself, a folder's files (``suffix``-filtered, not
    recursive) or a glob's files."""
    if has_magic(location):
        return glob(location)
    kind = file_type(location)
    if kind == "file":
        return [stat(location)]
    return list_files(location, suffix=suffix) if kind == "dir" else []


def open_input(location: str, buffer_size: int | None = None):
    """A seekable binary file for reading (``read``, ``readinto``, ``seek``).

    Unbuffered by default: large ``readinto`` calls go straight into the caller's array (one
    ranged GET each on an object store). ``buffer_size`` suits many small reads (a header):
    one request serves them all."""
    if not is_remote(location):
        return open(location, "rb", buffering=buffer_size or 0)
    fs, path = resolve(location)
    try:
        f = fs.open_input_file(path)
    except FileNotFoundError:
        raise FileNotFoundError(location) from None
    except Exception as e:  # noqa: BLE001 - see translate
        raise translate(e, location, "opening it") from None
    return io.BufferedReader(f, buffer_size) if buffer_size else f


def file_size(f) -> int:
    """The size in bytes of a file from :func:`open_input`."""
    raw = getattr(f, "raw", f)
    if hasattr(raw, "fileno") and not hasattr(raw, "size"):
        return os.fstat(raw.fileno()).st_size
    return raw.size()


def read_bytes(location: str) -> bytes:
    if not is_remote(location):
        with open(location, "rb") as f:
            return f.read()
    with open_input(location) as f:
        return f.read()


def read_text(location: str) -> str:
    """A whole file as UTF-8 text (``FileNotFoundError`` when it is missing)."""
    return read_bytes(location).decode("utf-8")


def write_text(location: str, text: str) -> None:
    """:func:`write_bytes` of UTF-8 text: whole or not at all."""
    write_bytes(location, text.encode("utf-8"))


def children(location: str) -> list[tuple[str, bool]]:
    """``(name, is_folder)`` of what is directly in the folder ``location``, sorted by
    name; empty when it does not exist."""
    if not is_remote(location):
        try:
            with os.scandir(location) as entries:
                return sorted((e.name, e.is_dir()) for e in entries)
        except (FileNotFoundError, NotADirectoryError):
            return []
    import pyarrow.fs as pafs

    fs, path = resolve(location)
    try:
        infos = gcs.children(fs, path) if scheme(location) in ("gs", "gcs") else \
            fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except Exception as e:  # noqa: BLE001 - see translate
        raise translate(e, location, "listing it") from None
    return sorted((i.base_name, i.type == pafs.FileType.Directory) for i in infos)


def write_bytes(location: str, data: bytes) -> None:
    """Write a whole file so that readers see the old content or the new, never a part:
    locally a temporary file renamed over the target; on an object store one PUT (an
    object appears whole or not at all)."""
    if not is_remote(location):
        folder = os.path.dirname(location) or "."
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, location)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return
    fs, path = resolve(location)
    try:
        with fs.open_output_stream(path) as f:
            f.write(data)
    except Exception as e:  # noqa: BLE001 - see translate
        raise translate(e, location, "writing it") from None


def delete(location: str, *, recursive: bool = False, missing_ok: bool = True) -> None:
    """Remove a file (or, ``recursive``, a folder and everything in it)."""
    if not is_remote(location):
        import shutil

        if os.path.isdir(location) and recursive:
            shutil.rmtree(location)
        elif os.path.lexists(location):
            os.unlink(location)
        elif not missing_ok:
            raise FileNotFoundError(location)
        return
    import pyarrow.fs as pafs

    fs, path = resolve(location)
    try:
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.Directory and recursive:
            fs.delete_dir_contents(path, missing_dir_ok=True)  # GCS: no marker to delete
            if fs.get_file_info(path).type == pafs.FileType.Directory:
                fs.delete_dir(path)  # a folder of its own (local, HDFS, a marker object)
        elif info.type == pafs.FileType.File:
            fs.delete_file(path)
        elif not missing_ok:
            raise FileNotFoundError(location)
    except FileNotFoundError:
        raise
    except Exception as e:  # noqa: BLE001 - see translate
        raise translate(e, location, "deleting it") from None


def check_reachable(locations: Iterable[str]) -> None:
    """Raise the storage error of the first remote location whose store cannot be reached
    or refuses us (a missing object is fine: it may be created later)."""
    for location in locations:
        if is_remote(location):
            file_type(location)
