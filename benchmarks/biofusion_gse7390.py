"""BioFusionNet's fusion on GSE7390 (the stand-in for the paper's TCGA data) beside CoxPH and a random survival forest.

scikit-survival's breast-cancer table (198 patients, 76 genes + age, size, ER, grade; time to distant metastasis), in
the 15 folds of :func:`medical.survival_data.gse7390_folds` (5 folds stratified by event x 3 repeats). On each
fold's training part (standardised with its own mean and std):

* ``biofusionnet`` with the model, optimiser and loss (the weighted Cox loss) of ``recipes/medical/biofusionnet_
  gse7390.yaml``, trained full-batch on the fold's whole training part (the recipe's training and validation parts,
  as the two baselines are) for the recipe's epochs, the last epoch scored (nothing is chosen on validation);
  ``--seeds`` seeds, their risks averaged;
* CoxPH with an L2 penalty (scikit-survival's ``CoxPHSurvivalAnalysis``, ``alpha`` below) on the whole training part;
* a random survival forest (scikit-survival, 500 trees, min 10 patients a leaf) on the whole training part.

Harrell's C on the fold's test patients; mean ± std over the 15 folds. Writes
``benchmarks/results/biofusion_gse7390.md``.

    python -m benchmarks.biofusion_gse7390
"""
from __future__ import annotations

import argparse

import numpy as np
import torch
from torch.utils.data import default_collate

import hub
from benchmarks import RESULTS
from hub.core.registry import get_dataset_entry
from hub.io import atomic_write_bytes
from hub.recipe import recipe_file
from medical.tasks import weighted_cox_loss

RECIPE = "medical/biofusionnet_gse7390.yaml"
COX_ALPHA = 10.0  # the L2 penalty of CoxPH
FOLDS = 15


def harrell_c(time: np.ndarray, event: np.ndarray, risk: np.ndarray) -> float:
    from sksurv.metrics import concordance_index_censored

    return float(concordance_index_censored(event.astype(bool), time, risk)[0])


def whole(rows):
    """A survival dataset's rows as one batch: (inputs dict, time (N,), event (N,))."""
    inputs, target = default_collate([rows[i] for i in range(len(rows))])
    return inputs, target[:, 0], target[:, 1]


def biofusion_risk(data, seed: int) -> np.ndarray:
    """The recipe's biofusionnet trained full-batch on ``data``'s training part; its risks of the test part."""
    recipe = recipe_file(RECIPE)
    torch.manual_seed(seed)
    model = hub.create_model(recipe.model.name, **data.model_args(), **recipe.model.args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.optimizer.lr,
                                  weight_decay=recipe.optimizer.weight_decay)
    parts = [whole(data.train_set), whole(data.val_set)]  # the fold's whole training part, as CoxPH and the forest
    inputs = {key: torch.cat([part[0][key] for part in parts]) for key in parts[0][0]}
    time, event = (torch.cat([part[i] for part in parts]) for i in (1, 2))
    model.train()
    for _ in range(recipe.trainer.max_epochs):
        loss = weighted_cox_loss(model(**inputs), time, event)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        return model(**whole(data.test_set)[0]).numpy()


def table_part(rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    inputs, time, event = whole(rows)
    return torch.cat([inputs["genes"], inputs["clinical"]], 1).numpy(), time.numpy(), event.numpy()


def main(argv: list[str] | None = None) -> None:
    from sksurv.ensemble import RandomSurvivalForest
    from sksurv.linear_model import CoxPHSurvivalAnalysis
    from sksurv.util import Surv

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="biofusionnet seeds per fold, risks averaged (default 3)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    options = parser.parse_args(argv)
    torch.set_num_threads(options.threads)
    scores = {"biofusionnet": [], "cox": [], "rsf": []}
    recipe = recipe_file(RECIPE)
    for fold in range(FOLDS):
        data = get_dataset_entry("gse7390").builder(**{**recipe.data.args, "fold": fold})
        data.setup()
        x_fit, t_fit, e_fit = (np.concatenate(parts) for parts in zip(table_part(data.train_set),
                                                                       table_part(data.val_set)))
        x_test, t_test, e_test = table_part(data.test_set)
        y_fit = Surv.from_arrays(e_fit.astype(bool), t_fit)
        cox = CoxPHSurvivalAnalysis(alpha=COX_ALPHA).fit(x_fit, y_fit)
        rsf = RandomSurvivalForest(n_estimators=500, min_samples_leaf=10, random_state=fold, n_jobs=1).fit(x_fit, y_fit)
        risk = np.mean([biofusion_risk(data, seed) for seed in range(options.seeds)], axis=0)
        for name, pred in (("biofusionnet", risk), ("cox", cox.predict(x_test)), ("rsf", rsf.predict(x_test))):
            scores[name].append(harrell_c(t_test, e_test, pred))
        print(f"fold {fold}: " + ", ".join(f"{k} {v[-1]:.3f}" for k, v in scores.items()), flush=True)
    labels = {"biofusionnet": f"biofusionnet (co-dual-cross-attention, weighted Cox loss; {options.seeds} seeds "
                              "averaged)",
              "cox": f"CoxPH, L2 (alpha {COX_ALPHA:g})", "rsf": "random survival forest (500 trees, leaf 10)"}
    lines = ["# BioFusionNet's fusion on GSE7390 (stand-in for the paper's TCGA ER+ data)", "",
             "scikit-survival's breast-cancer table: 198 patients, 76 genes + age, size, ER, grade;",
             "distant metastasis.",
             "Harrell's C on the test fold, 5 folds stratified by event x 3 repeats (the same 15 folds for every",
             "model), mean ± std over the folds; every model fits the fold's whole training part. The paper's",
             "figure (C-index 0.77) is on TCGA with histopathology images, not comparable.",
             "`python -m benchmarks.biofusion_gse7390`", "",
             "| model | Harrell's C (mean ± std, 15 folds) |", "| --- | ---: |"]
    for name, values in scores.items():
        lines.append(f"| {labels[name]} | {np.mean(values):.3f} ± {np.std(values):.3f} |")
    text = "\n".join(lines) + "\n"
    atomic_write_bytes(RESULTS / "biofusion_gse7390.md", text.encode())
    print(text)


if __name__ == "__main__":
    main()
