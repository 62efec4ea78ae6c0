"""The node state file: everything the simulated hardware knows, in one JSON document.

Paths are resolved under ``$ATLAS_SIM_ROOT`` (default ``/``) so the tools run on a temp directory in tests.
State file: ``$ATLAS_SIM_ROOT/etc/atlas-sim/state.json`` (``$ATLAS_SIM_STATE`` overrides the whole path).
"""

import contextlib
import copy
import fcntl
import json
import os

DEFAULT_FACTORY_FIRMWARE = "7.5.0.1.129"

# Bus ids as printed on real 8x910B servers (vllm-ascend issue 3906); 4-NPU nodes use the first four.
_BUS_IDS = ["0000:C1:00.0", "0000:01:00.0", "0000:C2:00.0", "0000:02:00.0",
            "0000:81:00.0", "0000:41:00.0", "0000:82:00.0", "0000:42:00.0"]
# Atlas A3: 2 dies per NPU (vllm-ascend issue 3002).
_A3_BUS_IDS = ["0000:9D:00.0", "0000:9F:00.0", "0000:99:00.0", "0000:9B:00.0", "0000:95:00.0", "0000:97:00.0",
               "0000:91:00.0", "0000:93:00.0", "0000:8D:00.0", "0000:8F:00.0", "0000:89:00.0", "0000:8B:00.0",
               "0000:85:00.0", "0000:87:00.0", "0000:81:00.0", "0000:83:00.0"]
_CPU_AFFINITY = ["144-167", "0-23", "144-167", "0-23", "96-119", "48-71", "96-119", "48-71"]

CHIPS = {
    # chip name: HBM MB, AI cores, PCI device id
    "910B1": (65536, 24, "0xD802"),
    "910B2": (65536, 24, "0xD802"),
    "910B2C": (65536, 24, "0xD802"),
    "910B3": (65536, 20, "0xD802"),
    "910B4": (32768, 20, "0xD802"),
    "910B4-1": (65536, 20, "0xD802"),
    "Ascend910": (65536, 24, "0xD803"),
}
LAYOUTS = ("classic", "a3", "wide")


def root():
    return os.environ.get("ATLAS_SIM_ROOT") or "/"


def path(*parts):
    """A node path (``/etc/hccn.conf``) under the simulation root."""
    joined = os.path.join(*parts)
    return os.path.join(root(), joined.lstrip("/"))


def state_path():
    return os.environ.get("ATLAS_SIM_STATE") or path("etc/atlas-sim/state.json")


def current_boot_id():
    """Identifies the current boot of the (container) node: changes on every container (re)start.

    The host kernel's boot_id does not change when a container restarts, so use the start time of PID 1.
    """
    if os.environ.get("ATLAS_SIM_BOOT_ID"):
        return os.environ["ATLAS_SIM_BOOT_ID"]
    try:
        with open("/proc/1/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        start = fields[19]
        with open("/proc/stat") as handle:
            btime = [line.split()[1] for line in handle if line.startswith("btime")][0]
        return "%s-%s" % (btime, start)
    except (OSError, IndexError):
        return "unknown"


def _nic(dev):
    return {
        "ip": None, "netmask": None, "gateway": None, "netdetect": None,
        "link": "UP", "net_health": None, "mtu": 1500,
        "mac": "78:b4:6a:%02x:%02x:%02x" % (0x10, 0x20 + dev, 0x30 + dev),
        "pfc": [0, 0, 0, 0, 0, 0, 0, 0],
        "dscp_to_tc": {str(d): 0 for d in range(64)},
        "prio_tc": [0, 0, 0, 0, 0, 0, 0, 0],
        "tls": {"enable": 0, "preconfigured": 1, "alarm_days": 60},
        "lldp_ifname": "400GE1/1/%d:2" % (dev + 1),
        "send_arp_status": 1,
    }


def _chip(npu, chip, phy, name, bus_id, hbm, cores, idle_power):
    return {
        "chip_id": chip, "phy_id": phy, "logic_id": phy, "name": name, "bus_id": bus_id,
        "health": "OK", "error_codes": [], "error_info": [],
        "power": idle_power if chip == 0 else None, "temp": 43 + (npu * 3 + chip) % 6,
        "aicore_usage": 0, "aivector_usage": 0, "aicpu_usage": 0, "ctrlcpu_usage": 0,
        "hbm_total": hbm, "hbm_used": 3390 + (npu * 7 + chip * 3) % 30,
        "hbm_bw_usage": 0, "ddr_total": 0, "ddr_used": 0,
        "hugepages_total": 0, "hugepages_used": 0,
        "aicore_freq": 1800, "aicore_cur_freq": 800, "aicore_count": cores,
        "hbm_clock": 1600, "hbm_temp": 40 + npu % 4, "hbm_manufacturer": "0x5A",
        "mcu_temp": 38 + npu % 3,
        "vdie_id": "42C711D4 20B03704 4A10C8D4 14CC%02X0A D2102003" % (npu * 2 + chip),
        "ndie_id": "27216594 20401010 4E10C8D4 14CC%02X0A A4102003" % (npu * 2 + chip),
        "processes": [],
    }


def default_state(npus=4, chip_name="910B3", product="Atlas 800I A2", layout="classic"):
    """A healthy node with no driver installed (factory firmware on the cards)."""
    if layout not in LAYOUTS:
        raise ValueError("layout must be one of %s" % (LAYOUTS,))
    if layout == "a3":
        chip_name = "Ascend910" if chip_name == "910B3" else chip_name
        product = "Atlas 800I A3" if product == "Atlas 800I A2" else product
    hbm, cores, device_id = CHIPS.get(chip_name, (65536, 20, "0xD802"))
    dies = 2 if layout == "a3" else 1
    cards = []
    for npu in range(npus):
        chips = []
        for chip in range(dies):
            phy = npu * dies + chip
            bus = _A3_BUS_IDS[phy % 16] if layout == "a3" else _BUS_IDS[npu % 8]
            power = round(88.0 + (npu * 37 % 100) / 10.0 + (120.0 if layout == "a3" else 0.0), 1)
            chips.append(_chip(npu, chip, phy, chip_name, bus, hbm, cores, power))
        cards.append({
            "id": npu, "present": True, "chips": chips,
            "board": {"board_id": "0x65", "pcb_id": "A", "bom_id": "1", "slot_id": npu, "class_id": "NA",
                      "vendor_id": "0x19E5", "device_id": device_id, "subsystem_vendor_id": "0x0200",
                      "subsystem_device_id": "0x0100"},
            "cpu_affinity": _CPU_AFFINITY[npu % 8],
        })
    nics = {str(dev): _nic(dev) for dev in range(npus * dies)}
    return {
        "schema": 1,
        "product": product,
        "layout": layout,
        "chip_name": chip_name,
        "npus": cards,
        "nics": nics,
        "software": {"driver": None, "firmware": None, "cann": None},
        "running": {"driver": None, "firmware": DEFAULT_FACTORY_FIRMWARE},
        "pending_reboot": False,
        "boot_id": None,
        "faults": {"installer_fail": False, "device_held": None},
    }


@contextlib.contextmanager
def locked():
    """Exclusive lock on the state (installers and tools may run at the same time)."""
    target = state_path()
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target + ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def load():
    target = state_path()
    if not os.path.exists(target):
        state = default_state()
        save(state)
        return state
    with open(target) as handle:
        return json.load(handle)


def save(state):
    target = state_path()
    os.makedirs(os.path.dirname(target), exist_ok=True)
    tmp = target + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(state, handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, target)


def apply_reboot(state):
    """What a reboot does to the hardware: newly installed driver/firmware become the running ones."""
    state["running"]["driver"] = state["software"].get("driver")
    if state["software"].get("firmware"):
        state["running"]["firmware"] = state["software"]["firmware"]
    state["pending_reboot"] = False
    state["boot_id"] = current_boot_id()
    for card in state["npus"]:
        for chip in card["chips"]:
            chip["processes"] = []
    # at boot the driver applies the persisted NIC configuration (/etc/hccn.conf)
    from atlas_sim import hccn_tool
    try:
        with open(path(hccn_tool.HCCN_CONF)) as handle:
            entries = hccn_tool.parse_conf(handle.read())
    except OSError:
        entries = []
    # factory NIC settings, then every persisted key (address, gateway, netdetect, mtu, PFC bitmap, prio_tc,
    # dscp_tc, tls_enable) as hccn_tool's recovery applies them
    hccn_tool.apply_conf(state, entries)
    return state


def refresh(state):
    """Notice a reboot that happened without the boot hook (container restarted): apply it."""
    if state.get("pending_reboot") and state.get("boot_id") and state["boot_id"] != current_boot_id():
        apply_reboot(state)
        save(state)
    return state


def copy_state(state):
    return copy.deepcopy(state)
