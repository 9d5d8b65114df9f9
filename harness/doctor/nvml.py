"""The one NVML reader of the doctor: device 0's count, utilization and memory, through
pynvml when it is installed, else through ctypes with the calls the 5.0 trainer makes, every
return code checked. Both the `nvml` probe (gpu.py) and `gpu:nvml-values` (torchgpu.py) read
through `open_nvml`; each calls it in a child interpreter, since a broken driver stack can
hang or crash inside nvmlInit.

    with open_nvml() as nvml:          # NvmlAbsent: no library; NvmlError: init failed
        nvml.utilization(nvml.handle(0))
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol


class NvmlError(Exception):
    """An NVML call failed (its message names the call and the return code)."""


class NvmlAbsent(NvmlError):
    """The NVML library cannot be loaded at all."""


@dataclass(frozen=True)
class Utilization:
    gpu: int  # percent
    memory: int  # percent of time the memory was read or written


@dataclass(frozen=True)
class Memory:
    used: int  # bytes
    total: int


class Nvml(Protocol):
    """An initialized NVML, through one binding."""

    binding: str  # "pynvml" | "ctypes"

    def device_count(self) -> int: ...
    def handle(self, index: int) -> object: ...
    def utilization(self, handle: object) -> Utilization: ...
    def memory(self, handle: object) -> Memory: ...


def binding() -> str:
    """The binding `open_nvml` uses here."""
    return "pynvml" if _pynvml() is not None else "ctypes"


@contextlib.contextmanager
def open_nvml() -> Iterator[Nvml]:
    """NVML initialized (NvmlAbsent, NvmlError otherwise), shut down on the way out."""
    module = _pynvml()
    nvml: _PynvmlNvml | _CtypesNvml = (
        _PynvmlNvml(module) if module is not None else _CtypesNvml.load()
    )
    nvml.init()
    try:
        yield nvml
    finally:
        nvml.shutdown()


def _pynvml() -> ModuleType | None:
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None


class _PynvmlNvml:
    binding = "pynvml"

    def __init__(self, module: ModuleType) -> None:
        self.m = module

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self.m, name)(*args)
        except self.m.NVMLError as exc:
            if type(exc).__name__ == "NVMLError_LibraryNotFound":
                raise NvmlAbsent(f"{name}: {exc}") from None
            raise NvmlError(f"{name}: {type(exc).__name__}: {exc}") from None

    def init(self) -> None:
        self._call("nvmlInit")

    def shutdown(self) -> None:
        with contextlib.suppress(Exception):
            self.m.nvmlShutdown()

    def device_count(self) -> int:
        return int(self._call("nvmlDeviceGetCount"))

    def handle(self, index: int) -> object:
        return self._call("nvmlDeviceGetHandleByIndex", index)

    def utilization(self, handle: object) -> Utilization:
        rates = self._call("nvmlDeviceGetUtilizationRates", handle)
        return Utilization(int(rates.gpu), int(rates.memory))

    def memory(self, handle: object) -> Memory:
        mem = self._call("nvmlDeviceGetMemoryInfo", handle)
        return Memory(int(mem.used), int(mem.total))


class _CUtilization(ctypes.Structure):
    _fields_ = (("gpu", ctypes.c_uint), ("memory", ctypes.c_uint))


class _CMemory(ctypes.Structure):
    _fields_ = (
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    )


class _CtypesNvml:
    """The calls the 5.0 trainer makes; a partial library (a symbol missing) is an error of
    the call that needs it, not of the whole library."""

    binding = "ctypes"

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib

    @classmethod
    def load(cls) -> _CtypesNvml:
        try:
            return cls(ctypes.CDLL("libnvidia-ml.so.1"))
        except OSError as exc:
            raise NvmlAbsent(str(exc)) from None

    def _call(self, name: str, *args: Any) -> None:
        fn = getattr(self.lib, name, None)
        if fn is None:
            raise NvmlError(f"{name} missing from libnvidia-ml")
        rc = int(fn(*args))
        if rc != 0:
            raise NvmlError(f"{name} returned {rc} ({self._error(rc)})")

    def _error(self, rc: int) -> str:
        fn = getattr(self.lib, "nvmlErrorString", None)
        if fn is None:
            return "no nvmlErrorString"
        fn.restype = ctypes.c_char_p
        text = fn(rc)
        return text.decode("utf-8", "replace") if isinstance(text, bytes) else "?"

    def init(self) -> None:
        self._call("nvmlInit_v2")

    def shutdown(self) -> None:
        with contextlib.suppress(NvmlError):
            self._call("nvmlShutdown")

    def device_count(self) -> int:
        count = ctypes.c_uint(0)
        self._call("nvmlDeviceGetCount_v2", ctypes.byref(count))
        return int(count.value)

    def handle(self, index: int) -> object:
        handle = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(handle))
        return handle

    def utilization(self, handle: object) -> Utilization:
        rates = _CUtilization()
        self._call("nvmlDeviceGetUtilizationRates", handle, ctypes.byref(rates))
        return Utilization(int(rates.gpu), int(rates.memory))

    def memory(self, handle: object) -> Memory:
        mem = _CMemory()
        self._call("nvmlDeviceGetMemoryInfo", handle, ctypes.byref(mem))
        return Memory(int(mem.used), int(mem.total))
