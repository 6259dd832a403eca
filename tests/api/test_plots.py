"""run.plot(), `nnx runs plot` and `nnx runs compare`."""

from __future__ import annotations

import io

import pytest

import nnx_api as nnx
from nnx_api.cli import main

from tests.api.ecosystem_helpers import run_doc, train_digits

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("plots") / "runs"
    monitor = nnx.MonitorSpec(metric="nll")
    metrics = (nnx.MetricSpec(id="nll"),)
    _, fast = train_digits(root, epochs=4, lr=1e-2, metrics=metrics, monitor=monitor)
    _, slow = train_digits(root, epochs=4, lr=1e-3, metrics=metrics, monitor=monitor)
    return root, fast, slow


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def cli(*argv):
    out = io.StringIO()
    code = main(list(argv), out=out, err=out)
    return code, out.getvalue()


def test_run_plot_writes_a_png_with_a_panel_per_curve(two_runs, tmp_path):
    root, fast, _ = two_runs
    run = nnx.NNRun.load(fast.id, root)
    target = run.plot(tmp_path / "plots" / "run.png")
    width, height = png_size(target)
    assert width >= 800 and height >= 600
    assert target.stat().st_size > 20_000
    figure = run.plot()  # no path: the figure itself (notebooks display it)
    titles = [ax.get_title() for ax in figure.axes if ax.get_visible()]
    # nll equals the cross-entropy loss: one panel, named; F1 says it is macro-averaged
    assert titles == ["loss (= nll)", "accuracy", "f1 (macro)", "learning rate"]
    assert [ax.get_ylabel() for ax in figure.axes if ax.get_visible()] == titles
    loss = figure.axes[0]
    labels = [line.get_label() for line in loss.get_lines()]
    assert {"train", "validation"} <= set(labels)
    best = run.best()
    star = [line for line in loss.get_lines() if line.get_label().startswith("monitor val.nll")]
    assert len(star) == 1 and list(star[0].get_xdata()) == [best.epoch_idx]
    assert list(star[0].get_ydata()) == [best.selection.value]
    validation = next(line for line in loss.get_lines() if line.get_label() == "validation")
    assert list(validation.get_ydata()) == pytest.approx([run.epochs[e].val_edp.metrics["nll"] for e in range(4)], rel=1e-6)
    assert figure.axes[titles.index("learning rate")].get_yscale() == "log"
    assert f"BEST epoch {best.epoch_idx}" in figure.get_suptitle()


def test_nnx_runs_plot_writes_the_png(two_runs, tmp_path, monkeypatch):
    root, fast, _ = two_runs
    target = tmp_path / "fast.png"
    code, text = cli("runs", "plot", fast.id, "-o", str(target), "--root", str(root))
    assert code == 0 and f"wrote {target}" in text
    width, height = png_size(target)
    assert width >= 800 and height >= 600 and target.stat().st_size > 20_000
    monkeypatch.chdir(tmp_path)
    code, _ = cli("runs", "plot", fast.id, "--root", str(root))
    assert code == 0 and (tmp_path / f"{fast.id}.png").is_file()  # default name: <id>.png
    assert cli("runs", "plot", "0" * 32, "--root", str(root))[0] == 1  # no such run


def test_nnx_runs_compare_lists_differing_config_and_best_values(two_runs):
    root, fast, slow = two_runs
    code, text = cli("runs", "compare", fast.id, slow.id, "--root", str(root))
    assert code == 0, text
    lines = text.splitlines()
    assert lines[0].split() == [fast.id[:12], slow.id[:12]]
    differing = [line.split()[0] for line in lines[2 : lines.index(next(ln for ln in lines if ln.startswith("best")))]]
    assert differing == ["train.optim.max_lr"]  # the only configuration difference
    row = {line.split()[0]: line.split()[1:] for line in lines if line.startswith("  ")}
    assert row["train.optim.max_lr"] == ["0.01", "0.001"]
    for i, run in enumerate((fast, slow)):
        best = run.best()
        assert row["epoch"][i] == str(best.epoch_idx)
        assert row["monitor"][i] == "val.nll"
        assert row["value"][i] == f"{best.selection.value:.4g}"
        assert row["val/accuracy"][i] == f"{best.val_edp.accuracy:.4g}"


def test_plot_refuses_a_run_without_committed_epochs(tmp_path):
    run = nnx.NNRun(config={"net": {"input_dim": 1}}, root=tmp_path)
    with pytest.raises(ValueError, match="no committed epoch"):
        run.plot(tmp_path / "x.png")


def test_docs_plots_snippet_runs(tmp_path, monkeypatch):
    ns = run_doc("plots.md", tmp_path, monkeypatch)
    assert (tmp_path / "digits.png").is_file()
    assert ns["run"].best() is not None


def test_journal_runs_plot_and_log_every_batch_of_each_epoch(tmp_path):
    """A history journal keeps only `retention` records in memory: plots stream every committed
    record and the trackers (history_access="full") see the whole epoch, so both equal the eager run's."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from nnx_api.runs.curves import committed_records, run_series

    from tests.api.ecosystem_helpers import digits_loaders, digits_model

    train, val = digits_loaders()  # 6 batches per epoch, retention 3
    runs = {}
    for name, history in (("eager", None), ("journal", nnx.HistoryJournal(retention=3))):
        callback = nnx.TensorBoardCallback(log_dir=tmp_path / f"tb-{name}")
        params = nnx.NNTrainParams(n_epochs=3, train_loader=train, val_loader=val, seed=0)
        run = digits_model().train(params, callbacks=[callback], root=tmp_path / name, history=history)
        events = EventAccumulator(str(callback.path))
        events.Reload()
        runs[name] = nnx.NNRun.load(run.id, tmp_path / name), events
    (eager, eager_events), (journaled, journal_events) = runs["eager"], runs["journal"]
    assert len(journaled.idps) < len(list(committed_records(journaled))) == 18
    plotted = run_series(committed_records(journaled))["train_epoch/loss"]
    assert plotted == run_series(eager.idps)["train_epoch/loss"]
    logged = [e.value for e in journal_events.Scalars("train_epoch/loss")]
    assert logged == [e.value for e in eager_events.Scalars("train_epoch/loss")]
    assert logged == pytest.approx([v for _, v in plotted], rel=1e-6)
    assert png_size(journaled.plot(tmp_path / "journal.png"))[0] >= 800
