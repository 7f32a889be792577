"""Qwen2.5-VL and Gemma 3 on the host backend against HF transformers: same config, weights, machine, threads, run.

1. Vision encoder ms per image, by image size: our vision tower (+ merger / projector) through the model's own
   ``image_table`` (preprocessed pixels in, image tokens at the text width out, read back), against HF's
   ``get_image_features`` on the same pixels, in float32. Qwen2.5-VL sees images at their size (14 px patches merged
   2 x 2, so the token counts are the real model's for the same pixels); Gemma 3 resizes every image to one square,
   so its sizes are aspect ratios that pan-and-scan cuts into 1 + N crops.
2. TTFT of one image chat: ``LLM.chat`` with ``max_tokens=1`` (chat template, image preprocessing and placeholder
   expansion, vision tower, prefill, sampling), against HF's processor + ``generate(max_new_tokens=1)``.
3. Decode tokens/s of a mixed batch (``--num-requests``: half image chats, half text-only) through ``LLM.chat``,
   ``--max-tokens`` greedy tokens each, EOS ignored, against one HF ``generate`` of the same batch (left-padded).
   Ours is the median over the engine's decode steps (``LLMEngine.step``, its host work included) of the tokens
   the step committed over its time; HF's the batch over the median interval between its logits-processor calls.
   ``same`` counts requests whose greedy tokens equal HF's (random weights give near-flat logits: a check that both
   ran the same requests more than of numerics, which tests/models/test_*_pcc.py measure).

Each table prints the ratio ours / HF (> 1: ours is faster). Medians of ``--repeats`` rounds after a warmup round,
the two sides taking turns within each round, so load from other work on the machine hits both alike.

4. No measurement: TT's published decode figures for the real models (batch 1) beside the DRAM-bandwidth bound of a
   decode step on an n150 (288 GB/s): the text decoder's weights at the profile's dtypes plus one user's KV at
   ``--bound-context`` tokens, read once per token, from the real configs' sizes (written below with their source).

By default the models are the tests' tiny random configs (tt_models/testing/*.py, head_dim 32 everywhere);
``--text-width``, ``--text-layers``, ``--vision-width`` and ``--vision-layers`` scale them. Both sides run
``--threads`` torch threads (default 1: on 2 cores shared with other work, two threads per side mostly measure
waits for the other core). The host backend computes ttnn's semantics op by op on the CPU: these ratios say
nothing about a TT device.

    .venv/bin/python bench/vlm.py [--models qwen2_5_vl gemma3] [--optimizations performance] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import transformers
from PIL import Image
from transformers import AutoProcessor, PreTrainedModel
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from tt_models import LLM, SamplingParams
from tt_models.models.gemma3.generator import Gemma3ForConditionalGeneration
from tt_models.models.gemma3.model import text_precision as gemma3_text_precision
from tt_models.models.qwen2_5_vl.generator import Qwen2_5_VLForConditionalGeneration
from tt_models.models.qwen2_5_vl.text import text_precision as qwen2_5_vl_text_precision
from tt_models.runtime import close_device, open_device, ttnn, use
from tt_models.testing import gemma3, qwen2_5_vl
from tt_models.testing.images import random_image
from tt_models.tt.image_text_generator import ImageTextGenerator
from tt_models.tt.model_config import Precision, default_profile

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the HF timing shared with mllama.py
from hf_timing import StepStamps, hf_generate, rounds  # noqa: E402

HEAD_DIM = 32  # the tests' configs' head_dim, text and vision: width flags change the number of heads
BLOCK = 32
N150_BYTES_PER_S = 288e9  # Wormhole n150 DRAM bandwidth (research/anchors.md 1.2, docs.tenstorrent.com)
BYTES = {"bfloat16": 2.0, "bfloat8_b": 1.0625, "bfloat4_b": 0.5625}  # per element stored (anchors.md 1.2)
QUESTIONS = ["Describe the picture.", "What colors do you see?", "Is there a person here?", "Count the shapes.",
             "What is the capital of France?", "Name three fruits.", "Why is the sky blue?", "Write a short poem."]


@dataclass(frozen=True)
class RealText:
    """The text decoder sizes a decode step reads, of a real checkpoint's config.json."""

    name: str
    source: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    published: str  # TT's published figures, with their source
    published_tps: float  # the decode t/s/u of those set against the bound


QWEN2_5_VL_3B = RealText(
    "Qwen2.5-VL-3B-Instruct", "config.json of Qwen/Qwen2.5-VL-3B-Instruct (HF hub): text decoder, tied embeddings",
    hidden=2048, intermediate=11008, layers=36, heads=16, kv_heads=2, head_dim=128, vocab=151936,
    published="n150, batch 1, bfloat4_b MLP + bfloat8_b attention: 31.85 t/s/u, TTFT 752 ms (text input) "
              "(tt-metal models/demos/qwen25_vl/PERF.md@16dac60, research/vlm_v1.md section 4)",
    published_tps=31.85)
GEMMA3_4B = RealText(
    "gemma-3-4b-it", "config.json of google/gemma-3-4b-it (HF hub): text_config, tied embeddings",
    hidden=2560, intermediate=10240, layers=34, heads=8, kv_heads=4, head_dim=256, vocab=262208,
    published="n150, performance mode: 34 t/s/u, TTFT 64 ms (text input); 25.8 t/s/u, TTFT 920 ms (vision input) "
              "(tt-metal models/demos/multimodal/gemma3/PERF.md@0be12f9, research/vlm_v1.md section 4)",
    published_tps=34.0)


@dataclass(frozen=True)
class Family:
    name: str
    generator: type[ImageTextGenerator]
    build: Callable[[dict, dict], PreTrainedModel]  # (text overrides, vision overrides) -> HF model, random weights
    processor: Callable[[], Any]  # the tiny checkpoint's processor (its tokenizer, template, image processor)
    encoder_cases: Callable[[list[tuple[int, int]], Any], list[tuple[str, tuple, dict]]]
    text_precision: Callable[[Any, str], Precision]  # (HF config, profile) -> the text decoder's dtypes
    real: RealText
    sizes: list[tuple[int, int]]  # default image sizes of table 1 (width, height)


def qwen2_5_vl_build(text: dict, vision: dict) -> PreTrainedModel:
    if "hidden_size" in text:
        vision = vision | {"out_hidden_size": text["hidden_size"]}  # the merger projects to the text width
    return qwen2_5_vl.tiny_qwen2_5_vl(0, text=text, **vision)


def qwen2_5_vl_cases(sizes: list[tuple[int, int]], config: Any) -> list[tuple[str, tuple, dict]]:
    """Per size: a label, our ``image_table`` arguments, HF's ``get_image_features`` keywords. The pixel budget is
    wide open (the tiny checkpoint's caps images at 224 x 224), so every image keeps its size."""
    v = config.vision_config
    processor = Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=4096 * 4096, patch_size=v.patch_size,
                                         temporal_patch_size=v.temporal_patch_size, merge_size=v.spatial_merge_size)
    cases = []
    for i, (w, h) in enumerate(sizes):
        out = processor(images=[random_image(w, h, i)], return_tensors="pt")
        pixels, grid = out["pixel_values"], out["image_grid_thw"]
        label = f"{w}x{h}: {len(pixels)} patches, {len(pixels) // v.spatial_merge_size ** 2} tokens"
        cases.append((label, ([pixels], [tuple(int(g) for g in grid[0])]),
                      dict(pixel_values=pixels, image_grid_thw=grid)))
    return cases


def gemma3_build(text: dict, vision: dict) -> PreTrainedModel:
    if "num_hidden_layers" in text:  # sliding and global layers take turns, as in the tests' config
        text = text | {"layer_types": ["sliding_attention", "full_attention"] * (text["num_hidden_layers"] // 2)
                       + ["sliding_attention"] * (text["num_hidden_layers"] % 2)}
    return gemma3.tiny_gemma3(0, text=text, **vision)


def gemma3_cases(sizes: list[tuple[int, int]], config: Any) -> list[tuple[str, tuple, dict]]:
    """Per aspect ratio: HF's pan-and-scan (as vLLM's processor runs it when asked), its minimum crop scaled to the
    tiny tower (at least half the image size; at most 4 crops, cut from an aspect ratio of 1.2 on): the whole image
    and its crops are each an image of ``mm_tokens_per_image`` tokens."""
    size = config.vision_config.image_size
    processor = Gemma3ImageProcessorPil(size={"height": size, "width": size}, do_pan_and_scan=True,
                                        pan_and_scan_min_crop_size=size // 2, pan_and_scan_max_num_crops=4,
                                        pan_and_scan_min_ratio_to_activate=1.2)
    cases = []
    for i, (w, h) in enumerate(sizes):
        pixels = processor(images=[random_image(w, h, i)], return_tensors="pt")["pixel_values"]
        label = f"{w}x{h}: {len(pixels)} crop(s) of {size} px, {len(pixels) * config.mm_tokens_per_image} tokens"
        cases.append((label, (list(pixels),), dict(pixel_values=pixels)))
    return cases


FAMILIES = {
    "qwen2_5_vl": Family("Qwen2.5-VL", Qwen2_5_VLForConditionalGeneration, qwen2_5_vl_build,
                         qwen2_5_vl.tiny_processor, qwen2_5_vl_cases, qwen2_5_vl_text_precision,
                         QWEN2_5_VL_3B,
                         [(224, 224), (448, 224), (224, 672), (448, 448)]),
    "gemma3": Family("Gemma 3", Gemma3ForConditionalGeneration, gemma3_build, gemma3.tiny_processor,
                     gemma3_cases, gemma3_text_precision, GEMMA3_4B,
                     [(64, 64), (128, 64), (256, 64)]),
}


def overrides(args: argparse.Namespace, family: str) -> tuple[dict, dict]:
    """The size flags as overrides of the tests' text and vision configs (widths in heads of ``HEAD_DIM``)."""
    text, vision = {}, {}
    if args.text_width:
        w = args.text_width
        text.update(hidden_size=w, num_attention_heads=w // HEAD_DIM, num_key_value_heads=max(1, w // HEAD_DIM // 2),
                    intermediate_size=2 * w, initializer_range=w ** -0.5)
    if args.text_layers:
        text["num_hidden_layers"] = args.text_layers
    if args.vision_width:
        w = args.vision_width
        heads = "num_heads" if family == "qwen2_5_vl" else "num_attention_heads"
        vision.update(hidden_size=w, intermediate_size=2 * w, **{heads: w // HEAD_DIM})
        if family == "qwen2_5_vl":
            vision["initializer_range"] = w ** -0.5
    if args.vision_layers:
        if family == "qwen2_5_vl":  # every other block attends the whole image, as the tests' 4 blocks do
            vision.update(depth=args.vision_layers, fullatt_block_indexes=list(range(1, args.vision_layers, 2)))
        else:
            vision["num_hidden_layers"] = args.vision_layers
    return text, vision


def write_checkpoint(hf: PreTrainedModel, processor: Any, path: str) -> None:
    """An HF directory the engine loads: weights, config, the processor's files (tokenizer, chat template,
    ``preprocessor_config.json``), as tt_models.testing's checkpoint writers write them."""
    hf.save_pretrained(path)
    processor.save_pretrained(path)
    processor.image_processor.save_pretrained(path)


def bench_encoder(family: Family, hf: PreTrainedModel, profiles: list[str], cases: list[tuple[str, tuple, dict]],
                  repeats: int) -> dict[str, list[float]]:
    """Side (``ours <profile>``, ``HF``) -> median seconds per case."""
    device = open_device("host")
    try:
        sides = {}
        for profile in profiles:
            replica = family.generator.from_state_dict(hf.config, hf.state_dict(), device, 1, max_seq_len=256,
                                                       optimizations=profile).models[0]

            def ours(arguments: tuple, replica: Any = replica) -> None:
                with use(device):
                    table = replica.image_table(*arguments)
                    ttnn.to_torch(table)
                    ttnn.deallocate(table)

            sides[f"ours {profile}"] = [lambda a=a, f=ours: f(a) for _, a, _ in cases]

        @torch.inference_mode()
        def theirs(kwargs: dict) -> None:
            hf.model.get_image_features(**kwargs)

        sides["HF"] = [lambda k=k: theirs(k) for _, _, k in cases]
        return rounds(sides, repeats)
    finally:
        close_device(device)


def chat(text: str, images: list[Image.Image], ours: bool) -> list[dict]:
    """One user turn: images as PIL parts for ``LLM.chat``, as ``{"type": "image"}`` for HF's template."""
    parts = [{"type": "image_pil", "image_pil": im} if ours else {"type": "image"} for im in images]
    return [{"role": "user", "content": parts + [{"type": "text", "text": text}]}]


Request = tuple[str, list[Image.Image]]  # question, images


def hf_batch(processor: Any, requests: list[Request], pad_id: int) -> tuple[dict, list[list[int]]]:
    """HF's inputs for ``requests`` (each through the processor alone, then left-padded into one batch, the image
    rows' pixels concatenated in order) and each request's prompt tokens. The template writes the special tokens."""
    rows = []
    for text, images in requests:
        prompt = processor.apply_chat_template(chat(text, images, ours=False), add_generation_prompt=True,
                                               tokenize=False)
        rows.append(processor(text=[prompt], images=images or None, return_tensors="pt", add_special_tokens=False))
    width = max(row["input_ids"].shape[1] for row in rows)
    batch = {}
    for key in ("input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids"):
        if key in rows[0]:
            fill = pad_id if key == "input_ids" else 0
            batch[key] = torch.cat([torch.nn.functional.pad(row[key], (width - row[key].shape[1], 0), value=fill)
                                    for row in rows])
    for key in ("pixel_values", "image_grid_thw"):
        parts = [row[key] for row in rows if key in row]
        if parts:
            batch[key] = torch.cat(parts)
    return batch, [row["input_ids"][0].tolist() for row in rows]


def engine_decode(llm: LLM, requests: list[Request], max_tokens: int) -> tuple[float, list[list[int]], list[list[int]]]:
    """Median tokens/s over the engine's decode steps, the generated and the prompt tokens per request."""
    engine, step = llm.llm_engine, llm.llm_engine.step
    rates = []

    def timed_step() -> list:
        steps, tokens, start = engine.stats["decode_steps"], engine.stats["generated_tokens"], time.perf_counter()
        out = step()
        if engine.stats["decode_steps"] > steps:
            rates.append((engine.stats["generated_tokens"] - tokens) / (time.perf_counter() - start))
        return out

    engine.step = timed_step  # the instance attribute shadows the method
    try:
        outputs = llm.chat([chat(text, images, ours=True) for text, images in requests],
                           SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True), use_tqdm=False)
    finally:
        del engine.step
    return (statistics.median(rates), [list(o.outputs[0].token_ids) for o in outputs],
            [list(o.prompt_token_ids) for o in outputs])


def bench_engine(family: Family, hf: PreTrainedModel, model_dir: str, profile: str, ttft_request: Request,
                 batch_requests: list[Request], args: argparse.Namespace) -> dict[str, Any]:
    """TTFT of ``ttft_request`` (both sides in turns) and the mixed batch's decode, ours then HF's."""
    processor = AutoProcessor.from_pretrained(model_dir)
    pad_id = processor.tokenizer.pad_token_id
    one = SamplingParams(temperature=0, max_tokens=1)
    with LLM(model_dir, max_num_seqs=len(batch_requests), block_size=BLOCK, max_model_len=args.max_model_len,
             backend="host", optimizations=profile) as llm:
        ttft_prompts = {}

        def ours() -> None:
            ttft_prompts["ours"] = list(llm.chat(chat(*ttft_request, ours=True), one, use_tqdm=False)[0]
                                        .prompt_token_ids)

        def theirs() -> None:
            batch, ttft_prompts["HF"] = hf_batch(processor, [ttft_request], pad_id)
            hf_generate(hf, batch, pad_id, 1)

        ttft = rounds({"ours": [ours], "HF": [theirs]}, args.repeats)
        if ttft_prompts["ours"] != ttft_prompts["HF"][0]:
            raise RuntimeError(f"{family.name}: the engine's image prompt differs from HF's processor's")
        ours_rate, ours_tokens, ours_prompts = engine_decode(llm, batch_requests, args.max_tokens)
    batch, hf_prompts = hf_batch(processor, batch_requests, pad_id)
    if ours_prompts != hf_prompts:
        raise RuntimeError(f"{family.name}: the engine's prompts differ from HF's processor's")
    stamps = StepStamps()
    out = hf_generate(hf, batch, pad_id, args.max_tokens, stamps)
    hf_rate = len(batch_requests) / stamps.median_step()
    hf_tokens = out[:, batch["input_ids"].shape[1]:].tolist()
    return dict(ttft=ttft, ttft_prompt_len=len(ttft_prompts["HF"][0]), decode=(ours_rate, hf_rate),
                same=sum(a == b for a, b in zip(ours_tokens, hf_tokens)), prompt_lens=sorted(map(len, hf_prompts)))


def decode_step_bytes(real: RealText, precision: Precision, context: int) -> float:
    """DRAM bytes of one decode step of one user: every decoder projection and the LM head at their stored dtypes,
    the user's K and V at ``context`` tokens (embeddings: one row, norms and biases: negligible)."""
    def stored(dtype: Any, numel: int) -> float:
        return numel * BYTES[dtype.name.lower()]

    q_width, kv_width = real.heads * real.head_dim, real.kv_heads * real.head_dim
    attention = stored(precision.attention_weights, real.hidden * (2 * q_width + 2 * kv_width))
    mlp = stored(precision.mlp_weights, 3 * real.hidden * real.intermediate)
    kv = stored(precision.kv_cache, 2 * context * kv_width)
    return real.layers * (attention + mlp + kv) + stored(precision.lm_head_weights, real.vocab * real.hidden)


def print_bounds(families: list[Family], context: int) -> None:
    print(f"\n4. decode bound on an n150 ({N150_BYTES_PER_S / 1e9:.0f} GB/s DRAM): text decoder weights + 1 user's KV "
          f"at {context} tokens per step; TT's published figure as % of each bound")
    print(f"   {'model, weights':<70} {'GB/step':>7} {'bound t/s/u':>11} {'TT published':>12} {'% of bound':>10}")
    for family in families:
        real = family.real
        default = default_profile(SimpleNamespace(_name_or_path=real.name))
        rows = {f"tt-models {p}{' (default)' if p == default else ''}": family.text_precision(None, p)
                for p in ("accuracy", "performance")}
        rows["tt_transformers performance (bfloat4_b MLP)"] = Precision.for_profile("performance")
        for label, precision in rows.items():
            step = decode_step_bytes(real, precision, context)
            bound = N150_BYTES_PER_S / step
            print(f"   {real.name + ', ' + label:<70} {step / 1e9:>7.3f} {bound:>11.1f} {real.published_tps:>12.2f} "
                  f"{100 * real.published_tps / bound:>9.0f}%")
        print(textwrap.fill(f"sizes: {real.source}: hidden {real.hidden}, MLP {real.intermediate}, {real.layers} "
                            f"layers, {real.heads} heads / {real.kv_heads} KV of {real.head_dim}, vocab {real.vocab}. "
                            f"TT: {real.published}.", width=116, initial_indent="   ", subsequent_indent="   "))


def describe(hf: PreTrainedModel) -> str:
    config, params = hf.config, sum(p.numel() for p in hf.parameters()) / 1e6
    t, v = config.text_config, config.vision_config
    v_layers = getattr(v, "depth", None) or v.num_hidden_layers
    return (f"text {t.num_hidden_layers} layers, width {t.hidden_size}, MLP {t.intermediate_size}, vocab "
            f"{t.vocab_size}; vision {v_layers} layers, width {v.hidden_size}; {params:.2f}M parameters")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=sorted(FAMILIES), default=["qwen2_5_vl", "gemma3"])
    parser.add_argument("--optimizations", nargs="+", choices=["accuracy", "performance"], default=["performance"])
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per latency (median, after a warmup)")
    parser.add_argument("--num-requests", type=int, default=8, help="decode batch: half image, half text-only")
    parser.add_argument("--max-tokens", type=int, default=32, help="generated tokens per request in the batch")
    parser.add_argument("--max-model-len", type=int, default=512)
    parser.add_argument("--qwen-sizes", nargs="+", default=None, help="WxH images of table 1 for Qwen2.5-VL")
    parser.add_argument("--gemma-sizes", nargs="+", default=None, help="WxH images of table 1 for Gemma 3")
    parser.add_argument("--text-width", type=int, default=None, help="text hidden size (default: the tests')")
    parser.add_argument("--text-layers", type=int, default=None)
    parser.add_argument("--vision-width", type=int, default=None, help="vision hidden size (default: the tests')")
    parser.add_argument("--vision-layers", type=int, default=None)
    parser.add_argument("--bound-context", type=int, default=128, help="tokens of KV per step in the bound")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of both sides (0: torch's own)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()  # generate()'s notes would bury the tables
    transformers.utils.logging.disable_progress_bar()
    load_start = os.getloadavg()[0]
    given = {"qwen2_5_vl": args.qwen_sizes, "gemma3": args.gemma_sizes}

    for key in args.models:
        family = FAMILIES[key]
        hf = family.build(*overrides(args, key))
        sizes = [tuple(int(x) for x in s.split("x")) for s in given[key]] if given[key] else family.sizes
        cases = family.encoder_cases(sizes, hf.config)
        # Image chats take turns with text-only ones; the images' sizes fit the tiny checkpoint's pixel budget.
        shapes = [(224, 224), (200, 120), (120, 200), (160, 160)]
        requests = [(QUESTIONS[i % len(QUESTIONS)],
                     [random_image(*shapes[i // 2 % len(shapes)], 100 + i)] if i % 2 == 0
                     else []) for i in range(args.num_requests)]
        with tempfile.TemporaryDirectory(prefix=f"bench-{key}-") as model_dir:
            write_checkpoint(hf, family.processor(), model_dir)
            encoder = bench_encoder(family, hf, args.optimizations, cases, args.repeats)
            engine = {p: bench_engine(family, hf, model_dir, p, requests[0], requests, args)
                      for p in args.optimizations}

        print(f"\n{family.name}, random weights: {describe(hf)}")
        print(f"1. vision encoder, ms per image (median of {args.repeats}; ours / HF float32 speed in brackets)")
        print(f"   {'image':<44}" + "".join(f"{side:>22}" for side in encoder))
        for column, (label, _, _) in enumerate(cases):
            reference = encoder["HF"][column]
            print(f"   {label:<44}" + "".join(f"{f'{1000 * t[column]:.1f} ({reference / t[column]:.2f}x)':>22}"
                                             for t in encoder.values()))
        for profile, result in engine.items():
            (ours_ttft,), (hf_ttft,) = result["ttft"]["ours"], result["ttft"]["HF"]
            ours_rate, hf_rate = result["decode"]
            lens = result["prompt_lens"]
            print(f"2. TTFT of one image chat ({result['ttft_prompt_len']}-token prompt), ours {profile}: "
                  f"{1000 * ours_ttft:.0f} ms, HF {1000 * hf_ttft:.0f} ms, ours/HF speed {hf_ttft / ours_ttft:.2f}x")
            print(f"3. decode, batch {len(requests)} ({sum(bool(i) for _, i in requests)} image + "
                  f"{sum(not i for _, i in requests)} text-only chats, prompts of {lens[0]}-{lens[-1]} tokens, "
                  f"{args.max_tokens} tokens each), ours {profile}:\n   {ours_rate:.1f} t/s, HF {hf_rate:.1f} t/s, "
                  f"ours/HF {ours_rate / hf_rate:.2f}x; greedy tokens equal to HF's: {result['same']}/{len(requests)}")

    print_bounds([FAMILIES[key] for key in args.models], args.bound_context)
    print(f"\ntorch threads {torch.get_num_threads()}; load average (1 min) {load_start:.1f} at start, "
          f"{os.getloadavg()[0]:.1f} at end, {os.cpu_count()} CPUs; host backend against HF eager torch float32, "
          "not a TT device")


if __name__ == "__main__":
    main()
