"""WAV files as blocks of samples: header parsing, fast decoding, writing, file timelines.

This is the sample reader under the WAV data source (no Spark import here). It turns a
RIFF/WAVE (or RF64/BW64) file into ``(start_sample, samples[channels, n])`` blocks that become
SigSegs (:mod:`wavesql.udfs.sigseg`), and places a directory of files on one sample timeline.

Modules (their docstrings hold the documented choices):

- :mod:`.header`: :func:`read_info` (what a header declares: :class:`WavInfo`), the sample
  formats, :class:`WavError` and its codes; sizes we do not trust, truncation.
- :mod:`.decode`: :func:`read_frames`, :func:`iter_segments` -- samples as floats, fast;
  the scaling of integer PCM.
- :mod:`.write`: :func:`write_wav`.
- :mod:`.timeline`: :func:`plan_timeline` (files on one sample timeline, in natural name
  order or by the start times in their names), :func:`check_declared`,
  :func:`parse_file_timestamp`.

Error codes (:class:`WavError`): ``CORRUPT_FILE``, ``TRUNCATED_FILE``,
``UNSUPPORTED_ENCODING``, ``RATE_MISMATCH``, ``CHANNEL_MISMATCH``, ``OVERLAPPING_FILES``,
``INVALID_FILE_TIMESTAMP``. Missing files raise the usual :class:`OSError`.
"""

from .decode import iter_segments, read_frames
from .header import SAMPLE_FORMATS, WavError, WavInfo, read_info
from .timeline import FilePlacement, check_declared, parse_file_timestamp, plan_timeline
from .write import write_wav

__all__ = ["WavError", "WavInfo", "FilePlacement", "read_info", "read_frames", "iter_segments",
           "write_wav", "check_declared", "plan_timeline", "parse_file_timestamp",
           "SAMPLE_FORMATS"]
