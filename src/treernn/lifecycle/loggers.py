"""The loggers of a run: building them from ``conf/logger/``, wandb's naming and network check,
and the CSV history a resumed run continues (``metrics.csv`` cut back to the resumed step)."""

from __future__ import annotations

import csv
import io
import os
import socket
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import hydra
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.loggers import CSVLogger
from omegaconf import DictConfig, OmegaConf

from treernn.errors import UserError
from treernn.files import atomic_write
from treernn.lifecycle.records import DamagedRecord, read_text

#: how long the wandb server may take to accept a connection before an online run gives up
WANDB_CONNECT_TIMEOUT_S = 5.0


def build_loggers(cfg: DictConfig, wandb_id: str | None) -> list[Any]:
    loggers = []
    for key, node in (cfg.get("logger") or {}).items():
        if "wandb" in key:
            name, config = wandb_naming(cfg, Path(cfg.paths.output_dir))
            node = OmegaConf.create(OmegaConf.to_container(node, resolve=True))
            node = OmegaConf.merge(node, {"name": name, "config": config, "_convert_": "all"})
            if wandb_id:
                node = OmegaConf.merge(node, {"id": wandb_id, "resume": "allow"})
        loggers.append(hydra.utils.instantiate(node))
    return loggers


# ----------------------------------------------------------------------------- metrics.csv
def keep_csv_history(loggers: list[Any], resumed_step: int) -> None:
    """A resumed run appends to its ``metrics.csv``. Lightning's CSV writer deletes an existing
    file when it starts; put the earlier rows back (only those logged up to the checkpoint it
    resumes from: later ones are trained again) and tell the writer their columns, so that it
    appends (and rewrites the header if new columns appear)."""
    for logger in loggers:
        if not isinstance(logger, CSVLogger) or rank_zero_only.rank != 0:
            continue
        path = Path(logger.log_dir) / "metrics.csv"
        if not path.is_file():
            continue
        header, rows = csv_rows_up_to(path, resumed_step)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*exists and is not empty.*")
            writer = logger.experiment  # creating the writer deletes metrics.csv
        write_csv_rows(path, header, rows)
        _continue_csv_writer(writer, header)


def _continue_csv_writer(writer: Any, header: list[str]) -> None:
    """Make Lightning's CSV writer append to the ``metrics.csv`` written back, with ``header``'s
    columns. Lightning (checked against 2.6.6) has no public way to continue a CSV log: its
    ``ExperimentWriter`` keeps the columns it wrote in ``metrics_keys`` (an undocumented attribute)
    and appends to an existing file whose columns it knows. The one place that relies on this."""
    writer.metrics_keys = sorted(header)


def csv_rows_up_to(path: Path, step: int) -> tuple[list[str], list[list[str]]]:
    """The header and rows of a run's ``metrics.csv`` that were logged before the checkpoint of
    training step ``step`` (the step a resume continues from): rows logged later belong to
    training that the resumed run does again, and would appear twice.

    Lightning writes a row logged while ``global_step`` is ``G`` with step ``G - 1`` (a
    validation after update 10 is step 9, an epoch's end after update 32 step 31), and the
    learning-rate row of an epoch that starts at ``G`` with step ``G``; so every row logged
    before a checkpoint of step ``G`` has a step below ``G``, and a row of step ``G`` came after
    it (the next epoch's learning rate after an epoch-end checkpoint; the epoch-end row of an
    epoch ending at ``G + 1`` after a checkpoint in its last batch but one)."""
    reader = csv.reader(io.StringIO(read_text(path), newline=""))
    try:
        header = next(reader, [])
        rows = list(reader)
    except csv.Error as error:
        raise DamagedRecord(path, f"line {reader.line_num}: {error}") from None
    if "step" not in header:
        return header, rows
    column = header.index("step")
    kept = [row for row in rows if not row[column] or float(row[column]) < step]
    return header, kept


def write_csv_rows(path: Path, header: list[str], rows: list[list[str]]) -> None:
    def write(handle: Any) -> None:
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
        handle.write(text.getvalue().encode())

    atomic_write(path, write)


# ----------------------------------------------------------------------------- wandb
def wandb_id(loggers: list[Any]) -> str | None:
    for logger in loggers:
        if type(logger).__name__ == "WandbLogger":
            return logger.experiment.id
    return None


def finish_wandb(loggers: list[Any]) -> None:
    if any(type(logger).__name__ == "WandbLogger" for logger in loggers):
        import wandb

        wandb.finish()


def wandb_online(cfg: DictConfig) -> bool:
    """True when this run would log to a wandb server (``logger.wandb.offline=false`` and no
    ``WANDB_MODE`` that keeps it offline)."""
    node = (cfg.get("logger") or {}).get("wandb")
    if node is None or node.get("offline", False):
        return False
    return os.environ.get("WANDB_MODE", "").lower() not in ("offline", "disabled", "dryrun")


def check_wandb_reachable(cfg: DictConfig) -> None:
    """An online wandb run without a network fails in seconds, naming the offline switch, instead
    of waiting minutes after the data loaded."""
    if not wandb_online(cfg):
        return
    url = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai"))
    host = url.hostname or "api.wandb.ai"
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=WANDB_CONNECT_TIMEOUT_S).close()
    except OSError as error:
        raise UserError(
            f"logger.wandb.offline=false, but the wandb server {host}:{port} cannot be reached "
            f"({error.strerror or error}); log offline with logger.wandb.offline=true (the "
            "default) and upload later with `wandb sync <run dir>/wandb/offline-run-*`"
        ) from None


def wandb_naming(cfg: Any, run_dir: Path) -> tuple[str, dict[str, Any]]:
    """The wandb run name and config of one job: which run directory, seed and overrides.

    Runs are grouped by task and model (``conf/logger/wandb.yaml``); within a group the name says
    what differs: ``<run dir> seed=141 model.dropout=0.3`` (for a sweep's job, ``<sweep>/<job>``).
    """
    overrides: list[str] = []
    try:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            overrides = list(HydraConfig.get().overrides.task)
    except ValueError:
        pass
    shown = [item for item in overrides if not item.startswith(("paths.", "hydra.", "seed="))]
    label = run_dir.name if not run_dir.name.isdigit() else f"{run_dir.parent.name}/{run_dir.name}"
    name = " ".join([label, f"seed={cfg.seed}", *shown])
    config = {"seed": cfg.seed, "overrides": overrides, "run_dir": str(run_dir)}
    return name, config
