"""SyntaxGym test suites as data: the 34 suites of Hu et al. (2020) and any suite in the
``syntaxgym`` package's JSON format (or the CSV layout of the same suites), read and checked
before anything is scored. Nothing in a suite runs: formulas are parsed by
`treernn.data.syntaxgym_formula`.

A suite (JSON): ``meta`` (``name``; ``metric``: how a region's token surprisals combine,
`METRICS`), ``region_meta`` (region number -> name), ``predictions`` (``{"type": "formula",
"formula": ...}``) and ``items``, each with ``item_number`` and ``conditions``, each a
``condition_name`` and its ``regions`` (``region_number``, ``content``; a region may be empty).
The CSV layout (``test_suites/csv/`` of Hu et al.'s repository) has one row per region,
``item_number,condition_name,region_number,region_name,content``, and no predictions: they are
given with it (`read_suite_csv`).

A condition's sentence is its regions' contents, each stripped of the spaces at its start, the
empty ones left out, joined by one space (`Condition.sentence`), as the package writes a suite's
sentences. What a suite may not hold (each is one `SuiteError` naming the file, and the item,
condition or prediction): a metric outside `METRICS`, a formula that does not parse, a region
or condition a formula names that the suite lacks, a condition that lacks a region of
``region_meta`` or has one twice, items whose conditions differ, two items with one number.

The published files (`SUITE_FILES`, `HU2020_FILES`) are found under ``<data dir>/syntaxgym/``
(``TREERNN_DATA_DIR``), else in the download cache, else downloaded from their canonical URLs
(Hu et al.'s repository at a fixed commit) and checked against their sha256 (`suite_files`,
`hu2020_files`).
"""

from __future__ import annotations

import csv
import io
import json
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from treernn.data.download import RemoteFile, resolve_data_file
from treernn.data.syntaxgym_formula import (
    Expression,
    FormulaError,
    RegionValue,
    parse_formula,
    references,
)
from treernn.errors import DataError
from treernn.files import MB, RefusedFile, decode_input_text, read_limited

DATASET = "syntaxgym"
#: how a region's token surprisals combine into its value (the package's ``METRICS``); ``sum``
#: of no token is 0, the others of no token are not a number
METRICS = ("sum", "mean", "median", "max", "min", "range")
#: the most a suite file may hold (the published ones are under 250 KiB)
SUITE_LIMIT = 64 * MB
CSV_COLUMNS = ("item_number", "condition_name", "region_number", "region_name", "content")


class SuiteError(DataError, ValueError):
    """A suite that cannot be read or makes no sense; the message names the file and where."""


# ----------------------------------------------------------------------------- the suite
@dataclass(frozen=True)
class Region:
    number: int
    content: str


@dataclass(frozen=True)
class Condition:
    name: str
    regions: tuple[Region, ...]

    @property
    def sentence(self) -> str:
        """The regions' contents as the package joins them (module docstring)."""
        return " ".join(
            region.content.lstrip() for region in self.regions if region.content.strip()
        )


@dataclass(frozen=True)
class Item:
    number: int
    conditions: tuple[Condition, ...]


@dataclass(frozen=True)
class Prediction:
    """One prediction: its formula as written and as parsed, and the ``(condition, region)``
    pairs it reads (``*`` stands for every region of its condition)."""

    index: int
    formula: str
    expression: Expression = field(compare=False)
    critical: frozenset[tuple[str, int]] = frozenset()


@dataclass(frozen=True)
class Suite:
    name: str
    metric: str
    region_names: dict[int, str]
    predictions: tuple[Prediction, ...]
    items: tuple[Item, ...]
    source: str = ""

    @property
    def conditions(self) -> list[str]:
        return [condition.name for condition in self.items[0].conditions]

    @property
    def critical(self) -> frozenset[tuple[str, int]]:
        """The ``(condition, region)`` pairs some prediction reads."""
        return frozenset().union(*(prediction.critical for prediction in self.predictions))

    def sentences(self) -> list[str]:
        """Every condition's sentence, item by item, in the suite's order (the sentence file the
        package hands a model)."""
        return [condition.sentence for item in self.items for condition in item.conditions]


# ----------------------------------------------------------------------------- reading
def read_suite(path: str | Path) -> Suite:
    """A suite from a SyntaxGym JSON file (module docstring); one `SuiteError` for a file that
    is missing, not JSON, or not a sound suite."""
    path = Path(path)
    text = _read(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise SuiteError(
            f"suite {path}: not valid JSON ({error.msg}, line {error.lineno} column "
            f"{error.colno}); give a SyntaxGym suite (.json)"
        ) from None
    except RecursionError:
        raise SuiteError(f"suite {path}: nested too deeply to be a SyntaxGym suite") from None
    return suite_from_dict(data, str(path), default_name=path.stem)


def read_suite_csv(
    path: str | Path,
    formulas: Sequence[str],
    metric: str = "sum",
    name: str | None = None,
) -> Suite:
    """A suite from the CSV layout (module docstring), with its predictions' ``formulas`` and
    ``metric`` given (the layout holds neither); ``name`` defaults to the file's stem."""
    path = Path(path)
    rows = list(csv.reader(io.StringIO(_read(path), newline="")))
    if not rows or tuple(cell.strip() for cell in rows[0]) != CSV_COLUMNS:
        raise SuiteError(
            f"suite {path}: the first line must be the header {','.join(CSV_COLUMNS)} "
            "(the CSV layout of Hu et al.'s suites)"
        )
    items: dict[str, dict[str, list[dict[str, Any]]]] = {}
    region_meta: dict[str, str] = {}
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(CSV_COLUMNS):
            raise SuiteError(
                f"suite {path}:{line}: {len(row)} fields, {len(CSV_COLUMNS)} expected "
                f"({','.join(CSV_COLUMNS)})"
            )
        item, condition, region, region_name, content = row
        for what, value in (("item_number", item), ("region_number", region)):
            if not value.strip().isdigit():
                raise SuiteError(f"suite {path}:{line}: {what} {value!r} is not a number")
        region_meta.setdefault(str(int(region)), region_name)
        regions = items.setdefault(item.strip(), {}).setdefault(condition, [])
        regions.append({"region_number": int(region), "content": content})
    data = {
        "meta": {"name": name or path.stem, "metric": metric},
        "region_meta": region_meta,
        "predictions": [{"type": "formula", "formula": formula} for formula in formulas],
        "items": [
            {
                "item_number": int(item),
                "conditions": [
                    {"condition_name": condition, "regions": regions}
                    for condition, regions in conditions.items()
                ],
            }
            for item, conditions in items.items()
        ],
    }
    return suite_from_dict(data, str(path), default_name=path.stem)


def _read(path: Path) -> str:
    try:
        data = read_limited(path, SUITE_LIMIT, follow_links=True)
    except FileNotFoundError:
        raise SuiteError(f"suite {path} does not exist: check the path") from None
    except PermissionError:
        raise SuiteError(f"suite {path} cannot be read (permission denied)") from None
    except RefusedFile as refused:
        raise SuiteError(f"suite {path} {refused.what}; give a suite file") from None
    return decode_input_text(data, f"suite {path}")


def _get(node: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(node, dict):
        raise SuiteError(f"{where}: a JSON object was expected, not {_kind(node)}")
    if key not in node:
        raise SuiteError(f"{where}: no {key!r}")
    value = node[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # a JSON true is not a number here
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise SuiteError(f"{where}: {key!r} is {_kind(value)}, not {_kind_name(kinds)}")
    return value


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return names.get(type(value), "a number")


def _kind_name(kinds: tuple[type, ...]) -> str:
    names = {dict: "an object", list: "a list", str: "a string", int: "an integer"}
    return " or ".join(names.get(kind, kind.__name__) for kind in kinds)


def suite_from_dict(data: Any, source: str = "<suite>", default_name: str = "suite") -> Suite:
    """A suite from its JSON structure, checked (module docstring); ``source`` names it in
    messages."""
    where = f"suite {source}"
    meta = _get(data, "meta", dict, where)
    name = meta.get("name", default_name)
    if not isinstance(name, str) or not name.strip():
        raise SuiteError(f"{where}: meta.name must be a non-empty string")
    metric = _get(meta, "metric", str, f"{where} meta")
    if metric not in METRICS:
        raise SuiteError(
            f"{where}: unknown metric {metric!r} in meta.metric; use one of {', '.join(METRICS)}"
        )
    region_meta = _get(data, "region_meta", dict, where)
    region_names: dict[int, str] = {}
    for number, region_name in region_meta.items():
        if not str(number).isdigit():
            raise SuiteError(f"{where}: region_meta key {number!r} is not a region number")
        region_names[int(number)] = str(region_name)
    items = _items(_get(data, "items", list, where), set(region_names), where)
    conditions = {condition.name for condition in items[0].conditions}
    predictions = []
    for index, entry in enumerate(_get(data, "predictions", list, where)):
        place = f"{where}, prediction {index + 1}"
        if _get(entry, "type", str, place) != "formula":
            raise SuiteError(f"{place}: type {entry['type']!r}; only 'formula' is known")
        formula = _get(entry, "formula", str, place)
        try:
            expression = parse_formula(formula)
        except FormulaError as error:
            raise SuiteError(f"{place}: formula {formula.strip()!r}: {error}") from None
        predictions.append(
            Prediction(
                index, formula, expression, _critical(expression, region_names, conditions, place)
            )
        )
    if not predictions:
        raise SuiteError(f"{where}: no predictions; a suite states at least one")
    return Suite(name, metric, region_names, tuple(predictions), items, source)


def _items(entries: list[Any], region_numbers: set[int], where: str) -> tuple[Item, ...]:
    if not entries:
        raise SuiteError(f"{where}: no items")
    items: list[Item] = []
    seen: set[int] = set()
    first_conditions: list[str] | None = None
    for position, entry in enumerate(entries, start=1):
        number = _get(entry, "item_number", int, f"{where}, item {position}")
        place = f"{where}, item {number}"
        if number in seen:
            raise SuiteError(f"{place}: a second item with this number")
        seen.add(number)
        conditions = []
        for condition_entry in _get(entry, "conditions", list, place):
            condition_name = _get(condition_entry, "condition_name", str, place)
            condition_place = f"{place}, condition {condition_name}"
            regions = []
            for region_entry in _get(condition_entry, "regions", list, condition_place):
                regions.append(
                    Region(
                        _get(region_entry, "region_number", int, condition_place),
                        _get(region_entry, "content", str, condition_place),
                    )
                )
            numbers = [region.number for region in regions]
            duplicated = sorted({n for n in numbers if numbers.count(n) > 1})
            if duplicated:
                raise SuiteError(f"{condition_place}: region {duplicated[0]} appears twice")
            missing = sorted(region_numbers - set(numbers))
            if missing:
                raise SuiteError(
                    f"{condition_place}: region {missing[0]} of region_meta is missing "
                    '(every condition has every region; an empty one has content "")'
                )
            unknown = sorted(set(numbers) - region_numbers)
            if unknown:
                raise SuiteError(f"{condition_place}: region {unknown[0]} is not in region_meta")
            conditions.append(Condition(condition_name, tuple(regions)))
        names = [condition.name for condition in conditions]
        if not names:
            raise SuiteError(f"{place}: no conditions")
        if len(set(names)) != len(names):
            raise SuiteError(f"{place}: a condition appears twice")
        if first_conditions is None:
            first_conditions = names
        elif set(names) != set(first_conditions):
            raise SuiteError(
                f"{place}: conditions {', '.join(sorted(names))} differ from the first item's "
                f"({', '.join(sorted(first_conditions))})"
            )
        items.append(Item(number, tuple(conditions)))
    return tuple(items)


def _critical(
    expression: Expression, region_names: dict[int, str], conditions: set[str], place: str
) -> frozenset[tuple[str, int]]:
    found: set[tuple[str, int]] = set()
    for reference in references(expression):
        if reference.condition not in conditions:
            raise SuiteError(
                f"{place}: {reference} names condition {reference.condition!r}, which the suite "
                f"does not have ({', '.join(sorted(conditions))})"
            )
        found |= _regions_of(reference, region_names, place)
    return frozenset(found)


def _regions_of(
    reference: RegionValue, region_names: dict[int, str], place: str
) -> set[tuple[str, int]]:
    if reference.region is None:
        return {(reference.condition, number) for number in region_names}
    if reference.region not in region_names:
        raise SuiteError(
            f"{place}: {reference} names region {reference.region}, which the suite does not "
            f"have (regions {', '.join(map(str, sorted(region_names)))})"
        )
    return {(reference.condition, reference.region)}


# ----------------------------------------------------------------------------- Hu et al.'s scores
#: Hu et al.'s circuits (their notebooks/main.py): a suite's tag (its name up to the first
#: ``-``, ``_`` or digit) -> circuit
CIRCUITS = {
    "Licensing": ("npi", "reflexive"),
    "Long-Distance Dependencies": ("fgd", "cleft"),
    "Agreement": ("number",),
    "Garden-Path Effects": ("npz", "mvrr"),
    "Gross Syntactic State": ("subordination",),
    "Center Embedding": ("center",),
}
#: each circuit's name in metric keys and table columns
CIRCUIT_KEYS = {
    "Licensing": "licensing",
    "Long-Distance Dependencies": "long_distance",
    "Agreement": "agreement",
    "Garden-Path Effects": "garden_path",
    "Gross Syntactic State": "gross_syntactic_state",
    "Center Embedding": "center_embedding",
}
#: the suites Hu et al.'s analysis leaves out of every score (their ``exclude_suite_re``): of the
#: 34, fgd-embed3, fgd-embed4 and nn-nv-rpl, which leaves 31 suites and 799 items
EXCLUDED = re.compile(r"^fgd-embed[34]|^gardenpath|^nn-nv")


def circuit_of(suite: str) -> str | None:
    """The circuit of a suite by its name's tag (`CIRCUITS`), None for a tag of none."""
    tag = re.split(r"[-_0-9]", suite)[0]
    return next((name for name, tags in CIRCUITS.items() if tag in tags), None)


def in_sg_score(suite: str) -> bool:
    """Whether Hu et al.'s SG score counts the suite (`EXCLUDED`)."""
    return EXCLUDED.search(suite) is None


def sg_score(accuracies: Mapping[str, float]) -> float | None:
    """Hu et al.'s SG score: the mean of the suites' accuracies (fractions), the `EXCLUDED`
    suites left out; None when no suite is left."""
    counted = [value for suite, value in accuracies.items() if in_sg_score(suite)]
    return statistics.fmean(counted) if counted else None


def circuit_scores(accuracies: Mapping[str, float]) -> dict[str, float]:
    """The mean accuracy of each circuit's suites (the `EXCLUDED` ones left out, as Hu et al.
    leave them out before grouping), by circuit name, in `CIRCUITS`' order; a circuit with no
    suite is absent."""
    by_circuit: dict[str, list[float]] = {}
    for suite, value in accuracies.items():
        circuit = circuit_of(suite)
        if circuit is not None and in_sg_score(suite):
            by_circuit.setdefault(circuit, []).append(value)
    return {
        circuit: statistics.fmean(by_circuit[circuit])
        for circuit in CIRCUITS
        if circuit in by_circuit
    }


def model_label(name: Any, dataset: Any = None, seed: Any = None) -> str:
    """A model's name in Hu et al.'s ``model`` column, ``<name>_<corpus>_<seed>``: their
    analysis splits it at ``_``, so each part has its ``_`` written ``-``."""
    parts = [str(part).replace("_", "-") for part in (name, dataset, seed) if part is not None]
    return "_".join(parts) or "model"


# ----------------------------------------------------------------------------- Hu et al.'s files
#: Hu et al. (2020)'s repository at the commit the shared copy was taken from (SOURCE.md)
BASE_URL = (
    "https://raw.githubusercontent.com/cpllab/syntactic-generalization/"
    "43f1f86b746254406dafc89bd17b9d4976607ef6/"
)
#: the 34 suites: name -> sha256 (``test_suites/json/<name>.json``)
SUITE_SHA256 = {
    "center_embed": "cc8b60e34eff4ec723a295d0378af07cceaf9bdccddd5a9508a1284e40d3390c",
    "center_embed_mod": "9688aebd2c4a8ff68ca25873fb9039304e3c70996488b74ffb69681dd236e8d7",
    "cleft": "b6e19bedec743fc8af079638d145e4af224efa4d671e403d2d7ff4a395d10713",
    "cleft_modifier": "d9823123e538ea8d3150c7f584881e1e7137339e9a136077d033c7cd5ae4f2a3",
    "fgd-embed3": "35db2d0535f2b4f896157149b3aa625e5fd08694480b4978fcc31a34156462ba",
    "fgd-embed4": "6933e47b9bc5e0635412bfa3dc89d44b34889e73f780f615ba6575dd069ab20b",
    "fgd_hierarchy": "ed5ddf73c04fc0bf577f6fcd4aef62b660b01c4fecb5b69216b1164128924693",
    "fgd_object": "64045162cd8158f07bcf9efc9b2ba9ad60324009f71bae8d58bb9a841e72eee5",
    "fgd_pp": "8baa56588f01f9807d465d910159ad0c89829a211088de88d8a9d2cb4df574ff",
    "fgd_subject": "bb641e69be1e4ad4d4077ceeb5fd86c87fcd1df69795b8654702bf7746386746",
    "mvrr": "5201adc7f9019caffc0bc54ca2d71db601f187d5a0dce55df0e90fd5592b2581",
    "mvrr_mod": "e6f7cea18cd1b5d22faaae0f2f9a08fecab53665dfc2926fabb1c6841637d2d2",
    "nn-nv-rpl": "7b06181fe8aa7cc6d3c3a224485b3023be2be638ca2ae16ef2dc1ee2c74d4dec",
    "npi_orc_any": "96f6bd4ab779633f4837132d2a17d89568e46b154a7052636da208ac360f7685",
    "npi_orc_ever": "7c69bb7c2d01df8107a650703ab12dfb900a09afb2d8e9c54da8ac82eaefd99d",
    "npi_src_any": "3ce002cc8a88beb0012dba511fff56edb60c58b5934275dbf4f8d36274505f75",
    "npi_src_ever": "cd7735f62dc7a301e0c48c825fb93b1824add388c7337954971f7da4bc2523f2",
    "npz_ambig": "2b46dd51f5985e62527e59e7f536656e28f462e33de9e3459cd635f73d5ca5e3",
    "npz_ambig_mod": "3cac79834de52d9cc4ff9b3ab0c8c8160cd9d602f1be2e503b6b622a4a2a582a",
    "npz_obj": "6852eddee888fce984dbe7734f90bfccd185e8b4d11affb8141434d5362b5cb6",
    "npz_obj_mod": "2c7d32dbf0167750510b6d7c30788665537210246024b30d9aa6545228ecb3bc",
    "number_orc": "b5c96cb8ed8306cc2c90f3bb65a4ba1c4d27c004bdb34855bfc7ec2973c934ac",
    "number_prep": "5c6a54fa244df2962b0700a2a6d6e03b8c0db8a1482cccfe64d16d01f8b3eeca",
    "number_src": "8c3a1db336d275fe7d10dac418450f83fc40c5456e94beb3a547ce314753f6df",
    "reflexive_orc_fem": "d18ce6a3a970b1356721ed8415e400b89020b5e0d76a3017d6be28689404b7b7",
    "reflexive_orc_masc": "03d31c93a4225e94decf38fe0c28cd01e869da2f209ae1ef7fb1d5c310323e7c",
    "reflexive_prep_fem": "e192369294f0780b1133349ec3d9a75532b0bce310ae50ddab9b2e2d394137e9",
    "reflexive_prep_masc": "81934e17431b72a553ab3a501471cb0b0eaa101ca7f78799abc48905a21f16ca",
    "reflexive_src_fem": "4e821bfd260762d996a72989fa350e64802e4f22e2188c0d5f58abcce2160a58",
    "reflexive_src_masc": "645ef6786dc63433c407de9d0085233df3b212579bef7b04f6e20493d37ec312",
    "subordination": "065fc960d7346cd96f152c389c36816bf330b415661319e7dc6022ff610855b4",
    "subordination_orc-orc": "91232f6eb5247b5fdccb399af642eb86411e099db2ba91b45b434401326a3497",
    "subordination_pp-pp": "e9eb380ba720048c4b6a503c23ccef2680db55bdd4093b41afb0d281ae0bb912",
    "subordination_src-src": "f0b84b08402fbde49b9e2ae07db0a3e663ff149a4dcffc4c8c931ef8bbc843a5",
}
SUITE_FILES = {
    name: RemoteFile(f"suites/{name}.json", f"{BASE_URL}test_suites/json/{name}.json", sha256)
    for name, sha256 in SUITE_SHA256.items()
}
#: Hu et al.'s per-item results and perplexities (``data/raw/``): file name -> sha256
HU2020_SHA256 = {
    "perplexity.csv": "cad01e5595432ca20b3d3380e433dc957a4fab78206ebdc8e79944ec3e40be47",
    "syntaxgym_results_gpt-2_bllip-lg-gptbpe.csv": (
        "ffa4b9ba95cb38a49ddc0aed517b760513301455c4a40b49344af0e8caf8b742"
    ),
    "syntaxgym_results_gpt-2_bllip-md-gptbpe.csv": (
        "5fadc149b4c1408442ba1ced3b3103d954b01e678df8175f7a7c7947f310aaac"
    ),
    "syntaxgym_results_gpt-2_bllip-sm-gptbpe.csv": (
        "9e54e78dc7192eca1d022369574188a5863f54485fad93161cd4b14c005d0622"
    ),
    "syntaxgym_results_gpt-2_bllip-xs-gptbpe.csv": (
        "12e8c684d58aadc957dd8aae636c713d426a8def229034ab4d79ed8ad20838a6"
    ),
    "syntaxgym_results_ngram_bllip-lg.csv": (
        "cf6dfb1b2077aa8b03bf85c12a3cddaf6469d40440e80b5ba546d455cffa5539"
    ),
    "syntaxgym_results_ngram_bllip-md.csv": (
        "4ec998e06ab97346c75df2ba1023f8b0d4d607e2f9859fe9d97fec4799435e7b"
    ),
    "syntaxgym_results_ngram_bllip-sm.csv": (
        "8f6850d8f77425d5fe05e9b354c54a3fa7d4b9b4f111f7751b192f8be447e55f"
    ),
    "syntaxgym_results_ngram_bllip-xs.csv": (
        "c29124d2f5d257f774b92ef4c528aedaf5cc20a44374b0a74e6536ab31550750"
    ),
    "syntaxgym_results_ordered-neurons_bllip-lg.csv": (
        "9d11ad8b490b5ca753407de356386a9032240e1f9576a41c12e89ad10e5ac44c"
    ),
    "syntaxgym_results_ordered-neurons_bllip-md.csv": (
        "be23d642271d4e4371c1c0f0b4618e883c98f601e7d28bc6b6ccf5ecc7a30351"
    ),
    "syntaxgym_results_ordered-neurons_bllip-sm.csv": (
        "3b5d9ce40d56144d41c8160ae3a812fd776a3d3f32d844891bd83cbcb1f6cd02"
    ),
    "syntaxgym_results_ordered-neurons_bllip-xs.csv": (
        "f669fa1b2d362088411153be2c00411cf1ea8127b5312eaf205da03bbad1af43"
    ),
    "syntaxgym_results_rnng_bllip-lg.csv": (
        "ba2de65f29e6e039f59493ff02af3e4f02497b2a2f13d1a2433cf9dc20c96a5c"
    ),
    "syntaxgym_results_rnng_bllip-md.csv": (
        "39e37083c42616616b53eefe99d5d207ea7d4b7089b7e5d8d39377902e4a3345"
    ),
    "syntaxgym_results_rnng_bllip-sm.csv": (
        "dcb234d5089d7938dee9a98e6cc2c5e5bb9c426215232334515cffb22bf95b4c"
    ),
    "syntaxgym_results_rnng_bllip-xs.csv": (
        "1a65cdd6d7ffa9a032a3a9cb4a1db3cb6344b5bdc73218be6a8dcabdd822b2cb"
    ),
    "syntaxgym_results_vanilla_bllip-lg.csv": (
        "37acec671139b1af5f59190c3560ce4abdee409c667b12abf3d0993418ef8675"
    ),
    "syntaxgym_results_vanilla_bllip-md.csv": (
        "50ea21a55d3d803e1392cbe8976383a7196d70d83f3c1bd8f02db22212e06054"
    ),
    "syntaxgym_results_vanilla_bllip-sm.csv": (
        "0261a69acf131357f72c3cfec0b22639ae44de95f9d06d159b14954fb639874d"
    ),
    "syntaxgym_results_vanilla_bllip-xs.csv": (
        "9b3f1a0f41065602658c329c265d1eca4874b38f06fc9fc3661fd9738c12c3e3"
    ),
}
HU2020_FILES = {
    name: RemoteFile(f"hu2020_results/{name}", f"{BASE_URL}data/raw/{name}", sha256)
    for name, sha256 in HU2020_SHA256.items()
}


def suite_files(
    names: Iterable[str] | None = None,
    data_dir: str | Path | None = None,
    download: bool = True,
) -> list[Path]:
    """The published suites' files (all 34, or ``names``), each found locally or downloaded
    and checked (module docstring)."""
    chosen = list(SUITE_FILES) if names is None else list(names)
    unknown = [name for name in chosen if name not in SUITE_FILES]
    if unknown:
        raise SuiteError(
            f"no published suite {unknown[0]!r}; Hu et al.'s suites are {', '.join(SUITE_FILES)}"
        )
    return [
        resolve_data_file(DATASET, SUITE_FILES[name], data_dir, download=download)
        for name in chosen
    ]


def hu2020_files(data_dir: str | Path | None = None, download: bool = True) -> dict[str, Path]:
    """Hu et al.'s per-item result files and perplexities by file name, each found locally or
    downloaded and checked."""
    return {
        name: resolve_data_file(DATASET, remote, data_dir, download=download)
        for name, remote in HU2020_FILES.items()
    }
