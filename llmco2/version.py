"""The package version (one place; ``llmco2.__version__`` and written outputs read it)."""

__version__ = "0.1.0"
