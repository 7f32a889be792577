"""The worker that serves tt-models' encoder-decoder classes under TT vLLM:
``vllm serve <dir> --worker-cls tt_models.vllm.encoder_decoder_worker.TTEncoderDecoderWorker``.

vllm-tt-plugin's worker, unchanged for decoder-only models; for an encoder-decoder model (Whisper, BART, MBart) it
builds :class:`~tt_models.vllm.encoder_decoder_runner.TTEncoderDecoderModelRunner` instead of the plugin's runner
(which refuses them) and gives vLLM the KV layout of the contract's paged cross-attention: per decoder layer ``j``
a self-attention layer ``model.decoder.layers.j.self_attn`` and a cross-attention layer
``model.decoder.layers.j.encoder_attn`` of the same page size, which vLLM's hybrid KV cache manager (the TT
platform enables it) puts in two groups sharing one tensor per layer, from one block pool;
``--num-gpu-blocks-override`` may make that pool smaller than the plugin sizes it.
"""

from __future__ import annotations

from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
from vllm.v1.kv_cache_interface import CrossAttentionSpec, FullAttentionSpec, KVCacheSpec
from vllm_tt_plugin import worker as plugin_worker
from vllm_tt_plugin.config import get_tt_config
from vllm_tt_plugin.platform import TTPlatform
from vllm_tt_plugin.worker import TTWorker

from tt_models.vllm.encoder_decoder_runner import TTEncoderDecoderModelRunner


class TTEncoderDecoderWorker(TTWorker):
    def init_device(self) -> None:
        """The plugin's ``init_device`` with the encoder-decoder runner: the same device binding, config check and
        mesh (through the plugin module's ``open_mesh_device``, which tt-models' host backend replaces)."""
        if not self.model_config.is_encoder_decoder:
            super().init_device()
            return
        plugin_worker._bind_visible_devices_env(self.vllm_config)
        TTPlatform.check_and_update_config(self.vllm_config)
        self.mesh_device = plugin_worker.open_mesh_device(get_tt_config(self.vllm_config), self.trace_mode,
                                                          self.parallel_config.data_parallel_rank_local)
        self.device = self.mesh_device
        self.device_config.device = self.mesh_device
        self.num_devices = self.mesh_device.get_num_devices()
        self.model_runner = TTEncoderDecoderModelRunner(
            vllm_config=self.vllm_config, mesh_device=self.mesh_device, trace_mode=self.trace_mode,
            enable_model_warmup=self.enable_model_warmup, num_devices=self.num_devices)

    def determine_available_memory(self) -> int:
        """The plugin's pool (every user at full length: decoder tokens and the longest encoder's cross blocks), or a
        smaller one of ``--num-gpu-blocks-override`` blocks (which the plugin's worker overwrites): room for fewer
        users at full length, the scheduler preempting when the pool runs out."""
        requested = self.cache_config.num_gpu_blocks_override
        available = super().determine_available_memory()
        if not self.model_config.is_encoder_decoder or requested is None \
                or requested >= self.cache_config.num_gpu_blocks_override:
            return available
        self.cache_config.num_gpu_blocks_override = requested
        return plugin_worker._available_kv_cache_memory_bytes_for_num_blocks(self.vllm_config,
                                                                             self.get_kv_cache_spec(), requested)

    def get_kv_cache_spec(self) -> dict[str, KVCacheSpec]:
        if not self.model_config.is_encoder_decoder:
            return super().get_kv_cache_spec()
        config = self.model_config.hf_config
        heads = config.decoder_attention_heads
        dtype = (self.model_config.dtype if self.cache_config.cache_dtype == "auto"
                 else STR_DTYPE_TO_TORCH_DTYPE[self.cache_config.cache_dtype])
        shape = dict(block_size=self.cache_config.block_size, num_kv_heads=heads, head_size=config.d_model // heads,
                     dtype=dtype)
        specs: dict[str, KVCacheSpec] = {}
        for j in range(config.decoder_layers):
            specs[f"model.decoder.layers.{j}.self_attn"] = FullAttentionSpec(**shape)
            specs[f"model.decoder.layers.{j}.encoder_attn"] = CrossAttentionSpec(**shape)
        return specs
