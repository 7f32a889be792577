"""The sfpi compiler's shell front (``fake_sfpi_gxx.sh``) answers as the Python stand-in does, byte for byte:
compiles (object and dependency file), precompiled headers, kernel links (the first through the stand-in, later
ones from the memo); outside a mock run it refuses, as the stand-in does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tt_models.runtime import mock

TTNN = mock.find_ttnn_dir()
BIN = TTNN / "runtime" / "sfpi" / "compiler" / "bin"
FIRMWARE = next(TTNN.glob("tt_metal/pre-compiled/*/brisc/brisc.elf"))  # firmware symbols a kernel links against
SCRIPT = TTNN / "runtime" / "hw" / "toolchain" / "wormhole" / "kernel_brisc.ld"


def run(front: bool, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    command = [str(BIN / "riscv32-tt-elf-g++")] if front else [sys.executable, "-S", str(BIN / mock._STAND_IN_NAME)]
    return subprocess.run(command + args, env=env, capture_output=True, text=True)


@pytest.fixture
def env(tmp_path):
    mock.install()
    return {**os.environ, mock.MOCK_ENV_VAR: str(mock.descriptor_path("n150")),
            mock.CACHE_ENV_VAR: str(tmp_path / "cache")}


def outputs(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_compiles_and_headers_write_what_the_stand_in_writes(tmp_path, env):
    source, header = tmp_path / "kernel.cpp", tmp_path / "defines.h"
    source.write_text("void kernel_main() {}\n")
    header.write_text("#define X 1\n")
    results = {}
    for front in (True, False):
        out = tmp_path / ("front" if front else "python")
        out.mkdir()
        compile_ = ["-O3", "-c", "-include", str(header), str(source), "missing.cpp", "-o", str(out / "k.o"),
                    "-MF", str(out / "k.d")]
        assert run(front, compile_, env).returncode == 0
        assert run(front, ["-x", "c++-header", str(header), "-o", str(out / "h.gch")], env).returncode == 0
        results[front] = outputs(out)
    front, python = results[True], results[False]
    assert front.keys() == {"h.gch", "k.d", "k.o"}
    assert python["k.d"] == f"{tmp_path / 'python' / 'k.o'}: {header} {source}\n".encode()  # existing inputs
    assert front["k.d"].replace(b"/front/", b"/python/") == python["k.d"]
    assert front["k.o"] == python["k.o"] == b"" and front["h.gch"] == python["h.gch"] == b""


def test_kernel_links_come_from_the_memo_after_the_first(tmp_path, env):
    link = ["-O3", f"-T{SCRIPT}", f"-Wl,--just-symbols={FIRMWARE}", str(tmp_path / "kernel.o")]
    expected = tmp_path / "python.elf"
    assert run(False, [*link, "-o", str(expected)], env).returncode == 0
    first, second = tmp_path / "first.elf", tmp_path / "second.elf"
    assert run(True, [*link, "-o", str(first)], env).returncode == 0
    memo = list((Path(env[mock.CACHE_ENV_VAR]) / "fake-sfpi-kernel-elfs").iterdir())
    assert len(memo) == 1
    memo[0].write_bytes(memo[0].read_bytes() + b"memo")  # the second link must copy it
    assert run(True, [*link, "-o", str(second)], env).returncode == 0
    assert expected.read_bytes()[:4] == b"\x7fELF" and first.read_bytes() == expected.read_bytes()
    assert second.read_bytes() == expected.read_bytes() + b"memo"


def test_outside_a_mock_run_it_refuses(tmp_path, env):
    del env[mock.MOCK_ENV_VAR]
    for front in (True, False):
        result = run(front, ["-c", "x.cpp", "-o", str(tmp_path / "x.o")], env)
        assert result.returncode == 1 and "refusing to run" in result.stderr
    assert not (tmp_path / "x.o").exists()
