"""What the notebooks show: figures, live panels, parameter checks, findings, and the
walkthrough that executes them. Imports every layer below; nothing below imports it.

Reading order: ``viz`` (figures: pure functions to plotly specs, one colour per outcome; a
package, one module per kind of figure) -> ``panel`` (the live-panel pattern) -> ``widgets``
(each notebook's panel; a package, one module a panel) -> ``parameters`` (each notebook's
parameter check) -> ``tables`` (tables as HTML) -> ``findings`` (what a notebook established)
-> ``walkthrough`` (``kvlab walkthrough``: execute them all, summarise).
"""
