"""What a trained model writes: text sampled from one model, or from several side by side (same prompt, same
settings, same seed), with temperature, top-k, length and seed controls (:class:`SamplesView`). The sampling
itself: :func:`spanviz.sampling.sample_text`; the tokenizer of a replayed run:
:meth:`spanviz.widgets.TrainingPanel.replayed_tokenizer`."""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from typing import Any

import ipywidgets as W
from torch import nn

from spanviz.sampling import TextSample, sample_text
from spanviz.validators import check_float, check_int
from spanviz.widgets.figure.view import computing, slider
from spanviz.widgets.panel import analytic_threads

TOP_K_CHOICES = (1, 2, 5, 10, 20, 40, 100, 200, 1000)
"""The top-k slider's stops (and the first value given), then "all" (no top-k)."""
TEMPERATURE_RANGE = (0.05, 2.0)
"""The temperature slider's range."""
MAX_NEW_TOKENS = 200
"""The length slider's end [tokens]."""
MAX_SEED_SHOWN = 2**31 - 1
"""The seed box's end (a 32-bit integer in the browser)."""


class SamplesView:
    """Text sampled from trained models for one prompt, redrawn when a control changes; several models side by side.

    Each model continues the same prompt with the same temperature, top-k, length and seed (its own generator, so a
    model's text does not depend on the others'). The prompt is shown as the model read it (a word outside the
    vocabulary as ``<unk>``), in grey italics, the sampled continuation after it in plain text.

    Args:
        models: ``fn() -> {heading: (model, tokenizer)}``, called now and when **Sample from model** is pressed (so
            it can give the model as it is now, or a replay's final weights), each model with the tokenizer of its
            training text (``TokenData.tokenizer``; for a replayed run :meth:`TrainingPanel.replayed_tokenizer`).
            The models must not be training meanwhile (pass copies). A heading says which model it is, e.g. "the
            final model of the replayed run".
        prompt, max_new_tokens, temperature, top_k (None = all), seed: the controls' first values (see
            :func:`spanviz.sampling.generate`).
        empty: what to say while ``models()`` gives no model (e.g. that the replayed runs carry no weights).
    Raises:
        ValueError: a first value out of the controls' range: temperature in [0.05, 2], max_new_tokens in [1, 200],
        top_k None or >= 1, seed in [0, 2**31 - 1], prompt a string. (A top-k above a model's vocabulary size is
        said in place of its text.)

    Attributes:
        widget: the VBox to display. error: HTML, what ``models()`` refused. controls: ``prompt``, ``temperature``,
        ``top_k``, ``max_new_tokens``, ``seed``, ``reload``. texts: heading → the HTML widget of its text. samples:
        heading → the last :class:`~spanviz.sampling.TextSample` drawn (what is shown), or the error text when the
        settings were refused.
    """

    def __init__(self, models: Callable[[], Mapping[str, tuple[nn.Module, Any]]], *, prompt: str = "The",
                 max_new_tokens: int = 40, temperature: float = 0.8, top_k: int | None = 40, seed: int = 0,
                 empty: str = "no model to sample from yet") -> None:
        self.models_fn, self.empty = models, str(empty)
        check_float("temperature", temperature, TEMPERATURE_RANGE[0], TEMPERATURE_RANGE[1])
        check_int("max_new_tokens", max_new_tokens, 1, MAX_NEW_TOKENS)
        check_int("seed", seed, 0, MAX_SEED_SHOWN)
        if top_k is not None:
            check_int("top_k", top_k, 1)
        if not isinstance(prompt, str):
            raise ValueError(f"prompt must be a string, got {type(prompt).__name__}")
        stops = [(f"{k} (greedy)" if k == 1 else str(k), k) for k in sorted({*TOP_K_CHOICES, top_k or 1})]
        options = [*stops, ("all", 0)]
        c: dict[str, W.Widget] = {}
        c["prompt"] = W.Text(value=prompt, description="prompt", continuous_update=False,
                             style={"description_width": "initial"}, layout=W.Layout(width="420px"))
        c["temperature"] = slider(W.FloatSlider, "temperature", temperature, continuous=False,
                                  min=TEMPERATURE_RANGE[0], max=TEMPERATURE_RANGE[1], step=0.05)
        c["top_k"] = slider(W.SelectionSlider, "top-k", 0 if top_k is None else top_k, continuous=False,
                            options=options)
        c["max_new_tokens"] = slider(W.IntSlider, "new tokens", max_new_tokens, continuous=False, min=1,
                                     max=MAX_NEW_TOKENS)
        c["seed"] = W.BoundedIntText(value=seed, min=0, max=MAX_SEED_SHOWN, description="seed",
                                     style={"description_width": "initial"}, layout=W.Layout(width="150px"))
        c["reload"] = W.Button(description="Sample from model", icon="refresh",
                               tooltip="take the model as it is now (during or after training) and sample again")
        self.controls = c
        self.note, self.error = W.HTML(""), W.HTML("")
        self.models: dict[str, tuple[nn.Module, Any]] = {}
        self.texts: dict[str, W.HTML] = {}
        self.samples: dict[str, TextSample | str] = {}
        self.columns = W.HBox(layout=W.Layout(width="100%"))
        for name in ("prompt", "temperature", "top_k", "max_new_tokens", "seed"):
            c[name].observe(lambda _change: self.redraw(), names="value")
        c["reload"].on_click(lambda _button: self.reload())
        self.widget = W.VBox([
            W.HBox([c["prompt"], c["seed"], c["reload"]], layout=W.Layout(flex_flow="row wrap")),
            W.HBox([c["temperature"], c["top_k"], c["max_new_tokens"]], layout=W.Layout(flex_flow="row wrap")),
            self.note, self.error, self.columns,
        ])
        self.reload()

    def settings(self) -> dict[str, Any]:
        """The controls' current sampling settings, as :func:`spanviz.sampling.sample_text` takes them."""
        c = self.controls
        return {"max_new_tokens": c["max_new_tokens"].value, "temperature": c["temperature"].value,
                "top_k": c["top_k"].value or None, "seed": c["seed"].value}

    def reload(self) -> None:
        """Take the models again (``models()``) and sample from them; a ``ValueError`` of ``models()`` (a replayed
        run whose vocabulary cannot be rebuilt here) is shown in place of the texts."""
        try:
            self.models = dict(self.models_fn())
            self.error.value = ""
        except ValueError as error:
            self.models, self.error.value = {}, f"<div style='color:#b00'>{html.escape(str(error))}</div>"
        if not self.models and not self.error.value:
            self.error.value = f"<i>{html.escape(self.empty)}</i>"
        self.samples = {}
        if list(self.models) != list(self.texts):
            self.texts = {name: W.HTML(layout=W.Layout(flex="1 1 0", min_width="0", padding="0 8px"))
                          for name in self.models}
            self.columns.children = tuple(self.texts.values())
        self.redraw()

    def redraw(self) -> None:
        """Sample from every model with the current settings and show the texts."""
        with computing(self.note, "samples"), analytic_threads():
            for name, (model, tokenizer) in self.models.items():
                try:
                    self.samples[name] = sample_text(model, tokenizer, self.controls["prompt"].value,
                                                     **self.settings())
                except ValueError as error:  # a setting the sampler refuses (an empty prompt): said in place
                    self.samples[name] = str(error)
                self.texts[name].value = _html(name, self.samples[name])


def _html(heading: str, sample: TextSample | str) -> str:
    """A model's heading, then its prompt (grey italics) and continuation, line breaks kept."""
    head = f"<div style='font-weight:bold;margin-bottom:4px'>{html.escape(heading)}</div>"
    if isinstance(sample, str):
        return f"{head}<div style='color:#b00'>{html.escape(sample)}</div>"
    # the continuation as the whole text has it (the word tokenizer's space or line break after the prompt)
    rest = sample.text[len(sample.prompt):] if sample.text.startswith(sample.prompt) else f" {sample.continuation}"
    return (f"{head}<div style='white-space:pre-wrap;font-family:monospace;line-height:1.4'>"
            f"<i style='color:#777'>{html.escape(sample.prompt)}</i>{html.escape(rest)}</div>")
