"""Block floating point (bfloat8_b / bfloat4_b) and bfloat16 rounding, bit-exact with tt-metal.

A BFP "B" block is 16 consecutive values of one tile face row (so, in a row-major view of the
tile-padded tensor, 16 consecutive values of the last dim, aligned to 16). The block shares the largest
8-bit exponent of its values; each value keeps a sign and ``mb`` magnitude bits (7 for bfloat8_b, 3 for
bfloat4_b) holding its mantissa shifted to that exponent.

Two packers exist on real systems and differ by up to one ulp:
- the host packer (``ttnn.from_torch``: weights, anything converted on the host), see
  ``tt_metal/impl/data_format/blockfloat_common.cpp``: round half to even, then saturate;
- the device packer (on-device typecast, the cache re-pack inside ``paged_update_cache``), see tt-llk:
  from bfloat16, hidden bit + top 6 fraction bits, round half away from zero on one guard bit when
  shifting to the shared exponent, bfloat4_b truncating to 3 bits.
"""

from __future__ import annotations

import torch

BLOCK = 16
MANTISSA_BITS = {"bfloat8_b": 7, "bfloat4_b": 3}


def round_to_bfloat16(x: torch.Tensor) -> torch.Tensor:
    """Round float32 to bfloat16, nearest even (as ttnn 0.81.1's host conversion does); stays float32."""
    return x.to(torch.bfloat16).to(torch.float32)


def _blocks(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """View ``x`` as ``[..., n_blocks, 16]`` along its last dim (zero-padded to a multiple of 16)."""
    width = x.shape[-1]
    pad = (-width) % BLOCK
    if pad:
        x = torch.nn.functional.pad(x, (0, pad))
    return x.reshape(*x.shape[:-1], x.shape[-1] // BLOCK, BLOCK), width


def _unblock(q: torch.Tensor, width: int) -> torch.Tensor:
    return q.reshape(*q.shape[:-2], q.shape[-2] * q.shape[-1])[..., :width]


def pack_host(x: torch.Tensor, mantissa_bits: int) -> torch.Tensor:
    """Quantize float32 ``x`` with the host BFP packer; returns the decoded float32 values."""
    blocks, width = _blocks(x.to(torch.float32).contiguous())
    bits = blocks.view(torch.int32)
    exp = (bits >> 23) & 0xFF
    sign = bits < 0
    normal = exp != 0  # zeros and denormals flush to zero
    # int32 throughout: mant has 24 bits, so every shift from 25 up leaves q = 0 and rem = mant < half, as any
    # longer shift does.
    mant = torch.where(normal, (bits & 0x7FFFFF) | 0x800000, torch.zeros_like(bits))
    shared = torch.where(normal, exp, torch.zeros_like(exp)).amax(dim=-1, keepdim=True)
    shift = (shared - exp).clamp(min=0) + (24 - mantissa_bits)
    shift = torch.where(normal, shift, torch.full_like(shift, 31)).clamp(max=31)
    q = mant >> shift
    rem = mant - (q << shift)
    half = torch.ones_like(shift) << (shift - 1)
    round_up = (rem > half) | ((rem == half) & ((q & 1) == 1))
    q = (q + round_up.to(torch.int32)).clamp(max=(1 << mantissa_bits) - 1)
    scale = torch.pow(2.0, (shared - 127 - (mantissa_bits - 1)).to(torch.float32))
    value = q.to(torch.float32) * scale
    value = torch.where(sign & (q != 0), -value, value)
    return _unblock(value, width)


def pack_device(x: torch.Tensor, mantissa_bits: int) -> torch.Tensor:
    """Quantize with the device packer model (input first rounded to bfloat16)."""
    blocks, width = _blocks(round_to_bfloat16(x.to(torch.float32)).contiguous())
    bits = blocks.view(torch.int32)
    exp = (bits >> 23) & 0xFF
    sign = bits < 0
    normal = exp != 0
    # 7-bit magnitude: hidden bit + the top 6 of bfloat16's 7 fraction bits (the last one truncated).
    # int32 throughout: (mag << 1) has 8 bits, so every shift from 8 up gives 0, as the real shift past it does.
    mag = torch.where(normal, ((bits >> 17) & 0x3F) | 0x40, torch.zeros_like(bits))
    shared = torch.where(normal, exp, torch.zeros_like(exp)).amax(dim=-1, keepdim=True)
    shift = torch.where(normal, shared - exp, torch.full_like(mag, 31)).clamp(max=31)
    # one guard bit, round half away from zero
    guarded = (mag << 1) >> shift
    q = ((guarded + 1) >> 1).clamp(max=0x7F)
    q = torch.where(shift == 0, mag, q)
    if mantissa_bits < 7:
        q = q >> (7 - mantissa_bits)
    scale = torch.pow(2.0, (shared - 127 - (mantissa_bits - 1)).to(torch.float32))
    value = q.to(torch.float32) * scale
    value = torch.where(sign & (q != 0), -value, value)
    return _unblock(value, width)
