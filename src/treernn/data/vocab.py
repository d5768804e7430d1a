"""A token vocabulary: string <-> id, with special tokens first."""

from __future__ import annotations

from collections.abc import Iterable


class Vocabulary:
    """Maps tokens to ids in first-seen order, after the special tokens.

    ``Vocabulary(["a", "b", "a"], specials=("<pad>", "<unk>"))`` gives ids pad=0, unk=1, a=2, b=3.
    Unknown tokens encode to ``<unk>`` when the vocabulary has one, otherwise raise ``KeyError``.
    """

    def __init__(self, tokens: Iterable[str] = (), specials: Iterable[str] = ("<pad>", "<unk>")):
        self.itos: list[str] = []
        self.stoi: dict[str, int] = {}
        for token in specials:
            self.add(token)
        for token in tokens:
            self.add(token)

    def add(self, token: str) -> int:
        index = self.stoi.get(token)
        if index is None:
            index = self.stoi[token] = len(self.itos)
            self.itos.append(token)
        return index

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: str) -> bool:
        return token in self.stoi

    def _special(self, token: str) -> int:
        if token not in self.stoi:
            raise KeyError(f"this vocabulary has no {token!r} token")
        return self.stoi[token]

    @property
    def pad_index(self) -> int:
        return self._special("<pad>")

    @property
    def unk_index(self) -> int:
        return self._special("<unk>")

    @property
    def eos_index(self) -> int:
        return self._special("<eos>")

    def encode(self, tokens: Iterable[str]) -> list[int]:
        unk = self.stoi.get("<unk>")
        if unk is None:
            return [self.stoi[token] for token in tokens]
        return [self.stoi.get(token, unk) for token in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.itos[int(i)] for i in ids]

    def state_dict(self) -> dict:
        return {"itos": list(self.itos)}

    @classmethod
    def from_state_dict(cls, state: dict) -> Vocabulary:
        return cls(state["itos"], specials=())
