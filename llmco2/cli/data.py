"""``llmco2 data ...``: import public measurements into the canonical table, summarise a table,
draw the Azure trace figure."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmco2.cli.common import Parser, print_json
from llmco2.errors import InvalidInputError
from llmco2.file_checks import check_output_path

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

SUMMARY_RANGES = ("batch_size", "prompt_tokens", "generated_tokens", "energy_j", "latency_s")


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    data = sub.add_parser("data", help="canonical energy table: import, summarise, Azure traces")
    dsub = data.add_subparsers(dest="what", required=True, parser_class=Parser)

    imp = dsub.add_parser("import", help="convert a public dataset file into the canonical energy table")
    imp.add_argument("format", help="co2meter, argonne, mlenergy_v2, mlenergy_v3, wilkins, delavande, tokenpowerbench, h100_hf, "
                                    "splitwise, collected, canonical, or 'all' with the shared data folder as PATH")
    imp.add_argument("path", help="source file (or folder for 'all')")
    imp.add_argument("-o", "--out", required=True, help="output table (.parquet or .csv)")

    summ = dsub.add_parser("summary", help="rows per source / device / model / phase, value ranges, missing fields")
    summ.add_argument("path", help="canonical table (.parquet or .csv), a folder of them (e.g. data/measurements), "
                                    "or a source file with --format")
    summ.add_argument("--format", default=None, help="import PATH with this importer first")
    summ.add_argument("--json", action="store_true")

    fig = dsub.add_parser("azure-figure", help="prompt and generated-token distributions of the Azure traces (paper Fig. 6)")
    fig.add_argument("-o", "--out", required=True, help="image file (.png, .pdf, .svg)")
    fig.add_argument("--code", default=None, help="code trace CSV (default: shared data)")
    fig.add_argument("--conv", default=None, help="conversation trace CSV (default: shared data)")
    fig.add_argument("--json", action="store_true", help="also print the trace statistics as JSON")

    handlers.update({("data", "import"): cmd_import, ("data", "summary"): cmd_summary, ("data", "azure-figure"): cmd_azure_figure})


def _check_out(path: Path, suffixes: tuple[str, ...]) -> None:
    check_output_path(path, "--out", suffixes)


def cmd_import(args: argparse.Namespace) -> int:
    from llmco2.data.importers import import_all, import_file
    from llmco2.data.schema import write_table

    out = Path(args.out)
    _check_out(out, (".parquet", ".csv"))
    start = time.perf_counter()
    if args.format == "all":
        folder = Path(args.path)
        if not folder.is_dir():
            raise InvalidInputError(f"{folder} is not a folder; 'all' imports every file of the shared data folder", field="path")
        table, results, refused = import_all(folder)
        for result in results:
            sys.stderr.write(result.summary() + "\n")
        for path, reason in refused:
            sys.stderr.write(f"refused {path.name}: {reason}\n")
    else:
        result = import_file(args.format, args.path)
        table = result.table
        if len(table):
            sys.stderr.write(result.summary() + "\n")
    if len(table) == 0:
        raise InvalidInputError(f"no usable rows in {args.path}: {_drop_counts(results if args.format == 'all' else [result])}",
                                field="path")
    write_table(table, out)
    sys.stderr.write(f"wrote {len(table)} rows to {out} in {time.perf_counter() - start:.2f} s\n")
    return 0


def _drop_counts(results: list[Any]) -> str:
    """``"dropped 12 device not in catalog: X; 3 energy_j == 0"`` over several import results, by reason."""
    totals: dict[str, int] = {}
    read = 0
    for r in results:
        read += r.rows_read
        for reason, n in r.dropped.items():
            totals[reason] = totals.get(reason, 0) + n
    if not totals:
        return f"{read:,} rows read, none dropped (no file an importer recognises?)"
    return f"{read:,} rows read, dropped " + "; ".join(f"{n:,} {reason}" for reason, n in sorted(totals.items(), key=lambda kv: -kv[1]))


def read_folder(folder: Path) -> tuple[pd.DataFrame, list[str]]:
    """Every canonical table of a measurement folder (``*.csv`` / ``*.parquet`` except failure logs
    and configuration lists) read and concatenated, and the files read."""
    from llmco2.data.schema import concat_tables, read_table

    paths = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in (".csv", ".parquet")
                   and not p.name.endswith(".failed.csv") and not p.name.startswith(("configs", ".")))
    tables = []
    for path in paths:
        table, report = read_table(path, on_error="keep")
        if report.bad_rows:
            sys.stderr.write(f"{path}: {report.summary()}\n")
        tables.append(table)
    return concat_tables(tables), [str(p) for p in paths]


def summarize(table: pd.DataFrame) -> dict[str, Any]:
    """Rows per source / device / model / phase / level, value ranges and missing fields."""
    def counts(col: str) -> dict[str, int]:
        return {str(k): int(v) for k, v in table[col].value_counts(dropna=False).sort_index().items()}

    ranges = {}
    for col in SUMMARY_RANGES:
        values = table[col].dropna()
        ranges[col] = {"min": float(values.min()), "max": float(values.max())} if len(values) else None
    missing = {c: int(n) for c, n in table.isna().sum().items() if n}
    return {
        "rows": int(len(table)),
        "per_source": counts("source"),
        "per_device": counts("device"),
        "per_model": counts("model"),
        "per_phase": counts("phase"),
        "per_level": counts("level"),
        "per_engine": counts("engine"),
        "per_flag": {str(k): int(v) for k, v in table["flag"].dropna().astype(str).str.split(";").explode()
                     .value_counts().sort_index().items()},
        "ranges": ranges,
        "missing": missing,
    }


def cmd_summary(args: argparse.Namespace) -> int:
    if args.format:
        from llmco2.data.importers import import_file

        table = import_file(args.format, args.path).table
    elif Path(args.path).is_dir():
        table, files = read_folder(Path(args.path))
        if not len(table):
            if args.json:
                print_json({"rows": 0, "files": files})
            else:
                sys.stdout.write(f"0 rows in {args.path}: " + (f"{len(files)} table(s) without rows" if files else
                                 "no measurement table yet (see its README.md for how to measure)") + "\n")
            return 0
    else:
        from llmco2.data.schema import read_table

        table, report = read_table(args.path, on_error="keep")
        if report.bad_rows:
            sys.stderr.write(f"{args.path}: {report.summary()}\n")
    summary = summarize(table)
    if args.json:
        print_json(summary)
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]{summary['rows']}[/bold] rows in {args.path}")
    for key in ("per_source", "per_device", "per_engine", "per_phase", "per_level", "per_flag", "per_model"):
        t = Table(title=key.replace("_", " "))
        t.add_column(key.split("_", 1)[1])
        t.add_column("rows", justify="right")
        for name, n in summary[key].items():
            t.add_row(name, f"{n:,}")
        console.print(t)
    t = Table(title="ranges")
    for col in ("column", "min", "max"):
        t.add_column(col, justify="left" if col == "column" else "right")
    for col, rng in summary["ranges"].items():
        t.add_row(col, *(("-", "-") if rng is None else (f"{rng['min']:.4g}", f"{rng['max']:.4g}")))
    console.print(t)
    console.print("missing: " + ", ".join(f"{c} {n:,}" for c, n in summary["missing"].items()))
    return 0


def cmd_azure_figure(args: argparse.Namespace) -> int:
    from llmco2.data.azure import load_trace, plot_figure6, trace_stats

    out = Path(args.out)
    _check_out(out, (".png", ".pdf", ".svg"))
    code = load_trace("code", args.code)
    conv = load_trace("conv", args.conv)
    plot_figure6(out, code, conv)
    sys.stderr.write(f"wrote {out}\n")
    if args.json:
        print_json({"code": trace_stats(code), "conv": trace_stats(conv)})
    return 0
