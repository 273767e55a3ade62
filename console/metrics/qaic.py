"""The QAIC card's telemetry from ``qaic-util -q``: status, NSPs in use, memory, networks, temperature and power.

Devices are read by :mod:`backend_model.contract.devices` from ``qaic-util -q`` as it really prints (published outputs
of Platform SDK 1.5 and 1.6): ``Dram Total/Free``, ``Nsp Total/Free`` and ``Networks Active`` are its own lines.
Those SDKs print no power or temperature; newer ones may (``-t``), and no sample of them was found, so a power or
temperature line is read by keyword (the first number on a line whose key names ``power``/``temp``) and said
:data:`UNVERIFIED` until checked on a card. The tool is run without a shell; no card here means "no card".
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field

from backend_model.contract.devices import Device, parse, query

__all__ = ["UNVERIFIED", "CardReading", "CardSampler", "Device", "card_line", "parse", "query"]
UNVERIFIED = ("unverified: the power and temperature lines are read by keyword (no published qaic-util output "
              "shows them)")
NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
SAMPLE_S = 1.0


def _keyword(device: Device, word: str) -> float | None:
    """The first number of the first field whose key holds ``word`` (case-insensitive): power, temperature."""
    for key, text in device.fields.items():
        found = NUMBER.search(text) if word in key.lower() else None
        if found:
            return float(found.group())
    return None


def power_w(device: Device) -> float | None:
    return _keyword(device, "power")


def temperature_c(device: Device) -> float | None:
    return _keyword(device, "temp")


def nsp_in_use(device: Device) -> float | None:
    """NSPs taken by loaded programs, as a fraction of the device's (the nearest to a utilization qaic-util gives)."""
    total, free = device.nsp_total, device.nsp_free
    return (total - free) / total if total and free is not None else None


def memory_in_use(device: Device) -> float | None:
    total, free = device.dram_total_mb, device.dram_free_mb
    return (total - free) / total if total and free is not None else None


@dataclass
class CardReading:
    """What the card did over a window: mean power, peak temperature, mean NSP and memory use (None: not read)."""

    note: str
    samples: int = 0
    power_w: float | None = None
    temperature_c: float | None = None
    nsp_in_use: float | None = None
    memory_in_use: float | None = None
    statuses: list[str] = field(default_factory=list)

    def energy_j(self, seconds: float) -> float | None:
        return self.power_w * seconds if self.power_w is not None and seconds > 0 else None

    def as_dict(self) -> dict[str, object]:
        return {"note": self.note, "samples": self.samples, "power_w": self.power_w,
                "temperature_c": self.temperature_c, "nsp_in_use": self.nsp_in_use,
                "memory_in_use": self.memory_in_use, "statuses": self.statuses}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


class CardSampler:
    """Reads ``qaic-util -q`` every ``interval`` s from :meth:`start` to :meth:`stop` (a bench level)."""

    def __init__(self, interval: float = SAMPLE_S) -> None:
        self.interval = interval
        self._readings: list[list[Device]] = []
        self._note = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> CardSampler:
        self._readings, self._note = [], ""
        self._stop.clear()
        devices, self._note = query()
        if devices:
            self._readings.append(devices)
            self._thread = threading.Thread(target=self._loop, name="qc-qaic-util", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            devices, _ = query()
            if devices:
                self._readings.append(devices)

    def stop(self) -> CardReading:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30.0)
            self._thread = None
        readings = self._readings
        if not readings:
            return CardReading(self._note)
        powers = [sum(p for p in map(power_w, devices) if p is not None) for devices in readings
                  if any(power_w(d) is not None for d in devices)]
        temps = [t for devices in readings for t in map(temperature_c, devices) if t is not None]
        nsp = [u for devices in readings for u in map(nsp_in_use, devices) if u is not None]
        memory = [u for devices in readings for u in map(memory_in_use, devices) if u is not None]
        return CardReading(self._note, len(readings), _mean(powers), max(temps) if temps else None, _mean(nsp),
                           _mean(memory), sorted({d.status for d in readings[-1]}))


def card_line(devices: list[Device], note: str) -> str:
    """The devices in one line (``QID 0 Ready · NSPs 50% · DRAM 20% · 1 network``, power and temperature when
    qaic-util prints them, labelled unverified), or why there are none."""
    if not devices:
        return note
    parts, unverified = [], False
    for d in devices:
        nsp, memory, power, temp = nsp_in_use(d), memory_in_use(d), power_w(d), temperature_c(d)
        unverified = unverified or power is not None or temp is not None
        figures = [f"NSPs {nsp:.0%}" if nsp is not None else "", f"DRAM {memory:.0%}" if memory is not None else "",
                   f"{d.networks_active} network{'s' * (d.networks_active != 1)}"
                   if d.networks_active is not None else "",
                   f"{power:g} W" if power is not None else "", f"{temp:g} °C" if temp is not None else ""]
        parts.append(" · ".join([f"QID {d.qid} {d.status}", *filter(None, figures)]))
    return f"{'; '.join(parts)} ({note}{'; ' + UNVERIFIED if unverified else ''})"
