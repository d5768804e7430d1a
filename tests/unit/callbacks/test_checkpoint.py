"""treernn's ModelCheckpoint (``BestCheckpoint``) restored in another directory: a sweep job moved
to another machine or worktree keeps its best score and tests its best checkpoint, where
Lightning's own callback forgets the score and names the old directory."""

from __future__ import annotations

import shutil
import warnings
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from treernn.callbacks.checkpoint import BestCheckpoint

#: what check_monitor_top_k asks of the trainer on one device
ONE_DEVICE = SimpleNamespace(
    strategy=SimpleNamespace(reduce_boolean_decision=lambda decision: decision)
)


def _saved_state(old_dir):
    """The state a run's ModelCheckpoint saved in ``old_dir``: best epoch003 at 0.75 val/acc."""
    old_dir.mkdir(parents=True)
    for name in ("epoch003.ckpt", "last.ckpt"):
        (old_dir / name).write_bytes(b"weights")
    callback = ModelCheckpoint(dirpath=old_dir, monitor="val/acc", mode="max", save_top_k=1)
    callback.best_model_score = torch.tensor(0.75)
    callback.best_model_path = str(old_dir / "epoch003.ckpt")
    callback.best_k_models = {callback.best_model_path: torch.tensor(0.75)}
    callback.kth_best_model_path = callback.best_model_path
    callback.kth_value = torch.tensor(0.75)
    callback.last_model_path = str(old_dir / "last.ckpt")
    return callback.state_dict(), callback.state_key


def test_a_job_moved_to_another_directory_keeps_its_best(tmp_path):
    state, lightning_key = _saved_state(tmp_path / "old" / "checkpoints")
    new_dir = tmp_path / "new" / "checkpoints"
    shutil.copytree(tmp_path / "old" / "checkpoints", new_dir)
    shutil.rmtree(tmp_path / "old")  # the old machine's directory is gone
    callback = BestCheckpoint(dirpath=new_dir, monitor="val/acc", mode="max", save_top_k=1)
    # the same state key as Lightning's callback: checkpoints of either restore into the other
    assert callback.state_key == lightning_key
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "dirpath has changed" warning
        callback.load_state_dict(state)
    assert float(callback.best_model_score) == 0.75
    assert callback.best_model_path == str(new_dir / "epoch003.ckpt")
    assert list(callback.best_k_models) == [str(new_dir / "epoch003.ckpt")]
    assert callback.kth_best_model_path == str(new_dir / "epoch003.ckpt")
    assert callback.last_model_path == str(new_dir / "last.ckpt")
    # a later validation worse than the best before the move does not replace it
    assert not callback.check_monitor_top_k(ONE_DEVICE, torch.tensor(0.70))
    assert callback.check_monitor_top_k(ONE_DEVICE, torch.tensor(0.80))


def test_lightnings_own_callback_forgets_the_best_when_moved(tmp_path):
    """What BestCheckpoint is for (Lightning 2.6): the score is dropped, the path names the old
    directory; if this starts to fail, Lightning keeps the state itself."""
    state, _ = _saved_state(tmp_path / "old" / "checkpoints")
    callback = ModelCheckpoint(dirpath=tmp_path / "new", monitor="val/acc", mode="max")
    with pytest.warns(UserWarning, match="dirpath has changed"):
        callback.load_state_dict(state)
    assert callback.best_model_score is None
    assert callback.best_model_path == str(tmp_path / "old" / "checkpoints" / "epoch003.ckpt")


@pytest.mark.parametrize("moved", [True, False])
def test_a_best_file_the_directory_lacks_is_forgotten_with_a_warning(tmp_path, moved):
    """A copy that kept only the newest checkpoint: the best score is dropped (the next
    validation writes a best file again) instead of testing a file that is not there."""
    old_dir = tmp_path / "old" / "checkpoints"
    state, _ = _saved_state(old_dir)
    new_dir = tmp_path / "new" / "checkpoints" if moved else old_dir
    new_dir.mkdir(parents=True, exist_ok=True)
    (old_dir / "epoch003.ckpt").unlink()
    callback = BestCheckpoint(dirpath=new_dir, monitor="val/acc", mode="max", save_top_k=1)
    with pytest.warns(
        UserWarning, match="best checkpoint .*epoch003.ckpt .*score 0.75.* is not in"
    ):
        callback.load_state_dict(state)
    assert callback.best_model_score is None
    assert callback.best_model_path == ""
    assert callback.best_k_models == {}
    assert callback.check_monitor_top_k(ONE_DEVICE, torch.tensor(0.10))
