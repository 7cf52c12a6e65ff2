"""lnrepro.precision: the one place a stage's precision becomes autocast."""

import warnings

import pytest
import torch

from lnrepro import precision


def test_fp32_is_no_autocast_and_bf16_is_bf16_autocast():
    x, w = torch.randn(3, 4), torch.randn(5, 4)
    with precision.autocast(torch.device("cpu"), "fp32"):
        assert torch.nn.functional.linear(x, w).dtype == torch.float32
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the emulation warning, on a CPU without bf16 instructions
        with precision.autocast("cpu", "bf16"):
            assert torch.nn.functional.linear(x, w).dtype == torch.bfloat16


def test_unknown_precision_is_an_error():
    with pytest.raises(ValueError, match="fp32 or bf16"):
        precision.autocast("cpu", "fp16")


def test_emulated_bf16_warns_once(monkeypatch):
    monkeypatch.setattr(precision, "bf16_is_native", lambda device_type: False)
    precision._warn_emulated.cache_clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            with precision.autocast("cpu", "bf16"):
                pass
    assert [str(w.message) for w in caught if w.category is RuntimeWarning][0].startswith("precision bf16 on a CPU")
    assert sum(w.category is RuntimeWarning for w in caught) == 1
