"""Span scaling settings: presets and slots, the paper's α brackets ("[1000]"), :class:`SpanConfig`, the
names of the blocks (S1..S2ⁿ) and the reading of a preset / slot list / ridge argument. The mathematics that
uses them is in :mod:`spanviz.spans.core`.

* **Presets** (names are spanviz's): ``kv8`` (default) slots [left Π_K, left Π_V, right Π_V], blocks
  Π_K^a Π_V^b · dS · Π_V^c, mirroring S = Σ (Π_K^a Π_V^b Q)(Π_V^c K)ᵀ/√d; ``qkv8`` slots [left Π_Q,
  right Π_K, right Π_V], blocks Π_Q^a · dS · Π_V^c Π_K^b; ``qk4`` slots [left Π_Q, right Π_K], whose
  exact closed form dQ' = α0 Π_Q dQ + α1 Π_Q^⊥ dQ, dK' = α0 Π_K dK + α1 Π_K^⊥ dK (order 2 is in the null
  space of the backward map, so α2 does nothing) runs as hooks on q and k and works with fused attention.
  A user's own slot list (1 to ``MAX_SLOTS`` slots) is preset "custom".
* **Block naming** S1..S2ⁿ (:func:`block_names`): blocks sorted by order, and inside one order by which
  slots carry Π^⊥, earlier slots first (bits (1,0,0) < (0,1,0) < (0,0,1); (1,1,0) < (1,0,1) < (0,1,1)).
  For ``kv8``: S1 = Π_K Π_V dS Π_V; S2..S4 (order 1) put ⊥ on Π_K, on the left Π_V, on the right Π_V;
  S5..S7 (order 2) on {Π_K, left Π_V}, {Π_K, right Π_V}, {left Π_V, right Π_V}; S8 all three.

Source: the α brackets are arXiv 2512.13033's; presets, slots, block naming and the ridge are spanviz's
reconstruction (see :mod:`spanviz.spans.core` and docs/spans.md).
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spanviz.validators import check_choice, check_float

SIDES = ("left", "right")
BASES = ("Q", "K", "V")
PRESET_SLOTS: Mapping[str, tuple[tuple[str, str], ...]] = {
    "kv8": (("left", "K"), ("left", "V"), ("right", "V")),
    "qkv8": (("left", "Q"), ("right", "K"), ("right", "V")),
    "qk4": (("left", "Q"), ("right", "K")),
}
PRESETS = tuple(PRESET_SLOTS)
CUSTOM = "custom"
"""``SpanConfig.preset`` of a user-given slot list."""
AUTO = "auto"
"""``SpanConfig.preset``'s default: the preset that the slots are (``kv8`` without slots), else ``custom``."""
DEFAULT_RIDGE = 1e-6
MAX_SLOTS = 6  # 64 blocks; more is allowed by the math but useless for teaching and slow.

Slot = tuple[str, str]


# ------------------------------------------------------------------------------------------ α parsing

def parse_alphas(spec: str | Sequence[float], field: str = "alphas") -> tuple[float, ...]:
    """Read α scales from the paper's bracket strings or from a sequence of numbers.

    Accepted: a digit string with one digit per α ("1000", "[1110]"), a separated string
    ("1 0.5 0 0", "[1, 0.5, 0, 0]"), or a sequence of real numbers (or of strings of numbers).
    Length is not checked here.

    Returns:
        tuple of floats.
    Raises:
        ValueError: naming ``field``, for anything else or a non-finite value.
    Source: bracket notation of arXiv 2512.13033.
    """
    if isinstance(spec, str):
        text = spec.strip()
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1].strip()
        tokens = text.replace(",", " ").split()
        if len(tokens) == 1 and tokens[0].isdigit():
            tokens = list(tokens[0])  # "1000" -> one digit per α
        try:
            values = tuple(float(t) + 0.0 for t in tokens)  # -0 → 0.0: one setting, one key
        except ValueError:
            raise ValueError(
                f"{field} must be a digit string like '1000', a list of numbers or a string of numbers, "
                f"got {spec!r}"
            ) from None
    elif isinstance(spec, Iterable) and not isinstance(spec, Mapping):
        items = list(spec)
        try:  # numbers, or strings of numbers (e.g. "1,0.5,0,0".split(","))
            if any(isinstance(a, bool) or not isinstance(a, (numbers.Real, str)) for a in items):
                raise ValueError
            values = tuple(float(a) + 0.0 for a in items)
        except (ValueError, OverflowError):  # OverflowError: an int beyond float's range (10**400)
            raise ValueError(f"{field} must contain real numbers, got {spec!r}") from None
    else:
        raise ValueError(f"{field} must be a digit string like '1000' or a sequence of numbers, got {spec!r}")
    if not values:
        raise ValueError(f"{field} must not be empty, got {spec!r}")
    if not all(math.isfinite(a) for a in values):
        raise ValueError(f"{field} must be finite numbers, got {values}")
    return values


def _parse_alphas_of_length(spec: Any, field: str, n: int, what: str) -> tuple[float, ...]:
    """:func:`parse_alphas`, then ``ValueError`` unless there are ``n`` values (``what`` they are, for the message)."""
    values = parse_alphas(spec, field)
    if len(values) != n:
        raise ValueError(f"{field} must have {n} entries ({what}), got {len(values)}: {spec!r}")
    return values


def _parse_slots(slots: Any) -> tuple[Slot, ...]:
    """Normalise a slot list: [("left", "K"), ...] (also lists from JSON); side lower-case, basis upper."""
    if isinstance(slots, str) or not isinstance(slots, Iterable):
        raise ValueError(f"slots must be a list of (side, basis) pairs, got {slots!r}")
    out = []
    for i, slot in enumerate(slots):
        if isinstance(slot, str) or not isinstance(slot, Sequence) or len(slot) != 2:
            raise ValueError(f"slots entries must be (side, basis) pairs, got {slot!r} in {slots!r}")
        side, basis = slot
        side = check_choice(f"slots[{i}] side", side.lower() if isinstance(side, str) else side, SIDES)
        basis = check_choice(f"slots[{i}] basis", basis.upper() if isinstance(basis, str) else basis, BASES)
        out.append((side, basis))
    if not 1 <= len(out) <= MAX_SLOTS:
        raise ValueError(f"slots must hold 1 to {MAX_SLOTS} slots, got {len(out)}: {slots!r}")
    return tuple(out)


def resolve_ridge(decomposition: Any, ridge: float | None) -> float:
    """``ridge`` checked (ε >= 0), or when None the SpanConfig's ridge, else :data:`DEFAULT_RIDGE`.

    Raises: ValueError for a negative or non-finite ridge. Source: spanviz."""
    if ridge is None:
        return decomposition.ridge if isinstance(decomposition, SpanConfig) else DEFAULT_RIDGE
    return check_float("ridge", ridge, 0.0)


# ------------------------------------------------------------------------------------------- config

@dataclass(frozen=True)
class SpanConfig:
    """Span / violation gradient scaling setting. Frozen, validated, JSON-ready through :meth:`to_dict`.

    Attributes:
        alphas: α per order, α0 first. A digit string as in the paper ("1000", "[1110]") or numbers.
            Length max(4, n_slots + 1) (4 for every preset; entries above the last order are unused, e.g.
            α3 for ``qk4``). Finite; negative values are allowed but leave the paper's setting.
        preset: "kv8", "qkv8", "qk4", or "custom" for a user slot list; "auto" (the default) = the preset whose
            slots equal ``slots``, else "custom" ("kv8" when ``slots`` is None too). None is refused: a model
            without span scaling takes ``GPTConfig(spans=None)``, not a SpanConfig. "custom" with a preset's
            slots is allowed (for qk4 slots it uses the explicit score path instead of the closed form).
        slots: the decomposition as (side, basis) pairs, side ∈ {"left", "right"}, basis ∈ {"Q", "K", "V"},
            1 to 6 slots; None = the preset's. Given together with a named preset, they must agree.
        layers: layer indices (0-based) the scaling applies to; None = every layer.
        block_alphas: optional α per block in S1..S2ⁿ order (length 2ⁿ); when given it replaces the
            per-order ``alphas``.
        ridge: ε >= 0 in the Gram ridge λ = ε·tr(XᵀX)/d.

    Raises:
        ValueError: naming the field, the value and what is allowed.
    Source: the α brackets are the paper's; presets, slots, block naming and ridge are spanviz's
    reconstruction (see :mod:`spanviz.spans.core`).
    """

    alphas: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)
    preset: str = AUTO
    slots: tuple[Slot, ...] | None = None
    layers: tuple[int, ...] | None = None
    block_alphas: tuple[float, ...] | None = None
    ridge: float = DEFAULT_RIDGE

    def __post_init__(self) -> None:
        # preset and slots
        if self.preset is None:
            raise ValueError("preset must be one of 'auto', 'kv8', 'qkv8', 'qk4', 'custom', got None (no span scaling "
                             "is GPTConfig(spans=None), not a SpanConfig; the default 'auto' follows slots, else kv8)")
        check_choice("preset", self.preset, PRESETS + (CUSTOM, AUTO))
        if self.slots is None:
            if self.preset == CUSTOM:
                raise ValueError("slots must be given when preset='custom', got slots=None")
            preset = "kv8" if self.preset == AUTO else self.preset
            slots = PRESET_SLOTS[preset]
        else:
            slots = _parse_slots(self.slots)
            named = [name for name, preset_slots in PRESET_SLOTS.items() if preset_slots == slots]
            preset = self.preset if self.preset != AUTO else (named[0] if named else CUSTOM)
            if preset != CUSTOM and slots != PRESET_SLOTS[preset]:
                raise ValueError(
                    f"slots {[list(s) for s in slots]} disagree with preset={preset!r} "
                    f"(its slots are {[list(s) for s in PRESET_SLOTS[preset]]}); pass one of them, "
                    "or preset='custom'"
                )
        object.__setattr__(self, "preset", preset)
        object.__setattr__(self, "slots", slots)
        # alphas
        n_orders, n_blocks = self.n_orders, self.n_blocks
        alphas = _parse_alphas_of_length(self.alphas, "alphas", n_orders, f"α0..α{n_orders - 1} for {len(slots)} slots")
        object.__setattr__(self, "alphas", alphas)
        if self.block_alphas is not None:
            block_alphas = _parse_alphas_of_length(self.block_alphas, "block_alphas", n_blocks, f"S1..S{n_blocks}")
            object.__setattr__(self, "block_alphas", block_alphas)
        # layers
        if self.layers is not None:
            layers = self.layers if isinstance(self.layers, Iterable) and not isinstance(self.layers, str) else None
            if layers is None or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in layers):
                raise ValueError(f"layers must be None or a list of layer indices >= 0, got {self.layers!r}")
            layers = tuple(sorted(set(layers)))
            if not layers:
                raise ValueError("layers must be None (every layer) or a non-empty list, got []")
            object.__setattr__(self, "layers", layers)
        object.__setattr__(self, "ridge", resolve_ridge(None, self.ridge))

    @property
    def n_slots(self) -> int:
        """Number of slots n."""
        return len(self.slots)

    @property
    def n_blocks(self) -> int:
        """Number of blocks, 2ⁿ."""
        return 2 ** len(self.slots)

    @property
    def n_orders(self) -> int:
        """Length of ``alphas``: max(4, n + 1) (orders run 0..n)."""
        return max(4, len(self.slots) + 1)

    def block_weights(self) -> tuple[float, ...]:
        """α of each block in S1..S2ⁿ order (``block_alphas``, or α of the block's order)."""
        if self.block_alphas is not None:
            return self.block_alphas
        return tuple(self.alphas[o] for o in block_orders(self.slots))

    def check_layers(self, n_layer: int) -> None:
        """Raise ``ValueError`` when a configured layer index is not in [0, n_layer)."""
        if self.layers is not None and any(i >= n_layer for i in self.layers):
            raise ValueError(f"spans.layers must be in [0, {n_layer}) for n_layer={n_layer}, got {list(self.layers)}")

    def applies_to(self, layer: int) -> bool:
        """Whether layer ``layer`` (0-based) gets the scaling."""
        return self.layers is None or layer in self.layers

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict; ``SpanConfig(**cfg.to_dict()) == cfg``."""
        return {
            "alphas": list(self.alphas),
            "preset": self.preset,
            "slots": [list(s) for s in self.slots],
            "layers": None if self.layers is None else list(self.layers),
            "block_alphas": None if self.block_alphas is None else list(self.block_alphas),
            "ridge": self.ridge,
        }

    def label(self) -> str:
        """Short human label, e.g. ``kv8 [1 0 0 0]``."""
        a = " ".join(f"{x:g}" for x in (self.block_alphas or self.alphas))
        return f"{self.preset} [{a}]" + ("" if self.layers is None else f" layers {list(self.layers)}")


# ------------------------------------------------------------------------------------------- naming

def resolve_slots(decomposition: str | SpanConfig | Sequence[Slot]) -> tuple[Slot, ...]:
    """The slots of a preset name, a :class:`SpanConfig` or a slot list (checked, normalised as in
    :class:`SpanConfig`). Raises: ValueError for an unknown preset or a bad slot list. Source: spanviz."""
    if isinstance(decomposition, SpanConfig):
        return decomposition.slots
    if isinstance(decomposition, str):
        return PRESET_SLOTS[check_choice("preset", decomposition, PRESETS)]
    return _parse_slots(decomposition)


def block_bits(decomposition: str | SpanConfig | Sequence[Slot] = "kv8") -> list[tuple[int, ...]]:
    """Each block as a tuple of bits, one per slot (0 = Π, 1 = Π^⊥), in S1..S2ⁿ order.

    The order: by number of ⊥ (the block's order), then by which slots carry ⊥, earlier slots first.
    Source: spanviz's naming convention.
    """
    n = len(resolve_slots(decomposition))
    return sorted(itertools.product((0, 1), repeat=n), key=lambda bits: (sum(bits), [-b for b in bits]))


def block_names(decomposition: str | SpanConfig | Sequence[Slot] = "kv8") -> list[str]:
    """["S1", ..., "S2ⁿ"] for a preset name, slot list or :class:`SpanConfig` (see :func:`block_bits`)."""
    return [f"S{i + 1}" for i in range(len(block_bits(decomposition)))]


def block_orders(decomposition: str | SpanConfig | Sequence[Slot] = "kv8") -> list[int]:
    """Order (number of Π^⊥ factors) of each block, S1 first: kv8 → [0, 1, 1, 1, 2, 2, 2, 3]."""
    return [sum(bits) for bits in block_bits(decomposition)]


def block_formulas(decomposition: str | SpanConfig | Sequence[Slot] = "kv8") -> list[str]:
    """Each block written out, S1 first, e.g. kv8 S2 → "Π_K^⊥ Π_V dS Π_V"."""
    slots = resolve_slots(decomposition)
    out = []
    for bits in block_bits(slots):
        factor = [f"Π_{basis}" + ("^⊥" if bit else "") for (_, basis), bit in zip(slots, bits)]
        left = [f for f, (side, _) in zip(factor, slots) if side == "left"]
        right = [f for f, (side, _) in zip(factor, slots) if side == "right"][::-1]  # first right = outermost
        out.append(" ".join(left + ["dS"] + right))
    return out


def block_table(decomposition: str | SpanConfig | Sequence[Slot] = "kv8") -> list[dict[str, Any]]:
    """One dict per block: ``name``, ``order``, ``bits`` (list), ``formula`` — for docs, plots, notebooks."""
    return [
        {"name": n, "order": o, "bits": list(b), "formula": f}
        for n, o, b, f in zip(
            block_names(decomposition), block_orders(decomposition), block_bits(decomposition),
            block_formulas(decomposition),
        )
    ]
