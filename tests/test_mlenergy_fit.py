"""The held-out masks of the serving fit (``llmco2.serving.mlenergy_fit``), hermetic."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

from llmco2.serving.mlenergy_fit import isolated_mask


def test_a_held_out_gpu_or_model_is_held_out_of_the_isolated_rows_too() -> None:
    serving = SimpleNamespace(rows=pd.DataFrame({"device": ["a100-40gb", "h100-sxm", "h100-sxm"],
                                                 "model": ["llama3-8b", "llama3-8b", "qwen2-7b"]}))
    isolated = SimpleNamespace(rows=pd.DataFrame({"device": ["a100-40gb", "h100-sxm", "gaudi2", "gaudi2"],
                                                  "model": ["llama3-8b", "qwen2-7b", "qwen2-7b", "mistral-7b"]}))
    without_a100 = np.array([False, True, True])
    np.testing.assert_array_equal(isolated_mask(serving, isolated, without_a100), [False, True, True, True])
    without_qwen = np.array([True, True, False])  # qwen2-7b is held out of every GPU's isolated rows
    np.testing.assert_array_equal(isolated_mask(serving, isolated, without_qwen), [True, False, False, True])
    everything = np.ones(3, dtype=bool)
    assert isolated_mask(serving, isolated, everything).all()
