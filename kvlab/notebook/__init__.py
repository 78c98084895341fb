"""What the notebooks show: ``viz`` (figures), ``panel`` and ``widgets`` (live panels),
``parameters`` (each notebook's parameter check), ``tables``, ``findings`` and ``walkthrough``
(``kvlab walkthrough``: execute them all, summarise). Nothing below imports it."""
