"""The report: what a run measured, from its results dict alone (so ``--render`` of a saved
JSON prints the same): the Markdown tables and the targets per part (direct.py, protocols.py,
fronts.py, instructions.py), the whole report (markdown.py), the run's files (files.py) and
the chart (chart.py). It measures nothing and starts nothing."""
