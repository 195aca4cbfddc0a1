"""The option records of :mod:`llmco2.api.options` from ``llmco2 predict``'s flags."""

from __future__ import annotations

import argparse

from llmco2.api.options import Assumptions, RequestOptions
from llmco2.errors import InvalidInputError


def request_options(args: argparse.Namespace) -> RequestOptions:
    """The request options of ``llmco2 predict``'s flags. ``--quantisation`` is refused with
    ``--serving`` (the serving simulation builds its server from the dtype alone)."""
    quantisation = getattr(args, "quantisation", None)
    if quantisation is not None and getattr(args, "serving", False):
        raise InvalidInputError("does not apply with --serving yet (the serving simulation takes --dtype only); "
                                "leave it out", field="--quantisation")
    return RequestOptions(engine=args.engine, dtype=args.dtype, act_dtype=args.act_dtype, kv_dtype=args.kv_dtype,
                          flash_attention=args.flash_attention, causal=args.causal, ignore_context=args.ignore_context,
                          approximate=args.approximate, checkpoint=args.checkpoint, quantisation=quantisation)


def assumptions(args: argparse.Namespace) -> Assumptions:
    """The carbon assumptions of ``llmco2 predict``'s flags."""
    return Assumptions(region=args.region, carbon_intensity=args.carbon_intensity, pue=args.pue,
                       lifetime_years=args.lifetime_years, intensity=args.intensity_file, timestamp=args.timestamp,
                       scope=args.scope, platform=args.platform)


def add_scope_arguments(p: argparse.ArgumentParser) -> None:
    """``--scope gpu|server`` and ``--platform ID``: what carbon is computed on (:class:`~llmco2.api.options.Assumptions`)."""
    from llmco2.carbon.server_scope import SCOPES

    p.add_argument("--scope", default="server", choices=SCOPES,
                   help="carbon on the whole server (default: GPUs + the host's share of the GPU slots + power-supply "
                        "losses, and the platform's non-GPU embodied carbon) or on the GPUs alone; GPU energy is "
                        "reported on both")
    p.add_argument("--platform", default=None, metavar="ID",
                   help="the server around the GPUs (hgx-h100-8, dgx-a100, pcie-2s-4gpu, workstation, ...; "
                        "default: the GPU's usual platform)")
