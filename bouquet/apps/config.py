"""Run configuration: Flower's flat ``run_config`` -> presets (omegaconf) -> validated typed sections.

Order of precedence, lowest first:

1. the defaults declared in the sections (:func:`bouquet.schema.key`);
2. ``bouquet/apps/conf/<method>.yaml`` if it exists (the method's preset);
3. ``bouquet/apps/conf/<preset>.yaml`` when the ``preset`` key names one;
4. every key the user set explicitly (``explicit``: Flower's ``override_config`` on the server,
   the ``--set`` keys of ``bouquet run``), even one equal to its default. Where nobody says which
   keys were set (a ClientApp sees only the fused run config), every value that differs from the
   key's declared default counts as set.

An explicit value that equals its default cannot be seen by the nodes, so it must never lose to a
preset there: :func:`pin_presets` turns the presets into explicit keys before Flower starts and
names every key set to its default that a preset would change in ``explicit-defaults``, which
the nodes read as set (``bouquet run`` and ``bouquet bench`` do this); the server refuses a run
where nodes and server would disagree.

An unknown key, a wrong type, an out-of-range value or a key that neither the chosen method nor
the chosen task reads, set to anything but its default, raises :class:`ConfigError` naming the
key and what is allowed (or which methods and tasks read it), before any node is contacted.

Run ``python -m bouquet.apps.config --sync-pyproject`` after adding a key: Flower only accepts
``--run-config`` keys that exist in ``[tool.flwr.app.config]``, so that table is generated from the
sections of every registered method and task.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
from collections.abc import Collection, Mapping
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import OmegaConf

from bouquet.apps.registry import Method, RegistryError, get_method, get_task, methods, tasks
from bouquet.apps.results import default_run_name
from bouquet.schema import CommonConfig, KeySpec, Scalar, section_keys

CONF_DIR = Path(__file__).parent / "conf"
T = TypeVar("T")


class ConfigError(ValueError):
    """A run-config problem, with the key and what is allowed in the message."""


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """A resolved, validated configuration.

    Attributes
    ----------
    common : CommonConfig
        The keys every run has.
    sections : dict[str, Any]
        One dataclass instance per prefix of the method and of the task.
    method : Method
        The registered method.
    flat : dict[str, Scalar]
        Every key of this run as a flat dotted mapping (what ``config.yaml`` holds).

    """

    common: CommonConfig
    sections: dict[str, Any]
    method: Method
    flat: dict[str, Scalar]

    @property
    def task_name(self) -> str:
        """The task of this run (the method's default when ``task`` is empty)."""
        return self.common.task or self.method.default_task

    def section(self, prefix: str, cls: type[T] | None = None) -> T:
        """Return the section instance for ``prefix`` (typed when ``cls`` is given)."""
        try:
            sec = self.sections[prefix]
        except KeyError as exc:
            raise ConfigError(f"run has no config section {prefix!r}") from exc
        if cls is not None and not isinstance(sec, cls):
            raise TypeError(f"section {prefix!r} is {type(sec).__name__}, not {cls.__name__}")
        return sec  # type: ignore[no-any-return]

    def to_yaml(self) -> str:
        """The flat configuration as YAML."""
        return OmegaConf.to_yaml(OmegaConf.create(dict(self.flat)))


def all_sections() -> dict[str, type]:
    """Every section prefix of every registered method and task (checked for clashes)."""
    found: dict[str, type] = {}
    owners: dict[str, str] = {}
    items: list[tuple[str, Mapping[str, type]]] = [(m.name, m.sections) for m in methods().values()]
    items += [(t.name, t.sections) for t in tasks().values()]
    for owner, sections in items:
        for prefix, cls in sections.items():
            if prefix in found and found[prefix] is not cls:
                raise RegistryError(
                    f"config prefix {prefix!r} is declared by {owners[prefix]} and {owner} with "
                    "different classes"
                )
            found[prefix] = cls
            owners[prefix] = owner
    return found


@cache
def all_keys() -> dict[str, KeySpec]:
    """Every flat key a run config may hold, common keys first."""
    specs = {s.name: s for s in section_keys(CommonConfig)}
    for prefix, cls in sorted(all_sections().items()):
        for s in section_keys(cls, prefix):
            specs[s.name] = s
    return specs


def full_run_config(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Every key with its default, then the overrides (what Flower hands an app)."""
    cfg: dict[str, Any] = {k: s.default for k, s in all_keys().items()}
    cfg.update(overrides)
    return cfg


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in tree.items():
        name = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            out.update(_flatten(v, name))
        else:
            out[name] = v
    return out


@cache
def section_readers() -> dict[str, tuple[str, ...]]:
    """Section prefix -> the methods and tasks that read it (``"method fedit"``, ``"task x"``)."""
    readers: dict[str, list[str]] = {}
    for m in sorted(methods().values(), key=lambda m: m.name):
        for prefix in m.sections:
            readers.setdefault(prefix, []).append(f"method {m.name}")
    for t in sorted(tasks().values(), key=lambda t: t.name):
        for prefix in t.sections:
            readers.setdefault(prefix, []).append(f"task {t.name}")
    return {k: tuple(v) for k, v in readers.items()}


def common_keys() -> set[str]:
    """The flat names of the keys every run has (no section prefix)."""
    return {s.name for s in section_keys(CommonConfig)}


def _not_read(name: str, origin: str, method: Method, task_name: str) -> ConfigError:
    prefix = name.rpartition(".")[0] if "." in name else name
    readers = section_readers().get(prefix, ())
    return ConfigError(
        f"{origin}: key {name!r} is not read by method {method.name!r} on task {task_name!r}, "
        f"so it would be silently ignored; it is read by {', '.join(readers) or 'nothing'}"
    )


def load_preset(name: str) -> dict[str, Any]:
    """Read ``conf/<name>.yaml`` into a flat mapping (nested YAML is flattened with dots)."""
    path = CONF_DIR / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in CONF_DIR.glob("*.yaml"))
        raise ConfigError(f"preset: no preset {name!r}; available: {', '.join(known) or 'none'}")
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    if not isinstance(data, dict):
        raise ConfigError(f"preset {name!r}: {path} must hold a mapping")
    return _flatten({str(k): v for k, v in data.items()})


def _unknown(name: str, specs: Mapping[str, KeySpec]) -> ConfigError:
    close = difflib.get_close_matches(name, list(specs), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return ConfigError(f"unknown config key {name!r}{hint} (bouquet list --keys shows all keys)")


def resolve(run_config: Mapping[str, Any], explicit: Collection[str] | None = None) -> RunConfig:
    """Resolve Flower's flat run config into a :class:`RunConfig`.

    Parameters
    ----------
    run_config : Mapping[str, Any]
        ``context.run_config`` (every key, dotted names), or any subset of it.
    explicit : Collection[str], optional
        The keys the user set (Flower's ``run.override_config``). They beat every preset, even
        with a value equal to the default. Every value unequal to its default counts as set
        in any case.

    Raises
    ------
    ConfigError
        For an unknown method, task, preset or key, a key the method and task do not read, or a
        value of the wrong type or range.

    """
    specs = all_keys()
    for name in run_config:
        if name not in specs:
            raise _unknown(name, specs)
    if explicit is not None:
        for name in explicit:
            if name not in specs:
                raise _unknown(name, specs)

    method_name = str(run_config.get("method", CommonConfig.method))
    try:
        method = get_method(method_name)
    except RegistryError as exc:
        raise ConfigError(f"method: {exc}") from exc

    layers: list[tuple[str, Mapping[str, Any]]] = []
    if (CONF_DIR / f"{method.name}.yaml").is_file():
        layers.append((f"preset {method.name}", load_preset(method.name)))
    preset = str(run_config.get("preset", ""))
    if preset:
        layers.append((f"preset {preset}", load_preset(preset)))
    pinned = _explicit_defaults(run_config, specs)
    given = {k: v for k, v in run_config.items() if v != specs[k].default}
    for k in (*(explicit or ()), *pinned):
        given.setdefault(k, run_config.get(k, specs[k].default))
    layers.append(("run config", given))

    merged: dict[str, Scalar] = {k: s.default for k, s in specs.items()}
    for origin, layer in layers:
        for name, value in layer.items():
            if name not in specs:
                raise ConfigError(f"{origin}: {_unknown(name, specs)}")
            spec = specs[name]
            try:
                checked = spec.check(value)
            except ValueError as exc:
                raise ConfigError(
                    f"{origin}: bad value for {name!r}: {exc}; allowed: {spec.allowed()}"
                ) from exc
            merged[name] = checked
    flat = merged
    # one spelling of the keys the nodes read as set, so that saved configs compare equal
    flat["explicit-defaults"] = ",".join(sorted(set(pinned)))

    common = CommonConfig(**{s.field: flat[s.name] for s in section_keys(CommonConfig)})  # type: ignore[arg-type]
    if common.method != method.name:  # a preset changed the method
        raise ConfigError("method: a preset may not change the method")
    task_name = common.task or method.default_task
    try:
        task = get_task(task_name)
    except RegistryError as exc:
        raise ConfigError(f"task: {exc}") from exc

    # The resolved task is part of the run's identity: config.yaml names it, never ''.
    common = dataclasses.replace(common, task=task_name)
    flat["task"] = task_name
    sections: dict[str, Any] = {}
    for prefix, cls in {**method.sections, **task.sections}.items():
        sections[prefix] = cls(**{s.field: flat[s.name] for s in section_keys(cls, prefix)})
    # Keep only keys that concern this run in the flat view written to config.yaml.
    own = common_keys()
    for prefix in sections:
        own |= {s.name for s in section_keys(type(sections[prefix]), prefix)}
    # A key nobody in this run reads, set to anything but its default, is a mistake: it would
    # be dropped without a word. (At its default it changes nothing, explicit or not.)
    for origin, layer in layers:
        for name, value in layer.items():
            if name not in own and specs[name].check(value) != specs[name].default:
                raise _not_read(name, origin, method, task_name)
    return RunConfig(
        common=common,
        sections=sections,
        method=method,
        flat={k: v for k, v in flat.items() if k in own},
    )


def name_run(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``overrides`` with a ``run-name`` for a new unnamed run (one rule: ``default_run_name``).

    ``bouquet run``, ``deploy-local`` and the simulation helpers name a run before Flower starts
    it (node state and the results folder follow the name); a resumed run keeps its folder's.
    """
    out = dict(overrides)
    if not out.get("run-name") and not out.get("resume-from"):
        cfg = resolve(out)
        out["run-name"] = default_run_name(cfg.method.name, cfg.task_name, cfg.common.seed)
    return out


def _explicit_defaults(run_config: Mapping[str, Any], specs: Mapping[str, KeySpec]) -> list[str]:
    """The keys ``explicit-defaults`` names, each checked to be a key of the run config."""
    named = [k.strip() for k in str(run_config.get("explicit-defaults", "")).split(",")]
    for name in (k for k in named if k):
        if name == "explicit-defaults":
            raise ConfigError("explicit-defaults: names keys of the run, not itself")
        if name not in specs:
            raise ConfigError(f"explicit-defaults: {_unknown(name, specs)}")
    return [k for k in named if k]


def pin_presets(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Turn the presets of ``overrides`` into explicit keys, so no node can read them otherwise.

    A ClientApp sees only the fused run config, where a key set to its default looks unset; a
    preset would then beat it on the nodes. The result holds every key the presets set (unless
    ``overrides`` sets it), the overrides themselves, and no ``preset`` key; a key whose value
    the nodes would still read otherwise (one set to its declared default where the method's
    own preset, which every node applies, says something else) is added to
    ``explicit-defaults``. It resolves to the same configuration on the server and on every
    node.

    Parameters
    ----------
    overrides : Mapping[str, Any]
        The keys the user set (``--set``, ``--rounds``...).

    Returns
    -------
    dict[str, Any]
        Explicit overrides without presets.

    """
    cfg = resolve(overrides, explicit=list(overrides))
    layered = set()
    if (CONF_DIR / f"{cfg.method.name}.yaml").is_file():
        layered |= set(load_preset(cfg.method.name))
    if cfg.common.preset:
        layered |= set(load_preset(cfg.common.preset))
    out = {k: cfg.flat[k] for k in sorted(layered) if k not in overrides}
    out.update({k: v for k, v in overrides.items() if k != "preset"})
    nodes = resolve(out)
    unseen = {k for k, v in cfg.flat.items()
              if k not in ("preset", "explicit-defaults") and nodes.flat.get(k) != v}
    if unseen:
        given = _explicit_defaults(out, all_keys())
        out["explicit-defaults"] = ",".join(sorted({*given, *unseen}))
    return out


def node_view_agrees(run_config: Mapping[str, Any], cfg: RunConfig) -> None:
    """Refuse a run whose nodes would resolve another configuration than the server did.

    Nodes resolve without knowing which keys were set; where a preset sets a key that the user
    set explicitly to its default, they would take the preset's value.

    Raises
    ------
    ConfigError
        Naming each key on which the two views differ.

    """
    nodes = resolve(run_config)
    differ = sorted(k for k in cfg.flat if nodes.flat.get(k) != cfg.flat[k])
    if differ:
        detail = ", ".join(f"{k}={cfg.flat[k]!r} (nodes would use {nodes.flat.get(k)!r})"
                           for k in differ)
        presets = " or ".join(repr(p) for p in dict.fromkeys(
            (cfg.method.name, cfg.common.preset)) if p)
        named = ",".join(sorted({*_explicit_defaults(run_config, all_keys()), *differ}))
        raise ConfigError(
            f"preset {presets} sets keys that this run sets explicitly to their default: "
            f"{detail}. ClientApps cannot tell an explicit default from an unset key: name "
            f"those keys in explicit-defaults (e.g. --run-config \"explicit-defaults='{named}'\"), "
            "as `bouquet run` and the benchmark suites do"
        )


# --------------------------------------------------------------------------- pyproject generation
BEGIN = "# BEGIN GENERATED RUN CONFIG (python -m bouquet.apps.config --sync-pyproject)"
END = "# END GENERATED RUN CONFIG"


def _toml_value(v: Scalar) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, float):
        return repr(v)
    return str(v)


def generated_table() -> str:
    """The ``[tool.flwr.app.config]`` table for every registered key."""
    lines = [BEGIN, "[tool.flwr.app.config]"]
    for name, spec in all_keys().items():
        lines.append(f"{name} = {_toml_value(spec.default)}")
    lines.append(END)
    return "\n".join(lines)


def sync_pyproject(path: Path, check: bool = False) -> bool:
    """Rewrite the generated table in ``path``; return True if it was already in sync."""
    text = path.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    new = text[:start] + generated_table() + text[end:]
    if new == text:
        return True
    if not check:
        path.write_text(new)
    return False


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: ``--sync-pyproject`` or ``--check-pyproject``."""
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[1]) if len(args) > 1 else Path("pyproject.toml")
    if args and args[0] == "--sync-pyproject":
        sync_pyproject(path)
        print(f"{path}: run config table regenerated ({len(all_keys())} keys)")
        return 0
    if args and args[0] == "--check-pyproject":
        ok = sync_pyproject(path, check=True)
        print(f"{path}: " + ("in sync" if ok else "out of sync; run --sync-pyproject"))
        return 0 if ok else 1
    print("usage: python -m bouquet.apps.config --sync-pyproject|--check-pyproject [pyproject.toml]")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
