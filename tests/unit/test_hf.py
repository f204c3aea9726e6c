"""Hugging Face Hub interop (hub.deploy.hf) against a local server that answers the Hub's endpoints: no internet."""
import base64
import hashlib
import json
import shutil
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

import hub
from hub.cli import main
from hub.core.cards import absolute_paths
from hub.core.weights import load_state_dict, save_state_dict
from hub.deploy.hf import upload
from hub.deploy.publish import publish
from hub.errors import OfflineError, UnknownModelError, WeightsError

REPO_ID = "alice/digits"


class FakeHub(ThreadingHTTPServer):
    """The endpoints huggingface_hub calls to create a repository, commit files (each uploaded "regular", inline in the
    commit, so no LFS) and download a file (HEAD, then GET). Files are kept in memory per (repository, commit);
    ``refs`` maps (repository, branch or tag) to a commit; ``requests`` lists every request as (method, path)."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _HubHandler)
        self.repos: set[str] = set()
        self.files: dict[tuple[str, str], dict[str, bytes]] = {}
        self.refs: dict[tuple[str, str], str] = {}
        self.requests: list[tuple[str, str]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def commit(self, repo: str, files: dict[str, bytes], branch: str = "main") -> str:
        """A new commit on ``branch``: its parent's files with ``files`` added or replaced; returns its sha."""
        parent = self.files.get((repo, self.refs.get((repo, branch), "")), {})
        sha = hashlib.sha1(f"{repo}:{len(self.files)}".encode()).hexdigest()
        self.files[(repo, sha)] = {**parent, **files}
        self.refs[(repo, branch)] = sha
        return sha

    def head_files(self, repo: str = REPO_ID) -> dict[str, bytes]:
        return self.files[(repo, self.refs[(repo, "main")])]


class _HubHandler(BaseHTTPRequestHandler):
    server: FakeHub

    def log_message(self, *args):  # quiet
        pass

    def _reply(self, status: int, body: bytes = b"", headers: dict | None = None, send_body: bool = True):
        self.send_response(status)
        for key, value in {"Content-Length": str(len(body)), **(headers or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def _json(self, status: int, value, headers: dict | None = None):
        self._reply(status, json.dumps(value).encode(), {"Content-Type": "application/json", **(headers or {})})

    def do_POST(self):
        hub_ = self.server
        hub_.requests.append(("POST", self.path))
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        path = urllib.parse.urlsplit(self.path).path
        if path == "/api/repos/create":
            request = json.loads(body)
            repo = f"{request['organization']}/{request['name']}"
            url = {"url": f"{hub_.url}/{repo}"}
            if repo in hub_.repos:  # the Hub names the existing repository too
                return self._json(409, {"error": "You already created this model repo", **url})
            hub_.repos.add(repo)
            return self._json(200, url)
        if path == "/api/validate-yaml":
            return self._json(200, {})
        _, _, _, owner, name, action, revision = path.split("/")  # /api/models/OWNER/NAME/ACTION/REVISION
        repo = f"{owner}/{name}"
        if action == "preupload":
            return self._json(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                              for f in json.loads(body)["files"]]})
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        assert action == "commit" and all(line["key"] in ("header", "file") for line in lines), lines
        files = {line["value"]["path"]: base64.b64decode(line["value"]["content"]) for line in lines
                 if line["key"] == "file"}
        sha = hub_.commit(repo, files, urllib.parse.unquote(revision))
        return self._json(200, {"commitUrl": f"{hub_.url}/{repo}/commit/{sha}", "commitOid": sha})

    def _resolve(self, send_body: bool):
        hub_ = self.server
        hub_.requests.append((self.command, self.path))
        _, owner, name, _, revision, *parts = urllib.parse.urlsplit(self.path).path.split("/")  # OWNER/NAME/resolve/..
        repo, revision, filename = f"{owner}/{name}", urllib.parse.unquote(revision), "/".join(parts)
        if repo not in hub_.repos:
            return self._json(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
        commit = hub_.refs.get((repo, revision)) or (revision if (repo, revision) in hub_.files else None)
        if commit is None:
            return self._json(404, {"error": "Invalid rev id"}, {"X-Error-Code": "RevisionNotFound"})
        data = hub_.files[(repo, commit)].get(filename)
        if data is None:
            return self._json(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound",
                                                                  "X-Repo-Commit": commit})
        self._reply(200, data, {"X-Repo-Commit": commit, "ETag": f'"{hashlib.sha256(data).hexdigest()}"'},
                    send_body=send_body)

    def do_HEAD(self):
        self._resolve(send_body=False)

    def do_GET(self):
        self._resolve(send_body=True)


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    import huggingface_hub.constants

    server = FakeHub()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_TOKEN", "hf_dummy_token")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    yield server
    server.shutdown()
    server.server_close()


def _fake_run(repo, folder, seed: int, shift: float = 0.0):
    """A finished run folder holding the shipped vit_digits.sklearn weights (each float moved by ``shift``), its OOD
    statistics, its card and its test metrics as seed ``seed``'s."""
    shipped = repo / "vision" / "pretrained"
    card = json.loads((shipped / "vit_digits.sklearn.json").read_text())
    folder.mkdir(parents=True)
    state = load_state_dict(shipped / card["file"], card["sha256"])
    sha256 = save_state_dict({k: v + shift if v.is_floating_point() else v for k, v in state.items()},
                             folder / "model.safetensors")
    shutil.copy(shipped / card["ood"]["file"], folder / "ood.safetensors")
    card["recipe"]["resolved"]["seed"] = seed
    card.update(name="vit_digits.run", file="model.safetensors", sha256=sha256,
                num_bytes=(folder / "model.safetensors").stat().st_size, ood={**card["ood"], "file": "ood.safetensors"})
    (folder / "card.json").write_text(json.dumps(card))
    (folder / "metrics.json").write_text(json.dumps({"test": {k: v["values"][0] for k, v in card["metrics"].items()},
                                                     "epoch_selection": "the epoch of the best val/acc"}))
    return folder


def _publish(repo, tmp_path, label: str, shift: float = 0.0) -> str:
    """Publish a fake run as vit_digits.hf into its own folder and upload it to REPO_ID; returns the commit's sha."""
    run = _fake_run(repo, tmp_path / f"run-{label}", seed=0, shift=shift)
    url = upload(publish([str(run)], "vit_digits.hf", dest=str(tmp_path / f"pub-{label}")), REPO_ID)
    return url.rsplit("/", 1)[1]


def _same_outputs(a, b) -> bool:
    x = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return torch.equal(a(x), b(x))


def test_publish_to_hf_then_load_and_predict_like_the_local_tag(repo, tmp_path, fake_hub, capsys):
    run = _fake_run(repo, tmp_path / "run", seed=0)
    dest = tmp_path / "pub"
    assert main(["publish", str(run), "--name", "vit_digits.hf", "--dest", str(dest), "--to-hf", REPO_ID]) == 0
    files = fake_hub.head_files()
    assert set(files) == {"card.json", "vit_digits.hf.safetensors", "vit_digits.hf.ood.safetensors", "README.md"}
    assert files["card.json"] == (dest / "vit_digits.hf.json").read_bytes()
    assert files["vit_digits.hf.ood.safetensors"] == (dest / "vit_digits.hf.ood.safetensors").read_bytes()
    readme = files["README.md"].decode()
    _, front, body = readme.split("---\n", 2)
    meta = yaml.safe_load(front)
    assert meta["library_name"] == "attention-hub" and meta["license"] == "apache-2.0"
    assert "vit_digits" in meta["tags"] and meta["datasets"] == ["sklearn_digits"]
    assert "acc" in meta["metrics"] and "loss" not in meta["metrics"]
    assert "| `test/acc` |" in body and "recipes/vision/vit_digits_sklearn.yaml" in body
    assert f'hub.load("hf-hub:{REPO_ID}")' in body
    assert absolute_paths(readme.splitlines()) == [] and str(tmp_path) not in readme

    model = hub.load(f"hf-hub:{REPO_ID}")
    assert model.pretrained_cfg.name == "vit_digits.hf" and not model.training
    assert _same_outputs(model, hub.load("vit_digits.sklearn"))  # the same weights as the run's

    image = tmp_path / "digit.png"
    Image.fromarray((np.arange(64, dtype=np.uint8) * 4).reshape(8, 8)).save(image)
    capsys.readouterr()
    assert main(["predict", f"hf-hub:{REPO_ID}", str(image), "--no-progress"]) == 0
    from_hub = capsys.readouterr().out
    assert main(["predict", "vit_digits.sklearn", str(image), "--no-progress"]) == 0
    assert from_hub == capsys.readouterr().out and "digit.png" in from_hub  # OOD columns too: the sidecar came


def test_tampered_weights_on_the_hub_are_refused(repo, tmp_path, fake_hub):
    _publish(repo, tmp_path, "a")
    weights = bytearray(fake_hub.head_files()["vit_digits.hf.safetensors"])
    weights[-1] ^= 0xFF
    fake_hub.commit(REPO_ID, {"vit_digits.hf.safetensors": bytes(weights)})  # card.json unchanged
    with pytest.raises(WeightsError, match="sha256 mismatch"):
        hub.load(f"hf-hub:{REPO_ID}")
    with pytest.raises(UnknownModelError, match="no repository alice/nothing"):
        hub.load("hf-hub:alice/nothing")


def test_a_pinned_revision_loads_its_own_weights(repo, tmp_path, fake_hub):
    first = _publish(repo, tmp_path, "a")
    second = _publish(repo, tmp_path, "b", shift=0.5)
    assert first != second and fake_hub.refs[(REPO_ID, "main")] == second
    fake_hub.refs[(REPO_ID, "v1")] = first  # a tag
    shipped = hub.load("vit_digits.sklearn")
    assert not _same_outputs(hub.load(f"hf-hub:{REPO_ID}"), shipped)
    assert _same_outputs(hub.load(f"hf-hub:{REPO_ID}@{first}"), shipped)
    assert _same_outputs(hub.load(f"hf-hub:{REPO_ID}@v1"), shipped)
    with pytest.raises(UnknownModelError, match="has no revision 'v9'"):
        hub.load(f"hf-hub:{REPO_ID}@v9")


def test_offline_loads_from_a_warm_cache_without_a_request_and_names_the_repo_when_cold(repo, tmp_path, fake_hub,
                                                                                      monkeypatch):
    import huggingface_hub.constants

    _publish(repo, tmp_path, "a")
    online = hub.load(f"hf-hub:{REPO_ID}")
    requests = len(fake_hub.requests)
    for variable in ("HUB_OFFLINE", "HF_HUB_OFFLINE"):
        with monkeypatch.context() as offline:
            offline.setenv(variable, "1")
            assert _same_outputs(hub.load(f"hf-hub:{REPO_ID}"), online), variable
    assert len(fake_hub.requests) == requests  # the cache only
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "cold-cache"))
    with pytest.raises(OfflineError, match=f"hf-hub:{REPO_ID}: card.json is not in the Hugging Face cache"):
        hub.load(f"hf-hub:{REPO_ID}")
    assert len(fake_hub.requests) == requests


def _with_baseline_predictor(folder, tmp_path) -> np.ndarray:
    """Make the fake run at ``folder`` predict with a kept logistic regression on its 8x8 pixels (random arrays in
    :data:`hub.classical.LINEAR_ARRAYS`' layout) as its predictor's baseline; returns the regression's coef."""
    from hub.core.weights import sha256_bytes
    from hub.predictor import save_arrays

    rng = np.random.default_rng(0)
    coef = rng.normal(size=(10, 64))
    save_arrays({"mean": np.zeros(64), "scale": np.ones(64), "coef": coef, "intercept": np.zeros(10),
                 "classes": np.arange(10), "num_classes": np.array([10])}, folder / "baseline.safetensors")
    card = json.loads((folder / "card.json").read_text())
    card["predictor"] = {"chosen": "baseline", "weight": 0.0, "metric": "acc",
                         "baseline": {"name": "logistic regression on pixels", "file": "baseline.safetensors",
                                      "sha256": sha256_bytes((folder / "baseline.safetensors").read_bytes())}}
    (folder / "card.json").write_text(json.dumps(card))
    return coef


def test_a_baseline_predictor_goes_to_the_hub_and_predicts_from_it(repo, tmp_path, fake_hub, capsys):
    run = _fake_run(repo, tmp_path / "run", seed=0)
    _with_baseline_predictor(run, tmp_path)
    dest = tmp_path / "pub"
    assert main(["publish", str(run), "--name", "vit_digits.hf", "--dest", str(dest), "--to-hf", REPO_ID]) == 0
    files = fake_hub.head_files()
    assert files["vit_digits.hf.baseline.safetensors"] == (dest / "vit_digits.hf.baseline.safetensors").read_bytes()
    assert "predicts with its baseline, logistic regression on pixels" in files["README.md"].decode()

    image = tmp_path / "digit.png"
    Image.fromarray((np.arange(64, dtype=np.uint8) * 4).reshape(8, 8)).save(image)
    capsys.readouterr()
    assert main(["predict", f"hf-hub:{REPO_ID}", str(image), "--no-progress"]) == 0
    from_hub = capsys.readouterr().out
    assert main(["predict", str(run), str(image), "--no-progress"]) == 0  # the run folder itself
    local = capsys.readouterr().out
    assert from_hub == local and "digit.png" in from_hub
    assert main(["predict", "vit_digits.sklearn", str(image), "--no-progress"]) == 0
    assert capsys.readouterr().out != from_hub  # the baseline answered, not the network

    baseline = bytearray(files["vit_digits.hf.baseline.safetensors"])
    baseline[-1] ^= 0xFF
    fake_hub.commit(REPO_ID, {"vit_digits.hf.baseline.safetensors": bytes(baseline)})  # card.json unchanged
    capsys.readouterr()
    assert main(["predict", f"hf-hub:{REPO_ID}", str(image), "--no-progress"]) != 0
    error = capsys.readouterr().err
    assert "sha256 mismatch" in error and "vit_digits.hf.baseline.safetensors" in error
