"""The published studies (one job: the list in studies.yaml, as typed entries): each study's README part, its
preset, its store and what its README part shows. A new published study is its preset plus one entry there."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from .io import read_yaml
from .paths import store_dir

SHOWS = ("figure4", "depth")  # the kinds of README part (lnrepro.analysis.render.readme_results)


@dataclass(frozen=True)
class Study:
    """One published study."""

    part: str  # the README's generated part that quotes it
    title: str  # the study in words
    preset: str  # presets/{preset}.yaml; the study's name, so its store is published/{preset}
    shows: str  # one of SHOWS

    @property
    def preset_file(self) -> str:
        return f"presets/{self.preset}.yaml"

    @property
    def store(self) -> str:
        return store_dir(self.preset)

    @property
    def report(self) -> str:
        """The published report's folder, as the README names it: the store keeps its report in report/."""
        return f"{self.store}/report"


def _read() -> dict[str, Study]:
    with resources.as_file(resources.files(__package__) / "studies.yaml") as path:
        entries = read_yaml(path)
    studies = [Study(**entry) for entry in entries]
    wrong = [s.part for s in studies if s.shows not in SHOWS]
    if wrong or len({s.part for s in studies}) < len(studies):
        raise ValueError(f"studies.yaml: parts {wrong} show none of {SHOWS}, or a part is listed twice")
    return {s.part: s for s in studies}


STUDIES: dict[str, Study] = _read()
