"""SST reading (trees, phrases, SST-2 / SST-5 labels) and GloVe loading with its checks."""

from __future__ import annotations

import gzip
import zipfile
from pathlib import Path

import pytest
import torch

from treernn.data.classification import DataFormatError
from treernn.data.embeddings import EmbeddingFormatError, load_vectors
from treernn.data.sst import SSTDataModule, parse_sentiment_tree
from treernn.data.vocab import Vocabulary

TRAIN = [
    "(3 (2 The) (4 (3 good) (2 Film)))",
    "(1 (2 a) (0 bad))",
    "(2 (2 so) (2 so))",
]
DEV = ["(4 (3 good) (4 fun))", "(2 (2 meh) (2 film))"]
TEST = ["(0 (0 awful) (2 plot))"]


def write_sst(root: Path) -> Path:
    folder = root / "sst" / "trees"
    folder.mkdir(parents=True)
    for name, lines in (("train", TRAIN), ("dev", DEV), ("test", TEST)):
        (folder / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_parse_sentiment_tree_hand_case():
    tree = parse_sentiment_tree("(3 (2 The) (4 (3 good) (2 Film)))")
    assert tree.words == ["The", "good", "Film"]
    assert tree.tree == (0, (1, 2)) and tree.label == 3
    spans = [(start, end, label) for start, end, label, _ in tree.nodes]
    assert spans == [(0, 3, 3), (0, 1, 2), (1, 3, 4), (1, 2, 3), (2, 3, 2)]
    assert tree.nodes[2][3] == (1, 2)  # the node's own tree, absolute positions
    for bad in ("(3 (2 The)", "(3 (2 The)))", "(7 word)", "word", "(3 (2 a)) (2 b)"):
        with pytest.raises(ValueError):
            parse_sentiment_tree(bad)


def test_sst2_phrases_drop_neutral_and_map_labels(tmp_path):
    module = SSTDataModule(
        write_sst(tmp_path),
        num_classes=2,
        train_subtrees=True,
        download=False,
        verify_checksums=False,
    )
    module.setup()
    train = module.splits["train"]
    # sentence 1: root 3 -> pos, "The" 2 dropped, (good Film) 4 -> pos, good 3 -> pos, Film dropped
    # sentence 2: root 1 -> neg, "a" dropped, bad 0 -> neg; sentence 3: all neutral
    assert [example.label for example in train] == [1, 1, 1, 0, 0]
    words = [module.vocab.decode(example.sentences[0].token_ids) for example in train]
    assert words == [["the", "good", "film"], ["good", "film"], ["good"], ["a", "bad"], ["bad"]]
    assert [example.sentences[0].tree for example in train] == [(0, (1, 2)), (0, 1), 0, (0, 1), 0]
    assert len(module.splits["val"]) == 1 and len(module.splits["test"]) == 1
    kwargs = module.task_kwargs()
    assert kwargs["num_classes"] == 2 and "pretrained_embeddings" not in kwargs
    batch = next(iter(module.val_dataloader()))
    assert batch.labels.tolist() == [1] and batch.tokens.shape == (1, 2)
    assert module.vocab.decode(batch.tokens[0].tolist()) == ["good", "<unk>"]  # "fun": not trained


def test_sst5_sentences_only(tmp_path):
    module = SSTDataModule(
        write_sst(tmp_path),
        num_classes=5,
        train_subtrees=False,
        download=False,
        verify_checksums=False,
    )
    module.setup()
    assert [example.label for example in module.splits["train"]] == [3, 1, 2]
    assert [example.label for example in module.splits["val"]] == [4, 2]
    assert module.task_kwargs()["label_names"][0] == "very negative"


def test_malformed_sst_line_names_file_and_line(tmp_path):
    root = write_sst(tmp_path)
    (root / "sst" / "trees" / "train.txt").write_text("(3 (2 a) (2 b))\n(3 (2 oops)\n")
    with pytest.raises(DataFormatError, match=r"train.txt:2: not an SST tree"):
        SSTDataModule(root, download=False, verify_checksums=False).setup()


def test_missing_files_say_where_to_put_them(tmp_path, monkeypatch):
    monkeypatch.setenv("TREERNN_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(FileNotFoundError, match="trainDevTestTrees_PTB.zip"):
        SSTDataModule(tmp_path, download=False, verify_checksums=False).prepare_data()


# ----------------------------------------------------------------------------- GloVe
GLOVE = "the 0.1 0.2 0.3\ngood 1 2 3\nFun 4 5 6\nfun 7 8 9\n. . . 0.5 0.5 0.5\n"


def test_load_vectors_text_gzip_and_zip(tmp_path):
    vocab = Vocabulary(["the", "good", "fun", "film", ". . ."])
    text = tmp_path / "glove.6B.3d.txt"
    text.write_text(GLOVE)
    gz = tmp_path / "glove.txt.gz"
    gz.write_bytes(gzip.compress(GLOVE.encode()))
    archive = tmp_path / "glove.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("glove.6B.3d.txt", GLOVE)
        zipped.writestr("glove.6B.5d.txt", "the 1 2 3 4 5\n")
    for path in (text, gz, archive):
        vectors = load_vectors(path, vocab, dim=3)
        weights = vectors.weights
        assert weights.shape == (len(vocab), 3)
        torch.testing.assert_close(weights[vocab.stoi["good"]], torch.tensor([1.0, 2.0, 3.0]))
        # exact "fun" wins over "Fun"; a word with spaces is read; "film" has no vector -> zeros
        torch.testing.assert_close(weights[vocab.stoi["fun"]], torch.tensor([7.0, 8.0, 9.0]))
        torch.testing.assert_close(weights[vocab.stoi[". . ."]], torch.full((3,), 0.5))
        assert weights[vocab.stoi["film"]].abs().sum() == 0
        assert vectors.found.tolist() == [False, False, True, True, True, False, True]


def test_lowercase_fallback(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("Paris 1 1\n")
    vectors = load_vectors(path, Vocabulary(["paris"]), dim=2)
    assert vectors.found[-1] and vectors.coverage == pytest.approx(1 / 3)


def test_wrong_dimension_and_format_are_reported(tmp_path):
    path = tmp_path / "glove.txt"
    path.write_text(GLOVE)
    with pytest.raises(
        EmbeddingFormatError, match=r"glove.txt:1: 3 values but the embedding size is 300"
    ):
        load_vectors(path, Vocabulary(["the"]), dim=300)
    path.write_text("the 1 2 3\ngood 1 x 3\n")
    with pytest.raises(
        EmbeddingFormatError, match=r"glove.txt:2: a value of 'good' is not a number"
    ):
        load_vectors(path, Vocabulary(["good"]), dim=3)
    with pytest.raises(EmbeddingFormatError, match="glove.840B.300d.zip"):
        load_vectors(tmp_path / "missing.txt", Vocabulary(["good"]), dim=3)


def test_datamodule_with_glove_adds_covered_dev_words_and_checks_size(tmp_path):
    root = write_sst(tmp_path)
    glove = tmp_path / "glove.txt"
    glove.write_text(GLOVE)
    module = SSTDataModule(
        root, glove_path=glove, embedding_size=3, download=False, verify_checksums=False
    )
    module.setup()
    assert "fun" in module.vocab and "meh" not in module.vocab  # dev word with / without vector
    weights = module.task_kwargs()["pretrained_embeddings"]
    assert weights.shape == (len(module.vocab), 3)
    torch.testing.assert_close(weights[module.vocab.stoi["good"]], torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(EmbeddingFormatError, match="embedding size is 300"):
        SSTDataModule(
            root, glove_path=glove, embedding_size=300, download=False, verify_checksums=False
        ).setup()


# ----------------------------------------------------------------------------- real data
def test_real_sst_sentence_counts(data_dir):
    module = SSTDataModule(data_dir, num_classes=2, train_subtrees=False, download=False)
    module.setup()
    # SOURCE.md: SST-2 drops root label 2 -> 6,920 / 872 / 1,821
    assert module.split_sizes() == {"train": 6920, "val": 872, "test": 1821}
