"""The reduced-ISA setting scripts/test.sh runs the numerics-sensitive tests under really changes torch's kernels on
a CPU with AVX-512 (and is what an AVX2-only CPU runs anyway): ATen's softmax over a wide row and its attention give
other bits under it (so does oneDNN's bfloat16 matmul on the development machine, an AMD EPYC with AVX-512 BF16;
MKL's float32 matmul there gives the same bits under every MKL_ENABLE_INSTRUCTIONS: MKL takes one path on AMD)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[1] / "scripts" / "test.sh"
PROBE = """
import hashlib, torch
torch.manual_seed(0)
x, q = torch.randn(32, 49152), torch.randn(1, 6, 40, 64)
a, b = torch.randn(37, 576), torch.randn(576, 1536)
outputs = {"softmax": x.softmax(-1), "sdpa": torch.nn.functional.scaled_dot_product_attention(q, q * 0.5, q),
           "bf16_matmul": (a.bfloat16() @ b.bfloat16()).float()}
print(torch.backends.cpu.get_cpu_capability())
for name, value in outputs.items():
    print(name, hashlib.sha256(value.numpy().tobytes()).hexdigest())
"""


def reduced_isa() -> dict[str, str]:
    """The settings scripts/test.sh gives the second run of the numerics-sensitive tests."""
    line = re.search(r"^REDUCED_ISA=\((.*)\)$", SCRIPT.read_text(), re.M).group(1)
    return dict(item.split("=", 1) for item in line.split())


def _probe(extra: dict[str, str]) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in reduced_isa()} | {"OMP_NUM_THREADS": "1"} | extra
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                          check=True).stdout.split("\n")


def test_reduced_isa_selects_avx2_kernels_that_round_otherwise():
    default, reduced = _probe({}), _probe(reduced_isa())
    changed = [d.split()[0] for d, r in zip(default[1:4], reduced[1:4]) if d != r]
    print(f"\ndefault {default[0]}, reduced {reduced[0]}: other bits from {changed}")
    assert reduced[0] == "AVX2"
    if default[0] == "AVX512":  # the CPU has AVX-512: ATen's own kernels must round otherwise
        assert {"softmax", "sdpa"} <= set(changed), (default, reduced)
    else:  # an AVX2-only CPU runs those kernels either way
        assert default == reduced
