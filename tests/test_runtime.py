"""Backend selection, device open/close and the one ttnn import point."""

import pytest
import torch

from tt_models import runtime
from tt_models.runtime import backend, host, mock


def test_default_backend_is_host_without_a_card(monkeypatch):
    monkeypatch.delenv(runtime.BACKEND_ENV, raising=False)
    monkeypatch.setattr(backend, "tt_device_present", lambda: False)
    assert runtime.default_backend() == "host"
    monkeypatch.setattr(backend, "tt_device_present", lambda: True)
    assert runtime.default_backend() == "ttnn"


def test_environment_variable_overrides_the_default(monkeypatch):
    monkeypatch.setenv(runtime.BACKEND_ENV, "mock")
    assert runtime.default_backend() == "mock"
    monkeypatch.setenv(runtime.BACKEND_ENV, "cuda")
    with pytest.raises(ValueError, match="TT_MODELS_BACKEND='cuda'"):
        runtime.default_backend()


def test_proxy_follows_the_most_recently_opened_device(mock_device):
    underneath = runtime.ttnn.from_torch  # the session's devices (the mock one at least) stay open throughout
    first = runtime.open_device("host")
    assert runtime.ttnn.from_torch is host.from_torch
    second = runtime.open_device("host", mesh_shape=(1, 2))
    assert second.get_num_devices() == 2 and runtime.backend_of(second) == "host"
    runtime.close_device(second)
    runtime.close_device(first)
    assert runtime.ttnn.from_torch is underneath
    with pytest.raises(ValueError, match="not opened"):
        runtime.close_device(first)


def test_model_style_code_runs_on_the_host_device(host_device):
    ttnn = runtime.ttnn
    x = ttnn.from_torch(torch.ones(1, 1, 32, 64), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=host_device)
    assert x.device() is host_device and x.memory_config() == ttnn.DRAM_MEMORY_CONFIG


def test_mock_backend_opens_the_real_ttnn(mock_device):
    assert runtime.backend_of(mock_device) == "mock"
    assert mock_device.get_num_devices() == 1
    assert not runtime.supports_trace(mock_device)
    grid = mock_device.compute_with_storage_grid_size()
    assert (grid.x, grid.y) == (8, 8)


def test_mock_rejects_a_mesh_no_board_has():
    with pytest.raises(ValueError, match="no mock board"):
        runtime.open_device("mock", mesh_shape=(2, 4))


def test_mock_install_is_idempotent():
    first = mock.install()
    assert mock.is_installed()
    assert mock.install() == first
    with pytest.raises(ValueError, match="n999"):
        mock.environment("n999")


def test_use_selects_the_api_of_a_device_whatever_was_opened_last(mock_device):
    import ttnn as real_ttnn

    host_device = runtime.open_device("host")
    try:
        with runtime.use(mock_device):
            assert runtime.ttnn.linear is real_ttnn.linear
            with runtime.use(host_device):
                assert runtime.ttnn.linear is host.linear
            assert runtime.ttnn.linear is real_ttnn.linear
        assert runtime.ttnn.linear is host.linear
    finally:
        runtime.close_device(host_device)
