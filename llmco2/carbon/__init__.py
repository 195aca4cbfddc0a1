"""Carbon stage: operational carbon from energy, PUE and grid intensity; embodied carbon of the GPUs."""

from llmco2.carbon.accounting import (
    device_embodied,
    embodied_g,
    operational_g,
    pue,
    region,
)

__all__ = ["device_embodied", "embodied_g", "operational_g", "pue", "region"]
