"""The ranking benchmark's check that the used GPUs' measured order does not rest on the unused cards' idle."""

from __future__ import annotations

import pandas as pd

from experiments.ranking_benchmark import ARGONNE, band_decided


def _items(j_gaudi: float, j_h100: float) -> pd.DataFrame:
    """A Gaudi2 reading over six unused cards and an H100 reading over two, one ms per token each (J per token)."""
    rows = [("gaudi2", "optimum-habana", j_gaudi, 6, 87.5), ("h100-sxm", "vllm-v0", j_h100, 2, 71.8)]
    return pd.DataFrame([{"source": ARGONNE, "group": "g", "device": d, "engine": e, "j": j, "time": 1e-3,
                          "unused_cards": float(n), "unused_idle": n * w, "j_corr": j - n * w * 1e-3} for d, e, j, n, w in rows])


def test_an_order_is_decided_only_where_every_pairing_of_the_two_readings_idle_ends_keeps_it() -> None:
    """Each reading's unused cards may sit anywhere in their own idle range (Gaudi2 71-112 W, H100 71.8-121.7 W): with
    the Gaudi2 reading at 1.0 J and the H100's at 0.5436 J per token, both low ends and both high ends put the Gaudi2
    above, but the Gaudi2's high end falls below the H100's low end, so the order is not decided; a wider gap is."""
    assert band_decided(_items(1.0, 0.5436)) == (0, 1)
    assert band_decided(_items(1.0, 0.30)) == (1, 1)
