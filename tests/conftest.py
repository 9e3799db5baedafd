"""Shared test fixtures: where the real corpus and the project's own fixtures live."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
CORPUS = REPO.parent / "shared" / "corpus"


@pytest.fixture(scope="session")
def corpus() -> Path:
    """The real profiles under ../shared/corpus; the test is skipped when it is absent."""
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus is absent (it sits beside the checkout for developers/CI)")
    return CORPUS


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The small profiles the project makes itself (scripts/make_fixtures.py)."""
    return FIXTURES


@pytest.fixture(scope="session")
def nsys_available() -> str:
    """Path of nsys; skips when absent, fails instead when PROFREPORT_REQUIRE_NSYS=1 (CI)."""
    path = shutil.which("nsys")
    if path is None and os.environ.get("PROFREPORT_REQUIRE_NSYS") == "1":
        pytest.fail("nsys is required here (PROFREPORT_REQUIRE_NSYS=1) but not installed")
    if path is None:
        pytest.skip("nsys is not installed (scripts/setup.sh --system installs it)")
    return path
