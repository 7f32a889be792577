"""How the suite compares greedy generations whose logits come from different summation orders: ours against HF's
float32 model, a model split over chips against one chip, any of them on another CPU's kernels (torch picks its
kernels by CPU: AVX2 and AVX-512 ATen and oneDNN paths round differently, see docs/testing.md).

Bit-identity holds only where both sides run the same operations in the same order; across summation orders, two
correct runs part at a near-tie, and where that comes depends on the CPU. So the rule is vLLM's logprobs-closeness
rule (identical up to the first difference, where each side's token is among the other's top 5) with the
reference's margin there bounded: a correct model parts from the reference only where the reference's margin
between the two tokens is within the noise of the comparison. No count of identical tokens measured on one machine
is asserted.

The noise is the root mean square of the two sides' logit differences over the vocabulary at that step (where the
prefixes are still the same): a flip needs the two tokens' errors to add up to the margin. The leading tokens'
logits are the largest, and so are their rounding errors in block-float weights: the largest margin seen at a first
difference was 4.2 times that root mean square (real Whisper, bfloat8_b), the others below 1.3; ``NOISE_SIGMAS``
leaves room above that and still refuses a flip where the reference was sure. Where only top-5 logprobs are at hand
(the engine's outputs), the bound is ``NEAR_TIE``, for tiny random models whose logits the precision profiles move
by hundredths (margins of 0.0004 to 0.053 seen there).

Tensors (logits, activations) against HF's are compared by their Pearson correlation, :func:`pcc`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch

NOISE_SIGMAS = 6.0
NEAR_TIE = 0.1


def pcc(a: torch.Tensor, b: torch.Tensor) -> float:
    """Pearson correlation of two tensors' values (fp64)."""
    a, b = a.flatten().double(), b.flatten().double()
    return torch.corrcoef(torch.stack([a, b]))[0, 1].item()


def top5(row: torch.Tensor) -> dict[int, float]:
    """A step's five largest logits by token id, largest first."""
    values, ids = row.float().topk(5)
    return dict(zip(ids.tolist(), values.tolist()))


def noise(ours: Sequence[torch.Tensor], theirs: Sequence[torch.Tensor]) -> Callable[[int], float]:
    """The near-tie bound at step ``k`` of two runs whose logits per step are ``ours`` and ``theirs``: NOISE_SIGMAS
    times the root mean square of their differences (over the entries finite on both sides: suppressed tokens are
    -inf)."""
    def bound(k: int) -> float:
        a, b = ours[k].float(), theirs[k].float()
        finite = torch.isfinite(a) & torch.isfinite(b)
        return NOISE_SIGMAS * float((a - b)[finite].pow(2).mean().sqrt())
    return bound


def identical_prefix(ours: Sequence[int], theirs: Sequence[int], our_top5: Sequence[Sequence[int]],
                     their_top5: Sequence[Mapping[int, float]],
                     near_tie: float | Callable[[int], float] = NEAR_TIE) -> int:
    """The number of leading tokens ``ours`` shares with the reference ``theirs``; at the first difference ``k``
    each side's token is among the other's top 5 (``their_top5``: the reference's logits or logprobs by id) and the
    reference's margin between its token and ours is below ``near_tie`` (a bound, or :func:`noise`)."""
    for k, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            assert a in their_top5[k] and b in our_top5[k], f"token {k}: {a} vs {b}: not each in the other's top 5"
            margin = their_top5[k][b] - their_top5[k][a]
            bound = near_tie(k) if callable(near_tie) else near_tie
            print(f"\nfirst difference at token {k}: {a} vs {b}, the reference's margin {margin:.4f} (bound "
                  f"{bound:.4f})")
            assert margin < bound, f"token {k}: {a} vs {b}: the reference's margin {margin:.4f} is no near-tie"
            return k
    assert len(ours) == len(theirs), f"identical but for their lengths: {len(ours)} vs {len(theirs)}"
    return len(ours)


def rows_agree(ours: Sequence[int], theirs: Sequence[int], our_rows: Sequence[torch.Tensor],
               their_rows: Sequence[torch.Tensor]) -> int:
    """:func:`identical_prefix` of two greedy runs whose logits per step are at hand, bounded by their noise."""
    return identical_prefix(ours, theirs, [row.topk(5).indices.tolist() for row in our_rows],
                            [top5(row) for row in their_rows], noise(our_rows, their_rows))
