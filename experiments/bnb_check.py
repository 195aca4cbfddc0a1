"""bitsandbytes int8 / NF4 against their fp16 siblings: measured ratio vs predicted ratio.

The measured rows are hb_thesis_a100pcie.csv (shared/data/collected): Llama-3.2 1B and 3B, batch
16, 128 + 128 tokens, HF transformers ``generate`` with 4 data-parallel processes on 4 x
A100-PCIe-40GB. Those runs are host-bound (their fp16 latency is several times what the GPU needs),
so the absolute numbers are the host's; this compares the RATIO quantised / fp16 of latency and
energy, per model and batch size, with the ratio llmco2 predicts for the same requests
(engine ``hf``). Nothing here is fitted to these rows.

Predicted columns:

* ``dtype only``: ``llmco2.predict(..., dtype="int8" / "int4")`` without a method, as llmco2 predicted
  these rows before the ``quantisation`` input (int8 at the int8 peak, int4 as weight-only 4-bit);
* ``predict``: ``llmco2.predict(..., quantisation=...)`` as shipped (checkpoint and step physics
  unchanged: the bitsandbytes kernels enter as extra bytes and operations of the linear slots);
* ``physics``: the shipped checkpoint's step physics alone (:func:`llmco2.physics.step_physics.step_cost`),
  which counts every kernel bitsandbytes launches (:func:`llmco2.analytic.quantised.kernel_launches`)
  and, on rows whose layers synchronise the host (:func:`llmco2.analytic.quantised.host_syncs`:
  LLM.int8's two per linear layer), pays host and GPU time one after the other, not the larger of the two.

    .venv/bin/python experiments/bnb_check.py            # prints the Markdown table
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import llmco2  # noqa: E402
from llmco2.analytic.layer import LayerBatch, analyze_layers  # noqa: E402
from llmco2.data.importers.collected import import_collected  # noqa: E402
from llmco2.data.paths import find_shared_data  # noqa: E402
from llmco2.physics.hardware_rows import HardwareRows  # noqa: E402
from llmco2.physics.step_physics import overhead_arrays, step_cost  # noqa: E402
from llmco2.physics.step_prior import StepPrior  # noqa: E402
from llmco2.physics.step_work import shapes_of  # noqa: E402
from llmco2.prediction.loading import default_checkpoint_path  # noqa: E402
from llmco2.specs import Request, get_gpu, get_model  # noqa: E402

SOURCE = "collected/hb_thesis_a100pcie.csv"
METHODS = ("bnb-int8", "bnb-nf4")


def measured(table: pd.DataFrame) -> pd.DataFrame:
    """Median latency and energy of every (model, batch, method) with its fp16 sibling (same GPU,
    engine and lengths), and the row counts."""
    keys = ["model", "device", "engine", "batch_size", "prompt_tokens", "generated_tokens"]
    t = table[table["phase"] == "total"].copy()
    t["method"] = np.where(t["quantisation"] == "none", t["weight_bits"].astype(int).map({16: "fp16", 32: "fp32"}),
                           t["quantisation"].astype(str))
    med = t.groupby([*keys, "method"], observed=True).agg(latency_s=("latency_s", "median"), energy_j=("energy_j", "median"),
                                                         n=("latency_s", "size")).reset_index()
    base = med[med["method"] == "fp16"].drop(columns="method")
    out = med[med["method"].isin(METHODS)].merge(base, on=keys, suffixes=("", "_fp16"))
    out["t_ratio"] = out["latency_s"] / out["latency_s_fp16"]
    out["e_ratio"] = out["energy_j"] / out["energy_j_fp16"]
    return out


def physics_ratios(rows: pd.DataFrame) -> np.ndarray:
    """``[n, 2]`` latency and energy ratios quantised / fp16 of the shipped step physics."""
    meta = json.loads(default_checkpoint_path().with_suffix(".json").read_text())
    params = StepPrior.from_state_dict(meta["step_prior"]).params  # type: ignore[union-attr]
    items = []
    for r in rows.itertuples():
        arch, gpu = get_model(r.model), get_gpu(r.device)
        kw = dict(batch_size=int(r.batch_size), prompt_tokens=int(r.prompt_tokens), generated_tokens=int(r.generated_tokens),
                  engine=r.engine)
        items += [(arch, Request(quantisation=r.method, **kw), gpu), (arch, Request(**kw), gpu)]
    a = analyze_layers(LayerBatch.from_items(items))
    b = a.batch
    hw = HardwareRows.of([g for _, _, g in items])
    engines = [r.engine for _, r, _ in items]
    total = np.zeros((len(items), 2))
    for phase, steps in (("prefill", np.ones(len(items))), ("decode", b.generated - 1.0)):
        c = step_cost(shapes_of(a, phase, steps, engines, hw), params, overhead_arrays(engines, params))
        total += np.stack([c.time_s, c.energy_j], axis=1) * steps[:, None]
    return total[0::2] / total[1::2]


def predicted_ratios(rows: pd.DataFrame, by_dtype: bool = False) -> np.ndarray:
    """``[n, 2]`` latency and energy ratios quantised / fp16 of ``llmco2.predict`` (shipped checkpoint);
    ``by_dtype``: the method's weight dtype alone, without the method."""
    out = []
    for r in rows.itertuples():
        kw = dict(batch_size=int(r.batch_size), prompt_tokens=int(r.prompt_tokens), generated_tokens=int(r.generated_tokens),
                  engine=r.engine)
        how = {"dtype": Request(quantisation=r.method).weight_dtype} if by_dtype else {"quantisation": r.method}
        q = llmco2.predict(r.model, r.device, **how, **kw)
        f = llmco2.predict(r.model, r.device, **kw)
        out.append((q.latency_s["total"] / f.latency_s["total"], q.energy_j["total"] / f.energy_j["total"]))
    return np.array(out)


def table_markdown() -> str:
    shared = find_shared_data()
    if shared is None:
        raise SystemExit("shared/data not found; set LLMCO2_SHARED_DATA")
    rows = measured(import_collected(Path(shared) / SOURCE).table).sort_values(["model", "method"]).reset_index(drop=True)
    before, pred = predicted_ratios(rows, by_dtype=True), predicted_ratios(rows)
    phys = physics_ratios(rows)
    cols = "dtype only | predict | physics"
    head = f"| model | batch | method | rows (q / fp16) | measured latency ratio | {cols} | measured energy ratio | {cols} |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for i, r in rows.iterrows():
        t = [before[i, 0], pred[i, 0], phys[i, 0]]
        e = [before[i, 1], pred[i, 1], phys[i, 1]]
        lines.append(f"| {r.model} | {int(r.batch_size)} | {r.method} | {r.n} / {r.n_fp16} | **{r.t_ratio:.2f}** | "
                     + " | ".join(f"{v:.2f}" for v in t) + f" | **{r.e_ratio:.2f}** | " + " | ".join(f"{v:.2f}" for v in e) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table_markdown())
