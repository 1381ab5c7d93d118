"""Traffic: the trace format, importers of logs and HAR files, labels, statistics, shaping.

``format`` reads and writes traces exactly as the engine accepts them (docs/trace-format.md);
``importers`` turn HAR 1.2, combined (nginx, Apache) and JSON access logs into traces;
``labels`` names endpoints; ``stats`` summarises a trace; ``shape`` filters, mixes and
samples it. docs/traffic.md is the user guide.
"""

from hairline.trace.format import (
    Trace,
    TraceRequest,
    encode_request,
    parse_trace_text,
    read_trace,
    write_trace,
)
from hairline.trace.importers import (
    FORMATS,
    BadLineError,
    ImportOptions,
    ImportReport,
    LogEntry,
    import_files,
    parse_status_filter,
)
from hairline.trace.labels import Labeller, LabelRule, normalize_ids, parse_label_rules
from hairline.trace.shape import (
    MixResult,
    MixWeight,
    Reservoir,
    SampleResult,
    bernoulli_sample,
    derived_header,
    filter_endpoints,
    mix_trace,
    parse_mix,
    parse_reservoir,
    reservoir_sample,
)
from hairline.trace.stats import TraceStats, trace_stats

__all__ = [
    "FORMATS",
    "BadLineError",
    "ImportOptions",
    "ImportReport",
    "LabelRule",
    "Labeller",
    "LogEntry",
    "MixResult",
    "MixWeight",
    "Reservoir",
    "SampleResult",
    "Trace",
    "TraceRequest",
    "TraceStats",
    "bernoulli_sample",
    "derived_header",
    "encode_request",
    "filter_endpoints",
    "import_files",
    "mix_trace",
    "normalize_ids",
    "parse_label_rules",
    "parse_mix",
    "parse_reservoir",
    "parse_status_filter",
    "parse_trace_text",
    "read_trace",
    "reservoir_sample",
    "trace_stats",
    "write_trace",
]
