"""The ascend_install_sequence filter: Huawei's installer order (first install: driver then firmware; overwrite or
upgrade: firmware then driver)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.ascend_install_sequence import FilterModule

ascend_install_sequence = FilterModule().filters()["ascend_install_sequence"]


@pytest.mark.parametrize("installed", ["", None, False])
def test_first_installation_keeps_the_given_order(installed):
    assert ascend_install_sequence(["driver", "firmware"], installed) == ["driver", "firmware"]
    assert ascend_install_sequence(["firmware", "driver"], installed) == ["firmware", "driver"]
    assert ascend_install_sequence(["driver"], installed) == ["driver"]


@pytest.mark.parametrize("installed", ["24.1.rc3", "25.2.0", True])
def test_with_a_driver_installed_the_firmware_goes_first(installed):
    # DOCUMENTATION's example: ['driver', 'firmware'] on a node with driver 24.1.rc3 -> [firmware, driver]
    assert ascend_install_sequence(["driver", "firmware"], installed) == ["firmware", "driver"]
    assert ascend_install_sequence(("driver", "firmware"), installed) == ["firmware", "driver"]
    assert ascend_install_sequence(["driver"], installed) == ["driver"]
    assert ascend_install_sequence(["firmware"], installed) == ["firmware"]


@pytest.mark.parametrize("order,needle", [
    ([], r"got \[\]"),
    ("driver", "got 'driver'"),
    (None, "got None"),
    (["driver", "driver"], r"once each, got \['driver', 'driver'\]"),
    (["driver", "toolkit"], r"got \['driver', 'toolkit'\]"),
])
def test_bad_order_is_named_with_the_fix(order, needle):
    pattern = rf"^ascend_install_sequence: order must .*{needle}; set " r"ascend_driver_order to \[driver, firmware\]"
    with pytest.raises(AnsibleFilterError, match=pattern):
        ascend_install_sequence(order, "24.1.rc3")
