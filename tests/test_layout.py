"""The project's import rules: the core is 'fieldrl'; apps never import each other."""

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1]


def _imports(path: Path) -> list[str]:
    """Every module ``path`` imports, at the top or inside a function (``from a import b``
    also lists ``a.b``: b may be a module)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of a module graph: each strongly connected set of two or more."""
    found, seen = [], set()
    for start in graph:
        if start not in seen:
            circle = sorted(m for m in _reach(graph, start) if start in _reach(graph, m))
            if len(circle) > 1:
                found.append(circle)
                seen.update(circle)
    return found


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    reach, frontier = {start}, [start]
    while frontier:
        for nxt in graph.get(frontier.pop(), ()):
            if nxt not in reach:
                reach.add(nxt)
                frontier.append(nxt)
    return reach


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


def test_apps_take_option_types_from_cli_types_not_the_cli():
    """``fieldrl.cli`` builds the whole command tree; an app's commands need only
    ``fieldrl.cli_types``."""
    bad = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in (ROOT / "apps").rglob("*.py")
        for name in _imports(path)
        if name == "fieldrl.cli" or name.startswith("fieldrl.cli.")
    ]
    assert bad == []


def test_core_never_imports_an_app():
    bad = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in (ROOT / "shared").rglob("*.py")
        for name in _imports(path)
        if name.startswith("fieldrl.apps")
    ]
    assert bad == []


def _app_graph(app_dir: Path) -> dict[str, set[str]]:
    own = f"fieldrl.apps.{app_dir.name}."
    modules = {p.stem for p in app_dir.glob("*.py")}
    return {
        path.stem: {n[len(own) :].split(".")[0] for n in _imports(path) if n.startswith(own)}
        & modules - {path.stem}
        for path in app_dir.glob("*.py")
    }


def test_no_app_has_an_import_circle():
    """Function-level imports count too: a circle hidden in a function is still one."""
    circles = {app.name: _circles(_app_graph(app))
               for app in (ROOT / "apps").iterdir() if (app / "__init__.py").exists()}  # fmt: skip
    assert {name: c for name, c in circles.items() if c} == {}


def test_apps_write_weights_only_through_the_core_checkpoint():
    bad = []
    for path in (ROOT / "apps").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "save":
                owner = node.value
                if isinstance(owner, ast.Name) and owner.id == "torch":
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: torch.save")
    assert bad == []


def test_only_the_core_writes_a_report():
    """report.md is written by the core from a benchmark.json (an app's benchmark or demo
    results); an app that names the file is writing it itself."""
    bad = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for folder in ("apps", "shared/scaffold")
        for path in (ROOT / folder).rglob("*.py*")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and node.value == "report.md"
    ]
    assert bad == []


def _hand_derived_seeds(tree: ast.AST) -> list[int]:
    """Lines computing a seed from another by hand: ``seed * 1000``, ``seed + 500``,
    ``50_000 + ...`` (a number times or plus a name with "seed" in it). An episode index
    added to a seed (``first_seed + e``) is the Gymnasium convention and allowed."""

    def seedy(node: ast.AST) -> bool:
        if isinstance(node, ast.BinOp):
            return seedy(node.left) or seedy(node.right)
        name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
        return "seed" in name.lower()

    def number(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, int) and node.value > 1

    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Add | ast.Mult)
        and (seedy(node.left) and number(node.right) or number(node.left) and seedy(node.right))
    ]


def test_apps_derive_seeds_through_the_core():
    """A part's seed comes from ``derive_seed(seed, key)``; offsets and multiples by hand
    collide (seed 1's part 100 is seed 2's part 0) and read differently in every app."""
    bad = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in (ROOT / "apps").rglob("*.py")
        for line in _hand_derived_seeds(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert bad == []


def test_rule_checker_catches_a_violation(tmp_path):
    sample = tmp_path / "x.py"
    sample.write_text("import shared.config\nfrom fieldrl.apps.other import x\n")
    assert _imports(sample) == ["shared.config", "fieldrl.apps.other", "fieldrl.apps.other.x"]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []
    code = "a = cfg.seed * 1000 + 500\nb = 10_000 + 100 * seed\nc = first_seed + e\nd = seed + 1"
    assert sorted(_hand_derived_seeds(ast.parse(code))) == [1, 1, 2, 2]
