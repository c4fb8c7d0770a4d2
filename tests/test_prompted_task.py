"""``rt-smollm``: prompt assembly, verbalizer logits, and every text method on a tiny Llama.

The real SmolLM2 is used only by the ``slow`` check at the end; the others replace its weights and
data by a tiny random causal LM and synthetic prompts (``tiny_prompted``), and run FedKSeed,
FedKSeed-Pro, FedIT, FFA-LoRA and Fed-SB (also with DP-SGD) through the real apps on the
in-process grid.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from bouquet.apps import client_app
from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.runner import execute
from bouquet.tasks.classification import Arrays
from bouquet.tasks.prompted import RtSmolLM, assemble, last_positions, verbalizer_logits

VOCAB, PAD, WORDS = 64, 0, (5, 7)


def tiny_lm() -> nn.Module:
    """A 2-layer random Llama causal LM with tied embeddings (as SmolLM2), fixed seed."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                      max_position_embeddings=64, tie_word_embeddings=True)
    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    try:
        return LlamaForCausalLM(cfg).eval()
    finally:
        torch.random.set_rng_state(state)


def padded_rows(lengths: list[int], width: int, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    x = np.full((len(lengths), width), PAD, np.int64)
    for i, n in enumerate(lengths):
        x[i, :n] = rng.integers(1, VOCAB, n)
    return torch.from_numpy(x)


def synthetic_arrays() -> Arrays:
    """Prompts whose label is whether token 9 occurs: a tiny LM can learn it."""
    rng = np.random.default_rng(0)

    def rows(n: int) -> tuple[np.ndarray, np.ndarray]:
        lengths = rng.integers(3, 12, n)
        x = padded_rows(lengths.tolist(), 16, int(rng.integers(1 << 30))).numpy()
        y = rng.integers(0, 2, n)
        x[np.arange(n), 0] = np.where(y == 1, 9, 10)
        return x, y.astype(np.int64)

    x_tr, y_tr = rows(96)
    x_te, y_te = rows(32)
    return Arrays(x_tr, y_tr, x_te, y_te, groups=np.arange(96) % 8)


def test_assemble_truncates_the_review_and_keeps_the_suffix() -> None:
    out = assemble([[1, 2, 3, 4, 5, 6], [7]], [8, 9], 6, PAD)
    assert out.tolist() == [[1, 2, 3, 4, 8, 9], [7, 8, 9, 0, 0, 0]]
    with pytest.raises(ValueError, match="no room"):
        assemble([[1]], [8, 9], 2, PAD)


def test_last_positions_are_the_last_real_tokens() -> None:
    x = padded_rows([3, 1, 5], 7)
    assert last_positions(x != PAD).tolist() == [2, 0, 4]


def test_verbalizer_logits_equal_the_full_vocabulary_logits_at_the_last_real_token() -> None:
    model = tiny_lm()
    lengths = [3, 7, 5, 1]
    x = padded_rows(lengths, 10)  # 3 columns of padding in every row: they are cut
    with torch.no_grad():
        ours = verbalizer_logits(model, x, PAD, WORDS)
        for i, n in enumerate(lengths):
            full = model(input_ids=x[i : i + 1, :n]).logits[0, n - 1, list(WORDS)]
            assert torch.allclose(ours[i], full, atol=1e-5), i
    assert ours.shape == (4, 2)


class TinyPrompted(RtSmolLM):
    """rt-smollm's code on a tiny random LM and synthetic prompts (no SmolLM2, no tokenizer)."""

    pad_id = PAD  # type: ignore[assignment]
    word_ids = WORDS  # type: ignore[assignment]
    test_rows = eval_size = 32

    def require(self) -> None:
        """Nothing packaged."""

    def load_pretrained(self) -> nn.Module:
        """The tiny LM."""
        return tiny_lm()

    def load_arrays(self) -> Arrays:
        """Synthetic prompts."""
        return synthetic_arrays()


def test_the_task_has_no_head_and_its_example_losses_are_per_row() -> None:
    task = TinyPrompted()
    a, b = task.initial_arrays(0), task.initial_arrays(1)
    assert all(np.array_equal(a[k], b[k]) for k in a)  # nothing is drawn: no new head
    x, y = torch.from_numpy(task.data.x_train[:6]), torch.from_numpy(task.data.y_train[:6])
    model = task.build_model()
    with torch.no_grad():
        per_row = task.example_losses(model, x, y)
        alone = torch.stack([task.example_losses(model, x[i : i + 1], y[i : i + 1])[0]
                             for i in range(6)])
    assert torch.allclose(per_row, alone, atol=1e-5)


def test_row_metrics_are_per_row_in_the_rows_own_order_and_average_to_evaluate_model() -> None:
    # the inputs of the paired verdicts (issue 14): evaluation sorts rows by length, the per-row
    # values must come back in the rows' own order
    task = TinyPrompted()
    x, y = torch.from_numpy(task.data.x_test), torch.from_numpy(task.data.y_test)
    model = task.build_model()
    loss, correct = task.row_metrics(model, x, y)
    assert loss.shape == correct.shape == (len(y),)
    with torch.no_grad():
        alone = [float(task.example_losses(model, x[i : i + 1], y[i : i + 1])[0])
                 for i in range(len(y))]
        right = (task.logits(model, x).argmax(1) == y).numpy()
    assert np.allclose(loss, alone, atol=1e-5)
    assert np.array_equal(correct, right)
    means = task.evaluate_model(model, x, y)
    assert means["loss"] == pytest.approx(loss.mean(), abs=1e-6)
    assert means["accuracy"] == pytest.approx(correct.mean())


@pytest.fixture
def tiny_prompted(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``task='rt-smollm'`` resolves to :class:`TinyPrompted` in the apps of this process."""
    import bouquet.tasks.prompted as prompted

    monkeypatch.setattr(prompted, "RtSmolLM", TinyPrompted)
    client_app._task.cache_clear()
    yield
    client_app._task.cache_clear()


METHODS = {
    "fedkseed": {"fedkseed.num-seeds": 32, "fedkseed.local-steps": 6, "fedkseed.lr": 1e-2,
                 "fedkseed.eps": 1e-3},
    "fedkseed-pro": {"fedkseed.num-seeds": 32, "fedkseed.local-steps": 6, "fedkseed.lr": 1e-2,
                     "fedkseed.eps": 1e-3},
    "fedit": {"lora.rank": 2, "local-steps": 3, "lr": 1e-2},
    "ffa-lora": {"lora.rank": 2, "local-steps": 3, "lr": 1e-2},
    "fed-sb": {"lora.rank": 2, "local-steps": 3, "lr": 1e-2, "fed-sb.init-samples": 8},
    "ffa-lora-dp": {"method": "ffa-lora", "lora.rank": 2, "local-steps": 2, "lr": 1e-2,
                    "dp.enabled": True, "dp.noise-multiplier": 1.0, "dp.delta": 1e-3},
    "fedit-dp": {"method": "fedit", "lora.rank": 2, "local-steps": 2, "lr": 1e-2,
                 "dp.enabled": True, "dp.target-epsilon": 3.0, "dp.delta": 1e-3},
    "fed-sb-dp": {"method": "fed-sb", "lora.rank": 2, "local-steps": 2, "lr": 1e-2,
                  "fed-sb.init-samples": 8, "dp.enabled": True, "dp.target-epsilon": 3.0,
                  "dp.delta": 1e-3},
}


@pytest.mark.parametrize("name", list(METHODS))
def test_every_text_method_runs_on_the_prompted_task(name: str, tmp_path: Path,
                                                     tiny_prompted: None) -> None:
    keys = {"method": name, **METHODS[name]}
    run = {"task": "rt-smollm", "num-server-rounds": 2, "results-dir": str(tmp_path),
           "run-name": "r", "seed": 1, "batch-size": 8, "sample-deadline": 5.0,
           "round-timeout": 60.0, **keys}
    folder = execute(LocalGrid(2, run), run).parent
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if r["round"] > 0]
    assert len(trained) == 2 and all(r["clients"] == 2 for r in trained), trained
    assert all(r["rejected"] == r["errors"] == 0 for r in trained), trained
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in trained), rows
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["task"] == "rt-smollm"
    if "dp.enabled" in keys:
        assert summary["privacy"]["epsilon"] > 0


@pytest.mark.slow
def test_rt_smollm_prompts_and_zero_shot_beats_the_majority_rate() -> None:
    task = RtSmolLM()
    d = task.data
    assert len(d.y_train) == 10_246 and len(d.y_test) == task.test_rows == 400
    first = d.x_train[0][d.x_train[0] != task.pad_id]
    text = task.tokenizer.decode(first)
    assert text.startswith("Review: ") and text.endswith("\nSentiment:"), text
    assert task.tokenizer.convert_ids_to_tokens(list(task.word_ids)) == ["Ġnegative", "Ġpositive"]
    rows = 128
    m = task.evaluate_model(task.pretrained, torch.from_numpy(d.x_train[:rows]),
                            torch.from_numpy(d.y_train[:rows]))
    majority = max(float(d.y_train[:rows].mean()), 1 - float(d.y_train[:rows].mean()))
    assert m["accuracy"] > majority + 0.05, (m, majority)


def test_the_suite_rebuilds_fedkseeds_final_model_as_the_nodes_evaluated_it(
        tmp_path: Path, tiny_prompted: None) -> None:
    # the paired verdicts (issue 14) evaluate the last checkpoint's model centrally: it must be
    # the model whose federated evaluation the last round reported, and not the pretrained one
    from bouquet.apps.bench import load_suite

    suite = load_suite("fedkseed")
    run = {"task": "rt-smollm", "num-server-rounds": 2, "results-dir": str(tmp_path),
           "run-name": "prompt-fedkseed", "seed": 1, "batch-size": 8, "sample-deadline": 5.0,
           "round-timeout": 60.0, "method": "fedkseed", **METHODS["fedkseed"]}
    folder = execute(LocalGrid(2, run), run).parent
    last = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()][-1]
    final = suite.final_rows(tmp_path, "prompt-fedkseed")
    assert final is not None and final[0] == last["round"] == 2
    loss, correct = final[1]
    assert loss.mean() == pytest.approx(last["loss"], abs=1e-4)
    assert correct.mean() == pytest.approx(last["accuracy"])
    zero_loss, _ = suite.zero_shot_rows(tmp_path)
    assert not np.allclose(loss, zero_loss, atol=1e-4)
    # cached: a second call reads the file and evaluates nothing
    assert (folder / suite.ROWS_FILE).is_file()
    from bouquet.tasks.prompted import RtSmolLM

    def no_evaluation(*_: object, **__: object) -> None:
        raise AssertionError("the cached rows were recomputed")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RtSmolLM, "row_metrics", no_evaluation)
        again = suite.final_rows(tmp_path, "prompt-fedkseed")
        assert again is not None and np.array_equal(again[1][0], loss)
        # a folder whose run config changed (a copy, an edit) does not reuse the rows
        (folder / "config.yaml").write_text((folder / "config.yaml").read_text() + "\n# edited\n")
        with pytest.raises(AssertionError, match="recomputed"):
            suite.final_rows(tmp_path, "prompt-fedkseed")
    # a damaged cache file is recomputed, not trusted
    (folder / suite.ROWS_FILE).write_bytes(b"PK\x03\x04 truncated")
    rebuilt = suite.final_rows(tmp_path, "prompt-fedkseed")
    assert rebuilt is not None and np.allclose(rebuilt[1][0], loss)
    # a range of held-out rows (RESULTS.md fedkseed 9): the same rebuilt model and the same
    # zero-shot model on those rows only, each cached in a file of its own
    n = len(loss)
    part = suite.final_rows(tmp_path, "prompt-fedkseed", suite.held_out((1, n)))
    assert part is not None and part[0] == 2
    assert np.allclose(part[1][0], loss[1:], atol=1e-5) and np.array_equal(part[1][1], correct[1:])
    assert (folder / f"rows_1-{n}.npz").is_file() and len(np.load(folder / "rows.npz")["loss"]) == n
    zero_part, _ = suite.zero_shot_rows(tmp_path, suite.held_out((1, n)))
    assert np.allclose(zero_part, zero_loss[1:], atol=1e-5)
    assert (tmp_path / f"zero_shot_rows_1-{n}.npz").is_file()
    with pytest.raises(ValueError, match=f"has {n} held-out rows"):
        suite.held_out((0, n + 1)).arrays()
    with pytest.raises(ValueError, match="0 <= start < stop"):
        suite.held_out((3, 3))


@pytest.mark.slow
def test_a_held_out_range_reads_the_same_fixed_split_past_the_tasks_own_rows() -> None:
    from bouquet.apps.bench import load_suite

    x, y = load_suite("fedkseed").held_out((300, 1600)).arrays()
    task = RtSmolLM()
    assert len(y) == 1300 and len(task.data.y_test) == task.test_rows == RtSmolLM.test_rows == 400
    assert np.array_equal(x[:100], task.data.x_test[300:])
    assert np.array_equal(y[:100], task.data.y_test[300:])
