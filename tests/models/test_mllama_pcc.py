"""Llama 3.2 Vision (Mllama) against HF transformers on a tiny random config with every gate non-zero (host
backend): the vision encoder's output, the projected vision tokens, the cross K/V read back from the paged cache,
every decoder layer and the logits, PCC >= 0.99 in both profiles, for images of 1, 3 and 4 tiles (narrower and
wider than a tile, landscape and portrait). HF runs in float32 with the processor's cross-attention mask."""

import pytest
import torch
from transformers.models.mllama.processing_mllama import (convert_sparse_cross_attention_mask_to_dense,
                                                          get_cross_attention_token_mask)

from tests.closeness import pcc
from tt_models.models.mllama.generator import MllamaForConditionalGeneration
from tt_models.models.mllama.images import preprocess
from tt_models.models.mllama.vision import hf_projector_columns
from tt_models.runtime import host, use
from tt_models.testing.images import random_image
from tt_models.testing.mllama import IMAGE_TOKEN, image_processor, tiny_mllama
from tt_models.tt.paged_inputs import PrefillChunk

THRESHOLD = 0.99
BLOCK, NUM_BLOCKS = 32, 16
# (width, height) -> tiles: 1 (smaller than a tile), 3 landscape, 3 portrait, 4 (2x2)
IMAGES = [(40, 30), (120, 50), (50, 120), (200, 200)]


@pytest.fixture(scope="module")
def hf():
    return tiny_mllama()


def hf_inputs(hf, prompt, image):
    inputs = image_processor(hf)(images=[[image]], return_tensors="pt")
    sparse = [get_cross_attention_token_mask(prompt, IMAGE_TOKEN)]
    dense = convert_sparse_cross_attention_mask_to_dense(sparse, inputs["num_tiles"], hf.config.vision_config.max_num_tiles,
                                                         len(prompt))
    return dict(input_ids=torch.tensor([prompt]), pixel_values=inputs["pixel_values"],
                aspect_ratio_ids=inputs["aspect_ratio_ids"], aspect_ratio_mask=inputs["aspect_ratio_mask"],
                cross_attention_mask=torch.tensor(dense))


def _cache_rows(cache, blocks, length):
    values = host.to_torch(cache).float()[blocks]  # [n, heads, bs, d]
    return values.permute(1, 0, 2, 3).reshape(values.shape[1], -1, values.shape[3])[:, :length]


@pytest.mark.parametrize("profile", ["accuracy", "performance"])
@pytest.mark.parametrize("size", IMAGES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_vision_cross_kv_layers_and_logits_match_hf(host_device, hf, size, profile):
    image = random_image(*size, seed=sum(size))
    # Text before the image token (rows HF fully masks) and after it.
    prompt = [1, 7, 9, IMAGE_TOKEN] + torch.randint(3, 300, (40,), generator=torch.Generator().manual_seed(3)).tolist()
    inputs = hf_inputs(hf, prompt, image)
    with torch.no_grad():
        vision_ref = hf.model.vision_model(inputs["pixel_values"], inputs["aspect_ratio_ids"],
                                           inputs["aspect_ratio_mask"]).last_hidden_state
        tokens_ref = hf.model.multi_modal_projector(vision_ref).reshape(-1, hf.config.text_config.hidden_size)
        out = hf(**inputs, output_hidden_states=True)

    model = MllamaForConditionalGeneration.from_state_dict(hf.config, hf.state_dict(), host_device, 4,
                                                           max_seq_len=128, optimizations=profile)
    replica = model.models[0]
    text_args = replica.text.args
    kv = model.allocate_kv_cache((NUM_BLOCKS, text_args.n_kv_heads, BLOCK, text_args.head_dim), torch.bfloat16,
                                 replica.n_layers)[0]
    length = model.max_cross_attn_tokens
    cross_blocks = torch.tensor([9, 2, 14], dtype=torch.int32)
    self_blocks = torch.tensor([5, 11], dtype=torch.int32)
    image_input = preprocess(model.image_processor, image)
    assert image_input.num_tiles == int(inputs["aspect_ratio_mask"].sum())
    with use(host_device):
        vision = replica.vision.forward(image_input.pixel_values, image_input.aspect_ratio_id, image_input.num_tiles)
        vision_tokens = replica.vision_tokens(image_input)
        replica.text.fill_cross(vision_tokens, cross_blocks, kv)
        _, masks, _ = model.prefill_forward(tokens=torch.tensor([prompt]), images=[[image]], page_table=self_blocks[None],
                                            kv_cache=[kv], prompt_lens=[len(prompt)], cross_page_table=cross_blocks[None])
        chunk = PrefillChunk.of(self_blocks, 0, len(prompt), BLOCK)
        states = [host.to_torch(x)[0, 0, :len(prompt)].float() for x in
                  replica.text.prefill_layers(torch.tensor(prompt), chunk, cross_blocks, masks[0], kv)]
        logits = replica.text.prefill(torch.tensor(prompt), 0, len(prompt), self_blocks, cross_blocks, masks[0], kv)

    vision_ref = vision_ref.reshape(-1, vision_ref.shape[-1])[:, hf_projector_columns(replica.vision_args)]
    scores = {"vision": pcc(host.to_torch(vision)[0, 0].float(), vision_ref),
              "vision tokens": pcc(host.to_torch(vision_tokens)[0, 0].float(), tokens_ref)}
    heads, head_dim = text_args.n_kv_heads, text_args.head_dim
    for i, layer in enumerate(hf.model.language_model.layers):
        if i in hf.config.text_config.cross_attention_layers:
            with torch.no_grad():
                k_ref = layer.cross_attn.k_norm(layer.cross_attn.k_proj(tokens_ref).reshape(length, heads, head_dim))
                v_ref = layer.cross_attn.v_proj(tokens_ref).reshape(length, heads, head_dim)
            scores[f"cross K {i}"] = pcc(_cache_rows(kv[i][0], cross_blocks, length), k_ref.transpose(0, 1))
            scores[f"cross V {i}"] = pcc(_cache_rows(kv[i][1], cross_blocks, length), v_ref.transpose(0, 1))
        ours = states[i + 1]
        if i == len(hf.model.language_model.layers) - 1:  # HF's last hidden state is after the final norm
            with torch.no_grad():
                ours = hf.model.language_model.norm(ours)
        scores[f"layer {i}"] = pcc(ours, out.hidden_states[i + 1][0])
    scores["logits"] = pcc(logits, out.logits[0, -1])
    print(f"\n{size} {image_input.num_tiles} tiles {profile}: " + ", ".join(f"{k} {v:.5f}" for k, v in scores.items()))
    assert min(scores.values()) >= THRESHOLD, scores
