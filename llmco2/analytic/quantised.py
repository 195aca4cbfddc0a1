"""The kernels bitsandbytes runs for a quantised linear layer, as extra work on the layer's linear
kernel slots, vectorised over requests.

Source: bitsandbytes 0.45.5 (April 2025; the path is unchanged since 0.45.0),
``bitsandbytes/nn/modules.py`` (``Linear4bit.forward``, ``Linear8bitLt.forward``),
``bitsandbytes/autograd/_functions.py`` (``matmul_4bit``, ``MatMul4Bit``, ``MatMul8bitLt``) and
``bitsandbytes/functional.py`` (``dequantize_4bit``, ``gemv_4bit``, ``int8_vectorwise_quant``,
``int8_linear_matmul``, ``int8_mm_dequant``), inference (no gradients), fp16 activations.

**4-bit (NF4 / FP4)**, per linear layer: when the forward pass holds more than one token
(``A.numel() != A.shape[-1]``: every prefill but a one-token one, and decode at batch > 1)
``MatMul4Bit`` runs ``dequantize_4bit`` (one kernel: reads the 4-bit codes and the fp32 absmax,
writes the 16-bit matrix) and then ``torch.nn.functional.linear``, a 16-bit GEMM that reads that
matrix again: beyond the packed weights, 2 + 2 bytes per weight and pass and one more kernel.
With one token (decode at batch 1) ``gemv_4bit`` is a single fused kernel reading the packed
weights: the plain linear kernel with 4-bit weights.

**int8 (LLM.int8(), threshold 6.0 as transformers sets it)**, per linear layer
(``MatMul8bitLt.forward``, fast path), 15 kernels where one 16-bit GEMM ran:

1. ``A.abs()`` (reads and writes the fp16 input), 2. ``>= threshold`` (reads it, writes a bool
   mask), 3. ``outliers.any()`` (reads the mask; its truth value synchronises the host),
   4. ``outliers.any(dim=0)``, 5. ``torch.argwhere`` (synchronises again: the outlier columns);
6. ``int8_vector_quant``: reads the fp16 input, writes int8 codes and fp32 row scales;
7. ``out_row[:, outlier_cols] = 0``; 8. ``A[:, idx]`` (the input's outlier columns);
9. ``CB[:, idx]``, 10-12. ``* SCB``, ``* 1/127``, ``.to(fp16)`` (the weights' outlier rows, fp32
   in between);
13. ``int8_linear_matmul`` (cuBLASLt igemm): int8 inputs and weights, **int32 output**, at the
    GPU's int8 peak; 14. ``int8_mm_dequant``: reads the int32 output and the scales, writes fp16;
15. ``output.addmm(subA, subB)``: the 16-bit GEMM of the outlier columns, reading and writing the
    whole output.

Kernels 7-12 and 15 run when some input column holds an outlier, which this model assumes of
every layer, in :data:`OUTLIER_SHARE` of the input columns (LLM.int8() paper, Dettmers et al. 2022,
section 4: about 6 of the 4,096 feature dimensions of a 6.7B model). Elementwise kernels count a
few operations per element (:data:`INT8_INPUT_OPS`, :data:`INT8_OUTPUT_OPS`).

Every extra kernel's work is added to the linear slot it belongs to (the layer DAG keeps its
slots, so graph features and checkpoints keep their shape); the extra launches, which a host-bound
engine pays, are counted by :func:`kernel_launches` and the host synchronisations by
:func:`host_syncs`. All quantities are per GPU for the whole phase, as in
:mod:`llmco2.analytic.kernels`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic import kernels as K
from llmco2.specs.quantisation import QUANT_PATHS

Array = NDArray[np.float64]
#: Kernel slots of the layer DAG that hold quantised linear layers (the MoE router stays 16-bit).
LINEAR_SLOTS: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "out_proj", "gate_proj", "up_proj", "down_proj")
#: Codes of the kernel paths in :data:`llmco2.specs.quantisation.QUANT_PATHS`.
BNB_INT8 = float(QUANT_PATHS.index("bnb-int8"))
BNB_4BIT = float(QUANT_PATHS.index("bnb-4bit"))
NATIVE = float(QUANT_PATHS.index("native"))
WEIGHT_ONLY = float(QUANT_PATHS.index("weight-only"))
#: Bytes per weight the 4-bit path adds when it dequantises: the 16-bit matrix written, then read by the GEMM.
DEQUANT_BYTES_PER_WEIGHT = 2.0 + 2.0
#: Operations per weight of ``dequantize_4bit``: a code-book look-up and a multiply by the absmax.
DEQUANT_OPS_PER_WEIGHT = 2.0
#: Kernels per linear layer beyond the GEMM: 4-bit with more than one token, and int8 (see the module docstring).
EXTRA_KERNELS_4BIT = 1.0
EXTRA_KERNELS_INT8 = 14.0
#: Host synchronisations per int8 linear layer (``outliers.any()`` and ``torch.argwhere``).
SYNCS_INT8 = 2.0
#: Share of input columns holding an outlier (LLM.int8() paper: ~6 of 4,096 dimensions at 6.7B); their
#: 16-bit GEMM is counted at the int8 peak (a fraction of a percent of the layer's operations).
OUTLIER_SHARE = 6.0 / 4096.0
#: Bytes per input element of the int8 path's input kernels beyond the GEMM's own 2-byte read:
#: abs (2 + 2), compare (2 + 1), any (1), any(dim=0) (1), quantise (2 + 1), the igemm reading int8 (1).
INT8_INPUT_BYTES = 13.0 - 2.0
#: Bytes per output element beyond the GEMM's own 2-byte store: the int32 output written (4) and read by the
#: dequantising kernel (4), its fp16 output (2) read by the outlier addmm (2), whose fp16 store (2) is the slot's own.
INT8_OUTPUT_BYTES = 14.0 - 2.0
#: Bytes per outlier weight: gather (1 + 1), * SCB to fp32 (1 + 4), * 1/127 (4 + 4), to fp16 (4 + 2), read by addmm (2).
INT8_OUTLIER_WEIGHT_BYTES = 23.0
#: Operations per input element (abs, compare, two reductions, quantise: 3) and per output element (dequantise: 3).
INT8_INPUT_OPS = 7.0
INT8_OUTPUT_OPS = 3.0


def bitsandbytes_rows(b: Any) -> NDArray[np.bool_]:
    """Rows whose linear layers run bitsandbytes (int8 or 4-bit)."""
    quant = np.asarray(b.quant)
    return (quant == BNB_INT8) | (quant == BNB_4BIT)


def weight_only_rows(b: Any) -> NDArray[np.bool_]:
    """Rows whose linear layers multiply low-bit weights in 16-bit arithmetic, dequantising in
    registers: a weight-only method (AWQ, GPTQ, MXFP4, NVFP4) or 4-bit weights named by their dtype
    alone (the same path; :mod:`llmco2.specs.quantisation`)."""
    quant = np.asarray(b.quant)
    return (quant == WEIGHT_ONLY) | ((quant == NATIVE) & (np.asarray(b.w_bytes) < 1.0))


def dequantises(b: Any, phase: str) -> NDArray[np.bool_]:
    """Rows whose 4-bit linear layers dequantise in ``phase``: bitsandbytes 4-bit with more than one
    token per forward pass (batch x prompt in prefill, batch in decode)."""
    per_pass = b.batch * b.prompt if phase == "prefill" else b.batch
    return (np.asarray(b.quant) == BNB_4BIT) & (per_pass > 1)


def quantised_costs(b: Any, phase: str, costs: dict[str, K.KernelCost]) -> dict[str, K.KernelCost]:
    """``costs`` (every slot of :func:`llmco2.analytic.layer.layer_costs`) with the bitsandbytes
    kernels added to the linear slots of the rows that run them; unchanged (the same objects)
    where no row does. The slot's own cost is that of the GEMM with the stored weights (int8, or
    4-bit plus absmax) and the 16-bit activations."""
    quant = np.asarray(b.quant)
    deq = dequantises(b, phase)
    int8 = quant == BNB_INT8
    if not (deq.any() or int8.any()):
        return costs
    out = dict(costs)
    w, a = np.maximum(b.w_bytes, 1e-30), b.a_bytes
    for name in LINEAR_SLOTS:
        c = costs[name]
        weights = c.weight_bytes / w  # weights streamed over the phase (elements)
        inputs = c.act_load_bytes / a
        outputs = c.act_store_bytes / a + c.kv_store_bytes / np.maximum(b.kv_bytes, 1e-30)
        four = K.make_cost(ops=DEQUANT_OPS_PER_WEIGHT * weights, weight_bytes=DEQUANT_BYTES_PER_WEIGHT * weights)
        eight = K.make_cost(ops=c.ops * OUTLIER_SHARE + INT8_INPUT_OPS * inputs + INT8_OUTPUT_OPS * outputs,
                            weight_bytes=INT8_OUTLIER_WEIGHT_BYTES * OUTLIER_SHARE * weights,
                            act_load_bytes=INT8_INPUT_BYTES * inputs, act_store_bytes=INT8_OUTPUT_BYTES * outputs)
        out[name] = c + four.scaled(deq) + eight.scaled(int8)
    return out


def extra_launches(b: Any, phase: str) -> Array:
    """Kernels each quantised linear layer launches beyond its GEMM in ``phase``, per row."""
    quant = np.asarray(b.quant)
    return np.where(quant == BNB_INT8, EXTRA_KERNELS_INT8, np.where(dequantises(b, phase), EXTRA_KERNELS_4BIT, 0.0))


def linear_slots_present(present: dict[str, NDArray[np.bool_]]) -> Array:
    """Linear layers (quantised slots) per layer of each row."""
    return np.sum([present[n].astype(np.float64) for n in LINEAR_SLOTS], axis=0)


def kernel_launches(analysis: Any, phase: str) -> Array:
    """Kernels one layer launches in ``phase``, per row: one per present DAG slot plus the extra
    kernels of bitsandbytes linear layers (:func:`extra_launches`). Equal to the number of present
    slots for every other row."""
    present = analysis.present
    slots = np.sum([m.astype(np.float64) for m in present.values()], axis=0)
    return slots + extra_launches(analysis.batch, phase) * linear_slots_present(present)


def host_syncs(analysis: Any) -> Array:
    """Host synchronisations one layer makes in either phase, per row (bitsandbytes int8: two per
    linear layer; zero elsewhere)."""
    quant = np.asarray(analysis.batch.quant)
    return np.where(quant == BNB_INT8, SYNCS_INT8, 0.0) * linear_slots_present(analysis.present)
