"""Hydra entry points whose bad command lines get one line and exit code 2.

Hydra reports an unknown key (``foo=1``), a config that a group does not have (``trainer=gpux``),
a group that the defaults list lacks (``experiment=nope``) or an override it cannot read
(``n==3``) with several lines and a pointer to ``HYDRA_FULL_ERROR``, and exits with 1.
:func:`hydra_main` replaces ``@hydra.main``: before handing the command line to Hydra it composes
the configuration the way Hydra is about to (in a multirun, once for every value of every sweep),
runs the app's own value checks on it, and turns the first failure into an
:class:`~llmco2.errors.InvalidInputError`: the override, what is wrong, the closest valid spelling
and what is valid there; a run folder (``hydra.run.dir``) that cannot be made, under a file say,
is refused the same way. Nothing is written before that (Hydra creates the run folder first).
``+key=value`` adds a key and ``~key`` removes one, as in Hydra; with ``HYDRA_FULL_ERROR=1`` in the
environment the command line goes to Hydra unchecked, for its full report.

While a job runs, SIGTERM stops it as Ctrl-C does; either ends it with one line (what the task
kept, when it raises :class:`~llmco2.errors.Stopped`) and exit code 130 (SIGINT) or 143 (SIGTERM).
:func:`instantiate` reports a target's InvalidInputError under its dotted key, in one line.
"""

from __future__ import annotations

import difflib
import functools
import io
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr
from pathlib import Path
from typing import Any

from llmco2.errors import Interrupted, InvalidInputError, Stopped
from llmco2.file_checks import check_output_folder
from llmco2.interrupts import exit_code, terminate_as_interrupt

#: Checks of a composed configuration (``llmco2.config_checks``) that raise InvalidInputError.
Check = Callable[[Any], None]
_HINT = "write KEY=VALUE (+KEY=VALUE adds a key, ~KEY removes one; quote values with spaces, commas or brackets)"


def hydra_main(config_dir: Path | None, config_name: str, check: Check | None = None) -> Callable[[Callable[[Any], Any]], Callable[[], Any]]:
    """``@hydra.main(version_base="1.3", config_path=config_dir, config_name=config_name)`` whose
    command line is checked first (see the module docstring); ``check`` also runs inside every job.
    An InvalidInputError, before Hydra starts or from the task, is one line on stderr and exit 2."""

    def decorate(task: Callable[[Any], Any]) -> Callable[[], Any]:
        import hydra

        @functools.wraps(task)
        def job(cfg: Any) -> Any:
            with _one_line(), terminate_as_interrupt():
                if check is not None:
                    check(cfg)
                return task(cfg)

        run = hydra.main(version_base="1.3", config_path=str(config_dir) if config_dir else None,
                         config_name=config_name)(job)

        @functools.wraps(task)
        def main() -> Any:
            with _one_line():
                check_command_line(sys.argv[1:], config_dir, config_name, check)
                return run()

        return main

    return decorate


@contextmanager
def _one_line() -> Iterator[None]:
    """InvalidInputError: one line and exit 2; Ctrl-C or SIGTERM (a task's :class:`Stopped` saying
    what it kept, or a bare interrupt): one line and exit 130 or 143."""
    try:
        yield
    except InvalidInputError as exc:
        sys.stderr.write(f"llmco2: error: {exc}\n")
        raise SystemExit(2) from None
    except (Stopped, Interrupted) as exc:
        sys.stderr.write(f"llmco2: {exc}\n")
        raise SystemExit(exc.exit_code) from None
    except KeyboardInterrupt as exc:
        sys.stderr.write("llmco2: interrupted\n")
        raise SystemExit(exit_code(exc)) from None


def instantiate(node: Any, key: str, **kwargs: Any) -> Any:
    """``hydra.utils.instantiate(node, **kwargs)``, an InvalidInputError of the target (a count out
    of range, say) raised as itself under the dotted ``key`` of ``node`` (``sampler.max_batch``)
    instead of Hydra's several-line InstantiationException."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate as hydra_instantiate

    try:
        return hydra_instantiate(node, **kwargs)
    except InstantiationException as exc:
        cause = exc.__cause__
        if not isinstance(cause, InvalidInputError):
            raise
        text = str(cause.args[0]) if cause.args else ""
        if cause.field and text.startswith(cause.field):
            text = text[len(cause.field):].lstrip(": ")
        raise InvalidInputError(text, field=f"{key}.{cause.field}" if cause.field else key) from None


def check_run_folder(cfg: Any, multirun: bool) -> None:
    """The folder Hydra will create for a composed config (``hydra.run.dir``, or ``hydra.sweep.dir``
    in a multirun) can be made: no file on its way, the nearest existing folder writable. A folder
    whose name is only known once a job runs is left to Hydra."""
    from omegaconf import OmegaConf

    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    try:
        folder = OmegaConf.select(cfg, key, throw_on_missing=True)
    except Exception:  # noqa: BLE001 - e.g. ${hydra:job.num}: resolved by Hydra at run time
        return
    if folder is not None and str(folder).strip():
        check_output_folder(str(folder), field=key)


def check_command_line(argv: list[str], config_dir: Path | None, config_name: str, check: Check | None = None) -> None:
    """Compose what ``argv`` asks of the app (``config_name`` in ``config_dir``, or in the
    ConfigStore when ``config_dir`` is None) as Hydra will; InvalidInputError at the first problem.
    Help, shell completion, ``--info`` and another config folder are left to Hydra."""
    from hydra._internal.utils import get_args_parser

    if os.environ.get("HYDRA_FULL_ERROR") == "1" or "--version" in argv:
        return
    try:
        with redirect_stderr(io.StringIO()):
            args, _ = get_args_parser().parse_known_args(argv)
    except SystemExit:  # Hydra's own parser reports its flags' errors when it parses them again
        return
    if args.help or args.hydra_help or args.shell_completion or args.info or args.config_path or args.config_dir:
        return
    with _initialized(config_dir):
        _Composer(args.config_name or config_name, list(args.overrides), bool(args.multirun), check).run()


@contextmanager
def _initialized(config_dir: Path | None) -> Iterator[None]:
    from hydra import initialize, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    context = (initialize_config_dir(config_dir=str(config_dir), version_base="1.3") if config_dir
               else initialize(config_path=None, version_base="1.3"))
    with context:
        yield


class _Composer:
    """The compositions Hydra will make for one command line, each checked."""

    def __init__(self, name: str, overrides: list[str], multirun: bool, check: Check | None) -> None:
        from hydra.core.global_hydra import GlobalHydra

        self.name, self.texts, self.multirun, self.check = name, overrides, multirun, check
        self.hydra = GlobalHydra.instance().hydra
        self.loader = GlobalHydra.instance().config_loader()

    def run(self) -> None:
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from hydra.types import RunMode

        parser = OverridesParser.create()
        parsed = [self._parse(parser, text) for text in self.texts]
        master = self._compose(self.texts, RunMode.MULTIRUN)  # what Hydra composes first, sweeps left out
        multirun = self.multirun or master.hydra.mode == RunMode.MULTIRUN
        sweeps = [o for o in parsed if o.is_sweep_override()]
        if not multirun:
            if sweeps:
                o = sweeps[0]
                key, value = o.get_key_element(), o.input_line.partition("=")[2]
                raise InvalidInputError(f"{o.input_line}: a sweep runs with --multirun (-m); for a list write {key}=[{value}], "
                                        f"for one string {key}=\"'{value}'\"")
            cfg = self._compose(self.texts, RunMode.RUN)
            self._checked(cfg)
            check_run_folder(cfg, multirun=False)
            return
        for o in sweeps:
            if o.is_hydra_override():
                raise InvalidInputError(f"{o.input_line}: Hydra's own settings (hydra.*) cannot be swept")
        check_run_folder(master, multirun=True)
        for variant in self._variants(parser, parsed, master):
            self._checked(self._compose(variant, RunMode.RUN))

    def _parse(self, parser: Any, text: str) -> Any:
        from hydra.errors import OverrideParseException

        try:
            return parser.parse_overrides([text])[0]
        except OverrideParseException:
            if "==" in text:
                fixed = re.sub("=+", "=", text, count=1)
                raise InvalidInputError(f"{text!r} is not an override: one '=' between key and value ({fixed})") from None
            if "=" not in text:
                raise InvalidInputError(f"{text!r} is not an override: {_HINT}") from None
            raise InvalidInputError(f"{text!r} is not an override Hydra can read: {_HINT}") from None

    def _variants(self, parser: Any, parsed: list[Any], master: Any) -> Iterator[list[str]]:
        """The command line of the first job, then one per further value of every discrete sweep
        (given on the command line or in ``hydra.sweeper.params``), the other sweeps at their first."""
        given = {o.get_key_element() for o in parsed}
        params = master.hydra.sweeper.get("params") or {}
        extra = [parser.parse_override(f"{k}={v}") for k, v in params.items()]
        items = parsed + [o for o in extra if o.get_key_element() not in given]
        values: list[list[str]] = []
        for o in items:
            key = o.get_key_element()
            if not o.is_sweep_override():
                values.append([o.input_line])
            elif o.is_discrete_sweep():
                values.append([f"{key}={v}" for v in o.sweep_string_iterator()] or [o.input_line])
            else:
                values.append([])  # an interval sweep: its values come from an optimiser
        first = [v[0] for v in values if v]
        yield first
        for i, vals in enumerate(values):
            for v in vals[1:]:
                yield [v if j == i else w[0] for j, w in enumerate(values) if w]

    def _compose(self, overrides: list[str], mode: Any) -> Any:
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        try:
            return self.hydra.compose_config(config_name=self.name, overrides=overrides, run_mode=mode, from_shell=True,
                                             with_log_configuration=False, validate_sweep_overrides=False)
        except (HydraException, OmegaConfBaseException) as exc:
            raise InvalidInputError(self._explain(exc, overrides)) from None

    def _checked(self, cfg: Any) -> None:
        if self.check is not None:
            self.check(cfg)

    # -- one line for what Hydra reported ---------------------------------------------------------
    def _explain(self, exc: BaseException, overrides: list[str]) -> str:
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from hydra.errors import MissingConfigException

        text = str(exc)
        parsed = OverridesParser.create().parse_overrides(overrides)
        if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and "/" in exc.missing_cfg_file:
            group, _, option = exc.missing_cfg_file.rpartition("/")
            line = next((o.input_line for o in parsed if o.key_or_group == group), f"{group}={option}")
            return self._no_option(line, group, option, exc.options)
        found = re.search(r"Could not override '([^']+)'\. No match in the defaults list", text)
        if found:
            group = found.group(1)
            line = next((o.input_line for o in parsed if o.key_or_group == group), group)
            value = line.partition("=")[2]
            options = self._options(group)
            plus = f"+{group}={value}" if value in options else f"+{group}=NAME, one of {', '.join(options)}"
            return f"{line}: the defaults have no {group} to replace; add one with {plus}"
        for o in parsed:
            if f"'{o.key_or_group}'" not in text:
                continue
            if o.is_add() and text.startswith("Could not append to config"):
                return (f"{o.input_line}: {o.key_or_group} exists already; write {o.input_line[1:]} to change it "
                        "(++ sets it either way)")
            if text.startswith("Could not delete from config" if o.is_delete() else "Could not override"):
                return self._no_key(o, overrides)
        if text.startswith("Error merging override") and exc.__cause__ is not None:
            line = text.removeprefix("Error merging override").strip()
            return f"{line}: {_first_line(exc.__cause__)}"
        return _first_line(exc)

    def _options(self, group: str) -> list[str]:
        try:
            return sorted(self.loader.get_group_options(group))
        except Exception:  # noqa: BLE001 - a listing is a courtesy
            return []

    def _no_option(self, line: str, group: str, option: str, options: Any) -> str:
        choices = sorted(options or self._options(group))
        close = difflib.get_close_matches(option, choices, n=1, cutoff=0.6)
        listed = ", ".join(choices) if choices else "none"
        if group.startswith("hydra/"):
            listed += " (a Hydra plugin's configs appear once it is installed)"
        if close:
            return f"{line}: {group} has no config {option!r}; did you mean {line.partition('=')[0]}={close[0]}? (one of {listed})"
        return f"{line}: {group} has no config {option!r}; choose one of {listed}"

    def _no_key(self, o: Any, overrides: list[str]) -> str:
        """An override of a key that is not there: the closest key and the keys beside it."""
        from omegaconf import OmegaConf

        key, value = o.key_or_group, o.input_line.partition("=")[2]
        base = self._structure(overrides)
        paths = _paths(base) if base is not None else []
        parts = key.split(".")
        where, node = "", base
        for depth in range(len(parts) - 1):  # the deepest existing node on the key's path
            child = OmegaConf.select(base, ".".join(parts[: depth + 1])) if base is not None else None
            if not OmegaConf.is_dict(child):
                break
            where, node = ".".join(parts[: depth + 1]), child
        siblings = [str(k) for k in node.keys() if str(k) != "hydra" or where] if OmegaConf.is_dict(node) else []
        ours = paths if key.startswith("hydra.") else [p for p in paths if not p.startswith("hydra.")]
        same_name = sorted((p for p in paths if p.rsplit(".", 1)[-1] == parts[-1] and p != key),
                           key=lambda p: (p not in ours, len(p)))  # the app's own keys before Hydra's
        close = same_name[:1] or difflib.get_close_matches(key, ours, n=1, cutoff=0.75)
        verb = "delete" if o.is_delete() else "set"
        here = f"{where} has" if where else "the top level has"
        listing = f"{here} {', '.join(siblings)}" if siblings else ""
        if close:
            suggestion = f"{'~' if o.is_delete() else ''}{close[0]}" + (f"={value}" if value else "")
            return f"{o.input_line}: no key {key} to {verb}; did you mean {suggestion}?" + (f" ({listing})" if listing else "")
        add = "" if o.is_delete() else f" (+{key}={value} adds it)" if value else ""
        return f"{o.input_line}: no key {key} to {verb}" + (f"; {listing}" if listing else "") + add

    def _structure(self, overrides: list[str]) -> Any:
        """The configuration with only the config-group choices of ``overrides`` (None if even
        that fails): the keys that exist for this command line."""
        from hydra.types import RunMode

        groups = [t for t in overrides if self._is_group(t)]
        for attempt in (groups, []):
            try:
                return self.hydra.compose_config(config_name=self.name, overrides=attempt, run_mode=RunMode.RUN,
                                                 from_shell=True, with_log_configuration=False)
            except Exception:  # noqa: BLE001 - fall back to the plain defaults
                continue
        return None

    def _is_group(self, text: str) -> bool:
        key = text.partition("=")[0].lstrip("+~").split("@")[0]
        return bool(key) and self.loader.repository.group_exists(key)


def _paths(cfg: Any, prefix: str = "") -> list[str]:
    """Every dotted key of ``cfg`` (nodes and leaves), values left unresolved."""
    from omegaconf import OmegaConf

    out: list[str] = []
    for key in cfg.keys():
        path = f"{prefix}{key}"
        out.append(path)
        child = cfg._get_node(key)
        if OmegaConf.is_dict(child) and not child._is_missing() and not child._is_none():
            out.extend(_paths(child, f"{path}."))
    return out


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
