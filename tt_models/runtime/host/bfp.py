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


_INT32: dict[int, torch.Tensor] = {}


def _int32(n: int) -> torch.Tensor:
    """``n`` as a 0-dim int32 tensor: an op on one costs less than on a Python int, which torch wraps at every call."""
    if n not in _INT32:
        _INT32[n] = torch.tensor(n, dtype=torch.int32)
    return _INT32[n]


def pack_device(x: torch.Tensor, mantissa_bits: int) -> torch.Tensor:
    """Quantize with the device packer model (input first rounded to bfloat16).

    Written in few passes (a cache update packs a few thousand values, where each pass costs more than its
    arithmetic): zeros and denormals have exponent 0, so the block max over all values is the max over normals, and
    their magnitude 0 gives 0 at any shift.
    """
    blocks, width = _blocks(round_to_bfloat16(x.to(torch.float32)).contiguous())
    bits = blocks.view(torch.int32)
    exp = (bits >> _int32(23)) & _int32(0xFF)
    shared = exp.amax(dim=-1, keepdim=True)
    # 7-bit magnitude: hidden bit + the top 6 of bfloat16's 7 fraction bits (the last one truncated).
    mag = (((bits >> _int32(17)) & _int32(0x3F)) | _int32(0x40)) * (exp != 0)
    # One guard bit, round half away from zero: q = floor(mag / 2**shift + 1/2), which is mag at shift 0 and at most
    # 64 past it (no saturation). int32 throughout: (mag << 1) has 8 bits, so any shift from 8 up gives 0, as the
    # real shift past it does (31: torch's int32 shifts stop there).
    q = (((mag << _int32(1)) >> (shared - exp).clamp_(max=31)) + _int32(1)) >> _int32(1)
    if mantissa_bits < 7:
        q = q >> _int32(7 - mantissa_bits)
    negative = bits >> _int32(31)  # -1 for a set sign bit, else 0: q ^ -1 - -1 is -q
    q = (q ^ negative) - negative  # an integer 0 stays +0 below
    scale = torch.pow(2.0, (shared - 127 - (mantissa_bits - 1)).to(torch.float32))
    return _unblock(q.to(torch.float32) * scale, width)
