"""The run's files in the output directory: latest.json (everything the run measured,
rewritten after every part so an interrupted run keeps it), latest.md and the charts."""
import json

from bench.report import chart
from bench.report.markdown import render_markdown


def save_json(out, results):
    (out / "latest.json").write_text(json.dumps(results, indent=2, default=str) + "\n")


def write_report(out, results, chart_paths):
    """latest.md and the charts -> (the Markdown, True or why there is no chart)."""
    md = render_markdown(results)
    (out / "latest.md").write_text(md)
    return md, chart.draw(results, chart_paths)
