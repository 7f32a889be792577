"""Qwen3-MoE (``Qwen3MoeForCausalLM``: routed experts, :mod:`tt_models.tt.moe`) driven as TT vLLM drives it, on the
host backend against HF's float32 model: the shared routed-expert tests of :mod:`tests.models.moe_cases` (every
teacher-forced step's PCC, below 0.99 only at a few routing near-ties, every expert routed, free-running greedy tokens,
experts over 2 and 4 chips, per-chip bytes, traced decode), on a model renormalizing its top-k weights and one keeping
the softmax's. The performance profile (bfloat4_b experts, which dominate these tiny models' logits) is held to a
median PCC >= 0.9.
"""

from tests.models import moe_cases as shared
from tt_models.models.llama.generator import Qwen3MoeForCausalLM

FAMILY = shared.MoeFamily(generator=Qwen3MoeForCausalLM, configs=("qwen3-moe", "qwen3-moe-unnormalized"),
                          tp_config="qwen3-moe-tp", performance_median=0.9)
# The shared fixtures, and tests (in the order they run), collected here for FAMILY.
family = shared.family_fixture(FAMILY)
model_case = shared.model_case_fixture(FAMILY)
test_every_expert_is_routed = shared.test_every_expert_is_routed
test_teacher_forced_steps_match_hf = shared.test_teacher_forced_steps_match_hf
test_free_running_greedy_agrees_with_hf_generate = shared.test_free_running_greedy_agrees_with_hf_generate
test_experts_per_chip_are_one_nth = shared.test_experts_per_chip_are_one_nth
test_experts_over_chips_give_the_one_chip_tokens = shared.test_experts_over_chips_give_the_one_chip_tokens
test_traced_decode_equals_eager = shared.test_traced_decode_equals_eager
