"""A run's final weights beside its record: packed small (float16), checked when read back (they may come from an
archive someone sent).

A run record holds the curves, not the model. Where a notebook looks inside the trained model after a replay
(the tour's attention patterns), the panel stores the final weights too (:meth:`ResultsStore.put` with
``weights=``), and the workshop bundle ships them: ``weights/<key>.pt`` in the store and in an archive.

File: ``torch.save`` of ``{"format": WEIGHTS_FORMAT, "key": <the run's store key>, "dtype": "float16",
"tensors": {name: tensor}, "tied": {name: name it shares storage with}}``. Floating-point tensors are stored as
float16 (the tour's model: 2.9 MB instead of 5.8 MB; attention logits from them differ by ~1e-3 relative),
others as they are; a tensor that shares its storage with an earlier one (the tied embedding / output weights) is
stored once. Read with ``torch.load(weights_only=True)`` — no code is unpickled — and checked: the format, the
key, the size (:data:`MAX_WEIGHTS_BYTES`) and that every entry is a tensor.

Source: spanviz.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

WEIGHTS_FORMAT = "spanviz-weights-1"
MAX_WEIGHTS_BYTES = 64 * 2**20
"""Largest weights file accepted [bytes] (the tour's model needs 2.9 MB)."""
STORED_DTYPE = torch.float16


def pack_weights(state_dict: Mapping[str, Tensor], key: str) -> bytes:
    """The bytes of the weights file of the run stored under ``key`` (see the module docstring).

    Raises:
        ValueError: ``state_dict`` is not a mapping of names to tensors, or packs to more than
            :data:`MAX_WEIGHTS_BYTES`.
    """
    if not isinstance(state_dict, Mapping) or not all(isinstance(v, Tensor) for v in state_dict.values()):
        raise ValueError("weights must be a state dict: a mapping of parameter names to tensors")
    tensors: dict[str, Tensor] = {}
    tied: dict[str, str] = {}
    seen: dict[tuple[int, tuple[int, ...], torch.dtype], str] = {}
    for name, tensor in state_dict.items():
        tensor = tensor.detach()
        shared = (tensor.untyped_storage().data_ptr(), tuple(tensor.shape), tensor.dtype)
        if tensor.numel() and shared in seen:
            tied[str(name)] = seen[shared]
            continue
        seen[shared] = str(name)
        tensors[str(name)] = (tensor.to(STORED_DTYPE) if tensor.is_floating_point() else tensor).cpu().clone()
    buffer = io.BytesIO()
    torch.save({"format": WEIGHTS_FORMAT, "key": key, "dtype": str(STORED_DTYPE).removeprefix("torch."),
                "tensors": tensors, "tied": tied}, buffer)
    payload = buffer.getvalue()
    if len(payload) > MAX_WEIGHTS_BYTES:
        raise ValueError(f"the weights pack to {len(payload):,} bytes, more than {MAX_WEIGHTS_BYTES:,}: keep weights "
                         "only of small models (the notebooks' tour)")
    return payload


def unpack_weights(payload: bytes, key: str, where: str) -> dict[str, Tensor]:
    """The state dict (float32 for floating-point entries, tied entries restored) of a weights file.

    Raises:
        ValueError: naming ``where``: too large, not a weights file of this format, made for another key, or
            holding something other than tensors.
    """
    if len(payload) > MAX_WEIGHTS_BYTES:
        raise ValueError(f"{where}: {len(payload):,} bytes, more than {MAX_WEIGHTS_BYTES:,}")
    try:
        obj: Any = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - whatever a damaged or hostile file raises, it is refused the same
        raise ValueError(f"{where}: not a weights file ({type(error).__name__})") from None
    if not isinstance(obj, dict) or obj.get("format") != WEIGHTS_FORMAT:
        raise ValueError(f"{where}: not a spanviz weights file (format {WEIGHTS_FORMAT!r})")
    if obj.get("key") != key:
        raise ValueError(f"{where}: holds the weights of another run")
    tensors, tied = obj.get("tensors"), obj.get("tied", {})
    good_tensors = isinstance(tensors, dict) and all(isinstance(k, str) and isinstance(v, Tensor)
                                                     for k, v in tensors.items())
    if not good_tensors or not isinstance(tied, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                                 and v in tensors for k, v in tied.items()):
        raise ValueError(f"{where}: its tensors are malformed")
    state = {name: (t.float() if t.is_floating_point() else t) for name, t in tensors.items()}
    state.update({name: state[source] for name, source in tied.items()})
    return state
