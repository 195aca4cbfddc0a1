"""llmco2: predict the GPU energy and carbon footprint of an LLM inference request before it runs."""

__version__ = "0.1.0"
