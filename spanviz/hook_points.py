"""Hook points: name a tensor inside a model so that code outside can read or replace it (TransformerLens style).

A :class:`HookPoint` is an identity module placed where a tensor of interest is computed (``hook_q``,
``hook_attn_scores``, ...); it costs nothing while no hook is registered, and ``active`` tells the model when
someone is looking (TinyGPT then takes its explicit attention path). A :class:`HookedRootModule` finds its hook
points by name and offers two ways to use them: :meth:`~HookedRootModule.hooks` (temporary forward hooks
``fn(tensor) -> tensor | None``; returning a tensor replaces the value) and
:meth:`~HookedRootModule.run_with_cache` (a forward pass that also returns the tensors at chosen points).

Source: the convention of TransformerLens ``hook_points.py`` (Nanda et al.); spanviz's own small version.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager

from torch import Tensor, nn


class HookPoint(nn.Module):
    """Identity that names a tensor so forward hooks can read or replace it (TransformerLens convention)."""

    def forward(self, x: Tensor) -> Tensor:
        return x

    @property
    def active(self) -> bool:
        """True when at least one forward hook is registered."""
        return bool(self._forward_hooks)


class HookedRootModule(nn.Module):
    """A model whose :class:`HookPoint` submodules are addressed by their module names (``blocks.0.attn.hook_q``)."""

    def hook_points(self) -> dict[str, HookPoint]:
        """All hook points by name, e.g. ``blocks.0.attn.hook_attn_scores``."""
        return {name: m for name, m in self.named_modules() if isinstance(m, HookPoint)}

    @contextmanager
    def hooks(self, fwd_hooks: Mapping[str, Callable[[Tensor], Tensor | None]]) -> Iterator[HookedRootModule]:
        """Temporarily register forward hooks ``fn(tensor) -> tensor | None`` on named hook points.

        Returning a tensor replaces the hooked value. Raises ``ValueError`` for unknown names.
        """
        points = self.hook_points()
        unknown = [n for n in fwd_hooks if n not in points]
        if unknown:
            raise ValueError(f"unknown hook point(s) {unknown}; e.g. {sorted(points)[:5]}")
        handles = [points[n].register_forward_hook(lambda _m, _i, out, fn=fn: fn(out)) for n, fn in fwd_hooks.items()]
        try:
            yield self
        finally:
            for h in handles:
                h.remove()

    def run_with_cache(
        self, idx: Tensor, names: Iterable[str] | Callable[[str], bool] | None = None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Forward pass that also returns the (detached) tensors at the selected hook points.

        Args:
            idx: (B, T) token ids.
            names: hook-point names, or a predicate on names; None caches every hook point.
        Returns:
            (logits (B, T, V), {name: tensor}). Selecting ``hook_attn_scores`` or ``hook_pattern`` routes
            attention through the explicit path for this call.
        """
        points = self.hook_points()
        if names is None:
            selected = list(points)
        elif callable(names):
            selected = [n for n in points if names(n)]
        else:
            selected = list(names)
        cache: dict[str, Tensor] = {}

        def saver(name: str) -> Callable[[Tensor], None]:
            return lambda t: cache.update({name: t.detach()})  # returns None: the tensor is not replaced

        with self.hooks({n: saver(n) for n in selected}):
            logits, _ = self(idx)
        return logits, cache
