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
        "— your data: train, validation; with another vocabulary than yours (its ids are other words))")
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


def test_a_replayed_model_comes_with_the_words_its_ids_mean_or_is_not_shown(tmp_path, monkeypatch, wikitext_dir):
    """The tour's three cases, on real text: a run of your own training text replays its model with your vocabulary;
    one of another split (the bundle's validation split, where yours is test) with its own, rebuilt here from its
    split and checked by the text's sha256 — the same model, the same tokenizer for looking inside and for sampling;
    one whose split this machine holds as other text cannot be rebuilt: its curve replays, its model is not shown,
    and the status line says so."""
    import shutil

    from spanviz.data.tokens import prepare_tokens

    home = tmp_path / "home"
    monkeypatch.setenv("SPANVIZ_HOME", str(home))
    monkeypatch.setenv("SPANVIZ_WIKITEXT_DIR", str(wikitext_dir))  # where a run's own split is read again
    bundle_data = prepare_tokens(wikitext_dir, splits={"train": "validation", "eval": "test"}, max_vocab=64)
    mine = prepare_tokens(wikitext_dir, splits={"train": "test", "eval": "validation"}, max_vocab=64)
    store = ResultsStore(tmp_path / "runs")
    trainers = {}

    def make(spec, data):
        trainers[spec.label] = Trainer(spec.model_cfg, spec.train_cfg, data)
        return trainers[spec.label]

    specs = lambda: [RunSpec("tiny GPT", SMALL, TINY_TRAIN)]  # noqa: E731 (SMALL: V = 64)
    TrainingPanel(specs, data=bundle_data, store=store, static=False, keep_weights=True, trainer_factory=make).train(
        blocking=True)
    trained = trainers["tiny GPT"].model.state_dict()

    same = TrainingPanel(specs, data=bundle_data, store=store, static=False, keep_weights=True)
    same.train(blocking=True)
    assert same.found["tiny GPT"].vocabulary.state == "yours"
    assert same.replayed_tokenizer("tiny GPT") is bundle_data.tokenizer and same.replayed_model("tiny GPT") is not None

    student = TrainingPanel(specs, data=mine, store=store, static=False, keep_weights=True)
    student.train(blocking=True)
    assert student.replayed == ["tiny GPT"] and student.found["tiny GPT"].vocabulary.state == "rebuilt"
    model, tokenizer = student.replayed_model("tiny GPT"), student.replayed_tokenizer("tiny GPT")
    for name, tensor in model.state_dict().items():  # the trained model, not an untrained one
        torch.testing.assert_close(tensor, trained[name], rtol=2e-3, atol=2e-4)
    assert tokenizer.itos == bundle_data.tokenizer.itos != mine.tokenizer.itos
    assert student.status.value.endswith(html_escaped(
        "with another vocabulary than yours: its model reads its own, rebuilt here from the validation split)"))

    changed = tmp_path / "changed"  # this machine's "validation" split is other text than the run's
    changed.mkdir()
    shutil.copy(wikitext_dir / "test.txt", changed / "test.txt")
    text = (wikitext_dir / "valid.txt").read_text(encoding="utf-8")
    (changed / "valid.txt").write_text(text[: len(text) // 2], encoding="utf-8")
    monkeypatch.setenv("SPANVIZ_WIKITEXT_DIR", str(changed))
    elsewhere = TrainingPanel(specs, data=mine, store=store, static=False, keep_weights=True)
    elsewhere.train(blocking=True)
    assert elsewhere.replayed == ["tiny GPT"] and elsewhere.histories["tiny GPT"] == same.histories["tiny GPT"]
    assert elsewhere.found["tiny GPT"].vocabulary.state == "unavailable"
    assert elsewhere.replayed_model("tiny GPT") is None and elsewhere.replayed_tokenizer("tiny GPT") is None
    assert elsewhere.status.value.endswith(html_escaped(
        "with another vocabulary than yours (its ids are other words), not to be had here: its model is not shown)"))


def test_models_gives_the_runs_trained_here_and_the_replayed_runs_whose_weights_were_kept(tmp_path):
    """What the comparison's samples read (notebooks 01 and 02): each run trained here, copied as it is now; after a
    replay, the final weights the store kept; a replayed run without weights is left out, and the samples say so."""
    from spanviz.widgets.sampling import SamplesView

    class Data(FakeData):
        tokenizer = "the data's tokenizer"

    store = ResultsStore(tmp_path)
    made = {}

    def make(spec, data):
        made[spec.label] = Trainer(spec.model_cfg, spec.train_cfg, data)
        return made[spec.label]

    specs = lambda: [RunSpec("a", SMALL, TINY_TRAIN), RunSpec("b", SMALL, TrainConfig(**{**TINY_TRAIN.to_dict(),  # noqa: E731
                                                                                          "seed": 1}))]
    here = TrainingPanel(specs, data=Data(), store=store, static=False, trainer_factory=make, keep_weights=True)
    here.train(blocking=True)
    models = here.models()
    assert list(models) == ["a", "b"] and all(tok == "the data's tokenizer" for _, tok in models.values())
    for label, (model, _) in models.items():
        assert model is not made[label].model and not model.training  # a copy, in eval mode
        assert all(torch.equal(p, q) for p, q in zip(model.state_dict().values(),
                                                     made[label].model.state_dict().values()))
    replay = TrainingPanel(specs, data=Data(), store=store, static=False, keep_weights=True)
    replay.train(blocking=True)
    assert replay.replayed == ["a", "b"] and list(replay.models()) == ["a", "b"]
    torch.testing.assert_close(replay.models()["b"][0].state_dict()["lm_head.weight"],
                               made["b"].model.state_dict()["lm_head.weight"], rtol=2e-3, atol=2e-4)  # float16
    bare = ResultsStore(tmp_path / "bare")  # runs stored without their weights (as the shipped GPU runs are)
    for _, record in store.records():
        bare.put(record)
    without = TrainingPanel(specs, data=Data(), store=bare, static=False)
    without.train(blocking=True)
    assert without.replayed == ["a", "b"] and without.models() == {}
    samples = SamplesView(without.models, empty="no weights: train here")
    assert samples.texts == {} and "no weights: train here" in samples.error.value
