"""vLLM's offline-inference class over tt-models' engine; ``tt_models.LLM`` is its subclass with speech
(``tt_models.speech.llm``: transcription builds on the engine, so the engine does not import it)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from tqdm import tqdm
from transformers import PreTrainedTokenizerBase

from tt_models.engine.chat import Conversation, conversation_prompt
from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.engine.outputs import RequestOutput
from tt_models.engine.prompts import PromptType
from tt_models.engine.sampling import RequestOutputKind, SamplingParams


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
                 sample_on_device: bool = False, free_out_of_window_blocks: bool = True,
                 enable_prefix_caching: bool = True) -> None:
        config = EngineConfig(max_num_seqs=max_num_seqs, max_model_len=max_model_len, block_size=block_size,
                              num_kv_blocks=num_kv_blocks, num_host_kv_blocks=num_host_kv_blocks,
                              max_num_batched_tokens=max_num_batched_tokens,
                              enable_chunked_prefill=enable_chunked_prefill, preemption_mode=preemption_mode,
                              data_parallel_size=data_parallel_size, async_decode=async_decode,
                              sample_on_device=sample_on_device, free_out_of_window_blocks=free_out_of_window_blocks,
                              enable_prefix_caching=enable_prefix_caching)
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

    def chat(self, messages: Conversation | Sequence[Conversation],
             sampling_params: SamplingParams | Sequence[SamplingParams] | None = None, use_tqdm: bool = True,
             add_generation_prompt: bool = True, chat_template_kwargs: dict[str, Any] | None = None
             ) -> list[RequestOutput]:
        """vLLM's ``LLM.chat``: each conversation through the model's chat template (images as ``image_pil`` or
        inline ``image_url`` parts, tt_models/engine/chat.py), then :meth:`generate`. One conversation may be
        given alone."""
        conversations = [messages] if messages and isinstance(messages[0], Mapping) else list(messages)
        tokenizer, kwargs = self.get_tokenizer(), chat_template_kwargs or {}
        prompts = []
        for i, conversation in enumerate(conversations):
            try:
                prompts.append(conversation_prompt(tokenizer, conversation,
                                                   add_generation_prompt=add_generation_prompt, **kwargs))
            except ValueError as e:
                raise ValueError(f"conversation {i}: {e}") from e
        return self.generate(prompts, sampling_params, use_tqdm)

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
