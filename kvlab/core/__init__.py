"""The mechanism: bytes, pages, rows, tiers, caches and state slots. It knows nothing of
admission or scheduling and imports nothing above it.

Reading order: ``geometry`` (bytes per token and page) -> ``memory`` (the quota a rank has
left) -> ``pool`` (the pages: one real tensor) -> ``page_index`` (the int32 table of rows and
its width policies) -> ``kv_cache`` (one sequence's pages; ``resize`` in the native check order)
-> ``host_tier`` (where suspended caches' pages go) -> ``manager`` (owns them all; the
``max_seq_len`` clamp) -> ``request`` -> ``mamba`` (recurrent-state slots beside the pages) ->
``paged_attention`` (the table in use). ``checks`` holds the argument checks of every public
door; ``paths`` where the repository's data lives.
"""
