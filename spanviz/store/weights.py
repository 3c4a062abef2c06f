"""A run's final weights beside its record: packed small (float16), checked when read back (they may come from an
archive someone sent).

A run record holds the curves, not the model. Where a notebook looks inside the trained model after a replay
(the tour's attention patterns), the panel stores the final weights too (:meth:`ResultsStore.put` with
``weights=``), and the workshop bundle ships them: ``weights/<key>.pt`` in the store and in an archive.

File: ``torch.save`` of ``{"format": WEIGHTS_FORMAT, "key": <the run's store key>, "dtype": "float16",
"tensors": {name: tensor}, "tied": {name: name it shares storage with}}``. Tensors (floating-point only: a TinyGPT
has no others) are stored as float16 (the tour's model: 2.9 MB instead of 5.8 MB; attention logits from them differ
by ~1e-3 relative); a tensor that shares its storage with an earlier one (the tied embedding / output weights) is
stored once. Read with ``torch.load(weights_only=True)`` — no code is unpickled — and checked: the size
(:data:`MAX_WEIGHTS_BYTES`) and the pickle's (:data:`MAX_PICKLE_BYTES`, :data:`MAX_TENSORS`) before it is loaded;
then the format, the key, that every entry is a real floating-point tensor whose elements its storage holds (no
``expand``-ed view asking for gigabytes when converted) within :data:`MAX_ELEMENTS` in all; and, given the run's
``config["model"]``, that the tensors are the model's (names, shapes) and finite (:func:`check_fits_model`).

Source: spanviz.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

from spanviz.model import GPTConfig, TinyGPT

WEIGHTS_FORMAT = "spanviz-weights-1"
MAX_WEIGHTS_BYTES = 64 * 2**20
"""Largest weights file accepted [bytes] (the tour's model needs 2.9 MB)."""
STORED_DTYPE = torch.float16
MAX_ELEMENTS = MAX_WEIGHTS_BYTES // 2
"""Most tensor elements in a weights file, all tensors together (what :data:`MAX_WEIGHTS_BYTES` holds in float16)."""
MAX_TENSORS = 4096
"""Most tensors in a weights file (a TinyGPT has 16 per layer and 5 more)."""
MAX_PICKLE_BYTES = 2**20
"""Largest pickle inside a weights file [bytes] (names and shapes only; the tour's: a few KB)."""


class NonFiniteWeightsError(ValueError):
    """Weights holding NaN or ±inf (a diverged model)."""


def check_tensors(tensors: Mapping[str, Any], where: str) -> None:
    """Each entry a real floating-point tensor whose elements its own storage holds (not an ``expand``-ed view of a
    smaller one), at most :data:`MAX_TENSORS` of them and :data:`MAX_ELEMENTS` elements in all — checked before any
    is converted or copied.

    Raises:
        ValueError: naming ``where`` and the tensor.
    """
    if len(tensors) > MAX_TENSORS:
        raise ValueError(f"{where}: {len(tensors):,} tensors, more than the {MAX_TENSORS:,} allowed")
    total = 0
    for name, tensor in tensors.items():
        if not isinstance(tensor, Tensor):
            raise ValueError(f"{where}: {name!r} is a {type(tensor).__name__}, not a tensor")
        if not tensor.is_floating_point() or tensor.dtype not in (torch.float16, torch.bfloat16, torch.float32,
                                                                   torch.float64):
            raise ValueError(f"{where}: {name!r} has dtype {tensor.dtype}; weights are float16, bfloat16, float32 "
                             "or float64")
        if tensor.device.type == "meta":
            raise ValueError(f"{where}: {name!r} is on the meta device (it holds no values)")
        total += tensor.numel()
        if total > MAX_ELEMENTS:
            raise ValueError(f"{where}: more than {MAX_ELEMENTS:,} elements in all (at {name!r}, shape "
                             f"{tuple(tensor.shape)})")
        held = tensor.untyped_storage().nbytes() - tensor.storage_offset() * tensor.element_size()
        if tensor.numel() * tensor.element_size() > held:
            raise ValueError(f"{where}: {name!r} (shape {tuple(tensor.shape)}) has more elements than its storage "
                             f"holds ({held:,} bytes): an expanded view; store each tensor's own values")


class _SkipNormalInit(TorchFunctionMode):
    """Inside a model built on the meta device (no values, so nothing to initialise): ``normal_`` returns its tensor
    unchanged. The meta device runs ``normal_`` through a Python reference that imports ``torch._dynamo`` (about
    1.1 s on 2 cores, once per process: the first import of a bundle with weights); names and shapes do not depend
    on the initialisation. Other arithmetic at construction (a rank-limited query's division) still goes through
    the references and imports it."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.normal_ or func is torch.nn.init.normal_:
            return args[0] if args else kwargs["tensor"]
        return func(*args, **kwargs)


def check_fits_model(state: Mapping[str, Tensor], model: Mapping[str, Any], where: str) -> None:
    """The tensors are the state dict of a :class:`~spanviz.model.TinyGPT` of ``model`` (a run's
    ``config["model"]``): the same names and shapes, all finite. Checked against a model built on the meta device
    (no memory), uninitialised (:class:`_SkipNormalInit`).

    Raises:
        ValueError: naming ``where``: a bad model config, missing or extra names, a shape that differs;
            :class:`NonFiniteWeightsError` (a ValueError): NaN or ±inf in a tensor.
    """
    try:
        with torch.device("meta"), _SkipNormalInit():
            expected = TinyGPT(GPTConfig.from_dict(model)).state_dict()
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where}: its run's model config is not a TinyGPT's: {error}") from None
    missing, extra = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or extra:
        raise ValueError(f"{where}: not the weights of its run's model: missing {missing[:3]}, extra {extra[:3]} "
                         f"({len(missing)} missing, {len(extra)} extra)")
    for name, tensor in expected.items():
        if tuple(state[name].shape) != tuple(tensor.shape):
            raise ValueError(f"{where}: {name!r} has shape {tuple(state[name].shape)}, its run's model "
                             f"{tuple(tensor.shape)}")
        if not bool(torch.isfinite(state[name]).all()):
            raise NonFiniteWeightsError(f"{where}: {name!r} holds NaN or inf values")


def _check_pickle(payload: bytes, where: str) -> None:
    """The pickle of a ``torch.save`` zip and its number of storages within limits, before it is unpickled."""
    try:
        with zipfile.ZipFile(io.BytesIO(payload)) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError):
        return  # not a zip: torch.load refuses it
    if len(infos) > MAX_TENSORS + 16:
        raise ValueError(f"{where}: {len(infos):,} entries, more than {MAX_TENSORS:,} tensors")
    pickles = [i for i in infos if i.filename.endswith("/data.pkl")]
    if any(i.file_size > MAX_PICKLE_BYTES for i in pickles):
        raise ValueError(f"{where}: its pickle has more than {MAX_PICKLE_BYTES:,} bytes (too many tensors)")


def pack_weights(state_dict: Mapping[str, Tensor], key: str, model: Mapping[str, Any] | None = None) -> bytes:
    """The bytes of the weights file of the run stored under ``key`` (see the module docstring).

    Args:
        model: the run's ``config["model"]``: the weights must fit it (:func:`check_fits_model`); None: not checked.
    Raises:
        ValueError: ``state_dict`` is not a mapping of names to tensors, fails :func:`check_tensors` or
            :func:`check_fits_model` (:class:`NonFiniteWeightsError` for NaN or inf), or packs to more than
            :data:`MAX_WEIGHTS_BYTES`.
    """
    if not isinstance(state_dict, Mapping) or not all(isinstance(v, Tensor) for v in state_dict.values()):
        raise ValueError("weights must be a state dict: a mapping of parameter names to tensors")
    check_tensors(state_dict, "weights")
    if model is not None:
        check_fits_model(state_dict, model, "weights")
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
        tensors[str(name)] = tensor.to(STORED_DTYPE).cpu().clone()
    buffer = io.BytesIO()
    torch.save({"format": WEIGHTS_FORMAT, "key": key, "dtype": str(STORED_DTYPE).removeprefix("torch."),
                "tensors": tensors, "tied": tied}, buffer)
    payload = buffer.getvalue()
    if len(payload) > MAX_WEIGHTS_BYTES:
        raise ValueError(f"the weights pack to {len(payload):,} bytes, more than {MAX_WEIGHTS_BYTES:,}: keep weights "
                         "only of small models (the notebooks' tour)")
    return payload


def unpack_weights(payload: bytes, key: str, where: str, model: Mapping[str, Any] | None = None) -> dict[str, Tensor]:
    """The state dict (float32 for floating-point entries, tied entries restored) of a weights file.

    Args:
        model: the run's ``config["model"]``: the weights must fit it (:func:`check_fits_model`); None: not checked.
    Raises:
        ValueError: naming ``where``: too large (file, pickle, tensors or elements), not a weights file of this
            format, made for another key, holding something other than real floating-point tensors, an expanded
            view, or (given ``model``) not its model's weights or not finite.
    """
    if len(payload) > MAX_WEIGHTS_BYTES:
        raise ValueError(f"{where}: {len(payload):,} bytes, more than {MAX_WEIGHTS_BYTES:,}")
    _check_pickle(payload, where)
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
    check_tensors(tensors, where)
    state = {name: t.float() for name, t in tensors.items()}
    state.update({name: state[source] for name, source in tied.items()})
    if model is not None:
        check_fits_model(state, model, where)
    return state
