"""BART and MBart served by vLLM 0.25.1 through the real vllm-tt-plugin with tt-models' encoder-decoder worker on
the host backend, their greedy tokens equal to ``tt_models.LLM``'s throughout.

One fresh process (bart_scenario.py, the engines in it) serves, one engine after another:

- BART and MBart: the prompt forms vLLM takes (a plain string or token ids, which is what ``/v1/completions``
  sends; ``encoder_prompt`` as text or token ids with no, a text or a token-id decoder prompt) give
  ``tt_models.LLM``'s decoder prompts and tokens, and an encoder prompt one token past ``max_position_embeddings`` is
  refused with a clear error while the requests queued around it complete;
- BART in a pool too small for its requests at full length (``num_gpu_blocks_override``; self and cross blocks
  from one pool), on the plugin's default path and with device sampling and async decode: vLLM's scheduler
  preempts, recomputes (each resumed request's encoder rerun), every block comes back; then requests aborted while
  they hold their cross blocks give them back;
- BART with the plugin's device sampling, async decode (vLLM's async scheduling) and decode traces: every decode a
  replay of a warm-up trace, carrying the cross page tables and encoder lengths.

Meanwhile ``vllm serve`` of the BART checkpoint starts (from outside the checkout) and the references are computed;
then the official ``openai`` client's completions, streamed and not, give the same token ids, an over-long encoder
prompt is a 400 and the pool is empty after.

The references of a request vLLM recomputed after preempting it continue from the tokens the recomputation
prefilled (see ``continuations``).

Tiny random checkpoints with a word-level tokenizer (``w<i>`` is token ``i``) that adds ``<s> ... </s>`` as BART's
does, so every encoder length is chosen exactly.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (BartConfig, BartForConditionalGeneration, MBartConfig, MBartForConditionalGeneration,
                          PreTrainedTokenizerFast)

from tests.vllm.test_plugin_examples import running_servers
from tests.vllm.scenario_process import run_scenario
from tests.vllm.test_plugin_host import inspected
from tests.vllm.vllm_server import VLLM, client, metrics
from tt_models import LLM, SamplingParams
from tt_models.vllm import ENCODER_DECODER_WORKER as WORKER_CLS

pytestmark = pytest.mark.slow
SCENARIO = Path(__file__).with_name("bart_scenario.py")
SIZES = dict(max_tokens=8, block_size=32, max_num_seqs=4, max_model_len=64)
VOCAB, MAX_ENCODER_LEN = 320, 96  # max_position_embeddings: the encoder's limit (3 cross blocks)
MODELS = {"bart": (BartConfig, BartForConditionalGeneration, {}),
          "mbart": (MBartConfig, MBartForConditionalGeneration, {"scale_embedding": True})}  # no decoder start


def words(ids: range) -> str:
    return " ".join(f"w{i}" for i in ids)


# 6 requests for 4 rows; encoders of 4 to 96 positions (one over a cross block); decoder prompts: the default
# <DEC><BOS>, a text's <s> ... </s> after <DEC>, and 28 token ids that cross a self block while decoding.
REQUESTS = [
    words(range(5, 9)),  # a plain prompt is the encoder's: what /v1/completions sends
    {"encoder_prompt": words(range(10, 50)), "decoder_prompt": None},
    {"encoder_prompt": {"prompt_token_ids": [0, 200, 7, 9, 2]}, "decoder_prompt": words(range(40, 42))},
    {"encoder_prompt": {"prompt": words(range(8, 10))}, "decoder_prompt": {"prompt_token_ids": [2, *range(20, 47)]}},
    [0, 33, 44, 2],
    {"encoder_prompt": words(range(100, 194)), "decoder_prompt": None},  # 96 tokens: the longest encoder prompt
]
TOO_LONG = words(range(100, 195))  # 97 tokens
# 6 requests whose 30-token decoder prompts (1 self block) grow into a 2nd self block at the 3rd decode step; their
# encoders (8 to 64 positions) take 1 or 2 cross blocks: 3 or 4 blocks each at full length.
GROWING = [{"encoder_prompt": words(range(10 + 7 * i, 10 + 7 * i + n)),
            "decoder_prompt": {"prompt_token_ids": [2, *range(50 + i, 79 + i)]}}
           for i, n in enumerate([6, 40, 20, 62, 10, 30])]
CROSS_BLOCKS = [1, 2, 1, 2, 1, 1]
# The pool: 10 blocks and vLLM's null block (its BlockPool keeps one aside); vLLM refuses fewer than 10, a request at
# max_model_len (2 self blocks) with a whole encoder budget (max_num_batched_tokens, 256: 8 cross blocks). The first
# 4 requests take all 10 at admission and each wants one more a few steps later: preemptions follow.
POOL_BLOCKS = 11
ABORTED = [1, 2, 5]  # in the abort run: two of the 4 requests running first and one that is still waiting
DEVICE_PATH = {"tt": {"sample_on_device_mode": "all"}}  # trace_mode: "all", the plugin's default
# The small pool's runs: the plugin's default path, and device sampling with async decode (vLLM's async scheduling).
SMALL_POOL = {"preempted": {}, "preempted_async": {"additional_config": DEVICE_PATH, "async_scheduling": True}}


def write_checkpoint(path: Path, name: str) -> Path:
    """A random ``name`` (BART or MBart, its layer norms) with weights large enough for varied greedy tokens."""
    vocab = {w: i for i, w in enumerate(["<s>", "<pad>", "</s>", "<unk>", *(f"w{i}" for i in range(4, VOCAB))])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A </s>",
                                                             special_tokens=[("<s>", 0), ("</s>", 2)])
    config_class, model_class, extra = MODELS[name]
    config = config_class(vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                          decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128,
                          max_position_embeddings=MAX_ENCODER_LEN, init_std=0.5, forced_eos_token_id=None, **extra)
    torch.manual_seed(0)
    model = model_class(config).eval()
    with torch.no_grad():  # HF initializes biases to zero: make them count
        for param_name, param in model.named_parameters():
            if param_name.endswith("bias"):
                param.normal_(0, 0.05)
    model.save_pretrained(path / name)
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                            unk_token="<unk>").save_pretrained(path / name)
    return path / name


def reference(model: Path, requests: list[Any]) -> dict[str, list[list[int]]]:
    """``tt_models.LLM``'s decoder prompts and greedy tokens (the plugin's default optimizations profile)."""
    sizes = {k: v for k, v in SIZES.items() if k != "max_tokens"}
    with LLM(str(model), backend="host", optimizations=None, **sizes) as llm:
        outputs = llm.generate(requests, SamplingParams(temperature=0.0, max_tokens=SIZES["max_tokens"],
                                                        ignore_eos=True), use_tqdm=False)
    return {"tokens": [list(o.outputs[0].token_ids) for o in outputs],
            "decoder_prompts": [list(o.prompt_token_ids) for o in outputs]}


def references(checkpoints: dict[str, Path]) -> dict[str, dict[str, list[list[int]]]]:
    """Of ``REQUESTS`` for each model, of ``GROWING`` for BART (in the same batch as BART's ``REQUESTS``)."""
    found = {name: reference(path, REQUESTS + GROWING if name == "bart" else REQUESTS)
             for name, path in checkpoints.items()}
    found["growing"] = {key: value[len(REQUESTS):] for key, value in found["bart"].items()}
    found["bart"] = {key: value[:len(REQUESTS)] for key, value in found["bart"].items()}
    return found


def scenario_runs(checkpoints: dict[str, Path]) -> dict[str, dict[str, Any]]:
    bart = str(checkpoints["bart"])
    return {**{name: {"kind": "queued", "model": str(path), "requests": REQUESTS, "too_long": TOO_LONG}
               for name, path in checkpoints.items()},
            **{name: {"kind": "preempted", "model": bart, "requests": GROWING, "num_gpu_blocks": POOL_BLOCKS,
                      "aborted": ABORTED, **engine_args} for name, engine_args in SMALL_POOL.items()},
            "device_sampled": {"kind": "device_sampled", "model": bart, "requests": REQUESTS,
                               "additional_config": DEVICE_PATH}}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """``vllm serve`` of the BART checkpoint started from outside the checkout; while it starts, bart_scenario.py's
    runs (:func:`scenario_runs`) in their process and, meanwhile, the references here. Yields the server's URL and
    log, the checkpoints, the runs' reports (by name) and stderr, and the references."""
    tmp = tmp_path_factory.mktemp("bart")
    checkpoints = {name: write_checkpoint(tmp, name) for name in MODELS}
    # TT<arch> and <arch> (vLLM has no BART of its own) are one class: one inspection each.
    cache = inspected(tmp_path_factory.mktemp("vllm-cache"),
                      ["TTBartForConditionalGeneration", "TTMBartForConditionalGeneration"])
    sizes = [f"--{name.replace('_', '-')}={value}" for name, value in SIZES.items() if name != "max_tokens"]
    log = tmp / "serve.log"
    command = [VLLM, "serve", str(checkpoints["bart"]), "--worker-cls", WORKER_CLS, *sizes, "--host", "127.0.0.1"]
    runs = scenario_runs(checkpoints)
    found: dict[str, Any] = {"checkpoints": checkpoints, "log": log}

    def offline() -> None:
        env = {"TT_MODELS_BACKEND": "host", "MESH_DEVICE": "N150", "VLLM_CACHE_ROOT": str(cache),
               "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_PLUGINS": "tt_model_registry,tt,tt_models"}
        reports, _, found["stderr"] = run_scenario(
            SCENARIO, {"runs": list(runs.values()), "worker_cls": WORKER_CLS, **SIZES}, tmp, env,
            meanwhile=lambda: found.update(references=references(checkpoints)))
        found["reports"] = dict(zip(runs, reports, strict=True))

    with running_servers((command, tmp, log), env={"VLLM_CACHE_ROOT": str(cache)}, meanwhile=offline) as [url]:
        yield found | {"url": url}


def test_bart_and_mbart_through_vllm_equal_tt_models(served: dict[str, Any]) -> None:
    reports, ours = served["reports"], served["references"]
    assert "Traceback" not in served["stderr"], served["stderr"][-6000:]
    for name in MODELS:
        report, expected = reports[name], ours[name]
        print(f"{name}: vLLM startup {report['startup_s']} s, generate {report['generate_s']} s")
        assert report["decoder_prompts"] == expected["decoder_prompts"], name
        assert report["tokens"] == expected["tokens"], name
        assert report["error"] == (f"ValueError: The encoder prompt (length 97) is longer than the maximum encoder "
                                   f"length of 96 ({name}'s max_position_embeddings)"), name
    # The defaults as tt-models' engine builds them: <DEC><BOS> (MBart's <DEC> is <BOS>), <DEC> before a text's <s>.
    assert [ours["bart"]["decoder_prompts"][i] for i in (0, 2)] == [[2, 0], [2, 0, 40, 41, 2]]
    assert [ours["mbart"]["decoder_prompts"][i] for i in (0, 2)] == [[0], [0, 40, 41, 2]]


def all_free(pool: dict[str, Any]) -> bool:
    """Every block of the pool free but vLLM's null block, no request held by the scheduler or either group."""
    return pool["free"] == pool["num_blocks"] - 1 and pool["requests"] == 0 and pool["held"] == [0, 0]


def encoder_runs(report: dict[str, Any]) -> dict[int, list[list[int]]]:
    """The decoder tokens of each prefill of a ``GROWING`` request carrying its encoder input, by request (the one
    whose decoder prompt begins them: no decoder prompt of ``GROWING`` is a prefix of another): its first step's
    (the decoder prompt), then each recomputation's after a preemption (the prompt and the tokens generated so far)."""
    prompts = [r["decoder_prompt"]["prompt_token_ids"] for r in GROWING]
    runs = {i: [run for run in report["prefills"]["encoder_runs"] if run[:len(prompt)] == prompt]
            for i, prompt in enumerate(prompts)}
    assert sum(map(len, runs.values())) == len(report["prefills"]["encoder_runs"]), report["prefills"]
    return runs


@pytest.fixture(scope="module")
def continuations(served: dict[str, Any]) -> dict[tuple[int, ...], list[int]]:
    """``tt_models.LLM``'s greedy tokens from each recomputation's decoder tokens on (its encoder prompt, those
    tokens as the decoder prompt): what a recomputed request generates next. Not the rest of the request's
    reference: a recomputation prefills the tokens decode produced one by one, and on this random checkpoint
    (bfloat8_b, weights of std 0.5) prefill and decode logits differ enough to change a greedy token."""
    reports = [served["reports"][name] for name in SMALL_POOL]
    recomputed = {tuple(run): i for report in reports for part in (report, report["aborts"])
                  for i, runs in encoder_runs(part).items() for run in runs[1:]}
    if not recomputed:
        return {}
    requests = [{"encoder_prompt": GROWING[i]["encoder_prompt"], "decoder_prompt": {"prompt_token_ids": list(run)}}
                for run, i in recomputed.items()]
    found = reference(served["checkpoints"]["bart"], requests)
    assert found["decoder_prompts"] == [list(run) for run in recomputed]
    return dict(zip(recomputed, found["tokens"]))


def expected_tokens(i: int, runs: list[list[int]], continuations: dict[tuple[int, ...], list[int]],
                    reference_tokens: list[int]) -> list[int]:
    """Request ``i``'s greedy tokens given its encoder runs: the reference's, from each recomputation on the
    continuation of the tokens it prefilled, which must be those generated before it."""
    tokens, prompt = reference_tokens, runs[0]
    assert prompt == GROWING[i]["decoder_prompt"]["prompt_token_ids"], (i, runs)  # the first step: the prompt alone
    for run in runs[1:]:
        done = len(run) - len(prompt)
        assert 0 < done < SIZES["max_tokens"] and run[len(prompt):] == tokens[:done], (i, run, tokens)
        tokens = tokens[:done] + continuations[tuple(run)][:SIZES["max_tokens"] - done]
    return tokens


@pytest.mark.parametrize("run", SMALL_POOL)
def test_a_small_pool_preempts_recomputes_and_frees_every_block(
        served: dict[str, Any], run: str, continuations: dict[tuple[int, ...], list[int]]) -> None:
    """``num_gpu_blocks_override``: ``POOL_BLOCKS`` blocks for requests that need 3 or 4 each at full length. vLLM
    preempted (its ``vllm:num_preemptions``) and recomputed each preempted request: one prefill with its encoder
    input per request and one more per preemption (the cross blocks having gone with the request), each
    recomputation prefilling the decoder prompt and the tokens generated before; every request's tokens are
    ``tt_models.LLM``'s (from a recomputation on, its continuation of those tokens), and after the last request every
    block is free. The same with device sampling and async decode (``preempted_async``)."""
    report, expected = served["reports"][run], served["references"]["growing"]
    runs = encoder_runs(report)
    print(f"{run}: vLLM startup {report['startup_s']} s, generate {report['generate_s']} s, "
          f"{report['preemptions']} preemptions, recomputed {[(i, len(r) - 1) for i, r in runs.items() if len(r) > 1]}")
    assert report["pool_at_start"]["num_blocks"] == POOL_BLOCKS and all_free(report["pool_at_start"])
    assert report["decoder_prompts"] == expected["decoder_prompts"]
    assert report["preemptions"] > 0
    assert report["prefills"]["prefill_rows"] == len(report["prefills"]["encoder_runs"]) \
        == len(GROWING) + report["preemptions"]
    assert report["tokens"] == [expected_tokens(i, runs[i], continuations, expected["tokens"][i])
                                for i in range(len(GROWING))]
    assert all_free(report["pool_after"]), report["pool_after"]


@pytest.mark.parametrize("run", SMALL_POOL)
def test_aborted_requests_give_back_their_cross_blocks(served: dict[str, Any], run: str,
                                                       continuations: dict[tuple[int, ...], list[int]]) -> None:
    """The same requests stepped by hand in the same engine: once two of ``ABORTED`` run, holding their cross blocks,
    ``abort_request`` of those and of one still waiting gives every block of theirs back at once; the others finish
    with ``tt_models.LLM``'s tokens and every block is free."""
    aborts, expected = served["reports"][run]["aborts"], served["references"]["growing"]
    running = aborts["running_at_abort"]
    print(f"{run} aborts: blocks [self, cross] at the abort {running}, free {aborts['free_before_abort']} -> "
          f"{aborts['free_after_abort']}, {aborts['preemptions']} preemptions")
    assert aborts["finished_before_abort"] == []
    running_aborted = [i for i in ABORTED if running[i] is not None]
    assert len(running_aborted) == 2 and running[ABORTED[-1]] is None
    for i, blocks in enumerate(running):
        if blocks is not None:
            assert blocks[0] >= 1 and blocks[1] == CROSS_BLOCKS[i], (i, blocks)
    assert aborts["free_after_abort"] - aborts["free_before_abort"] == sum(sum(running[i]) for i in running_aborted)
    # Right after the abort, neither group holds blocks of an aborted request: only the running others do.
    still_running = sum(blocks is not None for i, blocks in enumerate(running) if i not in ABORTED)
    assert aborts["pool_at_abort"]["held"] == [still_running, still_running], aborts["pool_at_abort"]
    kept = [i for i in range(len(GROWING)) if i not in ABORTED]
    assert aborts["finished"] == kept
    runs = encoder_runs(aborts)
    assert aborts["tokens"] == {str(i): expected_tokens(i, runs[i], continuations, expected["tokens"][i])
                                for i in kept}
    assert all_free(aborts["pool_after"]), aborts["pool_after"]


def test_device_sampling_async_decode_replays_warmup_traces_with_cross_tables(served: dict[str, Any]) -> None:
    """``sample_on_device_mode: all`` with vLLM's async scheduling (the plugin's async decode) and the plugin's
    default ``trace_mode: all``: the tokens equal ``tt_models.LLM``'s (host sampling, eager); every decode call is
    traced (one ``execute_trace`` each) with device sampling and carries a ``cross_page_table`` as wide as the self
    ``page_table`` and ``encoder_lens`` > 0 exactly in the live rows; steady steps come a step behind
    (``reset_batch=False``); every decode trace was captured at warm-up, none while serving."""
    report, expected = served["reports"]["device_sampled"], served["references"]["bart"]
    decodes = report["decodes"]
    print(f"device_sampled: vLLM startup {report['startup_s']} s, generate {report['generate_s']} s, {decodes}")
    assert report["decoder_prompts"] == expected["decoder_prompts"]
    assert report["tokens"] == expected["tokens"]
    assert decodes["decode_forward"] >= SIZES["max_tokens"] - 1, decodes
    assert (decodes["traced"] == decodes["sampling_params"] == decodes["execute_trace"] == decodes["cross_tables"]
            == decodes["encoder_lens"] == decodes["decode_forward"]), decodes
    assert decodes["rows"] == SIZES["max_num_seqs"] and decodes["live_rows"] > 0, decodes
    assert decodes["reset_batch_false"] > 0, decodes
    assert decodes["captured_at_warmup"] > 0 and decodes["captured_while_serving"] == 0, decodes
    assert all_free(report["pool_after"]), report["pool_after"]


def complete(url: str, model: str, prompt: str | list[int], stream: bool = False) -> dict[str, Any]:
    """One greedy completion (``ignore_eos``, as the references run) from the vLLM server at ``url``: the decoder
    prompt's and the generated token ids (vLLM's ``return_token_ids``: in a streamed answer, the prompt's in the
    first chunk and each chunk's new tokens) and why it ended."""
    answer = client(url).completions.create(model=model, prompt=prompt, max_tokens=SIZES["max_tokens"], temperature=0,
                                       stream=stream, extra_body={"return_token_ids": True, "ignore_eos": True})
    choices = [chunk.choices[0] for chunk in answer if chunk.choices] if stream else answer.choices
    extra = [choice.model_extra or {} for choice in choices]
    return {"prompt": next(e["prompt_token_ids"] for e in extra if e.get("prompt_token_ids") is not None),
            "tokens": [t for e in extra for t in e.get("token_ids") or []], "finish": choices[-1].finish_reason}


PAST_MAX_MODEL_LEN_ERROR = "Input length (70) exceeds model's maximum context length (64)."
# /v1/completions' prompt is the encoder's (text or token ids), the decoder's the default: REQUESTS 0, 4 and 1's.
SERVED = {0: REQUESTS[0], 4: REQUESTS[4], 1: REQUESTS[1]["encoder_prompt"]}


def test_vllm_serve_completions_equal_tt_models(served: dict[str, Any]) -> None:
    """``vllm serve`` with ``--worker-cls``: an encoder prompt one token past ``max_position_embeddings`` is a 400
    with the processor's message, one of 70 tokens (past ``--max-model-len``) vLLM's 400; then the completions of
    ``SERVED`` at once and one streamed give ``tt_models.LLM``'s decoder prompts and tokens; after, every KV block is
    free (vLLM's gauge of its pool) and no request is left. The only tracebacks in the server's log are the refused
    prompts': vLLM 0.25.1 answers a plain ``ValueError`` (the processor's, and its own length check's) with a 400 and
    also logs it (Starlette's catch-all exception handler re-raises)."""
    url, model, expected = served["url"], str(served["checkpoints"]["bart"]), served["references"]["bart"]
    with pytest.raises(openai.BadRequestError, match=r"The encoder prompt \(length 97\) is longer than the maximum "
                                                     r"encoder length of 96 \(bart's max_position_embeddings\)"):
        complete(url, model, TOO_LONG)
    # vLLM's limit, not the model's: its server takes the encoder's length as the prompt's (docs/vllm.md).
    with pytest.raises(openai.BadRequestError, match=re.escape(PAST_MAX_MODEL_LEN_ERROR)):
        complete(url, model, words(range(100, 168)))  # 70 tokens
    with ThreadPoolExecutor(len(SERVED)) as pool:
        answers = dict(zip(SERVED, pool.map(lambda prompt: complete(url, model, prompt), SERVED.values())))
    streamed = complete(url, model, SERVED[1], stream=True)
    for i, answer in [*answers.items(), (1, streamed)]:
        assert answer == {"prompt": expected["decoder_prompts"][i], "tokens": expected["tokens"][i],
                          "finish": "length"}, i
    gauges = metrics(url)
    assert gauges["vllm:kv_cache_usage_perc"] == 0.0, gauges
    assert gauges["vllm:num_requests_running"] == gauges["vllm:num_requests_waiting"] == 0.0, gauges
    log = served["log"].read_text()
    assert log.count("Traceback") == 2, log[-6000:]
    refusals = ["ValueError: The encoder prompt (length 97)", f"ValueError: {PAST_MAX_MODEL_LEN_ERROR}"]
    assert [log.count(refusal) for refusal in refusals] == [1, 1], log[-6000:]
