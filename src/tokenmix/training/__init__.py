"""The run layer: one training run, and a sweep of them described by an experiment file. The modules, top to
bottom (a module imports only from those below it; ``docs/architecture.md`` has the contract):

* the sweep (``tokenmix compare``): :mod:`.status` (``--status``), :mod:`.verify` (``--verify``); :mod:`.sweep`
  (plans every run, resumes), :mod:`.pool` (runs in fresh processes, pinned numerics), :mod:`.leaderboard`
  (``results.csv``, ``report.md``, the plots), :mod:`.power` (the smallest p each claim's design can reach,
  ``--dry-run``), :mod:`.estimate` (the expected hours); :mod:`.executor` (one run, or cluster jobs through
  submitit), :mod:`.statesize` (each label's decoding state), :mod:`.lrstage` (the learning-rate stage);
* what an experiment builds: :mod:`.build` (its task and each run's model);
* the experiment file: :mod:`.experiment` (parsing, the runs), :mod:`.results` (the committed CSVs),
  :mod:`.staleness` (which of their rows ``--verify`` makes stale), :mod:`.confighash` (the config hash that keys
  them), :mod:`.recallsweep` (the recall sweep's files); :mod:`.entries`, :mod:`.overrides`,
  :mod:`.tomlfile` (a file's mixers, ``--set`` and budgets, TOML written back); :mod:`.schema`, :mod:`.config`
  (the checks, :class:`~tokenmix.training.config.TrainConfig`);
* one run: :mod:`.loop` (the loop, its state and the evaluation rules), :mod:`.setup`, :mod:`.batches`,
  :mod:`.checkpoint`, :mod:`.reporting`, :mod:`.warmstart`, :mod:`.numerics` (the pinned kernel level);
* safe files and records: :mod:`.locks`, :mod:`.files`, :mod:`.csvrecords`, :mod:`.provenance`, :mod:`.gitcommit`,
  :mod:`.locality`.

The per-paper presets are :mod:`tokenmix.protocols`; the claims and their tests, :mod:`tokenmix.study`; the
conversion of a trained model (``linearize``, attention transfer), :mod:`tokenmix.conversion`.
"""
