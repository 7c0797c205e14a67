"""The architecture as tests: no import cycles, no module using another's private names (a
third-party library's only in the modules allowed to), no module past STYLE's ~400 lines without
a stated reason, docs/architecture.md's data flow and layer table as the imports run. The layer
order itself is import-linter's contracts in pyproject.toml (``lint-imports`` runs in ``make test``);
this file checks what a layers contract cannot."""

from __future__ import annotations

import ast
import re
import sys

import grimp
import pytest

from tests.conftest import ROOT

PACKAGE = ROOT / "cairn"
#: STYLE.md's guidance: a module over ~400 lines is asking to be split along a seam. It is no
#: hard stop (squeezing a module under a count decides nothing); a module grows past it only with
#: a reason, one line in :data:`LONG_MODULES`.
GUIDANCE_LINES = 400
#: Modules over :data:`GUIDANCE_LINES`, each with why it is one module. Keep this short and honest:
#: a module that drops back under the guidance leaves the list.
LONG_MODULES = {
    "cairn/algorithms/algorithm.py": "Algorithm's public API (RLlib's names) in one class, with "
                                     "its own state tree; the rest are short calls into its "
                                     "checkpointer and the algorithms package.",
    "cairn/checkpoint/manager.py": "CheckpointManager's save/latest/delete/retention protocol, "
                                   "whose crash-safety order reads best in one place.",
    "cairn/checkpoint/storage/objects.py": "one object-store backend: every fsspec call and the "
                                           "mapping of its errors to cairn's.",
    "cairn/config/algorithm_config.py": "AlgorithmConfig's fluent methods, one per RLlib section, "
                                        "each with its documented arguments.",
    "cairn/env_runner/env_runner.py": "EnvRunner's single-agent sample loop (act, step, record, "
                                      "episode hooks) reads as one hot loop; other kinds live beside it.",
    "cairn/policy/policy.py": "Policy's public API (RLlib's names; overridden by DQN, SAC and "
                              "users) over its typed parts: acting input, recurrent acting, files.",
}
#: The only modules that touch third-party libraries' private attributes: one per library, each
#: naming in its docstring what it touches, why, and the versions it is supported on (pinned in
#: pyproject.toml). Everywhere else a private attribute, read through ``getattr``/``attrgetter``
#: or not, is refused.
THIRD_PARTY_INTERNALS = {
    "cairn/_compat/torch_internals.py": "torch: modules' parameter tables, the multi-tensor "
                                        "(_foreach) kernels",
    "cairn/_compat/gymnasium_internals.py": "gymnasium: wrappers' step counters and the env's "
                                            "random generator (classic-control exact resume)",
    "cairn/_compat/pettingzoo_internals.py": "pettingzoo: the classic board games' AEC bookkeeping "
                                             "and wrapper state (their exact resume)",
    "cairn/_compat/mlflow_internals.py": "mlflow: the metric check its stores run on a batch (one "
                                         "refused name would lose every metric)",
    "cairn/_compat/keras_internals.py": "keras: its global SeedGenerator (keras.random without a "
                                        "seed), seeded per learn call for exact resume",
}
#: A string naming a private attribute (what ``getattr(obj, "_x")`` and ``attrgetter("_x")`` take).
_PRIVATE_NAME = re.compile(r"_[A-Za-z][A-Za-z0-9_]*")

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")


def _graph(*, type_checking: bool = False) -> grimp.ImportGraph:
    """The package's import graph; with ``type_checking``, imports under ``TYPE_CHECKING`` too."""
    return grimp.build_graph("cairn", exclude_type_checking_imports=not type_checking, cache_dir=None)


def _cycle_from(graph: grimp.ImportGraph, start: str) -> list[str] | None:
    """The shortest import chain from ``start`` back to itself, if any."""
    best: list[str] | None = None
    for first in graph.find_modules_directly_imported_by(start):
        if first == start:
            return [start, start]
        chain = graph.find_shortest_chain(importer=first, imported=start)
        if chain is not None and (best is None or len(chain) + 1 < len(best)):
            best = [start, *chain]
    return best


def _cycles(graph: grimp.ImportGraph) -> dict[frozenset[str], str]:
    cycles = {}
    for module in sorted(graph.modules):
        cycle = _cycle_from(graph, module)
        if cycle is not None:
            cycles[frozenset(cycle)] = " -> ".join(cycle)
    return cycles


def test_no_import_cycles_between_modules():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles (outside TYPE_CHECKING):\n" + "\n".join(sorted(cycles.values()))


#: Packages inside which modules still import each other in a circle through ``TYPE_CHECKING``
#: imports (a helper module typed with the class that imports it), each with what is left. A
#: circle that reaches outside its package is refused everywhere; an entry leaves this list
#: when its last circle is broken (the test below fails while it stays without one).
TYPE_CHECKING_CIRCLES_LEFT: dict[str, str] = {}


def _inside_one_listed_package(cycle: frozenset[str]) -> str | None:
    for package in TYPE_CHECKING_CIRCLES_LEFT:
        if all(m == package or m.startswith(package + ".") for m in cycle):
            return package
    return None


def test_no_import_cycles_even_through_type_checking_imports():
    """Issue 38 item 6: an import under ``TYPE_CHECKING`` is an edge of the architecture too (the
    layer contract counts it: ``exclude_type_checking_imports = false``). A circle hidden that way
    (the league typed with Algorithm, the config's dict form with AlgorithmConfig, the
    multi-agent samplers with EnvRunner, the Policy's parts with Policy) is broken by naming
    what the lower module needs as a protocol beside it, not by importing the class above."""
    cycles = _cycles(_graph(type_checking=True))
    outside = sorted(text for cycle, text in cycles.items() if _inside_one_listed_package(cycle) is None)
    assert not outside, "import cycles through TYPE_CHECKING imports:\n" + "\n".join(outside)
    still_needed = {_inside_one_listed_package(cycle) for cycle in cycles}
    stale = sorted(set(TYPE_CHECKING_CIRCLES_LEFT) - still_needed)
    assert not stale, f"no circle is left in {stale}: remove them from TYPE_CHECKING_CIRCLES_LEFT"


#: The modules the Algorithm's checkpointing and state are built from (issue 38 item 3).
ALGORITHM_CHECKPOINT_PARTS = ("checkpointer", "save_restore", "state", "component_restore",
                              "policy_changes", "async_save")


@pytest.mark.parametrize("part", ALGORITHM_CHECKPOINT_PARTS)
def test_the_algorithm_and_its_checkpointing_parts_form_no_import_circle_even_for_type_checking(part):
    """Issue 38 item 3: the modules the Algorithm's checkpointing and state are built from took
    ``algo: Algorithm`` and imported the class back under TYPE_CHECKING: a circle of five
    modules (algorithm -> checkpointing, component_restore, policy_changes, state -> algorithm)
    that the test above, which skips TYPE_CHECKING imports, does not see. They take small typed
    inputs instead (:class:`cairn.algorithms.save_restore.CheckpointedAlgorithm`)."""
    graph = grimp.build_graph("cairn", exclude_type_checking_imports=False, cache_dir=None)
    module = f"cairn.algorithms.{part}"
    assert module in graph.modules
    chain = graph.find_shortest_chain(importer=module, imported="cairn.algorithms.algorithm")
    assert chain is None, f"{module} imports the Algorithm back: {' -> '.join(chain or ())}"


def test_the_layer_contract_has_no_exceptions():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    # The layers hold for imports under TYPE_CHECKING too: a type names a dependency as well.
    assert config.get("exclude_type_checking_imports") is False
    for contract in config["contracts"]:
        assert not contract.get("ignore_imports"), f"{contract['name']} has ignore_imports"


def test_the_layer_table_of_docs_architecture_is_the_contract():
    """docs/architecture.md draws the layers as the contract states them: the first column of
    its layer table, top to bottom, is the "cairn layers" contract's list (a layer added, moved
    or renamed in one place and not the other fails here)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["name"] == "cairn layers"]
    page = (ROOT / "docs" / "architecture.md").read_text()
    table = page.split("## Layers", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    drawn = [re.split(r"\s{2,}", line.strip())[0] for line in table.splitlines()
             if re.match(r" \S", line)]
    assert drawn == contract["layers"]


#: The two forms a row of docs/architecture.md's arrow table states the imports in.
_ONE_WAY = re.compile(r"`(cairn[\w.]*)` -> `(cairn[\w.]*)`, never back")
_NEITHER = re.compile(r"`(cairn[\w.]*)` and `(cairn[\w.]*)`: neither imports the other")
#: Issue 38's "Done when": the data flow docs/architecture.md draws, piece by piece.
DATA_FLOW = ("config", "algorithm", "learners", "env runners", "policy", "checkpoint")


def test_the_data_flow_of_docs_architecture_matches_the_imports():
    """docs/architecture.md draws config -> algorithm -> learners -> env runners -> policy ->
    checkpoint, and its table says how each arrow runs in the imports: one package imports the
    other and never the reverse, or neither imports the other. Each row holds in the import graph
    (function-level and ``TYPE_CHECKING`` imports included, chains through other packages too)."""
    page = (ROOT / "docs" / "architecture.md").read_text().split("## Layers", 1)[0]
    rows = [line.split("|")[1:-1] for line in page.splitlines() if line.startswith("| ")]
    arrows = {cells[0].strip(): cells[-1].strip() for cells in rows if " -> " in cells[0]}
    assert {f"{a} -> {b}" for a, b in zip(DATA_FLOW, DATA_FLOW[1:])} <= set(arrows)
    graph = _graph(type_checking=True)

    def imports(importer: str, imported: str) -> bool:
        return graph.chain_exists(importer=importer, imported=imported, as_packages=True)

    for arrow, claim in arrows.items():
        if one_way := _ONE_WAY.fullmatch(claim):
            upper, lower = one_way.groups()
            assert imports(upper, lower) and not imports(lower, upper), (arrow, claim)
        elif neither := _NEITHER.fullmatch(claim):
            first, second = neither.groups()
            assert not imports(first, second) and not imports(second, first), (arrow, claim)
        else:
            pytest.fail(f"docs/architecture.md, arrow {arrow}: {claim!r} is in neither form")


def _private_names_defined(tree: ast.AST, *, variables: bool = True) -> set[str]:
    """The private names a module defines: its functions, classes and (``variables``) variables,
    and the attributes it stores on ``self`` or ``cls`` (an attribute stored on another object is
    that object's, even when this module writes it)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            names.add(node.attr)
        elif variables and isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return {n for n in names if n.startswith("_")}


def _formatted_parts(tree: ast.AST) -> set[int]:
    """The ids of the string pieces of f-strings (``f"{name}_mean"``: text, not names)."""
    return {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
            for part in ast.walk(node) if isinstance(part, ast.Constant)}


def _private_uses(source: str, where: str) -> list[str]:
    """Private names ``source`` uses that it does not define: ``obj._name`` (a third-party
    module's ``torch._name`` too) and strings naming one (``getattr(obj, "_name")``,
    ``attrgetter("_name")``, a tuple of names to loop over)."""
    tree = ast.parse(source)
    own, formatted = _private_names_defined(tree), _formatted_parts(tree)
    # A string names an attribute (getattr, attrgetter, __slots__), never a module's variable.
    own_attributes = _private_names_defined(tree, variables=False)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":  # cairn's and libraries' alike
            found += [f"{where}:{node.lineno} imports {node.module}.{a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
        elif (isinstance(node, ast.Attribute) and node.attr.startswith("_")
              and not node.attr.startswith("__") and node.attr not in own):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super":
                continue
            found.append(f"{where}:{node.lineno} uses {ast.unparse(node)}")
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in formatted
              and _PRIVATE_NAME.fullmatch(node.value) and node.value not in own_attributes):
            found.append(f"{where}:{node.lineno} names the private attribute {node.value!r} in a string")
    return found


def test_no_module_uses_another_modules_private_names():
    """``obj._name`` is fine inside the module that defines ``_name``, nowhere else; a
    third-party library's private attributes only in its :data:`THIRD_PARTY_INTERNALS` module."""
    found = [use for path in sorted(PACKAGE.rglob("*.py"))
             if path.relative_to(ROOT).as_posix() not in THIRD_PARTY_INTERNALS
             for use in _private_uses(path.read_text(), path.relative_to(ROOT).as_posix())]
    assert not found, "private names used across modules:\n" + "\n".join(found)


@pytest.mark.parametrize("source", [
    'import operator\n_version = operator.attrgetter("_version")\n',
    'def f(t):\n    return getattr(t, "_version")\n',
    'NAMES = ("_elapsed_steps", "_has_reset")\n',
    "def f(raw):\n    raw._skip = 1\n    return raw._skip\n",
    "import torch\nnorm = torch._foreach_norm\n",
    "from mlflow.utils.validation import _validate_metric\n",
])
def test_private_access_workarounds_are_refused(source):
    """Each way around the rule that cairn used (a getter made from a string, a private name
    written where it is read, a third-party module's private function) is caught."""
    assert _private_uses(source, "m.py")


def _names_private(node: ast.expr) -> bool:
    """A string constant naming a private attribute, or a dotted path through one."""
    return (isinstance(node, ast.Constant) and isinstance(node.value, str)
            and any(part.startswith("_") for part in node.value.split(".")))


def _private_attrgetters(source: str, where: str) -> list[str]:
    """``attrgetter`` calls naming a private attribute (``attrgetter("_version")``,
    ``attrgetter("a._b")``): the workaround issue 38 item 5 removed."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "id", getattr(node.func, "attr", None))
        if name == "attrgetter" and any(_names_private(arg) for arg in node.args):
            found.append(f"{where}:{node.lineno} {ast.unparse(node)}")
    return found


def test_no_attrgetter_reads_a_private_attribute_anywhere():
    """Not in cairn/ (where the test above refuses it too), nor in the tests, benchmarks and
    scripts: a third-party internal is read in its ``cairn/_compat`` module, by name."""
    paths = [path for folder in ("cairn", "tests", "bench", "scripts")
             for path in sorted((ROOT / folder).rglob("*.py"))]
    found = [use for path in paths
             for use in _private_attrgetters(path.read_text(), path.relative_to(ROOT).as_posix())]
    assert not found, "attrgetter of a private attribute:\n" + "\n".join(found)
    assert _private_attrgetters('from operator import attrgetter\nv = attrgetter("_version")\n', "m.py")
    assert _private_attrgetters('import operator\nv = operator.attrgetter("weight._version")\n', "m.py")
    assert not _private_attrgetters('import operator\nv = operator.attrgetter("weight.grad")\n', "m.py")


def test_private_names_of_the_module_itself_are_allowed():
    source = ('class A:\n    __slots__ = ("_x",)\n\n    def __init__(self):\n        self._x = 1\n\n'
              "    def f(self, other):\n        return other._x + len(f\"{self}_mean\")\n")
    assert _private_uses(source, "m.py") == []


def test_each_third_party_internals_module_names_its_pinned_version_range():
    """Every allowed module exists and its docstring names a range pinned in pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [d for extra in project.get("optional-dependencies", {}).values() for d in extra]
    for module in THIRD_PARTY_INTERNALS:
        library = module.rsplit("/", 1)[-1].removesuffix("_internals.py")
        # A core dependency's range, else (a library of an extra, as mlflow) the extra's.
        # (One range however many extras list the library: keras is in the keras and tf extras.)
        pinned = ([d for d in project["dependencies"] if re.match(rf"{library}\b", d)]
                  or sorted({d for d in extras if re.match(rf"{library}\b", d)}))
        assert len(pinned) == 1 and "<" in pinned[0], (module, pinned)
        docstring = ast.get_docstring(ast.parse((ROOT / module).read_text())) or ""
        assert f"Supported: ``{pinned[0]}``" in docstring, (module, pinned[0])


def test_every_module_past_the_size_guidance_says_why():
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    over = {p: n for p, n in sorted(sizes.items()) if n > GUIDANCE_LINES}
    unexplained = {p: n for p, n in over.items() if p not in LONG_MODULES}
    assert not unexplained, (
        f"modules over ~{GUIDANCE_LINES} lines (STYLE.md): split them along a seam, or give the reason "
        f"in LONG_MODULES: {unexplained}")
    stale = sorted(set(LONG_MODULES) - set(over))
    assert not stale, f"LONG_MODULES lists modules no longer over {GUIDANCE_LINES} lines: {stale}"


def test_every_stateful_class_follows_the_state_protocol():
    """cairn/core.py's Stateful: get_state(*, copy=True) and set_state(state)."""
    import inspect

    from cairn.algorithms.algorithm import Algorithm
    from cairn.algorithms.dqn.dqn_policy import DQNPolicy
    from cairn.env_runner.env_runner import EnvRunner
    from cairn.policy.filters import MeanStdFilter, NoFilter
    from cairn.policy.policy import Policy
    from cairn.replay import PrioritizedReplayBuffer, ReplayBuffer

    for cls in (Algorithm, Policy, DQNPolicy, EnvRunner, MeanStdFilter, NoFilter, ReplayBuffer,
                PrioritizedReplayBuffer):
        parameter = inspect.signature(cls.get_state).parameters.get("copy")
        assert parameter is not None and parameter.kind is inspect.Parameter.KEYWORD_ONLY, cls
        assert parameter.default is True, cls
        assert callable(getattr(cls, "set_state", None)), cls
