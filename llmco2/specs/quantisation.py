"""Weight quantisation methods of a request: names, aliases, the weight dtypes each stores and the
kernel path its linear layers take.

The method names are those of the canonical data schema's ``quantisation`` column
(:data:`llmco2.data.schema.QUANTISATIONS`); the ones the analytic engine models are
:data:`QUANTISATIONS`. Kernel paths (:attr:`QuantMethod.path`):

* ``native``: the weights are in the dtype the matrix units run (``none``: 16/32-bit weights;
  ``fp8``: FP8 weights and FP8 arithmetic, W8A8);
* ``weight-only``: low-bit weights, dequantised in registers inside a 16-bit GEMM (AWQ, GPTQ and
  their Marlin / ExLlama kernels, MXFP4 / NVFP4 weights as today's ``fp4`` dtype): the arithmetic
  runs in the activation dtype, memory traffic is that of the packed weights. This is exactly the
  ``int4`` / ``fp4`` dtype path without a method; the group scales and zeros (a 16-bit scale and a
  4-bit zero per 128 weights, +4% of the 4-bit bytes) are not counted, so that ``awq`` and
  ``--dtype int4`` give the same numbers;
* ``bnb-int8``: bitsandbytes LLM.int8() (``load_in_8bit``): per linear layer, row-wise int8
  quantisation of the activations with outlier-column extraction, an int8 GEMM at the int8 peak,
  a dequantising kernel, and a 16-bit GEMM of the outlier columns
  (:mod:`llmco2.analytic.quantised` has the kernels);
* ``bnb-4bit``: bitsandbytes NF4 / FP4 (``load_in_4bit``): with more than one token in a forward
  pass each weight matrix is dequantised to 16 bits and a 16-bit GEMM reads it again; with one
  token a fused 4-bit GEMV reads the packed weights. The weights are stored as 4-bit codes plus
  one fp32 absmax per block of 64 (:data:`BNB_4BIT_SCALE_BYTES`).

* GGUF types (llama.cpp's block formats, as Ollama and llama.cpp run them: ``gguf-q4-k-m`` and the
  others of :data:`GGUF_BITS_PER_WEIGHT`): the weight-only path (packed blocks dequantised inside
  llama.cpp's matrix kernels), with the bytes per weight of the whole file that llama.cpp's own quantise
  tool lists for Llama-3-8B (block scales and the tensors a mix keeps at more bits included).

``hqq``, a bare ``gguf`` and ``other`` are schema values the engine does not model; a request naming
them is refused (a bare ``gguf`` with the types to name instead).
"""

from __future__ import annotations

from dataclasses import dataclass

from llmco2.errors import InvalidInputError
from llmco2.specs.dtypes import canonical_dtype
from llmco2.specs.lookup import close_matches, normalise_key

#: Kernel paths of the linear layers, in the order of their codes (:func:`path_code`).
QUANT_PATHS: tuple[str, ...] = ("native", "weight-only", "bnb-int8", "bnb-4bit")
#: Share of the 16-bit GEMM's compute rate that a weight-only low-bit GEMM (Marlin and its kind:
#: dequantise in registers, multiply in 16 bits) reaches where compute binds: a Marlin benchmark on an
#: Ampere GPU levels off at about 141 TFLOP/s from batch 64 on, 0.74, 0.73, 0.66 and 0.60 of the fp16
#: GEMM's time-rate at batches of 256, 512, 1,024 and 2,048 (vllm-project/vllm pull request #2497,
#: "Integrate Marlin Kernels for Int4 GPTQ inference", benchmark comment of 2024-01-24, Marlin's own
#: bench.py); 0.70 for the batches serving reaches. Memory-bound, the kernels stream the packed weights at
#: the full rate (Marlin's near-ideal 3.87x up to batches of 16-32, IST-DASLab/marlin README).
WEIGHT_ONLY_COMPUTE_RATE = 0.70
#: bitsandbytes 4-bit block size: one absmax per 64 weights (``Params4bit(blocksize=64)``, the
#: default of bitsandbytes and of transformers' ``BitsAndBytesConfig``).
BNB_4BIT_BLOCK = 64
#: Bytes of block scales per weight of bitsandbytes 4-bit: one fp32 absmax per block (no nested
#: quantisation of the absmax: ``bnb_4bit_use_double_quant=False``, transformers' default).
BNB_4BIT_SCALE_BYTES = 4.0 / BNB_4BIT_BLOCK


#: Parameters of Llama-3-8B, the model llama.cpp's quantise tool lists its file sizes for (the Meta Llama 3 8B
#: model card, https://huggingface.co/meta-llama/Meta-Llama-3-8B: 8.03 B).
LLAMA3_8B_PARAMS = 8.03e9
#: GGUF types and the GiB of their Llama-3-8B file in llama.cpp's quantise tool (ggml-org/llama.cpp,
#: tools/quantize/quantize.cpp, ``QUANT_OPTIONS``: e.g. ``{ "Q4_K_M", LLAMA_FTYPE_MOSTLY_Q4_K_M, " 4.58G, +0.1754
#: ppl @ Llama-3-8B" }``; ``Q8_0`` "7.96G" is 8.5 bits per weight of 8.03 B in GiB, so ``G`` is GiB). A K-quant mix
#: keeps some tensors at more bits (``attn_v``, part of ``ffn_down`` and the output in Q6_K for Q4_K_M), so a
#: type's bits per weight are the file's, not its block's (Q4_K blocks alone: 144 bytes per 256 weights, 4.5). Types
#: under 4 bits per weight (Q2_K, Q3_K_S, the IQ types) are not listed: no weight dtype of the engine is that small.
GGUF_FILE_GIB = {"q3-k-m": 3.74, "q3-k-l": 4.03, "q4-0": 4.34, "q4-1": 4.78, "q4-k-s": 4.37,
                 "q4-k-m": 4.58, "q5-0": 5.21, "q5-1": 5.65, "q5-k-s": 5.21, "q5-k-m": 5.33, "q6-k": 6.14, "q8-0": 7.96}
#: Bits per weight of each GGUF type: its Llama-3-8B file (:data:`GGUF_FILE_GIB`) over the model's parameters.
GGUF_BITS_PER_WEIGHT = {t: gib * 2**30 * 8 / LLAMA3_8B_PARAMS for t, gib in GGUF_FILE_GIB.items()}


@dataclass(frozen=True)
class QuantMethod:
    """One weight quantisation method.

    Attributes:
        id: the schema's name (``bnb-nf4``).
        path: kernel path of the linear layers (one of :data:`QUANT_PATHS`).
        dtype: the weight dtype a request that names only the method gets.
        dtypes: the weight dtypes the method stores (another is refused).
        scale_bytes: bytes of scales per weight beyond the dtype's own (bytes/weight).
        note: what the method is, for messages and documentation.
    """

    id: str
    path: str
    dtype: str
    dtypes: tuple[str, ...]
    scale_bytes: float
    note: str


#: The modelled methods, by schema name.
METHODS: dict[str, QuantMethod] = {m.id: m for m in (
    QuantMethod("none", "native", "fp16", ("fp32", "fp16", "bf16"), 0.0, "no weight quantisation: 16/32-bit weights"),
    QuantMethod("awq", "weight-only", "int4", ("int4",), 0.0, "AWQ 4-bit weights, 16-bit arithmetic (Marlin / GEMM kernels)"),
    QuantMethod("gptq", "weight-only", "int4", ("int4", "int8"), 0.0,
                "GPTQ 4- or 8-bit weights, 16-bit arithmetic (Marlin / ExLlama kernels)"),
    QuantMethod("bnb-int8", "bnb-int8", "int8", ("int8",), 0.0, "bitsandbytes LLM.int8(): int8 GEMM with outlier decomposition"),
    QuantMethod("bnb-nf4", "bnb-4bit", "int4", ("int4", "fp4"), BNB_4BIT_SCALE_BYTES,
                "bitsandbytes NF4: 4-bit weights dequantised to 16 bits before each GEMM"),
    QuantMethod("bnb-fp4", "bnb-4bit", "int4", ("int4", "fp4"), BNB_4BIT_SCALE_BYTES,
                "bitsandbytes FP4: 4-bit weights dequantised to 16 bits before each GEMM"),
    QuantMethod("fp8", "native", "fp8", ("fp8",), 0.0, "FP8 weights and FP8 arithmetic (W8A8)"),
    QuantMethod("fp8-marlin", "weight-only", "fp8", ("fp8",), 0.0,
                "FP8 weights, 16-bit arithmetic (W8A16): how vLLM runs an FP8 checkpoint on a GPU without FP8 "
                "tensor cores (Turing, Ampere), through its FP8 Marlin kernel"),
    QuantMethod("mxfp4", "weight-only", "fp4", ("fp4",), 0.0, "MXFP4 weights, arithmetic in the activation dtype"),
    QuantMethod("nvfp4", "weight-only", "fp4", ("fp4",), 0.0, "NVFP4 weights, arithmetic in the activation dtype"),
    *(QuantMethod(f"gguf-{t}", "weight-only", "int8" if bits >= 8 else "int4", ("int8",) if bits >= 8 else ("int4",),
                  bits / 8.0 - (1.0 if bits >= 8 else 0.5),
                  f"GGUF {t.upper().replace('-', '_')} ({bits:.2f} bits per weight): llama.cpp's block format, "
                  "dequantised inside its matrix kernels")
      for t, bits in GGUF_BITS_PER_WEIGHT.items()),
)}
QUANTISATIONS: tuple[str, ...] = tuple(METHODS)

#: Schema values that are not modelled, and why.
UNMODELLED: dict[str, str] = {
    "hqq": "its default backend dequantises the weights in PyTorch, at a speed the engine does not model",
    "gguf": "a bare gguf names no block type; give the type, e.g. gguf-q4-k-m (Q4_K_M, Ollama's usual one)",
    "other": "an unnamed method has no known kernels",
}

#: Other spellings (after :func:`~llmco2.specs.lookup.normalise_key`: lower case, ``_`` and spaces as ``-``).
#: A bare "bnb 4-bit" is NF4 (the QLoRA recipe that most set-ups copy; NF4 and FP4 take the same kernels).
#: Marlin and ExLlama are kernels that run GPTQ-format checkpoints (AWQ ones too: the same path here).
ALIASES: dict[str, str] = {
    "no": "none", "unquantised": "none", "unquantized": "none",
    "autoawq": "awq", "awq-marlin": "awq",
    "autogptq": "gptq", "auto-gptq": "gptq", "gptq-marlin": "gptq", "marlin": "gptq", "exllama": "gptq", "exllamav2": "gptq",
    "bnb-8bit": "bnb-int8", "bnb8": "bnb-int8", "bitsandbytes-int8": "bnb-int8", "bitsandbytes-8bit": "bnb-int8",
    "llm.int8": "bnb-int8", "llm-int8": "bnb-int8", "load-in-8bit": "bnb-int8",
    "bnb-4bit": "bnb-nf4", "bnb4": "bnb-nf4", "nf4": "bnb-nf4", "bitsandbytes-nf4": "bnb-nf4", "bitsandbytes-4bit": "bnb-nf4",
    "load-in-4bit": "bnb-nf4", "bitsandbytes-fp4": "bnb-fp4",
    "float8": "fp8", "fp8-e4m3": "fp8",
    "fp8-w8a16": "fp8-marlin", "w8a16-fp8": "fp8-marlin", "fp8-weight-only": "fp8-marlin",
    **{t: f"gguf-{t}" for t in GGUF_FILE_GIB}, "q4-k": "gguf-q4-k-m", "q5-k": "gguf-q5-k-m", "q3-k": "gguf-q3-k-m",
    "gguf-q4-k": "gguf-q4-k-m", "gguf-q5-k": "gguf-q5-k-m", "gguf-q3-k": "gguf-q3-k-m",
}


def canonical_quantisation(name: str, field: str = "quantisation") -> str:
    """The schema name of a quantisation method (case-insensitive, aliases accepted); an unknown or
    unmodelled name raises one `InvalidInputError` naming ``field`` and the accepted values."""
    key = normalise_key(name)
    key = ALIASES.get(key, key)
    if key in METHODS:
        return key
    accepted = ", ".join(QUANTISATIONS)
    if key in UNMODELLED:
        raise InvalidInputError(f"{key} is not modelled: {UNMODELLED[key]}; expected one of {accepted}", field=field)
    raise InvalidInputError(f"unknown method {name!r}; expected one of {accepted}"
                            + close_matches(str(name), list(METHODS) + list(ALIASES)), field=field)


def resolve_quantisation(method: str | None, weight_dtype: str | None) -> tuple[str | None, str]:
    """``(method, weight dtype)`` of a request: the method's schema name (``None`` when not given)
    and the canonical weight dtype, which is the method's own (:attr:`QuantMethod.dtype`) when only
    the method is given and ``fp16`` when neither is. A dtype the method does not store is refused."""
    q = canonical_quantisation(method) if method is not None else None
    if weight_dtype is None:
        return q, METHODS[q].dtype if q else "fp16"
    w = canonical_dtype(weight_dtype, "weight_dtype")
    if q is not None and w not in METHODS[q].dtypes:
        m = METHODS[q]
        raise InvalidInputError(f"{q} stores {' or '.join(m.dtypes)} weights, not {w}: give one of them as the dtype or "
                                f"leave the dtype out (it becomes {m.dtype})", field="quantisation")
    return q, w


def quant_path(method: str | None) -> str:
    """Kernel path of a method (``None``: the dtype's own path; :data:`QUANT_PATHS`)."""
    return METHODS[method].path if method else "native"


def path_code(method: str | None) -> int:
    """Index of :func:`quant_path` in :data:`QUANT_PATHS` (an array-friendly code)."""
    return QUANT_PATHS.index(quant_path(method))
