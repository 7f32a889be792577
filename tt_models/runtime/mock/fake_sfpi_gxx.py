#!/usr/bin/env python3
"""Stand-in for Tenstorrent's sfpi compiler ``riscv-tt-elf-g++``, for MOCK devices only.

Why this exists
---------------
ttnn 0.81.1 can open a *mock* Tenstorrent device (``TT_METAL_MOCK_CLUSTER_DESC_PATH``
pointing at a cluster-descriptor YAML): every driver call is mocked, device reads return
zeros, but all host-side work runs for real -- op validation (TT_FATAL), program creation,
buffer allocation, program cache.  That lets CI on machines without TT hardware exercise
real TT-NN model code.

However, even in mock mode tt-metal JIT-builds the device firmware when a device opens and
the kernels of every op at first use, with the sfpi RISC-V cross compiler.  The ttnn wheel
does not ship that toolchain and it is not on PyPI or Debian.  This script plays the
compiler's part just well enough for tt-metal to accept the outputs:

  --version / -dumpversion       print a deliberately fake version line; it feeds
                                 tt-metal's JIT build key, so stub binaries never share a
                                 cache entry with real toolchain builds
  -c ... -o X.o -MF X.d          write an empty X.o and a make-style X.d listing only the
                                 inputs that exist, as absolute paths
  -x c++-header ... -o X.gch     write an empty X.gch
  link with -T.../firmware_*.ld  copy the real firmware ELF the ttnn wheel ships under
                                 ttnn/tt_metal/pre-compiled/<key>/<name>/<name>.elf
  link with -T.../kernel_*.ld    synthesize a minimal valid RISC-V ELF32 executable
                                 (``jal x0,+4; ret`` plus one R_RISCV_JAL relocation, since
                                 tt-metal's XIP loader requires a relocation section),
                                 placed where the real linker script would put it

NOTHING PRODUCED HERE CAN RUN ON REAL HARDWARE.  As a guard, the script refuses to do
anything unless ``TT_METAL_MOCK_CLUSTER_DESC_PATH`` is set in its environment (tt-metal's
compiler subprocesses inherit the process environment).  Remove it from a ttnn install
that is used with real devices (``python -m tt_models.runtime.mock uninstall``).

Standard library only; it is run with ``python -S`` for start-up speed.
Optional: ``TT_FAKE_GXX_LOG=<file>`` appends every invocation to <file>;
``TT_FAKE_PRECOMPILED_DIR=<dir>`` overrides where pre-compiled firmware is looked up.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import sys

VERSION = "riscv-tt-elf-g++ (mock stand-in, not sfpi) 0.0.0"
MOCK_ENV_VAR = "TT_METAL_MOCK_CLUSTER_DESC_PATH"

# ELF constants used below.
_SHT_PROGBITS, _SHT_SYMTAB, _SHT_STRTAB, _SHT_RELA = 1, 2, 3, 4
_PT_LOAD = 1
_EM_RISCV = 243
_R_RISCV_JAL = 17


def _log(argv: list[str]) -> None:
    path = os.environ.get("TT_FAKE_GXX_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(" ".join(argv) + "\n")


def _elf_symbols(path: str) -> dict[str, int]:
    """Return ``{name: value}`` for the symbols of a little-endian ELF32 file ({} on error)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return {}
    if data[:4] != b"\x7fELF" or data[4] != 1:
        return {}
    (e_shoff,) = struct.unpack_from("<I", data, 32)
    e_shentsize, e_shnum = struct.unpack_from("<HH", data, 46)
    shdrs = [struct.unpack_from("<10I", data, e_shoff + i * e_shentsize) for i in range(e_shnum)]
    syms: dict[str, int] = {}
    for sh in shdrs:
        if sh[1] != _SHT_SYMTAB:
            continue
        str_off = shdrs[sh[6]][4]
        for j in range(sh[5] // 16):
            st_name, st_value = struct.unpack_from("<II", data, sh[4] + j * 16)
            start = str_off + st_name
            syms[data[start:data.index(b"\0", start)].decode("latin-1")] = st_value
    return syms


def _section_addr(script: str, section: str, symbols: dict[str, int]) -> int | None:
    """Address a GNU ld script assigns to ``section`` (literal, firmware symbol or PROVIDE)."""
    m = re.search(r"^\s*%s\s+([^\s:]+)\s*:" % re.escape(section), script, re.M)
    if not m:
        return None
    expr = m.group(1)
    try:
        return int(expr, 0)
    except ValueError:
        pass
    if expr in symbols:
        return symbols[expr]
    m = re.search(r"PROVIDE\(\s*%s\s*=\s*(0x[0-9a-fA-F]+|\d+)\s*\)" % re.escape(expr), script)
    return int(m.group(1), 0) if m else None


def _write_kernel_elf(out: str, text_addr: int, data_addr: int) -> None:
    """Write a minimal RISC-V ELF32 ET_EXEC that tt-metal's ELF/XIP loader accepts.

    Layout: 2 program headers (text PT_LOAD first with e_entry at its start, then an empty
    data PT_LOAD starting with .data), sections .text, .rela.text, .data, .symtab, .strtab,
    .shstrtab; everything 4-byte aligned.
    """
    text_addr &= ~3
    data_addr &= ~3
    text = struct.pack("<II", 0x0040006F, 0x00008067)  # jal x0,+4 ; ret
    shstr = b"\0.text\0.rela.text\0.data\0.symtab\0.strtab\0.shstrtab\0"

    def name(s: str) -> int:
        return shstr.index(s.encode() + b"\0")

    strtab = b"\0_start\0_tt_fake_ret\0"
    symtab = (
        b"\0" * 16
        + struct.pack("<IIIBBH", 1, text_addr, 4, 0x12, 0, 1)  # _start: GLOBAL FUNC in .text
        + struct.pack("<IIIBBH", 8, text_addr + 4, 0, 0x10, 0, 1)  # _tt_fake_ret: GLOBAL NOTYPE
    )
    rela = struct.pack("<IIi", text_addr, (2 << 8) | _R_RISCV_JAL, 0)  # the jal -> symbol 2

    text_off = (52 + 2 * 32 + 15) & ~15
    rela_off = (text_off + len(text) + 3) & ~3
    data_off = (rela_off + len(rela) + 3) & ~3  # .data is empty: shares its offset with .symtab
    sym_off = data_off
    str_off = sym_off + len(symtab)
    shstr_off = str_off + len(strtab)
    sh_off = (shstr_off + len(shstr) + 3) & ~3

    ehdr = struct.pack(
        "<16sHHIIIIIHHHHHH",
        b"\x7fELF\x01\x01\x01" + b"\0" * 9,  # ELF32, little endian, SYSV
        2, _EM_RISCV, 1,  # ET_EXEC, machine, version
        text_addr, 52, sh_off, 0,  # entry, phoff, shoff, flags
        52, 32, 2, 40, 7, 6,  # ehsize, phentsize, phnum, shentsize, shnum, shstrndx
    )
    phdrs = struct.pack(
        "<8I", _PT_LOAD, text_off, text_addr, text_addr, len(text), len(text), 5, 16
    ) + struct.pack("<8I", _PT_LOAD, data_off, data_addr, text_addr + len(text), 0, 0, 6, 16)
    shdrs = b"".join(
        [
            b"\0" * 40,
            struct.pack("<10I", name(".text"), _SHT_PROGBITS, 6, text_addr, text_off, len(text), 0, 0, 4, 0),
            struct.pack("<10I", name(".rela.text"), _SHT_RELA, 0x40, 0, rela_off, len(rela), 4, 1, 4, 12),
            struct.pack("<10I", name(".data"), _SHT_PROGBITS, 3, data_addr, data_off, 0, 0, 0, 4, 0),
            struct.pack("<10I", name(".symtab"), _SHT_SYMTAB, 0, 0, sym_off, len(symtab), 5, 1, 4, 16),
            struct.pack("<10I", name(".strtab"), _SHT_STRTAB, 0, 0, str_off, len(strtab), 0, 0, 1, 0),
            struct.pack("<10I", name(".shstrtab"), _SHT_STRTAB, 0, 0, shstr_off, len(shstr), 0, 0, 1, 0),
        ]
    )
    buf = bytearray(sh_off + len(shdrs))
    for off, chunk in (
        (0, ehdr), (52, phdrs), (text_off, text), (rela_off, rela),
        (sym_off, symtab), (str_off, strtab), (shstr_off, shstr), (sh_off, shdrs),
    ):
        buf[off:off + len(chunk)] = chunk
    with open(out, "wb") as f:
        f.write(buf)


def _link_firmware(script: str, out: str) -> int:
    """Copy the wheel's pre-compiled firmware ELF for ``out`` (.../firmware/<name>/<name>.*.elf)."""
    here = os.path.dirname(os.path.abspath(__file__))  # <ttnn>/runtime/sfpi/compiler/bin
    ttnn_root = os.path.abspath(os.path.join(here, "..", "..", "..", ".."))
    pre = os.environ.get("TT_FAKE_PRECOMPILED_DIR") or os.path.join(ttnn_root, "tt_metal", "pre-compiled")
    name = os.path.basename(os.path.dirname(out))
    # Pick a key directory of the right architecture: Wormhole keys have erisc, Blackhole drisc.
    marker = "erisc" if "/wormhole/" in script else "drisc" if "/blackhole/" in script else None
    try:
        keys = sorted(os.listdir(pre))
    except OSError:
        keys = []
    for key in keys:
        cand = os.path.join(pre, key, name, name + ".elf")
        if os.path.isfile(cand) and (marker is None or os.path.isdir(os.path.join(pre, key, marker))):
            shutil.copyfile(cand, out)
            return 0
    sys.stderr.write("fake sfpi g++: no pre-compiled firmware for %s (%s) under %s\n" % (name, script, pre))
    return 1


def main(argv: list[str]) -> int:
    _log(argv)
    if not os.environ.get(MOCK_ENV_VAR):
        sys.stderr.write(
            "fake sfpi g++ (tt_models mock stand-in): refusing to run because %s is not set; "
            "this stand-in only produces stub binaries for MOCK devices. For real hardware remove "
            "it with `python -m tt_models.runtime.mock uninstall` and install the real sfpi.\n"
            % MOCK_ENV_VAR
        )
        return 1
    if any(a in ("--version", "-dumpversion") for a in argv):
        print(VERSION)
        return 0

    out = mf = script = None
    compile_only = header = False
    inputs: list[str] = []
    just_symbols: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-o", "-MF", "-include") and i + 1 < len(argv):
            value = argv[i + 1]
            if a == "-o":
                out = value
            elif a == "-MF":
                mf = value
            else:
                inputs.append(value)
            i += 2
            continue
        if a == "-c":
            compile_only = True
        elif a == "c++-header":  # from `-x c++-header`
            header = True
        elif a.startswith("-T"):
            script = a[2:]
        elif a.startswith("-Wl,"):
            for part in a[4:].split(","):
                if part.startswith("--just-symbols="):
                    just_symbols.append(part.split("=", 1)[1])
        elif not a.startswith("-"):
            inputs.append(a)
        i += 1

    if mf:
        deps = [os.path.abspath(p) for p in inputs if os.path.isfile(p) and not p.endswith((".o", ".a"))]
        with open(mf, "w", encoding="utf-8") as f:
            f.write("%s: %s\n" % (out, " ".join(deps)))
    if compile_only or header or not script:
        if out:
            open(out, "wb").close()
        return 0
    if out is None:
        sys.stderr.write("fake sfpi g++: link without -o\n")
        return 1

    base = os.path.basename(script)
    if base.startswith(("firmware_", "erisc-b0-app")):
        return _link_firmware(script, out)

    symbols: dict[str, int] = {}
    for path in just_symbols:
        symbols.update(_elf_symbols(path))
    with open(script, encoding="utf-8", errors="replace") as f:
        text = f.read()
    _write_kernel_elf(
        out,
        _section_addr(text, ".text", symbols) or 0,
        _section_addr(text, ".data", symbols) or 0,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
