"""Generated recordings whose true content is known, for examples, tests and benchmarks.

``array_recording`` writes what the DETECTAUDIO application listens to: a 4-channel
microphone array at 48 kHz, background noise and mains hum, and short tone bursts (the
"events") at known times, reaching each microphone with its own delay and gain. Seeded, so
the same call writes the same files; the returned :class:`ArrayTruth` is the answer a query
should find.

``pipeline_recording`` writes PIPELINE's pressure sensor: transients and their reflections,
weak where a leak absorbs them.

Run ``python -m wavesql.datasets OUTDIR [seconds]`` to write an array recording.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class ArrayTruth:
    rate: int
    frames: int
    files: list[Path]
    #: First sample (in channel 1's time) of every event, in order.
    event_starts: list[int] = field(default_factory=list)
    event_length: int = 0
    #: Per-channel delay of the events, in samples.
    delays: tuple[int, ...] = ()
    #: The written samples, ``(frames, channels)`` float32 (what the files hold, exactly).
    samples: np.ndarray | None = None


def array_recording(folder, *, seconds: float = 8.0, rate: int = 48_000, events: int = 6,
                    file_seconds: float = 2.0, tone_hz: float = 5250.0,
                    delays: tuple[int, ...] = (0, 9, 17, 26), seed: int = 3,
                    also_at: tuple[int, ...] = ()) -> ArrayTruth:
    """Write ``array_000.wav``, ``array_001.wav`` ... (float32, 4 channels) under ``folder``.

    ``also_at``: first samples of extra events placed exactly there (tests put one where a
    scan partition or a file begins), besides the ``events`` random ones.

    Events are 20 ms Hann-shaped bursts of ``tone_hz`` (5250 Hz: between bins 3 and 4 of a
    32-point FFT at 48 kHz, the band DETECTAUDIO scores), at least 0.4 s apart and after
    the first 0.5 s (the detector's warm-up). Noise: white (sigma 0.01) plus 50 Hz hum.
    """
    from wavesql.udfs.wav import write_wav

    rng = np.random.default_rng(seed)
    frames = int(seconds * rate)
    channels = len(delays)
    t = np.arange(frames) / rate
    data = (rng.standard_normal((frames, channels)) * 0.01
            + 0.02 * np.sin(2 * np.pi * 50 * t)[:, None])
    length = int(0.020 * rate)
    burst = np.hanning(length) * np.sin(2 * np.pi * tone_hz * np.arange(length) / rate)
    slots = np.arange(int(0.5 * rate), frames - int(0.4 * rate), int(0.4 * rate))
    fixed = [int(s) for s in also_at]
    free = [s for s in slots if all(abs(int(s) - f) >= int(0.4 * rate) for f in fixed)]
    starts = sorted([int(s) for s in rng.choice(free, size=events, replace=False)] + fixed)
    events = len(starts)
    gains = rng.uniform(0.25, 0.45, size=(events, channels))
    for e, start in enumerate(starts):
        for c, delay in enumerate(delays):
            data[start + delay:start + delay + length, c] += gains[e, c] * burst
    samples = data.astype(np.float32)
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    per_file = int(file_seconds * rate)
    files = []
    for i, first in enumerate(range(0, frames, per_file)):
        path = root / f"array_{i:03d}.wav"
        write_wav(path, samples[first:first + per_file], rate, "float32")
        files.append(path)
    return ArrayTruth(rate, frames, files, starts, length, tuple(delays), samples)


@dataclass
class PipelineTruth:
    rate: int
    slide: int
    #: Per window (PIPELINE's [SAMPLES 8192 SLIDE 7692]): the reflection ratio written.
    ratios: list[float]
    files: list[Path]


def pipeline_recording(folder, *, windows: int = 24, rate: int = 1000, width: int = 8192,
                       slide: int = 7692, leak_every: int = 3, seed: int = 11) -> PipelineTruth:
    """A pressure sensor on a water pipe (PIPELINE): in every window a transient -- a
    pressure drop and its rebound -- followed 1.5 s later by its reflection from the pipe's
    end, ``r`` times as strong. A leak absorbs the wave: every ``leak_every``-th window has
    ``r`` around 0.15 (leak), the others around 0.7. Writes ``pipe_000.wav``... (float32)."""
    from wavesql.udfs.wav import write_wav

    rng = np.random.default_rng(seed)
    frames = windows * slide + (width - slide)
    x = rng.standard_normal(frames) * 0.02
    n = np.arange(frames)

    def pulse(at, amplitude, sigma=40.0):
        lo, hi = int(at - 6 * sigma), int(at + 6 * sigma)
        x[lo:hi] += amplitude * np.exp(-0.5 * ((n[lo:hi] - at) / sigma) ** 2)

    ratios = []
    for k in range(windows):
        r = rng.uniform(0.1, 0.2) if k % leak_every == 0 else rng.uniform(0.55, 0.8)
        at = k * slide + int(rng.integers(700, 5000))
        pulse(at, -1.0)
        pulse(at + 150, 0.6)
        pulse(at + 1500, -r)
        pulse(at + 1650, 0.6 * r)
        ratios.append(float(r))
    samples = x.astype(np.float32)
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    files = []
    per_file = 60 * rate
    for i, first in enumerate(range(0, frames, per_file)):
        path = root / f"pipe_{i:03d}.wav"
        write_wav(path, samples[first:first + per_file], rate, "float32")
        files.append(path)
    return PipelineTruth(rate, slide, ratios, files)


if __name__ == "__main__":  # pragma: no cover - a convenience for users
    out = sys.argv[1] if len(sys.argv) > 1 else "data/array"
    secs = float(sys.argv[2]) if len(sys.argv) > 2 else 8.0
    truth = array_recording(out, seconds=secs)
    print(f"wrote {len(truth.files)} files to {out}; events at samples {truth.event_starts}")
