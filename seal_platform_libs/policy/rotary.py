"""Rotary position embeddings in fewer passes over memory, with their own backward (``grpo.fused_rotary``).

transformers' ``apply_rotary_pos_emb`` computes ``x * cos + rotate_half(x) * sin`` with ``rotate_half(x) =
cat(-x2, x1)``: a negation, a concatenation and three full-size products and sums per tensor, and autograd's
backward of the slices and the concatenation allocates zero-filled gradients of the whole tensor and copies
into them. Measured on CPU (SmolLM2-135M, one packed row), that was several percent of a training step.

:func:`rotary` computes the same values (the same products and sums, rounded the same way: bit for bit the
forward of transformers' function) in three passes per half, and :class:`RotaryFunction`'s backward is the
transposed rotation (``dx1 = g1 c1 + g2 s2``, ``dx2 = g2 c2 - g1 s1``) in as many, saving only ``cos`` and
``sin``. :func:`use_fused_rotary` installs it in the modeling module of a model's attention layers when that
module's ``apply_rotary_pos_emb`` is the standard one (checked numerically on a small input; a module whose
rotation differs, e.g. partial or interleaved rotary, is left as it is).
"""

from __future__ import annotations

import sys
from typing import Any

import torch

# The functions use_fused_rotary replaced, by modeling module name (to restore them, or to compare with).
REPLACED: dict[str, Any] = {}


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, transpose: bool) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` (``transpose``: its transpose, the backward's rotation)."""
    half = x.shape[-1] // 2
    out = x * cos
    x1, x2 = x[..., :half], x[..., half:]
    s1, s2 = sin[..., :half], sin[..., half:]
    if transpose:  # d/dx of (x1 c1 - x2 s1, x2 c2 + x1 s2), applied to g = (g1, g2)
        out[..., :half].add_(x2 * s2)
        out[..., half:].sub_(x1 * s1)
    else:  # (x1 c1 + (-x2) s1, x2 c2 + x1 s2): (-x2) s1 = -(x2 s1) exactly, so sub_ rounds as the original
        out[..., :half].sub_(x2 * s1)
        out[..., half:].add_(x1 * s2)
    return out


class RotaryFunction(torch.autograd.Function):
    """``x * cos + rotate_half(x) * sin`` with the transposed rotation as its backward (no gradient for
    ``cos`` and ``sin``: transformers computes them from the positions without one)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(cos, sin)
        return _rotate(x, cos, sin, transpose=False)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        cos, sin = ctx.saved_tensors
        return _rotate(grad, cos, sin, transpose=True), None, None


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """:class:`RotaryFunction` where a gradient is needed, else the forward alone."""
    if torch.is_grad_enabled() and x.requires_grad:
        return RotaryFunction.apply(x, cos, sin)
    return _rotate(x, cos, sin, transpose=False)


def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         position_ids: Any = None, unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' ``apply_rotary_pos_emb`` (same signature and values) through :func:`rotary`. With ``cos``
    narrower than the heads (partial rotary: GPT-NeoX, Phi), the first ``cos.shape[-1]`` features rotate and
    the rest pass through, as those architectures' own function does."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    dim = cos.shape[-1]
    if dim == q.shape[-1]:
        return rotary(q, cos, sin), rotary(k, cos, sin)
    return tuple(torch.cat([rotary(x[..., :dim], cos, sin), x[..., dim:]], dim=-1) for x in (q, k))  # type: ignore[return-value]


def _standard_rotary(original: Any) -> bool:
    """Whether ``original`` computes what :func:`apply_rotary_pos_emb` does (values and gradients), on small
    random inputs: rotating every feature, and, where ``original`` takes it, only the first half of them."""
    full = _same_rotary(original, rotated=8)
    partial = _same_rotary(original, rotated=4)
    return bool(full) and partial is not False


def _same_rotary(original: Any, rotated: int) -> bool | None:
    """Whether ``original`` and :func:`apply_rotary_pos_emb` agree on heads of 8 features, ``rotated`` of them
    rotated (None: ``original`` refuses that input)."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 3, 5, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 1, 5, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    angles = torch.randn(1, 5, rotated // 2, generator=gen, dtype=torch.float64).repeat(1, 1, 2)
    cos, sin = angles.cos(), angles.sin()
    try:
        want = original(q, k, cos, sin)
    except Exception:  # noqa: BLE001 - another signature or no partial rotary: not this input's function
        return None
    got = apply_rotary_pos_emb(q, k, cos, sin)
    if not all(isinstance(w, torch.Tensor) and w.shape == g.shape and torch.allclose(w, g)
               for w, g in zip(want, got)):
        return False
    grads = [torch.autograd.grad(sum((t * (i + 2)).sum() for i, t in enumerate(out)), (q, k)) for out in (want, got)]
    return all(torch.allclose(a, b) for a, b in zip(*grads))


def use_fused_rotary(model: Any) -> bool:
    """Install :func:`apply_rotary_pos_emb` in the modeling module(s) of ``model``'s attention layers whose
    own function is the standard one (the module's global, so it serves every model of that architecture in
    the process: same values); True when at least one module runs it."""
    done = False
    seen: set[str] = set()
    if not hasattr(model, "modules"):  # a wrapper (the LoRA adapters-off reference): its model is the policy's
        return False
    for module in model.modules():
        if not type(module).__name__.endswith("Attention"):
            continue
        name = type(module).__module__
        if name in seen:
            continue
        seen.add(name)
        modeling = sys.modules.get(name)
        original = getattr(modeling, "apply_rotary_pos_emb", None)
        if original is apply_rotary_pos_emb:
            done = True
        elif original is not None and _standard_rotary(original):
            REPLACED[name] = original
            modeling.apply_rotary_pos_emb = apply_rotary_pos_emb  # type: ignore[union-attr]
            done = True
    return done
