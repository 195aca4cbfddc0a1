"""Pieces shared by the command modules: the one-line-error parser, JSON and unit formatting."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, NoReturn

EXIT_USAGE = 2


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error message and exit code 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        raise SystemExit(EXIT_USAGE)


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2) + "\n")


def fmt(value: float | None, unit: str) -> str:
    """``1.23 GB``-style rendering with SI prefixes."""
    if value is None:
        return "-"
    v = float(value)
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {prefix}{unit}"
    return f"{v:.3g} {unit}"


def fmt_time(seconds: float) -> str:
    s = float(seconds)
    if s == 0:
        return "0"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def scope_line(scope: dict[str, Any]) -> str:
    """One line naming the platform and the host share of a record's ``assumptions["scope"]``: GPU slots used,
    the load proxy, host energy and power-supply losses (J); the sources are in the JSON."""
    used = scope["gpu_slot_share"] * scope["gpu_slots"]
    return (f"platform: {scope['platform']}, {used:.3g} of {scope['gpu_slots']} GPU slots at load {scope['utilisation']:.2f}: "
            f"host {fmt(scope['host_energy_j'], 'J')} + PSU {fmt(scope['psu_loss_j'], 'J')} (sources: --json)")
