"""The WAV reader (wavesql.udfs.wav): formats, odd headers, errors, segments, timelines.

No Spark. Every sample-format round trip is cross-checked against scipy.io.wavfile, an
independent reader, on the same file.
"""

from __future__ import annotations

from tests.data import COUNTING_WAV
import doctest
import os
import pickle
import struct
import time

import numpy as np
import pytest
import scipy.io.wavfile as scipy_wav

import wavesql.udfs.wav as wav
from wavesql.udfs.wav import (
    SAMPLE_FORMATS, FilePlacement, WavError, WavInfo, check_declared, iter_segments,
    parse_file_timestamp, plan_timeline, read_frames, read_info, write_wav,
)
from wavesql.udfs.wav.header import AMBISONIC_GUID_TAIL, GUID_TAIL
from wavesql.udfs.wav.write import code_range

COUNTING = COUNTING_WAV
FORMATS = list(SAMPLE_FORMATS)


# ---------------------------------------------------------------------------------- helpers

def fmt_body(tag=1, channels=1, rate=8000, bits=16, block_align=None, extra=b""):
    ba = channels * bits // 8 if block_align is None else block_align
    return struct.pack("<HHIIHH", tag, channels, rate, rate * ba, ba, bits) + extra


def ext_extra(sub_tag=1, valid_bits=16, mask=0, tail=GUID_TAIL):
    return struct.pack("<HHIH", 22, valid_bits, mask, sub_tag) + tail


def riff(*chunks, magic=b"RIFF", form=b"WAVE"):
    """Raw WAV bytes from (id, body) or (id, body, declared size) chunks, padded to even."""
    out = b""
    for cid, body, *size in chunks:
        declared = size[0] if size else len(body)
        out += cid + struct.pack("<I", declared) + body + b"\0" * (len(body) % 2)
    return magic + struct.pack("<I", 4 + len(out)) + form + out


def put(tmp_path, raw: bytes, name="x.wav") -> str:
    p = tmp_path / name
    p.write_bytes(raw)
    return str(p)


def codes_for(fmt, shape, rng):
    """Random stored codes covering the format's extremes."""
    lo, hi = code_range(fmt)
    codes = rng.integers(lo, hi, size=shape, endpoint=True)
    codes.flat[:2] = [lo, hi]
    return codes


def scale_codes(fmt, codes):
    """What read_frames promises for integer codes, in float64 (exact)."""
    codes = np.asarray(codes, np.float64)
    if fmt == "int8u":
        return (codes - 128) / 128
    return codes / 2.0 ** (SAMPLE_FORMATS[fmt][1] - 1)


def scipy_scaled(path, fmt):
    """scipy's reading of the file, scaled to [-1, 1) the same way, as (frames, channels)."""
    _, d = scipy_wav.read(path)
    d = d.reshape(len(d), -1)
    if fmt == "int8u":
        return (d.astype(np.float64) - 128) / 128
    if fmt in ("int16", "int32", "int24"):  # scipy left-justifies 24-bit in int32
        return d.astype(np.float64) / {"int16": 2 ** 15}.get(fmt, 2 ** 31)
    return d.astype(np.float64)


def assert_wav_error(excinfo, code, *needles):
    e = excinfo.value
    assert e.code == code, str(e)
    assert e.path in str(e)
    for needle in needles:
        assert needle in str(e), (needle, str(e))


# ---------------------------------------------------------------------------------- round trips

@pytest.mark.parametrize("channels", [1, 2, 4, 6])
@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_every_format_and_channel_count(tmp_path, fmt, channels):
    rng = np.random.default_rng(hash((fmt, channels)) % 2 ** 32)
    frames = 1001  # odd: exercises the pad byte of 8-bit / 24-bit mono data chunks
    if fmt.startswith("float"):
        data = rng.standard_normal((frames, channels)) * 0.3
        data[0, 0] = 1.5  # float formats are not clipped
        expected = data.astype(SAMPLE_FORMATS[fmt][2]).astype(np.float64)
    else:
        data = codes_for(fmt, (frames, channels), rng)
        expected = scale_codes(fmt, data)
    p = str(tmp_path / f"{fmt}_{channels}.wav")
    write_wav(p, data, 48000, fmt)

    info = read_info(p)
    tag, bits, _ = SAMPLE_FORMATS[fmt]
    assert (info.rate, info.channels, info.sample_format, info.bits) == (48000, channels, fmt,
                                                                         bits)
    assert info.block_align == channels * bits // 8
    assert info.frames == info.declared_frames == frames and not info.truncated
    header_tag, = struct.unpack_from("<H", open(p, "rb").read(22), 20)
    assert header_tag == (0xFFFE if channels > 2 or bits > 16 else tag)

    f64 = read_frames(info, dtype=np.float64)
    f32 = read_frames(info)
    assert f32.dtype == np.float32 and f32.shape == (frames, channels)
    np.testing.assert_array_equal(f64, expected)
    np.testing.assert_array_equal(f32, expected.astype(np.float32))
    np.testing.assert_array_equal(f64, scipy_scaled(p, fmt))  # an independent reader agrees
    if not fmt.startswith("float"):
        assert np.all((f64 >= -1) & (f64 < 1))
        # float32 has 24 mantissa bits: int32 codes near full scale round up to 1.0.
        assert f32.max() < 1 or fmt == "int32"


def test_real_recording_matches_scipy():
    info = read_info(COUNTING)
    rate, ref = scipy_wav.read(COUNTING)
    assert (info.rate, info.channels, info.sample_format) == (44100, 1, "int16")
    assert info.frames == len(ref) == 396900 and info.data_offset == 44
    assert not info.truncated and not info.open_ended
    ours = read_frames(info)
    np.testing.assert_array_equal(ours[:, 0], ref.astype(np.float32) / 32768)
    blocks = [a for _, a in iter_segments(COUNTING, 4096)]
    np.testing.assert_array_equal(np.concatenate(blocks, axis=1)[0], ours[:, 0])


def test_write_scales_rounds_and_clips_floats(tmp_path):
    x = np.array([-2.0, -1.0, -0.5, 0.0, 1 / 65536, 0.5, 1.0, 3.0])
    expect = {"int8u": [0, 0, 64, 128, 128, 192, 255, 255],
              "int16": [-32768, -32768, -16384, 0, 0, 16384, 32767, 32767],
              "int32": [-2 ** 31, -2 ** 31, -2 ** 30, 0, 2 ** 15, 2 ** 30, 2 ** 31 - 1,
                        2 ** 31 - 1]}
    for fmt, codes in expect.items():
        p = str(tmp_path / f"{fmt}.wav")
        write_wav(p, x, 1000, fmt)
        _, d = scipy_wav.read(p)
        assert d.tolist() == codes, fmt


def test_write_rejects_bad_input(tmp_path):
    p = str(tmp_path / "a.wav")
    with pytest.raises(ValueError, match="NaN"):
        write_wav(p, np.array([0.0, np.nan]), 1000)
    with pytest.raises(ValueError, match=r"\[-32768, 32767\]"):
        write_wav(p, np.array([0, 40000]), 1000)
    with pytest.raises(ValueError, match="sample_format"):
        write_wav(p, np.zeros(3), 1000, "int12")
    with pytest.raises(ValueError, match="shape"):
        write_wav(p, np.zeros((2, 2, 2)), 1000)
    assert not os.path.exists(p)  # validation happens before the file is created


def test_int24_negative_values_and_byte_layout(tmp_path):
    codes = np.array([-8388608, -1, -2, 1, 8388607, -4660, 0, -65536])
    p = str(tmp_path / "n.wav")
    write_wav(p, codes, 96000, "int24")
    info = read_info(p)
    raw = open(p, "rb").read()[info.data_offset:info.data_offset + 3 * len(codes)]
    assert raw[:9] == b"\x00\x00\x80" + b"\xff\xff\xff" + b"\xfe\xff\xff"  # little-endian
    np.testing.assert_array_equal(read_frames(info, dtype=np.float64)[:, 0], codes / 2 ** 23)
    # Negative values survive every decode path: channel selection and segment cuts.
    stereo = np.stack([codes, -codes - 1], axis=1)
    write_wav(p, stereo, 96000, "int24")
    got = np.concatenate([a for _, a in iter_segments(p, 3, channels=[1, 0])], axis=1)
    np.testing.assert_array_equal(got, (stereo[:, ::-1] / 2 ** 23).T.astype(np.float32))


def test_read_frames_ranges_and_channel_selection(tmp_path):
    data = codes_for("int16", (500, 3), np.random.default_rng(3))
    p = str(tmp_path / "a.wav")
    write_wav(p, data, 8000)
    info = read_info(p)
    np.testing.assert_array_equal(read_frames(info, 100, 50, channels=[2, 0]),
                                  data[100:150, [2, 0]] / 32768)
    assert read_frames(p, 500).shape == (0, 3)
    with pytest.raises(ValueError, match="outside"):
        read_frames(info, 450, 51)
    with pytest.raises(WavError) as ei:
        read_frames(info, channels=[3])
    assert_wav_error(ei, "CHANNEL_MISMATCH", "has 3")


def test_float32_file_read_directly_is_bit_exact(tmp_path):
    x = np.random.default_rng(4).standard_normal((1000, 2)).astype(np.float32)
    x[0] = [np.inf, -0.0]
    p = str(tmp_path / "f.wav")
    write_wav(p, x, 8000, "float32")
    np.testing.assert_array_equal(read_frames(p), x)  # frame-major: the direct readinto path
    assert np.signbit(read_frames(p)[0, 1])


def test_rf64_round_trip(tmp_path):
    data = codes_for("int16", (300, 2), np.random.default_rng(5))
    p = str(tmp_path / "r.wav")
    write_wav(p, data, 8000, rf64=True)
    assert open(p, "rb").read(4) == b"RF64"
    info = read_info(p)
    assert info.frames == 300 and not info.open_ended
    np.testing.assert_array_equal(read_frames(info, dtype=np.float64), scipy_scaled(p, "int16"))


def test_rf64_without_ds64_is_corrupt(tmp_path):
    p = put(tmp_path, riff((b"fmt ", fmt_body()), (b"data", b"\0" * 8, 0xFFFFFFFF),
                           magic=b"RF64"))
    with pytest.raises(WavError) as ei:
        read_info(p)
    assert_wav_error(ei, "CORRUPT_FILE", "ds64")


# ---------------------------------------------------------------------------------- header layouts

def test_extensible_variants(tmp_path):
    pcm = np.arange(-6, 6, dtype="<i4") << 12  # 20 valid bits left-justified in 24
    body = b"".join(int(v).to_bytes(3, "little", signed=True) for v in pcm)
    ext = fmt_body(0xFFFE, 2, 44100, 24, extra=ext_extra(1, 20, 0x3))
    info = read_info(put(tmp_path, riff((b"fmt ", ext), (b"data", body))))
    assert (info.sample_format, info.channels, info.frames) == ("int24", 2, 6)
    np.testing.assert_array_equal(read_frames(info, dtype=np.float64).ravel(), pcm / 2 ** 23)
    # Ambisonic B-format float sub-format: same samples, accepted.
    amb = fmt_body(0xFFFE, 4, 48000, 32, extra=ext_extra(3, 32, 0, AMBISONIC_GUID_TAIL))
    x = np.arange(8, dtype="<f4") / 8
    info = read_info(put(tmp_path, riff((b"fmt ", amb), (b"data", x.tobytes())), "b.wav"))
    np.testing.assert_array_equal(read_frames(info).ravel(), x)


@pytest.mark.filterwarnings("ignore:Chunk .non-data. not understood")  # scipy on 'junk'
def test_extra_chunks_are_skipped(tmp_path):
    x = np.array([1, -2, 3, -4, 5], "<i2")
    p = put(tmp_path, riff((b"LIST", b"INFOISFT\x05\x00\x00\x00abcd\x00"),  # odd: padded
                           (b"fmt ", fmt_body()), (b"junk", b"abc"),
                           (b"fact", struct.pack("<I", 5)), (b"data", x.tobytes()),
                           (b"cue ", b"\0" * 4)))
    info = read_info(p)
    # RIFF header 12, LIST 8+17+1 (pad), fmt 8+16, junk 8+3+1 (pad), fact 8+4, data header 8
    assert info.frames == 5 and info.data_offset == 12 + 26 + 24 + 12 + 12 + 8
    np.testing.assert_array_equal(read_frames(info, dtype=np.float64)[:, 0], x / 32768)
    np.testing.assert_array_equal(read_frames(info, dtype=np.float64), scipy_scaled(p, "int16"))


def test_fmt_after_data_and_odd_data_chunk(tmp_path):
    x = np.array([10, 20, 30], "u1")  # 3 bytes of 8-bit mono: odd data chunk, padded
    p = put(tmp_path, riff((b"data", x.tobytes()), (b"fmt ", fmt_body(bits=8))))
    info = read_info(p)
    assert (info.data_offset, info.frames) == (20, 3)
    np.testing.assert_array_equal(read_frames(info, dtype=np.float64)[:, 0], (x - 128.0) / 128)


@pytest.mark.parametrize("declared", [0, 0xFFFFFFFF])
def test_streaming_recorder_sizes_mean_rest_of_file(tmp_path, declared):
    x = np.arange(7, dtype="<i2")
    p = put(tmp_path, riff((b"fmt ", fmt_body()), (b"data", x.tobytes(), declared)) + b"\x01")
    info = read_info(p, strict=True)
    assert info.open_ended and not info.truncated
    assert info.frames == info.declared_frames == 7  # the odd trailing byte is no frame
    np.testing.assert_array_equal(read_frames(info)[:, 0], x / 32768)


def test_empty_data_chunk_followed_by_a_chunk_is_empty(tmp_path):
    p = put(tmp_path, riff((b"fmt ", fmt_body()), (b"data", b""), (b"LIST", b"INFO")))
    info = read_info(p)
    assert info.frames == 0 and not info.open_ended
    assert list(iter_segments(info, 10)) == []


# ---------------------------------------------------------------------------------- truncation

def test_truncated_file_lenient_and_strict(tmp_path):
    data = codes_for("int16", (100, 2), np.random.default_rng(6))
    p = str(tmp_path / "t.wav")
    write_wav(p, data, 8000)
    full = open(p, "rb").read()
    open(p, "wb").write(full[:-4 * 30 - 3])  # 30 frames and 3 bytes of a 31st gone
    info = read_info(p)
    assert info.truncated and (info.frames, info.declared_frames) == (69, 100)
    np.testing.assert_array_equal(read_frames(info), data[:69] / 32768)
    segs = list(iter_segments(p, 32))
    assert [s for s, _ in segs] == [0, 32, 64] and segs[-1][1].shape == (2, 5)
    for call in (lambda: read_info(p, strict=True), lambda: iter_segments(p, 8, strict=True),
                 lambda: iter_segments(info, 8, strict=True)):
        with pytest.raises(WavError) as ei:
            call()
        assert_wav_error(ei, "TRUNCATED_FILE", "declares 100 frames", "only 69 whole frames")


def test_file_shrinking_while_reading_is_an_error(tmp_path):
    p = str(tmp_path / "s.wav")
    write_wav(p, np.zeros(1000), 8000)
    info = read_info(p)
    os.truncate(p, info.data_offset + 100)
    with pytest.raises(WavError) as ei:
        read_frames(info)
    assert_wav_error(ei, "TRUNCATED_FILE", "shrank")


# ---------------------------------------------------------------------------------- errors

CORRUPT = {
    "empty": (b"", "too short"),
    "not riff": (b"RIFX"[:0] + b"JUNK" + b"\0" * 40, "not a RIFF file"),
    "aiff": (b"FORM\0\0\0\x20AIFFCOMM" + b"\0" * 30, "AIFF"),
    "not wave": (riff((b"fmt ", fmt_body()), form=b"AVI "), "not 'WAVE'"),
    "no fmt": (riff((b"data", b"\0" * 8)), "no 'fmt ' chunk"),
    "no data": (riff((b"fmt ", fmt_body()), (b"LIST", b"INFO")), "no 'data' chunk"),
    "short fmt": (riff((b"fmt ", fmt_body()[:14]), (b"data", b"\0" * 8)), "needs 16"),
    "fmt past eof": (riff((b"fmt ", fmt_body(), 400)), "fmt chunk declares 400 bytes"),
    "short ext": (riff((b"fmt ", fmt_body(0xFFFE, extra=b"\0\0")), (b"data", b"")),
                  "needs 40"),
    "block_align": (riff((b"fmt ", fmt_body(channels=2, block_align=2)), (b"data", b"")),
                    "block_align is 2 bytes"),
    "zero channels": (riff((b"fmt ", fmt_body(channels=0)), (b"data", b"")), "0 channels"),
    "zero rate": (riff((b"fmt ", fmt_body(rate=0)), (b"data", b"")), "at 0 Hz"),
    "valid bits": (riff((b"fmt ", fmt_body(0xFFFE, bits=16, extra=ext_extra(1, 24))),
                        (b"data", b"")), "24 valid bits in a 16-bit"),
}


@pytest.mark.parametrize("case", CORRUPT)
def test_corrupt_files(tmp_path, case):
    raw, needle = CORRUPT[case]
    with pytest.raises(WavError) as ei:
        read_info(put(tmp_path, raw))
    assert_wav_error(ei, "CORRUPT_FILE", needle)


UNSUPPORTED = {
    "adpcm": (fmt_body(2, bits=4, block_align=256), "0x0002 (Microsoft ADPCM)"),
    "a-law": (fmt_body(6, bits=8), "0x0006 (A-law)"),
    "mu-law": (fmt_body(7, bits=8), "0x0007 (mu-law)"),
    "12-bit": (fmt_body(1, bits=12, block_align=2), "0x0001 (PCM, 12-bit)"),
    "16-bit float": (fmt_body(3, bits=16), "(IEEE float, 16-bit)"),
    "mp3 in ext": (fmt_body(0xFFFE, bits=16, extra=ext_extra(0x55)), "0x0055 (MPEG Layer 3)"),
    "odd guid": (fmt_body(0xFFFE, extra=ext_extra(1, tail=b"\1" * 14)), "GUID"),
    "unknown": (fmt_body(0x1234), "0x1234 (unknown)"),
}


@pytest.mark.parametrize("case", UNSUPPORTED)
def test_unsupported_encodings(tmp_path, case):
    body, needle = UNSUPPORTED[case]
    with pytest.raises(WavError) as ei:
        read_info(put(tmp_path, riff((b"fmt ", body), (b"data", b"\0" * 512))))
    assert_wav_error(ei, "UNSUPPORTED_ENCODING", needle, "ffmpeg")


def test_big_endian_rifx_is_unsupported(tmp_path):
    with pytest.raises(WavError) as ei:
        read_info(put(tmp_path, riff((b"fmt ", fmt_body()), magic=b"RIFX")))
    assert_wav_error(ei, "UNSUPPORTED_ENCODING", "big-endian")


def test_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_info(tmp_path / "nope.wav")


def test_wav_error_is_a_value_error_that_pickles():
    e = WavError("CORRUPT_FILE", "/d/a.wav", "no 'data' chunk", "re-record")
    assert isinstance(e, ValueError)
    assert str(e) == "/d/a.wav: no 'data' chunk [CORRUPT_FILE] (hint: re-record)"
    back = pickle.loads(pickle.dumps(e))
    assert (back.code, back.path, back.message, back.hint, str(back)) == (
        e.code, e.path, e.message, e.hint, str(e))


def test_check_declared():
    info = WavInfo("/d/mic.wav", 44100, 2, "int16", 16, 4, 44, 10, 10, False)
    check_declared(info, 44100, 2)
    check_declared(info, 44100.0)
    with pytest.raises(WavError) as ei:
        check_declared(info, 48000, 2, signal="mic")
    assert_wav_error(ei, "RATE_MISMATCH", "/d/mic.wav", "44100 Hz", "signal mic",
                     "RATE 48000 HZ")
    with pytest.raises(WavError) as ei:
        check_declared(info, 44100, 4)
    assert_wav_error(ei, "CHANNEL_MISMATCH", "2 channel(s)", "the catalog declares 4")


# ---------------------------------------------------------------------------------- segments

@pytest.mark.parametrize("fmt", ["float32", "int16", "int24", "int8u", "float64"])
def test_iter_segments_covers_file_exactly_once(tmp_path, fmt):
    rng = np.random.default_rng(7)
    frames = int(rng.integers(3000, 9000))
    data = rng.uniform(-1, 1, (frames, 3))
    p = str(tmp_path / "a.wav")
    write_wav(p, data, 16000, fmt)
    whole = read_frames(p)
    for _ in range(12):
        segment = int(rng.integers(1, 3 * frames // 2))
        channels = [[0, 1, 2], [2], [1, 0], None][int(rng.integers(4))]
        start = int(rng.integers(-10 ** 12, 10 ** 12))
        blocks = list(iter_segments(p, segment, start_sample=start, channels=channels))
        sel = [0, 1, 2] if channels is None else channels
        assert [s for s, _ in blocks] == list(range(start, start + frames, segment))
        assert all(a.shape[1] == segment for _, a in blocks[:-1])
        assert all(a.flags.c_contiguous and a.dtype == np.float32 for _, a in blocks)
        np.testing.assert_array_equal(np.concatenate([a for _, a in blocks], axis=1),
                                      whole[:, sel].T)


def test_iter_segments_frame_ranges_align_and_dtype(tmp_path):
    data = codes_for("int32", (1000, 2), np.random.default_rng(8))
    p = str(tmp_path / "a.wav")
    write_wav(p, data, 8000, "int32")
    # Two splits of one file, as two tasks would read it, together give the whole file.
    parts = [list(iter_segments(p, 64, start_sample=5000, start_frame=a, stop_frame=b,
                                align=True, dtype=np.float64))
             for a, b in [(0, 300), (300, None)]]
    blocks = parts[0] + parts[1]
    starts = [s for s, _ in blocks]
    assert [s for s in starts if s % 64] == [5000, 5300]  # only where a split starts
    assert [s + a.shape[1] for s, a in parts[0]][:2] == [5056, 5120]  # then on the grid
    assert [s + a.shape[1] for s, a in blocks[:-1]] == starts[1:]  # contiguous
    got = np.concatenate([a for _, a in blocks], axis=1)
    np.testing.assert_array_equal(got, (data / 2 ** 31).T)  # exact in float64
    assert list(iter_segments(p, 10, start_frame=1000)) == []
    with pytest.raises(ValueError, match="segment"):
        iter_segments(p, 0)  # checked when called, not on the first next()
    with pytest.raises(ValueError, match="start_frame"):
        iter_segments(p, 10, start_frame=1001)


# ---------------------------------------------------------------------------------- timelines

def make_files(tmp_path, lengths: dict, rate=1000, channels=1):
    for name, n in lengths.items():
        write_wav(str(tmp_path / name), np.zeros((n, channels)), rate)
    return [str(tmp_path / name) for name in lengths]


def test_plan_timeline_concatenates_in_natural_name_order(tmp_path):
    paths = make_files(tmp_path, {"rec_10.wav": 30, "rec_2.wav": 20, "rec_1.wav": 10,
                                  "rec_02b.wav": 5})
    plan = plan_timeline(reversed(paths + [paths[0]]), 1000, start_sample=100)  # dup: once
    names = [os.path.basename(p.path) for p in plan]
    assert names == ["rec_1.wav", "rec_2.wav", "rec_02b.wav", "rec_10.wav"]
    assert [(p.start_sample, p.end_sample) for p in plan] == [(100, 110), (110, 130),
                                                              (130, 135), (135, 165)]
    assert all(isinstance(p, FilePlacement) and p.info.frames for p in plan)
    assert plan_timeline([], 1000) == []


def test_plan_timeline_timestamped_keeps_gaps(tmp_path):
    paths = make_files(tmp_path, {"b_2024-01-01T00-00-01.5Z.wav": 500,  # 1.5 s -> 1500
                                  "a_20240101T000000Z.wav": 1000,       # 0 s -> 0, ends 1000
                                  "c_1704067205000.wav": 10,            # unix ms: 5 s
                                  "d_2024-01-01T01:00:06+01:00.wav": 7})  # = 00:00:06Z
    epoch_us = 1704067200 * 10 ** 6  # 2024-01-01T00:00:00Z
    plan = plan_timeline(paths, 1000, mode="timestamped", epoch_us=epoch_us)
    assert [(os.path.basename(p.path)[0], p.start_sample, p.end_sample) for p in plan] == [
        ("a", 0, 1000), ("b", 1500, 2000), ("c", 5000, 5010), ("d", 6000, 6007)]
    # Without an epoch, sample numbers count from 1970 (they fit easily in int64).
    assert plan_timeline(paths, 1000, mode="timestamped")[0].start_sample == epoch_us // 1000


def test_plan_timeline_overlap_is_an_error_and_tolerance_snaps(tmp_path):
    paths = make_files(tmp_path, {"m_1704067200000.wav": 1000, "m_1704067200998.wav": 10})
    with pytest.raises(WavError) as ei:
        plan_timeline(paths, 1000, mode="timestamped")
    assert_wav_error(ei, "OVERLAPPING_FILES", "m_1704067200998.wav", "m_1704067200000.wav",
                     "2 samples overlap")
    plan = plan_timeline(paths, 1000, mode="timestamped", tolerance=2)
    assert plan[1].start_sample == plan[0].end_sample


def test_plan_timeline_checks_each_file(tmp_path):
    paths = make_files(tmp_path, {"a_1.wav": 10})
    paths += make_files(tmp_path, {"b_2.wav": 10}, rate=2000)
    with pytest.raises(WavError) as ei:
        plan_timeline(paths, 1000)
    assert_wav_error(ei, "RATE_MISMATCH", "b_2.wav", "2000 Hz")
    with pytest.raises(WavError) as ei:
        plan_timeline(paths[:1], 1000, channels=2)
    assert_wav_error(ei, "CHANNEL_MISMATCH", "a_1.wav")
    with pytest.raises(WavError) as ei:
        plan_timeline(paths[:1], 1000, mode="timestamped")
    assert_wav_error(ei, "INVALID_FILE_TIMESTAMP", "a_1.wav", "unix ms")


@pytest.mark.parametrize("name, ns", [
    ("x_1970-01-01T00:00:00Z.wav", 0),
    ("x_1970-01-01T00-00-01,000000001.wav", 1_000_000_001),
    ("19700101T000002-0130.WAV", 2 * 10 ** 9 + 5400 * 10 ** 9),
    ("site_3_mic_0000000001000.wav", 10 ** 9),
])
def test_parse_file_timestamp(name, ns):
    assert parse_file_timestamp(name) == ns


@pytest.mark.parametrize("name", ["x_2024-02-30T00-00-00Z.wav", "x_2024-01-01T24-00-00.wav",
                                  "x_123.wav", "x.wav", "x_2024-01-01.wav"])
def test_parse_file_timestamp_rejects(name):
    with pytest.raises(WavError) as ei:
        parse_file_timestamp(name)
    assert_wav_error(ei, "INVALID_FILE_TIMESTAMP", name)


def test_docstring_examples_run():
    for module in (wav, wav.header, wav.decode, wav.write, wav.timeline):
        assert doctest.testmod(module).failed == 0


# ---------------------------------------------------------------------------------- throughput

def test_throughput_sanity(tmp_path, capsys):
    """Not an assertion on speed: prints the read rate of a 100 M-sample float32 file."""
    n = 100_000_000
    p = str(tmp_path / "big.wav")
    write_wav(p, np.full(n, 0.25, np.float32), 48000, "float32")
    best = 0.0
    for _ in range(3):
        t0, total = time.perf_counter(), 0
        for _, block in iter_segments(p, 1 << 20):
            total += block.shape[1]
        best = max(best, total / (time.perf_counter() - t0))
    assert total == n and block[0, -1] == 0.25
    with capsys.disabled():
        print(f"\n[wav throughput] iter_segments float32 mono, segment=1<<20: "
              f"{best / 1e6:.0f} M samples/s (best of 3, page-cached)")
