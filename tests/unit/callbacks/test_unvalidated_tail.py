"""Updates after the last validation are named: a budget in steps that ends between validations
(trainer.max_steps=7, validation every 3) leaves 1 update the best-checkpoint test never sees;
one that ends on a validation, or a run that never validated, leaves nothing to say. The step of
the last validation travels in the checkpoint."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import pytest
from lightning.pytorch.demos.boring_classes import BoringModel

from treernn.callbacks.unvalidated_tail import UnvalidatedTail


def fit(tmp_path: Path, tail: UnvalidatedTail, ckpt_path: str | None = None, **kwargs):
    settings = dict(
        max_epochs=1,
        limit_train_batches=20,
        limit_val_batches=1,
        num_sanity_val_steps=1,
        val_check_interval=3,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer = pl.Trainer(callbacks=[tail], **{**settings, **kwargs})
    trainer.fit(BoringModel(), ckpt_path=ckpt_path)
    return trainer


def test_steps_after_the_last_validation_are_named(tmp_path: Path):
    tail = UnvalidatedTail()
    trainer = fit(tmp_path, tail, max_steps=7)
    assert trainer.global_step == 7 and tail.validated_step == 6  # validations at 3 and 6
    message = tail.message(trainer.global_step)
    assert message is not None
    assert "step 7, 1 update after the last validation (step 6)" in message
    assert "trainer.max_steps a multiple of trainer.val_check_interval" in message


@pytest.mark.parametrize("max_steps", [6, 9])
def test_a_budget_that_ends_on_a_validation_says_nothing(tmp_path: Path, max_steps: int):
    tail = UnvalidatedTail()
    trainer = fit(tmp_path, tail, max_steps=max_steps)
    assert tail.validated_step == max_steps and tail.message(trainer.global_step) is None


def test_the_sanity_check_is_not_a_validation(tmp_path: Path):
    """num_sanity_val_steps runs validation at step 0; training that never validated after it
    has nothing untested (the test takes the final weights)."""
    tail = UnvalidatedTail()
    trainer = fit(tmp_path, tail, max_steps=2)
    assert tail.validated_step is None and tail.message(trainer.global_step) is None


def test_a_resumed_run_knows_its_last_validation(tmp_path: Path):
    first = fit(tmp_path, UnvalidatedTail(), max_steps=4)
    checkpoint = tmp_path / "at4.ckpt"
    first.save_checkpoint(checkpoint)
    tail = UnvalidatedTail()
    # resumed for one more update, before any new validation: the last one was at step 3
    trainer = fit(tmp_path, tail, ckpt_path=str(checkpoint), max_steps=5, max_epochs=2)
    assert tail.validated_step == 3
    message = tail.message(trainer.global_step)
    assert "step 5, 2 updates after the last validation (step 3)" in message
