"""The project's import rules: the core is 'fieldrl'; apps never import each other."""

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1]


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _python_files():
    for folder in ("shared", "apps", "tests"):
        yield from (ROOT / folder).rglob("*.py")


def test_no_bare_shared_or_apps_imports():
    bad = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in _python_files()
        for name in _imports(path)
        if name.split(".")[0] in ("shared", "apps")
    ]
    assert bad == []


def test_apps_import_only_themselves_and_the_core():
    bad = []
    for app_dir in (p for p in (ROOT / "apps").iterdir() if p.is_dir()):
        own = f"fieldrl.apps.{app_dir.name}"
        for path in app_dir.rglob("*.py"):
            for name in _imports(path):
                if name.startswith("fieldrl.apps") and not (
                    name == own or name.startswith(own + ".")
                ):
                    bad.append(f"{path.relative_to(ROOT)}: {name}")
    assert bad == []


def test_core_never_imports_an_app():
    bad = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in (ROOT / "shared").rglob("*.py")
        for name in _imports(path)
        if name.startswith("fieldrl.apps")
    ]
    assert bad == []


def test_rule_checker_catches_a_violation(tmp_path):
    sample = tmp_path / "x.py"
    sample.write_text("import shared.config\nfrom fieldrl.apps.other import x\n")
    assert _imports(sample) == ["shared.config", "fieldrl.apps.other"]
