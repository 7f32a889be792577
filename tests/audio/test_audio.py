"""Audio decoding and resampling, the pyannote speech sample and its STM transcript, and WER."""

import io
import sys

import numpy as np
import pytest
import soundfile

from tt_models.audio import load_audio, normalize_english, parse_stm, speech_sample, word_error_rate
from tt_models.audio import wer as wer_module
from tt_models import package_data


def _sine(frequency: float, rate: int, seconds: float = 1.0, channels: int = 1) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    tone = 0.5 * np.sin(2 * np.pi * frequency * t).astype(np.float32)
    return np.stack([tone] * channels, axis=1) if channels > 1 else tone


def _encode(samples: np.ndarray, rate: int, fmt: str) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=fmt)
    return buffer.getvalue()


def _peak_hz(audio: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(audio * np.hanning(len(audio))))
    return float(np.fft.rfftfreq(len(audio), 1 / rate)[spectrum.argmax()])


def test_8khz_wav_bytes_upsample_to_16khz():
    audio = load_audio(_encode(_sine(440, 8000), 8000, "WAV"), sampling_rate=16000)
    assert audio.dtype == np.float32 and audio.shape == (16000,)
    assert abs(_peak_hz(audio, 16000) - 440) <= 1
    assert 0.45 < np.abs(audio[1000:-1000]).max() < 0.55


@pytest.mark.parametrize("fmt", ["WAV", "FLAC", "OGG", "MP3"])
def test_44khz_stereo_file_downsamples_to_16khz_mono(tmp_path, fmt):
    path = tmp_path / f"tone.{fmt.lower()}"
    path.write_bytes(_encode(_sine(1000, 44100, channels=2), 44100, fmt))
    audio = load_audio(path)
    # MP3 encoders add a little priming/padding; the others keep the length exactly.
    assert audio.shape == (16000,) if fmt != "MP3" else abs(audio.shape[0] - 16000) < 1200
    assert abs(_peak_hz(audio, 16000) - 1000) <= 2


def test_channels_are_averaged_and_rates_kept():
    stereo = np.stack([_sine(300, 16000), np.zeros(16000, np.float32)], axis=1)
    audio = load_audio(io.BytesIO(_encode(stereo, 16000, "WAV")))
    np.testing.assert_allclose(audio, _sine(300, 16000) / 2, atol=1e-4)


def test_non_audio_is_a_value_error_that_names_the_problem(tmp_path):
    with pytest.raises(ValueError, match=r"Not audio libsndfile can decode: 25 bytes starting b'This is plain .*"
                                         r"Format not recognised"):
        load_audio(b"This is plain text, sorry")
    with pytest.raises(ValueError, match="bytes are empty"):
        load_audio(b"")
    text_file = tmp_path / "notes.wav"
    text_file.write_text("RIFF? no, just text pretending to be a WAV file")
    with pytest.raises(ValueError, match=r"notes\.wav"):
        load_audio(text_file)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_audio(tmp_path / "missing.wav")
    with pytest.raises(ValueError, match="positive integer"):
        load_audio(_encode(_sine(440, 8000), 8000, "WAV"), sampling_rate=0)
    with pytest.raises(TypeError, match="not int"):
        load_audio(16000)


# ------------------------------------------------------------------------------------------------ STM, sample


def test_stm_conventions():
    text = """;; comment lines are skipped
call 1 B 5.0 7.5 <o,f0,female> Second   turn,  spaced out.
call 1 A 0.5 2.25 First turn.

call 1 excluded 2.25 3.0 IGNORE_TIME_SEGMENT_IN_SCORING
call 1 inter_segment_gap 3.0 5.0
other 1 C 0.0 1.0 Another recording.
"""
    segments = parse_stm(text, waveform="call")
    assert segments == [(0.5, 2.25, "A", "First turn."), (5.0, 7.5, "B", "Second turn, spaced out.")]
    assert len(parse_stm(text)) == 3
    with pytest.raises(ValueError, match="STM line 2 has 4 fields"):
        parse_stm("call 1 A 0.0 1.0 ok\ncall 1 A 2.0")
    with pytest.raises(ValueError, match="STM line 1: segment 2.0..1.0 s"):
        parse_stm("call 1 A 2.0 1.0 backwards")
    with pytest.raises(ValueError, match="STM line 1: begin/end times 'x'"):
        parse_stm("call 1 A x 1.0 words")


def test_speech_sample_and_its_transcript():
    audio, rate, segments = speech_sample()
    assert rate == 16000 and audio.dtype == np.float32 and audio.shape == (480000,)  # 30.0 s
    assert 0.1 < np.abs(audio).max() <= 1.0 and np.abs(audio[: 6 * rate]).max() < np.abs(audio).max() / 4
    assert len(segments) == 13 and {s.speaker for s in segments} == {"Diane", "Sheila"}
    assert segments[0] == (6.68, 7.16, "Diane", "Hello?")
    assert segments[-1] == (28.445, 29.987, "Diane", "Oh, I don't hear that in New Jersey now.")
    assert all(a.start <= b.start for a, b in zip(segments, segments[1:]))
    assert sum(len(normalize_english(s.text).split()) for s in segments) == 87
    assert "pyannote.audio" not in sys.modules  # found by find_spec, never imported
    assert speech_sample(sampling_rate=8000)[0].shape == (240000,)


def test_missing_pyannote_names_the_pip_command(monkeypatch):
    monkeypatch.setattr(package_data.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install --no-deps pyannote\.audio==4\.0\.7"):
        speech_sample()


# ------------------------------------------------------------------------------------------------------- WER


def test_word_error_rate_compares_normalised_text():
    assert word_error_rate("Hello, I'm in New Jersey.", "hello i am in new jersey") == 0.0
    assert word_error_rate("The colour is grey", "the color is gray") == 0.0  # British -> American spelling
    assert word_error_rate("Um, twenty five dollars", "$25") == 0.0  # fillers dropped, numbers as digits
    assert word_error_rate("the cat sat down", "the cat sad down") == 0.25
    assert word_error_rate("one two three four", "1234") == 0.0  # spelled-out numbers become one number
    assert word_error_rate("a b c d", "a b c d e f") == 0.5  # insertions count
    assert word_error_rate("a b c d", "") == 1.0
    assert word_error_rate("Hello there", "hello there", normalize=False) == 0.5
    assert word_error_rate(["Hello?", "Oh, hello."], "hello oh hello") == 0.0


def test_word_error_rate_needs_reference_words_and_the_spelling_data(monkeypatch):
    with pytest.raises(ValueError, match="reference has no words"):
        word_error_rate("Um, uh. Hmm!", "anything")
    wer_module.english_spelling_mapping.cache_clear()
    wer_module._normalizer.cache_clear()
    monkeypatch.setattr(package_data.importlib.util, "find_spec", lambda name: None)
    try:
        with pytest.raises(ModuleNotFoundError, match=r"pip install --no-deps whisper-normalizer==0\.1\.15"):
            word_error_rate("a", "a")
    finally:
        wer_module.english_spelling_mapping.cache_clear()
        wer_module._normalizer.cache_clear()
