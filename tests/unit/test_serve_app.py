"""``attnhub serve``'s application in process (FastAPI's TestClient, no server process): typed answers, the page and
``/models``, the upload limit, the token, the request timeout and the bounded queue (issue 69). The real server in a
subprocess, concurrency and the browser are in tests/integration/test_serve_runs.py."""
import io
import re

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
from fastapi.testclient import TestClient  # noqa: E402

from hub.deploy.serve import Limits, build_app, load_served, server_token, typed_row  # noqa: E402
from hub.errors import HubError  # noqa: E402

NAME = "vit_digits.sklearn"


@pytest.fixture(scope="module")
def model():
    return load_served(NAME)


def _png(value: int = 128) -> bytes:
    stream = io.BytesIO()
    Image.fromarray(np.full((8, 8), value, np.uint8), mode="L").save(stream, format="PNG")
    return stream.getvalue()


@pytest.fixture(scope="module")
def client(model):
    with TestClient(build_app(model, NAME, max_batch_size=8, max_wait_ms=1)) as client:
        yield client


def test_predictions_are_typed_and_name_the_weights(client, model):
    response = client.post("/predict", files=[("files", ("a.png", _png(), "image/png")),
                                              ("files", ("b.png", _png(30), "image/png"))], params={"top_k": 2})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == NAME and body["sha256"] == model.pretrained_cfg.sha256 and body["kind"] == "image"
    assert body["calibrated"] is ("temperature" in model.pretrained_cfg.calibration)
    first = body["predictions"][0]
    assert list(first) == ["file", "class_1", "prob_1", "class_2", "prob_2", "ood_score", "ood"]
    assert first["file"] == "a.png" and isinstance(first["class_1"], str)
    assert isinstance(first["prob_1"], float) and 0 <= first["prob_2"] <= first["prob_1"] <= 1
    assert isinstance(first["ood_score"], float) and isinstance(first["ood"], bool)


def test_the_schema_has_one_response_model_for_the_kind(client):
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    assert "ImagePredictResponse" in schemas and "ImagePrediction" in schemas
    row = schemas["ImagePrediction"]["properties"]
    assert row["ood"]["type"] == "boolean" and row["ood_score"]["type"] == "number"
    assert {"type": "number"} in row["prob_10"]["anyOf"] and "class_10" in row


def test_typed_row_converts_each_column():
    row = {"row": "3", "prediction": ">50K", "proba_<=50K": "0.25", "proba_>50K": "0.75", "ood_score": "1.5",
           "ood": "False"}
    assert typed_row(row, classifier=True) == {"row": 3, "prediction": ">50K", "proba_<=50K": 0.25,
                                               "proba_>50K": 0.75, "ood_score": 1.5, "ood": False}
    assert typed_row({"row": "1", "income": "12.5"}, classifier=False) == {"row": 1, "income": 12.5}


def test_a_bad_image_is_refused_naming_it(client):
    response = client.post("/predict", files=[("files", ("broken.png", b"not an image", "image/png"))])
    assert response.status_code == 422 and "broken.png" in response.json()["detail"]
    assert client.post("/predict", json={"rows": []}).status_code == 400


def test_the_page_and_models(client, model):
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "/predict" in page.text and "/models" in page.text
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page.text), "the page must load nothing from elsewhere"
    held = client.get("/models").json()["models"]
    assert [m["name"] for m in held] == [NAME]
    assert held[0]["kind"] == "image" and held[0]["card"]["sha256"] == model.pretrained_cfg.sha256
    assert held[0]["explain"] is True  # the page asks /explain only where the kind explains
    assert "card_dir" not in held[0]["card"]  # no machine path


def test_explain_gives_the_figure_or_says_why_not(client):
    good = client.post("/explain", files=[("files", ("a.png", _png(), "image/png"))])
    assert good.status_code == 200, good.text
    figures = good.json()["figures"]
    assert figures and figures[0]["png"].startswith("data:image/png;base64,")
    bad = client.post("/explain", files=[("files", ("broken.png", b"no", "image/png"))])
    assert bad.status_code == 422 and bad.json()["detail"].startswith("no attention map")


def test_an_upload_over_the_limit_is_refused_before_it_is_read(model):
    app = build_app(model, NAME, limits=Limits(max_upload_mb=0.01))
    big = b"x" * 20_000
    with TestClient(app) as client:
        declared = client.post("/predict", files=[("files", ("big.png", big, "image/png"))])
        assert declared.status_code == 413 and "--max-upload-mb" in declared.json()["detail"]
        streamed = client.post("/predict", content=iter([big[:8000]] * 3),  # chunked: no Content-Length
                               headers={"content-type": "multipart/form-data; boundary=x"})
        assert streamed.status_code == 413
        assert client.post("/predict", files=[("files", ("a.png", _png(), "image/png"))]).status_code == 200


def test_the_token_is_required_when_set(model):
    with TestClient(build_app(model, NAME, limits=Limits(token="s3cret"))) as client:
        upload = [("files", ("a.png", _png(), "image/png"))]
        assert client.post("/predict", files=upload).status_code == 401
        wrong = client.post("/predict", files=upload, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
        assert client.get("/models").status_code == 401
        assert client.post("/predict", files=upload, headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert client.get("/health").status_code == 200 and client.get("/").status_code == 200


def test_a_host_beyond_loopback_needs_a_token(monkeypatch):
    monkeypatch.delenv("ATTNHUB_TOKEN", raising=False)
    assert server_token("127.0.0.1", None) is None and server_token("::1", None) is None
    with pytest.raises(HubError, match="ATTNHUB_TOKEN"):
        server_token("0.0.0.0", None)
    assert server_token("0.0.0.0", "t") == "t"
    monkeypatch.setenv("ATTNHUB_TOKEN", "from-env")
    assert server_token("0.0.0.0", None) == "from-env"


def test_timeout_then_a_full_queue(model):
    """No worker runs (the client starts no lifespan): the first request waits past --timeout-s (504) and stays
    queued, so with --max-queue 1 the next is refused at once (503, Retry-After)."""
    client = TestClient(build_app(model, NAME, limits=Limits(timeout_s=0.2, max_queue=1)))
    upload = [("files", ("a.png", _png(), "image/png"))]
    late = client.post("/predict", files=upload)
    assert late.status_code == 504 and "--timeout-s" in late.json()["detail"]
    full = client.post("/predict", files=upload)
    assert full.status_code == 503 and full.headers["retry-after"] == "1"


def test_uploads_are_decoded_in_memory_and_a_batch_is_collated_once(model, monkeypatch):
    """Images: no temporary folder per request, and one collate (one model call) for a batch of requests."""
    import tempfile

    import torch.utils.data

    from hub.deploy.serve import BatchingPredictor, Job

    made = []
    monkeypatch.setattr(tempfile, "mkdtemp", lambda *a, **k: made.append(1) or pytest.fail("a temporary folder"))
    with TestClient(build_app(model, NAME)) as client:
        assert client.post("/predict", files=[("files", ("a.png", _png(), "image/png"))]).status_code == 200
    assert made == []
    predictor = BatchingPredictor(model, max_batch_size=64, max_wait_ms=0)
    assert predictor.in_memory
    inputs = predictor.decode(["a.png", "b.png"], [_png(10), _png(200)])
    jobs = [Job(None, [], {}, 1, 3, inputs=[x], names=[n]) for x, n in zip(inputs, ["a.png", "b.png"])] * 3
    collated = []
    original = torch.utils.data.default_collate
    monkeypatch.setattr(torch.utils.data, "default_collate", lambda batch: collated.append(len(batch)) or
                        original(batch))
    answers = predictor.answers(jobs)
    assert collated == [6] and [a[0]["file"] for a in answers] == ["a.png", "b.png"] * 3
    assert answers[0] == answers[2]  # the same image in one batch: the same answer


@pytest.mark.parametrize("kind_name", ["image", "audio"])
def test_reading_an_upload_from_memory_equals_reading_the_file(kind_name, tmp_path):
    """``read_bytes`` (serve, no temporary file) gives the model input ``predict``'s reader gives for the file."""
    import torch

    from hub.kinds import kind_of
    from hub.models import load

    if kind_name == "image":
        card = load(NAME).pretrained_cfg
        path = tmp_path / "a.png"
        path.write_bytes(_png(77))
        from vision.io import read_image
        expected = read_image(path, card.input_spec)
    else:
        import soundfile

        from audio.features import model_input
        card = load("ast_tiny.fsdd").pretrained_cfg
        path = tmp_path / "a.wav"
        t = np.arange(8000) / 8000
        soundfile.write(path, (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 8000)
        expected = model_input(str(path), card.input_spec)
    kind = kind_of(card)
    assert torch.equal(kind.read_bytes(card, path.read_bytes(), "a"), expected)
    with pytest.raises(HubError, match="upload.bin"):
        kind.read_bytes(card, b"garbage", "upload.bin")


def test_explain_sends_the_map_and_its_fields_when_explain_writes_them(client, monkeypatch):
    """Where explain writes ``X.npy`` (the map) and ``X.json`` beside ``X.png``, /explain sends them for the overlay."""
    import json

    import hub.kinds

    def fake_explain(card, model, inputs, out_dir, data=None):
        png = out_dir / "a_attention.png"
        png.write_bytes(_png())
        np.save(png.with_suffix(".npy"), np.eye(2, dtype=np.float32))
        png.with_suffix(".json").write_text(json.dumps({"method": "rollout", "class": "3", "probability": 0.9}))
        yield png

    monkeypatch.setattr(hub.kinds, "explain_inputs", fake_explain)
    figure = client.post("/explain", files=[("files", ("a.png", _png(), "image/png"))]).json()["figures"][0]
    assert figure["map"] == [[1.0, 0.0], [0.0, 1.0]]
    assert figure["meta"] == {"method": "rollout", "class": "3", "probability": 0.9}


def test_for_inference_lays_convolutions_out_channels_last_with_the_same_outputs():
    """Predict and serve run a convolutional model with channels-last weights (faster on CPU): the logits stay
    those of the default layout to rounding; a model without 2-d convolutions is left as it is."""
    import copy

    import torch

    import hub
    from hub.deploy.predict import for_inference

    torch.manual_seed(0)
    model = hub.create_model("airbench_cbam_micro_32", num_classes=3).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.inference_mode():
        expected = model(x)
        laid_out = for_inference(copy.deepcopy(model).train())
        convs = [m for m in laid_out.modules() if isinstance(m, torch.nn.Conv2d)]
        assert all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs if c.kernel_size != (1, 1))
        assert not laid_out.training
        assert torch.allclose(laid_out(x), expected, atol=1e-5)
    linear = torch.nn.Sequential(torch.nn.Linear(4, 2)).train()
    assert for_inference(linear) is linear and not linear.training
