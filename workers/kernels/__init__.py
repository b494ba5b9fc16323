"""Kernel tier: the GDN layer's math on real tensors, following a schedule the sim tier produced.

- ``backends``: torch reference, vLLM's CPU ops, FLA's Triton kernels (on CUDA, or on CPU under Triton's
  interpreter: ``workers.triton_interpret``), one interface.
- ``layer``: seeded projections of token ids into kernel inputs.
- ``executor``: ``KernelExecutor.run(scenario, policy) -> RunResult`` and the replay itself.
- ``schedule``: schedule files, so machines without vLLM can replay sim runs.
- ``conformance``: backend vs reference and self-consistency checks; ``kernel_conformance_one_input``.
- ``checkpoint``: Mamba2's prefill checkpoint export kernel, for internal-checkpoint scenarios.
- ``probe``: which of vLLM's Triton kernels run under the interpreter, and what each workaround is for.
"""

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
