"""Small demonstrations of the technique for the notebook, the panel and the docs (no model).

:func:`span_toy` is the picture behind every block of :mod:`spanviz.spans.core` at a size one can see: T = 3
tokens, d = 2 features, so the span of X is a plane in token space R³ and a gradient column splits into the
part in the plane (Π_X g, "parallel span") and the part orthogonal to it (Π_X^⊥ g = g − Π_X g, the "span
violation"). The spans panel of notebook 01 draws it (:func:`spanviz.plots.span_toy_figure`) with α0 on the
parallel part and α1 on the violation.

Source: spanviz (the projector is the one of docs/spans.md, with no ridge: T = 3 > d = 2 and X of rank 2).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def span_toy(basis: Any | None = None, grad: Any | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """The T = 3 toy: a 2-D span (plane) in token space R³ and a gradient split into span + violation.

    With X (3, 2) (T = 3 tokens, d = 2 features) the projector Π_X = X (XᵀX)⁻¹ Xᵀ maps R³ onto the plane
    spanned by X's columns; a gradient column g ∈ R³ splits exactly into g∥ = Π_X g (in-span, "parallel")
    and g⊥ = g − g∥ (the span violation, orthogonal to the plane).

    Args:
        basis: X, shape (3, 2) of rank 2 (array-like or tensor); None draws one from ``seed``.
        grad: g, shape (3,); None draws one from ``seed``.
        seed: numpy seed for the random defaults.
    Returns:
        dict of float arrays: ``basis`` (3, 2), ``grad`` (3,), ``parallel`` (3,), ``violation`` (3,),
        ``frame`` (3, 2) an orthonormal basis of the plane, ``normal`` (3,) a unit normal.
    Raises:
        ValueError: wrong shapes, or a basis of rank < 2 (no plane).
    Source: spanviz.
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(3, 2)) if basis is None else _as_array(basis)
    g = rng.normal(size=3) if grad is None else _as_array(grad)
    if x.shape != (3, 2):
        raise ValueError(f"basis must have shape (3, 2) (T=3 tokens, d=2), got {x.shape}")
    if g.shape != (3,):
        raise ValueError(f"grad must have shape (3,), got {g.shape}")
    if np.linalg.matrix_rank(x) < 2:
        raise ValueError("basis must have rank 2 (its columns must span a plane)")
    # g∥ = Π_X g = X (XᵀX)⁻¹ Xᵀ g
    parallel = x @ np.linalg.solve(x.T @ x, x.T @ g)
    # an orthonormal basis of the plane, and its unit normal (for drawing it)
    frame, _ = np.linalg.qr(x)
    normal = np.cross(frame[:, 0], frame[:, 1])
    return {
        "basis": x,
        "grad": g,
        "parallel": parallel,
        # g⊥ = Π_X^⊥ g = g − g∥
        "violation": g - parallel,
        "frame": frame,
        "normal": normal / np.linalg.norm(normal),
    }


def _as_array(x: Any) -> np.ndarray:
    """A float array from an array-like or a torch tensor (detached, on the CPU)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=float)
