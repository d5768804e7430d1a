"""The EWT stand-ins for MSR sentence completion and k-best reranking
(`treernn.evaluation.ewt_standins`) on a handful of real UD English-EWT test sentences, with
the questions and candidate lists worked out by hand from the rules in the module docstring."""

from __future__ import annotations

import pytest

from treernn.data.dependency import DependencyTree
from treernn.evaluation.ewt_standins import (
    StandInOptions,
    build_standins,
    completion_questions,
    read_treebanks,
    rerank_lists,
    standin_metrics,
)
from treernn.evaluation.tree_scoring import read_conll

TEST_FILE = "ud_english_ewt/en_ewt-ud-test.conllu"


@pytest.fixture(scope="module")
def ewt_test(data_dir) -> list[DependencyTree]:
    trees, _ = read_conll(data_dir / TEST_FILE, "skip", True, 100)
    return trees


def by_words(trees: list[DependencyTree], text: str) -> DependencyTree:
    (tree,) = [tree for tree in trees if " ".join(tree.words) == text]
    return tree


# The word statistics of these tests: the first 14 (projective) sentences of the EWT test file,
# two blog posts. The (UPOS, XPOS) pools they give, lower-cased, alphabetic, with counts:
#   (VERB, VBD): morphed, expanded, figured
#   (VERB, VB):  backfire, use, click, view        (put: VBN twice, VB once -> VBN)
#   (ADV, RB):   else 2, actually 2, all, anyways, away, before, full, here, just, now,
#                particularly, there, very, well, yet   (out: RB once, RP once -> ADP/RP, the
#                tie going to the tags that sort first)
#   (NOUN, NN):  search 2, engine 2, post 2, blog, course, maker, money, operating, rush, show,
#                slide, stock, system, thing, ubiquity, way            (e-mail: not alphabetic)
STATISTICS_SENTENCES = 14
HAND = dict(seed=0, min_count=1, neighbours=4, min_length=5)


def test_completion_questions_worked_out_by_hand(ewt_test):
    train = ewt_test[:STATISTICS_SENTENCES]

    def question(text: str):
        found = completion_questions([by_words(ewt_test, text)], train, **HAND)
        return found[0] if found else None

    # "Morphed" is the only content word after the first; its pool (VBD verbs) less the sentence's
    # own words is {expanded, figured}: fewer than 4 distractors, so no question.
    assert question("What if Google Morphed Into GoogleOS ?") is None
    # no content word at all (proper nouns, a preposition, brackets)
    assert question("[ via Microsoft Watch from Mary Jo Foley ]") is None

    # "use" (VB) has only backfire, click, view left once "use" is out: not eligible; "else" (RB,
    # count 2) is the blank. Nearest in log count: actually (2, distance 0), then the count-1
    # adverbs at distance log 2, by spelling: all, anyways, away. Exactly 4 = the distractors.
    else_question = question("Does anybody use it for anything else ?")
    assert else_question.position == 6
    assert set(else_question.candidates) == {"else", "actually", "all", "anyways", "away"}
    assert else_question.candidates[else_question.answer] == "else"

    # "own" (VBP): doubt, read left, not eligible; "course" (NN, count 1) is the blank; the
    # count-1 nouns are nearest (distance 0), by spelling: blog, maker, money, operating.
    course = question("They own blogger , of course .")
    assert course.position == 5
    assert set(course.candidates) == {"course", "blog", "maker", "money", "operating"}
    assert course.candidates[course.answer] == "course"

    # "Click" is first (never the blank); "view" (VB) has backfire, use left: not eligible;
    # "here" (RB, count 1): all, anyways, away, before (count 1, by spelling).
    here = question("Click here To view it .")
    assert here.position == 1
    assert set(here.candidates) == {"here", "all", "anyways", "away", "before"}
    # each candidate tree is the gold tree with one word changed
    trees = here.trees()
    assert [tree.words[1] for tree in trees] == list(here.candidates)
    for tree in trees:
        assert tree.heads == here.tree.heads and tree.words[2:] == here.tree.words[2:]

    # a seed makes the order of the candidates; the question depends on nothing else: the same
    # when asked among other sentences, in another order
    together = completion_questions(list(reversed(ewt_test[:14])), train, **HAND)
    assert {q.sent_id: q.candidates for q in together}[here.sent_id] == here.candidates


def test_rerank_lists_worked_out_by_hand(ewt_test):
    sounds = by_words(ewt_test, "sounds exciting .")  # heads (0, 1, 1)
    nice = by_words(ewt_test, "nice sarcasm .")  # heads (2, 0, 2)
    wtf = by_words(ewt_test, "Wtf is this ?")  # heads (0, 1, 1, 1)
    assert (sounds.heads, nice.heads, wtf.heads) == ((0, 1, 1), (2, 0, 2), (0, 1, 1, 1))

    # "sounds exciting .": the root stays; word 2 -> {1, 3}, word 3 -> {1, 2}; (0, 3, 2) is a
    # cycle, so the gold tree and exactly two others: (0, 1, 2) and (0, 3, 1).
    # "nice sarcasm .": every other tree has the arc 1-3 over the root (2): not projective, so
    # the sentence has one candidate and is left out.
    groups, gold = rerank_lists([sounds, nice], k=3, changes=2, max_distance=1)
    assert gold == [sounds]
    assert {tree.heads for tree in groups[0]} == {(0, 1, 1), (0, 1, 2), (0, 3, 1)}
    # k=4 asks for more trees than "sounds exciting ." has: no list at all
    assert rerank_lists([sounds, nice], k=4, changes=2, max_distance=1) == ([], [])

    # "Wtf is this ?" with max_distance=1: word 2 -> 3, word 3 -> {2, 4}, word 4 -> 3, at most 2
    # of them: one change gives (0,3,1,1), (0,1,2,1), (0,1,4,1), (0,1,1,3); two give
    # (0,3,4,1), (0,3,1,3), (0,1,2,3) ((0,3,2,1) and (0,1,4,3) are cycles). Without the limit,
    # word 4 could also attach to 2, e.g. (0,1,1,2), a tree never made here.
    reachable = {
        (0, 3, 1, 1), (0, 1, 2, 1), (0, 1, 4, 1), (0, 1, 1, 3),
        (0, 3, 4, 1), (0, 3, 1, 3), (0, 1, 2, 3),
    }  # fmt: skip
    groups, gold = rerank_lists([wtf], k=4, changes=2, max_distance=1)
    heads = [tree.heads for tree in groups[0]]
    assert gold == [wtf] and len(set(heads)) == 4 and wtf.heads in heads
    assert set(heads) - {wtf.heads} <= reachable
    # candidates keep the words and the gold labels, and each knows its sentence
    for tree in groups[0]:
        assert tree.words == wtf.words and tree.labels == wtf.labels
        assert tree.metadata["sent_id"] == wtf.metadata["sent_id"]
    # seeded by sentence id: the same list wherever the sentence comes in the file
    again, _ = rerank_lists([sounds, nice, wtf], k=4, changes=2, max_distance=1)
    assert [tree.heads for tree in again[0]] == heads


def test_build_standins_from_the_files_and_metric_keys(data_dir):
    train, test = read_treebanks(data_dir, TEST_FILE, TEST_FILE)
    questions, (groups, gold) = build_standins(train, test, StandInOptions(max_sentences=5))
    assert len(questions) == 5 and len(groups) == len(gold) == 5
    assert all(len(group) == 4 for group in groups)
    assert standin_metrics({"all": 40.0}, None) == {"test/completion_acc": 40.0}
    reranking = {"uas": 90.0, "las": 89.0, "first_uas": 80.0, "oracle_uas": 100.0}
    assert standin_metrics(None, reranking, prefix="val") == {
        "val/rerank_uas": 90.0,
        "val/rerank_las": 89.0,
        "val/rerank_first_uas": 80.0,
        "val/rerank_oracle_uas": 100.0,
    }
