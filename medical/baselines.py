"""The classical baselines of the medical runs, fitted on the training split of a finished run (its ``recipe.yaml``
rebuilds the split) and scored on its test split under the run's own metric names, for the comparison that
``attnhub finetune`` prints and keeps:

- survival tables: a Cox proportional-hazards model (scikit-survival's ``CoxPHSurvivalAnalysis``, Efron's ties, a
  small ridge penalty so that collinear covariates, such as a categorical column's indicators, keep it stable) on
  the run's encoded and standardised covariates (genes, masked ones at the training mean, then clinical); Harrell's
  and Uno's C of its linear predictor, as ``test/cindex`` and ``test/uno_c``. With the run's model, also the
  :class:`~hub.kinds.PredictorData` from which ``finetune`` chooses the run's predictor (:mod:`hub.predictor`):
  both members' risks on the validation and test splits, rank-normalised against their own validation risks (the
  blend averages ranks: a network's risk and the Cox linear predictor are on different scales); the fitted model
  is kept as its arrays (coefficients, Breslow's baseline cumulative hazard and survival, and the two members'
  validation risks that the ranks are taken against) in ``baseline.safetensors``, no pickle;
- ICU stays: a logistic regression on per-variable summaries of each stay (last, mean, min and max of the hourly
  values, the number of hours with an observation: 48 times one minus the missing share, the same feature up to
  sign after the quantile scaling) and the run's admission descriptors; missing summaries at the training mean,
  then every feature mapped to a normal distribution by its training quantiles (robust to the outliers of raw lab
  values), a ridge penalty ``C=0.1``; ``test/auroc``, ``test/auprc`` and ``test/acc``. With the run's model, also the
  :class:`~hub.kinds.PredictorData` of both (class probabilities, the model's with its card's temperature, on the
  validation and test stays); the fitted pipeline is kept as ``baseline.skops`` (:data:`ICU_BASELINE_FILE`), read
  back only through :data:`ICU_TRUSTED_TYPES`, and predicts a record file from the same features
  (:func:`logistic_regression_outputs`).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from hub.core.weights import sha256_bytes
from hub.errors import HubError
from hub.kinds import BaselineResult, CrossValidation, PredictorData
from hub.predictor import blend_of, load_skops, model_outputs, probabilities, rank_scores, save_arrays, save_skops
from medical.icu_data import read_record, stay_arrays, summary_features
from medical.survival_metrics import harrell_c, survival_array, uno_c

COXPH_RIDGE = 0.1  # scikit-survival's alpha: 0.05 * |w|^2 against a partial log-likelihood summed over patients
COX_FILE = "baseline.safetensors"
# the arrays of a kept CoxPH: coefficients (P,) over the covariates (genes, then clinical), Breslow's baseline
# cumulative hazard (its times and values) and survival, the validation risks of the model and of CoxPH (the ranks'
# references)
COX_ARRAYS = ("coef", "baseline_time", "cum_baseline_hazard", "baseline_survival", "model_reference",
              "baseline_reference")
SURVIVAL_BASELINES = ("CoxPH", "random survival forest")  # in the choice by folds of a small survival table
RSF_ARGS = {"n_estimators": 200, "min_samples_leaf": 10, "max_features": "sqrt", "n_jobs": 1}
RSF_FILE = "baseline_forest.skops"
# the types of a fitted random survival forest that skops does not trust by default: its allow-list
RSF_TYPES = ("sklearn.tree._tree.Tree", "sksurv.ensemble.forest.RandomSurvivalForest", "sksurv.tree.tree.SurvivalTree")
ICU_BASELINE_FILE = "baseline.skops"
# the one type of the ICU pipeline (SimpleImputer, QuantileTransformer, LogisticRegression) that skops does not trust
# by default: the imputer's fitted dtype; loading a file that holds any other is refused
ICU_TRUSTED_TYPES = ("numpy.dtype",)


def _run_data(run_dir):
    """The set-up data module of the run's recipe (the same split as its training) and the recipe's seed."""
    from hub.recipe import load_recipe
    from hub.run.train import build_data

    recipe = load_recipe(Path(run_dir) / "recipe.yaml")
    return build_data(recipe), recipe.seed


def _covariates(rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (N, G + C) covariates of :class:`medical.survival_data.SurvivalRows`, their times (N,) and events (N,)."""
    target = rows.target.numpy()
    return np.concatenate([rows.genes.numpy(), rows.clinical.numpy()], 1), target[:, 0], target[:, 1]


def coxph_baseline(datamodule, model=None) -> BaselineResult:
    """CoxPH fitted on the training split of a set-up survival data module, scored on its test split; its
    predictions are each test patient's time, event and risk (the linear predictor, a log hazard ratio). With
    ``model`` (the run's, loaded), also the predictor data of both (:func:`survival_predictor_data`)."""
    from sksurv.linear_model import CoxPHSurvivalAnalysis

    x, time, event = _covariates(datamodule.train_set)
    x_test, time_test, event_test = _covariates(datamodule.test_set)
    cox = CoxPHSurvivalAnalysis(alpha=COXPH_RIDGE, ties="efron").fit(x, survival_array(time, event))
    risk = cox.predict(x_test)
    metrics = {"test/cindex": harrell_c(time_test, event_test, risk),
               "test/uno_c": uno_c(time, event, time_test, event_test, risk)}
    result = BaselineResult("CoxPH", metrics, {"time": time_test.tolist(), "event": event_test.astype(int).tolist(),
                                               "risk": risk.tolist()})
    if model is None:
        return result
    return dataclasses.replace(result, predictor=survival_predictor_data(datamodule, model, cox))


def survival_predictor_data(datamodule, model, cox) -> PredictorData:
    """The validation and test labels (time, event) and rank-normalised risks of the run's ``model`` and the fitted
    ``cox`` (each against its own validation risks, :func:`hub.predictor.rank_scores`; no label is read for the
    ranks), and how to save the Cox model's arrays into a run folder (:data:`COX_FILE`)."""
    splits = {"val": datamodule.val_set, "test": datamodule.test_set}
    ours = {k: model_outputs(model, d).reshape(-1) for k, d in splits.items()}
    theirs = {k: cox.predict(_covariates(d)[0]) for k, d in splits.items()}
    hazard = cox.cum_baseline_hazard_
    arrays = {"coef": np.asarray(cox.coef_, np.float64), "baseline_time": np.asarray(hazard.x, np.float64),
              "cum_baseline_hazard": np.asarray(hazard.y, np.float64),
              "baseline_survival": np.asarray(cox.baseline_survival_.y, np.float64),
              "model_reference": np.sort(ours["val"]), "baseline_reference": np.sort(theirs["val"])}
    return PredictorData(
        task="survival", labels={k: d.target.numpy().astype(np.float64) for k, d in splits.items()},
        model={k: rank_scores(v, arrays["model_reference"]) for k, v in ours.items()},
        baseline={k: rank_scores(v, arrays["baseline_reference"]) for k, v in theirs.items()},
        save=lambda run_dir: save_arrays(arrays, Path(run_dir) / COX_FILE))


def cox_risk(arrays: dict[str, np.ndarray], inputs: dict) -> np.ndarray:
    """The kept CoxPH's risks (its linear predictor) for the survival models' keyword ``inputs``
    (:func:`medical.io.survival_inputs`: standardised ``genes``, 0 where not measured, then ``clinical``), as it
    was fitted on them. Shapes: -> (N,)."""
    parts = [inputs["genes"].numpy()] if "genes" in inputs else []
    x = np.concatenate([*parts, inputs["clinical"].numpy()], 1).astype(np.float64)
    if x.shape[1] != len(arrays["coef"]):
        raise HubError(f"the kept CoxPH takes {len(arrays['coef'])} covariates but the rows give {x.shape[1]}")
    return x @ arrays["coef"]


def ranked_blend(arrays: dict[str, np.ndarray], weight: float, model_risk, baseline_risk) -> np.ndarray:
    """``weight`` times the ranks of the model's risks plus ``1 - weight`` times those of CoxPH's, each against
    its validation risks kept in ``arrays``, as the blend was chosen (:func:`survival_predictor_data`)."""
    return (weight * rank_scores(model_risk, arrays["model_reference"])
            + (1 - weight) * rank_scores(baseline_risk, arrays["baseline_reference"]))


def coxph_on_run_split(run_dir) -> BaselineResult:
    """:func:`coxph_baseline` on the split of ``run_dir``, with the predictor data of it and the run's model (its
    best weights)."""
    from hub.models import load

    return coxph_baseline(_run_data(run_dir)[0], model=load(str(run_dir)))


def fit_survival_baseline(name: str, x: np.ndarray, time: np.ndarray, event: np.ndarray, seed: int = 0):
    """One of :data:`SURVIVAL_BASELINES` fitted on covariates ``x`` (N, P), times and events (N,); its
    ``predict(x)`` gives risks, higher for an earlier event: CoxPH with a ridge penalty (:data:`COXPH_RIDGE`), or
    scikit-survival's random survival forest (:data:`RSF_ARGS`; its risk: the predicted cumulative hazard summed
    over the training event times)."""
    from sksurv.ensemble import RandomSurvivalForest
    from sksurv.linear_model import CoxPHSurvivalAnalysis

    if name not in SURVIVAL_BASELINES:
        raise HubError(f"unknown survival baseline {name!r}; expected one of {list(SURVIVAL_BASELINES)}")
    model = (CoxPHSurvivalAnalysis(alpha=COXPH_RIDGE, ties="efron") if name == "CoxPH"
             else RandomSurvivalForest(**RSF_ARGS, random_state=seed))
    return model.fit(x, survival_array(time, event))


def survival_cross_validation(run_dir) -> CrossValidation:
    """The choice by folds of a survival table's run (:class:`hub.kinds.CrossValidation`): folds of the patients
    outside the test split (``data.args.cv_fold``, stratified by event), CoxPH and the random survival forest out of
    fold, and the refit on every patient (``data.args.refit``). Every member's out-of-fold risks are rank-normalised
    within their fold (:func:`hub.predictor.rank_scores` against themselves), so that folds whose models score on
    different scales pool into one Harrell's C."""
    from hub.models import load
    from hub.recipe import apply_overrides, load_recipe, validate_recipe
    from hub.run.train import build_data

    recipe = load_recipe(Path(run_dir) / "recipe.yaml")
    data, seed = build_data(recipe), recipe.seed
    model = load(str(run_dir))
    ours = {k: model_outputs(model, getattr(data, f"{k}_set")).reshape(-1) for k in ("val", "test")}

    def within(risk):
        return rank_scores(risk, risk)

    def fold_outputs(fold_dir):
        fold_data = _run_data(fold_dir)[0]
        return within(model_outputs(load(str(fold_dir)), fold_data.val_set).reshape(-1))

    def baselines(folds, fold_seed):
        out = {name: np.full(len(data.pool_labels), np.nan) for name in SURVIVAL_BASELINES}
        for index, (_, val) in enumerate(folds):
            fold = validate_recipe(apply_overrides(recipe.to_dict(), [f"data.args.cv_fold=[{len(folds)},{index},"
                                                                       f"{fold_seed}]"]), f"fold {index}")
            fold_data = build_data(fold)
            x_val = _covariates(fold_data.val_set)[0]
            for name in SURVIVAL_BASELINES:
                out[name][val] = within(fit_survival_baseline(name, *_covariates(fold_data.train_set), seed)
                                        .predict(x_val))
        return out

    def test(name):
        pooled = [np.concatenate(parts) for parts in zip(_covariates(data.train_set), _covariates(data.val_set))]
        fitted = fit_survival_baseline(name, *pooled, seed)
        theirs = {k: fitted.predict(_covariates(getattr(data, f"{k}_set"))[0]) for k in ("val", "test")}
        return (data.test_set.target.numpy().astype(np.float64), rank_scores(ours["test"], ours["val"]),
                rank_scores(theirs["test"], theirs["val"]))

    def refit(name, out_dir):
        final_data = _run_data(out_dir)[0]  # the refit's data: every patient trains, standardised as its card
        fitted = fit_survival_baseline(name, *_covariates(final_data.train_set), seed)
        x_val = _covariates(final_data.val_set)[0]
        arrays = {"model_reference": np.sort(model_outputs(load(str(out_dir)), final_data.val_set).reshape(-1)),
                  "baseline_reference": np.sort(fitted.predict(x_val))}
        if name == "CoxPH":
            hazard = fitted.cum_baseline_hazard_
            arrays.update({"coef": np.asarray(fitted.coef_, np.float64),
                           "baseline_time": np.asarray(hazard.x, np.float64),
                           "cum_baseline_hazard": np.asarray(hazard.y, np.float64),
                           "baseline_survival": np.asarray(fitted.baseline_survival_.y, np.float64)})
        else:  # the forest in its skops file, whose sha256 the (checked) arrays carry
            forest = save_skops(fitted, Path(out_dir) / RSF_FILE)
            arrays["forest_sha256"] = np.frombuffer(bytes.fromhex(sha256_bytes(forest.read_bytes())), np.uint8)
        return save_arrays(arrays, Path(out_dir) / COX_FILE)

    return CrossValidation(
        task="survival", labels=data.pool_labels, label_names=None, groups=None,
        fold_overrides=lambda k, index, fold_seed: [f"data.args.cv_fold=[{k},{index},{fold_seed}]"],
        refit_overrides=["data.args.refit=true"], fold_outputs=fold_outputs, baselines=baselines, test=test,
        refit=refit)


def kept_survival_risk(arrays: dict[str, np.ndarray], card_dir: Path, inputs: dict) -> np.ndarray:
    """The risks of the survival baseline kept with a card (its ``baseline.safetensors`` ``arrays``, sha256
    checked) for the models' keyword ``inputs``: CoxPH's linear predictor (:func:`cox_risk`), or the random
    survival forest's, read from its skops file (:data:`RSF_FILE`) against the sha256 the arrays carry and
    :data:`RSF_TYPES`. Shapes: -> (N,)."""
    if "coef" in arrays:
        return cox_risk(arrays, inputs)
    forest = load_skops(Path(card_dir) / RSF_FILE, bytes(arrays["forest_sha256"].astype(np.uint8)).hex(), RSF_TYPES)
    parts = [inputs["genes"].numpy()] if "genes" in inputs else []
    return forest.predict(np.concatenate([*parts, inputs["clinical"].numpy()], 1).astype(np.float64))


def stay_features(means: np.ndarray, static_raw: np.ndarray, stats: dict) -> np.ndarray:
    """The logistic regression's features of stays: the summaries of their hourly grids
    (:func:`medical.icu_data.summary_features`: last, mean, min, max and count of each variable) and their admission
    descriptors standardised with the run's training ``stats`` (the ``static`` of
    :func:`medical.icu_data.stay_arrays`: a card's ``input_spec`` holds them). Shapes: (N, T, F), (N, 5) ->
    (N, 5F + 9)."""
    summaries = summary_features(means, static_raw)[:, :5 * means.shape[2]]  # (N, 5F): the raw descriptors left out
    return np.concatenate([summaries, stay_arrays(means, static_raw, stats)["static"]], 1)


def stay_pipeline(x: np.ndarray, y: np.ndarray, seed: int = 0):
    """The module docstring's logistic regression (median imputation, quantiles to a normal, ``C = 0.1``) fitted on
    stays' :func:`stay_features` ``x`` (N, D) and outcomes ``y`` (N,)."""
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import QuantileTransformer

    return make_pipeline(SimpleImputer(keep_empty_features=True),
                         QuantileTransformer(n_quantiles=min(200, len(y)), output_distribution="normal",
                                             random_state=seed),
                         LogisticRegression(C=0.1, max_iter=2000, random_state=seed)).fit(x, y)


def run_features(datamodule) -> dict[str, np.ndarray]:
    """Each split's :func:`stay_features` of a set-up stays module, with its training statistics."""
    grids = datamodule.grids
    features = stay_features(grids["means"], grids["static_raw"], datamodule.input_spec)  # (N, 5F + 9)
    return {part: features[index] for part, index in datamodule.split_index.items()}


def icu_cross_validation(run_dir) -> CrossValidation | None:
    """The choice by folds of a run on a user's stays folder (:class:`hub.kinds.CrossValidation`): folds of the
    stays outside the test split (``data.args.cv_fold``, stratified by the outcome), the logistic regression out of
    fold (each fold's features standardised with its own training statistics, as the model's), the refit on every
    stay (``data.args.refit``). None for PhysioNet 2012's own folds."""
    from hub.models import load

    data, seed = _run_data(run_dir)
    if not hasattr(data, "cv_fold"):
        return None
    data.setup()
    labels = data.grids["y"][data.pool_index]

    def fold_outputs(fold_dir):
        fold_data, model = _run_data(fold_dir)[0], load(str(fold_dir))
        fold_data.setup()
        return probabilities(model, model_outputs(model, fold_data.val_set))

    def baselines(folds, fold_seed):
        from hub.recipe import apply_overrides, load_recipe, validate_recipe
        from hub.run.train import build_data

        recipe = load_recipe(Path(run_dir) / "recipe.yaml")
        out = np.zeros((len(labels), 2))
        for index, (_, val) in enumerate(folds):
            fold = build_data(validate_recipe(apply_overrides(recipe.to_dict(), [
                f"data.args.cv_fold=[{len(folds)},{index},{fold_seed}]"]), f"fold {index}"))
            fold.setup()
            x = run_features(fold)
            out[val] = stay_pipeline(x["train"], fold.train_set.y.numpy(), seed).predict_proba(x["val"])
        return {"LogisticRegression": out}

    def test(_):
        x = run_features(data)
        fitted = stay_pipeline(np.concatenate([x["train"], x["val"]]), labels, seed)
        model = load(str(run_dir))
        return data.test_set.y.numpy(), probabilities(model, model_outputs(model, data.test_set)), \
            fitted.predict_proba(x["test"])

    def refit(_, out_dir):
        final = _run_data(out_dir)[0]
        final.setup()
        pipeline = stay_pipeline(run_features(final)["train"], final.train_set.y.numpy(), seed)
        return save_skops(pipeline, Path(out_dir) / ICU_BASELINE_FILE)

    return CrossValidation(
        task="classification", labels=labels, label_names=list(data.label_names), groups=None,
        fold_overrides=lambda k, index, fold_seed: [f"data.args.cv_fold=[{k},{index},{fold_seed}]"],
        refit_overrides=["data.args.refit=true"], fold_outputs=fold_outputs, baselines=baselines,
        test=test if len(data.split_index["test"]) else None, refit=refit)


def logistic_regression_baseline(datamodule, seed: int = 0, model=None) -> BaselineResult:
    """The logistic regression of the module docstring, fitted on the training split of a set-up
    :class:`medical.icu_data.IcuStaysData` (PhysioNet 2012 set A or a user's stays); its predictions: record id, true
    and predicted outcome, probabilities. With ``model`` (the run's, loaded), also the predictor data of both
    (:func:`icu_predictor_data`)."""
    from sklearn.metrics import accuracy_score, average_precision_score, roc_auc_score

    grids = datamodule.grids
    x = run_features(datamodule)
    y, y_test = (getattr(datamodule, f"{part}_set").y.numpy() for part in ("train", "test"))
    pipeline = stay_pipeline(x["train"], y, seed)
    proba = pipeline.predict_proba(x["test"])  # (N, 2)
    metrics = {"test/auroc": float(roc_auc_score(y_test, proba[:, 1])),
               "test/auprc": float(average_precision_score(y_test, proba[:, 1])),
               "test/acc": float(accuracy_score(y_test, proba.argmax(1)))}
    labels = np.asarray(datamodule.label_names)
    predictions = {"id": grids["ids"][datamodule.split_index["test"]].tolist(), "target": labels[y_test].tolist(),
                   "prediction": labels[proba.argmax(1)].tolist(),
                   **{f"proba_{name}": proba[:, i].tolist() for i, name in enumerate(labels)}}
    result = BaselineResult("LogisticRegression", metrics, predictions)
    if model is None:
        return result
    return dataclasses.replace(result, predictor=icu_predictor_data(datamodule, model, pipeline, x))


def icu_predictor_data(datamodule, model, pipeline, x: dict[str, np.ndarray]) -> PredictorData:
    """The validation and test labels and class probabilities (N, 2) of the run's ``model`` (with its card's
    temperature, as ``predict`` gives them) and of the fitted ``pipeline`` on the stays' features ``x`` (by split),
    and how to save the pipeline into a run folder (:data:`ICU_BASELINE_FILE`)."""
    splits = {part: getattr(datamodule, f"{part}_set") for part in ("val", "test")}
    return PredictorData(
        task="classification", labels={k: d.y.numpy() for k, d in splits.items()},
        model={k: probabilities(model, model_outputs(model, d)) for k, d in splits.items()},
        baseline={k: pipeline.predict_proba(x[k]) for k in splits},
        save=lambda run_dir: save_skops(pipeline, Path(run_dir) / ICU_BASELINE_FILE))


def logistic_regression_outputs(card, path: str) -> np.ndarray:
    """The class probabilities of the pipeline kept with ``card`` (its predictor's baseline file, sha256 and types
    checked) for the record file at ``path`` (:func:`medical.icu_data.read_record` of the card's variables and
    hours), from the features it was fitted on (:func:`stay_features` with the card's training statistics).
    Shapes: -> (1, 2)."""
    found = blend_of(card)
    if found is None:
        raise HubError(f"the card of {card.name} predicts with its model; it keeps no logistic regression")
    _, file, sha256 = found
    pipeline = load_skops(file, sha256, ICU_TRUSTED_TYPES)
    spec = card.input_spec
    means, static_raw = read_record(path, list(spec["variables"]), spec["hours"])
    return pipeline.predict_proba(stay_features(means[None], static_raw[None], spec))


def logistic_regression_on_run_split(run_dir) -> BaselineResult:
    """:func:`logistic_regression_baseline` on the split of ``run_dir``, with the predictor data of it and the run's
    model (its best weights)."""
    from hub.models import load

    return logistic_regression_baseline(*_run_data(run_dir), model=load(str(run_dir)))
