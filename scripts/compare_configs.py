"""Resolved configs of every table job and every preset, to compare two checkouts.

    PYTHONPATH=<checkout>/src python scripts/compare_configs.py dump <checkout> <out.json>
    python scripts/compare_configs.py compare <before.json> <after.json>

``dump`` composes, as ``train.py`` would, every job of every table's own sweep
(``conf/table/*.yaml``: ``hydra.sweeper.params``), keyed by table, model, split and seed (not by
its overrides, which a change to how a table sweeps may rename), and every experiment preset, every
``task=X model=Y`` pair and the main job, keyed by their overrides; each resolved. ``compare``
prints every key whose resolved value differs, and how many configs differ. Run ``dump`` with
each checkout's own ``src`` on ``PYTHONPATH``.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any


def dump(checkout: Path, out: Path) -> None:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict

    from treernn.lifecycle.resolvers import register_resolvers

    register_resolvers()
    conf = checkout.resolve() / "conf"

    def composed(overrides: list[str]):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        return cfg

    def resolved(cfg) -> dict[str, Any]:
        with open_dict(cfg):
            del cfg["hydra"]
            cfg.paths.output_dir, cfg.paths.log_dir = "/tmp/run", "/tmp"
        return OmegaConf.to_container(cfg, resolve=True)

    configs: dict[str, Any] = {}
    for table in sorted(p.stem for p in (conf / "table").glob("*.yaml") if p.stem[0] != "_"):
        params = composed([f"table={table}"]).hydra.sweeper.params
        sweep = {key: str(values).split(",") for key, values in params.items()}
        for values in itertools.product(*sweep.values()):
            overrides = [f"table={table}", *(f"{k}={v}" for k, v in zip(sweep, values))]
            config = resolved(composed(overrides))
            split = config["task"]["datamodule"].get("split", "-")
            model, seed = config["model"]["name"], config["seed"]
            configs[f"table={table} model={model} split={split} seed={seed}"] = config
    presets = [f"{p.parent.name}/{p.stem}" for p in (conf / "experiment").glob("*/*.yaml")]
    models = sorted(p.stem for p in (conf / "model").glob("*.yaml"))
    tasks = sorted(p.stem for p in (conf / "task").glob("*.yaml"))
    runs = [[f"experiment={p}"] for p in sorted(presets) if not p.split("/")[1].startswith("_")]
    runs += [[f"task={t}", f"model={m}"] for t in tasks for m in models] + [[]]
    for overrides in runs:
        configs[" ".join(overrides) or "(main job)"] = resolved(composed(overrides))
    out.write_text(json.dumps(configs, indent=1, sort_keys=True))
    print(f"{len(configs)} configs")


def flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(node, dict):
        return {prefix[:-1]: node}
    return {key: value for k, v in node.items() for key, value in flat(v, f"{prefix}{k}.").items()}


def compare(before_path: Path, after_path: Path) -> int:
    before, after = json.loads(before_path.read_text()), json.loads(after_path.read_text())
    for key in sorted(set(before) ^ set(after)):
        print(f"only in {'before' if key in before else 'after'}: {key}")
    differ = 0
    for key in sorted(set(before) & set(after)):
        old, new = flat(before[key]), flat(after[key])
        changed = {
            name: (old.get(name, "<unset>"), new.get(name, "<unset>"))
            for name in sorted(set(old) | set(new))
            if repr(old.get(name, "<unset>")) != repr(new.get(name, "<unset>"))
        }
        if changed:
            differ += 1
            print(f"{key}: {changed}")
    tables = sum(key.startswith("table=") for key in before)
    print(
        f"{len(before)} configs ({tables} table jobs) before, {len(after)} after: {differ} differ"
    )
    return 1 if differ or set(before) != set(after) else 0


if __name__ == "__main__":
    command, first, second = sys.argv[1:4]
    if command == "dump":
        dump(Path(first), Path(second))
    else:
        sys.exit(compare(Path(first), Path(second)))
