"""Every exactly-once fix stays proven: each mutant (a fix reverted, tests/sim/mutants/) still applies to the source,
and the simulation fails on it within its CI seeds (it stops at the first failing seed: a few seconds each).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sim.mutants import MUTANTS, Mutant, apply, copy_sources, imported_from, simulate


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One copy of the sources, never patched (each patch is only checked against it)."""
    return copy_sources(tmp_path_factory.mktemp("sources"))


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_the_mutant_still_applies(mutant: Mutant, sources: Path) -> None:
    apply(mutant, sources, check_only=True)  # MutantError naming the mutant when a refactor broke its patch


def test_every_fix_has_one_mutant_patch() -> None:
    patches = {p.stem for p in (Path(__file__).parent / "mutants").glob("*.patch")}
    assert patches == {m.name for m in MUTANTS}


@pytest.mark.slow
@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_the_simulation_kills_the_mutant(mutant: Mutant, tmp_path: Path) -> None:
    tree = copy_sources(tmp_path)
    apply(mutant, tree)
    assert imported_from(tree) == str(tree / "spark_pipeline" / "__init__.py")  # the mutant runs, not the worktree
    summary = simulate(tree, mutant.ci_first, mutant.ci_count)
    assert summary["seeds_failed"], (
        f"mutant {mutant.name} ({mutant.description}; reverts {mutant.reverts}) survived seeds {mutant.ci_first}–"
        f"{mutant.ci_first + mutant.ci_count - 1}: the simulation no longer notices that fix reverted")
