"""``tt_models.LLM``: vLLM's offline-inference class over tt-models' engine."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from tqdm import tqdm
from transformers import PreTrainedTokenizerBase

from tt_models.engine.config import EngineConfig
from tt_models.engine.inputs import PromptType
from tt_models.engine.llm_engine import LLMEngine
from tt_models.engine.outputs import RequestOutput
from tt_models.engine.sampling import RequestOutputKind, SamplingParams

if TYPE_CHECKING:  # tt_models.speech builds on this module: imported when transcribing
    from tt_models.speech import Transcript


class LLM:
    """A model and its engine, for batch generation.

    ``model`` is an HF directory, an HF id in the local cache, a ``.gguf`` file, a CTranslate2 Whisper
    directory or a checkpoint alias (``smollm2-135m-instruct``, ``whisper-tiny.en``, ``whisper-base``).
    ``backend`` picks where TT-NN runs (``"ttnn"``, ``"mock"``, ``"host"``; default: a TT card if present,
    else the host backend); ``optimizations`` is the weight profile (``"accuracy"`` / ``"performance"``).
    ``data_parallel_size`` replicas of the model run on as many submeshes of the device (``mesh_shape``, default
    ``(1, data_parallel_size)``: on the host backend, a mesh of host devices), each tensor-parallel over its chips:
    ``mesh_shape=(1, 8)`` is one replica over a T3K's 8 chips, with ``data_parallel_size=2`` two over 4 each. The
    other arguments are :class:`EngineConfig`'s.
    """

    def __init__(self, model: str, *, max_num_seqs: int = 32, max_model_len: int | None = None,
                 block_size: int = 64, num_kv_blocks: int | None = None, max_num_batched_tokens: int | None = None,
                 enable_chunked_prefill: bool = True, preemption_mode: Literal["recompute", "swap"] | None = None,
                 num_host_kv_blocks: int | None = None, backend: str | None = None,
                 optimizations: str | None = None, data_parallel_size: int = 1,
                 mesh_shape: tuple[int, int] | None = None, async_decode: bool = False,
                 sample_on_device: bool = False) -> None:
        config = EngineConfig(max_num_seqs=max_num_seqs, max_model_len=max_model_len, block_size=block_size,
                              num_kv_blocks=num_kv_blocks, num_host_kv_blocks=num_host_kv_blocks,
                              max_num_batched_tokens=max_num_batched_tokens,
                              enable_chunked_prefill=enable_chunked_prefill, preemption_mode=preemption_mode,
                              data_parallel_size=data_parallel_size, async_decode=async_decode,
                              sample_on_device=sample_on_device)
        self.llm_engine = LLMEngine.from_model(model, config, backend=backend, optimizations=optimizations,
                                               mesh_shape=mesh_shape)
        self._request_counter = 0

    def get_tokenizer(self) -> PreTrainedTokenizerBase | None:
        return self.llm_engine.tokenizer

    def close(self) -> None:
        """Release the device."""
        self.llm_engine.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def generate(self, prompts: PromptType | Sequence[PromptType],
                 sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
                 use_tqdm: bool = True) -> list[RequestOutput]:
        """Generate for every prompt; outputs come back in the prompts' order.

        All prompts are checked before any runs: a bad one raises ValueError naming its index and the problem
        (as vLLM's ``LLM.generate`` does). A single prompt may be given alone.
        """
        if isinstance(prompts, (str, Mapping)) or (isinstance(prompts, list) and prompts
                                                   and isinstance(prompts[0], int)):
            prompts = [prompts]
        prompts = list(prompts)
        if isinstance(sampling_params, Sequence):
            if len(sampling_params) != len(prompts):
                raise ValueError(f"{len(sampling_params)} sampling params for {len(prompts)} prompts")
            params = list(sampling_params)
        else:
            params = [sampling_params or SamplingParams()] * len(prompts)
        # As vLLM's LLM: only finished outputs are wanted, so the engine builds none per step.
        params = [dataclasses.replace(p, output_kind=RequestOutputKind.FINAL_ONLY) if isinstance(p, SamplingParams)
                  else p for p in params]

        engine = self.llm_engine
        ids = []
        try:
            for i, (prompt, p) in enumerate(zip(prompts, params)):
                request_id = str(self._request_counter)
                self._request_counter += 1
                try:
                    engine.add_request(request_id, prompt, p)
                except ValueError as e:
                    raise ValueError(f"prompt {i}: {e}") from e
                ids.append(request_id)
        except BaseException:
            for request_id in ids:
                engine.abort_request(request_id)
            raise
        return self._run(ids, use_tqdm)

    def transcribe(self, audio: Any, *, language: str | None = None,
                   task: Literal["transcribe", "translate"] = "transcribe", timestamps: bool = False,
                   condition_on_previous_text: bool = False, prompt: str | None = None,
                   temperature: float | tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
                   compression_ratio_threshold: float | None = 2.4, logprob_threshold: float | None = -1.0,
                   no_speech_threshold: float | None = 0.6, vad: bool = True) -> Transcript:
        """Transcribe (or translate to English) one audio of any length with a Whisper model: ``(waveform, rate)``,
        a 16 kHz waveform or the bytes of an audio file. Long audio is cut into windows of at most 30 s that run
        as one batch of engine requests (``tt_models.speech``); ``timestamps`` gives timed segments, whose times
        ``vad`` moves in to their speech. Without a ``language`` a multilingual model detects it. A window whose
        text fails the thresholds is decoded again at the next of the ``temperature`` tuple (openai-whisper's
        fallback and defaults; one temperature: no fallback). Raises ValueError for bad audio, language, task or
        temperature."""
        return self.transcribe_batch([audio], language=language, task=task, timestamps=timestamps,
                                     condition_on_previous_text=condition_on_previous_text, prompt=prompt,
                                     temperature=temperature, compression_ratio_threshold=compression_ratio_threshold,
                                     logprob_threshold=logprob_threshold, no_speech_threshold=no_speech_threshold,
                                     vad=vad)[0]

    def transcribe_batch(self, audios: Sequence[Any], **options: Any) -> list[Transcript]:
        """:meth:`transcribe` for many audios at once, their windows batched together; every audio is checked
        before any runs (a bad one raises ValueError naming its index)."""
        from tt_models.speech import LongFormTranscription, TranscriptionOptions, run_transcriptions

        settings = TranscriptionOptions(**options)
        jobs = []
        for i, audio in enumerate(audios):
            try:
                jobs.append(LongFormTranscription(self.llm_engine.processor, audio, settings))
            except ValueError as e:
                raise ValueError(f"audio {i}: {e}") from e
        return run_transcriptions(self.llm_engine, jobs)

    def _run(self, ids: list[str], use_tqdm: bool) -> list[RequestOutput]:
        engine = self.llm_engine
        finished: dict[str, RequestOutput] = {}
        bar = tqdm(total=len(ids), desc="Processed prompts", dynamic_ncols=True, disable=not use_tqdm)
        try:
            while engine.has_unfinished_requests():
                for output in engine.step():
                    if output.finished:
                        finished[output.request_id] = output
                        bar.update(1)
        except BaseException:
            for request_id in ids:
                engine.abort_request(request_id)
            raise
        finally:
            bar.close()
        return [finished[request_id] for request_id in ids]
