"""The real vllm-tt-plugin serving a tt-models class on the host backend, run in a fresh process by test_plugin_host.py.

Run as a script from outside the checkout with ``TT_MODELS_BACKEND=host`` and ``MESH_DEVICE`` set, like a TT
engineer would: ``python tests/vllm/plugin_scenario.py '<json arguments>'``. Nothing here patches the plugin;
tt-models' general plugin does what it does on its own. Prints one ``RESULT <json>`` line.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

MARKER = "RESULT "
RUN_MARKER = "RUN "  # a line before each of several runs: the test splits this process's output (vLLM's log) at it
WORKER_MODULE = "vllm_tt_plugin.worker"


def replaced_in_worker() -> list[str]:
    """The functions of the plugin's worker module that tt-models replaced (it must be only the device open/close)."""
    worker = sys.modules[WORKER_MODULE]
    return sorted(name for name, value in vars(worker).items()
                  if callable(value) and getattr(value, "__module__", "").startswith("tt_models."))


def mesh_shapes(mesh_devices: list[str]) -> dict[str, list[int]]:
    """The shape of the device the plugin's (replaced) ``open_mesh_device`` opens for each ``MESH_DEVICE``."""
    import os

    worker, shapes = sys.modules[WORKER_MODULE], {}
    for value in mesh_devices:
        os.environ["MESH_DEVICE"] = value
        device = worker.open_mesh_device({}, "all")
        shapes[value] = list(device.shape)
        worker.close_mesh_device(device, {})
    return shapes


def count_decodes(model: Any) -> dict[str, int]:
    """Counts, from here on, the model's ``decode_forward`` calls, how many asked for the trace, how many the plugin's
    async decode sent a step behind (``reset_batch=False``: tokens fed back on the device), and (at report time) its
    ``execute_trace`` calls: instruments our class, not the plugin."""
    counts = {"decode_forward": 0, "traced": 0, "reset_batch_false": 0}
    forward = model.decode_forward

    def decode_forward(**kwargs: Any) -> Any:
        counts["decode_forward"] += 1
        counts["traced"] += bool(kwargs.get("enable_trace"))
        counts["reset_batch_false"] += kwargs.get("reset_batch") is False
        counts["sampling_params"] = counts.get("sampling_params", 0) + (kwargs.get("sampling_params") is not None)
        return forward(**kwargs)

    model.decode_forward = decode_forward
    return counts


def watch_kv_blocks(llm: Any, model: Any, block_size: int) -> dict[str, Any]:
    """For an in-process engine: vLLM's KV-cache groups (spec, window, layers) and, from here on, after each schedule
    the blocks each running request holds in each group (vLLM puts its null block in place of the ones it frees: not
    counted), and what the model's forwards receive: how many carried ``page_tables_per_layer`` (and how many not), and
    in how many decode steps a table named one block twice among the positions up to each row's (a block vLLM freed
    and handed out again while the runner's table still names it where it was). Instruments vLLM's scheduler and our
    class, not the plugin."""
    import torch

    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    scheduler = llm.llm_engine.engine_core.engine_core.scheduler
    managers = scheduler.kv_cache_manager.coordinator.single_type_managers
    watched: dict[str, Any] = {
        "groups": [[type(g.kv_cache_spec).__name__, getattr(g.kv_cache_spec, "sliding_window", None),
                    [int(name.split(".")[2]) for name in g.layer_names]]
                   for g in runner.kv_cache_config.kv_cache_groups],
        "held": [], "per_layer_tables": 0, "one_table": 0, "named_twice": 0}
    schedule = scheduler.schedule

    def recorded_schedule(*args: Any, **kwargs: Any) -> Any:
        out = schedule(*args, **kwargs)
        for request in scheduler.running:  # [tokens computed once the step runs, prompt length, blocks per group]
            watched["held"].append([request.num_computed_tokens, request.num_prompt_tokens,
                                    [sum(not block.is_null for block in m.req_to_blocks.get(request.request_id, ()))
                                     for m in managers]])
        return out

    scheduler.schedule = recorded_schedule

    def watch(name: str) -> None:
        forward = getattr(model, name)

        def watched_forward(**kwargs: Any) -> Any:
            per_layer = kwargs.get("page_tables_per_layer")
            watched["per_layer_tables" if per_layer is not None else "one_table"] += 1
            if name == "decode_forward":
                positions = torch.as_tensor(kwargs["start_pos"]).tolist()
                for table in per_layer or [kwargs["page_table"]]:
                    ids = [i for row, p in enumerate(positions) if p >= 0
                           for i in torch.as_tensor(table)[row, : p // block_size + 1].tolist()]
                    if len(ids) != len(set(ids)):
                        watched["named_twice"] += 1
                        break
            return forward(**kwargs)

        setattr(model, name, watched_forward)

    watch("prefill_forward")
    watch("decode_forward")
    return watched


def main(model: str, prompts: list[list[int]], max_tokens: int, block_size: int, max_num_seqs: int,
         max_model_len: int, import_worker_first: bool = False, mesh_devices: Sequence[str] = (),
         additional_config: dict[str, Any] | None = None, async_scheduling: bool = False,
         env: dict[str, str | None] | None = None, worker_cls: str = "auto", watch_kv: bool = False) -> dict[str, Any]:
    """Greedy tokens of ``prompts`` from ``vllm.LLM``; with ``import_worker_first`` the plugin's worker module is
    imported before vLLM loads its general plugins (tt-models then patches it at once instead of on import).
    An in-process engine also reports its device, what was replaced, the shapes of ``mesh_devices`` and the
    model's decode calls (``decode_forward``, traced ones, ``execute_trace``). ``async_scheduling``: vLLM's, which
    turns on the plugin's async decode. ``env``: variables set (None: removed) before the engine starts, e.g. the
    ``MESH_DEVICE`` the plugin's worker reads when it opens the device. ``worker_cls``: vLLM's ``--worker-cls``
    (``auto``: the platform's, the plugin's worker). ``watch_kv`` (an in-process engine): report vLLM's KV-cache groups,
    the blocks held and the page tables the model receives (:func:`watch_kv_blocks`), and the free blocks after."""
    import os

    for name, value in (env or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if import_worker_first:
        import importlib

        importlib.import_module(WORKER_MODULE)
    from vllm import LLM, SamplingParams

    start = time.monotonic()
    llm = LLM(model=model, block_size=block_size, max_num_seqs=max_num_seqs, max_model_len=max_model_len,
              skip_tokenizer_init=True, additional_config=additional_config or {}, async_scheduling=async_scheduling,
              worker_cls=worker_cls)
    started = time.monotonic()
    executor = getattr(llm.llm_engine, "model_executor", None)  # only for an in-process engine core
    generator = executor.driver_worker.worker.model_runner.model if executor is not None else None
    counts = count_decodes(generator) if generator is not None else None
    kv_blocks = watch_kv_blocks(llm, generator, block_size) if watch_kv else None
    executions = generator.traces.executions if generator is not None else 0
    captured = len(generator.traces.captures) if generator is not None else 0
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=False)
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    report: dict[str, Any] = {"tokens": [list(o.outputs[0].token_ids) for o in outputs],
                              "startup_s": round(started - start, 1),
                              "generate_s": round(time.monotonic() - started, 1)}
    if executor is not None:
        report["decodes"] = {**counts, "execute_trace": generator.traces.executions - executions,
                             "captured_at_warmup": captured,
                             "captured_while_serving": len(generator.traces.captures) - captured}
        worker = executor.driver_worker.worker
        device = worker.mesh_device
        report["device"] = {"type": f"{type(device).__module__}.{type(device).__name__}",
                            "shape": list(device.shape)}
        report["kv_cache_shape"] = list(worker.model_runner.kv_caches[0][0][0].shape)  # one chip's, layer 0's K
        report["worker"] = type(worker).__qualname__
        report["chips_per_replica"] = [d.get_num_devices() for d in generator.devices]
        report["replaced"] = replaced_in_worker()
        report["mesh_shapes"] = mesh_shapes(list(mesh_devices))
        if kv_blocks is not None:
            pool = llm.llm_engine.engine_core.engine_core.scheduler.kv_cache_manager.block_pool
            # The pool's null block (id 0) is never free: every other block is, once the requests are done.
            report["kv_blocks"] = {**kv_blocks, "free_after": pool.get_num_free_blocks(),
                                   "blocks": pool.num_gpu_blocks - 1}
    else:
        # Not imported here, so each engine core (forked from this process) imports it and the hook patches it.
        report["worker_imported_here"] = WORKER_MODULE in sys.modules
        llm.llm_engine.engine_core.shutdown()  # its process ends here (its log before the next run's)
    return report


def run(arguments: dict[str, Any]) -> Any:
    """One model (``model``), or several served one after another in this process (``models``: a report each; an
    entry is a path, or a dict of a ``model`` path and the arguments it overrides, e.g. fewer prompts or tokens, its
    ``env`` or ``additional_config``; a ``RUN_MARKER`` line before each)."""
    models = arguments.pop("models", None)
    if models is None:
        return main(**arguments)
    reports = []
    for i, model in enumerate(models):
        print(f"{RUN_MARKER}{i}", flush=True)
        reports.append(main(**(arguments | (model if isinstance(model, dict) else {"model": model}))))
        gc.collect()  # the previous engine and its generator go before the next one starts
    return reports


if __name__ == "__main__":
    print(MARKER + json.dumps(run(json.loads(sys.argv[1]))), flush=True)
