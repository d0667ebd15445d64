"""The study: claims, the exact tests, equivalence, Holm's correction, attainable-p floors and the verdict rule.

The bottom floor that both the run layer (``tokenmix compare --dry-run``'s attainable p,
:mod:`tokenmix.training.power`) and the report (:mod:`tokenmix.report`) import: no maths of the study lives
above it. It imports nothing else of tokenmix.

* :mod:`~tokenmix.study.claims`: the ``[[claims]]`` and ``[paper]`` tables of an experiment file;
* :mod:`~tokenmix.study.values`: a label's values of one measure (per seed or per harness round);
* :mod:`~tokenmix.study.stats`: scipy's exact tests (Mann-Whitney, signed rank, sign test) and counted nulls;
* :mod:`~tokenmix.study.power`: the smallest p each design can give, Holm's correction;
* :mod:`~tokenmix.study.growth`: complexity as growth: local log-log slopes, a weighted quadratic fit;
* :mod:`~tokenmix.study.verdict`: the verdict rule (:data:`~tokenmix.study.verdict.RULES`);
* :mod:`~tokenmix.study.numbers`: how numbers are written.
"""
