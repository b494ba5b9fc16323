"""Kernel conformance: backends agree with a float64 reference, and with themselves across chunkings.

Each check compares a run with the float64 torch reference in one chunk from the zero state (outputs and final
states, ``max |x - ref| / max |ref|``): ``one-shot`` (chunked), ``recurrent``, and ``resumed`` (cut sequences run
round by round as varlen batches from the previous round's states). Every error stays within ``tolerance``."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import torch

from fuzz.model.scenario import VOCAB_SIZE
from workers.kernels.backends import Backend, TorchBackend, get_backend
from workers.kernels.layer import DEFAULT_SHAPE, LayerShape, SeededLayer

MAX_FUZZ_LENGTH = 200
LAYER_SEEDS = 4  # fuzzed cases draw one of this many layers (each holds an 8 MB embedding table)


@dataclass
class ConformanceCase:
    """Sequences (token ids), per-sequence cut points, and per-round kernel choice (True: chunked)."""

    sequences: list[list[int]]
    cuts: list[list[int]]
    rounds_chunked: list[bool]
    layer_seed: int = 0


@dataclass
class ConformanceReport:
    backend: str
    tolerance: float
    errors: dict[str, float] = field(default_factory=dict)  # check -> worst relative error

    @property
    def worst(self) -> float:
        return max(self.errors.values(), default=0.0)

    def failures(self) -> dict[str, float]:
        return {k: v for k, v in self.errors.items() if not v <= self.tolerance}


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.cpu() - want.cpu()).abs().max() / want.abs().max().clamp_min(1e-12))


class _Runner:
    """conv1d + GDN on one backend over varlen batches with explicit states."""

    def __init__(self, backend: Backend, layer: SeededLayer):
        self.backend, self.layer, self.shape = backend, layer, layer.shape
        dev = backend.device
        self.params = [getattr(layer, n).to(dev) for n in ("conv_weight", "conv_bias", "A_log", "dt_bias")]

    def zero_states(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        dev = self.backend.device
        return torch.zeros(self.shape.conv_shape(n), device=dev), torch.zeros(self.shape.ssm_shape(n), device=dev)

    def run(self, pieces: list[list[int]], conv0, ssm0, chunked: bool):
        dev = self.backend.device
        cu = torch.tensor([0] + [len(p) for p in pieces]).cumsum(0).to(torch.int32)
        inputs = self.layer.inputs([t for p in pieces for t in p])
        x, a, b = (t.to(dev) for t in (inputs.x, inputs.a, inputs.b))
        weight, bias, A_log, dt_bias = self.params
        y, conv1 = self.backend.conv1d(x, weight, bias, conv0, cu)
        q, k, v = self.layer.split_qkv(y)
        kernel = self.backend.gdn_chunked if chunked else self.backend.gdn_recurrent
        o, ssm1 = kernel(q, k, v, a, b, A_log, dt_bias, ssm0, cu)
        return o, conv1, ssm1, cu.tolist()


def _one_shot(runner: _Runner, sequences: list[list[int]], chunked: bool = True):
    return runner.run(sequences, *runner.zero_states(len(sequences)), chunked)


def _resumed(runner: _Runner, case: ConformanceCase) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Run every sequence piece by piece; returns per-sequence outputs and final (conv, ssm) states."""
    bounds = [[0, *sorted({c for c in cuts if 0 < c < len(seq)}), len(seq)] for seq, cuts in zip(case.sequences, case.cuts, strict=True)]
    conv, ssm = runner.zero_states(len(case.sequences))
    outs: list[list[torch.Tensor]] = [[] for _ in case.sequences]
    for r in range(max(len(b) - 1 for b in bounds)):
        live = [i for i, b in enumerate(bounds) if r + 1 < len(b)]
        pieces = [case.sequences[i][bounds[i][r] : bounds[i][r + 1]] for i in live]
        chunked = case.rounds_chunked[r % len(case.rounds_chunked)] if case.rounds_chunked else True
        o, conv1, ssm1, cu = runner.run(pieces, conv[live], ssm[live], chunked)
        for j, i in enumerate(live):
            outs[i].append(o[cu[j] : cu[j + 1]])
        conv[live], ssm[live] = conv1.to(conv.dtype), ssm1.to(ssm.dtype)
    return [torch.cat(o) for o in outs], conv, ssm


@lru_cache(maxsize=LAYER_SEEDS)
def _layer(shape: LayerShape, seed: int) -> SeededLayer:
    return SeededLayer(shape, seed)


def check_conformance(backend: Backend, case: ConformanceCase, shape: LayerShape = DEFAULT_SHAPE) -> ConformanceReport:
    """All three checks of ``backend`` on ``case`` against the float64 reference."""
    layer = _layer(shape, case.layer_seed)
    ref_o, ref_conv, ref_ssm, _ = _one_shot(_Runner(TorchBackend(torch.float64), layer), case.sequences)
    runner = _Runner(backend, layer)
    report = ConformanceReport(backend.name, backend.tolerance)
    for name, chunked in (("one-shot", True), ("recurrent", False)):
        o, conv, ssm, _ = _one_shot(runner, case.sequences, chunked)
        report.errors[f"{name} outputs"] = _rel(o, ref_o)
        report.errors[f"{name} ssm states"] = _rel(ssm, ref_ssm)
        report.errors[f"{name} conv states"] = _rel(conv, ref_conv)
    outs, conv, ssm = _resumed(runner, case)
    report.errors["resumed outputs"] = _rel(torch.cat(outs), ref_o)
    report.errors["resumed ssm states"] = _rel(ssm, ref_ssm)
    report.errors["resumed conv states"] = _rel(conv, ref_conv)
    return report


def decode_case(data: bytes) -> ConformanceCase:
    """Fuzzer bytes -> a case: 1-3 sequences of 1-200 tokens, up to 3 cuts each, round kinds, seeds."""
    stream = iter(data)

    def byte() -> int:
        return next(stream, 0)

    count = 1 + byte() % 3
    lengths = [1 + (byte() | byte() << 8) % MAX_FUZZ_LENGTH for _ in range(count)]
    token_seed = byte() | byte() << 8
    gen = torch.Generator().manual_seed(token_seed)
    sequences = [torch.randint(1, VOCAB_SIZE, (n,), generator=gen).tolist() for n in lengths]
    cuts = [[(byte() | byte() << 8) % n for _ in range(byte() % 4)] for n in lengths]
    kinds = byte()
    return ConformanceCase(sequences, cuts, [bool(kinds >> i & 1) for i in range(4)], layer_seed=byte() % LAYER_SEEDS)


def kernel_conformance_one_input(data: bytes, backend: str | Backend = "torch") -> None:
    """Fuzz target: decode ``data`` into a case and assert conformance of ``backend``."""
    case = decode_case(data)
    report = check_conformance(get_backend(backend) if isinstance(backend, str) else backend, case)
    failures = report.failures()
    assert not failures, (
        f"{report.backend} exceeds tolerance {report.tolerance:g}: {failures} "
        f"(lengths {[len(s) for s in case.sequences]}, cuts {case.cuts}, rounds {case.rounds_chunked})"
    )
