"""Generate docs/configuration.md from the config schema: ``python -m bouquet.apps.docs``."""

from __future__ import annotations

import sys
from pathlib import Path

from bouquet.apps.config import all_keys
from bouquet.apps.registry import methods, tasks

HEADER = """# Configuration reference

Generated from the config schema by `python -m bouquet.apps.docs`; do not edit by hand.

Every key can be set with `flwr run . --run-config "key=value ..."` (strings in quotes:
`method='scafcom'`), with `bouquet run METHOD --set key=value`, or in a YAML preset in
`bouquet/apps/conf/` named by `preset`. Precedence: declared default < `conf/<method>.yaml` <
the `preset` < explicit values, where a key you set counts as explicit even when its value equals
the default. Nodes cannot see that difference, so `bouquet run` and the benchmark suites pin presets
into explicit keys before start and name each key set to its default that a preset would change in
`explicit-defaults`, which the nodes read as set; plain `flwr run` refuses such a run until you
name the key there yourself (`--run-config "method='fed-sb' lr=0.1 explicit-defaults='lr'"`).
Keys with a prefix belong to a method, a task or a shared section (`dp.*`); a run uses the
sections of its method and task, and a key of any other section set to anything but its default
is an error that names the methods and tasks that read it (it would otherwise be silently
ignored).

A `float` key takes finite numbers only: `inf`, `-inf`, `nan` (or `1e999`, which overflows to
`inf`) are refused for every key, through every entry (`--set`, `--run-config`, a preset, a
strategy plugin's keyword argument, and the node-config floats `dp-max-epsilon` and
`uplink-mbps`), because they pass every range check and would silently switch a bound off. No
key means "no limit" by `inf`: where a key can be switched off, its value `0` does that, as
its line below says.
"""


def render() -> str:
    """The markdown text of the configuration reference."""
    groups: dict[str, list[str]] = {}
    for name, spec in all_keys().items():
        prefix = name.split(".")[0] if "." in name else "common"
        groups.setdefault(prefix, []).append(
            f"| `{name}` | `{spec.default!r}` | {spec.allowed()} | {spec.help} |"
        )
    users: dict[str, list[str]] = {}
    for m in methods().values():
        for p in m.sections:
            users.setdefault(p, []).append(m.name)
    for t in tasks().values():
        for p in t.sections:
            users.setdefault(p, []).append(t.name)
    out = [HEADER]
    for prefix, rows in groups.items():
        title = "Common keys" if prefix == "common" else f"`{prefix}.*`"
        out.append(f"## {title}\n")
        if prefix in users:
            out.append("Used by: " + ", ".join(f"`{u}`" for u in sorted(users[prefix])) + "\n")
        out += ["| key | default | allowed | meaning |", "|---|---|---|---|", *rows, ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Write (or with --check, verify) docs/configuration.md."""
    args = sys.argv[1:] if argv is None else argv
    path = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    text = render()
    if "--check" in args:
        ok = path.is_file() and path.read_text() == text
        print(f"{path}: {'in sync' if ok else 'out of sync; run python -m bouquet.apps.docs'}")
        return 0 if ok else 1
    path.write_text(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
