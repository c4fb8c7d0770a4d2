"""Run configuration: Flower's flat ``run_config`` -> presets (omegaconf) -> validated typed sections.

Order of precedence, lowest first:

1. the defaults declared in the sections (:func:`bouquet.schema.key`);
2. ``bouquet/apps/conf/<method>.yaml`` if it exists (the method's preset);
3. ``bouquet/apps/conf/<preset>.yaml`` when the ``preset`` key names one;
4. every run-config value that differs from the key's declared default (Flower always passes
   every key, so a value equal to the default cannot be told apart from "not set").

An unknown key, a wrong type or an out-of-range value raises :class:`ConfigError` naming the key
and what is allowed, before any node is contacted.

Run ``python -m bouquet.apps.config --sync-pyproject`` after adding a key: Flower only accepts
``--run-config`` keys that exist in ``[tool.flwr.app.config]``, so that table is generated from the
sections of every registered method and task.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import OmegaConf

from bouquet.apps.registry import Method, RegistryError, get_method, get_task, methods, tasks
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


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in tree.items():
        name = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            out.update(_flatten(v, name))
        else:
            out[name] = v
    return out


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


def resolve(run_config: Mapping[str, Any]) -> RunConfig:
    """Resolve Flower's flat run config into a :class:`RunConfig`.

    Parameters
    ----------
    run_config : Mapping[str, Any]
        ``context.run_config`` (every key, dotted names), or any subset of it.

    Raises
    ------
    ConfigError
        For an unknown method, task, preset or key, or a value of the wrong type or range.

    """
    specs = all_keys()
    for name in run_config:
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
    explicit = {k: v for k, v in run_config.items() if v != specs[k].default}
    layers.append(("run config", explicit))

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

    common = CommonConfig(**{s.field: flat[s.name] for s in section_keys(CommonConfig)})  # type: ignore[arg-type]
    if common.method != method.name:  # a preset changed the method
        raise ConfigError("method: a preset may not change the method")
    task_name = common.task or method.default_task
    try:
        task = get_task(task_name)
    except RegistryError as exc:
        raise ConfigError(f"task: {exc}") from exc

    sections: dict[str, Any] = {}
    for prefix, cls in {**method.sections, **task.sections}.items():
        sections[prefix] = cls(**{s.field: flat[s.name] for s in section_keys(cls, prefix)})
    # Keep only keys that concern this run in the flat view written to config.yaml.
    own = {s.name for s in section_keys(CommonConfig)}
    for prefix in sections:
        own |= {s.name for s in section_keys(type(sections[prefix]), prefix)}
    return RunConfig(
        common=common,
        sections=sections,
        method=method,
        flat={k: v for k, v in flat.items() if k in own},
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
