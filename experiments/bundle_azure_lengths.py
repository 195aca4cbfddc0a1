"""Write the request lengths and arrival offsets of the two Azure LLM inference traces into the
package (``llmco2/serving/data/azure_lengths.npz``), so that serving simulations and
``llmco2 compare`` draw the traces' lengths on an installation without the shared data folder.

    python experiments/bundle_azure_lengths.py

Source: Azure/AzurePublicDataset ``AzureLLMInferenceTrace_{conv,code}.csv`` (CC-BY 4.0), read from
the shared data folder by :func:`llmco2.data.azure.load_trace`. Stored per trace, in arrival
order: prompt and output tokens (zero raised to one, as a request has at least one of each) and
the arrival offset in seconds from the trace's first request.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from llmco2.data.azure import load_trace

OUT = Path(__file__).resolve().parents[1] / "llmco2" / "serving" / "data" / "azure_lengths.npz"


def arrays(which: str) -> dict[str, np.ndarray]:
    """The ``{which}_prompt``, ``{which}_output`` and ``{which}_offsets`` arrays of one trace."""
    df = load_trace(which)
    ts = df["timestamp"].to_numpy()
    offsets = (ts - ts.min()) / np.timedelta64(1, "s")
    order = np.argsort(offsets, kind="stable")
    return {f"{which}_prompt": np.maximum(df["prompt_tokens"].to_numpy()[order], 1).astype(np.int32),
            f"{which}_output": np.maximum(df["generated_tokens"].to_numpy()[order], 1).astype(np.int32),
            f"{which}_offsets": offsets[order].astype(np.float64)}


def main() -> None:
    np.savez_compressed(OUT, **arrays("conv"), **arrays("code"))
    print(f"wrote {OUT} ({OUT.stat().st_size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()
