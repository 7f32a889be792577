"""BART and MBart served by vLLM's own engine through the real vllm-tt-plugin with tt-models' encoder-decoder worker,
run in a fresh process by test_plugin_bart.py: ``python tests/vllm/bart_scenario.py '<json arguments>'`` from outside
the checkout, with ``TT_MODELS_BACKEND=host`` and the engine in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``),
where the scheduler, its block pool and the loaded model can be looked at. Runs one engine after another (``runs``,
each a ``kind`` of :data:`KINDS` and its arguments) and prints one ``RESULT <json>`` line: a report per run.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from typing import Any

MARKER = "RESULT "


def engine(model: str, worker_cls: str, block_size: int, max_num_seqs: int, max_model_len: int,
           **engine_args: Any) -> Any:
    from vllm import LLM

    return LLM(model=model, worker_cls=worker_cls, block_size=block_size, max_num_seqs=max_num_seqs,
               max_model_len=max_model_len, **engine_args)


def greedy(max_tokens: int) -> Any:
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=False)


def results(outputs: list[Any]) -> dict[str, Any]:
    return {"tokens": [list(o.outputs[0].token_ids) for o in outputs],
            "decoder_prompts": [list(o.prompt_token_ids) for o in outputs]}


def loaded_model(llm: Any) -> Any:
    """The model the in-process engine's runner calls (our generator class)."""
    return llm.llm_engine.model_executor.driver_worker.worker.model_runner.model


def queued(model: str, requests: list[Any], too_long: Any, max_tokens: int, **sizes: Any) -> dict[str, Any]:
    """``requests`` as ``vllm.LLM`` takes them, queued in two halves around ``too_long``, which must be refused
    while the queued requests stay; then all run to completion. Greedy, ``max_tokens`` each."""
    start = time.monotonic()
    llm = engine(model, **sizes)
    started = time.monotonic()
    params = greedy(max_tokens)
    half = len(requests) // 2
    llm.enqueue(requests[:half], params, use_tqdm=False)
    try:
        llm.enqueue([too_long], params, use_tqdm=False)
        error = None
    except ValueError as refused:
        error = f"{type(refused).__name__}: {refused}"
    llm.enqueue(requests[half:], params, use_tqdm=False)
    outputs = llm.wait_for_completion(use_tqdm=False)  # in the order queued
    return {**results(outputs), "error": error, "startup_s": round(started - start, 1),
            "generate_s": round(time.monotonic() - started, 1)}


class Pool:
    """The in-process engine core's scheduler and its KV block pool (self and cross groups, one pool)."""

    def __init__(self, llm: Any) -> None:
        from vllm.v1.kv_cache_interface import CrossAttentionSpec

        self.scheduler = llm.llm_engine.engine_core.engine_core.scheduler
        self.manager = self.scheduler.kv_cache_manager
        self.blocks = self.manager.block_pool
        groups = self.manager.kv_cache_config.kv_cache_groups
        self.cross = [i for i, g in enumerate(groups) if isinstance(g.kv_cache_spec, CrossAttentionSpec)][0]

    def free(self) -> int:
        return self.blocks.get_num_free_blocks()

    def state(self) -> dict[str, Any]:
        """What the pool holds: its size, free blocks, the requests the scheduler and each group still hold."""
        return {"num_blocks": self.blocks.num_gpu_blocks, "free": self.free(),
                "requests": len(self.scheduler.requests), "running": len(self.scheduler.running),
                "waiting": len(self.scheduler.waiting),
                "held": [len(m.req_to_blocks) for m in self.manager.coordinator.single_type_managers]}

    def running(self) -> dict[str, list[int]]:
        """Each running request's (internal id's) blocks: ``[self, cross]``."""
        held = {}
        for request in self.scheduler.running:
            ids = self.manager.get_block_ids(request.request_id)
            held[request.request_id] = [sum(len(ids[g]) for g in range(len(ids)) if g != self.cross),
                                        len(ids[self.cross])]
        return held


def preemptions(llm: Any) -> int:
    """vLLM's ``vllm:num_preemptions`` counter (its Prometheus metrics, ``disable_log_stats=False``)."""
    return int(sum(m.value for m in llm.get_metrics() if m.name == "vllm:num_preemptions"))


def record_prefills(model: Any) -> dict[str, Any]:
    """Records, from here on, the prefill rows the model is given (``prefill_rows``) and, of those carrying an
    encoder input (a request's first step, or its recomputation after a preemption), the decoder tokens prefilled
    (``encoder_runs``: a recomputation's are its prompt's and the tokens generated before)."""
    record: dict[str, Any] = {"prefill_rows": 0, "encoder_runs": []}
    forward = model.prefill_forward

    def prefill_forward(**kwargs: Any) -> Any:
        tokens, lengths = kwargs["tokens"], [int(n) for n in kwargs["prompt_lens"]]
        record["prefill_rows"] += len(kwargs["encoder_inputs"])
        record["encoder_runs"] += [[int(t) for t in tokens[row][:lengths[row]]]
                                   for row, entry in enumerate(kwargs["encoder_inputs"]) if entry is not None]
        return forward(**kwargs)

    model.prefill_forward = prefill_forward
    return record


def preempted(model: str, requests: list[Any], max_tokens: int, num_gpu_blocks: int, aborted: list[int],
              additional_config: dict[str, Any] | None = None, async_scheduling: bool = False,
              **sizes: Any) -> dict[str, Any]:
    """A pool of ``num_gpu_blocks`` (``num_gpu_blocks_override``) too small for ``requests`` at full length: they
    run to completion with preemptions (counted by vLLM's metrics) and recomputations (:func:`record_prefills`); the
    pool then. Then the same requests again, stepped by hand: once two of those at ``aborted`` run (their cross blocks
    allocated), those are aborted (running or waiting), the rest run to completion; the pool after each."""
    start = time.monotonic()
    llm = engine(model, num_gpu_blocks_override=num_gpu_blocks, disable_log_stats=False,
                 additional_config=additional_config or {}, async_scheduling=async_scheduling, **sizes)
    started = time.monotonic()
    pool, params = Pool(llm), greedy(max_tokens)
    report: dict[str, Any] = {"startup_s": round(started - start, 1), "pool_at_start": pool.state()}
    prefills = record_prefills(loaded_model(llm))
    before = preemptions(llm)
    outputs = llm.generate(requests, params, use_tqdm=False)
    report |= {**results(outputs), "preemptions": preemptions(llm) - before, "prefills": dict(prefills),
               "pool_after": pool.state(), "generate_s": round(time.monotonic() - started, 1)}
    prefills |= {"prefill_rows": 0, "encoder_runs": []}
    before = preemptions(llm)

    # Aborts: the requests again, stepped until two of those to abort run (a step per request at most).
    engine_ = llm.llm_engine
    ids = llm.enqueue(requests, params, use_tqdm=False)  # the engine's (internal) request ids, in order
    finished: dict[int, Any] = {}

    def step() -> None:
        for output in engine_.step():  # an output's request_id is the external id: the internal one's prefix
            if output.finished:
                finished[[i.rsplit("-", 1)[0] for i in ids].index(output.request_id)] = output

    to_abort = [ids[i] for i in aborted]
    for _ in requests:
        step()
        if len(set(pool.running()) & set(to_abort)) >= 2:
            break
    running, free_before = pool.running(), pool.free()
    engine_.abort_request(to_abort, internal=True)
    report["aborts"] = {"running_at_abort": [running.get(i) for i in ids], "free_before_abort": free_before,
                        "free_after_abort": pool.free(), "finished_before_abort": sorted(finished),
                        "pool_at_abort": pool.state()}
    while engine_.has_unfinished_requests():
        step()
    report["aborts"] |= {"finished": sorted(finished), "pool_after": pool.state(), "prefills": prefills,
                         "preemptions": preemptions(llm) - before,
                         "tokens": {i: list(output.outputs[0].token_ids) for i, output in finished.items()}}
    return report


def count_decodes(model: Any) -> dict[str, int]:
    """Counts, from here on, the model's ``decode_forward`` calls and what they carried: traced, device sampling
    (``sampling_params``), sent a step behind (``reset_batch=False``, the plugin's async decode), a
    ``cross_page_table`` as wide as the self ``page_table``, ``encoder_lens`` > 0 in every live row (``start_pos``
    >= 0) and 0 in the padding rows."""
    import torch

    counts = {"decode_forward": 0, "traced": 0, "sampling_params": 0, "reset_batch_false": 0, "cross_tables": 0,
              "encoder_lens": 0, "rows": 0, "live_rows": 0}
    forward = model.decode_forward

    def decode_forward(**kwargs: Any) -> Any:
        counts["decode_forward"] += 1
        counts["traced"] += bool(kwargs.get("enable_trace"))
        counts["sampling_params"] += kwargs.get("sampling_params") is not None
        counts["reset_batch_false"] += kwargs.get("reset_batch") is False
        page_table, cross = torch.as_tensor(kwargs["page_table"]), kwargs.get("cross_page_table")
        lens, live = torch.as_tensor(kwargs["encoder_lens"]), torch.as_tensor(kwargs["start_pos"]) >= 0
        counts["cross_tables"] += cross is not None and tuple(torch.as_tensor(cross).shape) == tuple(page_table.shape)
        counts["encoder_lens"] += bool(((lens > 0) == live).all())
        counts["rows"] = max(counts["rows"], len(lens))
        counts["live_rows"] += int(live.sum())
        return forward(**kwargs)

    model.decode_forward = decode_forward
    return counts


def device_sampled(model: str, requests: list[Any], max_tokens: int, additional_config: dict[str, Any],
                   **sizes: Any) -> dict[str, Any]:
    """``requests`` with the plugin's device sampling and vLLM's async scheduling (the plugin's async decode): the
    tokens, the model's decode calls (:func:`count_decodes`) and ``execute_trace`` calls while serving, and the decode
    traces captured at warm-up (before the first request) and while serving."""
    start = time.monotonic()
    llm = engine(model, additional_config=additional_config, async_scheduling=True, **sizes)
    started = time.monotonic()
    generator = loaded_model(llm)
    counts = count_decodes(generator)
    executions, captured = generator.traces.executions, len(generator.traces.captures)
    outputs = llm.generate(requests, greedy(max_tokens), use_tqdm=False)
    decodes = {**counts, "execute_trace": generator.traces.executions - executions, "captured_at_warmup": captured,
               "captured_while_serving": len(generator.traces.captures) - captured}
    return {**results(outputs), "decodes": decodes, "pool_after": Pool(llm).state(),
            "startup_s": round(started - start, 1), "generate_s": round(time.monotonic() - started, 1)}


KINDS = {"queued": queued, "preempted": preempted, "device_sampled": device_sampled}


def main(runs: list[dict[str, Any]], **sizes: Any) -> list[dict[str, Any]]:
    reports = []
    for run in runs:
        reports.append(KINDS[run.pop("kind")](**(sizes | run)))
        gc.collect()  # this engine and its generator go before the next one starts
    return reports


if __name__ == "__main__":
    print(MARKER + json.dumps(main(**json.loads(sys.argv[1]))), flush=True)
