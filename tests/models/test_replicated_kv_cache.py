"""A replica on a multi-chip mesh keeps all its KV heads whatever KV shape TT vLLM asks for (host backend).

TT vLLM sizes the KV cache for tensor parallelism (``kv_heads // chips``: research/contract.md, KV cache), as
tt_transformers' models shard their KV heads over the chips; tt-models' replicas hold the whole model on every
chip, so ``allocate_kv_cache`` keeps only ``num_blocks`` and ``block_size`` from that shape.
"""

import torch
from transformers import AutoConfig

from tests.models.hf_reference import pcc, tiny_model
from tests.models.vllm_driver import Request, VllmDriver
from tt_models.models.llama.generator import LlamaForCausalLM
from tt_models.runtime import close_device, open_device

MAX_BATCH, BLOCK, NUM_BLOCKS, MAX_LEN = 4, 32, 16, 128
PROMPT_LENS = (20, 37)
DECODE_STEPS = 3


def test_tensor_parallel_kv_shape_on_a_1x2_mesh_keeps_all_kv_heads(tmp_path):
    hf = tiny_model("llama-gqa")
    hf.save_pretrained(tmp_path)
    g = torch.Generator().manual_seed(4)
    prompts = [torch.randint(3, hf.config.vocab_size, (n,), generator=g).tolist() for n in PROMPT_LENS]
    mesh = open_device("host", mesh_shape=(1, 2))
    try:
        model = LlamaForCausalLM.initialize_vllm_model(AutoConfig.from_pretrained(tmp_path), mesh, MAX_BATCH,
                                                       max_seq_len=MAX_LEN, tt_data_parallel=1,
                                                       optimizations="accuracy")
        args = model.models[0].args
        assert args.n_kv_heads == 2 and mesh.get_num_devices() == 2
        tp_shape = (NUM_BLOCKS, args.n_kv_heads // 2, BLOCK, args.head_dim)  # what the plugin passes on N300
        kv = model.allocate_kv_cache(tp_shape, torch.bfloat16, args.n_layers)
        assert len(kv) == 1 and len(kv[0]) == args.n_layers
        assert {tuple(t.shape) for layer in kv[0] for t in layer} == {(NUM_BLOCKS, 2, BLOCK, args.head_dim)}

        driver = VllmDriver(model, kv, max_batch_size=MAX_BATCH, num_blocks=NUM_BLOCKS, block_size=BLOCK,
                            width=MAX_LEN // BLOCK)
        requests = [Request(tokens=list(p), prompt_len=len(p)) for p in prompts]
        for slot, r in enumerate(requests):
            driver.add(r, slot=slot)
        steps = [list(driver.prefill(requests))]
        for _ in range(DECODE_STEPS):
            for r, logits in zip(requests, steps[-1]):
                r.tokens.append(int(logits.argmax()))
            out = driver.decode()
            steps.append([out[r.slot] for r in requests])
    finally:
        close_device(mesh)

    # Teacher-forced along our own greedy tokens: every step's logits close to HF's at that position.
    with torch.no_grad():
        hf_logits = [hf(torch.tensor([r.tokens])).logits[0] for r in requests]
    scores = [pcc(step[i], hf_logits[i][len(prompts[i]) - 1 + k])
              for k, step in enumerate(steps) for i in range(len(requests))]
    assert min(scores) >= 0.99, scores
