"""Every ```python block of README.md and docs/*.md runs as written.

Each block runs in a fresh interpreter, so it must import what it uses. The blocks of one page
run in order in the same temporary working directory: a block may read files that an earlier
block of its page wrote (docs/export.md loads the model its first block exports). Blocks that
are not meant to run (shell commands, layouts, pseudo-code) use another fence: ```bash,
```text.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYTHON_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def python_blocks(page: Path) -> list[tuple[int, str]]:
    """``(line number of the opening fence, code)`` for each ```python block of ``page``."""
    text = page.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in PYTHON_BLOCK.finditer(text)]


PAGES_WITH_CODE = [page for page in PAGES if python_blocks(page)]


def test_the_pages_with_examples_are_found() -> None:
    names = {page.relative_to(ROOT).as_posix() for page in PAGES_WITH_CODE}
    assert {"README.md", "docs/export.md", "docs/dqn.md"} <= names
    assert len(python_blocks(ROOT / "README.md")) == 2


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_python_blocks_run_as_written(page: Path, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "HOME": str(tmp_path),  # nothing a block writes by default lands in the real home
    }
    for line, code in python_blocks(page):
        proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (
            f"the ```python block at {page.relative_to(ROOT)}:{line} failed:\n{proc.stderr[-3000:]}"
        )
