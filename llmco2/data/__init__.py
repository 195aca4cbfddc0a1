"""Data layer: the canonical energy table, importers of public measurements, Azure traces,
samplers and splits."""
