"""The TT vLLM generator class of the Llama family (the contract of ``research/contract.md`` section 9).

TT vLLM calls every method with keywords and keeps adding new ones, so each takes ``**kwargs``. Prefill
rows arrive unpadded (``n`` requests) with stale tails in token and page-table rows; decode arrives
padded to ``max_batch_size`` with ``start_pos = -1`` and zero page-table rows in padding rows.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from tt_models.checkpoints import load_hf_checkpoint
from tt_models.models.llama.model import LlamaModel
from tt_models.runtime import ttnn, use
from tt_models.tt.kv_cache import allocate_paged_kv_cache
from tt_models.tt.weights import to_host


def _as_tensor(values: Any, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    if isinstance(values, torch.Tensor):
        return values.to(dtype)
    return torch.as_tensor(np.asarray(values), dtype=dtype)


class LlamaForCausalLM:
    """Llama-family text generation on TT-NN, one model replica per data-parallel submesh."""

    model_capabilities = {"supports_prefix_caching": True}

    def __init__(self, models: list[LlamaModel], devices: list[Any], max_batch_size: int) -> None:
        self.models = models
        self.devices = devices
        self.max_batch_size = max_batch_size
        self.users_per_replica = max_batch_size // len(models)

    @classmethod
    def initialize_vllm_model(cls, hf_config: Any, mesh_device: Any, max_batch_size: int, max_seq_len: int = 4096,
                              tt_data_parallel: int = 1, optimizations: str | None = None,
                              **kwargs: Any) -> "LlamaForCausalLM":
        """Weights come from ``hf_config._name_or_path`` (an HF directory, local-cache id or checkpoint file)."""
        state = load_hf_checkpoint(hf_config._name_or_path).state_dict
        return cls.from_state_dict(hf_config, state, mesh_device, max_batch_size, max_seq_len=max_seq_len,
                                   tt_data_parallel=tt_data_parallel, optimizations=optimizations)

    @classmethod
    def from_state_dict(cls, hf_config: Any, state: dict[str, torch.Tensor], mesh_device: Any, max_batch_size: int,
                        max_seq_len: int = 4096, tt_data_parallel: int = 1,
                        optimizations: str | None = None) -> "LlamaForCausalLM":
        """Build from HF-named weights already in memory."""
        if tt_data_parallel < 1 or max_batch_size % tt_data_parallel:
            raise ValueError(f"tt_data_parallel={tt_data_parallel} must divide max_batch_size={max_batch_size}")
        per_replica = max_batch_size // tt_data_parallel
        with use(mesh_device):
            if tt_data_parallel == 1:
                devices = [mesh_device]
            else:
                chips = mesh_device.get_num_devices()
                if chips % tt_data_parallel:
                    raise ValueError(f"tt_data_parallel={tt_data_parallel} does not divide the {chips}-chip mesh")
                devices = mesh_device.create_submeshes(ttnn.MeshShape(1, chips // tt_data_parallel))
            models = [LlamaModel(hf_config, state, device, max_batch_size=per_replica, max_seq_len=max_seq_len,
                                 optimizations=optimizations) for device in devices]
        return cls(models, devices, max_batch_size)

    @classmethod
    def get_max_tokens_all_users(cls, *, max_model_len: int = 4096, max_num_seqs: int = 32, **kwargs: Any) -> int:
        """KV tokens for every user at full length."""
        return max_model_len * max_num_seqs

    def allocate_kv_cache(self, kv_cache_shape: Sequence[int], dtype: Any = None, num_layers: int | None = None,
                          **kwargs: Any) -> list[list[list[Any]]]:
        """``[replica][layer] -> [K, V]``; the dtype is the optimizations profile's (``dtype`` is vLLM's torch
        dtype, ignored as tt-metal does)."""
        caches = []
        for model, device in zip(self.models, self.devices):
            with use(device):
                layers = num_layers or model.args.n_layers
                caches.append(allocate_paged_kv_cache(kv_cache_shape, layers, model.precision.kv_cache, device))
        return caches

    def warmup_model_prefill(self, kv_cache: Any = None, enable_trace: bool = False, can_sample_on_device: bool = False,
                             **kwargs: Any) -> None:
        """Compile the prefill path; the page table is all ``-1``, so nothing is written to the cache."""
        if kv_cache is None:
            return
        for replica, (model, device) in enumerate(zip(self.models, self.devices)):
            block_size = kv_cache[replica][0][0].shape[2]
            with use(device):
                model.prefill(torch.zeros(block_size, dtype=torch.int64), 0, block_size,
                              torch.full((1,), -1, dtype=torch.int32), kv_cache[replica])

    def warmup_model_decode(self, kv_cache: Any = None, enable_trace: bool = False, max_batch_size: int | None = None,
                            num_blocks: int | None = None, can_sample_on_device: bool = False, **kwargs: Any) -> None:
        """Compile the decode path with every row a padding row (``start_pos = -1``: no cache writes)."""
        if kv_cache is None:
            return
        users = self.users_per_replica
        for replica, (model, device) in enumerate(zip(self.models, self.devices)):
            with use(device):
                model.decode(torch.zeros(users, dtype=torch.int64), torch.full((users,), -1),
                             torch.zeros(users, num_blocks or 1, dtype=torch.int32), kv_cache[replica])

    def prefill_forward(self, *, tokens: Any, page_table: Any, kv_cache: Any, prompt_lens: Any,
                        start_pos: Any = None, enable_trace: bool = False, empty_slots: Any = None,
                        **kwargs: Any) -> torch.Tensor:
        """Logits ``[n, 1, V]`` of each row's last position ``prompt_lens[i] - 1``."""
        tokens, page_table = _as_tensor(tokens), _as_tensor(page_table, torch.int32)
        ends = _as_tensor(prompt_lens).tolist()
        starts = [0] * len(ends) if start_pos is None else _as_tensor(start_pos).tolist()
        slots = list(range(len(ends))) if empty_slots is None else _as_tensor(empty_slots).tolist()
        out = []
        for row, (start, end, slot) in enumerate(zip(starts, ends, slots)):
            if not 0 <= start < end <= tokens.shape[1]:
                raise ValueError(f"prefill row {row}: need 0 <= start_pos ({start}) < prompt_len ({end}) "
                                 f"<= tokens width ({tokens.shape[1]})")
            replica = slot // self.users_per_replica
            with use(self.devices[replica]):
                out.append(self.models[replica].prefill(tokens[row], start, end, page_table[row], kv_cache[replica]))
        return torch.stack(out)[:, None, :]

    def decode_forward(self, *, tokens: Any, start_pos: Any, page_table: Any, kv_cache: Any, enable_trace: bool = False,
                       read_from_device: bool = True, **kwargs: Any) -> Any:
        """One token per row of a batch padded to ``max_batch_size``; logits ``[B, 1, V]`` (device tensors
        when ``read_from_device`` is False: pass them to :meth:`process_decode_output_host`)."""
        tokens = _as_tensor(tokens).reshape(-1)
        positions = _as_tensor(start_pos)
        page_table = _as_tensor(page_table, torch.int32)
        if tokens.shape[0] != self.max_batch_size or positions.shape[0] != self.max_batch_size:
            raise ValueError(f"decode batch {tokens.shape[0]} != max_batch_size {self.max_batch_size}: "
                             f"TT vLLM pads decode to max_num_seqs")
        users = self.users_per_replica
        outputs = []
        for replica, (model, device) in enumerate(zip(self.models, self.devices)):
            rows = slice(replica * users, (replica + 1) * users)
            with use(device):
                outputs.append(model.decode(tokens[rows], positions[rows], page_table[rows], kv_cache[replica]))
        return self.process_decode_output_host(outputs) if read_from_device else outputs

    def read_decode_output(self, tt_out: Any, async_read: bool = False, **kwargs: Any) -> Any:
        host = self.process_decode_output_host(tt_out)
        return (host, []) if async_read else host

    def process_decode_output_host(self, tt_out: Any, is_tokens: bool = False, **kwargs: Any) -> torch.Tensor:
        """Logits ``[B, 1, V]`` from the raw device outputs or from already-read host logits."""
        if isinstance(tt_out, torch.Tensor):
            return tt_out
        rows = []
        for out, device in zip(tt_out, self.devices):
            with use(device):
                rows.append(to_host(out, device)[0, 0, : self.users_per_replica].float())
        return torch.cat(rows)[:, None, :]


class Qwen2ForCausalLM(LlamaForCausalLM):
    """Qwen2 (biased Q/K/V projections) on the Llama-family blocks."""


class MistralForCausalLM(LlamaForCausalLM):
    """Mistral (sliding-window attention when its config sets one) on the Llama-family blocks."""
