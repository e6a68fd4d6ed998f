"""Push a signal program into the scan that reads its samples.

Before (``EXPLAIN IR``)::

    SignalStage program[_sig0=seg_rms(lowpass(ch1, 1000.0))]
      SignalScan mic [wav ...]

After::

    SignalScan mic [wav ...] program[_sig0=seg_rms(lowpass(ch1, 1000.0))]
"""

from __future__ import annotations

import dataclasses

from .. import ir


def push_program_into_scan(rel: ir.Relation) -> ir.Relation:
    """SignalStage over a SignalScan (WAV files, Kafka sample blocks, table rows) -> the
    scan evaluates the program itself.

    The samples then never cross into the JVM: the scan decodes them in Python and hands
    Spark only the program's outputs for the rows its filters keep (XStream's lesson that
    passing whole segments, not samples, is what makes signal processing fast).
    """
    if (isinstance(rel, ir.SignalStage) and isinstance(rel.input, ir.SignalScan)
            and rel.input.program is None):
        return dataclasses.replace(rel.input, program=rel.program, schema=rel.schema)
    return rel
