"""Look inside a trained model: the attention logits S and patterns P of every head for one window of text, the
tokens on the axes (:class:`AttentionInspector`, notebook 00's "Look inside"). Which model: a replayed run's final
weights (read in its own vocabulary), the model training in this kernel as it is now, or an untrained one."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import ipywidgets as W
import torch
from torch import nn

from spanviz import plots
from spanviz.data.tokenizers import translate_ids
from spanviz.model import GPTConfig, TinyGPT
from spanviz.validators import check_int
from spanviz.widgets.figure.view import FigureView

SHOWN_POSITIONS = 24
"""Positions shown at a time (their tokens written on the axes); the "from position" slider moves the window."""
WHAT = ("logits S", "pattern P")
"""What the heatmaps show: S = QKᵀ/√d_head (pre-softmax; the masked upper triangle blank) or P = softmax(S + M)."""


class AttentionInspector:
    """Every head's attention logits S or pattern P of one layer, for the first window of the evaluation split.

    The window is the first ``cfg.context_length`` tokens of ``data.eval_ids``; :data:`SHOWN_POSITIONS` of them are
    shown at a time with their tokens on the axes ("i: token"; rows: query i, columns: key j). Which model is shown
    (the title says): a run replayed by ``panel`` brings its final weights, read with the words its ids mean
    (:meth:`TrainingPanel.replayed_tokenizer`: yours, or its own vocabulary rebuilt here); else the model ``trainer``
    gives, copied as it is now; else an untrained ``TinyGPT(cfg)``. **Look at model** reads the model again (during
    or after training); **untrained** shows a freshly initialised one.

    Args:
        panel: the :class:`~spanviz.widgets.TrainingPanel` whose run is looked at (``replayed_model(label)``,
            ``replayed_tokenizer(label)``).
        label: the run's label in that panel.
        data: the ``TokenData`` trained on (``eval_ids`` (N,) int64, ``tokenizer``).
        cfg: the run's :class:`~spanviz.model.GPTConfig`.
        trainer: ``fn() -> Trainer | None``, the run training (or trained) in this kernel, if any.
        seed: torch seed of the untrained model (the same untrained model every time).
    Raises:
        ValueError: ``data.eval_ids`` shorter than ``cfg.context_length``; ``seed`` not an int >= 0.

    Attributes:
        widget: the VBox to display. view: the :class:`FigureView` (named "attention"). controls: ``layer``,
        ``what``, ``untrained``, ``look``, ``first`` (the first position shown). views: ``(what, layer)`` → (H, T, T)
        numpy array of the model read last. shown: which model that is, in words. x: (1, T) the window's ids in that
        model's vocabulary. tokens: its T tokens.
    """

    def __init__(self, panel: Any, label: str, data: Any, cfg: GPTConfig,
                 trainer: Callable[[], Any] | None = None, seed: int = 0) -> None:
        T = cfg.context_length
        if len(data.eval_ids) < T:
            raise ValueError(f"data.eval_ids has {len(data.eval_ids)} tokens, fewer than context_length={T}")
        self.panel, self.label, self.data, self.cfg = panel, label, data, cfg
        self.trainer = trainer or (lambda: None)
        self.seed = check_int("seed", seed, 0)
        self.window = data.eval_ids[:T]  # (T,) ids of your evaluation split
        self.n_shown = min(SHOWN_POSITIONS, T)
        self.read()
        layer = W.IntSlider(value=0, min=0, max=cfg.n_layer - 1, description="layer")
        what = W.ToggleButtons(options=list(WHAT), value=WHAT[0])
        untrained = W.Checkbox(value=False, description="untrained")
        look = W.Button(description="Look at model", icon="refresh", tooltip="read the model as it is now")
        first = W.IntSlider(value=0, min=0, max=T - self.n_shown, description="from position",
                            style={"description_width": "initial"}, disabled=T == self.n_shown)
        self.controls: dict[str, W.Widget] = {"layer": layer, "what": what, "untrained": untrained, "look": look,
                                              "first": first}
        self.view = FigureView(self._figure(), name="attention")
        for control in (layer, what, first):
            control.observe(self.redraw, names="value")
        untrained.observe(self.reload, names="value")
        look.on_click(self.reload)
        self.widget = W.VBox([W.HBox([layer, what, untrained, look], layout=W.Layout(flex_flow="row wrap")), first,
                              self.view.widget])

    def models(self, untrained: bool = False) -> dict[str, tuple[nn.Module, Any]]:
        """``{heading: (model, tokenizer)}``: the model looked at, on the CPU and not training, with the tokenizer of
        its training text, under a heading that says which it is (the form :class:`SamplesView` takes)."""
        replayed = None if untrained else self.panel.replayed_model(self.label)
        trainer = None if untrained else self.trainer()
        if replayed is not None:
            return {"the final model of the run replayed from the store (see the status line)":
                    (replayed, self.panel.replayed_tokenizer(self.label))}
        if trainer is not None:
            return {f"the model after {trainer.step_count} training steps":
                    (copy.deepcopy(trainer.model).cpu(), self.data.tokenizer)}
        torch.manual_seed(self.seed)
        return {"an untrained model": (TinyGPT(self.cfg), self.data.tokenizer)}

    def read(self, untrained: bool = False) -> None:
        """Read S and P of every layer and head from the model :meth:`models` gives, for the window."""
        ((self.shown, (model, vocab)),) = self.models(untrained).items()
        self.x = translate_ids(self.window, self.data.tokenizer, vocab).unsqueeze(0)  # (1, T) in the model's words
        self.tokens = [vocab.decode([i]) for i in self.x[0].tolist()]  # the T words the model reads
        T = self.cfg.context_length
        causal = torch.ones(T, T).tril().bool()
        with torch.no_grad():
            _, cache = model.eval().run_with_cache(
                self.x, names=lambda n: n.endswith(("hook_attn_scores", "hook_pattern")))
        self.views = {}
        for layer in range(self.cfg.n_layer):  # (H, T, T) per layer
            scores = cache[f"blocks.{layer}.attn.hook_attn_scores"][0]
            self.views[WHAT[0], layer] = scores.masked_fill(~causal, float("nan")).numpy()
            self.views[WHAT[1], layer] = cache[f"blocks.{layer}.attn.hook_pattern"][0].numpy()

    def _shown(self) -> tuple[Any, list[str], int]:
        """(H, n, n) values, n tokens and the first position of the window the controls pick."""
        a, b = self.controls["first"].value, self.controls["first"].value + self.n_shown
        values = self.views[self.controls["what"].value, self.controls["layer"].value]
        return values[:, a:b, a:b], self.tokens[a:b], a

    def _title(self) -> str:
        what, layer, a = self.controls["what"].value, self.controls["layer"].value, self.controls["first"].value
        return (f"{what}, layer {layer}, positions {a}–{a + self.n_shown - 1} of {self.cfg.context_length}, "
                f"of {self.shown}")

    def _figure(self) -> Any:
        values, tokens, first = self._shown()
        return plots.attention_heads_figure(values, tokens, first=first, title=self._title())

    def redraw(self, *_: Any) -> None:
        """Draw the layer, S or P and positions the controls pick, of the model read last."""
        values, tokens, first = self._shown()
        self.view.update(plots.attention_heads_data(values, tokens, first), build=self._figure,
                         layout={"title": {**self.view.layout["title"], "text": self._title()}})

    def reload(self, *_: Any) -> None:
        """Read the model again (untrained when that box is ticked) and redraw."""
        self.read(self.controls["untrained"].value)
        self.redraw()
