"""Nothing in the product imports the harness (DESIGN §2): only the command line, which resolves the local
defaults (stack, Maven-fetched jars, an installed JDK) before it calls into the product."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "cdcbridge"


def _imported_modules(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


def test_no_product_module_imports_the_harness() -> None:
    product = [p for p in PACKAGE.rglob("*.py") if "harness" not in p.relative_to(PACKAGE).parts]
    product = [p for p in product if p.relative_to(PACKAGE) != Path("cli.py")]
    assert len(product) > 100  # the scan sees the product, not an empty folder
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(m for m in _imported_modules(path) if m.startswith("cdcbridge.harness"))
        for path in product
    }
    assert {path: modules for path, modules in offenders.items() if modules} == {}
