"""Training and evaluation: the GraphSAGE regressor (PyTorch + PyG), the baselines, Hydra
experiments, metrics and resumable training state. Needs the ``train`` extra."""
