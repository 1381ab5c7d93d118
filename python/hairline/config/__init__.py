"""Typed configuration, made once at the edge; every problem names its source and the fix.

``policy``: thresholds and directions (service files and command-line flags); ``sections``:
the lab's tables of an experiment file (load, design, analysis, hosts); ``experiment``: the
service, the arms and the experiment; ``checks``: the rules across fields; ``load``: reading
the files, every problem in one round by file, line and field.
"""

from hairline.config.checks import Report
from hairline.config.experiment import (
    START_PLACEHOLDERS,
    AaConfig,
    ArmConfig,
    BuildConfig,
    ExperimentConfig,
    MetricConfig,
    ServiceConfig,
    parse_every_s,
    start_command,
)
from hairline.config.load import ExtraCheck, idle_setting_warnings, load_experiment
from hairline.config.policy import (
    BUILTIN_DIRECTIONS,
    DEFAULT_THRESHOLD,
    Direction,
    MetricPolicy,
    Threshold,
    builtin_direction,
    parse_directions,
    parse_threshold,
    parse_thresholds,
)
from hairline.config.sections import (
    HOST_CLASS_FACTS,
    AnalysisConfig,
    DesignConfig,
    HostClassConfig,
    HostsConfig,
    LoadConfig,
    ModeConfig,
    ScoreConfig,
    ScoreGroup,
)

__all__ = [
    "BUILTIN_DIRECTIONS",
    "DEFAULT_THRESHOLD",
    "HOST_CLASS_FACTS",
    "START_PLACEHOLDERS",
    "AaConfig",
    "AnalysisConfig",
    "ArmConfig",
    "BuildConfig",
    "DesignConfig",
    "Direction",
    "ExperimentConfig",
    "ExtraCheck",
    "HostClassConfig",
    "HostsConfig",
    "LoadConfig",
    "MetricConfig",
    "MetricPolicy",
    "ModeConfig",
    "Report",
    "ScoreConfig",
    "ScoreGroup",
    "ServiceConfig",
    "Threshold",
    "builtin_direction",
    "idle_setting_warnings",
    "load_experiment",
    "parse_directions",
    "parse_every_s",
    "parse_threshold",
    "parse_thresholds",
    "start_command",
]
