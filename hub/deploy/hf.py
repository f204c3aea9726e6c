"""The Hugging Face Hub: publish a model card and its weights to a model repository, and load them back.

``attnhub publish RUN_DIR --name family.tag --to-hf OWNER/REPO`` publishes as usual, then :func:`upload` commits to
the repository (created if missing) the published card as ``card.json``, the weights it names, its OOD statistics'
sidecar when it has one, the fitted baseline of its predictor when it has one (:mod:`hub.predictor`), and a
``README.md`` model card (:func:`model_card_markdown`: YAML front matter the Hub
reads, the metrics over seeds, the data, the recipe, how to load).

``hub.load("hf-hub:OWNER/REPO")`` (or ``...@REVISION``: a branch, tag or commit) and ``attnhub predict hf-hub:...``
go through :func:`download_card`: ``card.json`` and the files it names are downloaded with ``huggingface_hub`` into
its cache (``HF_HOME``, ``HF_HUB_CACHE``), all of the one commit the revision resolves to, and the card comes back as
read from that snapshot folder, so its weights load like any local card's, their full sha256 checked
(:func:`hub.core.weights.load_state_dict`). ``HUB_OFFLINE=1`` or ``HF_HUB_OFFLINE=1`` reads the cache only.

``HF_ENDPOINT`` (read at each call, not only when ``huggingface_hub`` is imported) names another Hub-compatible
server; ``HF_TOKEN`` (or ``hf auth login``) the token to upload with. ``huggingface_hub`` is imported inside the
functions, so ``attnhub list`` does not pay for it.
"""
from __future__ import annotations

import os
from pathlib import Path

import yaml

from hub.core.cards import PretrainedCfg, read_card
from hub.core.weights import env_flag, is_offline, read_verified
from hub.errors import DownloadError, HubError, OfflineError, UnknownModelError, WeightsError
from hub.names import ModelRef, RefKind, check_repo_id, resolve

CARD_FILE = "card.json"  # a repository's model card, as hub.core.cards writes it
README_FILE = "README.md"
LIBRARY_NAME = "attention-hub"


def offline() -> bool:
    """``HUB_OFFLINE`` (:func:`hub.core.weights.is_offline`) or ``HF_HUB_OFFLINE`` set now, or ``huggingface_hub``'s
    offline mode (the variables as they were when it was imported)."""
    from huggingface_hub import constants

    return is_offline() or env_flag("HF_HUB_OFFLINE") or constants.HF_HUB_OFFLINE


def _endpoint() -> str | None:
    """``HF_ENDPOINT`` as it is now (None: ``huggingface_hub``'s default)."""
    return os.environ.get("HF_ENDPOINT", "").rstrip("/") or None


def _card_files(card: PretrainedCfg) -> list[tuple[str, str, bool]]:
    """The repository files beside ``card.json``, as ``(file, sha256, required)``: the weights; the OOD sidecar when
    the card has one (not required: predictions come without the OOD columns); the fitted baseline of the card's
    predictor when it has one (required when the predictor is the baseline or a blend, which ``predict`` follows)."""
    if not card.file:
        raise WeightsError(f"the card of {card.name} names no weights file")
    files = [(card.file, card.sha256, True)]
    if card.ood and card.ood.get("file"):
        files.append((card.ood["file"], card.ood["sha256"], False))
    predictor = getattr(card, "predictor", None) or {}
    if (predictor.get("baseline") or {}).get("file"):
        files.append((predictor["baseline"]["file"], predictor["baseline"]["sha256"],
                      predictor.get("chosen", "model") != "model"))
    return files


def _download(repo_id: str, filename: str, revision: str | None, name: str, local_only: bool) -> Path:
    """One file of ``repo_id`` at ``revision`` through ``huggingface_hub``'s cache; its errors as the hub's."""
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = _endpoint() or constants.ENDPOINT
    try:
        return Path(hf_hub_download(repo_id, filename, revision=revision, endpoint=_endpoint(),
                                    local_files_only=local_only))
    except LocalEntryNotFoundError as err:
        if local_only:
            raise OfflineError(f"{name}: {filename} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and "
                               "HUB_OFFLINE/HF_HUB_OFFLINE forbid downloading; load it once online") from err
        raise DownloadError(f"{name}: {filename} could not be downloaded from {where} and is not in the Hugging Face "
                            f"cache ({constants.HF_HUB_CACHE}): {err}") from err
    except RevisionNotFoundError as err:
        raise UnknownModelError(f"{name}: the repository {repo_id} at {where} has no revision {revision!r} "
                                "(a branch, tag or commit)") from err
    except RepositoryNotFoundError as err:
        raise UnknownModelError(f"{name}: no repository {repo_id} at {where} (or it is private or gated and "
                                "HF_TOKEN does not grant access)") from err
    except EntryNotFoundError:
        raise  # the caller knows whether the file is optional
    except (HfHubHTTPError, OSError) as err:
        raise DownloadError(f"{name}: download of {filename} from {repo_id} at {where} failed: {err}") from err


def download_card(name: str | ModelRef) -> PretrainedCfg:
    """The card of ``name`` (``"hf-hub:OWNER/REPO[@REVISION]"``) read from ``huggingface_hub``'s snapshot folder, with
    the weights (and OOD statistics) it names downloaded beside it from the same commit; the caller loads them, their
    sha256 checked, like those of any card (:func:`hub.models.load_from_card`)."""
    from huggingface_hub.errors import EntryNotFoundError

    ref = resolve(name)
    if ref.kind is not RefKind.HF_HUB:
        raise UnknownModelError(f"{ref.name!r} is not a Hugging Face Hub name: expected 'hf-hub:OWNER/REPO[@REVISION]'")
    name, repo_id, revision = ref.name, ref.repo, ref.revision
    local_only = offline()
    try:
        card_path = _download(repo_id, CARD_FILE, revision, name, local_only)
    except EntryNotFoundError as err:
        raise WeightsError(f"{name}: the repository {repo_id} has no {CARD_FILE}; `attnhub publish RUN_DIR --name "
                           "family.tag --to-hf OWNER/REPO` writes one with the weights it names") from err
    commit = card_path.parent.name  # the cache holds a revision's files in snapshots/<commit>/
    card = read_card(card_path)
    for filename, _, required in _card_files(card):
        try:
            _download(repo_id, filename, commit, name, local_only)
        except EntryNotFoundError as err:
            if required:
                raise WeightsError(f"{name}: the repository {repo_id} has no {filename}, which its card names") \
                    from err
            # an optional file (the OOD sidecar) missing: predictions come without its columns, and
            # hub.uncertainty.ood.load_detector warns
    return card


def _metric_rows(card: PretrainedCfg) -> list[str]:
    paper = ["paper"] if card.paper else []
    rows = ["| " + " | ".join(["metric", "mean", "std", "n", "per seed", *paper]) + " |",
            "|" + " --- |" * (5 + len(paper))]
    for key, value in card.metrics.items():
        cells = [f"`{key}`", f"{value['mean']:.4f}", f"{value['std']:.4f}", str(value["n"]),
                 ", ".join(f"{v:.4f}" for v in value["values"])]
        if card.paper:
            cells.append(f"{card.paper[key]:.4f}" if key in card.paper else "")
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def _predictor_lines(card: PretrainedCfg) -> list[str]:
    """The README's lines on the card's predictor (:mod:`hub.predictor`) when it is not the network alone."""
    predictor = getattr(card, "predictor", None) or {}
    chosen = predictor.get("chosen", "model")
    if chosen == "model":
        return []
    baseline = predictor["baseline"]
    what = (f"predicts with its baseline, {baseline['name']}" if chosen == "baseline" else
            f"predicts with a blend: {predictor['weight']:g} x the network + {1 - predictor['weight']:g} x "
            f"{baseline['name']}")
    return ["", "## Predictor", "", f"This model {what}, chosen on the validation split; the baseline is "
            f"`{baseline['file']}` (sha256 `{baseline['sha256']}`, checked at every load). `attnhub predict` "
            "follows it."]


def model_card_markdown(card: PretrainedCfg, repo_id: str, license_id: str) -> str:
    """The repository's ``README.md``: YAML front matter (``library_name``, ``license``, ``tags``, ``datasets``,
    ``metrics``), then the card's notes, the test metrics over seeds, the data, the recipe and how to load the
    model. Written from the card alone, so it holds no path of this machine when the card holds none."""
    metric_names = sorted({key.rpartition("/")[2] for key in card.metrics if not key.endswith("loss")})
    front = {"library_name": LIBRARY_NAME, "license": license_id, "tags": [LIBRARY_NAME, card.family, card.task],
             "datasets": [card.data["name"]] if card.data.get("name") else [], "metrics": metric_names}
    recipe = card.recipe or {}
    train = " ".join(["attnhub train", recipe.get("path") or "RECIPE", *recipe.get("overrides", [])])
    data = card.data
    lines = [
        "---", yaml.safe_dump(front, sort_keys=False).rstrip(), "---", "",
        f"# {card.name}", "",
        f"A `{card.family}` model for {card.task} ({card.num_params:,} parameters), published with Attention Hub.",
        *(["", f"Notes: {card.notes}"] if card.notes else []),
        "", "## Metrics", "",
        f"Test split: mean and standard deviation over the seeds {', '.join(map(str, recipe.get('seeds', [])))}.",
        "",
        *_metric_rows(card),
        *_predictor_lines(card),
        "", "## Data", "",
        f"`{data.get('name', 'unknown')}` with {data.get('args', {})}: {data.get('source', 'source not given')}; "
        f"licence: {data.get('license', 'not given')}; train/validation/test sizes {data.get('sizes', 'not given')}.",
        "", "## Recipe", "",
        f"Trained with `{train}`, once per seed (`seed=N`). The resolved recipe:", "",
        "```yaml", yaml.safe_dump(recipe.get("resolved", {}), sort_keys=False).rstrip(), "```",
        "", "## How to load", "",
        "```python", "import hub", "",
        f'model = hub.load("hf-hub:{repo_id}")  # or "hf-hub:{repo_id}@REVISION": a branch, tag or commit', "```",
        "", "```bash", f"attnhub predict hf-hub:{repo_id} INPUT_FILE", "```", "",
        f"`card.json` describes the model; the weights `{card.file}` are checked against its sha256 `{card.sha256}` "
        "at every load. `HUB_OFFLINE=1` (or `HF_HUB_OFFLINE=1`) loads from the Hugging Face cache only.", "",
    ]
    return "\n".join(lines)


def upload(card_path: str | os.PathLike, repo_id: str, license_id: str = "apache-2.0") -> str:
    """Commit the published card at ``card_path`` as ``card.json``, the files it names beside it (weights, OOD sidecar,
    the predictor's baseline; their sha256 checked first) and a ``README.md`` (:func:`model_card_markdown`) to the
    model repository ``repo_id``,
    created if missing; returns the commit's URL. The token is ``huggingface_hub``'s (``HF_TOKEN``,
    ``hf auth login``)."""
    from huggingface_hub import CommitOperationAdd, HfApi
    from huggingface_hub.errors import HfHubHTTPError

    check_repo_id(repo_id, repo_id)
    if offline():
        raise OfflineError(f"uploading to {repo_id} needs the network; unset HUB_OFFLINE and HF_HUB_OFFLINE")
    card_path = Path(card_path)
    card = read_card(card_path)
    files = {CARD_FILE: card_path.read_bytes(), README_FILE: model_card_markdown(card, repo_id, license_id).encode()}
    for filename, sha256, _ in _card_files(card):
        path = card_path.parent / filename
        if not path.is_file():
            raise WeightsError(f"{path.name} is missing beside the card {card_path.name}: the card names it")
        files[filename] = read_verified(path, sha256)
    api = HfApi(endpoint=_endpoint())
    try:
        api.create_repo(repo_id, exist_ok=True)
        commit = api.create_commit(repo_id, [CommitOperationAdd(path_in_repo=path, path_or_fileobj=data)
                                             for path, data in files.items()],
                                   commit_message=f"attnhub publish {card.name}")
    except (HfHubHTTPError, ValueError) as err:  # ValueError: the Hub refused the README's metadata
        raise HubError(f"upload of {card.name} to the Hugging Face Hub repository {repo_id} at "
                       f"{api.endpoint} failed: {err}") from err
    return commit.commit_url
