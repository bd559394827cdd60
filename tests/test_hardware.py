import pytest

from evolve.errors import EvolveError
from evolve.hardware import Hardware, catalog, check_device, from_device, named
from tests.helpers.tasks import H200_PROPS, hardware_config


@pytest.mark.parametrize("name", ["h100", "h200", "a100", "l4"])
def test_named_targets_are_complete_and_numeric(name: str) -> None:
    hw = named(hardware_config(name))
    assert hw.name == name and hw.arch.startswith("sm_")
    assert isinstance(hw.peak_dram_bps, float) and hw.peak_dram_bps > 1e11
    assert isinstance(hw.peak_fp32_flops, float) and hw.peak_fp32_flops > 1e12
    assert hw.copy_bandwidth_bps is None  # measured, never from a datasheet
    assert hw.bandwidth_ceiling == hw.peak_dram_bps


def test_auto_reads_the_device_and_takes_datasheet_peaks_from_the_catalog() -> None:
    hw = from_device(H200_PROPS)
    assert hw.name == "h200" and hw.arch == "sm_90" and hw.device == "NVIDIA H200"
    assert hw.peak_dram_bps == 4.8e12
    unknown = from_device({**H200_PROPS, "name": "NVIDIA RTX Future 9090", "major": 12})
    assert unknown.name == "nvidia_rtx_future_9090" and unknown.arch == "sm_120"


def test_device_patterns_do_not_confuse_l4_and_l40s() -> None:
    assert from_device({**H200_PROPS, "name": "NVIDIA L4", "major": 8, "minor": 9}).name == "l4"
    assert from_device({**H200_PROPS, "name": "NVIDIA L40S", "major": 8, "minor": 9}).name != "l4"
    assert set(catalog()) == {"h100", "h200", "a100", "l4"}


def test_a_named_target_must_match_the_gpu() -> None:
    with pytest.raises(EvolveError, match="use hardware=auto"):
        check_device(named(hardware_config("a100")), H200_PROPS)
    assert check_device(named(hardware_config("h200")), H200_PROPS).device == "NVIDIA H200"


def test_numbers_written_as_strings_are_coerced() -> None:
    d = {**named(hardware_config("h200")).to_dict(), "peak_dram_bps": "4.8e12", "sms": "132"}
    hw = Hardware.from_dict(d)
    assert hw.peak_dram_bps == 4.8e12 and hw.sms == 132
