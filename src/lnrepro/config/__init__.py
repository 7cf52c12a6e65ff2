"""The configuration layer: load and validate once (``load``), then typed settings everywhere (``settings``)."""

from .load import (
    LOCATION_KEYS,
    REPO_ROOT,
    SCHEMA_PATH,
    check_semantics,
    data_settings,
    dataset_section,
    deep_merge,
    eval_settings,
    experiment,
    grid_runs,
    load_config,
    load_schema,
    resolve_run,
    resources,
    validate_config,
)
from .settings import (
    FACTOR_KEYS,
    AnalysisSettings,
    BpeSettings,
    Comparison,
    DataSettings,
    EvalSettings,
    Experiment,
    GradinitConfig,
    GradinitSettings,
    GridSettings,
    ModelSettings,
    OptimSettings,
    Resources,
    RunConfig,
    RunSettings,
    ScheduleSettings,
    Section,
    TrainSettings,
    inert_settings,
    used_settings,
)
from ..errors import LnReproError

__all__ = [
    "FACTOR_KEYS", "LOCATION_KEYS", "REPO_ROOT", "SCHEMA_PATH", "AnalysisSettings", "BpeSettings", "Comparison",
    "DataSettings", "EvalSettings", "Experiment", "GradinitConfig", "GradinitSettings", "GridSettings", "LnReproError",
    "ModelSettings", "OptimSettings", "Resources", "RunConfig", "RunSettings", "ScheduleSettings", "Section",
    "TrainSettings", "check_semantics", "data_settings", "dataset_section", "deep_merge", "eval_settings",
    "experiment", "grid_runs", "load_config", "load_schema", "resolve_run", "resources", "validate_config",
    "inert_settings", "used_settings",
]
