"""Download progress: huggingface_hub's bars drawn as tasks of one Rich display (driven the way the hub
drives them), plain lines off a terminal, and the class reaching snapshot_download through the loader."""

from __future__ import annotations

import io

from rich.console import Console

from specli.models import loading
from specli.render.progress import Counted, loading_progress, new_progress, time_left, tqdm_for
from specli.wording import clock


def _console(terminal: bool) -> Console:
    return Console(file=io.StringIO(), force_terminal=terminal, width=100, record=True)


def test_byte_bar_the_way_huggingface_hub_grows_it():
    """snapshot_download makes a byte bar with total 0, then adds each file's size to `total` and calls
    update() as bytes arrive; the Rich task follows, and stays hidden while there is nothing to count."""
    from huggingface_hub.utils.tqdm import _create_progress_bar

    progress = new_progress(_console(True))
    bar = _create_progress_bar(
        cls=tqdm_for(progress, "org/model"), log_level=20, name="x", desc="Downloading", total=0, unit="B"
    )
    (task,) = progress.tasks
    assert task.description == "org/model: Downloading" and not task.visible
    bar.total = (bar.total or 0) + 1000
    bar.refresh()
    bar.update(250)
    assert (task.completed, task.total, task.visible) == (250, 1000, True)
    bar.update(750)
    bar.close()
    assert task.completed == task.total == 1000


def test_file_count_bar_through_the_hubs_thread_map():
    from huggingface_hub.utils import hf_thread_map

    progress = new_progress(_console(True))
    out = hf_thread_map(lambda x: x * 2, [1, 2, 3], desc="Fetching 3 files", tqdm_class=tqdm_for(progress))
    assert out == [2, 4, 6]
    (task,) = progress.tasks
    assert (task.completed, task.total, task.description) == (3, 3, "Fetching 3 files")


def test_older_hubs_thread_map_from_tqdm():
    from tqdm.contrib.concurrent import thread_map

    progress = new_progress(_console(True))
    assert thread_map(str, [1, 2], tqdm_class=tqdm_for(progress), desc="files") == ["1", "2"]
    assert progress.tasks[0].completed == 2


def test_off_a_terminal_a_byte_bar_prints_a_line_per_quarter():
    console = _console(False)
    progress = new_progress(console)
    bar = tqdm_for(progress, "org/model")(total=4_000_000, unit="B", desc="Downloading")
    for _ in range(8):
        bar.update(500_000)
    bar.close()
    lines = console.export_text().splitlines()
    assert lines == [
        "org/model: 1.0 MB of 4.0 MB (25%)",
        "org/model: 2.0 MB of 4.0 MB (50%)",
        "org/model: 3.0 MB of 4.0 MB (75%)",
        "org/model: 4.0 MB of 4.0 MB (100%)",
    ]


def test_a_cached_model_prints_nothing_off_a_terminal():
    console = _console(False)
    with loading_progress(console) as bars:
        bar = bars("org/model")(total=0, unit="B", desc="Downloading")
        bar.close()
    assert console.export_text() == ""


def test_loading_progress_is_one_display_in_a_terminal():
    console = _console(True)
    with loading_progress(console) as bars:
        bar = bars("org/model")(total=2_000_000, unit="B", desc="Downloading")
        bar.update(1_000_000)
        bar.close()
    drawn = console.export_text()
    assert "loading models…" in drawn and "org/model: Downloading" in drawn and "1.0 MB/2.0 MB" in drawn
    assert console.file.getvalue().endswith("\x1b[2K")  # transient: both lines erased when loading ends


def test_counted_prints_tenths_and_stages_off_a_terminal():
    """Piped, every stage says what it counts, then its count at every tenth with the time left, and the
    time it took; a similar stage is estimated from the previous one before its first unit."""
    now = [0.0]
    console = _console(False)
    with Counted(console, "bench", clock=lambda: now[0]) as counted:
        counted.stage("warm-up", 2)
        for _ in range(2):
            now[0] += 3
            counted.advance()
        counted.stage("measuring", 20, similar=True)
        for _ in range(20):
            now[0] += 3
            counted.advance()
        counted.stage("transformers generate()", 1)
        now[0] += 100
        counted.advance()
    lines = console.export_text().splitlines()
    assert lines[:4] == [
        "bench: warm-up: 2 runs",
        "bench: warm-up: 1/2 runs · about 0:03 left",
        "bench: warm-up: 2/2 runs · took 0:06",
        "bench: measuring: 20 runs, about 1:00 (at the previous stage's pace)",
    ]
    assert lines[4] == "bench: measuring: 2/20 runs · about 0:54 left"
    assert lines[13] == "bench: measuring: 20/20 runs · took 1:00" and len(lines) == 16
    assert lines[14:] == [
        "bench: transformers generate(): 1 run",
        "bench: transformers generate(): 1/1 run · took 1:40",
    ]


def test_counted_bar_estimates_time_left_when_each_unit_is_slow():
    """Bug: the terminal bar's ETA stayed -:--:-- (Rich's TimeRemainingColumn needs two updates within
    30 s; a bench run often takes longer). With 40 s per run the bar says how long is left."""
    now = [0.0]
    console = _console(True)
    with Counted(console, "bench", clock=lambda: now[0]) as counted:
        counted.stage("measuring", 4)
        counted.progress.refresh()
        assert "estimating…" in console.export_text(clear=False)
        for left in ("2:00", "1:20"):
            now[0] += 40
            counted.advance()
            counted.progress.refresh()
            drawn = console.export_text(clear=False)
            assert f"about {left} left" in drawn, drawn
    assert "-:--:--" not in console.export_text()


def test_counted_draws_a_bar_in_a_terminal():
    console = _console(True)
    with Counted(console, "bench", 4) as counted:
        counted.advance()
        counted.progress.refresh()
    assert "1/4" in console.export_text()


def test_time_left_and_clock():
    assert time_left(0, 10, 5.0) is None and time_left(2, None, 5.0) is None
    assert time_left(2, 10, 4.0) == 16.0  # 2 s per unit, 8 left
    assert time_left(0, 10, 4.0, per_unit=3.0) == 26.0  # the previous pace, less the time spent
    assert [clock(s) for s in (0, 7.4, 750, 3723)] == ["0:00", "0:07", "12:30", "1:02:03"]


def test_loading_announces_itself_off_a_terminal_when_asked():
    """Bug: piped, `bench` said nothing while the models loaded. With announce, a line when loading
    starts and one with the time it took; without (generate, explain), nothing."""
    console = _console(False)
    with loading_progress(console, announce="bench"):
        pass
    lines = console.export_text().splitlines()
    assert lines == ["bench: loading models…", "bench: models loaded in 0:00"]
    quiet = _console(False)
    with loading_progress(quiet):
        pass
    assert quiet.export_text() == ""


def test_resolve_source_hands_the_bars_to_snapshot_download(monkeypatch, tmp_path):
    import huggingface_hub

    console = _console(False)
    progress = new_progress(console)
    seen = {}

    def fake_snapshot_download(repo_id, **kwargs):
        seen.update(kwargs)
        if "tqdm_class" in kwargs:
            bar = kwargs["tqdm_class"](total=1_000_000, unit="B", desc="Downloading")
            bar.update(1_000_000)
            bar.close()
        return str(tmp_path)

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    loading.resolve_source("org/model", tqdm_class=tqdm_for(progress, "org/model"))
    assert "org/model: 1.0 MB of 1.0 MB (100%)" in console.export_text()
    seen.clear()
    loading.resolve_source("org/model")
    assert "tqdm_class" not in seen  # the hub's own bars unless asked
