"""The engine with data-parallel replicas on the mock n300 (a 1x2 mesh, one replica per chip): the real ttnn
validates every call of both replicas.

``python -m tests.engine.engine_on_mock CHECKPOINT_DIR`` (one mock board per process). Prints one ``ok`` line with
each replica's request count and free blocks.
"""

import sys

import torch

from tt_models.checkpoints import load_hf_checkpoint
from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.engine.sampling import SamplingParams


def main(checkpoint_dir: str) -> None:
    engine = LLMEngine(load_hf_checkpoint(checkpoint_dir),
                       EngineConfig(max_num_seqs=4, block_size=32, max_model_len=96, num_kv_blocks=8,
                                    data_parallel_size=2), backend="mock", mesh_shape=(1, 2))
    g = torch.Generator().manual_seed(0)
    per_replica = [0, 0]
    for i, length in enumerate((5, 40, 17, 33)):
        request = engine.add_request(str(i), {"prompt_token_ids": torch.randint(3, 300, (length,), generator=g).tolist()},
                                     SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))
        per_replica[request.replica] += 1
    finished = 0
    while engine.has_unfinished_requests():
        finished += sum(o.finished for o in engine.step())
    free = [kv.num_free_blocks for kv in engine.scheduler.kvs]
    engine.close()
    print(f"ok requests={per_replica} finished={finished} free={free}")


if __name__ == "__main__":
    main(sys.argv[1])
