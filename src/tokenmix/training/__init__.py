"""The pieces :func:`tokenmix.train.train` is built from, each on its own: the config, its presets and
the result records (:mod:`.config`), the config checks (:mod:`.checks`), the
run's plan, optimiser, DDP wrapper and memory meter (:mod:`.setup`), the batches (:mod:`.batches`), the
checkpoint files and RNG states (:mod:`.checkpoint`) and the logs, tensorboard scalars and progress bar
(:mod:`.reporting`). The loop, its state and the evaluation rules are in :mod:`tokenmix.train`."""
