"""glibc's allocator set to keep freed memory for reuse while training on the CPU.

A training step allocates and frees the same large activation buffers every step. glibc serves a request above its
mmap threshold (128 KiB at start, raised by itself up to 32 MiB) with freshly mapped pages and unmaps them on free,
and hands the top of its heap back to the system above its trim threshold; each step then pays the kernel to map and
zero those pages again (page faults, seen as system time). PyTorch's CPU performance guide recommends an allocator
that keeps them (jemalloc or tcmalloc through ``LD_PRELOAD``), but neither comes with pip's torch and ``LD_PRELOAD``
must be set before the process starts; glibc's own ``mallopt`` can raise both thresholds at run time, which no
library wraps, hence this module. Measured with ``python -m benchmarks.host_memory`` (its results page).
"""
from __future__ import annotations

import ctypes
import platform

M_TRIM_THRESHOLD = -1  # glibc's malloc.h parameter numbers
M_MMAP_THRESHOLD = -3
KEEP_BYTES = 1 << 30  # requests up to 1 GiB come from the reusable heap, and up to 1 GiB of free top is kept


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds to :data:`KEEP_BYTES` for this process; True when both were set,
    False where the C library is not glibc (macOS, Windows, musl), which is left as it is."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL("libc.so.6")
    return all(libc.mallopt(parameter, ctypes.c_int(KEEP_BYTES)) == 1
               for parameter in (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD))
