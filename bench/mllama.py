"""Llama 3.2 Vision (Mllama) on the host backend against HF transformers: same weights, same machine, same run.

1. Per image of 1 and 4 tiles: the vision encoder + multi-modal projector (``vision_tokens``, preprocessed pixels
   in, vision tokens out), then the prefill of one image request (image preprocessing, vision encoder, cross K/V
   fill and a ``--prompt-len`` token prompt through ``prefill_forward``, last-row logits out), against HF's
   ``vision_model`` + ``multi_modal_projector`` and HF's forward (``logits_to_keep=1``) on the same inputs, in
   float32 (and bfloat16 with ``--hf-bf16``: off by default, as CPUs without bf16 matmul units run it several times
   slower than float32). Median of ``--repeats`` rounds after a warmup round, the sides taking turns in each;
   ``speed`` is HF float32's time / the row's time (> 1: faster than HF float32).
2. Decode of a mixed batch (``--num-requests``: half with images of 1..4 tiles, half text-only; every prompt
   ``--prompt-len`` tokens, ``--max-tokens`` greedy tokens each, EOS ignored) through ``tt_models.LLM`` against
   HF ``generate`` in float32. HF runs two batches, the image requests and the text-only ones: a text-only row in
   an HF image batch would still attend a dummy image (HF only zeroes its MLP branch), so it would not be the same
   request. Decode tokens/s is the batch over the median decode step (the engine's ``LLMEngine.step`` with its host
   work, prorated when a step advances fewer requests; HF's step is one step of each batch, timed by a logits
   processor); end-to-end counts all tokens over the whole call, preprocessing and prefill included. ``same``
   counts requests whose greedy tokens equal HF's, ``same prefix`` the mean tokens they agree on before parting.

Both sides run one torch thread by default: on 2 cores shared with other work, two threads per side mostly
measure waits for the other core (the host backend's many small ops suffer most, and vary several-fold).

By default the model is random, with the real model's shape ratios at a size 2 shared cores run in minutes (the
config is printed); ``--model DIR`` takes a real HF directory instead.

    .venv/bin/python bench/mllama.py [--model DIR] [--optimizations accuracy performance] [--repeats 3]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from PIL import Image
from transformers import MllamaConfig, MllamaForConditionalGeneration
from transformers.models.mllama.processing_mllama import (convert_sparse_cross_attention_mask_to_dense,
                                                          get_cross_attention_token_mask)

from tt_models import LLM, SamplingParams
from tt_models.checkpoints import load_hf_checkpoint
from tt_models.models.mllama.generator import MllamaForConditionalGeneration as TTMllama
from tt_models.models.mllama.images import image_processor, preprocess
from tt_models.runtime import close_device, open_device, ttnn, use

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the HF timing shared with vlm.py
from hf_timing import StepStamps, hf_generate, rounds  # noqa: E402

# Llama-3.2-11B-Vision's ratios, scaled down: 4 + 2 vision layers (real 32 + 8) of width 256 (1280), MLP 4x,
# patch 14, the final + 4 intermediate outputs into the projector (real 1 + 5), 4 tiles; text width 512 (4096),
# MLP 3.5x, GQA 4:1, head_dim 64 (128), 8 layers of which 2 cross-attention (real 40, 8), <|image|> = vocab_size.
VISION = dict(hidden_size=256, attention_heads=4, intermediate_size=1024, num_hidden_layers=4, num_global_layers=2,
              intermediate_layers_indices=[0, 1, 2, 3], vision_output_dim=256 * 5, image_size=224, patch_size=14,
              max_num_tiles=4, norm_eps=1e-5)
TEXT = dict(hidden_size=512, num_attention_heads=8, num_key_value_heads=2, intermediate_size=1792,
            num_hidden_layers=8, cross_attention_layers=[3, 7], vocab_size=4096, max_position_embeddings=2048,
            rms_norm_eps=1e-5, rope_theta=500000.0, bos_token_id=1, eos_token_id=2, pad_token_id=0)
BLOCK = 64
TT_PUBLISHED = ("Llama 3.2 11B Vision on an n300 (TP=2), batch 16, 128-token inputs: TTFT 714 ms, 18.1 tokens/s/user "
                "(289.6 tokens/s), tt-metal models/README.md, v0.62.0-dev20251015")


def random_mllama(seed: int = 0) -> MllamaForConditionalGeneration:
    """Random weights with every gate non-zero (HF initializes the text gates to zero, which would hide the image)."""
    torch.manual_seed(seed)
    config = MllamaConfig(vision_config=VISION, text_config=TEXT, image_token_index=TEXT["vocab_size"],
                          architectures=["MllamaForConditionalGeneration"])
    model = MllamaForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "gate" in name:
                param.uniform_(0.3, 1.2)
    return model


def load_hf(model_dir: str | None) -> tuple[MllamaForConditionalGeneration, str, tempfile.TemporaryDirectory | None]:
    """HF's model and the directory the engine loads (a temporary one for the random model)."""
    if model_dir is None:
        hf = random_mllama()
        tmp = tempfile.TemporaryDirectory(prefix="bench-mllama-")
        hf.save_pretrained(tmp.name)
        return hf, tmp.name, tmp
    checkpoint = load_hf_checkpoint(model_dir)
    hf = MllamaForConditionalGeneration(checkpoint.config).eval()
    hf.load_state_dict(checkpoint.state_dict, strict=True, assign=True)  # shares the tensors: no second copy
    return hf, model_dir, None


def image(tiles_wide: float, tiles_high: float, size: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (int(tiles_high * size), int(tiles_wide * size), 3), dtype=np.uint8))


def prompt(length: int, with_image: bool, image_token: int, vocab: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    head = [1, image_token] if with_image else [1]
    return head + torch.randint(3, min(vocab, 32000), (length - len(head),), generator=g).tolist()


def hf_inputs(processor: Any, prompts: list[list[int]], images: list[Image.Image], config: MllamaConfig) -> dict:
    """HF's inputs for equal-length image prompts (the processor's pixels, HF's own cross-attention mask)."""
    out = processor(images=[[im.convert("RGB")] for im in images], return_tensors="pt")
    sparse = [get_cross_attention_token_mask(p, config.image_token_index) for p in prompts]
    dense = convert_sparse_cross_attention_mask_to_dense(sparse, out["num_tiles"], config.vision_config.max_num_tiles,
                                                         len(prompts[0]))
    return dict(input_ids=torch.tensor(prompts), pixel_values=out["pixel_values"],
                aspect_ratio_ids=out["aspect_ratio_ids"], aspect_ratio_mask=out["aspect_ratio_mask"],
                cross_attention_mask=torch.tensor(dense))


def ours(model: TTMllama, device: Any, images: dict[str, Image.Image],
         prompts: dict[str, list[int]]) -> list[Callable[[], None]]:
    """Our vision encoder + projector per image, then our prefill per image."""
    replica, args = model.models[0], model.models[0].text.args
    cross = -(-model.max_cross_attn_tokens // BLOCK)
    kv = model.allocate_kv_cache((cross + 8, args.n_kv_heads, BLOCK, args.head_dim), torch.bfloat16, replica.n_layers)
    cross_table = torch.arange(cross, dtype=torch.int32)[None]
    page_table = torch.arange(cross, cross + 8, dtype=torch.int32)[None]

    def vision(pixels: Any) -> None:
        with use(device):
            out = replica.vision_tokens(pixels)
            ttnn.to_torch(out)
            ttnn.deallocate(out)

    def prefill(p: list[int], im: Image.Image) -> None:
        model.prefill_forward(tokens=torch.tensor([p]), images=[[im]], page_table=page_table, kv_cache=kv,
                              prompt_lens=[len(p)], cross_page_table=cross_table)

    pixels = [preprocess(model.image_processor, im) for im in images.values()]
    return ([lambda x=x: vision(x) for x in pixels]
            + [lambda n=n: prefill(prompts[n], images[n]) for n in images])


def hf_side(model: MllamaForConditionalGeneration, processor: Any, images: dict[str, Image.Image],
            prompts: dict[str, list[int]]) -> list[Callable[[], None]]:
    """HF's vision model + projector per image, then HF's forward per image (preprocessing included)."""
    dtype, config = model.dtype, model.config
    inputs = [hf_inputs(processor, [prompts[n]], [images[n]], config) for n in images]

    @torch.inference_mode()
    def vision(x: dict) -> None:
        states = model.model.vision_model(x["pixel_values"].to(dtype), x["aspect_ratio_ids"],
                                          x["aspect_ratio_mask"]).last_hidden_state
        model.model.multi_modal_projector(states)

    @torch.inference_mode()
    def prefill(p: list[int], im: Image.Image) -> None:
        x = hf_inputs(processor, [p], [im], config)
        model(**{**x, "pixel_values": x["pixel_values"].to(dtype)}, logits_to_keep=1)

    return [lambda x=x: vision(x) for x in inputs] + [lambda n=n: prefill(prompts[n], images[n]) for n in images]


def bench_latency(hf: MllamaForConditionalGeneration, model_dir: str, processor: Any, profiles: list[str],
                  images: dict[str, Image.Image], prompts: dict[str, list[int]], repeats: int,
                  bf16: bool) -> dict[str, list[float]]:
    """Row -> median ms per column (vision per image, then prefill per image). The rows take turns within each
    round, so a machine shared with other work loads them alike; round 0 is the warmup."""
    device = open_device("host")
    try:
        rows = {f"ours host {p}": ours(TTMllama.from_state_dict(hf.config, hf.state_dict(), device, 1,
                                                                 max_seq_len=256, optimizations=p,
                                                                 checkpoint_dir=model_dir),
                                        device, images, prompts) for p in profiles}
        rows["HF torch float32"] = hf_side(hf, processor, images, prompts)
        if bf16:
            rows["HF torch bfloat16"] = hf_side(copy.deepcopy(hf).to(torch.bfloat16), processor, images, prompts)
        seconds = rounds(rows, repeats)
    finally:
        close_device(device)
    return {row: [1000 * t for t in columns] for row, columns in seconds.items()}


Run = tuple[float, float, list[list[int]]]  # decode s per step of the whole batch, end-to-end s, tokens per request


def run_engine(model_dir: str, profile: str, requests: list[dict], max_tokens: int, max_model_len: int) -> Run:
    """One batch; the engine's decode steps (``LLMEngine.step`` with its host work) are timed apart."""
    with LLM(model_dir, max_num_seqs=len(requests), block_size=BLOCK, max_model_len=max_model_len, backend="host",
             optimizations=profile) as llm:
        engine = llm.llm_engine
        llm.generate(requests[:1], SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)  # warmup
        decode_steps, step = [], engine.step  # seconds per request advanced, of each decode step

        def timed_step() -> list:
            before, start = engine.stats["decode_steps"], time.perf_counter()
            out = step()
            if engine.stats["decode_steps"] > before:
                decode_steps.append((time.perf_counter() - start) / len(out))
            return out

        engine.step = timed_step  # the instance attribute shadows the method
        start = time.perf_counter()
        outputs = llm.generate(requests, SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True),
                               use_tqdm=False)
        e2e = time.perf_counter() - start
    return len(requests) * statistics.median(decode_steps), e2e, [list(o.outputs[0].token_ids) for o in outputs]


def run_hf(hf: MllamaForConditionalGeneration, processor: Any, requests: list[dict], max_tokens: int) -> Run:
    """Two batches, the image requests and the text-only ones; a step of the mixed batch is one step of each."""
    groups = [[i for i, r in enumerate(requests) if ("multi_modal_data" in r) == images] for images in (True, False)]
    step = e2e = 0.0
    tokens: dict[int, list[int]] = {}
    for rows in groups:
        stamps, start = StepStamps(), time.perf_counter()
        prompts = [requests[i]["prompt_token_ids"] for i in rows]
        inputs = {"input_ids": torch.tensor(prompts)}
        if "multi_modal_data" in requests[rows[0]]:
            inputs = hf_inputs(processor, prompts, [requests[i]["multi_modal_data"]["image"] for i in rows], hf.config)
        out = hf_generate(hf, inputs, 0, max_tokens, stamps)
        e2e += time.perf_counter() - start
        step += stamps.median_step()
        tokens.update(zip(rows, out[:, len(prompts[0]):].tolist()))
    return step, e2e, [tokens[i] for i in range(len(requests))]


def common_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def describe(config: MllamaConfig, hf: MllamaForConditionalGeneration) -> str:
    v, t = config.vision_config, config.text_config
    patches = (v.image_size // v.patch_size) ** 2 + 1
    params = sum(p.numel() for p in hf.parameters()) / 1e6
    return (f"vision: {v.num_hidden_layers}+{v.num_global_layers} layers, width {v.hidden_size}, "
            f"{v.attention_heads} heads, tile {v.image_size}/{v.patch_size} -> {patches} tokens/tile, "
            f"{v.max_num_tiles} tiles -> {v.max_num_tiles * patches} vision tokens, projector "
            f"{v.vision_output_dim}->{t.hidden_size}\ntext: {t.num_hidden_layers} layers "
            f"({len(t.cross_attention_layers)} cross-attention), width {t.hidden_size}, "
            f"{t.num_attention_heads} heads / {t.num_key_value_heads} KV, MLP {t.intermediate_size}, "
            f"vocab {t.vocab_size}; {params:.1f}M parameters")


CLOSING = """\
What it means for a card: nothing about speed. On this 2-core host both sides are CPU-bound torch; the host \
backend runs the TT-NN model code op by op under ttnn's semantics (tiles padded to 32, weights and KV packed to \
bfloat16 / block-float and unpacked, fp32 math, no fusion, no trace), so the ratios measure that emulation against \
HF's eager torch, not a Tenstorrent device. What carries over is the work: the same ops on the same shapes (both \
sides run an image as max_num_tiles tiles, padding included; an image request's vision tokens become cross K/V in \
paged blocks, tiles x tokens/tile per cross-attention layer, that every decode step reads), and the tokens. With \
random weights the logits are nearly flat (top-2 gaps often within the bfloat16 / block-float rounding error), \
so greedy sequences part from HF's after a few tokens; with a real checkpoint (--model) the 'same' column is the \
check. For orientation, TT's published figure for the real model: """ + TT_PUBLISHED + "."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="an HF Llama 3.2 Vision directory (default: random, small)")
    parser.add_argument("--optimizations", nargs="+", choices=["accuracy", "performance"],
                        default=["accuracy", "performance"])
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per latency (median, after a warmup)")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--num-requests", type=int, default=8, help="decode batch: half image, half text-only")
    parser.add_argument("--max-tokens", type=int, default=32, help="generated tokens per request")
    parser.add_argument("--hf-bf16", action="store_true", help="also time HF in bfloat16 (slow on most CPUs)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's own; see the docstring)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()  # HF's weight-loading bars would bury the tables
    load_start = os.getloadavg()[0]

    hf, model_dir, tmp = load_hf(args.model)
    config = hf.config
    processor = image_processor(args.model, config.vision_config)  # as the engine's and the generator's
    size, image_token, vocab = config.vision_config.image_size, config.image_token_index, config.text_config.vocab_size
    images = {"1 tile": image(0.9, 0.7, size, 0), "4 tiles": image(2, 2, size, 1)}
    prompts = {name: prompt(args.prompt_len, True, image_token, vocab, i) for i, name in enumerate(images)}
    latency = bench_latency(hf, model_dir, processor, args.optimizations, images, prompts, args.repeats, args.hf_bf16)

    # The mixed batch: image requests of 1, 2, 3, 4, 1, ... tiles take turns with text-only ones.
    shapes = [(0.9, 0.7), (2, 1), (3, 1), (2, 2)]
    requests = []
    for i in range(args.num_requests):
        request = {"prompt_token_ids": prompt(args.prompt_len, i % 2 == 0, image_token, vocab, 100 + i)}
        if i % 2 == 0:
            request["multi_modal_data"] = {"image": image(*shapes[i // 2 % len(shapes)], size, 100 + i)}
        requests.append(request)
    n_images = sum("multi_modal_data" in r for r in requests)
    max_model_len = args.prompt_len + args.max_tokens
    decode = {f"ours host {p} (LLM, one batch)": run_engine(model_dir, p, requests, args.max_tokens, max_model_len)
              for p in args.optimizations}
    hf_name = f"HF torch float32 (generate: {n_images} image, {len(requests) - n_images} text)"
    decode[hf_name] = run_hf(hf, processor, requests, args.max_tokens)
    if tmp is not None:
        tmp.cleanup()

    print(f"\nMllama, {'random weights' if args.model is None else args.model}; {describe(config, hf)}")
    print(f"\n1. one image request, ms (median of {args.repeats} rounds after a warmup; speed = HF float32's time / "
          f"the row's, > 1: faster)\n   prefill = preprocessing + vision + cross K/V + {args.prompt_len}-token prompt, "
          "last-row logits")
    header = [f"vision+proj {n}" for n in images] + [f"prefill {n}" for n in images]
    print(f"{'':<22}" + "".join(f"{h:>21}" for h in header))
    reference = latency["HF torch float32"]
    for row, values in latency.items():
        print(f"{row:<22}" + "".join(f"{f'{v:.0f} ({r / v:.2f}x)':>21}" for v, r in zip(values, reference)))

    hf_step, _, hf_tokens = decode[hf_name]
    n_all = sum(map(len, hf_tokens))
    print(f"\n2. mixed batch: {len(requests)} requests ({n_images} with an image of 1-4 tiles, "
          f"{len(requests) - n_images} text-only), {args.prompt_len}-token prompts,\n   {args.max_tokens} greedy "
          "tokens each, EOS ignored; decode t/s = requests / median step (HF's step: one of each batch);\n   "
          "e2e = all tokens / the whole call")
    print(f"{'':<46} {'step ms':>7} {'decode t/s':>10} {'vs HF':>7} {'e2e s':>6} {'e2e t/s':>7} {'same':>5} "
          f"{'same prefix':>11}")
    for row, (step, e2e, tokens) in decode.items():
        if sum(map(len, tokens)) != n_all:
            raise RuntimeError(f"{row}: {sum(map(len, tokens))} tokens, HF {n_all}")
        same = sum(a == b for a, b in zip(tokens, hf_tokens))
        prefix = statistics.mean(common_prefix(a, b) for a, b in zip(tokens, hf_tokens))
        print(f"{row:<46} {1000 * step:>7.0f} {len(requests) / step:>10.1f} {hf_step / step:>6.2f}x {e2e:>6.1f} "
              f"{n_all / e2e:>7.1f} {same:>2}/{len(requests)} {prefix:>6.1f}/{args.max_tokens}")
    print(f"torch threads {torch.get_num_threads()}; load average (1 min) {load_start:.1f} at start, "
          f"{os.getloadavg()[0]:.1f} at end, {os.cpu_count()} CPUs\n")
    print(textwrap.fill(CLOSING, width=118))


if __name__ == "__main__":
    main()
