"""`pipelines.validate --report FILE`: the comparison with a baseline as a page, beside the printed anomalies."""

import re

import pytest

from pipelines.ingest import run_ingest
from pipelines.validate import main
from tests.test_validate import OWN_LOGS, _log


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("validate_report")
    for name, seed, drift, day in (("train", 1, False, 0), ("drifted", 3, True, 1)):
        log = _log(root / f"{name}.tsv", seed, rows=1_500, drift=drift, day=day)
        run_ingest(["--input", str(log), "--config", OWN_LOGS, "--output", str(root / name)])
    return root


def _run(capsys, *argv):
    with pytest.raises(SystemExit) as exit_info:
        main(list(map(str, argv)))
        raise SystemExit(0)
    out = capsys.readouterr()
    return exit_info.value.code, out.out, out.err


def test_the_report_flags_what_is_printed_and_draws_the_baseline_beside(pair, capsys, tmp_path):
    own_report = (pair / "drifted" / "report.html").read_bytes()
    code, plain, _ = _run(capsys, pair / "drifted", "--baseline", pair / "train")
    page_path = tmp_path / "compared.html"
    code_with, printed, err = _run(capsys, pair / "drifted", "--baseline", pair / "train", "--report", page_path)
    assert code == code_with == 3 and printed == plain  # the same lines; the report is said on stderr
    assert f"wrote {page_path}" in err
    page = page_path.read_text()
    flags = page[page.index("<section id='flags'>"):page.index("<section id='run'>")]
    printed_pairs = {tuple(line.split("\t")[:2]) for line in printed.splitlines()}
    shown = set(re.findall(r"<tr><td><code>(\w+)</code></td><td class='warn'>(\w+)</td>", flags))
    assert shown == printed_pairs and {f for f, _ in shown} == {"item_id", "price"}
    assert str(pair / "train") in flags
    # Both sides drawn: each sparse feature's top values; the price's histogram (a time column is not compared).
    titles = re.findall(r"<title>([^<]*)</title>", page)
    assert sorted(t for t in titles if t.endswith("baseline and this ingest")) == [
        f"top values of {n}: baseline and this ingest" for n in ("item_id", "tags", "user_id")]
    assert [t for t in titles if t.startswith("baseline histogram")] == ["baseline histogram of price"]
    assert "1,500" in page[page.index("<section id='run'>"):]  # rows read, from the manifest
    # The ingest's own files are left as they were.
    assert (pair / "drifted" / "report.html").read_bytes() == own_report


def test_a_report_inside_the_ingest_output_is_refused(pair, capsys):
    code, _, err = _run(capsys, pair / "drifted", "--baseline", pair / "train", "--report",
                        pair / "drifted" / "report.html")
    assert code == 2 and "write the report outside" in err
