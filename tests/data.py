"""Paths to the data the tests use (shipped in the repository, so a fresh clone has them)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: XStream's Table I input: 9 s, 44.1 kHz, mono int16, a voice counting one to five.
COUNTING_WAV = str(ROOT / "examples" / "data" / "counting_44k1.wav")
