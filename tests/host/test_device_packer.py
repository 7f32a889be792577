"""The device-packer model (``bfp.pack_device``, used for values device ops write) against a reference written
independently from tt-llk's packing rules, on constructed 16-value blocks and on random ones.

The rules are those of the BFP golden that ships with ttnn 0.81.1's tt-llk,
``ttnn/tt_metal/tt-llk/tests/python_tests/helpers/bfp_format_utils.py`` (``_bf16_sign_exp_mantissa``,
``_bfp8_mantissas_per_block``, ``_quantize_bfp_b``):
- the input is bf16; a block's shared exponent is the largest exponent field of its 16 values;
- the 7-bit magnitude is the hidden bit and the top 6 of bf16's 7 fraction bits (the last one is dropped);
- a value below the shared exponent shifts right by the difference and rounds half away from zero on the
  last bit shifted out (the guard bit); a value at the shared exponent is not rounded, so the magnitude
  never overflows into a larger shared exponent;
- bfloat4_b truncates that rounded 7-bit magnitude to its top 3 bits.
Zero magnitudes carry no sign: tenstorrent/ttsim's packer (src/tensix.cpp, PACR, v1.10.0) sets the sign bit only
for a nonzero magnitude, since a signed zero encodes -inf.
Other Tenstorrent sources disagree with the golden at the shared exponent (see docs/runtime.md's fidelity section):
this test pins the model to tt-llk's rules, not to silicon.
"""

import math
import struct

import torch

from tt_models.runtime.host import bfp


def reference_block(values: list[float], magnitude_bits: int) -> list[float]:
    """One 16-value block of bf16 values as the device packer stores it, decoded, one value at a time."""
    fields = [struct.unpack("<I", struct.pack("<f", v))[0] >> 16 for v in values]  # exact for bf16 inputs
    shared = max((f >> 7) & 0xFF for f in fields)
    out = []
    for f in fields:
        sign, exponent, fraction = f >> 15, (f >> 7) & 0xFF, f & 0x7F
        if exponent == 0:  # zero
            out.append(0.0)
            continue
        magnitude = 0x40 | fraction >> 1
        delta = shared - exponent
        q = magnitude >> delta
        if delta > 0:
            q += (magnitude >> (delta - 1)) & 1
        q >>= 7 - magnitude_bits
        value = math.ldexp(q, shared - 127 - (magnitude_bits - 1))
        out.append(-value if sign and q else value)
    return out


def bf16(fraction: int, exponent: int, negative: bool = False) -> float:
    """The bf16 value with this 7-bit fraction field and unbiased exponent."""
    return (-1.0 if negative else 1.0) * math.ldexp(1 + fraction / 128, exponent)


def check(blocks: list[list[float]], magnitude_bits: int) -> torch.Tensor:
    x = torch.tensor(blocks, dtype=torch.float32)
    expected = torch.tensor([reference_block(b, magnitude_bits) for b in blocks])
    got = bfp.pack_device(x, magnitude_bits)
    assert torch.equal(got, expected), (x[got != expected], got[got != expected], expected[got != expected])
    assert not torch.signbit(got[got == 0]).any(), "a zero magnitude keeps no sign"
    return got


def constructed_blocks() -> list[list[float]]:
    """Blocks whose max is a power of two next to values that hit each rounding rule."""
    blocks = []
    for negative in (False, True):
        # Exact ties at every shift 1..6: the guard bit set, nothing below it (the dropped 7th bit clear), and
        # (up to shift 5) an even kept magnitude, so half-away-from-zero and half-to-even disagree.
        ties = [bf16(1 << d, -d, negative) for d in range(1, 7)]
        # At the shared exponent the dropped 7th fraction bit does not round: 1 + 1/128 and 1 + 3/128 are ties.
        dropped = [bf16(0x01, 0, negative), bf16(0x03, 0, negative)]
        # Shift 7: only the hidden bit is left as the guard (rounds up to one ulp); shift 8 flushes to zero.
        far = [bf16(0x00, -7, negative), bf16(0x7E, -8, negative), bf16(0x00, -20, negative)]
        blocks.append([1.0 if not negative else -1.0, *ties, *dropped, *far, 0.0, 0.0, 0.5, -0.25])
        # Shared-exponent overflow: 1.9921875 at the shared exponent would round to 2.0 under round-to-nearest;
        # the device model keeps magnitude 127 (1.984375). Below it, 0x7F at shift 1 carries into the hidden bit.
        blocks.append([bf16(0x7F, 0, negative), bf16(0x7F, -1, negative), bf16(0x7E, -1, negative),
                       bf16(0x7D, -2, negative), *[bf16(k * 9 % 128, -(k % 5), negative) for k in range(12)]])
    return blocks


def test_constructed_blocks_bfloat8_b():
    got = check(constructed_blocks(), 7)
    # Hand-checked values of the first block (max 1.0, ulp 2^-6), independent of the reference:
    row = got[0].tolist()
    assert row[1] == 33 / 64  # shift 1: magnitude 0b1000001 -> 32.5 -> 33 (half away from zero)
    assert row[7] == 1.0 and row[8] == 65 / 64  # the dropped 7th bit: 64.5 -> 64, 65.5 -> 65
    assert row[9] == 1 / 64 and row[10] == 0.0  # shift 7 rounds up to one ulp, shift 8 flushes
    assert got[2].tolist()[1] == -33 / 64  # negative ties round away from zero too
    assert got[1].tolist()[0] == 127 / 64  # no exponent bump at the block max
    assert got[1].tolist()[1] == 1.0  # 0x7F at shift 1: 63.5 -> 64, the hidden bit of the shared exponent


def test_constructed_blocks_bfloat4_b():
    got = check(constructed_blocks(), 3)
    # bfloat4_b truncates the rounded 7-bit magnitude: 33 (0b0100001) -> 0b010, i.e. 2/4 of the block max.
    assert got[0].tolist()[1] == 0.5


def test_random_blocks():
    g = torch.Generator().manual_seed(17)
    n = 1000
    scale = torch.exp2(torch.randint(-12, 12, (n, 1), generator=g).float())
    spread = torch.exp2(torch.randint(-9, 1, (n, 16), generator=g).float())  # shifts 0..9 below a block max
    x = (torch.randn(n, 16, generator=g) * scale * spread).bfloat16().float()
    x[torch.rand(n, 16, generator=g) < 0.05] = 0.0
    for bits in (7, 3):
        check(x.tolist(), bits)
