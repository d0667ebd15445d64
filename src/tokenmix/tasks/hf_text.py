"""Tasks "imdb" and "glue": the text benchmarks of Yamada et al. (2022) section 3.2 (GLUE classification tasks; IMDb).

Data: :mod:`tokenmix.data.hf` -- local files in the official layouts (``data_dir=...``), or Hugging Face
``datasets`` (``data_dir=None``; optional extra ``tokenmix-lab[hf]``; needs the hub or its cache).

Splits. GLUE's test labels are not public (Yamada et al. (2022) submitted predictions to the GLUE server), so here
``test`` = the official dev set (MNLI: dev-matched; ``subtask="mnli_mismatched"``: dev-mismatched) and
``val`` = a seeded random, class-stratified ``val_fraction`` of the official train set, ``train`` = the rest; early
stopping (Yamada et al. (2022): patience 5) therefore never sees the reported split. IMDb: ``test`` = the official
25,000 test reviews, ``val`` carved off the 25,000 training reviews the same way.

Sentence pairs (MRPC, QQP, MNLI, QNLI, RTE, WNLI) are encoded as ``text_a <sep> text_b`` (words:
``<sep>`` = id 2; bytes: id 257) and truncated longest side first. Metric: accuracy for every task
(GLUE's official CoLA metric is Matthews correlation, and MRPC/QQP also report F1 -- not computed here).
"""

from __future__ import annotations

from ..data.hf import GLUE_SOURCE, IMDB_SOURCE, glue_spec, load_glue, load_imdb
from .base import Task
from .registry import register_task
from .reviews import build_text_splits, resolve_text_options

__all__ = ["ImdbTask", "GlueTask", "IMDB_DEFAULTS", "GLUE_DEFAULTS", "QUICK_MAX_TRAIN", "QUICK_MAX_EVAL"]

# "quick" keeps a seeded random subset so that a 2-core CPU gets through an epoch; "paper" keeps all.
QUICK_MAX_TRAIN = 10_000
QUICK_MAX_EVAL = 2_000

IMDB_DEFAULTS = {
    "quick": {"max_len": {"words": 128, "bytes": 512}, "vocab_size": 10_000},
    # Yamada et al. (2022) section 3.2.3: the longest IMDb sequence is 2,494 tokens.
    "paper": {"max_len": {"words": 2_500, "bytes": 4_096}, "vocab_size": 30_000},
}
GLUE_DEFAULTS = {
    "quick": {"max_len": {"words": 128, "bytes": 512}, "vocab_size": 10_000},
    # Yamada et al. (2022) section 3.2.3: the longest GLUE sequence is 467 tokens.
    "paper": {"max_len": {"words": 512, "bytes": 2_048}, "vocab_size": 30_000},
}


def _caps(preset: str) -> dict[str, int | None]:
    quick = preset == "quick"
    return {"max_train": QUICK_MAX_TRAIN if quick else None, "max_eval": QUICK_MAX_EVAL if quick else None}


_SEED_DRAWS = ("the validation split carved from the official training set and, in the quick preset, the subsets "
               "kept of each split, test included")


@register_task("imdb", description="IMDb movie-review sentiment, positive vs negative (Maas et al., 2011)",
               kind="classification", metric="accuracy",
               source="aclImdb directory (data_dir) or Hugging Face stanfordnlp/imdb", seed_draws=_SEED_DRAWS)
class ImdbTask(Task):
    """IMDb binary sentiment; label 1 = positive. 25,000 train / 25,000 test reviews, balanced.

    Options:
        data_dir: the unpacked ``aclImdb`` directory (or its parent); ``None`` -> ``datasets``.
        unit: ``"words"`` (vocabulary from the train split only) or ``"bytes"``.
        max_len: tokens kept from the start; default quick 128 words / 512 bytes, paper 2,500 / 4,096.
        vocab_size: words incl. ``<pad>``, ``<unk>``; default quick 10,000, paper 30,000.
        val_fraction: share of the training reviews carved off (seeded, class-stratified) as ``val``; default 0.1.
        preset: ``"quick"`` also keeps a seeded random 10,000 train and 2,000 val / test reviews;
            ``"paper"`` keeps everything.
        seed: the carve and the subsets.
    """

    data_source = IMDB_SOURCE

    def __init__(self, data_dir: str | None = None, unit: str = "words", max_len: int | None = None,
                 vocab_size: int | None = None, val_fraction: float = 0.1, preset: str = "quick",
                 seed: int = 0) -> None:
        max_len, vocab_size = resolve_text_options(self, unit=unit, preset=preset, max_len=max_len,
                                                   vocab_size=vocab_size, val_fraction=val_fraction, seed=seed,
                                                   defaults=IMDB_DEFAULTS)
        data = load_imdb(data_dir)
        self.unit, self.preset, self.seed = unit, preset, seed
        build_text_splits(self, data["train"], data["test"], unit=unit, max_len=max_len, vocab_size=vocab_size,
                          num_classes=2, val_fraction=val_fraction, seed=seed, **_caps(preset))


@register_task("glue", description="a GLUE classification task (CoLA, SST-2, MRPC, QQP, MNLI, QNLI, RTE, WNLI); "
               "test = the official dev set", kind="classification", metric="accuracy",
               source="official GLUE TSV files (data_dir) or Hugging Face nyu-mll/glue", seed_draws=_SEED_DRAWS)
class GlueTask(Task):
    """One GLUE classification task, chosen by ``subtask`` (``tokenmix.data.hf.GLUE_NAMES``: cola, sst2,
    mrpc, qqp, mnli, mnli_mismatched, qnli, rte, wnli; STS-B, a regression, is not offered).

    Options:
        subtask: the GLUE task (``"sst2"``; ``"SST-2"`` works too). Not called ``name``: that keyword is
            taken by ``create_task(name, **options)`` itself.
        data_dir: the GLUE root of the official download (``<dir>/SST-2/train.tsv``...) or the task's
            folder; ``None`` -> ``datasets``.
        unit, max_len, vocab_size: as for "imdb"; max_len default quick 128 words / 512 bytes, paper
            512 / 2,048 (a pair counts both sentences and the separator).
        val_fraction: share of the official train set carved off (seeded, class-stratified) as ``val``; default 0.1.
        preset: ``"quick"`` also keeps a seeded random 10,000 train and 2,000 val / test examples
            (only QQP, MNLI, QNLI and SST-2 are that large); ``"paper"`` keeps everything.
        seed: the carve and the subsets.
    """

    data_source = GLUE_SOURCE

    def __init__(self, subtask: str = "sst2", data_dir: str | None = None, unit: str = "words",
                 max_len: int | None = None, vocab_size: int | None = None, val_fraction: float = 0.1,
                 preset: str = "quick", seed: int = 0) -> None:
        try:
            spec = glue_spec(subtask)
        except ValueError as err:  # lists the supported names
            self._fail(str(err))
        max_len, vocab_size = resolve_text_options(self, unit=unit, preset=preset, max_len=max_len,
                                                   vocab_size=vocab_size, val_fraction=val_fraction, seed=seed,
                                                   defaults=GLUE_DEFAULTS)
        data = load_glue(spec.name, data_dir)
        self.subtask, self.unit, self.preset, self.seed = spec.name, unit, preset, seed
        build_text_splits(self, data["train"], data["validation"], unit=unit, max_len=max_len,
                          vocab_size=vocab_size, num_classes=spec.num_classes, val_fraction=val_fraction,
                          seed=seed, pairs=spec.pairs, **_caps(preset))
