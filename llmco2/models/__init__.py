"""Predictors: the LLMCO2 GraphSAGE regressor, baselines, training, metrics and checkpoints."""
