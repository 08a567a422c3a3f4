"""Device parsing and validation, with CUDA faked where a GPU would be needed."""

from __future__ import annotations

import pytest
import torch

from esper.tolaria import DeviceError, available_devices, resolve_device


@pytest.fixture
def cpu_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


@pytest.mark.usefixtures("cpu_only")
def test_cpu() -> None:
    device = resolve_device("cpu")
    assert isinstance(device, torch.device)
    assert device == torch.device("cpu")
    assert device.index is None
    assert available_devices() == ["cpu"]


def test_cpu_on_this_machine() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert "cpu" in available_devices()


@pytest.mark.usefixtures("cpu_only")
@pytest.mark.parametrize("spec", ["gpu0", "cuda:x", "", "CUDA", "cuda:0:1", " cpu", "cuda:-1", "gpu"])
def test_malformed(spec: str) -> None:
    with pytest.raises(DeviceError) as info:
        resolve_device(spec)
    message = str(info.value)
    assert repr(spec) in message
    assert message.endswith("available devices: cpu")


def test_device_error_is_a_value_error() -> None:
    assert issubclass(DeviceError, ValueError)


@pytest.mark.usefixtures("cpu_only")
@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_without_cuda(spec: str) -> None:
    with pytest.raises(DeviceError) as info:
        resolve_device(spec)
    message = str(info.value)
    assert repr(spec) in message and "CUDA" in message
    assert message.endswith("available devices: cpu")


@pytest.mark.usefixtures("cpu_only")
@pytest.mark.parametrize("spec", ["mps", "meta"])
def test_other_unavailable_types(spec: str) -> None:
    with pytest.raises(DeviceError, match="available devices: cpu"):
        resolve_device(spec)


@pytest.mark.usefixtures("two_gpus")
def test_cuda_valid_paths_return_devices() -> None:
    assert available_devices() == ["cpu", "cuda:0", "cuda:1"]
    bare = resolve_device("cuda")
    assert isinstance(bare, torch.device)
    assert (bare.type, bare.index) == ("cuda", 0)  # bare 'cuda' means cuda:0
    assert resolve_device("cuda:0") == torch.device("cuda", 0)
    second = resolve_device("cuda:1")
    assert (second.type, second.index) == ("cuda", 1)
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.usefixtures("two_gpus")
@pytest.mark.parametrize("spec", ["cuda:2", "cuda:7"])
def test_cuda_index_out_of_range(spec: str) -> None:
    with pytest.raises(DeviceError) as info:
        resolve_device(spec)
    message = str(info.value)
    assert repr(spec) in message
    assert "2 CUDA device" in message
    assert message.endswith("available devices: cpu cuda:0 cuda:1")


@pytest.mark.usefixtures("two_gpus")
def test_malformed_lists_fake_gpus() -> None:
    with pytest.raises(DeviceError, match="available devices: cpu cuda:0 cuda:1"):
        resolve_device("gpu1")
