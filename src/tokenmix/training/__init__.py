"""The run layer: one training run, and a sweep of them described by an experiment file.

Within the package, lower modules never import higher ones:

* the sweep (``tokenmix compare``): :mod:`.sweep` plans every run of an experiment, trains them in fresh
  processes and resumes an interrupted sweep; :mod:`.executor` trains one run (``run_one``) or a sweep's runs as
  cluster jobs (submitit); :mod:`.status` says what a sweep has done and has left (``--status``);
* safe files: :mod:`.locks` (a folder lock that holds on NFS: one sweep per out folder, one writer per results
  folder) and :mod:`.files` (atomic writes, writable folders, a full disk named, damaged files moved aside);
* what a sweep writes and reads: :mod:`.results` (the committed CSVs, the config hash that keys them, git
  commits), :mod:`.leaderboard` (``results.csv``, ``report.md``, the plots), :mod:`.power` (the smallest p each
  claim's design can reach, ``--dry-run``);
* the experiment file: :mod:`.experiment` (parsing, ``--set`` overrides, budgets, checks; the task and models it
  describes) and :mod:`.claims` (its ``[[claims]]`` and ``[paper]`` tables);
* one run: :mod:`.loop` (:func:`~tokenmix.training.loop.train`: the loop, its state and the evaluation rules)
  built from :mod:`.config` (:class:`~tokenmix.training.config.TrainConfig`, which checks itself when it is
  made, and the result records), :mod:`.setup` (the run's plan, optimiser, DDP wrapper, memory meter),
  :mod:`.batches`, :mod:`.checkpoint` (files and RNG states) and :mod:`.reporting` (logs, tensorboard, progress).

The per-paper presets (training presets, model protocols, initialisations) are :mod:`tokenmix.protocols`. Above
this package: the command line, the report (:mod:`tokenmix.report`) and the step-time harness
(:mod:`tokenmix.steptime`); below it: the tasks, the models, the mixers.
"""
