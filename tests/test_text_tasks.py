"""The language-model tasks: tiny-bert-cls (fast), rt-minilm and gsm-smollm (slow, real models)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bouquet.schema import CommonConfig
from bouquet.tasks.text import TinyBertCls


@pytest.fixture(scope="module")
def tiny() -> TinyBertCls:
    return TinyBertCls()


def test_tiny_data_shapes_and_labels(tiny: TinyBertCls) -> None:
    d = tiny.data
    assert d.x_train.shape == (2000, tiny.max_length) and d.x_test.shape == (500, tiny.max_length)
    assert d.x_train.dtype == np.int64 and set(np.unique(d.y_train)) == {0, 1}
    assert d.groups is not None and len(d.groups) == 2000
    # every row has a [CLS] token and real tokens before the padding
    assert np.all(d.x_train[:, 0] != tiny.pad_id)


def test_tiny_body_is_shared_and_head_follows_the_seed(tiny: TinyBertCls) -> None:
    a, b, c = tiny.initial_arrays(0), TinyBertCls().initial_arrays(0), tiny.initial_arrays(1)
    assert list(a) == list(b)
    for k in a:
        assert np.array_equal(a[k], b[k]), k
    body = "bert.encoder.layer.0.attention.self.query.weight"
    assert np.array_equal(a[body], c[body])
    assert not np.array_equal(a["classifier.weight"], c["classifier.weight"])


def test_partitions_cover_training_rows(tiny: TinyBertCls) -> None:
    for scheme in ("iid", "dirichlet", "natural"):
        common = CommonConfig(partition=scheme)
        sizes = [tiny.num_examples(p, 4, common) for p in range(4)]
        assert sum(sizes) == 2000, scheme
        assert min(sizes) > 0


def test_loss_backward_and_training_lowers_loss(tiny: TinyBertCls) -> None:
    torch.manual_seed(0)
    model = tiny.build_model()
    local = tiny.partition(0, 2, CommonConfig())
    x, y = local.x_train[:64], local.y_train[:64]
    before = float(tiny.loss(model, x, y))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(20):
        opt.zero_grad()
        tiny.loss(model, x, y).backward()
        opt.step()
    assert float(tiny.loss(model, x, y)) < before - 0.1
    m = tiny.evaluate_model(model, local.x_test, local.y_test)
    assert 0.0 <= m["accuracy"] <= 1.0 and np.isfinite(m["loss"])


def test_padding_columns_do_not_change_logits(tiny: TinyBertCls) -> None:
    torch.manual_seed(0)
    model = tiny.build_model().eval()
    x = torch.from_numpy(tiny.data.x_test[:8])
    wide = torch.cat([x, torch.full((8, 5), tiny.pad_id)], dim=1)
    with torch.no_grad():
        assert torch.allclose(tiny.logits(model, x), tiny.logits(model, wide), atol=1e-6)


@pytest.mark.slow
def test_rt_minilm_loads_and_evaluates() -> None:
    from bouquet.tasks.text import RtMiniLM

    task = RtMiniLM()
    assert len(task.data.y_train) + len(task.data.y_test) == 12808
    arrays = task.initial_arrays(0)
    assert sum(a.size for k, a in arrays.items() if "position_ids" not in k) == 22_713_986
    task.eval_size = 64
    m = task.evaluate(arrays)
    assert 0.0 <= m["accuracy"] <= 1.0


@pytest.mark.slow
def test_gsm_smollm_loads_tokenises_and_scores() -> None:
    from bouquet.tasks.gsm import GsmSmolLM, extract_answer

    assert extract_answer("3 + 4 = 7\n#### 7") == "7"
    assert extract_answer("so the answer is 1,200.") == "1200"
    task = GsmSmolLM()
    task.train_size, task.eval_size, task.max_new_tokens = 16, 2, 8
    local = task.partition(0, 2, CommonConfig())
    assert local.num_train == 8
    # labels cover only the rationale: the first token is never a target
    assert bool((local.y_train[:, 0] == -100).all())
    model = task.build_model()
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    loss = task.loss(model, local.x_train[:2], local.y_train[:2])
    assert torch.isfinite(loss)
    m = task.evaluate_model(model, local.x_test, local.y_test)
    assert 0.0 <= m["exact_match"] <= 1.0
