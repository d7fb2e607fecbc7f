"""Device memory and CUDA-event timing for the kernel harness, through PyTorch or CuPy (whichever is there).

Buffers are raw bytes on the current CUDA device; the harness moves numpy
arrays in and out and hands the kernels their addresses through ctypes, so
the same code runs with either library. Kernels and library calls all go to
the legacy default stream (address 0), where both libraries' default work
runs too.
"""

from __future__ import annotations

import subprocess

import numpy as np

__all__ = ["Buffer", "Device", "find_device"]


class Buffer:
    """`nbytes` of device memory at `ptr`; `handle` is the library's array that owns it."""

    def __init__(self, handle, ptr: int, nbytes: int):
        self.handle, self.ptr, self.nbytes = handle, ptr, nbytes


class Device:
    """One CUDA device through `library` ("torch" or "cupy")."""

    def __init__(self, library: str, module):
        self.library = library
        self._m = module
        if library == "torch":
            props = module.cuda.get_device_properties(0)
            self.name = props.name
            self.capability = (props.major, props.minor)
            self.runtime = f"CUDA {module.version.cuda} (torch {module.__version__})"
        else:
            props = module.cuda.runtime.getDeviceProperties(0)
            self.name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
            self.capability = (props["major"], props["minor"])
            version = module.cuda.runtime.runtimeGetVersion()
            self.runtime = f"CUDA {version // 1000}.{version % 1000 // 10} (cupy {module.__version__})"
        self.driver = _driver_version()

    @property
    def arch(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"

    def put(self, array: np.ndarray) -> Buffer:
        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        if self.library == "torch":
            handle = self._m.from_numpy(raw.copy()).cuda()
            return Buffer(handle, handle.data_ptr(), raw.nbytes)
        handle = self._m.asarray(raw)
        return Buffer(handle, handle.data.ptr, raw.nbytes)

    def empty(self, nbytes: int) -> Buffer:
        nbytes = max(int(nbytes), 1)
        if self.library == "torch":
            handle = self._m.empty(nbytes, dtype=self._m.uint8, device="cuda")
            return Buffer(handle, handle.data_ptr(), nbytes)
        handle = self._m.empty(nbytes, dtype=self._m.uint8)
        return Buffer(handle, handle.data.ptr, nbytes)

    def get(self, buffer: Buffer, dtype, shape) -> np.ndarray:
        count = int(np.prod(shape)) * np.dtype(dtype).itemsize
        raw = buffer.handle.cpu().numpy() if self.library == "torch" else self._m.asnumpy(buffer.handle)
        return raw[:count].view(dtype).reshape(shape)

    def fill_zero(self, buffer: Buffer) -> None:
        if self.library == "torch":
            buffer.handle.zero_()
        else:
            buffer.handle.fill(0)

    def copy(self, dst: Buffer, src: Buffer) -> None:
        if self.library == "torch":
            dst.handle.copy_(src.handle)
        else:
            self._m.copyto(dst.handle, src.handle)

    def synchronize(self) -> None:
        if self.library == "torch":
            self._m.cuda.synchronize()
        else:
            self._m.cuda.runtime.deviceSynchronize()

    def event(self):
        """A CUDA event with `record()`, `synchronize()` and `elapsed_ms(later)`."""
        return _Event(self.library, self._m)


class _Event:
    def __init__(self, library, module):
        self._torch = library == "torch"
        self._e = module.cuda.Event(enable_timing=True) if self._torch else module.cuda.Event()
        self._m = module

    def record(self) -> None:
        self._e.record()

    def synchronize(self) -> None:
        self._e.synchronize()

    def elapsed_ms(self, later: _Event) -> float:
        if self._torch:
            return self._e.elapsed_time(later._e)
        return self._m.cuda.get_elapsed_time(self._e, later._e)


def _driver_version() -> str:
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=False,
        )
        return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def find_device() -> Device | None:
    """The first CUDA device through torch, else CuPy; None when neither sees one."""
    try:
        import torch

        if torch.cuda.is_available():
            return Device("torch", torch)
    except ImportError:
        pass
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return Device("cupy", cupy)
    except Exception:  # CuPy raises its own runtime errors when no driver is present
        pass
    return None
