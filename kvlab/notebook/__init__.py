"""What the notebooks show: figures, live panels, each notebook's parameter check, tables,
findings and the walkthrough (docs/DESIGN.md maps the modules). Nothing below imports it."""
