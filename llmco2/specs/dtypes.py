"""Numeric data types: canonical names, aliases and storage size in bytes per element."""

from __future__ import annotations

from llmco2.errors import UnknownIdError
from llmco2.specs.lookup import close_matches

#: Bytes per element of each canonical dtype (int4/fp4 pack two elements per byte).
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "tf32": 4.0,
    "fp16": 2.0,
    "bf16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "fp4": 0.5,
}

#: Bits per element (the paper's "quantization bitwidth" feature).
DTYPE_BITS: dict[str, int] = {name: int(size * 8) for name, size in DTYPE_BYTES.items()}

_ALIASES: dict[str, str] = {
    "float32": "fp32",
    "float": "fp32",
    "32": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "16": "fp16",
    "bfloat16": "bf16",
    "float8": "fp8",
    "fp8_e4m3": "fp8",
    "e4m3": "fp8",
    "8": "int8",
    "8bit": "int8",
    "4": "int4",
    "4bit": "int4",
    "mxfp4": "fp4",
    "nvfp4": "fp4",
}


def canonical_dtype(name: str, field: str = "dtype") -> str:
    """Return the canonical dtype name for ``name`` (case-insensitive, aliases accepted)."""
    key = str(name).strip().lower().replace("torch.", "")
    key = _ALIASES.get(key, key)
    if key not in DTYPE_BYTES:
        raise UnknownIdError(
            f"unknown dtype {name!r}; expected one of {', '.join(DTYPE_BYTES)}"
            + close_matches(str(name), list(DTYPE_BYTES) + list(_ALIASES)),
            field=field,
        )
    return key


def dtype_bytes(name: str) -> float:
    """Bytes per element of a dtype."""
    return DTYPE_BYTES[canonical_dtype(name)]
