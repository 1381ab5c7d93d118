"""What every experiment report renders: one experiment as the lab's database knows it.

``model``: the :class:`ExperimentReport` the lab builds (metadata, arms, hosts, the analysis
and the observations) and the renderers read; ``trials``: per metric, arm and trial, the
values the verdict stands on; ``notes``: hosts that differ, hardware mode, failed load gates,
what else ran at the same time;
``text``: the headline and the words every renderer shares; ``contract``: the JSON contract;
``capacity``: capacity mode's arms, each with its highest rate under the SLO;
``certificate``: the A/A record and detectable change beside each verdict.
``functions``: the functions that changed ([service.profile]);
``pairs``: the host pairs whose trials ran side by side.
Everything here is pure: no I/O, no clock.
"""

from hairline.report.context.capacity import ArmCapacity, arm_capacities, capacity_text
from hairline.report.context.certificate import (
    aa_text,
    certificate_of,
    certificate_sentence,
    certificates,
    mde_text,
)
from hairline.report.context.contract import JSON_SCHEMA, analysis_json, experiment_json
from hairline.report.context.functions import (
    FUNCTION_HEADER,
    SUGGESTED_MARK,
    function_lines,
    function_summary,
    functions_json,
    suggested_in,
    suggested_summary,
)
from hairline.report.context.model import (
    ArmReport,
    CapacityCurve,
    CurvePoint,
    ExperimentReport,
    HostPair,
    HostReport,
)
from hairline.report.context.notes import (
    Seat,
    handover_notes,
    host_notes,
    late_ticks_steal_explains,
    load_notes,
    overlap_notes,
    trials_text,
)
from hairline.report.context.pairs import (
    by_host_pair_text,
    host_pair_notes,
    host_pairs,
    host_pairs_json,
)
from hairline.report.context.text import (
    Headline,
    Status,
    comparison_text,
    deciding_text,
    effect_text,
    headline,
    number_text,
    threshold_text,
)
from hairline.report.context.trials import MetricTrials, TrialValue, metric_trials

__all__ = [
    "FUNCTION_HEADER",
    "JSON_SCHEMA",
    "SUGGESTED_MARK",
    "ArmCapacity",
    "ArmReport",
    "CapacityCurve",
    "CurvePoint",
    "ExperimentReport",
    "Headline",
    "HostPair",
    "HostReport",
    "MetricTrials",
    "Seat",
    "Status",
    "TrialValue",
    "aa_text",
    "analysis_json",
    "arm_capacities",
    "by_host_pair_text",
    "capacity_text",
    "certificate_of",
    "certificate_sentence",
    "certificates",
    "comparison_text",
    "deciding_text",
    "effect_text",
    "experiment_json",
    "function_lines",
    "function_summary",
    "functions_json",
    "handover_notes",
    "headline",
    "host_notes",
    "host_pair_notes",
    "host_pairs",
    "host_pairs_json",
    "late_ticks_steal_explains",
    "load_notes",
    "mde_text",
    "metric_trials",
    "number_text",
    "overlap_notes",
    "suggested_in",
    "suggested_summary",
    "threshold_text",
    "trials_text",
]
