"""Offline inference with tt-models' engine, with TT vLLM's ``examples/offline_inference_tt.py`` options.

With no arguments it runs, offline, the two bundled jobs: Whisper tiny.en transcribes the real two-speaker
call shipped with pyannote.audio (the whole clip and each reference segment), then SmolLM2-135M-Instruct
answers the chat prompts of ``demo/prompts.json``. Each run prints its outputs, then TTFT, t/s/u (decode
tokens per second per user) and t/s (generated tokens per second over the whole run).

``--multi_modal`` runs TT's Llama 3.2 Vision sample requests (two photos shipped in ``llama-models``, each with
its question, and a text-only question) on the image+text HF directory given with ``--model``: Llama 3.2 Vision,
Qwen2.5-VL or Gemma 3.

    python demo/offline_inference_tt.py                                   # the bundled jobs
    python demo/offline_inference_tt.py --multi_modal --model /path/to/Llama-3.2-11B-Vision-Instruct
    python demo/offline_inference_tt.py --model whisper-tiny.en --audio a.wav b.flac
    python demo/offline_inference_tt.py --model smollm2-135m-instruct --test_increasing_seq_lens
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from PIL import Image
from transformers import AutoConfig, PreTrainedTokenizerBase

from tt_models import LLM, RequestOutput, SamplingParams
from tt_models.audio import load_audio, speech_sample
from tt_models.engine.config import takes_images
from tt_models.package_data import sample_image_paths

DEFAULT_MODELS = ("whisper-tiny.en", "smollm2-135m-instruct")
DEFAULT_PROMPTS = Path(__file__).with_name("prompts.json")
SAMPLE_RATE = 16000
# TT's Llama 3.2 Vision samples: tt-metal's vision demo asks these about the two photos; TT vLLM's example
# adds the text-only question.
IMAGE_QUESTIONS = (("dog.jpg", "Write a haiku for this image."), ("pasta.jpeg", "What is for dinner?"))
TEXT_QUESTION = "Write a haiku."
NO_VISION_CHECKPOINT = (
    "--multi_modal runs an image+text model (Llama 3.2 Vision, Qwen2.5-VL or Gemma 3), and no such checkpoint ships "
    "offline: point the demo at an HF directory of one, e.g. meta-llama/Llama-3.2-11B-Vision-Instruct, "
    "Qwen/Qwen2.5-VL-3B-Instruct or google/gemma-3-4b-it (config.json, the safetensors, the tokenizer files and "
    "preprocessor_config.json) with --model /path/to/dir, e.g.\n"
    "  python demo/offline_inference_tt.py --multi_modal --model /path/to/Llama-3.2-11B-Vision-Instruct")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help=f"HF directory, local HF cache id, .gguf file, CTranslate2 Whisper directory "
                                   f"or alias; default: the bundled jobs ({', '.join(DEFAULT_MODELS)})")
    p.add_argument("--prompts_json", type=Path, default=DEFAULT_PROMPTS,
                   help="JSON list of prompts (strings, or vLLM prompt dicts); chat models get their template")
    p.add_argument("--audio", type=Path, nargs="+", help="audio files to transcribe (Whisper); any format and rate")
    p.add_argument("--multi_modal", action="store_true",
                   help="TT's Llama 3.2 Vision sample requests (two photos and a text-only question, greedy) on "
                        "the image+text HF directory given with --model (Llama 3.2 Vision, Qwen2.5-VL, Gemma 3)")
    p.add_argument("--max_tokens", type=int, default=128)
    p.add_argument("--greedy_sampling", action="store_true",
                   help="temperature 0 (otherwise top_k 10, top_p 0.9, temperature 1.0, as TT vLLM's example)")
    p.add_argument("--max_seqs_in_batch", type=int, default=32, help="max_num_seqs: the decode batch")
    p.add_argument("--num_repeat_prompts", type=int, default=1, help="TT vLLM's example repeats twice")
    p.add_argument("--test_increasing_seq_lens", action="store_true",
                   help="one request at a time, prompt (and encoder) lengths doubling up to the model's limits")
    p.add_argument("--measure_perf", action="store_true",
                   help="all-zero dummy prompts of --perf_prompt_len tokens, ignore_eos, a full batch: "
                        "one warmup run, two timed runs")
    p.add_argument("--perf_prompt_len", type=int, default=128)
    p.add_argument("--block_size", type=int, default=64)
    p.add_argument("--max_model_len", type=int)
    p.add_argument("--max_num_batched_tokens", type=int)
    p.add_argument("--optimizations", choices=("performance", "accuracy"),
                   help="default: the model's own (tt_transformers' per-model choice: accuracy for SmolLM2, "
                        "performance for most)")
    p.add_argument("--backend", choices=("ttnn", "mock", "host"), help="default: ttnn with a TT card, else host")
    args = p.parse_args(argv)
    if args.test_increasing_seq_lens and args.measure_perf:
        p.error("--test_increasing_seq_lens cannot be combined with --measure_perf")
    if args.multi_modal and (args.test_increasing_seq_lens or args.measure_perf):
        p.error("--multi_modal runs its sample requests: it cannot be combined with --test_increasing_seq_lens "
                "or --measure_perf")
    if args.multi_modal and not is_image_text_checkpoint(args.model):
        given = f"{args.model!r} is not an image+text checkpoint. " if args.model else ""
        p.exit(2, f"{p.prog}: {given}{NO_VISION_CHECKPOINT}\n")
    return args


def is_image_text_checkpoint(model: str | None) -> bool:
    """Whether ``model`` is an HF directory (or local HF cache id) of a checkpoint that takes images: checked from
    its config alone, before anything loads."""
    if not model:
        return False
    try:
        return takes_images(AutoConfig.from_pretrained(model, local_files_only=True))
    except (OSError, ValueError):  # no config.json, not an HF config, a .gguf file, an alias
        return False


def sampling_params(args: argparse.Namespace, **overrides: Any) -> SamplingParams:
    if args.greedy_sampling:
        return SamplingParams(temperature=0.0, max_tokens=args.max_tokens, **overrides)
    return SamplingParams(temperature=1.0, top_k=10, top_p=0.9, max_tokens=args.max_tokens, **overrides)


def build_llm(model: str, args: argparse.Namespace) -> LLM:
    return LLM(model, max_num_seqs=args.max_seqs_in_batch, max_model_len=args.max_model_len,
               block_size=args.block_size, max_num_batched_tokens=args.max_num_batched_tokens,
               optimizations=args.optimizations, backend=args.backend)


# Prompts.

def audio_prompts(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The ``--audio`` files, or the bundled call: the whole clip, then each reference segment."""
    if args.audio:
        waves = [load_audio(path, SAMPLE_RATE) for path in args.audio]
    else:
        wave, rate, segments = speech_sample(SAMPLE_RATE)
        waves = [wave] + [wave[int(s.start * rate):int(s.end * rate)] for s in segments]
    return [{"prompt": "", "multi_modal_data": {"audio": (w, SAMPLE_RATE)}} for w in waves]


def text_prompts(llm: LLM, path: Path) -> list[Any]:
    prompts = json.loads(path.read_text())
    if not isinstance(prompts, list) or not prompts:
        raise SystemExit(f"{path}: expected a non-empty JSON list of prompts")
    tokenizer = llm.get_tokenizer()
    if tokenizer is not None and tokenizer.chat_template and not llm.llm_engine.is_encoder_decoder:
        return [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                              add_generation_prompt=True) if isinstance(p, str) else p
                for p in prompts]
    return prompts


def multi_modal_prompts(llm: LLM, images: dict[str, Path]) -> tuple[list[dict[str, Any]], list[str]]:
    """TT's sample requests, each photo with its question then the text-only question, and their labels."""
    tokenizer = llm.get_tokenizer()
    prompts, labels = [], []
    for name, question in IMAGE_QUESTIONS:
        with Image.open(images[name]) as f:
            image = f.convert("RGB")
        prompts.append({"prompt": vision_prompt(tokenizer, question, image=True), "multi_modal_data": {"image": image}})
        labels.append(f"{name} {question!r}")
    prompts.append({"prompt": vision_prompt(tokenizer, TEXT_QUESTION, image=False)})
    labels.append(f"text {TEXT_QUESTION!r}")
    return prompts, labels


def vision_prompt(tokenizer: PreTrainedTokenizerBase | None, question: str, image: bool) -> str:
    """The checkpoint's chat template around the image and ``question``; without a template, Mllama's raw
    prompt (the image token, then ``<|begin_of_text|>``)."""
    if tokenizer is None or not tokenizer.chat_template:
        return f"<|image|><|begin_of_text|>{question}" if image else question
    content = ([{"type": "image"}] if image else []) + [{"type": "text", "text": question}]
    return tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                         add_generation_prompt=True)


def is_whisper(llm: LLM) -> bool:
    return llm.llm_engine.checkpoint.config.model_type == "whisper"


# Reports.

def report(outputs: list[RequestOutput], seconds: float, show: int | None = None,
           labels: list[str] | None = None) -> dict[str, float]:
    """Print the outputs (under ``labels``, or their prompts) and TTFT, t/s/u and t/s; returns the figures."""
    for i, out in enumerate(outputs[:show]):
        prompt = out.prompt if out.encoder_prompt is None else out.encoder_prompt
        if labels:
            label = labels[i]
        else:
            label = "audio" if is_audio(out) else repr(_clip(prompt or str(out.prompt_token_ids)))
        for completion in out.outputs:
            print(f"[{out.request_id}] {label} -> {completion.text!r} ({completion.finish_reason})")
    ttft = [o.metrics.time_to_first_token for o in outputs]
    tpot = [(o.metrics.finished_time - o.metrics.first_token_time) / (len(c.token_ids) - 1)
            for o in outputs for c in o.outputs if len(c.token_ids) > 1]
    tokens = sum(len(c.token_ids) for o in outputs for c in o.outputs)
    figures = {"ttft_s": statistics.mean(ttft), "tok_s_user": 1 / statistics.mean(tpot) if tpot else 0.0,
               "tok_s": tokens / seconds, "tokens": tokens, "seconds": seconds,
               "preemptions": sum(o.metrics.num_preemptions for o in outputs)}
    print(f"{len(outputs)} requests, {tokens} tokens in {seconds:.2f} s | TTFT {figures['ttft_s'] * 1000:.0f} ms | "
          f"{figures['tok_s_user']:.2f} t/s/u | {figures['tok_s']:.2f} t/s | preemptions {figures['preemptions']}")
    return figures


def is_audio(out: RequestOutput) -> bool:
    return out.encoder_prompt is None and out.encoder_prompt_token_ids == []


def _clip(text: str, width: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def generate(llm: LLM, prompts: list[Any], params: SamplingParams, show: int | None = None,
             labels: list[str] | None = None) -> dict[str, float]:
    start = time.monotonic()
    outputs = llm.generate(prompts, params)
    return report(outputs, time.monotonic() - start, show, labels)


# Modes.

def run_prompts(llm: LLM, args: argparse.Namespace) -> None:
    prompts = audio_prompts(args) if is_whisper(llm) else text_prompts(llm, args.prompts_json)
    generate(llm, prompts * args.num_repeat_prompts, sampling_params(args))


def run_multi_modal(llm: LLM, args: argparse.Namespace, images: dict[str, Path]) -> None:
    prompts, labels = multi_modal_prompts(llm, images)
    repeat = args.num_repeat_prompts
    generate(llm, prompts * repeat, SamplingParams(temperature=0.0, max_tokens=args.max_tokens), labels=labels * repeat)


def measure_perf(llm: LLM, args: argparse.Namespace) -> None:
    """TT vLLM's --measure_perf: a full batch of all-zero prompts (Whisper: silence), ignore_eos."""
    batch = args.max_seqs_in_batch
    if is_whisper(llm):
        prompts = [{"prompt": "", "multi_modal_data": {"audio": ([0.0] * SAMPLE_RATE, SAMPLE_RATE)}}] * batch
    else:
        prompts = [{"prompt_token_ids": [0] * args.perf_prompt_len}] * batch
    params = sampling_params(args, ignore_eos=True)
    print("warmup run")
    generate(llm, prompts, params, show=0)
    runs = []
    for i in range(2):
        print(f"timed run {i + 1}")
        runs.append(generate(llm, prompts, params, show=0))
    print(f"average run time {statistics.mean(r['seconds'] for r in runs):.2f} s, "
          f"TTFT {statistics.mean(r['ttft_s'] for r in runs) * 1000:.0f} ms, "
          f"{statistics.mean(r['tok_s_user'] for r in runs):.2f} t/s/u, "
          f"{statistics.mean(r['tok_s'] for r in runs):.2f} t/s")


def doubling(limit: int, start: int = 8) -> list[int]:
    lengths = []
    n = start
    while n < limit:
        lengths.append(n)
        n *= 2
    return lengths + [limit]


def counting_tokens(llm: LLM, length: int) -> list[int]:
    """TT vLLM's counting prompt ("1 2 3 ..."), tokenized and cut to exactly ``length`` tokens."""
    tokenizer = llm.get_tokenizer()
    text = " ".join(str(i) for i in range(1, length + 1))
    ids = tokenizer(text, add_special_tokens=False).input_ids if tokenizer is not None else list(range(3, 3 + length))
    return (ids * (-(-length // len(ids))))[:length]


def test_increasing_seq_lens(llm: LLM, args: argparse.Namespace) -> None:
    """One request at a time: the decoder prompt up to ``max_model_len - max_tokens`` tokens and, for
    encoder-decoder models, the encoder input up to its limit (BART: tokens; Whisper: seconds of audio)."""
    engine = llm.llm_engine
    params = sampling_params(args, ignore_eos=True)
    cases: list[tuple[str, Any]] = []
    decoder_limit = engine.config.max_model_len - args.max_tokens
    if decoder_limit < 1:
        raise SystemExit(f"--max_tokens {args.max_tokens} leaves no room for a prompt in max_model_len "
                         f"{engine.config.max_model_len}")
    if is_whisper(llm):
        wave, rate, _ = speech_sample(SAMPLE_RATE)
        limit_s = engine.processor.feature_extractor.chunk_length
        for seconds in doubling(limit_s, start=1):
            audio = wave[: seconds * rate] if seconds * rate <= len(wave) else [0.0] * (seconds * rate)
            cases.append((f"audio {seconds:>4} s", {"prompt": "", "multi_modal_data": {"audio": (audio, rate)}}))
        sot = engine.processor.decoder_start_token_id
        for n in doubling(decoder_limit - 1):
            cases.append((f"decoder prompt {n + 1:>5} tokens", {"prompt_token_ids": [sot] + counting_tokens(llm, n),
                                                                "multi_modal_data": {"audio": (wave, rate)}}))
    elif engine.is_encoder_decoder:
        for n in doubling(engine.processor.max_encoder_len):
            cases.append((f"encoder prompt {n:>5} tokens", {"prompt_token_ids": counting_tokens(llm, n)}))
        start = engine.processor.decoder_start_token_id  # starts every decoder prompt
        for n in doubling(decoder_limit):
            cases.append((f"decoder prompt {n:>5} tokens", {
                "encoder_prompt": {"prompt_token_ids": counting_tokens(llm, 16)},
                "decoder_prompt": {"prompt_token_ids": [start] + counting_tokens(llm, n - 1)}}))
    else:
        for n in doubling(decoder_limit):
            cases.append((f"prompt {n:>5} tokens", {"prompt_token_ids": counting_tokens(llm, n)}))
    for label, prompt in cases:
        start = time.monotonic()
        (out,) = llm.generate([prompt], params, use_tqdm=False)
        seconds = time.monotonic() - start
        completion = out.outputs[0]
        print(f"{label}: {len(completion.token_ids)} tokens ({completion.finish_reason}) in {seconds:.2f} s, "
              f"TTFT {out.metrics.time_to_first_token * 1000:.0f} ms, {_clip(completion.text)!r}")
    print(f"test_increasing_seq_lens: {len(cases)} lengths completed")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.multi_modal:
        try:
            images = sample_image_paths()
        except (ModuleNotFoundError, FileNotFoundError) as e:
            raise SystemExit(f"--multi_modal: {e}") from None
    for model in [args.model] if args.model else DEFAULT_MODELS:
        print(f"=== {model} ({args.optimizations or 'default precision'}) ===")
        with build_llm(model, args) as llm:
            if args.multi_modal:
                run_multi_modal(llm, args, images)
            elif args.test_increasing_seq_lens:
                test_increasing_seq_lens(llm, args)
            elif args.measure_perf:
                measure_perf(llm, args)
            else:
                run_prompts(llm, args)


if __name__ == "__main__":
    main()
