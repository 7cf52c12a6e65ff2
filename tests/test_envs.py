"""The conda environment of the rules (envs/lnrepro.yaml) must install what pyproject.toml declares.

Conda's channels are unreachable here, so the environment is only parsed, never built.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
ENV_FILE = REPO / "envs" / "lnrepro.yaml"
POST_DEPLOY = REPO / "envs" / "lnrepro.post-deploy.sh"


def _normalize(requirements: list[str]) -> dict[str, tuple[frozenset, str, str]]:
    """name -> (extras, specifier, marker), so '>=9,<10' equals '<10, >=9' and Torch equals torch."""
    out: dict[str, tuple[frozenset, str, str]] = {}
    for text in requirements:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        assert name not in out, f"{text!r}: {name} is listed twice"
        spec = ",".join(sorted(str(s) for s in SpecifierSet(str(req.specifier))))
        out[name] = (frozenset(req.extras), spec, str(req.marker or ""))
    return out


@pytest.fixture(scope="module")
def pyproject_deps() -> dict:
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    return _normalize(data["project"]["dependencies"])


@pytest.fixture(scope="module")
def env() -> dict:
    return yaml.safe_load(ENV_FILE.read_text())


def _pip_list(env: dict) -> list[str]:
    pip = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pip) == 1, f"{ENV_FILE}: expected exactly one `pip:` list under dependencies"
    return [str(r) for r in pip[0]]


def _conda_names(env: dict) -> list[str]:
    names = []
    for dep in env["dependencies"]:
        if isinstance(dep, str):
            names.append(dep.split("=")[0].split("<")[0].split(">")[0].strip().lower())
    return names


def test_env_file_parses_with_channels(env):
    assert env.get("name") == "lnrepro"
    assert env.get("channels"), f"{ENV_FILE}: no channels"
    names = _conda_names(env)
    assert "python" in names and "pip" in names, f"{ENV_FILE}: needs python and pip, has {names}"


def test_env_python_satisfies_requires_python(env):
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    requires = SpecifierSet(data["project"]["requires-python"])
    py = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python"))
    version = py.split("=")[-1]
    assert requires.contains(version + ".0") or requires.contains(version), (
        f"{ENV_FILE}: {py} does not satisfy requires-python {requires}"
    )


def test_env_dependencies_equal_pyproject(env, pyproject_deps):
    env_deps = _normalize(_pip_list(env))
    missing = sorted(set(pyproject_deps) - set(env_deps))
    extra = sorted(set(env_deps) - set(pyproject_deps))
    differ = sorted(n for n in set(env_deps) & set(pyproject_deps) if env_deps[n] != pyproject_deps[n])
    assert not missing and not extra and not differ, (
        f"{ENV_FILE} and pyproject.toml [project.dependencies] disagree: "
        f"missing in env {missing}, only in env {extra}, different pins "
        f"{[(n, env_deps[n][1], pyproject_deps[n][1]) for n in differ]}"
    )


def test_conda_packages_not_duplicated_in_pip(env):
    """A package installed by conda and again by pip would make the environment ambiguous."""
    pip_names = set(_normalize(_pip_list(env)))
    both = pip_names & {canonicalize_name(n) for n in _conda_names(env)} - {"pip"}
    assert not both, f"{ENV_FILE}: {sorted(both)} listed for both conda and pip"


def test_post_deploy_installs_the_project():
    """The project itself comes from the post-deploy script (the env file is copied elsewhere
    by Snakemake before it is built, so a relative `-e ..` in it would break)."""
    text = POST_DEPLOY.read_text()
    assert "pip install" in text and "-e" in text and "--no-deps" in text
    assert os.stat(POST_DEPLOY).st_mode & stat.S_IXUSR, f"{POST_DEPLOY} is not executable"
