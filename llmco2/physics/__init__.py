"""The physics stage: the step physics (kernel times, host overheads, power), its fits, and the
analytic priors the learned predictor corrects. Torch-free; prediction, serving and training use it."""
