"""kvlab.run.progress: a bar for anything slow, and none where TQDM_DISABLE is set (the
walkthrough's kernels, whose executed notebooks would keep a bar frozen mid-way)."""

from kvlab.run.progress import progress, rank_progress


def test_a_bar_counts_and_none_is_drawn_under_tqdm_disable(monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    bar = progress(range(3), desc="x")
    assert not bar.disable and list(bar) == [0, 1, 2]  # (a bar that ends disables itself)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    bar = progress(range(3), desc="x")
    assert bar.disable and list(bar) == [0, 1, 2]  # still iterates, draws nothing
    assert rank_progress(False, 4) is None and rank_progress(True, 4).disable
