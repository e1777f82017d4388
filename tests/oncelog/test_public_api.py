"""`import oncelog`: every public name resolves, importing it is cheap, the errors are in one module, and the
README's Python examples run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import oncelog
import oncelog.errors
from events.log import open_log
from tests.factories import one_of_each

ROOT = Path(__file__).parents[2]
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


@pytest.mark.parametrize("name", oncelog.__all__)
def test_every_public_name_resolves(name: str) -> None:
    assert getattr(oncelog, name) is not None
    assert name in dir(oncelog)


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="'no_such_name'"):
        _ = oncelog.no_such_name


def test_importing_oncelog_loads_nothing_heavy() -> None:
    code = ("import sys, oncelog; heavy = [m for m in ('pyspark', 'confluent_kafka', 'events.log', 'typer') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


def test_every_error_is_in_oncelog_errors_and_exported() -> None:
    exceptions = {n for n in oncelog.__all__ if isinstance(value := getattr(oncelog, n), type)
                  and issubclass(value, BaseException)}
    assert set(oncelog.errors.__all__) == exceptions
    for name in oncelog.errors.__all__:
        error = getattr(oncelog.errors, name)
        assert issubclass(error, oncelog.errors.OncelogError), name
        assert getattr(oncelog, name) is error
        assert error.__module__ != "oncelog.errors"  # imported from where it is defined, not redefined


def test_every_oncelog_error_class_of_the_packages_is_listed() -> None:
    defined = set()
    for package in ("events", "projections", "replay", "spark_pipeline", "filesystems"):
        for path in (ROOT / package).rglob("*.py"):
            defined |= set(re.findall(r"^class (\w+)\((?:\w+Error|OncelogError)\):", path.read_text(), re.MULTILINE))
    # the synthetic source's injected test failure; the live views' HTTP answers; the Avro writer's own error, which
    # the codec raises as EventEncodeError (none raised to a caller)
    internal = {"SyntheticFailure", "ViewError", "AvroEncodeError"}
    assert defined - internal - set(oncelog.errors.__all__) == set()


def test_readme_python_examples_run_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    blocks = PYTHON_BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))
    assert blocks, "README.md has no ```python examples"
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".oncelog").mkdir()
    with open_log(f"sqlite:///{tmp_path / '.oncelog' / 'events.db'}") as log:
        log.ensure_topic()
        log.append(one_of_each(urn="orders"))
    for block in blocks:
        assert all(line.startswith(("import oncelog", "from oncelog import", " ", "#")) or "import" not in line
                   for line in block.splitlines()), f"a README example imports something else:\n{block}"
        exec(compile(block, "README.md", "exec"), {"__name__": "readme_example"})
    printed = capsys.readouterr().out
    assert "published orders run-1" in printed
