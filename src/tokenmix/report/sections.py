"""The sections of one experiment in the report: what was run, the measured table, the plot, the claims."""

from __future__ import annotations

import math
import os
import shutil
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..study.claims import SLOPES, Claim, PaperText
from ..training.power import design_floor, left_out_seeds
from .measures import (ExperimentData, Values, cost_source, last_window_loss, steps_to_target,
                       training_cost)
from .notes import diverging_note, growth_table, not_pooled_note, provenance_note, shared_note, tie_note
from .plateau import CRITERION, plateau_count
from .tables import mean_sd_text, num, percent, pvalue, table
from ..study.verdict import Outcome, judge

if TYPE_CHECKING:
    from tokenmix.training.experiment import Experiment

__all__ = ["Study", "run_here", "measured_section", "claims_table", "judge_study", "plot_study"]


@dataclass
class Study:
    """One experiment file of the report: the experiment, its ``[paper]`` texts and its claims."""

    experiment: "Experiment"
    file: str  # as shown: experiments/<name>.toml
    paper: PaperText
    claims: list[Claim]

    @property
    def name(self) -> str:
        return self.experiment.name


RERUN_JOBS = 2  # the --jobs of the rerun command, and what the expected time is divided by


def harness_only(study: Study) -> bool:
    """Whether the study trains nothing: ``[report] harness_only``, every claim judged on the step-time
    harness."""
    return bool(study.experiment.report.get("harness_only", False))


def _lr_text(experiment: Any, config: Any) -> str:
    grid = experiment.train.get("lr_grid")
    if grid is None:
        return f"lr {config.lr:g}"
    return (f"lr chosen per configuration on validation from {', '.join(f'{x:g}' for x in grid)} (seeds "
            f"{', '.join(map(str, experiment.train.get('lr_seeds') or experiment.seeds[:1]))}; `lr-choice.csv`)")


def harness_command(study: Study) -> str:
    """The ``tokenmix steptime`` command that measures the study's harness claims: ``--scaling`` (its ``[report]
    harness_lengths``) where claims read lengths, else the experiment's own batch; ``--scaling --inference`` for
    the inference claims (two commands, joined by "` and `", where a file has both kinds)."""
    base = f"tokenmix steptime --config {study.file}"
    inference = [c for c in study.claims if c.measure == "infer_time_s"]
    training = [c for c in study.claims if c.measure != "infer_time_s"]
    commands = []
    if training or not inference:
        scaling = any(c.measure in SLOPES or c.length is not None for c in training)
        commands.append(base + (" --scaling" if scaling else ""))
    if inference:
        commands.append(base + " --scaling --inference")
    return "` and `".join(commands)


def run_here(study: Study, data: Path | None = None) -> list[str]:
    """What the experiment file runs: task, model, training, seeds and configurations, and the commands: a rerun
    into a new folder, with the time it is expected to take from the runs recorded in ``data``."""
    from tokenmix.tasks import task_info
    from tokenmix.training.config import TrainConfig
    from tokenmix.training.estimate import estimate_time, hours
    from tokenmix.training.schema import NOT_RUN_KEYS

    experiment = study.experiment
    fields = {k: v for k, v in experiment.train.items() if k not in NOT_RUN_KEYS}
    config = TrainConfig.preset(experiment.train["preset"], **fields)
    budget = f"{config.max_steps:,} steps" if config.max_steps is not None else f"{config.epochs} epochs"
    every = f"evaluation every {config.eval_every} steps" if config.eval_every else "evaluation once per epoch"
    task = ", ".join(f"{k} {v}" for k, v in experiment.task.items() if k != "name")
    model = ", ".join(f"{k} {v}" for k, v in experiment.model.items() if v is not None)
    labels = [e.label for e in experiment.entries_with_baseline(task_info(experiment.task["name"]).kind)]
    target = experiment.report.get("target")
    goal = (f"; time to {target} reached at {experiment.report['target_k']} evaluations in a row"
            if target is not None else "")
    seeds = experiment.seeds
    runs = experiment.runs(task_info(experiment.task["name"]).kind)
    estimate = estimate_time(study.name, runs, [data]) if data is not None else None
    shown = (f"docs/reproduction/{study.name}.csv" if data is not None and Path(data).resolve()
             == Path("docs/reproduction").resolve() else f"{study.name}.csv")
    expected = "no expected time yet: no runs recorded"
    if estimate is not None:
        about = f"expected: about {hours(estimate.seconds / RERUN_JOBS)} of training"
        if estimate.recorded < len(runs):
            expected = (f"{about} over the {RERUN_JOBS} jobs, extrapolated from the {estimate.recorded} of its "
                        f"{len(runs)} runs recorded so far in `{shown}` (measured on 2 CPU cores, evaluations not "
                        f"counted; a run not recorded yet counts at its label's mean, else at the mean of all)")
        else:
            expected = (f"{about}, the training wall time of the {estimate.recorded} runs in `{shown}` (measured on "
                        f"2 CPU cores, evaluations not counted) over the {RERUN_JOBS} jobs")
    rerun = f"runs/{study.name}-rerun"
    teachers = sorted({r.model["init_from"]["experiment"] for r in runs if r.model.get("init_from")})
    first = (f"First the experiment{'s' if len(teachers) > 1 else ''} whose trained weights its labels start from "
             f"(`init_from`): {', '.join(f'`tokenmix compare --config experiments/{t}.toml`' for t in teachers)}. "
             if teachers else "")
    if harness_only(study):
        return [f"- **Data.** {study.paper.data}",
                f"- **Scale here** (`{study.file}`): task `{experiment.task['name']}` ({task}); model {model}; "
                f"{len(labels)} configurations: {', '.join(labels)}; no training runs: every claim is judged on "
                f"the step-time harness, {experiment.report['harness_rounds']} rounds.",
                f"- **The paper's scale.** {study.paper.scale}",
                f"- **Command.** On a quiet machine: `{harness_command(study)}`."]
    return [
        f"- **Data.** {study.paper.data}",
        f"- **Scale here** (`{study.file}`): task `{experiment.task['name']}` ({task}); model {model}; training "
        f"preset `{experiment.train['preset']}`: {config.optimizer} {_lr_text(experiment, config)}, batch "
        f"{config.batch_size}, "
        f"{budget}, {config.schedule} schedule, {every}{goal}; {len(seeds)} seeds ({', '.join(map(str, seeds))}); "
        f"{len(labels)} configurations: {', '.join(labels)}.",
        "- **Data per run.** " + (f"Each run's task seed is the run's own (`[task] seed = \"run\"`); it draws "
                                   f"{task_info(experiment.task['name']).seed_draws}."
                                   if experiment.task.get("seed") == "run" else
                                   f"Every run uses the same data (the task's data seed "
                                   f"{experiment.task.get('seed', 0)}): the seeds vary the weights, dropout and "
                                   f"batch order only, so the intervals hold for this one test set, not for the "
                                   f"task."),
        f"- **The paper's scale.** {study.paper.scale}",
        f"- **Command.** {first}To reproduce, run into a new folder: `tokenmix compare --config {study.file} --results "
        f"{rerun} --jobs {RERUN_JOBS}` ({expected}; run it again to resume; `--status` tells what is left); the "
        f"time claims: `tokenmix steptime --config {study.file}` (and `--lengths ...` for the scaling claims).",
    ]


def _without(values: Values | None, seeds: set[int]) -> Values | None:
    if values is None or not seeds:
        return values
    kept = [(k, v) for k, v in zip(values.keys, values.values) if k not in seeds]
    return Values(values.unit, tuple(k for k, _ in kept), tuple(v for _, v in kept))


def _samples(found: ExperimentData, study: "Study | None" = None, looked: dict[str, frozenset] | None = None):
    def samples(claim: Claim):
        a, why_a = found.values(claim.a, claim)
        left = left_out_seeds(study.experiment, claim, looked) if study is not None else set()
        a = _without(a, left)
        if claim.b == "chance":
            b, why_b = found.chance, "" if found.chance is not None else f"no `{found.name}-chance.csv`"
        elif claim.against_constant:
            b, why_b = float(claim.b), ""
        else:
            b, why_b = found.values(claim.b_label, claim)
            b = _without(b, left)
        for label, sample in ((claim.a, a), (claim.b_label, b)):
            if not why_a and isinstance(sample, Values) and not len(sample):
                why_a = f"every run of {label} came before the claim's test was fixed: run it again"
        missing = "; ".join(dict.fromkeys(w for w in (why_a, why_b) if w))
        return a, b, missing
    return samples


def _unfinished(study: Study, found: ExperimentData, looked: dict[str, frozenset] | None = None):
    """Why a claim's training runs are fewer than the seeds its experiment file fixed ("" when all are in)."""
    planned = study.experiment.seeds

    def unfinished(claim: Claim) -> str:
        if claim.harness:
            return ""
        seeds = [s for s in planned if s not in left_out_seeds(study.experiment, claim, looked)]
        counts = {label: found.seeds_in(label, seeds) for label in (claim.a, claim.b_label) if label}
        short = ", ".join(f"{label} {n}" for label, n in counts.items() if n < len(seeds))
        if not short:
            return ""
        return f"{short} of the {len(seeds)} seeds fixed before the runs are in; judged when all are"
    return unfinished


def judge_study(study: Study, found: ExperimentData, looked: dict[str, frozenset] | None = None) -> list[Outcome]:
    """The claims' outcomes, Holm over the file; ``looked``: per claim text, the seeds (rounds) to leave out
    because they were in before its test last changed (:func:`left_out`)."""
    def floor(claim: Claim) -> float:
        return design_floor(study.experiment, claim, looked)

    outcomes = judge(study.claims, _samples(found, study, looked), floor, _unfinished(study, found, looked))
    for o in outcomes:
        o.left_out = frozenset(left_out_seeds(study.experiment, o.claim, looked))
    return outcomes


def other_targets(study: Study, found: ExperimentData, outcomes: list[Outcome] | None = None) -> list[str]:
    """The time-to-target claims judged again at each of ``[report] targets_beside`` (Holm over the file), one
    line each, with how many seeds of each label reached that target; on the same seeds as their ``outcomes`` at
    the file's target (a claim judged only on the runs after its last change stays so here)."""
    import dataclasses

    lines = []
    claims = [c for c in study.claims if c.measure == "time_to_target_s"]
    looked = {o.claim.text: o.left_out for o in outcomes or [] if o.claim in claims}
    for target in study.experiment.report.get("targets_beside", []):
        if not claims or found.target is None:
            break
        moved = dataclasses.replace(found, target=float(target))
        for o in judge_study(study, moved, looked):
            if o.claim.measure != "time_to_target_s":
                continue
            reached = []
            for label, sample in ((o.claim.a, o.a), (o.claim.b_label, o.b)):
                values = list(sample.values) if isinstance(sample, Values) else []
                reached.append(f"{label} reached it in {sum(math.isfinite(v) for v in values)} of {len(values)}")
            lines.append(f"- At target {target:g} ({study.experiment.report['target_k']} evaluations in a row): "
                         f"{o.claim.text}: **{o.verdict_text}**" + (f" ({o.reason})" if o.reason else "")
                         + f"; {', '.join(reached)} seeds.")
    return lines


def _plateaus(found: ExperimentData, label: str) -> tuple[int, int]:
    histories = [[(int(h["step"]), float(h["val_metric"])) for h in r.history] for r in found.runs_of(label)]
    return plateau_count([h for h in histories if h], found.higher_is_better)


def _harness_cell(found: ExperimentData, label: str, per_epoch: bool) -> str:
    times = found.step_times(label)
    if not times:
        return "—"
    if not per_epoch:
        return mean_sd_text([1000 * t for t in times.values()])
    spe = found.epoch_steps(label)
    return mean_sd_text([spe * t for t in times.values()]) if spe else "—"


def measured_table(study: Study, found: ExperimentData, metric: str) -> list[str]:
    """Per label: mean ± sd over seeds of each measure, the runs plateaued, params and peak memory."""
    uses = {c.measure for c in study.claims}
    target, k = found.target, found.target_k
    harness = any(r["kind"] == "experiment" for r in found.harness or [])
    head = ["label", "mixer", "seeds", "params", "plateaued", f"test {metric}", f"best val {metric}"]
    if "train_cost" in uses:
        head += [f"training cost ({cost_source(found.runs)})", "last window's training loss"]
    if "locality" in uses:
        head.append("attention locality (test)")
    if target is not None:
        head.append(f"steps to {target} ({k} in a row)")
        if harness:
            head.append(f"time to {target} (s, harness)")
    head.append("s / epoch in training (not tested)")
    if harness:
        head += ["step (ms, harness)", "s / epoch (harness)"]
    head.append("peak MiB")
    rows = []
    for label in found.labels():
        mine = found.runs_of(label)
        done, judged = _plateaus(found, label)
        row = [label, mine[0].row["mixer"], str(len(mine)), f"{int(mine[0].row['params']):,}",
               f"{done}/{judged}" if judged else "—"]
        row += [mean_sd_text([float(r.row[c]) for r in mine]) for c in ("value", "best_val")]
        if "train_cost" in uses:
            row.append(mean_sd_text([v for v in map(training_cost, mine) if v is not None]))
            row.append(mean_sd_text([v for v in map(last_window_loss, mine) if v is not None]))
        if "locality" in uses:
            row.append(mean_sd_text([float(r.row["locality"]) for r in mine if r.row.get("locality")]))
        if target is not None:
            steps = [steps_to_target(r, target, k, found.higher_is_better) for r in mine if r.history]
            row.append(mean_sd_text([math.inf if s is None else float(s) for s in steps]))
            if harness:
                claim = Claim("", "", label, label, "time_to_target_s", "less")
                got, _ = found.values(label, claim)
                row.append(mean_sd_text(list(got.values)) if got else "—")
        row.append(mean_sd_text([float(r.row["time_per_epoch_s"]) for r in mine if r.row.get("time_per_epoch_s")]))
        if harness:
            row += [_harness_cell(found, label, False), _harness_cell(found, label, True)]
        row.append(mean_sd_text([float(r.row["peak_mem_mb"]) for r in mine]))
        rows.append(row)
    return table(head, rows)


def _compared(o: Outcome) -> str:
    claim = o.claim
    text = f"{claim.a} vs {claim.b if isinstance(claim.b, str) else num(claim.b)}"
    if claim.length is not None:
        text += f" at N = {claim.length}" if claim.length != "largest" else " at the largest N"
    if claim.lengths:
        text += f" (N = {claim.lengths[0]:,}-{claim.lengths[1]:,})"
    return text


def _here(o: Outcome) -> str:
    a, b = o.a, o.b
    if a is None or b is None or not len(a) or (isinstance(b, Values) and not len(b)):
        return "—"
    other = mean_sd_text(list(b.values)) if isinstance(b, Values) else num(b) + (
        " (chance)" if o.claim.b == "chance" else "")
    text = f"{mean_sd_text(list(a.values))} vs {other}"
    mean_b = statistics.mean(b.values) if isinstance(b, Values) else b
    if all(math.isfinite(v) for v in a.values) and math.isfinite(mean_b) and mean_b != 0:
        text += f" (×{statistics.mean(a.values) / mean_b:.3g})"
    return text


def plateau_flag(o: Outcome, found: ExperimentData) -> str:
    if o.claim.harness or o.a is None:
        return ""
    counts = [(label, *_plateaus(found, label)) for label in (o.claim.a, o.claim.b_label) if label]
    if all(done == judged for _, done, judged in counts):
        return ""
    return (" ⚠ rests on runs still improving (plateaued: "
            + ", ".join(f"{label} {done}/{judged}" for label, done, judged in counts) + ")")


def effect_text(o: Outcome) -> str:
    """The effect and its interval, relative to the reference, beside the claim's margin."""
    if o.effect is None:
        return "—"
    e = o.effect
    cell = f"{_signed(e.estimate)} [{_signed(e.low)}, {_signed(e.high)}]"
    return cell + (f" (margin ±{100 * o.margin:g} %)" if o.margin else "")


def _signed(x: float) -> str:
    if not math.isfinite(x):
        return "−∞" if x < 0 else "+∞"
    return ("+" if x >= 0 else "−") + percent(abs(x))


def claims_table(outcomes: list[Outcome], found: ExperimentData) -> list[str]:
    rows = []
    for o in outcomes:
        pvalues = "—"
        if o.p_for is not None:
            pvalues = f"{pvalue(o.p_difference)}" + (f" / {pvalue(o.p_equivalent)}" if o.p_equivalent is not None
                                                      else "")
        adjusted = "—" if o.adjusted is None else pvalue(o.adjusted) + (
            f" / {pvalue(o.adjusted_equiv)}" if o.adjusted_equiv is not None else "")
        verdict = f"**{o.verdict_text}**" + (f": {o.reason}" if o.reason else "") + plateau_flag(o, found)
        text = o.claim.text + (" *(added)*" if o.claim.added else "")
        file_only = o.file_verdict if o.file_verdict and o.file_verdict != o.verdict else "same"
        rows.append([text, o.claim.paper, _compared(o), _here(o), effect_text(o), pvalues,
                     f"{adjusted} (of {o.family})" if o.adjusted is not None else "—", verdict, file_only,
                     f"{o.legacy_text} → {o.verdict_text}" if o.legacy and o.legacy != o.verdict else "unchanged",
                     o.registration or "—"])
    return table(["claim", "paper", "compared", "here (mean ± sd)", "effect [95 % CI] of a − f·b, of f·b",
                  "p difference (/ equivalent)", "Holm p, one family", "verdict", "Holm over this file only",
                  "before → now", "test fixed before the data? (git history)"], rows)


def plot_study(study: Study, found: ExperimentData, metric: str, data: Path, out: Path) -> str:
    """Draw ``img/<name>-metric_vs_time.png`` (validation metric against training time, every run) with
    ``tokenmix compare``'s own plot; the markdown line that shows it, or a note."""
    from tokenmix.training.leaderboard import plot_histories

    histories = {(r.label, r.seed): [{k: float(h[k]) for k in ("wall_s", "val_metric")} for h in r.history]
                 for r in found.runs or [] if r.history}
    if not histories:
        return f"No plot: `{study.name}-history.csv` is missing."
    image = data / "img" / f"{study.name}-metric_vs_time.png"
    with tempfile.TemporaryDirectory() as tmp:
        notes = plot_histories(histories, [], metric, Path(tmp), ["metric_vs_time"])
        if notes:
            return notes[0]
        image.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(os.path.join(tmp, "metric_vs_time.png"), image)
    return f"![{study.name}: validation {metric} against training time]({os.path.relpath(image, out.parent)})"


def cost_note(study: Study, found: ExperimentData) -> str:
    """How the training cost is measured here, against Chen (2023)'s windows of 2,000 batches."""
    source = cost_source(found.runs)
    if "batches" in source and "windows" not in source:
        return (f"Training cost: per run, the {source} (the per-batch training losses, logged by the training "
                f"loop); Chen (2023) takes the median of the per-batch costs over the last 2,000 batches.")
    run = next((r for r in found.runs if len(r.history) > 1), None)
    every = int(run.history[1]["step"]) - int(run.history[0]["step"]) if run else None
    steps = int(run.row["steps"]) if run and run.row.get("steps") else None
    text = (f"Training cost: per run, the median over the last 3 evaluation windows ({every} steps each) of the "
            f"window's mean training loss (the results have no per-batch `train_cost` column); Chen (2023) takes "
            f"the median of the per-batch costs over the last 2,000 batches.")
    if every and steps and steps <= 3 * every:
        text += (f" With {steps} steps in all, those windows span the whole run, so the median is the middle "
                 f"window's loss; the last window's loss is shown beside it.")
    return text


def stale_note(study: Study, found: ExperimentData) -> str:
    """A warning when the results CSV was made by another version of the experiment file (its task, seeds,
    labels or step budget differ from the file's now), or a note when its sweep has not finished (some of the
    file's runs are not in yet); empty when they agree."""
    from tokenmix.tasks import task_info

    experiment, rows = study.experiment, [r.row for r in found.runs]
    differences = []
    tasks = sorted({r.get("task", "") for r in rows} - {""})
    if tasks and tasks != [experiment.task["name"]]:
        differences.append(f"task {', '.join(tasks)} (the file: {experiment.task['name']})")
    seeds = sorted({r.seed for r in found.runs})
    if not set(seeds) <= set(experiment.seeds):
        differences.append(f"seeds {', '.join(map(str, seeds))} (the file: {', '.join(map(str, experiment.seeds))})")
    labels = [e.label for e in experiment.entries_with_baseline(task_info(experiment.task["name"]).kind)]
    if not set(found.labels()) <= set(labels):
        differences.append(f"labels {', '.join(found.labels())} (the file: {', '.join(labels)})")
    planned = experiment.train.get("max_steps")
    steps = sorted({int(r["steps"]) for r in rows if r.get("steps")})
    if planned is not None and steps and max(steps) != planned:
        differences.append(f"{max(steps):,} steps (the file: {planned:,})")
    if differences:
        return (f"**These results come from an earlier version of `{study.file}`**: they have "
                f"{'; '.join(differences)}. The tables and verdicts below are those of the results; rerun the "
                f"experiment to judge the file as it is now.")
    total, done = len(experiment.seeds), {label: found.seeds_in(label, experiment.seeds) for label in labels}
    missing = [f"{label} ({total - n} of {total} seeds)" for label, n in done.items() if n < total]
    if not missing:
        return ""
    return (f"**Sweep not finished**: {len(found.runs)} of {len(labels) * len(experiment.seeds)} runs are in; still "
            f"to come: {', '.join(missing)}. The tables below are those of the runs so far; a claim on these "
            f"labels is pending until all its seeds are in (the harness's time claims are judged now); "
            f"`tokenmix compare --config {study.file} --results docs/reproduction` resumes it.")


TIMES_NOTE = ("Times: the time claims read the step-time harness (`tokenmix steptime`), never training wall time: "
              "time per epoch = steps per epoch (train split // batch size, from the results' `steps_per_epoch` "
              "column, else from the history's step / epoch, else as the experiment file plans it) × the step time "
              "of each round; time to target = the step at which the target's streak completes × the label's "
              "median step time.")


def harness_section(study: Study, found: ExperimentData, level: str,
                    outcomes: list[Outcome] | None = None) -> tuple[list[str], list[Outcome]]:
    """An experiment whose training runs have not finished yet (or that has none: ``harness_only``) but whose
    step-time harness has: the claims the harness alone decides are judged; the others are not measured."""
    first = ("No training runs: every claim of this file is judged on the step-time harness."
             if harness_only(study) else
             f"**Training runs not finished yet** (`tokenmix compare --config {study.file}`): no accuracy table "
             f"until then. The claims the step-time harness alone decides are judged now.")
    lines = [first, "", TIMES_NOTE, ""]
    outcomes = outcomes if outcomes is not None else judge_study(study, found)
    return lines + claims_part(study, found, outcomes, level), outcomes


def claims_part(study: Study, found: ExperimentData, outcomes: list[Outcome], level: str) -> list[str]:
    """The claims heading and table, then the notes on them: the seeds a time-to-target claim leaves out (and
    its verdicts at the other targets), and the ties that are a limit of the experiment."""
    lines = [f"{level}# Claims", "", *claims_table(outcomes, found), ""]
    chosen = study.experiment.report.get("target_chosen_on", [])
    if chosen and any(c.measure == "time_to_target_s" for c in study.claims) and found.target is not None:
        lines += [f"The time-to-target claims leave out seed{'s' if len(chosen) > 1 else ''} "
                  f"{', '.join(map(str, chosen))}: its runs chose the target ({found.target:g}), so they cannot "
                  f"also test it. Judged again at other targets, over the file's claims:", "",
                  *other_targets(study, found, outcomes), ""]
    ties = tie_note(outcomes)
    return lines + ([ties, ""] if ties else []) + growth_table(found)


def measured_section(study: Study, found: ExperimentData, data: Path, out: Path, plots: bool,
                     level: str, outcomes: list[Outcome] | None = None) -> tuple[list[str], list[Outcome]]:
    """The measured table, the plot and the claims table of an experiment that has run."""
    metric = found.runs[0].row["metric"]
    lines = [f"{level}# Measured", ""]
    stale = stale_note(study, found)
    if stale:
        lines += [stale, ""]
    left_out = not_pooled_note(found)
    if left_out:
        lines += [left_out, ""]
    for note in (shared_note(found), diverging_note(found)):
        if note:
            lines += [note, ""]
    provenance = provenance_note(found)
    if provenance:
        lines += provenance + [""]
    lines += [f"Mean ± sd over seeds; test {metric} of the best-validation weights. {CRITERION}", ""]
    if any(c.measure == "train_cost" for c in study.claims):
        lines += [cost_note(study, found), ""]
    if any(c.harness or c.measure == "time_to_target_s" for c in study.claims):
        lines += [TIMES_NOTE + " The training wall time per epoch is shown for reference only.", ""]
    lines += measured_table(study, found, metric) + [""]
    if found.chance is not None:
        lines += [f"Majority-class rate (test share of the train split's majority class): {num(found.chance)}.", ""]
    if plots:
        lines += [plot_study(study, found, metric, data, out), ""]
    outcomes = outcomes if outcomes is not None else judge_study(study, found)
    return lines + claims_part(study, found, outcomes, level), outcomes
