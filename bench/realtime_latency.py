"""Live transcription latency over the Realtime API (``GET /v1/realtime``): from the end of each turn's speech to its
``conversation.item.input_audio_transcription.completed`` event, p50 and p90.

A recording of known content (``tt_models.testing.long_recording``: pieces of the real call and espeak-ng sentences
with 1.5 s pauses and a -60 dBFS noise floor; about 55 s) is streamed as 24 kHz PCM16 in 100 ms chunks at real-time
pace with the official openai client against ``tt-models serve`` (started here, host backend) with server VAD. A
piece's speech ends at its last sample (known from the recording); its latency is the time from sending the chunk
that holds that sample to the completed event of the turn it ends. It includes ``silence_duration_ms`` (500 ms:
the silence VAD waits for before it commits a turn) and the turn's transcription.

    .venv/bin/python bench/realtime_latency.py [--model whisper-tiny.en] [--optimizations accuracy] [--sessions 1]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import openai
import soxr

from tt_models.testing.long_recording import LAYOUT, SAMPLE_RATE, long_recording
from tt_models.testing.server_process import free_port, stop, wait_healthy

PCM_RATE = 24000
CHUNK_SECONDS = 0.1
SILENCE_MS = 500


def pcm16(waveform: np.ndarray) -> bytes:
    """16 kHz float samples as the 24 kHz PCM16 a Realtime client sends."""
    resampled = soxr.resample(waveform, SAMPLE_RATE, PCM_RATE, quality="HQ")
    return np.clip(np.round(resampled * 32768), -32768, 32767).astype("<i2").tobytes()


async def turn_latencies(url: str, model: str, pcm: bytes, speech_ends: list[float], api_key: str = "unused",
                         silence_duration_ms: int = SILENCE_MS) -> list[float]:
    """Stream ``pcm`` (24 kHz PCM16) at real-time pace over one Realtime session; for each speech end (seconds into
    the recording, one per turn), seconds from sending its last sample to its turn's completed event."""
    chunk = int(PCM_RATE * CHUNK_SECONDS) * 2
    sent_at: list[float] = []  # when each chunk went out
    stopped: dict[str, float] = {}  # item -> the turn's audio end (seconds into the recording)
    completed: dict[str, float] = {}  # item -> when its completed event arrived
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=api_key, max_retries=0)
    async with client.realtime.connect(model=model, extra_query={"intent": "transcription"}) as connection:
        async def receive() -> None:
            # Until the last speech's turn has stopped and every turn is transcribed (a piece may be two turns).
            while not stopped or max(stopped.values()) < speech_ends[-1] or set(completed) != set(stopped):
                event = await connection.recv()
                if event.type == "input_audio_buffer.speech_stopped":
                    stopped[event.item_id] = event.audio_end_ms / 1000
                elif event.type == "conversation.item.input_audio_transcription.completed":
                    completed[event.item_id] = time.monotonic()
                elif event.type == "error":
                    raise RuntimeError(f"the server sent an error: {event.error}")

        receiving = asyncio.create_task(receive())
        await connection.session.update(session={"type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": PCM_RATE},
            "turn_detection": {"type": "server_vad", "silence_duration_ms": silence_duration_ms}}}})
        start = time.monotonic()
        for index in range(0, -(-len(pcm) // chunk)):
            await asyncio.sleep(max(0.0, start + index * CHUNK_SECONDS - time.monotonic()))
            await connection.input_audio_buffer.append(audio=base64.b64encode(pcm[index * chunk:
                                                                                   (index + 1) * chunk]).decode())
            sent_at.append(time.monotonic())
        await asyncio.wait_for(receiving, 120)
    latencies = []
    for end in speech_ends:
        # The turn this speech ends: the first whose audio (speech and the silence after it) reaches past it.
        item = min((t for t in stopped if stopped[t] >= end), key=lambda t: stopped[t])
        latencies.append(completed[item] - sent_at[int(end * PCM_RATE * 2) // chunk])
    return latencies


def run(url: str, model: str, sessions: int) -> list[float]:
    """Every piece's latency, over ``sessions`` sessions streaming the recording at once."""
    with tempfile.TemporaryDirectory() as directory:
        recording = long_recording(Path(directory), LAYOUT)
    pcm = pcm16(recording.waveform)
    ends = [piece.end for piece in recording.pieces]

    async def all_sessions() -> list[list[float]]:
        return await asyncio.gather(*(turn_latencies(url, model, pcm, ends) for _ in range(sessions)))

    return [latency for latencies in asyncio.run(all_sessions()) for latency in latencies]


def serve_latencies(model: str = "whisper-tiny.en", optimizations: str = "accuracy", sessions: int = 1) -> np.ndarray:
    """Every piece's latency, against ``tt-models serve`` started here (host backend) and stopped after."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "tt_models.server.cli", "serve", model, "--port", str(port),
               "--backend", "host", "--optimizations", optimizations, "--max-num-seqs", "8"]
    process = subprocess.Popen(command, cwd=Path(__file__).resolve().parents[1])
    try:
        wait_healthy(url, process)
        return np.array(run(url, model, sessions))
    finally:
        stop(process, 30)


def report(latencies: np.ndarray, model: str, optimizations: str, sessions: int) -> str:
    return (f"{model}, host backend, {optimizations}, {sessions} session(s), silence_duration_ms {SILENCE_MS}: "
            f"{latencies.size} speech ends\n"
            f"end of speech -> completed: p50 {np.percentile(latencies, 50):.3f} s, "
            f"p90 {np.percentile(latencies, 90):.3f} s (min {latencies.min():.3f}, max {latencies.max():.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="whisper-tiny.en")
    parser.add_argument("--optimizations", default="accuracy", choices=["accuracy", "performance"])
    parser.add_argument("--sessions", type=int, default=1, help="sessions streaming at once")
    args = parser.parse_args()
    latencies = serve_latencies(args.model, args.optimizations, args.sessions)
    print(report(latencies, args.model, args.optimizations, args.sessions))


if __name__ == "__main__":
    main()
