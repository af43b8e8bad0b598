"""The bridge with a real exported runtime model compiled in: the fixtures its tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hetero.bridge.luarun import JobSubmit
from slurm_hetero.conf import Profile, render_site
from slurm_hetero.site import Site, load_site
from tests.predict_fixture import export_model

DEMO = Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml"


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(DEMO)


@pytest.fixture(scope="session")
def model_lua(tmp_path_factory: pytest.TempPathFactory) -> str:
    """tests/predict_fixture.py's model, exported once for every test that compiles it in."""
    return export_model(tmp_path_factory.mktemp("model") / "predict.lua").read_text()


@pytest.fixture
def js(site: Site, model_lua: str, tmp_path: Path) -> JobSubmit:
    """job_submit.lua of the demo site with the model, its state folder `tmp_path`."""
    js = JobSubmit(render_site(site, Profile(state_dir=str(tmp_path), model_lua=model_lua))["job_submit.lua"])
    js.state = tmp_path  # type: ignore[attr-defined]
    return js
