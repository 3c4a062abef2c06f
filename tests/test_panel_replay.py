"""What a panel replays from the store: the standard run of notebook 01 whatever α says, runs of another data
variant (with the difference said), and — for the tour — the trained model after a replay."""

from __future__ import annotations

import torch

from spanviz import widgets
from spanviz.model import GPTConfig
from spanviz.store import ResultsStore
from spanviz.train import TrainConfig, Trainer
from spanviz.widgets import RunSpec, TrainingPanel

SMALL = GPTConfig(vocab_size=64, context_length=24, n_layer=1, n_head=2, d_model=32)  # d_head 16 < T 24
TINY_TRAIN = TrainConfig(steps=3, batch_size=2, eval_interval=2, eval_iters=1, warmup_steps=0, device="cpu")


class FakeData:
    """Random token ids described like WikiText-2 of the given splits (text hashes follow the splits)."""

    def __init__(self, splits=("validation", "test"), vocab: int = 64, n: int = 4000) -> None:
        g = torch.Generator().manual_seed(len(splits[0]))
        self.train_ids = torch.randint(vocab, (n,), generator=g)
        self.eval_ids = torch.randint(vocab, (n,), generator=g)
        self.vocab_size, self.splits = vocab, {"train": splits[0], "eval": splits[1]}

    def describe(self) -> dict:
        return {"dataset": "wikitext-2", "source": "local folder", "config": "wikitext-2-v1",
                "splits": dict(self.splits), "tokenizer": "word", "max_vocab": self.vocab_size,
                "vocab_size": self.vocab_size, "n_tokens": {"train": 4000, "eval": 4000},
                "text_sha256": {role: split * 8 for role, split in self.splits.items()}}


def counting_factory(built: list[str]):
    def make(spec, data):
        built.append(spec.label)
        return Trainer(spec.model_cfg, spec.train_cfg, data, probes=tuple(spec.probes))
    return make


def test_changing_alpha_retrains_only_the_alpha_run(tmp_path):
    built: list[str] = []
    store = ResultsStore(tmp_path)
    panel = widgets.SpansPanel(SMALL, train_cfg=TINY_TRAIN, data=FakeData(), store=store, probe_every=1,
                               static=False, trainer_factory=counting_factory(built))
    assert panel.train(blocking=True).state == "done"
    assert built == ["standard", "standard, seed 1", "kv8 [1 0 0 0]"]
    first = panel.training.histories
    panel.controls["alpha1"].value = 0.5
    panel.controls["preset"].value = "qk4"
    built.clear()
    assert panel.train(blocking=True).state == "done"
    assert built == ["qk4 [1 0.5 0 0]"]  # α and preset changed: the standard runs replay
    assert panel.training.replayed == ["standard", "standard, seed 1"]
    assert panel.training.histories["standard"] == first["standard"]


def test_a_run_of_other_data_replays_and_the_status_says_which_data(tmp_path):
    store = ResultsStore(tmp_path)
    specs = lambda: [RunSpec("tiny GPT", SMALL, TINY_TRAIN)]  # noqa: E731
    made_offline = TrainingPanel(specs, data=FakeData(("validation", "test")), store=store, static=False)
    made_offline.train(blocking=True)
    built: list[str] = []
    student = TrainingPanel(specs, data=FakeData(("train", "validation")), store=store, static=False,
                            trainer_factory=counting_factory(built))
    student.train(blocking=True)
    assert built == [] and student.replayed == ["tiny GPT"]
    assert student.status.value == html_escaped(
        "replayed from the store: tiny GPT (3 steps, on a CPU; trained on the validation split, evaluated on test "
        "— your data: train, validation; with another vocabulary than yours (its ids are other words): its model is "
            "not shown)")
    assert student.histories["tiny GPT"] == made_offline.histories["tiny GPT"]


def html_escaped(text: str) -> str:
    import html

    return html.escape(text)


def test_the_tour_panel_keeps_the_final_weights_and_gives_the_model_after_a_replay(tmp_path):
    store = ResultsStore(tmp_path)
    trainers = {}

    def make(spec, data):
        trainers[spec.label] = Trainer(spec.model_cfg, spec.train_cfg, data)
        return trainers[spec.label]

    specs = lambda: [RunSpec("tiny GPT", SMALL, TINY_TRAIN)]  # noqa: E731
    panel = TrainingPanel(specs, data=FakeData(), store=store, static=False, trainer_factory=make,
                          keep_weights=True)
    panel.train(blocking=True)
    assert panel.replayed_model("tiny GPT") is None  # it trained here: the trainer has the model
    trained = trainers["tiny GPT"].model.state_dict()

    again = TrainingPanel(specs, data=FakeData(), store=store, static=False, keep_weights=True)
    again.train(blocking=True)
    model = again.replayed_model("tiny GPT")
    assert again.replayed == ["tiny GPT"] and model is not None and not model.training
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, trained[name], rtol=2e-3, atol=2e-4)  # float16 in the store
    x = torch.randint(0, 64, (1, SMALL.context_length))
    with torch.no_grad():
        torch.testing.assert_close(model(x)[0], trainers["tiny GPT"].model.eval()(x)[0], rtol=1e-2, atol=1e-2)

    plain = TrainingPanel(specs, data=FakeData(), store=ResultsStore(tmp_path / "plain"), static=False)
    plain.train(blocking=True)
    plain.train(blocking=True)
    assert plain.replayed == ["tiny GPT"] and plain.replayed_model("tiny GPT") is None  # no weights were kept
