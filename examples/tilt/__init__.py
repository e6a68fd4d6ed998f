"""The eight TiLT applications and YSB as WaveSQL examples (see README.md beside this file)."""
