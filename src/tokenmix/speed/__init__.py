"""``tokenmix speed``: running time and peak memory of token mixers against sequence length and input range.

The simulation experiments of seed 001 (§4: one input of head dimension 64, time and memory against the
sequence length N, and against the value range [-r, r] of the input) for every registered mixer. Each case
is one mixer, length, pass and value range:

* the mixer is built with ``max_len=length`` (sliding-window mixers, i.e. the Extractors, with
  ``max_len=window`` when ``--window`` is given) and ``num_heads=heads`` (1 for mixers without heads), seeded,
  in training mode (no mixer has dropout by default); the input, uniform in [-r, r], has shape
  (batch, length, dim); spatial mixers see it as the most square grid H x W = length (H <= W);
* pass ``fwd`` is a forward pass under ``torch.no_grad()`` (inference), ``fwdbwd`` a forward pass and the
  backward pass of ``y.sum()`` into the input and the parameters (gradients are reset between passes);
* the first (cold) pass measures the peak memory, then ``warmup`` passes, then ``repeats`` timed passes;
  the time is their median, by :func:`tokenmix.timing.measure` (the accelerator is synchronised around each
  pass);
* memory on CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` minus the memory
  allocated before the pass; on the CPU: the peak resident set size (``VmHWM``, reset through
  ``/proc/self/clear_refs`` just before the pass) over the resident size taken after the mixer and the input
  were built. On the CPU every case runs in a fresh subprocess by default (``isolate``), so that one case's
  allocations and the allocator's cache cannot hide another's; in-process CPU numbers are approximate.

Without ``causal`` the mixers run bidirectionally, except the causal-only ones, which run causally (the
``causal`` column says so); with ``causal`` every mixer runs causally and those that cannot get
"unsupported" rows. "softmax" (quadratic attention) is always measured too, in every mode another mixer
runs in, as the reference of the relative table. An out-of-memory case or one over its time budget is a
result, and the longer lengths of that mixer (same pass, mode and range) are skipped.

Outputs in ``out_dir``: ``speed.csv`` (one row per case), ``speed.md`` (settings, machine, time and memory
tables, time relative to softmax with the crossover length), ``time_vs_length.png`` and
``memory_vs_length.png`` (log-log; with several value ranges also ``*_vs_value_range.png``).

The package, in the order a run uses it: :mod:`.settings` (what to measure: :class:`SpeedSettings` and the
:class:`SpeedCase` each measurement gets), :mod:`.sweep` (:func:`run_speed`: the cases in turn, through one
runner), :mod:`.measure` (one case: its pass, time and memory, in this process or a subprocess whose entry
point ``python -m tokenmix.speed`` is), :mod:`.record` (a case's :class:`CaseResult` and :class:`Status`, and a
:class:`SpeedRecord`, one CSV row: the case and its result) and :mod:`.report` (the crossover table, speed.md,
speed.csv and the plots).
"""

from .measure import CaseTimeout, classify, measure_case, run_in_process, run_isolated
from .record import COLUMNS, CaseResult, SpeedRecord, Status
from .report import CrossoverRow, crossover_table, machine_lines, relative_tables, write_outputs
from .settings import REFERENCE, SpeedCase, SpeedSettings, settings_line
from .sweep import mode_for, plan, run_speed

__all__ = ["SpeedSettings", "SpeedCase", "CaseResult", "Status", "SpeedRecord", "CrossoverRow", "CaseTimeout",
           "run_speed", "measure_case", "run_in_process", "run_isolated", "classify", "crossover_table",
           "relative_tables", "machine_lines", "settings_line", "mode_for", "plan", "write_outputs", "REFERENCE",
           "COLUMNS"]
