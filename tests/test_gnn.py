"""The LLMCO2 GNN: shapes, permutation invariance, a short training run, checkpoint round-trip."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from llmco2.data.dataset import energy_data
from llmco2.errors import InvalidInputError
from llmco2.prediction.checkpoint_file import read_checkpoint, write_checkpoint
from llmco2.training.gnn import LLMCO2Net
from llmco2.training.metrics import scores
from llmco2.training.train import GNNPredictor, TrainConfig


def test_tiny_graph_shapes_and_permutation_invariance() -> None:
    torch.manual_seed(0)
    net = LLMCO2Net(node_dim=4, global_dim=3, hidden=8)
    x = torch.randn(5, 4)
    edge_index = torch.tensor([[0, 1, 1, 2, 3], [1, 2, 3, 4, 4]])
    batch = torch.zeros(5, dtype=torch.long)
    u = torch.randn(1, 3)
    out = net(x, edge_index, batch, u)
    assert out.shape == (1, 2)
    perm = torch.tensor([3, 0, 4, 1, 2])  # new node i is old node perm[i]
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(5)
    out_perm = net(x[perm], inv[edge_index], batch, u)
    assert torch.allclose(out, out_perm, atol=1e-6)
    # two graphs in one batch give the same outputs as each alone
    x2 = torch.cat([x, x[:3]])
    ei2 = torch.cat([edge_index, torch.tensor([[5, 6], [6, 7]])], dim=1)
    b2 = torch.tensor([0] * 5 + [1] * 3)
    both = net(x2, ei2, b2, torch.cat([u, u]))
    assert torch.allclose(both[0], out[0], atol=1e-6)
    net.reset_parameters()
    assert not torch.allclose(net(x, edge_index, batch, u), out)


def synthetic_table(n: int = 300, seed: int = 0) -> pd.DataFrame:
    """Rows whose 'measured' energy is a smooth function of the configuration (a stand-in)."""
    rng = np.random.default_rng(seed)
    models = ["qwen2-0.5b", "tinyllama-1.1b", "qwen2-1.5b"]
    rows = []
    for i in range(n):
        model = models[i % 3]
        prompt = int(rng.integers(8, 512))
        gen = int(rng.integers(2, 128))
        for phase in ("prefill", "decode"):
            tokens = prompt if phase == "prefill" else gen - 1
            energy = (0.02 + 0.001 * tokens) * (1 + models.index(model)) * float(rng.lognormal(0, 0.03))
            rows.append(dict(source="test", source_row=i + 1, device="jetson-orin", num_devices=1, model=model, batch_size=1,
                             prompt_tokens=prompt, generated_tokens=gen if phase == "decode" else 1, phase=phase,
                             level="request", energy_j=energy, weight_bits=16))
    return pd.DataFrame(rows)


def test_short_training_run_learns_and_round_trips(tmp_path) -> None:
    data = energy_data(synthetic_table())
    n = len(data.energy_j)
    train, val = data.rows(np.arange(0, int(n * 0.8))), data.rows(np.arange(int(n * 0.8), n))
    model = GNNPredictor(TrainConfig(hidden=32, max_epochs=25, batch_size=128, patience=25, lr=3e-3))
    history = model.fit(train, val)
    assert len(history.train_loss) == 25 and history.train_loss[-1] < history.train_loss[0]
    pred = model.predict_rows(val)
    trained = scores(pred, val.energy_j)
    untrained = GNNPredictor(TrainConfig(hidden=32, max_epochs=0))
    untrained.fit(train)
    assert trained["mape"] < scores(untrained.predict_rows(val), val.energy_j)["mape"]
    path = model.save(tmp_path / "ckpt.safetensors")
    again = GNNPredictor.load(path)
    assert np.allclose(again.predict_rows(val), pred)
    assert again.domain["models"] == ["qwen2-0.5b", "qwen2-1.5b", "tinyllama-1.1b"]
    full = again.predict(val)  # energy, latency and a calibrated interval per phase, from the saved head
    assert np.allclose(full.energy_j, model.predict(val).energy_j)
    assert np.all(full.energy_low_j <= full.energy_j) and np.all(full.energy_high_j >= full.energy_j)
    assert again.head.intervals.rows["decode"]["all"] > 0 and not any(full.notes)


def test_checkpoint_schema_mismatch_is_refused(tmp_path) -> None:
    data = energy_data(synthetic_table(20))
    model = GNNPredictor(TrainConfig(hidden=8, max_epochs=1))
    model.fit(data)
    path = model.save(tmp_path / "ckpt.safetensors")
    tensors, state = read_checkpoint(path)
    state["feature_schema_version"] = 0
    write_checkpoint(path, tensors, state)
    with pytest.raises(InvalidInputError, match="feature schema version 0"):
        GNNPredictor.load(path)
    (tmp_path / "junk.safetensors").write_text("not a checkpoint")
    with pytest.raises(InvalidInputError, match="not an llmco2 checkpoint"):
        GNNPredictor.load(tmp_path / "junk.safetensors")


def test_rows_without_energy_or_catalog_entries_are_counted() -> None:
    table = synthetic_table(5)
    table.loc[0, "energy_j"] = 0.0
    table.loc[1, "model"] = "no-such-model"
    table["prompt_tokens"] = table["prompt_tokens"].astype(float)
    table.loc[2, "prompt_tokens"] = 1.5
    data = energy_data(table)
    assert len(data.energy_j) == len(table) - 3
    assert sum(data.excluded.values()) == 3


@pytest.mark.parametrize("view_name", ["no_phase_split", "no_roofline", "nnlqp", "no_hardware"])
def test_feature_views_train(view_name: str) -> None:
    data = energy_data(synthetic_table(40))
    model = GNNPredictor(TrainConfig(hidden=8, max_epochs=2, feature_view=view_name, use_prior=view_name != "nnlqp"))
    model.fit(data)
    assert np.all(model.predict_rows(data) > 0)


def test_no_hardware_view_drops_only_the_raw_catalog_numbers() -> None:
    """Two GPUs with the same request: the ``no_hardware`` view removes the five raw catalog
    columns (peak rate, memory and link bandwidth, TDP, memory size) and keeps the rest, roofline
    times included, which still tell the GPUs apart."""
    from llmco2.analytic.layer import LayerBatch, analyze_layers
    from llmco2.analytic.model import model_totals
    from llmco2.graph.features import GLOBAL_FEATURES, build_graph_arrays
    from llmco2.graph.views import RAW_HARDWARE_GLOBALS, view
    from llmco2.specs import Request, get_gpu, get_model

    arch = get_model("qwen2-0.5b")
    items = [(arch, Request(batch_size=2, prompt_tokens=64, generated_tokens=9), get_gpu(g)) for g in ("a100-80gb", "h100-sxm")]
    analysis = analyze_layers(LayerBatch.from_items(items))
    g = build_graph_arrays(analysis, model_totals(analysis))
    v = view(g, "no_hardware")
    keep = [i for i, f in enumerate(GLOBAL_FEATURES) if f not in RAW_HARDWARE_GLOBALS]
    assert v.u.shape[1] == len(GLOBAL_FEATURES) - 5 == len(keep)
    np.testing.assert_array_equal(v.u, g.u[:, keep])
    np.testing.assert_array_equal(v.x, g.x)
    assert not np.array_equal(v.u[0], v.u[1])  # roofline times differ between the GPUs


@pytest.mark.parametrize("name", ["gbt", "deepen", "llmcarbon", "roofline_tdp"])
def test_baselines_fit_predict_round_trip(name: str, tmp_path) -> None:
    from llmco2.training.baselines import BASELINES

    data = energy_data(synthetic_table(60))
    model = BASELINES[name](**({"max_iter": 200, "learning_rate": 0.2, "min_samples_leaf": 5} if name == "gbt" else {"n_estimators": 10} if name == "deepen" else {}))
    model.fit(data)
    pred = model.predict_rows(data)
    assert pred.shape == data.energy_j.shape and np.all(pred > 0)
    again = BASELINES[name].load(model.save(tmp_path / f"{name}.skops"))
    assert np.allclose(again.predict_rows(data), pred)
    if name not in ("llmcarbon", "roofline_tdp"):  # learned baselines fit their training data well
        assert scores(pred, data.energy_j)["mape"] < 0.2


def test_roofline_tdp_is_the_weight_read_time_at_the_power_limit_for_batch_one_decode() -> None:
    """Hand-computed: batch-1 decode of Llama-3.1-8B on one H100 reads its 7.50 B non-embedding
    bf16 weights (8.03 B less the 0.525 B embedding table, of which a step reads one row) each
    step at 3.35 TB/s, for 4.48 ms; 16 generated tokens are 15 decode steps, at 700 W."""
    from llmco2.data.dataset import from_items
    from llmco2.specs import Request, get_gpu, get_model
    from llmco2.training.baselines import RooflineTDPPredictor

    model = RooflineTDPPredictor()
    model.fit(energy_data(synthetic_table(10)))
    req = Request(batch_size=1, prompt_tokens=128, generated_tokens=16)
    one = from_items([(get_model("llama3.1-8b"), req, get_gpu("h100-sxm"))])
    one.phase[:] = 1  # the decode phase
    expected = 15 * (7.50e9 * 2 / 3.35e12) * 700.0
    assert model.predict_rows(one)[0] == pytest.approx(expected, rel=0.03)
    two = from_items([(get_model("llama3.1-8b"), req.replace(num_gpus=2, tensor_parallel=2), get_gpu("h100-sxm"))])
    two.phase[:] = 1
    # two GPUs at their limit for half the read time each (plus the all-reduce bytes over NVLink)
    assert model.predict_rows(two)[0] == pytest.approx(expected, rel=0.05)


def test_predictions_stay_in_the_clamped_ratio_range(a100) -> None:
    """Far outside the training data (another GPU, 8 GPUs, batch 64) the energy stays within the
    clamped ratio to the physics prior instead of exploding."""
    from llmco2.data.dataset import from_items
    from llmco2.physics.priors import idle_power_w
    from llmco2.specs import Request, get_model

    data = energy_data(synthetic_table(40))
    model = GNNPredictor(TrainConfig(hidden=16, max_epochs=3))
    model.fit(data)
    far = from_items([(get_model("qwen2-7b"), Request(batch_size=64, prompt_tokens=4000, generated_tokens=500, num_gpus=4), a100)])
    out = model.predict(far)
    pred = out.energy_j
    prior = model.head.prior(far.items, *far.analysis())[0]
    t = model.target
    assert np.all(np.isfinite(pred))
    bounds_hi = np.exp(t.hi * t.std + t.mean) * prior
    assert np.all(pred / out.latency_s >= 4 * idle_power_w(a100) * (1 - 1e-9))
    bounds_lo = np.exp(t.lo * t.std + t.mean) * prior
    assert np.all(pred <= bounds_hi * (1 + 1e-9)) and np.all(pred >= bounds_lo * (1 - 1e-9))


def test_two_epochs_on_a_real_extract(shared_data) -> None:
    """Two epochs on a few hundred real CO2-Meter rows: finite, positive predictions and a falling loss."""
    from llmco2.data.importers import import_file

    table = import_file("co2meter", shared_data / "co2meter" / "train_trace.csv").table
    extract = table.sample(n=400, random_state=0).reset_index(drop=True)
    data = energy_data(extract)
    model = GNNPredictor(TrainConfig(hidden=32, max_epochs=2, batch_size=64))
    history = model.fit(data)
    assert len(history.train_loss) == 2 and history.train_loss[1] < history.train_loss[0]
    pred = model.predict_rows(data)
    assert np.all(np.isfinite(pred)) and np.all(pred > 0)
    assert set(data.table["device"]) <= {"jetson-orin", "rk3588-npu"}
