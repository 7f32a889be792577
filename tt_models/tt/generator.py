"""Contract plumbing shared by the generator classes TT vLLM loads.

A generator holds one model replica per data-parallel submesh (``tt_data_parallel``), each serving a
contiguous range of ``max_batch_size / tt_data_parallel`` batch slots, and one paged KV cache per replica.
TT vLLM calls every method with keywords and keeps adding new ones, so each takes ``**kwargs``.

Decode runs as tt_transformers' generator runs it: the family builds the step's host inputs
(:mod:`tt_models.tt.decode_inputs`) and its device forward; with ``enable_trace`` the forward is captured once
per replica, sampling mode and input shapes and replayed (:mod:`tt_models.tt.decode_trace`), else it runs
eagerly on fresh device tensors. A family's prefill can do the same per row (:meth:`Generator.run_prefill`), from
traces captured at warm-up only. With ``sampling_params`` (TT vLLM's ``TTSamplingParams``) the device samples
(:mod:`tt_models.tt.sampling`) and tokens, not logits, come back; with ``reset_batch=False`` besides, the step feeds
itself the previous step's sampled tokens and positions (:mod:`tt_models.tt.decode_feedback`), so TT vLLM's async
decode can enqueue it before reading the previous one.
"""

from __future__ import annotations

import random
import weakref
from types import SimpleNamespace
from typing import Any, Callable, Sequence

import numpy as np
import torch

from tt_models.checkpoints import load_hf_checkpoint
from tt_models.runtime import backend_of, ttnn, use
from tt_models.tt.decode_feedback import FED, DecodeFeedback
from tt_models.tt.decode_inputs import HostInputs, to_device
from tt_models.tt.decode_trace import DecodeTraces
from tt_models.tt.kv_cache import KVCacheGroups, allocate_paged_kv_cache, group_page_tables, table_key
from tt_models.tt.lm_head import gather_logits
from tt_models.tt.sampling import ROWS, SamplingBatch, TTSampling
from tt_models.tt.weights import as_tensor, logits_to_host, to_host
from tt_models.vllm import VllmModelInterface


# A replica's host decode inputs: ``(model, rows, tokens, positions, page_table)``, the last three the replica's rows.
DecodeBuilder = Callable[[Any, slice, torch.Tensor, torch.Tensor, torch.Tensor], HostInputs]


def as_torch(values: Any, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """A runner argument (torch tensor, numpy array or list) as a torch tensor."""
    if isinstance(values, torch.Tensor):
        return values.to(dtype)
    return torch.as_tensor(np.asarray(values), dtype=dtype)


class Generator(VllmModelInterface):
    model_capabilities: dict[str, Any] = {}
    # TT vLLM's plugin adds sliding-window headroom to the block budget of a class that declares sliding-window KV specs
    # (``get_kv_cache_spec``): those whose config has a window (worker.py's ``_HYBRID_KV_CACHE_GROUPS_ENABLED``).
    _HYBRID_KV_CACHE_GROUPS_ENABLED = True
    # The longest prefill a warm-up with enable_trace captures (prefill_trace_lengths); None: the backend's default.
    max_prefill_trace_len: int | None = None

    def __init__(self, models: list[Any], devices: list[Any], max_batch_size: int) -> None:
        """``models``: one replica per device, each with ``n_layers``, ``precision`` and ``kv_geometry``
        (``(n_kv_heads, head_dim)`` of its KV pools)."""
        self.models = models
        self.devices = devices
        self.max_batch_size = max_batch_size
        self.users_per_replica = max_batch_size // len(models)
        self.mesh_device: Any = None  # the opened device the replicas' submeshes were split from (build_replicas)
        self.traces = DecodeTraces()
        self.prefill_traces = DecodeTraces()
        self.samplers = [TTSampling(device) for device in devices]
        self.sampling_rng = random.Random()  # seeds of unseeded requests
        self.feedback = DecodeFeedback(len(models))
        # Teardown: the traces are released when the generator is collected or, at the latest, at exit
        # (while the modules release_trace needs are still alive).
        weakref.finalize(self, self.traces.release)
        weakref.finalize(self, self.prefill_traces.release)

    def release_traces(self) -> None:
        """Release every captured decode and prefill trace."""
        self.traces.release()
        self.prefill_traces.release()

    @classmethod
    def initialize_vllm_model(cls, hf_config: Any, mesh_device: Any, max_batch_size: int, max_seq_len: int = 4096,
                              tt_data_parallel: int = 1, optimizations: str | None = None,
                              **kwargs: Any) -> "Generator":
        """Weights come from ``hf_config._name_or_path`` (an HF directory, local-cache id or checkpoint file) into
        the family's ``from_state_dict``."""
        state = load_hf_checkpoint(hf_config._name_or_path).state_dict
        return cls.from_state_dict(hf_config, state, mesh_device, max_batch_size, max_seq_len=max_seq_len,
                                   tt_data_parallel=tt_data_parallel, optimizations=optimizations)

    @classmethod
    def build_replicas(cls, mesh_device: Any, max_batch_size: int, tt_data_parallel: int,
                       build: Callable[[Any, int], Any]) -> "Generator":
        """Split the mesh into ``tt_data_parallel`` submeshes and ``build(device, users)`` a replica on each
        (each replica tensor-parallel over its submesh's chips: :mod:`tt_models.tt.tensor_parallel`)."""
        if tt_data_parallel < 1 or max_batch_size % tt_data_parallel:
            raise ValueError(f"tt_data_parallel={tt_data_parallel} must divide max_batch_size={max_batch_size}")
        with use(mesh_device):
            devices = [mesh_device]
            if tt_data_parallel > 1:
                chips = mesh_device.get_num_devices()
                if chips % tt_data_parallel:
                    raise ValueError(f"tt_data_parallel={tt_data_parallel} does not divide the {chips}-chip mesh")
                devices = mesh_device.create_submeshes(ttnn.MeshShape(1, chips // tt_data_parallel))
        users = max_batch_size // tt_data_parallel
        models = []
        for device in devices:
            with use(device):
                models.append(build(device, users))
        generator = cls(models, devices, max_batch_size)
        generator.mesh_device = mesh_device
        return generator

    def replica_backend(self, device: Any) -> str:
        """The backend of a replica's device: that of the mesh it was split from (a submesh was not opened
        itself)."""
        return backend_of(self.mesh_device if self.mesh_device is not None else device)

    @classmethod
    def get_max_tokens_all_users(cls, *, max_model_len: int = 4096, max_num_seqs: int = 32, **kwargs: Any) -> int:
        """KV tokens for every user at full length."""
        return max_model_len * max_num_seqs

    @classmethod
    def layer_windows(cls, hf_config: Any) -> list[int | None] | None:
        """Each layer's attention window (None: every earlier key); None for a family whose layers all attend every
        key. A family with sliding-window layers says which."""
        return None

    @classmethod
    def kv_cache_groups(cls, hf_config: Any) -> KVCacheGroups | None:
        """The KV-cache groups of a model with sliding-window layers (:class:`~tt_models.tt.kv_cache.KVCacheGroups`),
        None when every layer attends every key (one page table serves them all)."""
        windows = cls.layer_windows(hf_config)
        groups = None if windows is None else KVCacheGroups.of(windows)
        return groups if groups is not None and groups.is_hybrid else None

    @classmethod
    def get_kv_cache_spec(cls, vllm_config: Any) -> dict[str, Any] | None:
        """TT vLLM's hybrid-KV hook: per layer (``model.layers.<i>.self_attn``) a ``SlidingWindowSpec`` for a
        sliding-window layer, a ``FullAttentionSpec`` for the others, with the model's (unsplit) KV heads and head
        size as the plugin's default spec has them; None (the plugin's one full-attention spec) without a window.
        vLLM's hybrid manager then groups the layers as :class:`KVCacheGroups` does and frees the blocks that fall
        out of the sliding layers' windows."""
        from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

        model_config, cache_config = vllm_config.model_config, vllm_config.cache_config
        windows = cls.layer_windows(model_config.hf_config)
        if cls.kv_cache_groups(model_config.hf_config) is None:
            return None
        common = dict(block_size=cache_config.block_size,
                      num_kv_heads=model_config.get_num_kv_heads(vllm_config.parallel_config),
                      head_size=model_config.get_head_size(), dtype=model_config.dtype)
        return {f"model.layers.{i}.self_attn": FullAttentionSpec(**common) if window is None
                else SlidingWindowSpec(**common, sliding_window=window) for i, window in enumerate(windows)}

    def allocate_kv_cache_per_layer(self, per_layer_specs: Sequence[tuple[Sequence[int], Any, int]],
                                    **kwargs: Any) -> list[list[list[Any]]]:
        """TT vLLM's hybrid allocation: ``per_layer_specs[i] = (shape, dtype, tensor_idx)``, the layers naming one
        ``tensor_idx`` sharing its K/V pair (one layer of each KV-cache group: their block ids never collide);
        ``[replica][layer] -> [K, V]`` as :meth:`allocate_kv_cache`."""
        shapes = {tuple(shape) for shape, _, _ in per_layer_specs}
        if len(shapes) != 1:
            raise ValueError(f"per-layer KV cache shapes {sorted(shapes)}: the model's layers share one geometry")
        shared = [index for _, _, index in per_layer_specs]
        return self.allocate_kv_cache(shapes.pop(), per_layer_specs[0][1], len(per_layer_specs), shared=shared)

    def group_page_tables(self, page_tables_per_group: Any = None,
                          page_tables_per_layer: Any = None) -> list[torch.Tensor] | None:
        """The step's page table of each KV-cache group (:func:`~tt_models.tt.kv_cache.group_page_tables`), or None:
        one ``page_table`` for every layer."""
        return group_page_tables(self.replica_kv_groups, page_tables_per_group, page_tables_per_layer)

    @property
    def replica_kv_groups(self) -> KVCacheGroups | None:
        """The KV-cache groups of the replicas' layers (their decoder's ``kv_groups``), None without."""
        model = self.models[0]
        return getattr(getattr(model, "text", model), "kv_groups", None)

    def allocate_kv_cache(self, kv_cache_shape: Sequence[int], dtype: Any = None, num_layers: int | None = None,
                          shared: Sequence[int] | None = None, **kwargs: Any) -> list[list[list[Any]]]:
        """``[replica][layer] -> [K, V]`` in the optimizations profile's dtype (``dtype`` is vLLM's torch
        dtype, ignored as tt-metal does), each ``kv_cache_shape = [num_blocks, n_kv_heads, block_size, head_dim]``
        on every chip of the replica: the per-chip shape TT vLLM passes, ``kv_heads // min(chips per submesh,
        kv_heads)`` heads, each chip filling the buffer with its own heads (tt_transformers'
        ``allocate_vllm_kv_cache``). A shape whose heads or head_dim are not a chip's is refused. ``shared``: each
        layer's tensor pair, layers naming the same one sharing it (:meth:`allocate_kv_cache_per_layer`)."""
        caches = []
        for model, device in zip(self.models, self.devices):
            n_kv_heads, head_dim = model.kv_geometry
            if tuple(kv_cache_shape[1::2]) != (n_kv_heads, head_dim):
                raise ValueError(f"KV cache shape {tuple(kv_cache_shape)}: each of the replica's "
                                 f"{device.get_num_devices()} chips holds {n_kv_heads} KV heads of head_dim "
                                 f"{head_dim}, so the shape must be (blocks, {n_kv_heads}, block_size, {head_dim})")
            with use(device):
                layers = num_layers or model.n_layers
                caches.append(allocate_paged_kv_cache(kv_cache_shape, layers, model.precision.kv_cache, device,
                                                      shared))
        return caches

    # Swap: tt-models' extension of the contract, for an engine that preempts by swapping KV to host memory.

    def read_kv_blocks(self, kv_cache: Any, block_ids: Sequence[int],
                       replicas: Sequence[int] | None = None) -> list[torch.Tensor]:
        """The K/V of ``block_ids`` in every layer, per replica (of ``replicas``, default all: with data
        parallelism each replica's blocks are its own): ``[layers, 2, len(block_ids), chips * n_kv_heads,
        block_size, head_dim]`` float32 host tensors, each chip's heads in chip order (values as the cache dtype
        holds them)."""
        out = []
        for replica in range(len(self.devices)) if replicas is None else replicas:
            cache, device = kv_cache[replica], self.devices[replica]
            with use(device):
                out.append(torch.stack([torch.stack([torch.cat([self._read_block(t, b, device) for b in block_ids])
                                                     for t in layer]) for layer in cache]))
        return out

    def write_kv_blocks(self, kv_cache: Any, block_ids: Sequence[int], data: list[torch.Tensor],
                        replicas: Sequence[int] | None = None) -> None:
        """Write what :meth:`read_kv_blocks` returned into ``block_ids`` (``fill_cache`` of whole blocks, each chip
        its own heads)."""
        for replica, values in zip(range(len(self.devices)) if replicas is None else replicas, data):
            cache, device = kv_cache[replica], self.devices[replica]
            with use(device):
                for layer, layer_values in zip(cache, values):
                    for t, blocks in zip(layer, layer_values):
                        for b, block in zip(block_ids, blocks):
                            ttnn.fill_cache(t, as_tensor(block[None], device, dtype=t.dtype, shard_dim=1),
                                            batch_idx=int(b))

    @staticmethod
    def _read_block(t: Any, block: int, device: Any) -> torch.Tensor:
        _, heads, block_size, head_dim = t.shape
        return to_host(ttnn.slice(t, [block, 0, 0, 0], [block + 1, heads, block_size, head_dim]), device,
                       concat_dim=1).float()

    def prefill_rows(self, tokens: Any, prompt_lens: Any, start_pos: Any,
                     empty_slots: Any) -> tuple[torch.Tensor, list[tuple[int, int, int]]]:
        """The prefill token rows as torch, and per row ``(start, end, replica)``: positions
        ``start .. end - 1`` run on the replica owning the row's batch slot."""
        tokens = as_torch(tokens)
        ends = as_torch(prompt_lens).tolist()
        starts = [0] * len(ends) if start_pos is None else as_torch(start_pos).tolist()
        slots = list(range(len(ends))) if empty_slots is None else as_torch(empty_slots).tolist()
        rows = []
        for row, (start, end, slot) in enumerate(zip(starts, ends, slots)):
            if not 0 <= start < end <= tokens.shape[1]:
                raise ValueError(f"prefill row {row}: need 0 <= start_pos ({start}) < prompt_len ({end}) "
                                 f"<= tokens width ({tokens.shape[1]})")
            rows.append((start, end, self.replica_of_slot(slot)))
        return tokens, rows

    def prefill_trace_lengths(self, max_seq_len: int) -> list[int]:
        """The prefill lengths a warm-up with ``enable_trace`` captures: tt_transformers' traced prefill lengths (128,
        256, ...) up to ``max_seq_len`` and ``max_prefill_trace_len``, by default 512 on a TT device and none on the
        host backend and the mock device. Capped because each capture holds a trace and its activations in device
        memory; none by default on the host because a host replay is no faster than eager prefill while each capture
        costs three forwards at warm-up (SmolLM2 at 128, 256 and 512 tokens: 10 s), and on the mock because it
        cannot capture."""
        cap = self.max_prefill_trace_len
        if cap is None:
            cap = 512 if self.replica_backend(self.devices[0]) == "ttnn" else 0
        lengths, length = [], 128
        while length <= min(cap, max_seq_len):
            lengths.append(length)
            length *= 2
        return lengths

    def run_prefill(self, replica: int, inputs: HostInputs, forward: Callable[[dict[str, Any]], Any], *,
                    mode: Any, traced: bool) -> Any:
        """``forward(device_inputs)`` of one prefill row: replayed from the trace warm-up captured for these input
        shapes and ``mode`` when ``traced`` and there is one, else eagerly (a prefill is never captured while
        serving: that can corrupt live traces)."""
        device = self.devices[replica]
        if traced and self.prefill_traces.captured(replica, mode, inputs):
            return self.prefill_traces.run(replica, device, mode, inputs, forward)
        return forward(to_device(inputs, device))

    def capture_prefill(self, replica: int, inputs: HostInputs, forward: Callable[[dict[str, Any]], Any], *,
                        mode: Any) -> None:
        """Capture :meth:`run_prefill`'s trace for these input shapes and ``mode`` (warm-up only; not on the mock
        device, whose trace capture crashes)."""
        if self.replica_backend(self.devices[replica]) != "mock":
            self.prefill_traces.run(replica, self.devices[replica], mode, inputs, forward)

    def warmup_model_decode(self, kv_cache: Any = None, enable_trace: bool = False, max_batch_size: int | None = None,
                            num_blocks: int | None = None, can_sample_on_device: bool = False, **kwargs: Any) -> None:
        """Compile the decode path through ``decode_forward`` with every row a padding row (``start_pos = -1``: no
        cache reads or writes); with ``enable_trace`` capture its trace, and with ``can_sample_on_device`` those of
        the greedy and the top-k/top-p sampling modes too, before any request runs (as tt_transformers does:
        capturing while serving can corrupt live traces). A model with several KV-cache groups is warmed up with a
        table per group, as TT vLLM's hybrid manager then sends them."""
        if kv_cache is None:
            return
        rows = self.max_batch_size
        groups, group_tables = self.replica_kv_groups, None
        if groups is not None and len(groups.layers) > 1:
            group_tables = [torch.zeros(rows, num_blocks or 1, dtype=torch.int32)] * len(groups.layers)
        modes: list[Any] = [None]
        if can_sample_on_device:
            greedy = SimpleNamespace(temperature=[0.0] * rows, top_k=[1] * rows, top_p=[0.0] * rows)
            modes += [greedy, SimpleNamespace(temperature=[1.0] * rows, top_k=[32] * rows, top_p=[1.0] * rows)]
        for sampling_params in modes:
            self.decode_forward(tokens=torch.zeros(rows, 1, dtype=torch.int32), start_pos=torch.full((rows,), -1),
                                page_table=torch.zeros(rows, num_blocks or 1, dtype=torch.int32), kv_cache=kv_cache,
                                enable_trace=enable_trace, sampling_params=sampling_params,
                                page_tables_per_group=group_tables,
                                **self.padding_decode_inputs(rows, num_blocks or 1))

    def padding_decode_inputs(self, rows: int, table_width: int) -> dict[str, torch.Tensor]:
        """Further decode arguments of ``rows`` padding rows (encoder-decoder models: their cross inputs), tables
        ``table_width`` blocks wide (TT vLLM's runner passes every table at that width, so a trace captured at
        warm-up replays while serving)."""
        return {}

    def replica_of_slot(self, slot: int) -> int:
        return slot // self.users_per_replica

    def replica_rows(self, replica: int) -> slice:
        return slice(replica * self.users_per_replica, (replica + 1) * self.users_per_replica)

    def check_decode_batch(self, *rows: torch.Tensor) -> None:
        for t in rows:
            if t.shape[0] != self.max_batch_size:
                raise ValueError(f"decode batch {t.shape[0]} != max_batch_size {self.max_batch_size}: "
                                 f"TT vLLM pads decode to max_num_seqs")

    def decode_positions(self, start_pos: Any, sampling_params: Any = None,
                         reset_batch: bool | None = None) -> torch.Tensor:
        """The positions a decode step runs at: ``start_pos``, or with device sampling and ``reset_batch=False`` the
        previous step's plus one (the host's lag a step behind; :meth:`run_decode` then feeds the sampled tokens)."""
        return self.feedback.positions_of(as_torch(start_pos), sampling_params, reset_batch)

    def decode_forward(self, *, tokens: Any, start_pos: Any, page_table: Any, kv_cache: Any, enable_trace: bool = False,
                       read_from_device: bool = True, sampling_params: Any = None, prompt_tokens: Any = None,
                       output_tokens: Any = None, reset_batch: bool | None = None, page_tables_per_group: Any = None,
                       page_tables_per_layer: Any = None, **kwargs: Any) -> Any:
        """One token per row of a batch padded to ``max_batch_size``; logits ``[B, 1, V]``, or tokens ``[B]``
        with ``sampling_params`` (device tensors when ``read_from_device`` is False: pass them to
        :meth:`process_decode_output_host`). This default is for a replica model with ``decode_inputs(tokens,
        positions, page_table)`` and ``decode_device(inputs, kv_cache)`` (the Llama family, text-only Gemma 3).
        ``page_tables_per_group`` / ``page_tables_per_layer``: each KV-cache group's table (:meth:`group_page_tables`),
        each layer reading and writing its group's."""
        return self.decode_step(lambda model, rows, *host: model.decode_inputs(*host),
                                lambda model, device_inputs, cache: model.decode_device(device_inputs, cache),
                                tokens=tokens, start_pos=start_pos, page_table=page_table, kv_cache=kv_cache,
                                enable_trace=enable_trace, read_from_device=read_from_device,
                                sampling_params=sampling_params, prompt_tokens=prompt_tokens,
                                output_tokens=output_tokens, reset_batch=reset_batch,
                                group_tables=self.group_page_tables(page_tables_per_group, page_tables_per_layer))

    def decode_step(self, build: DecodeBuilder, device_forward: Callable[[Any, dict[str, Any], Any], Any], *,
                    tokens: Any, start_pos: Any, page_table: Any, kv_cache: Any, enable_trace: bool = False,
                    read_from_device: bool = True, sampling_params: Any = None, prompt_tokens: Any = None,
                    output_tokens: Any = None, reset_batch: bool | None = None,
                    batch_inputs: Sequence[torch.Tensor] = (), group_tables: list[torch.Tensor] | None = None) -> Any:
        """A family's ``decode_forward``: the runner's arguments as torch, the step's positions
        (:meth:`decode_positions`), each replica's host inputs ``build(model, rows, tokens, positions, page_table)``
        (the replica's rows of each; ``rows`` the replica's batch slots, for the family's own per-row inputs, which
        ``batch_inputs`` lists to be checked padded like the rest) and its ``device_forward(model, device_inputs,
        kv_cache)``, run by :meth:`run_decode`. ``group_tables``: each KV-cache group's page table, group 0's in place
        of ``page_table`` and the others' as ``page_table_<g>`` (:func:`~tt_models.tt.kv_cache.table_key`)."""
        tokens = as_torch(tokens).reshape(-1)
        positions = self.decode_positions(start_pos, sampling_params, reset_batch)
        page_table = as_torch(page_table, torch.int32)
        if group_tables is not None:
            page_table = group_tables[0]
        self.check_decode_batch(tokens, positions, page_table, *batch_inputs, *(group_tables or ()))
        inputs = []
        for replica, model in enumerate(self.models):
            rows = self.replica_rows(replica)
            with use(self.devices[replica]):  # host tensors of that device's ttnn, whatever was opened last
                host = build(model, rows, tokens[rows], positions[rows], page_table[rows])
                for group, table in list(enumerate(group_tables or ()))[1:]:  # built as the model builds group 0's
                    host[table_key(group)] = build(model, rows, tokens[rows], positions[rows],
                                                   table[rows])["page_table"]
                inputs.append(host)

        def forward(replica: int, device_inputs: dict[str, Any]) -> Any:
            return device_forward(self.models[replica], device_inputs, kv_cache[replica])

        return self.run_decode(inputs, forward, positions=positions, enable_trace=enable_trace,
                               read_from_device=read_from_device, sampling_params=sampling_params,
                               prompt_tokens=prompt_tokens, output_tokens=output_tokens)

    def run_decode(self, inputs: list[HostInputs], forward: Callable[[int, dict[str, Any]], Any], *,
                   positions: torch.Tensor, enable_trace: bool, read_from_device: bool, sampling_params: Any = None,
                   prompt_tokens: Any = None, output_tokens: Any = None) -> Any:
        """Run each replica's ``forward(replica, device_inputs) -> logits`` on its host ``inputs``, sampling on
        the device when ``sampling_params`` is given; traced with ``enable_trace``. ``positions`` come from
        :meth:`decode_positions`, which decides whether the tokens are fed back on the device."""
        outputs = []
        fed = self.feedback.active
        for replica, device in enumerate(self.devices):
            rows = self.replica_rows(replica)
            host, mode = dict(inputs[replica]), None
            if sampling_params is not None:
                row_ids = list(range(rows.start, rows.stop))
                batch = SamplingBatch.of(sampling_params, row_ids, positions[rows].tolist(), self.vocab_size,
                                         self.sampling_rng)
                mode = batch.mode
                with use(device):
                    host.update(batch.host_inputs(device, self.vocab_size, _rows_of(prompt_tokens, rows),
                                                  _rows_of(output_tokens, rows)))

            def step(device_inputs: dict[str, Any], replica: int = replica, mode: Any = mode,
                     device: Any = device) -> Any:
                logits = forward(replica, device_inputs)
                if mode is None:
                    return logits
                return self.samplers[replica].forward(gather_logits(logits, device, self.vocab_size), mode,
                                                      device_inputs)

            # The mock device cannot capture traces (tt-metal dereferences a mocked buffer): it runs eagerly.
            traced = enable_trace and self.replica_backend(device) != "mock"
            feed = (lambda device_inputs, replica=replica: self.feedback.feed(replica, device_inputs)) if fed else None
            with use(device):
                if traced:
                    outputs.append(self.traces.run(replica, device, mode, host, step, feed,
                                                   frozenset({FED}) if fed else frozenset()))
                else:
                    device_inputs = to_device(host, device)
                    if feed is not None:
                        feed(device_inputs)
                    outputs.append(step(device_inputs))
        self.feedback.record(outputs, sampled=sampling_params is not None)
        return self.process_decode_output_host(outputs) if read_from_device else outputs

    def sample_prefill(self, logits: list[Any], rows: list[tuple[int, int, int]], tokens: torch.Tensor,
                       sampling_params: Any) -> Any:
        """Tokens ``[n]`` (and log-probs ``[n]`` when a row asks for them) sampled on the device from each row's
        last-position logits (device ``[1, 1, 1, V]``); penalties see the row's prompt."""
        out_tokens = torch.zeros(len(rows), dtype=torch.int32)
        out_log_probs = torch.zeros(len(rows))
        any_log_probs = False
        for replica, device in enumerate(self.devices):
            mine = [i for i, (_, _, r) in enumerate(rows) if r == replica]
            if not mine:
                continue
            batch = SamplingBatch.of(sampling_params, mine, [rows[i][1] - 1 for i in mine], self.vocab_size,
                                     self.sampling_rng)
            prompts = [tokens[i, : rows[i][1]] for i in mine]
            with use(device):
                host = batch.host_inputs(device, self.vocab_size, prompt_tokens=prompts)
                parts = [logits[i] for i in mine]
                if len(mine) < ROWS:
                    parts.append(ttnn.zeros((1, 1, ROWS - len(mine), self.vocab_size), dtype=ttnn.float32,
                                            layout=ttnn.TILE_LAYOUT, device=device))
                stacked = ttnn.concat(parts, dim=2)
                sampled, log_probs = self.samplers[replica].forward(stacked, batch.mode, to_device(host, device))
                out_tokens[mine] = to_host(sampled, device).reshape(-1)[: len(mine)].to(torch.int32)
                if log_probs is not None:
                    any_log_probs = True
                    out_log_probs[mine] = to_host(log_probs, device).reshape(-1)[: len(mine)].float()
        return (out_tokens, out_log_probs) if any_log_probs else out_tokens

    @property
    def vocab_size(self) -> int:
        return self.models[0].vocab_size

    def read_decode_output(self, tt_out: Any, async_read: bool = False, **kwargs: Any) -> Any:
        host = self.process_decode_output_host(tt_out)
        return (host, []) if async_read else host

    def process_decode_output_host(self, tt_out: Any, is_tokens: bool = False, **kwargs: Any) -> Any:
        """From the raw device outputs (one per replica) or already-read host outputs: logits ``[B, 1, V]``, or,
        after device sampling, tokens ``[B]`` (with log-probs ``[B]`` as ``(tokens, log_probs)`` when asked)."""
        if isinstance(tt_out, torch.Tensor) or (isinstance(tt_out, tuple) and isinstance(tt_out[0], torch.Tensor)):
            return tt_out
        users = self.users_per_replica
        if not isinstance(tt_out[0], tuple):
            rows = []
            for out, device in zip(tt_out, self.devices):
                with use(device):
                    rows.append(logits_to_host(out, device, self.vocab_size)[0, 0, :users].float())
            return torch.cat(rows)[:, None, :]
        tokens, log_probs = [], []
        for (sampled, lp), device in zip(tt_out, self.devices):
            with use(device):
                tokens.append(to_host(sampled, device).reshape(-1)[:users].to(torch.int32))
                log_probs.append(torch.zeros(users) if lp is None else to_host(lp, device).reshape(-1)[:users].float())
        tokens = torch.cat(tokens)
        return (tokens, torch.cat(log_probs)) if any(lp is not None for _, lp in tt_out) else tokens


def _rows_of(values: Any, rows: slice) -> list[Any] | None:
    """One replica's rows of a per-row argument (``prompt_tokens`` / ``output_tokens``), or None."""
    return None if values is None else list(as_torch(values)[rows])
