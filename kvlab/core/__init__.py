"""The mechanism: bytes, pages, rows, tiers, caches and state slots. It knows nothing of
admission or scheduling and imports nothing above it.

Reading order: ``geometry`` (bytes per token and page) -> ``memory`` (the quota a rank has
left) -> ``pool`` (the pages: one real tensor) -> ``page_index`` (the int32 table of rows and
its width policies; ``table_size`` its size) -> ``kv_cache`` (one sequence's record; ``resize``
in the native check order) -> ``manager`` (owns them all and alone moves pages; the
``max_seq_len`` clamp), with ``block_reuse`` and ``prefix_cache`` (committed pages), ``suspension``
and ``host_tier`` (the tier below) and ``manager_views`` beside it -> ``request`` -> ``mamba``
(recurrent-state slots) -> ``paged_attention`` (the table in use). ``checks`` holds the checks
of every public door and each parameter's bounds; ``paths`` where the repository's data lives.
"""
