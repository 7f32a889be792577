"""Decode audio files or bytes to float32 mono at the rate a model wants.

Decoding is ``soundfile`` (libsndfile 1.2, bundled in its wheels): WAV/RF64, FLAC, OGG (Vorbis, Opus), MP3,
AIFF, CAF and the other formats ``soundfile.available_formats()`` lists; not AAC/M4A, which libsndfile lacks.
Resampling is ``soxr`` (libsoxr, "HQ" quality), for any pair of rates.
"""

from __future__ import annotations

import io
import os
from typing import BinaryIO

import numpy as np
import soundfile
import soxr

AudioSource = str | os.PathLike | bytes | bytearray | memoryview | BinaryIO


def load_audio(source: AudioSource, sampling_rate: int = 16000) -> np.ndarray:
    """``source`` (a path, the bytes of a file, or a binary file object) as float32 mono at ``sampling_rate``.

    Channels are averaged. Raises FileNotFoundError for a missing path and ValueError for data that is not
    audio libsndfile can decode (the message names the source and libsndfile's reason).
    """
    if isinstance(sampling_rate, bool) or not isinstance(sampling_rate, int) or sampling_rate <= 0:
        raise ValueError(f"sampling_rate must be a positive integer (Hz), got {sampling_rate!r}")
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        if not data:
            raise ValueError("Not audio: the bytes are empty")
        file, what = io.BytesIO(data), f"{len(data)} bytes starting {data[:16]!r}"
    elif isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Audio file {path!r} does not exist")
        file, what = path, repr(path)
    elif hasattr(source, "read"):
        file, what = source, repr(source)
    else:
        raise TypeError(f"load_audio takes a path, bytes or a binary file object, not {type(source).__name__}")
    try:
        samples, rate = soundfile.read(file, dtype="float32", always_2d=True)
    except soundfile.LibsndfileError as error:
        reason = getattr(error, "error_string", None) or str(error)
        raise ValueError(f"Not audio libsndfile can decode: {what}: {reason}") from error
    mono = samples.mean(axis=1, dtype=np.float32) if samples.shape[1] > 1 else samples[:, 0]
    if rate != sampling_rate and mono.size:
        mono = soxr.resample(mono, rate, sampling_rate, quality="HQ")
    return np.ascontiguousarray(mono, dtype=np.float32)
