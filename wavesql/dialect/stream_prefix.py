"""``STREAM ...``: the statement that runs a query continuously, read where the REPL and
query files meet it (before the query after it is parsed).

::

    STREAM <query>                               the REPL: micro-batches shown until Ctrl-C
    STREAM BACKGROUND <query>                    the REPL: behind the prompt
    STREAM REAL-TIME INTO <kafka sink> <query>   Spark's real-time mode into a Kafka sink:
                                                 behind the REPL's prompt, or a query file
                                                 run as a service (wavesql/services.py)

No WaveSQL or Spark statement starts with the word STREAM (``CREATE STREAM`` and
``ISTREAM (...)`` do not match), so the prefix is unambiguous. It is read with a regular
expression over the statement's text -- not by the sqlglot dialect -- because what follows
it is an ordinary query, parsed (with its positions) once the prefix is blanked out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from wavesql.errors import Span

__all__ = ["STREAM_PREFIX", "StreamPrefix", "stream_prefix"]

#: The prefix of one statement's text: group 1 ``STREAM``, 2 ``BACKGROUND``, 3 ``REAL-TIME``
#: (or ``REALTIME``), 4 the sink's name; ``match.end()`` is where the query begins.
STREAM_PREFIX = re.compile(r"\A(\s*STREAM\s+)(BACKGROUND\s+)?(?:(REAL-?TIME)\s+INTO\s+(\w+)\s+)?",
                           re.IGNORECASE)


@dataclass(frozen=True)
class StreamPrefix:
    """A statement's ``STREAM`` prefix, its offsets in the text it was found in."""

    background: bool
    real_time: bool
    sink: str | None  # STREAM REAL-TIME INTO <sink>
    sink_span: Span | None
    span: Span  # the prefix itself
    query_start: int  # where the query after it begins

    @property
    def spelling(self) -> str:
        if self.real_time:
            return "STREAM REAL-TIME INTO"
        return "STREAM BACKGROUND" if self.background else "STREAM"


def stream_prefix(text: str, start: int = 0, end: int | None = None) -> StreamPrefix | None:
    """The ``STREAM`` prefix of the statement ``text[start:end]`` (None: it has none).

    >>> p = stream_prefix("STREAM REAL-TIME INTO alarms SELECT k FROM ev")
    >>> p.real_time, p.sink, p.query_start
    (True, 'alarms', 29)
    >>> stream_prefix("CREATE STREAM s (x INT) FROM 'in/' FORMAT json") is None
    True
    """
    piece = text[start:end]
    match = STREAM_PREFIX.match(piece)
    if match is None:
        return None
    sink_span = (Span(start + match.start(4), start + match.end(4)) if match.group(4)
                 else None)
    return StreamPrefix(bool(match.group(2)), bool(match.group(3)), match.group(4), sink_span,
                        Span(start + len(piece) - len(piece.lstrip()),
                             start + len(piece[:match.end()].rstrip())),
                        start + match.end())
