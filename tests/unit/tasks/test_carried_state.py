"""A language model's carried state of any shape an encoder returns (tensors, lists or tuples of
them, a dataclass such as Ordered Memory's): detached between segments, its batch size read, and
saved in a checkpoint that ``torch.load(weights_only=True)`` reads (Lightning tests that way)."""

from __future__ import annotations

import io

import pytest
import torch

from treernn.encoders.ordered_memory import OrderedMemoryState
from treernn.errors import CheckpointError
from treernn.tasks.language_model import (
    detach_state,
    portable_state,
    restored_state,
    state_batch_size,
)


def memory_state(batch: int = 3) -> OrderedMemoryState:
    return OrderedMemoryState(
        cumulative_pointer=torch.rand(batch, 4, requires_grad=True),
        memory=torch.rand(batch, 4, 5),
        candidate=torch.rand(batch, 4, 5),
        tokens_seen=torch.full((batch,), 6),
    )


def test_a_dataclass_state_is_detached_field_by_field():
    state = memory_state()
    detached = detach_state(state)
    assert isinstance(detached, OrderedMemoryState)
    assert not detached.cumulative_pointer.requires_grad
    assert torch.equal(detached.memory, state.memory)
    assert state_batch_size(state) == 3
    assert state_batch_size([(torch.zeros(2, 4), torch.zeros(2, 4))]) == 2


def test_every_kind_of_state_survives_a_weights_only_checkpoint():
    for state in (memory_state(), [(torch.rand(2, 3), torch.rand(2, 3))], torch.rand(2, 3), None):
        buffer = io.BytesIO()
        torch.save({"carried_state": portable_state(detach_state(state))}, buffer)
        buffer.seek(0)
        loaded = restored_state(torch.load(buffer, weights_only=True)["carried_state"])
        assert type(loaded) is type(state)
        if isinstance(state, OrderedMemoryState):
            assert torch.equal(loaded.memory, state.memory)
            assert torch.equal(loaded.tokens_seen, state.tokens_seen)


def test_a_carried_state_naming_another_class_builds_nothing(tmp_path):
    victim = tmp_path / "ran"
    hostile = {"dataclass": "subprocess:Popen", "fields": {"args": ["touch", str(victim)]}}
    with pytest.raises(CheckpointError, match="not a class of treernn"):
        restored_state(hostile)
    trusted_but_not_a_dataclass = {"dataclass": "treernn.data.vocab:Vocabulary", "fields": {}}
    with pytest.raises(CheckpointError, match="not one; refused"):
        restored_state(trusted_but_not_a_dataclass)
    assert not victim.exists()
