"""Cloud AI 100 SoCs as ``qaic-util -q`` lists them, and the device groups a model's instances run on.

``qaic-util -q`` prints a few banner lines, then each SoC as ``QID n`` followed by one ``Key:Value`` line per field
(``Status:Ready``, ``PCI Address:0000:01:00.0``, ``Dram Total:32692 MB``, ``Nsp Free:16``, ``Networks Active:0``,
``Board serial:PN471-12-343016``; read from published outputs of Platform SDK 1.5 and 1.6). A device group is the
SoCs one model instance opens: ``"0,1,2,3;4,5,6,7"`` is two instances of four SoCs each, and a QPC compiled with
``num_devices`` N (tensor slicing) runs on groups of exactly N.

Standard library only, and Python 3.8: the generator and the backend both import it. The tool runs without a
shell, found on PATH or where the Platform SDK installs it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, List

from .qpc import num_devices_of

TOOL = "qaic-util"
TOOL_PATH = "/opt/qti-aic/tools/qaic-util"
READY = "Ready"
PARAMETER = "device_groups"  # the config.pbtxt parameter holding the groups, as --device-groups writes them
_QID = re.compile(r"QID\s+(\d+)")
_INSTANCE = re.compile(r"_(\d+)$")
Groups = List[List[int]]  # typing names: evaluated at run time, so 3.8-safe


class DeviceError(ValueError):
    """Device groups that cannot be served (bad text, a QID twice, a size the QPC does not run on, ...)."""


def _int(text: str) -> int | None:
    found = re.match(r"\s*(\d+)", text or "")
    return int(found.group(1)) if found else None


@dataclass(frozen=True)
class Device:
    """One SoC (``QID``) as ``qaic-util -q`` lists it: its ``Key:Value`` lines as printed, and the fields read."""

    qid: int
    fields: dict[str, str]

    @property
    def status(self) -> str:
        return self.fields.get("Status", "unknown")

    @property
    def pci_address(self) -> str:
        return self.fields.get("PCI Address", "")

    @property
    def board_serial(self) -> str:
        """The board (card) serial; SoCs of one card share it (empty on an edge kit)."""
        return self.fields.get("Board serial", "")

    dram_total_mb = property(lambda self: _int(self.fields.get("Dram Total", "")))
    dram_free_mb = property(lambda self: _int(self.fields.get("Dram Free", "")))
    nsp_total = property(lambda self: _int(self.fields.get("Nsp Total", "")))
    nsp_free = property(lambda self: _int(self.fields.get("Nsp Free", "")))
    networks_active = property(lambda self: _int(self.fields.get("Networks Active", "")))

    def summary(self) -> str:
        """``Ready 0000:01:00.0 board PN471-12-343016 · DRAM 32692/32692 MB free · NSPs 16/16 free · 0 networks
        active``."""
        def free(what: str, have: int | None, total: int | None, unit: str = "") -> str:
            return f"{what} {have}/{total}{unit} free" if have is not None and total is not None else ""

        figures = [free("DRAM", self.dram_free_mb, self.dram_total_mb, " MB"), free("NSPs", self.nsp_free,
                   self.nsp_total), f"{self.networks_active} networks active" if self.networks_active is not None
                   else ""]
        board = f"board {self.board_serial}" if self.board_serial else "no board serial"
        head = " ".join(filter(None, [self.status, self.pci_address, board]))
        return " · ".join([head, *filter(None, figures)])


def parse(text: str) -> list[Device]:
    """The devices of a ``qaic-util -q`` output (the banner before the first ``QID`` is skipped)."""
    devices: list[Device] = []
    fields: dict[str, str] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        head = _QID.fullmatch(stripped)
        if head:
            fields = {}
            devices.append(Device(int(head.group(1)), fields))
        elif fields is not None and ":" in stripped:
            key, _, value = stripped.partition(":")
            fields.setdefault(key.strip(), value.strip())
    return devices


def find_tool() -> str | None:
    """``qaic-util`` on PATH, else where the Platform SDK installs it; None without either."""
    return shutil.which(TOOL) or (TOOL_PATH if os.access(TOOL_PATH, os.X_OK) else None)


def query(timeout: float = 10.0) -> tuple[list[Device], str]:
    """The devices now, and a note: where they were read, or why there are none ("no card: ...")."""
    tool = find_tool()
    if tool is None:
        return [], f"no card: {TOOL} not found (on PATH or at {TOOL_PATH})"
    try:
        done = subprocess.run([tool, "-q"], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"no card reading: {tool} -q failed ({type(exc).__name__})"
    devices = parse(done.stdout)
    if not devices:
        return [], f"no card: {tool} -q listed no device (exit code {done.returncode})"
    return devices, f"{tool} -q"


# --------------------------------------------------------------------------- device groups


def parse_groups(text: str) -> Groups:
    """``"0,1,2,3;4,5,6,7"`` -> ``[[0, 1, 2, 3], [4, 5, 6, 7]]`` ('' -> []); a QID in two groups is refused."""
    groups: Groups = []
    for part in (text or "").strip().split(";") if (text or "").strip() else []:
        ids = [p.strip() for p in part.split(",")]
        if not all(i.isdigit() for i in ids):
            raise DeviceError(f"device groups {text!r}: {part.strip()!r} is not a comma-separated list of QIDs "
                              "(e.g. \"0,1,2,3;4,5,6,7\": groups separated by ';')")
        groups.append([int(i) for i in ids])
    seen: dict[int, int] = {}
    for index, group in enumerate(groups):
        for qid in group:
            if qid in seen:
                where = "twice in group" if seen[qid] == index else f"in groups {seen[qid]} and"
                raise DeviceError(f"device groups {text!r}: QID {qid} is {where} {index}: a SoC serves one instance")
            seen[qid] = index
    return groups


def format_groups(groups: Groups) -> str:
    """The groups as ``--device-groups`` and the ``device_groups`` parameter write them."""
    return ";".join(",".join(str(qid) for qid in group) for group in groups)


def compiled_devices(aic_binary_dir: str, compiled: dict[str, Any]) -> tuple[int, str]:
    """(num_devices, where it was read): the QPC's own partition config when it has one, else the compile
    config's ``num_devices`` (its default 1)."""
    if aic_binary_dir:
        found = num_devices_of(aic_binary_dir)
        if found is not None:
            return found, f"the QPC {aic_binary_dir} was compiled for {found}"
    return int(compiled.get("num_devices") or 1), "compile_config.json num_devices"


def check_size(groups: Groups, num_devices: int, compiled_for: str) -> None:
    """Each group must hold exactly the SoCs the QPC runs on (``compiled_for`` says where ``num_devices`` came
    from); DeviceError naming both otherwise."""
    for index, group in enumerate(groups):
        if len(group) != num_devices:
            raise DeviceError(f"device group {index} ({format_groups([group])}) has {len(group)} SoC"
                              f"{'s' * (len(group) != 1)} but the model runs on num_devices {num_devices} "
                              f"({compiled_for}): give groups of {num_devices}")


def check_devices(groups: Groups, devices: list[Device]) -> list[str]:
    """Each group against the SoCs ``qaic-util`` lists: DeviceError when a QID is missing, not Ready or has
    programs on its NSPs; the warnings (a group across two board serials, naming them)."""
    by_qid = {d.qid: d for d in devices}
    warnings = []
    for index, group in enumerate(groups):
        for qid in group:
            device = by_qid.get(qid)
            if device is None:
                listed = ", ".join(str(q) for q in sorted(by_qid)) or "none"
                raise DeviceError(f"device group {index}: QID {qid} does not exist (qaic-util lists QIDs {listed})")
            if device.status != READY:
                raise DeviceError(f"device group {index}: QID {qid} is {device.status}, not {READY}")
            if device.nsp_free is not None and device.nsp_total is not None and device.nsp_free < device.nsp_total:
                raise DeviceError(f"device group {index}: QID {qid} has {device.nsp_free} of {device.nsp_total} NSPs "
                                  f"free ({device.networks_active} networks active): another program holds it")
        serials = sorted({by_qid[qid].board_serial for qid in group})
        if len(serials) > 1:
            warnings.append(f"warning: device group {index} ({format_groups([group])}) spans board serials "
                            f"{' and '.join(s or '(none)' for s in serials)}: keep a tensor-sliced group on one card")
    return warnings


def instance_index(instance_name: str) -> int:
    """Which instance of its model this is, from Triton's ``model_instance_name`` (``NAME_<group>_<index>``: the
    last number); 0 when the name carries none."""
    found = _INSTANCE.search(instance_name or "")
    return int(found.group(1)) if found else 0


def group_of(parameters: dict[str, str], instance_name: str, compiled: dict[str, Any]) -> tuple[list[int] | None, int]:
    """(the SoCs this instance opens, its index), decided here alone: the ``device_groups`` parameter's group for
    the instance Triton named (each group checked against the QPC's num_devices, ``compiled``: the model's compile
    config), or the older ``device_ids`` parameter (one list for every instance); (None, index) without either."""
    index = instance_index(instance_name)
    groups = parse_groups(parameters.get(PARAMETER, ""))
    if groups:
        check_size(groups, *compiled_devices(parameters.get("aic_binary_dir", "").strip(), compiled))
        if index >= len(groups):
            raise DeviceError(f"instance {instance_name} is number {index} but device_groups "
                              f"{format_groups(groups)} has {len(groups)}: set instance_group's count to "
                              f"{len(groups)}")
        return groups[index], index
    ids = parameters.get("device_ids", "").strip()
    if ids and not all(p.strip().isdigit() for p in ids.split(",")):
        raise DeviceError(f"parameter device_ids must be comma-separated QIDs, got {ids!r}")
    return ([int(p) for p in ids.split(",")] if ids else None), index


def review(groups: Groups, sized: tuple[int, str], listed: tuple[list[Device], str]) -> list[str]:
    """Everything known about ``groups`` before a model loads: each size against the QPC's num_devices
    (``sized``: :func:`compiled_devices`), then each QID against the SoCs ``listed`` (:func:`query`). DeviceError
    for what cannot serve; the notes for what may (a group across board serials; no qaic-util to check against)."""
    check_size(groups, *sized)
    found, where = listed
    if not found:
        return [f"note: device groups {format_groups(groups)} not checked against the SoCs ({where})"]
    return check_devices(groups, found)
