"""The QAIC card's telemetry from ``qaic-util -q``: status, NSPs in use, memory, temperature and power per device.

``qaic-util -q`` lists each device (``QID n``) with one ``Key:Value`` per line below it; Qualcomm's documentation
shows that layout with its ``Status``, ``MHI ID`` and ``PCI Address`` lines (and names ``Nsp``, ``temperature`` and
``power`` as keywords to grep for), but no sample of the telemetry lines themselves. So those are read by keyword
(the first number on a line whose key names ``nsp``/``dram``/``temp``/``power``) and every reading says
:data:`UNVERIFIED` until checked on a card. The tool is run without a shell; no card here means "no card".
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass, field

TOOL = "qaic-util"
TOOL_PATH = "/opt/qti-aic/tools/qaic-util"
UNVERIFIED = ("unverified: qaic-util's power, temperature, memory and NSP lines are read by keyword (Qualcomm's "
              "documentation shows no sample of them)")
NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
SAMPLE_S = 1.0


def _number(text: str) -> float | None:
    found = NUMBER.search(text)
    return float(found.group()) if found else None


@dataclass(frozen=True)
class Device:
    """One device (``QID``) as ``qaic-util -q`` lists it: its ``Key:Value`` lines, and what is read from them."""

    qid: int
    fields: dict[str, str]

    def _find(self, *words: str) -> float | None:
        """The first number of the first field whose key holds every one of ``words`` (case-insensitive)."""
        for key, text in self.fields.items():
            if all(w in key.lower() for w in words):
                number = _number(text)
                if number is not None:
                    return number
        return None

    @property
    def status(self) -> str:
        return self.fields.get("Status", "unknown")

    @property
    def nsp_in_use(self) -> float | None:
        """NSPs taken by loaded programs, as a fraction of the device's (the nearest to a utilization qaic-util
        gives)."""
        total, free = self._find("nsp", "total"), self._find("nsp", "free")
        return (total - free) / total if total and free is not None else None

    @property
    def memory_in_use(self) -> float | None:
        total, free = self._find("dram", "total"), self._find("dram", "free")
        return (total - free) / total if total and free is not None else None

    @property
    def temperature_c(self) -> float | None:
        return self._find("temp")

    @property
    def power_w(self) -> float | None:
        return self._find("power")


def parse(text: str) -> list[Device]:
    """The devices of a ``qaic-util -q`` output (lines before the first ``QID`` are ignored)."""
    devices: list[Device] = []
    fields: dict[str, str] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        head = re.fullmatch(r"QID\s+(\d+)", stripped)
        if head:
            fields = {}
            devices.append(Device(int(head.group(1)), fields))
        elif fields is not None and ":" in stripped:
            key, _, value = stripped.partition(":")
            fields.setdefault(key.strip(), value.strip())
    return devices


def find_tool() -> str | None:
    """``qaic-util`` on PATH or where the Platform SDK installs it."""
    return shutil.which(TOOL) or (TOOL_PATH if os.access(TOOL_PATH, os.X_OK) else None)


def query(timeout: float = 10.0) -> tuple[list[Device], str]:
    """The devices now and a note ("no card: ..." when there is none to read)."""
    tool = find_tool()
    if tool is None:
        return [], "no card: qaic-util not found"
    try:
        done = subprocess.run([tool, "-q"], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"no card reading: {tool} -q failed ({type(exc).__name__})"
    devices = parse(done.stdout)
    if not devices:
        return [], f"no card: {tool} -q listed no device (exit code {done.returncode})"
    return devices, UNVERIFIED


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
        powers = [sum(p for p in (d.power_w for d in devices) if p is not None) for devices in readings
                  if any(d.power_w is not None for d in devices)]
        temps = [t for devices in readings for t in (d.temperature_c for d in devices) if t is not None]
        nsp = [u for devices in readings for u in (d.nsp_in_use for d in devices) if u is not None]
        memory = [u for devices in readings for u in (d.memory_in_use for d in devices) if u is not None]
        return CardReading(self._note, len(readings), _mean(powers), max(temps) if temps else None, _mean(nsp),
                           _mean(memory), sorted({d.status for d in readings[-1]}))


def card_line(devices: list[Device], note: str) -> str:
    """The devices in one line (``QID 0 Ready · NSPs 50% · 41 W · 55 °C``), or why there are none."""
    if not devices:
        return note
    parts = []
    for d in devices:
        figures = [f"NSPs {d.nsp_in_use:.0%}" if d.nsp_in_use is not None else "",
                   f"{d.power_w:g} W" if d.power_w is not None else "",
                   f"{d.temperature_c:g} °C" if d.temperature_c is not None else ""]
        parts.append(" · ".join([f"QID {d.qid} {d.status}", *filter(None, figures)]))
    return f"{'; '.join(parts)} ({note})"
