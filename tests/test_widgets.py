"""Panel logic without a browser: sliders change figure data, Stop, errors, blocking mode, replays, fallback."""

from __future__ import annotations

import re
import sys
import threading
import time
from types import SimpleNamespace

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go
import pytest
import torch

from spanviz import plots, widgets
from spanviz.model import GPTConfig
from spanviz.plots.common import series
from spanviz.plots.local_global import head_mask_columns
from spanviz.plots.span_blocks import DIM_OPACITY
from spanviz.plots.spans import subspace_angles_data
from spanviz.runner import Job, Runner, append_rows
from spanviz.train import TrainConfig
from spanviz.widgets import spans as spans_widget
from spanviz.widgets.figure.view import use_static
from spanviz.widgets.figure.widget import SEEN, PlotlyFigure, encode
from spanviz.widgets.local_global import MASK_ZOOM
from spanviz.widgets.specs import default_data

SMALL = GPTConfig(vocab_size=64, context_length=24, n_layer=1, n_head=2, d_model=32)  # d_head 16 < T 24
TINY_TRAIN = TrainConfig(steps=3, batch_size=2, eval_interval=2, eval_iters=1, warmup_steps=0, device="cpu")


class FakeData:
    """Minimal token data for the real Trainer: random ids, vocab 64."""

    def __init__(self, vocab: int = 64, n: int = 4000) -> None:
        g = torch.Generator().manual_seed(0)
        self.train_ids = torch.randint(vocab, (n,), generator=g)
        self.eval_ids = torch.randint(vocab, (n,), generator=g)
        self.vocab_size = vocab

    def describe(self) -> dict:
        return {"dataset": "random", "vocab_size": self.vocab_size}


class FakeTrainer:
    """Stands in for spanviz.train.Trainer: `delay` seconds per step, optional failure at step `fail_at`."""

    def __init__(self, steps: int, delay: float = 0.0, fail_at: int | None = None) -> None:
        self.steps, self.delay, self.fail_at = steps, delay, fail_at
        self.i = 0
        self.record = SimpleNamespace(config={"fake": steps}, history={})

    def step(self, n: int = 1) -> list[dict]:
        if self.i >= self.steps:
            return []
        time.sleep(self.delay)
        if self.fail_at is not None and self.i == self.fail_at:
            raise RuntimeError("boom in step")
        row = {"step": self.i, "train_loss": 5.0 - 0.01 * self.i, "val_loss": None, "lr": 1e-3}
        self.i += 1
        append_rows(self.record.history, [row])
        return [row]


def fake_panel(steps: int, delay: float = 0.0, fail_at: int | None = None, **kw) -> widgets.TrainingPanel:
    specs = lambda: [widgets.RunSpec("a", SMALL, SimpleNamespace(steps=steps)),  # noqa: E731
                     widgets.RunSpec("b", SMALL, SimpleNamespace(steps=steps))]
    return widgets.TrainingPanel(
        specs, data=FakeData(), trainer_factory=lambda spec, data: FakeTrainer(steps, delay, fail_at),
        static=False, **kw,
    )


# ------------------------------------------------------------------------------------------ static mode
def test_use_static_env_override_and_autodetect(monkeypatch):
    monkeypatch.delenv("SPANVIZ_STATIC", raising=False)
    monkeypatch.delenv("VSCODE_PID", raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    assert use_static() is False
    monkeypatch.setenv("VSCODE_PID", "123")
    assert use_static() is True
    monkeypatch.setenv("SPANVIZ_STATIC", "0")
    assert use_static() is False  # env override beats auto-detection
    assert use_static(static=True) is True  # the argument beats the env var
    monkeypatch.delenv("VSCODE_PID")
    monkeypatch.setenv("SPANVIZ_STATIC", "1")
    assert use_static() is True
    monkeypatch.delenv("SPANVIZ_STATIC")
    monkeypatch.setitem(sys.modules, "google.colab", SimpleNamespace())
    assert use_static() is True
    monkeypatch.setenv("SPANVIZ_STATIC", "maybe")
    with pytest.raises(ValueError, match="SPANVIZ_STATIC"):
        use_static()


def test_static_fallback_chosen_under_env_override(monkeypatch):
    monkeypatch.setenv("SPANVIZ_STATIC", "1")
    panel = widgets.LocalGlobalPanel(SMALL)
    view = panel.views["masks"]
    assert view.static and isinstance(view.widget, W.Output)
    before = view.widget.outputs[0]["data"]["application/vnd.plotly.v1+json"]
    panel.controls["window"].value = 2
    after = view.widget.outputs[0]["data"]["application/vnd.plotly.v1+json"]
    assert before != after  # re-rendered with the new masks
    head0 = head_mask_columns(SMALL.n_head, panel.masks().shape[1])[0]
    np.testing.assert_array_equal(np.asarray(view.figure.data[0].z)[:, head0], panel.masks()[0].astype(float))


def test_figure_view_patches_and_rebuilds_in_the_same_widget():
    fig = plots.subspace_angles_figure({"Q–K": [0.1, 0.2]})
    view = widgets.FigureView(fig, static=False)
    widget = view.widget
    assert isinstance(widget, PlotlyFigure) and widget.revision == 0
    assert view.update(subspace_angles_data({"Q–K": [0.3, 0.4]})) == "patched"
    np.testing.assert_allclose(widget.data[0]["y"], np.degrees([0.3, 0.4]))  # what the browser is sent
    assert widget.data[0]["marker"] == view.data[0]["marker"]  # styles kept from the built figure
    two = {"Q–K": [0.3], "K–V": [0.5]}
    with pytest.raises(ValueError, match="build="):
        view.update(subspace_angles_data(two))
    assert view.update(subspace_angles_data(two), build=lambda: plots.subspace_angles_figure(two)) == "rebuilt"
    assert view.widget is widget and len(widget.data) == 2 and widget.revision == 2  # no new widget, ever
    assert view.update(subspace_angles_data(two), layout={"title": {"text": "new"}}) == "patched"
    assert widget.figure_layout["title"] == {"text": "new"} and view.figure.layout.title.text == "new"


def test_plotly_figure_sends_one_message_per_update_with_binary_arrays(monkeypatch):
    """The browser gets the whole figure state in one message; arrays (NaN included) as binary buffers."""
    sent = []
    fig = PlotlyFigure(go.Figure(go.Heatmap(z=np.zeros((2, 2)))))
    monkeypatch.setattr(fig, "_send", lambda msg, buffers=None: sent.append((msg, buffers)))
    z = np.array([[1.0, np.nan], [3.0, 4.0]])
    fig.show([{"type": "heatmap", "z": z}])
    (msg, buffers), = sent
    state = msg["state"]
    assert set(state) == {"_data", "_revision"} and state["_revision"] == 1
    assert state["_data"][0]["z"]["dtype"] == "float64" and state["_data"][0]["z"]["shape"] == [2, 2]
    assert len(buffers) == 1
    np.testing.assert_array_equal(np.frombuffer(buffers[0], dtype=np.float64), z.ravel())
    assert encode([1.0, float("nan")])["dtype"] == "float64"  # a list with NaN: binary (JSON has no NaN)
    assert encode([1, 2]) == [1, 2] and encode(np.array([True, False]))["dtype"] == "float64"
    assert encode(np.array(["a", "b"])) == ["a", "b"] and encode(float("inf")) is None


# ------------------------------------------------------------------------------------------ spans panel
@pytest.fixture(scope="module")
def spans_panel():
    return widgets.SpansPanel(SMALL, static=False)


def test_spans_blocks_sum_to_captured_dS(spans_panel):
    assert spans_panel.alphas == (1.0, 0.0, 0.0, 0.0)  # default [1000]
    for i in range(4):
        spans_panel.controls[f"alpha{i}"].value = 1.0  # [1111]: the shown blocks are the unscaled blocks
    data = spans_panel.views["blocks"].widget.data
    heat = [t for t in data if t["type"] == "heatmap"]
    assert len(heat) == 8
    dS = spans_panel.captures[0].dS[0, 0].double().numpy()
    np.testing.assert_allclose(sum(np.asarray(t["z"]) for t in heat), dS, atol=1e-6 * np.abs(dS).max())


def test_spans_alpha_slider_changes_figure_data(spans_panel):
    blocks, toy = spans_panel.views["blocks"].widget, spans_panel.views["toy"].widget
    assert np.abs(blocks.data[0]["z"]).max() > 0
    n = sum(t["type"] == "heatmap" for t in blocks.data)
    layout = blocks.figure_layout
    bars_before = [s["y1"] for s in layout["shapes"][n:]]
    z_before = np.array(blocks.data[0]["z"])
    zmax = layout["coloraxis"]["cmax"]
    spans_panel.controls["alpha0"].value = 0.5
    layout = blocks.figure_layout
    # S1 (order 0) at α 0.5: its cells unchanged, drawn on a colour range twice as wide (the colours of 0.5·S1 on
    # the colour bar), its scaled norm bar halved
    np.testing.assert_array_equal(blocks.data[0]["z"], z_before)
    assert blocks.data[0]["coloraxis"] == "coloraxis2" and layout["coloraxis2"]["cmax"] == pytest.approx(2 * zmax)
    assert layout["shapes"][n]["y1"] == pytest.approx(0.5 * bars_before[0])
    spans_panel.controls["alpha0"].value = 0.0
    layout = blocks.figure_layout
    # S1 removed: drawn faded with its unscaled pattern, its scaled norm 0
    np.testing.assert_array_equal(blocks.data[0]["z"], z_before)
    assert blocks.data[0]["opacity"] == DIM_OPACITY and layout["coloraxis2"]["cmax"] == zmax
    assert blocks.data[1]["opacity"] == (DIM_OPACITY if spans_panel.alphas[1] == 0 else 1)
    assert [s["y1"] for s in layout["shapes"][n:]] == [0.0, *bars_before[1:]]
    titles = [a["text"] for a in layout["annotations"]]
    alpha1 = spans_panel.controls["alpha1"].value
    assert "S1 (order 0) ×0" in titles and f"S2 (order 1) ×{alpha1:g}" in titles  # each block says its α
    tip = toy.data[6]
    np.testing.assert_allclose([tip["x"][1], tip["y"][1], tip["z"][1]], spans_panel.toy["violation"])
    spans_panel.controls["alpha0"].value = 1.0


def test_spans_head_and_preset_pickers(spans_panel):
    blocks, angles = spans_panel.views["blocks"].widget, spans_panel.views["angles"].widget
    z_head0 = np.array(blocks.data[0]["z"])
    angles0 = np.array(angles.data[0]["y"])
    spans_panel.controls["head"].value = 1
    assert not np.allclose(blocks.data[0]["z"], z_head0)
    assert not np.allclose(angles.data[0]["y"], angles0)
    said: list[str] = []
    spans_panel.busy.observe(lambda change: said.append(change["new"]), names="value")
    angles_revision = angles.revision
    spans_panel.controls["preset"].value = "qk4"
    assert len(blocks.data) == 4 + 1  # rebuilt: 4 blocks (orders 0, 1, 1, 2) + the colour bar's trace
    assert len(blocks.figure_layout["shapes"]) == 2 * 4  # and their norm bars
    assert angles.revision == angles_revision  # the angles depend on layer and head only: not redrawn
    assert "computing the blocks…" in said[0] and said[-1] == ""  # shown while it computed, then cleared
    assert spans_panel.views["blocks"].widget is blocks  # the same widget shows the new figure
    said.clear()
    spans_panel.controls["preset"].value = "kv8"
    spans_panel.controls["head"].value = 0
    assert len(blocks.data) == 9
    assert said == []  # kv8 head 0 is cached: nothing to compute, nothing said (no flash of "computing…")
    np.testing.assert_array_equal(angles.data[0]["y"], angles0)  # head 0's angles again
    assert angles.revision > angles_revision


def test_spans_states_are_keyed_by_their_pick():
    """block_scaler.js keeps each state the kernel draws under its pick, "preset|layer|head" as the dropdowns'
    labels read, with the cells α needs."""
    panel = widgets.SpansPanel(SMALL, static=False)
    blocks, scaler = panel.views["blocks"].widget, panel.scaler
    assert scaler._cells["key"] == "kv8|0|0" and scaler._revision == blocks.revision
    panel.controls["head"].value = 1
    panel.controls["preset"].value = "qk4"
    assert scaler._cells["key"] == "qk4|0|1" and scaler._revision == blocks.revision
    assert "|".join(c.label for c in scaler._pickers) == scaler._cells["key"]
    assert scaler._cells["names"] == ["S1", "S2", "S3", "S4"]


def test_a_live_page_is_sent_every_other_pick_ahead_the_state_the_kernel_would_draw():
    """Once block_scaler.js is live, the kernel sends the blocks states of the picks it has not drawn, nearest first
    (so the page draws a first pick at once); each is the state the kernel draws when that pick is made — at the α
    of the prefetch, which the page rescales like any kept state — with the cells the page rescales it by."""
    panel = widgets.SpansPanel(SMALL, static=False)
    scaler, blocks = panel.scaler, panel.views["blocks"].widget
    assert scaler._prefetched == {}  # no page yet: nothing sent
    revision = blocks.revision
    scaler.live = True  # what the page's module says first
    keys = list(scaler._prefetched)
    assert keys == ["kv8|0|1", "qkv8|0|0", "qk4|0|0", "qkv8|0|1", "qk4|0|1"]  # one dropdown changed first
    assert blocks.revision == revision and panel._key() == ("kv8", 0, 0)  # nothing drawn, nothing picked meanwhile
    for key in keys:
        sent = scaler._prefetched[key]
        preset, layer, head = key.split("|")
        panel.controls["preset"].value = preset
        panel.controls["layer"].value = int(layer)
        panel.controls["head"].value = int(head)
        assert scaler._cells == sent["cells"]  # what α needs, as for a state the kernel drew
        assert encode(blocks.data) == encode(sent["data"]) and encode(blocks.figure_layout) == encode(sent["layout"])
    with pytest.MonkeyPatch.context() as mp:  # a long context: nothing computed ahead
        mp.setattr(spans_widget, "PREFETCH_MAX_T", SMALL.context_length - 1)
        assert widgets.SpansPanel(SMALL, static=False).prefetch() == []


# -------------------------------------------------------------------------------- local/global, FP8 views
def test_local_global_masks_follow_sliders():
    panel = widgets.LocalGlobalPanel(SMALL, static=False)
    fig = panel.views["masks"].widget
    panel.controls["context"].value = 16
    assert "T = 16" in fig.figure_layout["title"]["text"]
    panel.controls["n_local"].value = 1
    panel.controls["window"].value = 3
    T = 16
    cols, zcols = head_mask_columns(SMALL.n_head, T), head_mask_columns(SMALL.n_head, min(MASK_ZOOM, T))
    whole, zoom = (np.asarray(t["z"]) for t in fig.data)  # one row of heads each: whole masks, first positions
    z = whole[:, cols[0]]
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    np.testing.assert_array_equal(z, ((j <= i) & (i - j < 3)).astype(float))
    np.testing.assert_array_equal(whole[:, cols[1]], (j <= i).astype(float))  # head 1 global
    np.testing.assert_array_equal(zoom[:, zcols[0]], z[: MASK_ZOOM, : MASK_ZOOM])  # the zoom follows
    assert fig.figure_layout["annotations"][0]["text"] == "head 0: local (p=3)"
    panel.controls["n_local"].value = 0
    np.testing.assert_array_equal(np.asarray(fig.data[0]["z"])[:, cols[0]], (j <= i).astype(float))
    assert fig.figure_layout["annotations"][0]["text"] == "head 0: global"


def test_fp8_rank_delta_margin_update_bounds():
    panel = widgets.FP8Panel(SMALL, static=False)
    fig = panel.views["bounds"].widget
    panel.controls["rank"].value = 4
    assert list(fig.data[-1]["x"]) == [4, 4, 4, 4]
    rank_aware = np.array(fig.data[2]["y"])
    panel.controls["delta"].value = 1e-6
    assert np.all(np.array(fig.data[2]["y"]) > rank_aware)  # smaller δ ⇒ larger bound
    table, bounds = panel.scales.value, np.array(fig.data[0]["y"])
    panel.controls["margin"].value = 2
    assert panel.scales.value != table and "r = 4" in panel.scales.value
    np.testing.assert_allclose(fig.data[0]["y"], 4 * bounds)  # what the scale from each bound holds: 2^2 × bound
    assert fig.data[0]["name"].startswith("worst case × 2^2")  # (+ "(= rank-agnostic × 2^2 here)" when equal)


def test_fp8_training_figure_marks_the_planned_spike_before_training():
    from dataclasses import replace

    panel = widgets.FP8Panel(SMALL, train_cfg=replace(TINY_TRAIN, steps=200), data=FakeData(), store=None,
                             static=False)
    panel.controls["spike_step"].value = 60
    panel.controls["spike_factor"].value = 10.0
    layout = panel.views["train/fp8"].layout
    rects = [s for s in layout["shapes"] if s["type"] == "rect"]
    assert len(rects) == 3 and rects[0]["x0"] == 59.5  # every row, from the start
    assert layout["xaxis"]["range"] == [0, 200]
    assert [s["name"] for s in layout["shapes"] if s.get("showlegend")] == ["LR spike ×10, steps 60–64"]


# ---------------------------------------------------------------------------------------- runner, panel
def test_stop_ends_run_within_a_second():
    panel = fake_panel(steps=100_000, delay=0.02)
    runner = panel.train(blocking=False)
    time.sleep(0.3)
    assert runner.running
    t0 = time.perf_counter()
    assert panel.stop(wait=True, timeout=1.0)
    assert time.perf_counter() - t0 < 1.0
    assert runner.state == "stopped"
    done, total = runner.progress
    assert 0 < done < total
    assert panel.controls["start"].disabled is False and "stopped" in panel.status.value


def test_stop_then_continue_trains_the_same_runs_on():
    panel = fake_panel(steps=40, delay=0.01)
    runner = panel.train(blocking=False)
    deadline = time.monotonic() + 10
    while runner.steps_done["b"] < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert panel.stop(wait=True, timeout=2.0)
    stopped_at = dict(runner.steps_done)
    assert 0 < stopped_at["a"] < 40 and runner.resumable
    assert panel.controls["resume"].disabled is False and panel.controls["start"].disabled is False
    assert panel.status.value.startswith("stopped: ") and "steps per run — Continue" in panel.status.value
    panel.resume(blocking=True)
    assert runner.state == "done" and runner.steps_done == {"a": 40, "b": 40}
    for h in panel.histories.values():
        assert h["step"] == list(range(40))  # went on from where it stopped, nothing repeated or lost
    assert panel.status.value == "done: 40/40 steps per run" and panel.controls["resume"].disabled
    with pytest.raises(RuntimeError, match="nothing to continue"):
        runner.resume()


def test_error_in_run_is_shown_in_panel():
    panel = fake_panel(steps=10, fail_at=3)
    runner = panel.train(blocking=False)
    assert runner.join(5.0)
    assert runner.state == "error" and isinstance(runner.error, RuntimeError)
    assert "boom in step" in panel.error.value and "Traceback" in panel.error.value
    assert "error" in panel.status.value


def test_blocking_env_var_runs_in_caller_thread_and_reraises(monkeypatch):
    monkeypatch.setenv("SPANVIZ_BLOCKING", "1")
    panel = fake_panel(steps=5)
    runner = panel.train()
    assert runner.state == "done" and runner.progress == (10, 10)
    fig = panel.views["loss"].figure
    np.testing.assert_allclose(fig.data[1].y, [5.0 - 0.01 * i for i in range(5)])  # run "a", train loss mean
    failing = fake_panel(steps=5, fail_at=1)
    with pytest.raises(RuntimeError, match="boom"):
        failing.train()
    assert "boom" in failing.error.value


def test_live_updates_wait_until_the_page_has_taken_in_the_last_one():
    """Back-pressure: once a view on a page has said which revision it has, a live update is sent only when the page
    has the one before; the end of the run always draws. Without a page (no view ever answered) nothing is held."""
    runs = {}
    for page in (True, False):
        panel = fake_panel(steps=30, delay=0.002, refresh_hz=1000.0)
        fig = panel.views["loss"].widget
        if page:  # a view on a page has taken in the figure as it is now, and then never answers again
            fig._handle_custom_msg({"kind": SEEN, "revision": fig.revision}, [])
        start = fig.revision
        panel.train(blocking=True)
        runs[page] = fig.revision - start
        assert len(panel.views["loss"].figure.data[1].y) == 30  # run "a": every step drawn at the end
        assert panel.status.value == "done: 30/30 steps per run"
    assert runs[True] == 2, "the first update, then nothing until the run's end"
    assert runs[False] > 5, runs


def test_refreshes_are_throttled():
    seen = []
    runner = Runner(on_update=lambda r: seen.append(time.perf_counter()), refresh_hz=5.0)
    job = Job("a", steps=60, make_trainer=lambda: FakeTrainer(60, delay=0.01))
    runner.start([job], blocking=True)
    gaps = np.diff(seen[:-1])  # the last refresh (end of run) is unconditional
    assert len(seen) >= 2 and np.all(gaps >= 0.2 - 1e-3)


def test_live_callbacks_run_on_the_kernels_event_loop(monkeypatch):
    """In a kernel, widgets may only change on the kernel's loop: updates sent from the training thread
    race with browser messages for the same widget and can be lost (a frozen live plot)."""
    import asyncio

    from spanviz import runner as runner_module

    monkeypatch.setattr(runner_module, "_in_kernel", lambda: True)
    calls: list[tuple[str, threading.Thread]] = []
    finished = threading.Event()

    def on_finish(r):
        calls.append(("finish", threading.current_thread()))
        finished.set()

    runner = Runner(on_update=lambda r: calls.append(("update", threading.current_thread())),
                    on_finish=on_finish, refresh_hz=50.0)

    async def kernel_cell():
        runner.start([Job("a", steps=20, make_trainer=lambda: FakeTrainer(20, delay=0.01))], blocking=False)
        while not finished.is_set():
            await asyncio.sleep(0.01)

    # The "kernel" gets a thread of its own, so a loop left running on this thread by another library
    # (Playwright's sync API does that) cannot interfere.
    kernel = threading.Thread(target=lambda: asyncio.run(asyncio.wait_for(kernel_cell(), timeout=10)))
    kernel.start()
    kernel.join(15)
    kinds = [kind for kind, _ in calls]
    assert "update" in kinds and kinds[-1] == "finish"
    assert all(thread is kernel for _, thread in calls)
    assert runner.state == "done"


def test_outside_a_kernel_callbacks_are_called_directly_even_under_a_running_loop():
    """A loop that merely looks running (no kernel) must not swallow the panel's updates."""
    import asyncio

    finished = threading.Event()
    runner = Runner(on_update=lambda r: None, on_finish=lambda r: finished.set(), refresh_hz=50.0)

    seen: dict[str, bool] = {}

    async def not_a_kernel():
        runner.start([Job("a", steps=5, make_trainer=lambda: FakeTrainer(5))], blocking=False)
        seen["ended"] = runner.join(5)
        # the loop is blocked in join(): a callback queued on it could not have run yet
        seen["finished"] = finished.is_set()

    # A thread of its own: the main thread may hold another library's loop (see the test above).
    script = threading.Thread(target=lambda: asyncio.run(not_a_kernel()))
    script.start()
    script.join(10)
    assert seen == {"ended": True, "finished": True}


def test_store_replays_repeated_configuration(tmp_path):
    from spanviz.store import ResultsStore

    store = ResultsStore(tmp_path)
    panel = widgets.LocalGlobalPanel(SMALL, train_cfg=TINY_TRAIN, data=FakeData(), store=store, probe_every=1,
                                     static=False)
    panel.controls["context"].value = 16
    panel.controls["window"].value = 4
    first = panel.train(blocking=True)
    assert first.state == "done" and len(store.list()) == 2
    hist = panel.training.histories
    assert set(hist) == {"MHSA", "LS (1 local, p=4)"}
    assert len(hist["MHSA"]["step"]) == TINY_TRAIN.steps
    assert len(panel.views["train/max_logit"].figure.data) == 2 * SMALL.n_layer
    t0 = time.perf_counter()
    second = panel.train(blocking=True)
    assert time.perf_counter() - t0 < 1.0
    assert panel.training.replayed == ["MHSA", "LS (1 local, p=4)"] and second.progress == (0, 0)
    assert panel.training.status.value == "replayed from the store: MHSA, LS (1 local, p=4) (3 steps each, on a CPU)"
    assert panel.training.histories["MHSA"]["train_loss"] == hist["MHSA"]["train_loss"]


def test_spans_and_fp8_panels_train_with_real_trainer():
    sp = widgets.SpansPanel(SMALL, train_cfg=TINY_TRAIN, data=FakeData(), store=None, probe_every=1, static=False)
    sp.controls["alpha1"].value = 1.0
    runner = sp.train(blocking=True)
    assert runner.state == "done"
    hist = sp.training.histories
    assert list(hist) == ["standard", "standard, seed 1", "kv8 [1 1 0 0]"]
    energy = sp.views["train/energy"].figure
    assert len(energy.data) == 4 and len(energy.data[0].x) == TINY_TRAIN.steps
    assert "kv8 [1 1 0 0]" in energy.layout.title.text  # says which run it measures
    band, line = sp.views["train/delta"].widget.data
    val = {k: dict(zip(*series(h, "val_loss"))) for k, h in hist.items()}
    steps = sorted(val["standard"])
    assert list(line["x"]) == steps and line["name"] == "kv8 [1 1 0 0]"
    np.testing.assert_allclose(line["y"], [100 * (val["kv8 [1 1 0 0]"][t] / val["standard"][t] - 1) for t in steps])
    noise = [100 * abs(val["standard, seed 1"][t] / val["standard"][t] - 1) for t in steps]
    np.testing.assert_allclose(band["y"][: len(steps)], noise)

    fp = widgets.FP8Panel(SMALL, train_cfg=TINY_TRAIN, data=FakeData(), store=None, static=False)
    fp.controls["rank"].value = 4
    fp.controls["spike_step"].value = 1
    assert fp.train(blocking=True).state == "done"
    (label,) = fp.training.histories
    assert label == "rank 4"
    fig = fp.views["train/fp8"].figure
    rows = {(t.meta["row"], t.meta["name"]) for t in fig.data}
    assert {("overflow", "delayed"), ("overflow", "mx"), ("underflow", "rowwise"), ("ratio", "worst case")} <= rows
    assert len(fig.data[0].x) == TINY_TRAIN.steps
    caption = fp._fp8_caption(fp.training.histories)
    assert "reductions / step" in caption and "Where the bound from the weights still matters" in caption


def test_append_rows_backfills_new_keys_and_job_validation():
    h: dict = {}
    append_rows(h, [{"step": 0, "train_loss": 5.0}, {"step": 1, "train_loss": 4.0, "logits/max": 2.0}])
    assert h == {"step": [0, 1], "train_loss": [5.0, 4.0], "logits/max": [None, 2.0]}
    with pytest.raises(ValueError, match="exactly one"):
        Job("a", steps=3)
    with pytest.raises(ValueError, match="steps"):
        Job("a", steps=0, make_trainer=lambda: FakeTrainer(1))
    runner = Runner()
    runner.start([Job("a", steps=1000, make_trainer=lambda: FakeTrainer(1000, delay=0.01))], blocking=False)
    with pytest.raises(RuntimeError, match="already in progress"):
        runner.start([Job("b", steps=1, make_trainer=lambda: FakeTrainer(1))], blocking=False)
    assert runner.stop(timeout=1.0)


def _stdout(out) -> str:
    return "".join(o.get("text", "") for o in out.outputs if o.get("name") == "stdout")


def test_report_waits_for_the_run_and_refreshes_after_each():
    panel = fake_panel(steps=30, delay=0.01)
    seen: list[dict] = []

    def last_losses(histories):
        seen.append({k: len(h.get("step", [])) for k, h in histories.items()})
        for label, h in histories.items():
            print(f"{label}: last train loss {h['train_loss'][-1]:.2f}")

    panel.train(blocking=False)
    out = panel.report(last_losses)
    assert "in progress" in _stdout(out) and seen == []  # nothing half-finished is reported
    assert panel.runner.join(10)
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:  # on_finish is delivered right after the thread ends
        time.sleep(0.01)
    assert seen == [{"a": 30, "b": 30}]
    assert _stdout(out) == "a: last train loss 4.71\nb: last train loss 4.71\n"

    panel.train(blocking=True)  # Train again: the same area is redrawn, not appended to
    assert len(seen) == 2 and _stdout(out).count("a: last train loss") == 1

    failing = fake_panel(steps=5, fail_at=2)
    with pytest.raises(RuntimeError, match="boom"):
        failing.train(blocking=True)
    broken = failing.report(lambda h: 1 / 0)  # not running: drawn at once; fn's own error is shown, not raised
    text = _stdout(broken)
    assert "(run error after" in text and "ZeroDivisionError" in text
    shown = failing.report(sorted)  # a return value is displayed below the printout
    assert shown.outputs[-1]["output_type"] == "display_data"
    assert shown.outputs[-1]["data"]["text/plain"] == "['a', 'b']"


def test_default_data_follows_the_split_environment(wikitext_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SPANVIZ_HOME", str(tmp_path))
    monkeypatch.delenv("SPANVIZ_WIKITEXT_DIR", raising=False)
    monkeypatch.delenv("SPANVIZ_TRAIN_SPLIT", raising=False)
    monkeypatch.delenv("SPANVIZ_EVAL_SPLIT", raising=False)
    assert default_data(str(wikitext_dir), max_vocab=512).splits == {"train": "validation", "eval": "test"}
    monkeypatch.setenv("SPANVIZ_TRAIN_SPLIT", "test")
    monkeypatch.setenv("SPANVIZ_EVAL_SPLIT", "validation")
    assert default_data(str(wikitext_dir), max_vocab=512).splits == {"train": "test", "eval": "validation"}


# ------------------------------------------------------------------------- defaults, marks, reset (issue 38)
def test_every_panel_default_lies_on_its_slider_grid():
    from spanviz.widgets.defaults import on_grid

    old_lr = W.FloatLogSlider(value=3e-3, base=10, min=-4, max=-1, step=0.1)  # the slider before: 0.003 off its grid
    assert not on_grid(old_lr, 3e-3) and not on_grid(W.FloatLogSlider(value=30, min=0, max=2, step=0.25), 30.0)
    notebook = GPTConfig(vocab_size=64, context_length=128, n_layer=1, n_head=4, d_model=64)
    for cls in (widgets.SpansPanel, widgets.LocalGlobalPanel, widgets.FP8Panel):
        for cfg in (SMALL, notebook):
            panel = cls(cfg, train_cfg=TINY_TRAIN, data=FakeData(), store=None, static=False)
            off = {n: v for n, v in panel.defaults.values.items() if not on_grid(panel.controls[n], v)}
            assert off == {}, (cls.__name__, cfg.context_length)


def test_a_nudge_and_back_keeps_the_default_and_its_stored_runs(tmp_path):
    from spanviz.store import ResultsStore
    from spanviz.widgets.defaults import CHANGED_CLASS

    built: list[str] = []

    def factory(spec, data):
        built.append(spec.label)
        return widgets.training.Trainer(spec.model_cfg, spec.train_cfg, data, probes=tuple(spec.probes))

    panel = widgets.LocalGlobalPanel(SMALL, train_cfg=TINY_TRAIN, data=FakeData(), store=ResultsStore(tmp_path),
                                     static=False, trainer_factory=factory)
    assert panel.train(blocking=True).state == "done" and len(built) == 2
    lr = panel.controls["lr"]
    assert lr.value == TINY_TRAIN.lr and lr.description == "learning rate" and panel.controls["reset"].disabled
    lr.index += 1  # what the page sends for one arrow key: the next option
    assert lr.value > TINY_TRAIN.lr and lr.description == "learning rate •" and CHANGED_CLASS in lr._dom_classes
    assert "default 0.003" in lr.tooltip and "learning rate" in panel.defaults.summary.value
    assert not panel.controls["reset"].disabled
    lr.index -= 1
    assert lr.value == TINY_TRAIN.lr and type(lr.value) is float and lr.description == "learning rate"
    assert CHANGED_CLASS not in lr._dom_classes and panel.defaults.summary.value == ""
    built.clear()
    assert panel.train(blocking=True).state == "done"
    assert built == [] and sorted(panel.training.replayed) == sorted(panel.training.histories)  # the same store keys


def test_reset_returns_every_control_to_the_defaults_the_notebook_set():
    panel = widgets.FP8Panel(SMALL, train_cfg=TINY_TRAIN, data=FakeData(), store=None, static=False)
    panel.set_defaults(spike_step=2, spike_factor=30.0)
    assert panel.controls["spike_factor"].value == 30.0 and panel.controls["reset"].disabled
    panel.controls["spike_factor"].index += 1
    panel.controls["rank"].value = 3
    panel.controls["delta"].value = 1e-5
    assert set(panel.defaults.changed()) == {"spike_factor", "rank", "delta"}
    assert panel.controls["rank"].description.endswith(" •")
    panel.controls["reset"].click()
    assert panel.defaults.changed() == {} and panel.controls["spike_factor"].value == 30.0
    assert panel.controls["rank"].value == SMALL.d_head and panel.controls["rank"].description == "rank r"
    assert panel.views["bounds"].figure.data[-1].x[0] == SMALL.d_head  # the ring moved back with r
    panel.set_defaults(spike_factor=7.0)  # not one of the grid's factors: the slider gains it
    assert panel.controls["spike_factor"].value == 7.0 and panel.defaults.changed() == {}
    with pytest.raises(ValueError, match="spike_step.*grid.*got 2.5"):
        panel.set_defaults(spike_step=2.5)
    with pytest.raises(ValueError, match="control must be one of"):
        panel.set_defaults(learning_rate=1e-3)


# ------------------------------------------------------------------------------- time left (issue 38, item 3)
def test_time_left_comes_from_the_measured_step_rate():
    from spanviz.widgets.eta import StepRate, time_left

    now = [0.0]
    rate = StepRate(clock=lambda: now[0])
    rate.reset()
    assert rate.seconds_left(100) is None and time_left(None) == "estimating time left…"
    for t in range(1, 41):  # 2 steps/s for 20 s, then 1 step/s for 40 s: the last 30 s decide
        now[0] = t / 2
        rate.add(t)
    assert rate.seconds_left(100) == pytest.approx(50.0)
    for t in range(41, 81):
        now[0] = 20 + (t - 40)
        rate.add(t)
    assert rate.seconds_left(100) == pytest.approx(100.0)
    assert [time_left(s) for s in (2.0, 47.0, 88.0, 100.0, 372.0)] == [
        "about 5 s left", "about 45 s left", "about 90 s left", "about 2 min left", "about 6 min left"]


def test_the_status_says_the_time_left_while_training_and_that_the_defaults_replay(tmp_path):
    from spanviz.store import ResultsStore

    def slow(spec, data):  # the real trainer at 0.1 s a step or more: the rate needs 1 s to be measured
        trainer = widgets.training.Trainer(spec.model_cfg, spec.train_cfg, data, probes=tuple(spec.probes))
        step = trainer.step
        trainer.step = lambda n=1: (time.sleep(0.1), step(n))[1]
        return trainer

    panel = widgets.LocalGlobalPanel(SMALL, train_cfg=replace_steps(TINY_TRAIN, 12), data=FakeData(),
                                     store=ResultsStore(tmp_path), static=False, trainer_factory=slow)
    seen: list[str] = []
    panel.training.status.observe(lambda ch: seen.append(ch["new"]), names="value")
    panel.training.runner.refresh_hz = 1000  # a status line after every step
    assert panel.train(blocking=True).state == "done"
    live = [s for s in seen if "steps per run" in s and "left" in s]
    assert live and all("defaults replay" not in s for s in live)  # at the defaults: nothing to point at
    assert any(re.search(r"about \d+ (s|min) left", s) for s in live), live
    assert not re.search("left", panel.training.status.value)  # done: no time left said
    panel.controls["lr"].index += 1
    seen.clear()
    assert panel.train(blocking=True).state == "done" and panel.training.replayed == []
    assert any("the defaults replay at once: Reset to defaults, then Train" in s for s in seen), seen
    panel.controls["reset"].click()
    seen.clear()
    panel.train(blocking=True)
    assert sorted(panel.training.replayed) == sorted(panel.training.histories)  # the defaults did replay


def replace_steps(cfg: TrainConfig, steps: int) -> TrainConfig:
    from dataclasses import replace

    return replace(cfg, steps=steps)


def test_a_panel_made_again_while_its_runs_train_follows_them_instead_of_starting_them_twice():
    """The tab was closed while training and opened again; its cells run again (Run All). The new panel says that
    runs are still training in this kernel; its Train follows them (the same runner, no second trainer made) and
    draws them to the end; a panel of other settings trains on its own."""
    made: list[str] = []
    gate = threading.Event()

    class GatedTrainer(FakeTrainer):
        def step(self, n: int = 1) -> list[dict]:
            gate.wait(timeout=60)  # the first page's runs go on until the new panel is there
            return super().step(n)

    def panel(steps: int) -> widgets.TrainingPanel:
        specs = lambda: [widgets.RunSpec("a", SMALL, SimpleNamespace(steps=steps)),  # noqa: E731
                         widgets.RunSpec("b", SMALL, SimpleNamespace(steps=steps))]
        return widgets.TrainingPanel(specs, data=FakeData(), static=False,
                                     trainer_factory=lambda spec, data: made.append(spec.label) or GatedTrainer(steps))

    first = panel(7)
    runner = first.train(blocking=False)
    try:
        assert runner.running
        again = panel(7)
        assert "still training in this kernel" in again.status.value and "a 0/7 steps" in again.status.value
        assert again.train(blocking=False) is runner and again.following and again.runner is runner
        assert "following the runs already training" in again.status.value
        assert again.controls["stop"].disabled is False and again.controls["start"].disabled is True
        other = panel(5)  # other settings: not the same runs
        assert other.train(blocking=False) is not runner
    finally:
        gate.set()
    other.runner._thread.join(timeout=60)
    runner._thread.join(timeout=60)
    assert runner.state == "done" and sorted(made) == ["a", "a", "b", "b"]  # 7-step runs made once, 5-step once
    drawn = again.views["loss"].figure
    assert max(max(t.x) for t in drawn.data if t.x is not None and len(t.x)) == 6  # drawn to the last step (0-based)
    assert again.status.value.startswith("done: 7/7 steps per run")
