"""The kernel harness on the CPU emulation of the CUDA kernels (`cuda_build.build_emulated_library`).

`HostMemory` stands in for `_cuda_device.Device` (host buffers, 256-byte aligned like cudaMalloc's; fresh
buffers filled with 0xFF bytes, NaN as float32, so an output a kernel fails to write shows up), and
`EmulatedKernels` is `Kernels` on the emulated library, with its launch log and fault messages.

Example:
    kernels = EmulatedKernels(build_emulated_library())
    memory = HostMemory()
    first_bad = memory.empty(16)
    kernels.bag_check(memory.put(rows), memory.put(cols), n, samples, vocab, first_bad)
    kernels.launched()  # ["fill_first_bad", "check_entries"]
"""

from __future__ import annotations

import ctypes

import numpy as np

from benchmarks._cuda_device import Buffer
from benchmarks._cuda_kernels import Kernels

__all__ = ["EmulatedKernels", "HostMemory"]

_ALIGNMENT = 256
POISON = 0xFF


class HostMemory:
    """Host buffers with the `Device` methods the harness uses (put, empty, get, fill_zero, copy, synchronize)."""

    name = "CPU emulation"

    def _allocate(self, nbytes: int) -> Buffer:
        nbytes = max(int(nbytes), 1)
        raw = np.full(nbytes + _ALIGNMENT, POISON, np.uint8)
        start = -raw.ctypes.data % _ALIGNMENT
        view = raw[start : start + nbytes]
        return Buffer(view, view.ctypes.data, nbytes)

    def put(self, array: np.ndarray) -> Buffer:
        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        buffer = self._allocate(data.nbytes)
        buffer.handle[: data.nbytes] = data
        return buffer

    def empty(self, nbytes: int) -> Buffer:
        return self._allocate(nbytes)

    def get(self, buffer: Buffer, dtype, shape) -> np.ndarray:
        count = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return buffer.handle[:count].copy().view(dtype).reshape(shape)

    def fill_zero(self, buffer: Buffer) -> None:
        buffer.handle[:] = 0

    def copy(self, dst: Buffer, src: Buffer) -> None:
        dst.handle[: src.nbytes] = src.handle

    def synchronize(self) -> None:
        """Launches run to completion before they return."""


class EmulatedKernels(Kernels):
    """`Kernels` on the emulated library: errors carry the emulation's fault message; `launched()` lists kernels."""

    def __init__(self, path):
        super().__init__(path)
        self.lib.cuda_on_cpu_launches.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        self.lib.cuda_on_cpu_launches.restype = ctypes.c_size_t
        self.lib.cuda_on_cpu_fault.restype = ctypes.c_char_p
        self.lib.cuda_on_cpu_set_order.argtypes = [ctypes.c_int]

    def _call(self, name: str, *args) -> None:
        status = getattr(self.lib, name)(*args)
        if status != 0:
            fault = self.fault()
            raise RuntimeError(f"{name} returned status {status}" + (f": {fault}" if fault else ""))

    def reset(self, descending: bool = False) -> None:
        """Clears the launch log and errors; threads and blocks then run in descending order when asked."""
        self.lib.cuda_on_cpu_reset()
        self.lib.cuda_on_cpu_set_order(int(descending))

    def launches(self) -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
        """(kernel, grid, block) of each launch since the last reset; a CUB call's grid is (items it ran over,)."""
        size = self.lib.cuda_on_cpu_launches(None, 0)
        text = ctypes.create_string_buffer(size + 1)
        self.lib.cuda_on_cpu_launches(text, size + 1)
        rows = []
        for line in text.value.decode().splitlines():
            name, _, shape = line.partition("\t")
            grid, _, block = shape.partition("\t")
            dims = (tuple(int(v) for v in grid.split(",")) if grid else (),
                    tuple(int(v) for v in block.split(",")) if block else ())
            rows.append((name, *dims))
        return rows

    def launched(self) -> list[str]:
        """The names of the kernels (and CUB calls) launched since the last reset, in order."""
        return [name for name, _, _ in self.launches()]

    def fault(self) -> str:
        """Why the last faulting launch stopped ("" when none did)."""
        return self.lib.cuda_on_cpu_fault().decode()
