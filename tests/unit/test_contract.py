"""The Kafka message contract has one home, cdcbridge/contract.py.

These tests pin its wire values, read the copies of its constants that the C encoders and the Spark kernel keep
(they cannot import Python) and fail when a copy differs, and fail when a Python module defines a contract name or
literal again instead of importing it.
"""

from __future__ import annotations

import ast
import json
import re
from enum import StrEnum
from pathlib import Path

import pytest

from cdcbridge.contract import (
    DEAD_LETTER_REASON_HEADER,
    DEFAULT_TOPIC_SUFFIX,
    SEQ_KEY_FORMAT,
    SEQ_KEY_LENGTH,
    SEQ_LIMITS,
    SEQ_NUMBERS,
    SEQ_WIDTHS,
    TOMBSTONE_SEQ_KEY_HEADER,
    TOPIC_CLEANUP_POLICY,
    CellOp,
    MessageFormat,
    MutationType,
    default_topic_name,
    seq_key,
)

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "cdcbridge" / "contract.py"
C_SOURCE = ROOT / "cdcbridge" / "formats" / "_envelope_speedups.c"
JAVA_DIR = ROOT / "deploy" / "spark" / "src" / "main" / "java" / "io" / "cdcbridge" / "spark"
MUTATE_LOG_SCHEMA = ROOT / "schemas" / "mutate_log.avsc"

#: The C names of the seq numbers' widths, in SEQ_NUMBERS order.
C_WIDTH_NAMES = ("EPOCH_DIGITS", "TIMESTAMP_DIGITS", "ROW_DIGITS", "OP_DIGITS")
#: Names defined once, in contract.py; the emulator's CellOp is Tablestore's UpdateRow op in a model that imports
#: nothing of ours but PlainBuffer (DESIGN §2), not the message contract.
CONTRACT_CLASSES = {"MessageFormat", "MutationType", "CellOp"}
OTHER_DEFINITIONS_ALLOWED = {("cdcbridge.emulator.model", "CellOp")}


# ---- the wire values ----------------------------------------------------------------------------------------


def test_the_wire_values_are_the_fixed_contract() -> None:
    assert [f.value for f in MessageFormat] == ["RECORD_IMAGE", "MUTATE_LOG"]
    assert [t.value for t in MutationType] == ["PUT", "UPDATE", "DELETE", "INCREMENT"]
    assert [o.value for o in CellOp] == ["PUT", "DELETE_ONE_VERSION", "DELETE_ALL_VERSION", "INCREMENT"]
    assert TOMBSTONE_SEQ_KEY_HEADER == "cdcbridge-seq-key"
    assert DEAD_LETTER_REASON_HEADER == "cdcbridge-dead-letter-reason"
    assert DEFAULT_TOPIC_SUFFIX == {MessageFormat.RECORD_IMAGE: "image", MessageFormat.MUTATE_LOG: "mutation"}
    assert TOPIC_CLEANUP_POLICY == {MessageFormat.RECORD_IMAGE: "compact", MessageFormat.MUTATE_LOG: "delete"}


def test_seq_key_layout() -> None:
    assert SEQ_KEY_FORMAT == "%010d%020d%010d%06d"
    assert SEQ_NUMBERS == ("epoch", "timestamp_us", "row_index", "op_index")
    assert SEQ_WIDTHS == {"epoch": 10, "timestamp_us": 20, "row_index": 10, "op_index": 6}
    assert SEQ_KEY_LENGTH == 46
    assert SEQ_LIMITS == {"epoch": 10**10, "timestamp_us": 2**63, "row_index": 10**10, "op_index": 10**6}
    assert seq_key(1, 1_750_000_000_000_000, 3, 4) == "0000000001000017500000000000000000000003000004"


def test_seq_keys_sort_as_text_in_numeric_order() -> None:
    largest = [SEQ_LIMITS[name] - 1 for name in SEQ_NUMBERS]
    numbers = sorted(
        {(0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0), (0, 9, 0, 0), (0, 10, 0, 0), (1, 0, 0, 0), tuple(largest)}
        | {(2, 5, row, op) for row in (0, 9, 10, 99) for op in (0, 7, 12)}
    )
    keys = [seq_key(*n) for n in numbers]
    assert sorted(keys) == keys
    assert {len(key) for key in keys} == {SEQ_KEY_LENGTH}


def test_default_topic_names() -> None:
    assert default_topic_name(MessageFormat.RECORD_IMAGE, prefix="cdc", table="orders") == "cdc.orders.image"
    assert default_topic_name(MessageFormat.MUTATE_LOG, prefix="cdc", table="orders") == "cdc.orders.mutation"
    assert default_topic_name(MessageFormat.MUTATE_LOG, prefix="", table="orders") == "orders.mutation"


def test_enum_order_is_the_schemas_symbol_order() -> None:
    """The C encoders write enum indexes: the contract's order must be the schema's (UNKNOWN, the reader's
    default, comes last)."""
    schema = json.loads(MUTATE_LOG_SCHEMA.read_text())
    symbols = {}

    def collect(node: object) -> None:
        if isinstance(node, dict):
            if node.get("type") == "enum":
                symbols[node["name"]] = node["symbols"]
            for child in node.values():
                collect(child)
        elif isinstance(node, list):
            for child in node:
                collect(child)

    collect(schema)
    assert symbols["MutationType"] == [t.value for t in MutationType] + ["UNKNOWN"]
    assert symbols["CellOp"] == [o.value for o in CellOp] + ["UNKNOWN"]


# ---- the C and Java copies ----------------------------------------------------------------------------------


def _enum_indexes(text: str, prefix: str) -> dict[str, int]:
    return {name: int(index) for name, index in re.findall(rf"\b{prefix}_([A-Z_]+?) = (\d+)", text)}


def _expected_indexes(enum: type[StrEnum]) -> dict[str, int]:
    return {member.value: index for index, member in enumerate(enum)}


def c_mismatches(text: str) -> list[str]:
    """How the C encoders' constants differ from contract.py ([] = they agree)."""
    problems = []
    defines = {name: value.strip() for name, value in re.findall(r"^#define (\w+) (.+?)\s*$", text, re.M)}
    widths = {}
    for number, name in zip(SEQ_NUMBERS, C_WIDTH_NAMES, strict=True):
        if not defines.get(name, "").isdigit():
            problems.append(f"{name} is not defined as a number")
        else:
            widths[number] = int(defines[name])
    if widths != SEQ_WIDTHS:
        problems.append(f"seq widths {widths} != contract {SEQ_WIDTHS}")
    length = defines.get("SEQ_KEY_LEN", "")
    if re.sub(r"\s", "", length) != "(" + "+".join(C_WIDTH_NAMES) + ")":
        problems.append(f"SEQ_KEY_LEN is {length!r}, not the sum of {', '.join(C_WIDTH_NAMES)}")
    formats = re.findall(r'SEQ_KEY_FORMAT "([^"]*)"', text)
    if formats != [SEQ_KEY_FORMAT]:
        problems.append(f"the seq_key format the C source names is {formats}, contract {SEQ_KEY_FORMAT!r}")
    for prefix, enum in (("TYPE", MutationType), ("CELL_OP", CellOp)):
        indexes = _enum_indexes(text, prefix)
        if indexes != _expected_indexes(enum):
            problems.append(f"{prefix}_* indexes {indexes} != contract {enum.__name__} {_expected_indexes(enum)}")
    return problems


def java_mismatches(envelope: str, kernels: dict[str, str]) -> list[str]:
    """How the Spark kernel's constants (Envelope.java and the other sources by file name) differ from contract.py."""
    problems = []
    widths = re.search(r"int\[\] SEQ_WIDTHS = \{([^}]*)\}", envelope)
    found_widths = [int(w) for w in widths.group(1).split(",")] if widths else None
    if found_widths != list(SEQ_WIDTHS.values()):
        problems.append(f"SEQ_WIDTHS {found_widths} != contract {list(SEQ_WIDTHS.values())}")
    numbers = re.search(r"String\[\] SEQ_NUMBERS = \{([^}]*)\}", envelope)
    found_numbers = tuple(re.findall(r'"([^"]*)"', numbers.group(1))) if numbers else None
    if found_numbers != SEQ_NUMBERS:
        problems.append(f"SEQ_NUMBERS {found_numbers} != contract {SEQ_NUMBERS}")
    length = re.search(r"int SEQ_KEY_LENGTH = (\d+);", envelope)
    if length is None or int(length.group(1)) != SEQ_KEY_LENGTH:
        problems.append(f"SEQ_KEY_LENGTH {length and length.group(1)} != contract {SEQ_KEY_LENGTH}")
    formats = re.findall(r'SEQ_KEY_FORMAT "([^"]*)"', envelope)
    if formats != [SEQ_KEY_FORMAT]:
        problems.append(f"the seq_key format Envelope.java names is {formats}, contract {SEQ_KEY_FORMAT!r}")
    names = {t.value for t in MutationType} | {o.value for o in CellOp}
    for file_name, text in kernels.items():
        for constant, value in re.findall(r'UTF8String (\w+) = UTF8String\.fromString\("([^"]*)"\)', text):
            if constant != value or value not in names:
                problems.append(f"{file_name}: {constant} = {value!r} is not a MutationType or CellOp of the contract")
    mutation_names = set(re.findall(r'UTF8String\.fromString\("([^"]*)"\)', kernels.get("MutationOp.java", "")))
    if missing := [t.value for t in MutationType if t.value not in mutation_names]:
        problems.append(f"MutationOp.java has no constant for MutationType {missing}")
    return problems


def _java_sources() -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(JAVA_DIR.glob("*.java"))}


def test_the_c_encoders_constants_are_the_contracts() -> None:
    assert c_mismatches(C_SOURCE.read_text()) == []


def test_the_spark_kernels_constants_are_the_contracts() -> None:
    kernels = _java_sources()
    assert java_mismatches(kernels["Envelope.java"], kernels) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("#define OP_DIGITS 6", "#define OP_DIGITS 7", "seq widths"),
        ("#define SEQ_KEY_LEN (EPOCH_DIGITS + ", "#define SEQ_KEY_LEN (1 + EPOCH_DIGITS + ", "SEQ_KEY_LEN"),
        ('"%010d%020d%010d%06d"', '"%010d%019d%010d%06d"', "seq_key format"),
        ("TYPE_DELETE = 2, TYPE_INCREMENT = 3", "TYPE_DELETE = 3, TYPE_INCREMENT = 2", "TYPE_* indexes"),
        ("CELL_OP_INCREMENT = 3", "CELL_OP_INCREMENT = 4", "CELL_OP_* indexes"),
    ],
)
def test_a_changed_c_constant_is_caught(old: str, new: str, problem: str) -> None:
    text = C_SOURCE.read_text()
    assert text.count(old) == 1
    assert any(problem in p for p in c_mismatches(text.replace(old, new)))


@pytest.mark.parametrize(
    ("file_name", "old", "new", "problem"),
    [
        ("Envelope.java", "SEQ_WIDTHS = {10, 20, 10, 6}", "SEQ_WIDTHS = {10, 20, 10, 5}", "SEQ_WIDTHS"),
        ("Envelope.java", '"row_index", "op_index"}', '"row", "op_index"}', "SEQ_NUMBERS"),
        ("Envelope.java", "SEQ_KEY_LENGTH = 46;", "SEQ_KEY_LENGTH = 45;", "SEQ_KEY_LENGTH"),
        ("Envelope.java", '"%010d%020d%010d%06d"', '"%010d%020d%010d%05d"', "seq_key format"),
        ("MutationOp.java", 'fromString("INCREMENT")', 'fromString("INCR")', "INCREMENT = 'INCR'"),
        ("ImageOp.java", 'fromString("DELETE_ONE_VERSION")', 'fromString("DELETE_ONE")', "DELETE_ONE_VERSION"),
    ],
)
def test_a_changed_java_constant_is_caught(file_name: str, old: str, new: str, problem: str) -> None:
    kernels = _java_sources()
    assert kernels[file_name].count(old) == 1
    kernels[file_name] = kernels[file_name].replace(old, new)
    assert any(problem in p for p in java_mismatches(kernels["Envelope.java"], kernels))


# ---- one home in Python -------------------------------------------------------------------------------------


def _python_files(*folders: str) -> list[Path]:
    return sorted(path for folder in folders for path in (ROOT / folder).rglob("*.py"))


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def test_no_other_python_module_spells_the_contract() -> None:
    """The header names and the seq_key layout are written in contract.py only (in code, docstrings or comments)."""
    literals = (TOMBSTONE_SEQ_KEY_HEADER, DEAD_LETTER_REASON_HEADER)
    layout = re.compile(r"%0\d+d%0\d+d|\{:0\d+d\}\{:0\d+d\}")
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in _python_files("cdcbridge")
        if path != CONTRACT
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if any(literal in line for literal in literals) or layout.search(line)
    ]
    assert found == []


def test_contract_names_are_defined_once_and_imported_from_the_contract() -> None:
    problems = []
    for path in _python_files("cdcbridge", "tests"):
        module = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text())):
            defined = isinstance(node, ast.ClassDef) and node.name in CONTRACT_CLASSES and path != CONTRACT
            if defined and (module, node.name) not in OTHER_DEFINITIONS_ALLOWED:
                problems.append(f"{module} defines {node.name}")
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name not in CONTRACT_CLASSES or (node.module, alias.name) in OTHER_DEFINITIONS_ALLOWED:
                        continue
                    if node.module != "cdcbridge.contract":
                        problems.append(f"{module} imports {alias.name} from {node.module}")
                    if alias.asname not in (None, alias.name):
                        problems.append(f"{module} imports {alias.name} as {alias.asname}")
    assert problems == []
