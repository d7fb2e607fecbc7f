"""The native library's plain C functions for tests that call them through ctypes."""

import pytest

from ops import _native


def native_function(name: str, argtypes: list, restype):
    """The C function `name` of the native library with its signature; the test is skipped where it is not built.

    Example:
      >>> extend = native_function("sparseflow_crc32c_extend", [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_int64],
      ...                          ctypes.c_uint32)  # doctest: +SKIP
    """
    library = _native.ctypes_library()
    if library is None or not hasattr(library, name):
        pytest.skip("the native kernels are not built here")
    function = getattr(library, name)
    function.argtypes = argtypes
    function.restype = restype
    return function
