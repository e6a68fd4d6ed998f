"""Continuous queries over unbounded streams: progress, final results, late data.

Two runners share one contract (every output row carries ``_progress`` and ``_final``; late,
timeless and malformed rows are captured and counted; results equal the batch query's once
final; a micro-batch is committed whole or redone):

* **On Spark's state store** (:mod:`.stateful`): windowed aggregates over one stream --
  ``[RANGE r SLIDE s]`` under RSTREAM / ISTREAM / DSTREAM (``EMIT CHANGES`` too), and
  ``[RANGE r]``, ``[NOW]``, ``[ROWS n]``, ``[PARTITION BY k ROWS n]`` under ISTREAM /
  DSTREAM. A ``transformWithStateInPandas`` processor keeps partial aggregates per pane (or
  the rows of the window) per bucket of keys in the RocksDB state store -- small partials
  for algebraic aggregates, the values themselves for holistic ones (``percentile``,
  ``collect_list``, ...: below); progress is
  Spark's watermark; a micro-batch touches what arrived and the windows that closed.
  OVER windows over one stream (bounded PRECEDING frames, ``lag``, nested through CTEs)
  too: each bucket of partition keys keeps its rows' look-back, and a micro-batch
  evaluates the batch plan over the buckets that have rows becoming final (``EMIT
  CHANGES``: and their rows not final yet, :mod:`.stateful.pending`). A RESAMPLE of
  one stream (per key or not) too: each series keeps its rows from its bound on and the
  rows bracketing its next grid points, and a micro-batch evaluates the RESAMPLE over the
  series whose grid points became final. An ASOF JOIN of two streams (backward or
  forward, by keys or not, ``ASOF LEFT JOIN``) too: each bucket of keys keeps its waiting
  left rows and the right rows they can still match, and a micro-batch joins the left rows
  whose match became final. An inner interval (band) join of two streams (by keys or not)
  too: each bucket of keys keeps each stream's rows the other's future rows can still
  pair, and a micro-batch pairs the new rows with them and with each other. A
  per-instant join of two windowed streams under ISTREAM / DSTREAM too
  (:mod:`.stateful.window_join`): each bucket of keys keeps each stream's rows still in
  its window at progress, and a micro-batch evaluates the batch plan over the keys with a
  row entering or leaving at an instant made final.
* **Re-evaluating** (:mod:`.runner`): every other shape -- RSTREAM of joins of windowed
  streams (and the joins below),
  RESAMPLE under CQL windows, ASOF and interval joins on keys of different kinds, SYNC,
  row-by-row queries, unslid RSTREAM, and OVER windows or RESAMPLE over columns of
  complex types --
  evaluates the batch plan over each input's buffered look-back every micro-batch, with
  progress kept by WaveSQL in ``<checkpoint>/state/``. Its cost follows the look-back, not
  what arrived.
* Signals (:mod:`.signals`): windows of arriving WAV files -- or of CSV, Parquet or JSON
  files of a signal stored as a table, one row per sample -- read by WaveSQL's own streaming
  source, filter state carried between micro-batches; sample blocks from a Kafka topic
  (:mod:`.kafka_signals`) the same way, the blocks not yet complete kept in the checkpoint.
* **Real-time mode** (:mod:`.realtime`): a row-by-row query from one Kafka stream to a
  Kafka sink, run by Spark's real-time trigger (no micro-batches, milliseconds).

Inputs are file folders or Kafka topics (``sources/kafka.py``): both runners read a Kafka
stream through Spark's Kafka source, offsets in the checkpoint, and keep its progress per
partition -- the re-evaluating runner from per-partition facts in its state (the topic's
partitions from Spark's offset log), the state-store runner with one watermarked source
per partition (Spark's global watermark is their minimum; an ASOF JOIN's left stream
the driver's, below; each watermarked source's progress carried across restarts by its
resume input, :mod:`.stateful.resume`). Outputs are folders (committed whole, ``sinks.py``) or Kafka sinks
(at least once, deterministic keys).

Decisions, per operator (issue 26; revisit as operators move over):

=================================  =====================================================
windowed aggregates (above)        ``transformWithStateInPandas``, EventTime mode, one
                                   ``ValueState`` per bucket of keys (two buckets per
                                   shuffle partition): a
                                   Python call per key costs about a millisecond in
                                   PySpark 4.3 (measured: 10,000 keys, 14 s a batch), a
                                   call per bucket runs the kernel over all its keys in
                                   numpy. State bytes: Arrow IPC (:mod:`.stateful.state`),
                                   never a pickle.
what a window's pane keeps         (:mod:`.stateful.window_aggregates`; an unslid window
                                   keeps its rows) algebraic: a count (``count``,
                                   ``count_if``), a sum, a count and a DOUBLE sum
                                   (``avg``), a min / max (also ``bool_and`` /
                                   ``every``, ``bool_or`` / ``any`` / ``some`` as 0 / 1), or
                                   count, mean and M2 for the spreads (``stddev*``,
                                   ``var*``, ``variance``), merged by Chan et al.'s
                                   formula. Holistic (:mod:`.stateful.window_holistic`):
                                   every value of the argument (``percentile``,
                                   ``median``, ``percentile_approx``, ``collect_list``)
                                   or each distinct value once (``collect_set``,
                                   ``count(DISTINCT)``, ``sum(DISTINCT)``), an Arrow list
                                   per pane, pruned with the pane -- bounded by the
                                   window's rows; ``EXPLAIN STREAM`` names them
                                   ("holistic: keeps every value of v in the window per
                                   pane"). ``percentile_approx`` is computed exactly (rank
                                   ``ceil(p * n)``): Spark's own answer below
                                   ``accuracy`` values (measured up to 5,000), within its
                                   documented rank error above. Result types are the
                                   batch query's (``collect_list`` of a string:
                                   ``array<string>``, ``percentile``: ``double``).
                                   Re-evaluated, with the reason: ``first`` / ``last``
                                   (their order is undefined), other DISTINCT aggregates,
                                   FILTER, the rest.
progress                           Spark's watermark, carried in microseconds: the kernel
                                   and the driver read the same value (offset log), and
                                   Spark runs the micro-batch that closes windows.
late rows                          not Spark's: the watermark column is dropped before
                                   the processor, which sends late rows to the late sink.
files still being written          the runner waits for a batch's files before reading
                                   them (:mod:`.files`); Spark fixed their sizes when it
                                   listed them, so write files aside and rename them in.
OVER windows                       the same processor shape, one ``ValueState`` per
                                   bucket holding the bucket's rows (Arrow bytes) pruned
                                   to the look-back; the windows themselves are the batch
                                   plan's (Spark SQL over the rows handed back), so any
                                   aggregate, nesting and ``lag`` mean what they mean in
                                   a batch query. Buckets are hashes of the partition keys
                                   every window shares; none shared: one bucket.
RESAMPLE (alone, per key or not)   the same processor shape (:mod:`.stateful.resample`):
                                   one ``ValueState`` per bucket of keys (un-keyed: one
                                   bucket) holding its series' rows (Arrow bytes), one per
                                   instant (the row the batch SQL keeps), pruned at each
                                   series' bound to the rows from it on, the last row
                                   before it and ('linear') each interpolated column's
                                   last value before it. Grid points are final when
                                   :class:`.resample.ResampleProgress` says (below
                                   progress, not past the series' last row, 'linear' not
                                   past a column's last value); each series emits the
                                   points between its previous bound and its bound once,
                                   the batch plan evaluated over its rows. Timers fire at
                                   the next grid point that can become final. Per key,
                                   ``_progress`` is the stalest key's bound: each bucket
                                   reports its keys' smallest cap, kept by the driver in
                                   ``<checkpoint>/resample/`` (one number per bucket,
                                   versioned JSON).
RESAMPLE under CQL windows         stays re-evaluated: TiLT's imputation joins each grid
                                   point to its window's bucket, final by the window
                                   instant and bounded by the stalest key of every
                                   series -- two operators' state (the grid, the windows
                                   over it) with one bound; not yet moved.
ASOF JOIN (of two streams)         the same processor shape (:mod:`.stateful.asof`):
                                   both streams unioned (a side column) into one
                                   ``transformWithStateInPandas``, one ``ValueState`` per
                                   bucket of keys (no keys: one bucket) holding its
                                   waiting left rows and the right rows a waiting or
                                   future left row can still match. Progress per stream,
                                   as on the re-evaluating runner (a row is late below
                                   its own stream's, ``_progress`` the smaller): Spark
                                   gives a query one watermark, so only the right stream
                                   is watermarked in Spark -- its progress, which makes a
                                   left row final (timers at the oldest waiting left row,
                                   backward, or the earliest pending match, forward) --
                                   and the left stream's rows carry their promises, each
                                   bucket hands back its largest per source, and the
                                   driver keeps the left progress in
                                   ``<checkpoint>/asof/<batch>.json`` (versioned JSON,
                                   read by the next batch, handed to every bucket as a
                                   local property of the batch's Spark jobs; a re-run
                                   sees what its first run saw). A Kafka stream is one
                                   source per partition (its progress: the slowest
                                   partition's). Keys of different kinds (the kernel
                                   compares hashes) stay re-evaluated.
interval (band) join (inner)       the ASOF join's machinery with another kernel
                                   (:mod:`.stateful.interval`): both streams in one
                                   ``transformWithStateInPandas``, one ``ValueState``
                                   per bucket of the keys the ON clause equates (none:
                                   one bucket) holding each stream's rows a future row
                                   of the other can still pair -- stream ``a`` (``a.t``
                                   in ``[b.t + lo, b.t + hi]``) from ``progress(b) + lo``
                                   on, ``b`` from ``progress(a) - hi`` on. Progress per
                                   stream as the ASOF join's (``b`` Spark's watermark,
                                   ``a`` the driver's record in ``<checkpoint>/asof/``);
                                   a bucket hands back its new rows that can pair and the
                                   kept rows a new row can pair, and the batch plan runs
                                   over (new ``a``, all ``b`` handed back) and (kept
                                   ``a``, new ``b``): each pair once, the ON clause and
                                   the SELECT Spark's. Timers (``b``'s progress) let an
                                   idle bucket shed rows. LEFT / RIGHT outer joins: the
                                   preserved stream is made ``a`` (the band turned), each
                                   kept ``a`` row carries ``matched``, and one that goes
                                   unpaired is handed back ``alone`` for its NULL-extended
                                   row (ON: band and keys only; state store only). FULL
                                   joins: a ``b`` row goes alike by ``a``'s progress
                                   (its timer at ``b``'s while it waits), and the rows go
                                   to the passes where they have a partner (flags), the
                                   ``alone`` ones of both streams to a third; keys of
                                   different kinds stay re-evaluated. Either join's
                                   side may be a view, CTE or subquery row by row over
                                   its stream (:mod:`.stateful.view_rows`: the stream's
                                   rows get kind and promise, then go through the view;
                                   the driver-kept side also hands on one promise row per
                                   stream row); such joins run here only.
joins of windowed streams          ISTREAM / DSTREAM per instant: the interval join's
                                   machinery with another kernel
                                   (:mod:`.stateful.window_join`), both streams
                                   watermarked in Spark: its watermark, the smaller
                                   progress, makes instants final and fires each
                                   bucket's timer at its next change instant (a row
                                   entering or leaving: a DSTREAM's expiries); each
                                   stream's own progress (late rows) from the driver's
                                   record, ``<checkpoint>/joins/``. Each row's validity
                                   ``[from, to)`` per window; a bucket keeps the rows
                                   with ``to`` at or after progress and, when a row of
                                   it enters or leaves at an instant made final, hands
                                   back its rows (additive queries -- row-by-row SQL
                                   around an equi-join on keys, ROWS windows partitioned
                                   by them -- only the keys with such a change; else one
                                   bucket, all). The batch plan runs over them, kept to
                                   the instants made final: the multiset difference at
                                   an instant over the keys that change there is the
                                   one over every key (the others add the same rows to
                                   both sides).
                                   Inner joins of that shape, and outer ones whose ON
                                   is key equalities only, skip the batch plan: the
                                   buckets hand back the pairs entering and leaving at
                                   those instants (a preserved row NULL-padded where it
                                   has no pair, alone) and one Spark plan per
                                   micro-batch runs the per-instant SQL over each
                                   pair alone and emits ISTREAM / DSTREAM from the
                                   signs summed per instant and row
                                   (:mod:`.stateful.window_join_pairs`,
                                   :mod:`.stateful.window_join_delta`).
                                   Re-evaluated, with the reason: RSTREAM
                                   (every key at every instant), EMIT CHANGES,
                                   ``_time`` in an expression, three or more streams,
                                   windows over views.
=================================  =====================================================

``EXPLAIN STREAM <query>`` says which runner a query gets and why; ``WAVESQL_STATEFUL=0``
forces the re-evaluating runner (for comparisons).

Modules, each importing only modules listed after it (so there are no cycles):
:mod:`.launch` (start a query, pick its runner); the runners :mod:`.runner` (re-evaluating),
:mod:`.kafka_signals` and :mod:`.stateful.query`; :mod:`.planning` (which shape a query is,
EXPLAIN STREAM); :mod:`.realtime`; :mod:`.signals`; the planning and bookkeeping of shapes,
:mod:`.joins`, :mod:`.resample`, :mod:`.sync` and :mod:`.lookback`; :mod:`.query` (what
every runner shares); :mod:`.metrics`; :mod:`.plan` (a plan, the streaming rules);
:mod:`.report` (the ``_final``/``_progress`` columns, the batch report); the helpers
:mod:`.source`, :mod:`.files`, :mod:`.sinks` and :mod:`.outputs`.
"""

from .launch import start
from .query import ContinuousQuery
from .report import BatchReport

__all__ = ["BatchReport", "ContinuousQuery", "start"]
