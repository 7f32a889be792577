"""Tensor parallelism on host meshes: every family split over 2, 4 and 8 chips against HF and against one chip.

Tiny random configs wide enough to split (hidden 256 = 8 chips x one tile), "accuracy" profile, host backend. Each
case is driven as TT vLLM drives a generator, with the per-chip KV shape the plugin passes
(``kv_heads // min(chips, kv_heads)``), and checked two ways:

- teacher-forced along HF's greedy continuation, every prefill and decode step's logits have PCC >= 0.99 with HF's;
- free-running greedy tokens equal the same model's on one chip up to a near-tie (``tests/closeness.py``: each side's
  token in the other's top 5 at the first difference, one chip's margin there within the noise of the two runs'
  logits): a split sums in another order than one chip, so the logits are not bit-identical.

GQA is covered with more KV heads than chips, as many, and fewer (KV heads replicated, and query groups padded with
zero heads where they do not split: 14 query heads over 2 KV heads on 4 chips).
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, GenerationMixin, LlamaConfig, Qwen2Config, Qwen3Config

from tests.closeness import rows_agree
from tests.models import test_mllama_contract as mllama_contract
from tests.models.vllm_driver import Request, VllmDriver, greedy_rows, teacher_forced_pcc
from tt_models.models.gemma3.generator import Gemma3ForConditionalGeneration
from tt_models.models.llama.generator import LlamaForCausalLM
from tt_models.models.mllama.generator import MllamaForConditionalGeneration
from tt_models.models.qwen2_5_vl.generator import Qwen2_5_VLForConditionalGeneration
from tt_models.runtime import close_device, open_device
from tt_models.testing import gemma3, llama, qwen2_5_vl, seq2seq
from tt_models.testing.images import random_image
from tt_models.testing.mllama import tiny_mllama

MAX_BATCH, BLOCK, NUM_BLOCKS, MAX_LEN = 4, 32, 32, 64
NEW_TOKENS = 10

pytestmark = pytest.mark.numerics


def _decoder(config_class, heads: int, kv_heads: int, hidden: int = 256):
    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        config = config_class(hidden_size=hidden, intermediate_size=512, num_hidden_layers=2, num_attention_heads=heads,
                              num_key_value_heads=kv_heads, head_dim=32, vocab_size=330,
                              max_position_embeddings=256)
        config._attn_implementation = "eager"
        model = AutoModelForCausalLM.from_config(config).eval()
        llama.perturb(model)
        return model
    return build


# case -> (HF model builder, chips)
DECODERS = {
    "llama kv 4 > chips 2": (_decoder(LlamaConfig, 8, 4), 2),
    "qwen2 bias kv 4 = chips 4": (_decoder(Qwen2Config, 8, 4), 4),
    "llama kv 2 < chips 8": (_decoder(LlamaConfig, 8, 2), 8),
    "llama 14 heads kv 2 < chips 4 padded": (_decoder(LlamaConfig, 14, 2, hidden=896), 4),
    "qwen3 q/k norms kv 2 = chips 2": (_decoder(Qwen3Config, 8, 2), 2),
    "qwen3 q/k norms kv 2 < chips 4": (_decoder(Qwen3Config, 8, 2), 4),
    # Hidden sizes that do not split into whole tiles per chip, zero-padded (tt_models.tt.hidden_padding): 160 (5
    # tiles) to 256 over 4 chips, 96 (3 tiles) to 256 over 8 (Qwen3's per-head Q/K norms keep their epsilon).
    "llama hidden 160 padded to 256 over chips 4": (_decoder(LlamaConfig, 8, 2, hidden=160), 4),
    "qwen3 hidden 96 padded to 256 over chips 8": (_decoder(Qwen3Config, 8, 2, hidden=96), 8),
}
SEQ2SEQ = {"whisper-multilingual-tp": 2, "bart-tp": 4, "mbart-tp": 8}  # case -> chips


def _generator(case_class, hf, mesh):
    model = case_class.from_state_dict(hf.config, hf.state_dict(), mesh, MAX_BATCH, max_seq_len=MAX_LEN,
                                       optimizations="accuracy")
    heads, head_dim = model.models[0].kv_geometry
    n_kv = getattr(hf.config, "num_key_value_heads", None) or hf.config.decoder_attention_heads
    chips = mesh.get_num_devices()
    assert heads == n_kv // min(chips, n_kv)  # the plugin's per-chip KV heads
    kv = model.allocate_kv_cache((NUM_BLOCKS, heads, BLOCK, head_dim), torch.bfloat16, model.models[0].n_layers)
    return model, kv


def _decoder_items(hf):
    g = torch.Generator().manual_seed(3)
    items = []
    for length in (20, 37, 9):
        prompt = torch.randint(3, hf.config.vocab_size, (length,), generator=g)
        with torch.no_grad():
            sequence = hf.generate(prompt[None], max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                   do_sample=False, eos_token_id=None, pad_token_id=0)[0]
            logits = hf(sequence[None]).logits[0]
        items.append((None, 0, prompt, sequence, logits))
    return items


def _seq2seq_items(hf):
    g = torch.Generator().manual_seed(5)
    items = []
    for i, (enc_len, dec_len) in enumerate(zip((45, 100, 17), (2, 5, 3))):
        ours, hf_inputs, encoder_len = seq2seq.encoder_input(hf, enc_len, seed=10 + i)
        prompt = torch.randint(3, 300, (dec_len,), generator=g)
        start = hf.generation_config.decoder_start_token_id
        prompt[0] = hf.config.bos_token_id if start is None else start  # as HF generate starts MBart's decoder
        with torch.no_grad():
            # GenerationMixin.generate: plain greedy (Whisper's own generate adds its timestamp and language logic)
            sequence = GenerationMixin.generate(hf, **hf_inputs, decoder_input_ids=prompt[None],
                                                max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                                                eos_token_id=None, pad_token_id=0, forced_eos_token_id=None,
                                                begin_suppress_tokens=None, suppress_tokens=None)[0]
            logits = hf(**hf_inputs, decoder_input_ids=sequence[None]).logits[0]
        items.append((ours, encoder_len, prompt, sequence, logits))
    return items


def _driver(model, kv, cross: bool):
    return VllmDriver(model, kv, max_batch_size=MAX_BATCH, num_blocks=NUM_BLOCKS, block_size=BLOCK,
                      width=MAX_LEN // BLOCK, cross_width=4 if cross else 0)


def _requests(items):
    return [Request(tokens=prompt.tolist(), prompt_len=len(prompt), encoder_input=encoder_input,
                    encoder_len=encoder_len) for encoder_input, encoder_len, prompt, _, _ in items]


def _teacher_forced_pcc(driver, requests, sequences, logits):
    """PCC with HF's logits of every step of three requests fed their HF continuations (one joining late)."""
    return teacher_forced_pcc(driver, requests, sequences, logits, slots=(1, 3, 0), join_after=4,
                              new_tokens=NEW_TOKENS, delivery="decode")[0]


def _greedy(driver, requests):
    """Free-running greedy tokens of two requests and each step's logits."""
    steps = greedy_rows(driver, requests, (3, 0), NEW_TOKENS)
    return [r.tokens[r.prompt_len:] for r in requests], steps


def _check_split(chips, build, driver, requests, items):
    """Teacher-forced PCC on ``chips`` chips, and greedy tokens there against one chip's: ``build(mesh)`` makes
    (model, kv), ``driver(model, kv)`` and ``requests(model)`` drive it."""
    greedy = {}
    for mesh_chips in (1, chips):
        mesh = open_device("host", mesh_shape=(1, mesh_chips))
        try:
            if mesh_chips > 1:
                model, kv = build(mesh)
                scores = _teacher_forced_pcc(driver(model, kv), requests(model), [item[-2] for item in items],
                                             [item[-1] for item in items])
            model, kv = build(mesh)
            greedy[mesh_chips] = _greedy(driver(model, kv), requests(model)[:2])
        finally:
            close_device(mesh)
    print(f"\n{chips} chips: {len(scores)} steps, min PCC {min(scores):.5f}")
    assert len(scores) == 3 * (NEW_TOKENS + 1) and min(scores) >= 0.99
    (ours, our_rows), (single, single_rows) = greedy[chips], greedy[1]
    identical = sum(rows_agree(a, b, ra, rb) for a, b, ra, rb in zip(ours, single, our_rows, single_rows))
    print(f"greedy tokens identical to one chip: {identical} of {2 * NEW_TOKENS}")


@pytest.mark.parametrize("case", list(DECODERS))
def test_decoder_only_split_over_chips_matches_hf_and_one_chip(case):
    make, chips = DECODERS[case]
    hf = make()
    items = _decoder_items(hf)
    _check_split(chips, lambda mesh: _generator(LlamaForCausalLM, hf, mesh),
                 lambda model, kv: _driver(model, kv, cross=False), lambda model: _requests(items), items)


@pytest.mark.parametrize("case", list(SEQ2SEQ))
def test_encoder_decoder_split_over_chips_matches_hf_and_one_chip(case):
    hf = seq2seq.tiny_seq2seq(case)
    items = _seq2seq_items(hf)
    _check_split(SEQ2SEQ[case], lambda mesh: _generator(seq2seq.TP_CASES[case][2], hf, mesh),
                 lambda model, kv: _driver(model, kv, cross=True), lambda model: _requests(items), items)


# case -> (tiny_mllama config, chips)
MLLAMA = {"tiny over 2 chips (n300)": ("tiny", 2), "tp over 2 chips": ("tp", 2), "tp over 4 chips": ("tp", 4),
          "tp over 8 chips (T3K)": ("tp", 8)}


@pytest.mark.parametrize("case", list(MLLAMA))
def test_mllama_text_and_vision_split_over_chips_match_hf_and_one_chip(case):
    """Llama 3.2 Vision as 11B Vision runs on an n300 (TP=2) and 90B on a T3K: vision tower, projector, text layers
    and gated cross-attention split over the chips; an image row, a text-only row and a late-joining image request.
    "tp" (hidden 256, 8 heads, 2 KV heads: fewer than 4 or 8 chips) splits over 8 chips; its init keeps activations
    where bf16 is not the limit (``tt_models.testing.mllama.SCALAR_GATES_ONLY``)."""
    name, chips = MLLAMA[case]
    hf = tiny_mllama(name=name)
    items = mllama_contract.mllama_items(hf)
    _check_split(chips, lambda mesh: _image_text(MllamaForConditionalGeneration, hf, mesh),
                 mllama_contract._driver, lambda model: mllama_contract._requests(model, items), items)


def _image_text(generator_class, hf, mesh):
    """An image+text generator over ``mesh`` and its KV cache in the plugin's per-chip shape."""
    model = generator_class.from_state_dict(hf.config, hf.state_dict(), mesh, MAX_BATCH, max_seq_len=MAX_LEN,
                                            optimizations="accuracy")
    heads, head_dim = model.models[0].kv_geometry
    n_kv = hf.config.text_config.num_key_value_heads
    assert heads == n_kv // min(mesh.get_num_devices(), n_kv)
    return model, model.allocate_kv_cache((NUM_BLOCKS, heads, BLOCK, head_dim), torch.bfloat16,
                                          model.models[0].n_layers)


def _gemma3_rows(g):
    """One image, text only, two images (the sliding window of 32 is live in each: prompts of 42 to 45 tokens)."""
    images = gemma3.processed([random_image(w, h, seed=i) for i, (w, h) in enumerate([(80, 50), (40, 60),
                                                                                              (64, 64)])])

    def text(n):
        return torch.randint(3, 490, (n,), generator=g).tolist()

    return [(gemma3.prompt([text(10), text(14)], 1), images[:1], None), (text(40), [], None),
            (gemma3.prompt([text(2), text(3), text(4)], 2), images[1:], None)]


def _qwen2_5_vl_rows(g):
    """One image (8 x 14 patches, window attention live), text only, two images (12 x 4 and 4 x 4 patches)."""
    pixel_values, grids = qwen2_5_vl.processed([random_image(w, h, seed=i)
                                                for i, (w, h) in enumerate([(200, 120), (60, 180), (56, 56)])])

    def text(n):
        return torch.randint(3, 490, (n,), generator=g).tolist()

    return [(qwen2_5_vl.prompt([text(5), text(7)], grids[:1]), pixel_values[:1], grids[:1]), (text(23), [], None),
            (qwen2_5_vl.prompt([text(3), text(4), text(6)], grids[1:]), pixel_values[1:], grids[1:])]


def _capped(hf, logits):
    """Gemma 3's soft-capped logits (HF's Gemma3ForConditionalGeneration leaves the cap out; it is monotonic, so HF's
    greedy tokens stand)."""
    cap = hf.config.text_config.final_logit_softcapping
    return cap * torch.tanh(logits / cap)


# family -> (HF model of vision overrides, generator class, its prompt rows, HF inputs, reference logits)
IMAGE_TEXT_FAMILIES = {
    "gemma3": (gemma3.tiny_gemma3, Gemma3ForConditionalGeneration, _gemma3_rows,
               lambda tokens, pixel_values, grids: gemma3.hf_inputs(tokens, pixel_values), _capped),
    "qwen2.5-vl": (qwen2_5_vl.tiny_qwen2_5_vl, Qwen2_5_VLForConditionalGeneration, _qwen2_5_vl_rows,
                   qwen2_5_vl.hf_inputs, lambda hf, logits: logits),
}
# Vision towers of 128 (4 heads of 32) split over 4 chips into whole tiles, the tiny ones' 64 over 2 only; their MLPs
# of 160 into 40 columns a chip (not whole tiles: as real towers' 4304 and 3420 split).
WIDE_VISION = {"gemma3": dict(hidden_size=128, num_attention_heads=4, intermediate_size=160),
               "qwen2.5-vl": dict(hidden_size=128, num_heads=4, intermediate_size=160)}
# case -> (family, chips)
IMAGE_TEXT = {"gemma3 over 2 chips (n300)": ("gemma3", 2), "gemma3 over 4 chips": ("gemma3", 4),
              "qwen2.5-vl over 2 chips (n300)": ("qwen2.5-vl", 2), "qwen2.5-vl over 4 chips": ("qwen2.5-vl", 4)}


@pytest.mark.parametrize("case", list(IMAGE_TEXT))
def test_gemma3_and_qwen2_5_vl_split_over_chips_match_hf_and_one_chip(case):
    """Decoder-only image+text models split over the chips: vision tower heads and MLP, text Q/KV heads (2 KV heads:
    replicated over 4 chips), MLP and vocabulary; Gemma 3's sliding and global layers, Qwen2.5-VL's M-RoPE (rope
    deltas through decode). An image row, a text-only row and a late-joining two-image request."""
    family, chips = IMAGE_TEXT[case]
    make, generator_class, rows, inputs, reference = IMAGE_TEXT_FAMILIES[family]
    hf = make(**(WIDE_VISION[family] if chips > 2 else {}))
    items = []
    with torch.no_grad():
        for tokens, pixel_values, grids in rows(torch.Generator().manual_seed(3)):
            sequence = hf.generate(**inputs(tokens, pixel_values, grids), max_new_tokens=NEW_TOKENS,
                                   min_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0)[0]
            logits = reference(hf, hf(**inputs(sequence.tolist(), pixel_values, grids)).logits[0])
            items.append((tokens, pixel_values, grids, sequence, logits))

    def driver(model, kv):
        return VllmDriver(model, kv, max_batch_size=MAX_BATCH, num_blocks=NUM_BLOCKS, block_size=BLOCK,
                          width=MAX_LEN // BLOCK, mrope=family == "qwen2.5-vl", pixel_values=True)

    def requests(model):
        return [Request(tokens=list(tokens), prompt_len=len(tokens), pixel_values=pixel_values or None, grids=grids)
                for tokens, pixel_values, grids, _, _ in items]

    _check_split(chips, lambda mesh: _image_text(generator_class, hf, mesh), driver, requests, items)


# Meshes a model cannot split over are refused when it is built, with the numbers that do not divide.

@pytest.fixture
def host_mesh():
    """``host_mesh(chips)``: a 1 x ``chips`` host mesh, closed after the test."""
    meshes = []

    def open_mesh(chips: int):
        meshes.append(open_device("host", mesh_shape=(1, chips)))
        return meshes[-1]

    yield open_mesh
    for mesh in meshes:
        close_device(mesh)


def _build(hf, mesh):
    return LlamaForCausalLM.from_state_dict(hf.config, hf.state_dict(), mesh, MAX_BATCH, max_seq_len=MAX_LEN)


def test_kv_heads_that_cannot_split_over_the_mesh_are_refused(host_mesh):
    with pytest.raises(ValueError, match=r"^4 KV heads cannot split over 3 chips: one count must divide the other "
                                         r"\(a mesh of 1, 2, 4, 8, 16, 32 chips can\)$"):
        _build(_decoder(LlamaConfig, 8, 4)(), host_mesh(3))


def test_a_vision_tower_whose_width_is_not_whole_tiles_on_each_chip_is_refused(host_mesh):
    """The tiny Gemma 3's text (hidden 128) splits over 4 chips, its SigLIP tower (64) would leave each 16 columns."""
    hf = gemma3.tiny_gemma3()
    with pytest.raises(ValueError, match=r"^vision_hidden_size 64 cannot split over 4 chips into whole 32-wide tiles "
                                         r"\(each needs a multiple of 128\)$"):
        Gemma3ForConditionalGeneration.from_state_dict(hf.config, hf.state_dict(), host_mesh(4), MAX_BATCH)


def test_allocate_kv_cache_refuses_all_kv_heads_on_a_tensor_parallel_mesh(host_mesh):
    """TT vLLM passes one chip's KV heads (4 over 2 chips: 2); the model's whole 4 would not be each chip's pool."""
    model = _build(_decoder(LlamaConfig, 8, 4)(), host_mesh(2))
    with pytest.raises(ValueError, match=r"^KV cache shape \(32, 4, 32, 32\): each of the replica's 2 chips holds 2 "
                                         r"KV heads of head_dim 32, so the shape must be \(blocks, 2, block_size, "
                                         r"32\)$"):
        model.allocate_kv_cache((NUM_BLOCKS, 4, BLOCK, 32), torch.bfloat16, 2)
