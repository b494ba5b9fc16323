"""Kernel tier: the GDN layer's math on real tensors, following a schedule the sim tier produced.

``backends`` (torch reference, vLLM's CPU ops, FLA's Triton kernels), ``layer`` (seeded inputs), ``executor``
(``KernelExecutor``), ``schedule`` (schedule files), ``conformance``, ``checkpoint`` (Mamba2's export kernel),
``probe`` (which Triton kernels run under the interpreter)."""

from workers.kernels.backends import BACKENDS, Backend, BackendUnavailable, backend_status, get_backend
from workers.kernels.conformance import check_conformance, kernel_conformance_one_input
from workers.kernels.executor import KernelExecutor, KernelReport
from workers.kernels.schedule import ScheduleEntry, read_schedule, write_schedule

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendUnavailable",
    "KernelExecutor",
    "KernelReport",
    "ScheduleEntry",
    "backend_status",
    "check_conformance",
    "get_backend",
    "kernel_conformance_one_input",
    "read_schedule",
    "write_schedule",
]
