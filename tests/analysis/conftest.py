from pathlib import Path

import pytest

from tests.support.analysis_tables import analysed, lab_like_samples, make_tables, settings
from tests.support.once import made_once

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tidy"


@pytest.fixture(scope="session")
def lab_tables():
    return make_tables(lab_like_samples(), failed={("vxlan", "tcp_crr"): 1})


@pytest.fixture(scope="session")
def default_report(tmp_path_factory):
    """The report of a real campaign (tests/fixtures/tidy/lab-default-003), analysed with a noise band of
    its own for latency_p99 and a declared contrast, rendered once for the session (also across
    pytest-xdist's workers): test_report checks what it holds, test_report_browser what Chromium shows of
    it (a render takes a minute or more on 2 cores). Each worker has the analysis of its own."""
    from benchlib.analysis import load_tables
    from benchlib.report import render as report

    campaign = "lab-default-003"
    runs, metrics = load_tables(FIXTURES / campaign / "runs.parquet", FIXTURES / campaign / "metrics.parquet")
    analysis_settings = settings().model_copy(
        update={"noise_band_pct": {"default": 2.0, "latency_p99": 5.0}, "contrasts": [("vxlan", "bridge")]}
    )

    def render(out: Path) -> None:
        analysis_dir, _ = analysed(runs, metrics, out / "data", analysis_settings)
        html = report.build_report(
            [f"notebooks/{n}" for n in report.NOTEBOOKS],
            out / "reports",
            {"analysis_dir": str(analysis_dir), "out_dir": str(out / "reports")},
        )
        (out / "html").write_text(str(html), encoding="utf-8")

    out = made_once(tmp_path_factory, "default-report", render)
    _, result = analysed(runs, metrics, tmp_path_factory.mktemp("default-analysis"), analysis_settings)
    html = Path((out / "html").read_text(encoding="utf-8"))
    return {"campaign": campaign, "runs": runs, "result": result, "html": html, "out": out / "reports"}
