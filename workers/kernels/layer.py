"""A seeded GDN layer: token ids in, per-token kernel inputs out, and the state shapes.

Invariant: every tensor is a deterministic function of ``(LayerShape, seed)`` and the token ids, on any machine.
Nothing here imports vLLM."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fuzz.model.scenario import VOCAB_SIZE


@dataclass(frozen=True)
class LayerShape:
    """Head geometry; the default is what vLLM's CPU GDN kernel accepts (K = V = 128, GVA 1:2)."""

    num_k_heads: int = 1
    num_v_heads: int = 2
    head_k: int = 128
    head_v: int = 128
    conv_width: int = 4
    hidden: int = 64

    @property
    def conv_dim(self) -> int:
        return 2 * self.num_k_heads * self.head_k + self.num_v_heads * self.head_v

    def ssm_shape(self, n: int) -> tuple[int, ...]:
        """SSM states: one ``[K, V]`` matrix per value head (``S^T k`` retrieves a value)."""
        return (n, self.num_v_heads, self.head_k, self.head_v)

    def conv_shape(self, n: int) -> tuple[int, ...]:
        """Conv states: the last ``width - 1`` pre-conv inputs, channel-major."""
        return (n, self.conv_dim, self.conv_width - 1)

    def state_bytes(self, dtype: torch.dtype = torch.float32) -> int:
        size = torch.empty((), dtype=dtype).element_size()
        return size * (self.num_v_heads * self.head_k * self.head_v + self.conv_dim * (self.conv_width - 1))


DEFAULT_SHAPE = LayerShape()


@dataclass
class LayerInputs:
    """Per-token inputs of a varlen batch: ``x`` (pre-conv q|k|v), gate input ``a``, beta input ``b``."""

    x: torch.Tensor  # [T, conv_dim]
    a: torch.Tensor  # [T, HV]
    b: torch.Tensor  # [T, HV]


class SeededLayer:
    """Embedding table, input projections, conv weights and gate parameters drawn from one seed."""

    def __init__(self, shape: LayerShape = DEFAULT_SHAPE, seed: int = 0):
        self.shape = shape
        gen = torch.Generator().manual_seed(seed)

        def draw(*size: int, scale: float) -> torch.Tensor:
            return torch.randn(*size, generator=gen, dtype=torch.float32) * scale

        s = shape
        self.embedding = draw(VOCAB_SIZE, s.hidden, scale=1.0)
        self.w_x = draw(s.hidden, s.conv_dim, scale=s.hidden**-0.5)
        self.w_a = draw(s.hidden, s.num_v_heads, scale=s.hidden**-0.5)
        self.w_b = draw(s.hidden, s.num_v_heads, scale=s.hidden**-0.5)
        self.conv_weight = draw(s.conv_dim, s.conv_width, scale=s.conv_width**-0.5)
        self.conv_bias = draw(s.conv_dim, scale=0.1)
        # A_log and dt_bias as Qwen3-Next initialises them: decays spread over (0, 1).
        self.A_log = torch.log(torch.empty(s.num_v_heads).uniform_(1.0, 16.0, generator=gen))
        self.dt_bias = draw(s.num_v_heads, scale=0.5) - 2.0

    def inputs(self, tokens: list[int] | torch.Tensor) -> LayerInputs:
        ids = torch.as_tensor(tokens, dtype=torch.long) % VOCAB_SIZE
        h = self.embedding[ids]
        return LayerInputs(x=h @ self.w_x, a=h @ self.w_a, b=h @ self.w_b)

    def split_qkv(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Post-conv ``[T, conv_dim]`` -> q ``[T, H, K]``, k ``[T, H, K]``, v ``[T, HV, V]``."""
        s = self.shape
        nk = s.num_k_heads * s.head_k
        q, k, v = torch.split(y, [nk, nk, s.num_v_heads * s.head_v], dim=-1)
        t = y.shape[0]
        return q.reshape(t, s.num_k_heads, s.head_k), k.reshape(t, s.num_k_heads, s.head_k), v.reshape(
            t, s.num_v_heads, s.head_v
        )
