"""``attnhub serve``: the real server in a subprocess, called over HTTP, answers what ``attnhub predict`` writes."""
import contextlib
import csv
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from PIL import Image

from hub.cli import main
from hub.deploy.serve import typed_row

httpx = pytest.importorskip("httpx")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STARTUP_S = 180  # the server imports torch and loads the model first; a bound, not a timing check
PROB_TOLERANCE = 1e-5  # batched CPU matmuls round a probability's 6th decimal differently (see hub/deploy/serve.py)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def _served(name: str, log_path, *options: str):
    """The base URL of ``python -m hub serve NAME`` on a free port of 127.0.0.1, stopped on exit."""
    port = _free_port()
    env = {**os.environ, "HUB_OFFLINE": "1"}
    with open(log_path, "w") as log:
        server = subprocess.Popen([sys.executable, "-m", "hub", "serve", name, "--port", str(port), *options],
                                  cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            if server.poll() is not None:
                pytest.fail(f"the server exited with {server.returncode}:\n{open(log_path).read()}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"the server did not answer /health within {STARTUP_S} s:\n{open(log_path).read()}")
            time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="module")
def digits_server(tmp_path_factory):
    log = tmp_path_factory.mktemp("serve") / "server.log"
    with _served("vit_digits.sklearn", log, "--max-batch-size", "16", "--max-wait-ms", "20") as url:
        yield url


@pytest.fixture(scope="module")
def digit_pngs(tmp_path_factory):
    """40 digits of scikit-learn's test end as PNG files, and ``attnhub predict``'s rows for them (top 3)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    folder = tmp_path_factory.mktemp("pngs")
    paths = []
    for i in range(len(digits.target) - 40, len(digits.target)):
        paths.append(folder / f"digit{i}.png")
        Image.fromarray(np.round(digits.images[i] * 255 / 16).astype(np.uint8), mode="L").save(paths[-1])
    out = folder / "predict.csv"
    assert main(["predict", "vit_digits.sklearn", *map(str, paths), "--out", str(out), "--no-progress"]) == 0
    expected = {os.path.basename(row["file"]): row for row in csv.DictReader(open(out))}
    assert len(expected) == len(paths)
    return paths, expected


def _post_files(client, url: str, paths, **params):
    files = [("files", (p.name, p.read_bytes(), "image/png")) for p in paths]
    return client.post(f"{url}/predict", files=files, params=params)


def _assert_as_predicted(predictions: list[dict], paths, expected: dict) -> None:
    """The server's answer for ``paths``: predict's columns and classes, and its probabilities to float rounding."""
    assert [p["file"] for p in predictions] == [p.name for p in paths]
    for answer in predictions:
        row = expected[answer["file"]]
        assert list(answer) == list(row)
        for column, cell in answer.items():  # typed JSON: numbers, a boolean, text
            if column.startswith("prob_") or column == "ood_score":
                assert isinstance(cell, float) and abs(cell - float(row[column])) <= PROB_TOLERANCE, (answer, row)
            elif column == "ood":
                assert isinstance(cell, bool) and str(cell) == row[column], (answer, row)
            elif column != "file":
                assert cell == row[column], (answer, row)


def test_answers_equal_predict(digits_server, digit_pngs):
    paths, expected = digit_pngs
    with httpx.Client(timeout=60) as client:
        health = client.get(f"{digits_server}/health").json()
        assert health["model"] == "vit_digits.sklearn" and health["kind"] == "image"
        response = _post_files(client, digits_server, paths)  # 40 files, more than --max-batch-size 16
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["model"] == "vit_digits.sklearn"
        _assert_as_predicted(body["predictions"], paths, expected)
        top1 = _post_files(client, digits_server, paths[:2], top_k=1).json()["predictions"]
        assert [list(p) for p in top1] == [["file", "class_1", "prob_1", "ood_score", "ood"]] * 2
        assert [p["class_1"] for p in top1] == [expected[p.name]["class_1"] for p in paths[:2]]


def test_200_concurrent_requests_all_answered_and_batched(digits_server, digit_pngs):
    paths, expected = digit_pngs
    rng = np.random.default_rng(0)
    requests = [[paths[i] for i in rng.choice(len(paths), size=rng.integers(1, 4), replace=False)]
                for _ in range(200)]
    with httpx.Client(timeout=120) as client:
        before = client.get(f"{digits_server}/health").json()
        with ThreadPoolExecutor(max_workers=16) as pool:
            responses = list(pool.map(lambda files: _post_files(client, digits_server, files), requests))
        after = client.get(f"{digits_server}/health").json()
    assert [r.status_code for r in responses] == [200] * len(requests)
    for files, response in zip(requests, responses):
        _assert_as_predicted(response.json()["predictions"], files, expected)
    assert after["requests"] - before["requests"] == len(requests)
    # 16 clients at once: requests that queue while the model runs share a batch
    assert after["batches"] - before["batches"] < len(requests)


def test_a_corrupt_file_fails_its_own_request_only(digits_server, digit_pngs, tmp_path):
    paths, expected = digit_pngs
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not an image")
    requests = [[paths[0], broken], *([p] for p in paths[1:9])]
    with httpx.Client(timeout=60) as client:
        with ThreadPoolExecutor(max_workers=len(requests)) as pool:
            responses = list(pool.map(lambda files: _post_files(client, digits_server, files), requests))
        assert responses[0].status_code == 422
        detail = responses[0].json()["detail"]
        assert "broken.png" in detail and "not a valid image" in detail and str(tmp_path) not in detail
        for files, response in zip(requests[1:], responses[1:]):
            assert response.status_code == 200, response.text
            _assert_as_predicted(response.json()["predictions"], files, expected)
        after = _post_files(client, digits_server, paths[-1:])
        assert after.status_code == 200
        _assert_as_predicted(after.json()["predictions"], paths[-1:], expected)
        wrong_body = client.post(f"{digits_server}/predict", json={"rows": [{"a": 1}]})
        assert wrong_body.status_code == 400 and "multipart/form-data" in wrong_body.json()["detail"]


def test_table_model_answers_json_rows_as_predict(tmp_path):
    import pandas as pd

    from tabular.data import ADULT_COLUMNS, data_file

    test_rows = data_file("adult.test")  # first, so a missing Adult skips (tests/conftest.py)
    raw = pd.read_csv(test_rows, header=None, names=ADULT_COLUMNS, skipinitialspace=True, skiprows=1,
                      nrows=6).drop(columns="income")  # raw rows, '?' (missing) and all
    raw.to_csv(tmp_path / "rows.csv", index=False)
    assert main(["predict", "mlp.adult", "--data", str(tmp_path / "rows.csv"), "--out", str(tmp_path / "p.csv")]) == 0
    expected = list(csv.DictReader(open(tmp_path / "p.csv")))
    rows = [{column: None if value == "?" else value for column, value in row.items()}  # missing: '?' or null
            for row in csv.DictReader(open(tmp_path / "rows.csv"))]
    assert any(value is None for row in rows for value in row.values())
    with _served("mlp.adult", tmp_path / "server.log") as url, httpx.Client(timeout=60) as client:
        response = client.post(f"{url}/predict", json={"rows": rows})
        assert response.status_code == 200, response.text
        typed = [typed_row(row, classifier=True) for row in expected]
        assert response.json()["predictions"] == typed  # one request's rows: one model call, as predict's
        bad = client.post(f"{url}/predict", json={"rows": [{"age": 39}]})
        assert bad.status_code == 422 and "missing" in bad.json()["detail"]
        csv_upload = client.post(f"{url}/predict", files=[("files", ("rows.csv", (tmp_path / "rows.csv").read_bytes(),
                                                                     "text/csv"))])
        assert csv_upload.status_code == 200, csv_upload.text
        assert csv_upload.json()["predictions"] == typed  # the page uploads a table model's CSV file


def test_a_failing_batch_is_answered_request_by_request(digit_pngs, tmp_path):
    from hub.deploy.serve import BatchingPredictor, Job, load_served
    from hub.errors import DataError

    paths, expected = digit_pngs
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not an image")
    predictor = BatchingPredictor(load_served("vit_digits.sklearn"), max_batch_size=16, max_wait_ms=0)
    jobs = [Job(path.parent, [path], {str(path): path.name}, 1, 3) for path in (paths[0], broken, paths[1])]
    first, failed, last = predictor.answers(jobs)
    assert isinstance(failed, DataError) and "broken.png" in jobs[1].client_text(str(failed))
    _assert_as_predicted([typed_row(row, classifier=True) for row in first], paths[:1], expected)
    _assert_as_predicted([typed_row(row, classifier=True) for row in last], paths[1:2], expected)


def test_serve_refuses_a_model_without_a_card(capsys):
    assert main(["serve", "vit_digits", "--port", "1"]) == 2
    assert "takes a pretrained tag (family.tag) or a run folder" in capsys.readouterr().err


def test_the_page_in_a_headless_browser(digits_server, digit_pngs, tmp_path):
    """Debian's chromium, driven by Selenium (its WebDriver client, over the system chromedriver): load the page,
    upload a digit, read the rendered top-k and OOD line, and keep a screenshot."""
    import shutil

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        pytest.skip("chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install '.[test]')")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    paths, expected = digit_pngs
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1000,900"):
        options.add_argument(flag)
    browser = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))
    try:
        browser.get(digits_server + "/")
        WebDriverWait(browser, 60).until(lambda b: "vit_digits.sklearn" in b.find_element(By.ID, "title").text)
        assert "calibrated" in browser.find_element(By.ID, "card").text
        browser.find_element(By.ID, "files").send_keys(str(paths[0]))
        WebDriverWait(browser, 60).until(lambda b: b.find_element(By.ID, "status").text.startswith("done"))
        WebDriverWait(browser, 60).until(lambda b: b.find_elements(By.CSS_SELECTOR, "img.explained"))
        labels = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".prediction .label")]
        probs = [float(e.text) for e in browser.find_elements(By.CSS_SELECTOR, ".prediction .prob")]
        row = expected[paths[0].name]
        assert labels[0] == row["class_1"] and abs(probs[0] - float(row["prob_1"])) < 1e-3
        assert probs == sorted(probs, reverse=True) and len(labels) == 5
        ood_line = browser.find_element(By.CSS_SELECTOR, ".prediction .ood, .prediction .ok").text
        assert "OOD score" in ood_line
        browser.save_screenshot(str(tmp_path / "page.png"))
        assert (tmp_path / "page.png").stat().st_size > 1000
    finally:
        browser.quit()
