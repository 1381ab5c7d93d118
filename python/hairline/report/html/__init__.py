"""An experiment as one self-contained HTML file: ``page`` lays it out, ``charts`` draws
its SVG."""

from hairline.report.html.charts import SERIES_BUCKETS, axis_ticks
from hairline.report.html.page import render_html

__all__ = ["SERIES_BUCKETS", "axis_ticks", "render_html"]
