"""Pathfinder (Linsley et al., 2018; Tay et al., 2021, LRA): generated pictures whose label is the rule (the markers'
connected component), seeded, balanced, and with no shortcut that the audit's cheap baselines find on held-out
seeds at 9 and 14 dashes — beside the one a short path (6 dashes, retired for claims) cannot hide."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tokenmix.data.pathfinder import INK, PathfinderConfig, connected, draw, draw_pair, generate, generate_examples
from tokenmix.tasks import create_task, planned_task
from tokenmix.tasks.audit import AuditRow, audit_task, pathfinder_baselines

LENGTHS = (6, 9, 14)
AUDIT_EXAMPLES = 100  # per split and difficulty: ~25 s in all, mostly generating; intervals ±0.1 wide
SHORTCUT_CEILING = 0.68  # a real shortcut (the old generator's: 0.77-1.00) passes it; chance stays below (3.6 sd)
# At 6 dashes the whole path lies within a few pixels of its markers, bent or not, and the cut with it: the pixels
# along the line between the markers and in the patches around them show it (0.75 with 2,000 examples), so the task
# retires that setting for claims. At 9 dashes, before curves were bent (generator version 2), the line between
# the markers gave 0.59; now nothing is excepted there. docs/audit-notes.md
SHORT_PATH_LEAKS = {6: ("line between the markers", "patches at the markers", "all of the above")}


@pytest.mark.parametrize("length", LENGTHS)
def test_the_label_is_whether_the_markers_are_joined(length):
    rng = np.random.default_rng(length)
    config = PathfinderConfig(length=length)
    for _ in range(6):
        (positive, p_markers), (negative, n_markers) = draw_pair(rng, config)
        assert connected(positive, *p_markers) and not connected(negative, *n_markers)
        for image, markers in ((positive, p_markers), (negative, n_markers)):
            assert image.shape == (32, 32) and image.dtype == np.uint8
            assert len(np.unique(image)) > 10  # anti-aliased grey levels, not black and white
            cores = image > round(config.level * INK)  # only the markers' cores are brighter than the strokes
            assert all(cores[r, c] for r, c in markers) and cores.sum() <= 2 * 5
            assert np.hypot(*np.subtract(*markers)) >= config.min_distance - 1


def test_generation_is_seeded_and_balanced():
    config = PathfinderConfig(length=6)
    images, labels = generate(40, seed=3, config=config, progress=False)
    again, labels_again = generate(40, seed=3, config=config, progress=False)
    assert np.array_equal(images, again) and np.array_equal(labels, labels_again)
    assert labels.sum() == 20 and images.shape == (40, 32, 32)
    other, _ = generate(40, seed=4, config=config, progress=False)
    assert not np.array_equal(images, other)
    _, _, markers = generate_examples(40, seed=3, config=config, progress=False)
    assert markers.shape == (40, 2, 2)
    with pytest.raises(ValueError, match="count must be an even int"):
        generate(3, seed=0)
    with pytest.raises(ValueError, match="pathfinder: length must be a positive int"):
        PathfinderConfig(length=0)
    with pytest.raises(ValueError, match="length must be >= 2 min_piece"):
        PathfinderConfig(length=4)
    with pytest.raises(ValueError, match="gap >= width"):
        PathfinderConfig(gap=3.0)
    with pytest.raises(ValueError, match="bend must be a finite number >= 0"):
        PathfinderConfig(bend=-1.0)
    with pytest.raises(ValueError, match="clearance must be a finite number >= 0"):
        PathfinderConfig(clearance=-1.0)
    with pytest.raises(ValueError, match="none could be cut: lower clearance"):
        PathfinderConfig(length=6, clearance=8.0)  # a dash 8 px along from both ends needs > 6 dashes


def test_cuts_keep_their_clearance_and_unworkable_settings_fail(monkeypatch):
    """``clearance`` and ``chord_clearance`` keep every point of a cut dash that far from its curve's ends and from
    the segment between them (what the audit's variants rely on); a setting no layout can meet raises, naming the
    options, instead of drawing forever."""
    from tokenmix.data import pathfinder as pf

    rng = np.random.default_rng(3)
    config = PathfinderConfig(length=9, clearance=8.0, chord_clearance=4.0)
    plain, checked = PathfinderConfig(length=9), 0
    while checked < 6:
        curves = pf._layout(rng, config)
        for curve in curves[:2] if curves else []:
            cuts = pf._cuts(curve, config)
            assert set(cuts) <= set(pf._cuts(curve, plain))
            for j in cuts:
                points = np.linspace(curve.dashes[j, 0], curve.dashes[j, 1], 7)
                assert pf._distances(points, curve.ends).min() >= 8.0
                assert pf._coverage(points, curve.ends[:1], curve.ends[1:]).min() >= 4.0 - 1e-9
            checked += bool(cuts)
    monkeypatch.setattr(pf, "_MAX_LAYOUTS", 3)
    with pytest.raises(ValueError, match="none of 3 layouts .* could be cut"):
        draw(np.random.default_rng(0), PathfinderConfig(length=9, chord_clearance=40.0), 0)


def test_a_shifted_cut_moves_the_dash_aside_as_a_component_of_its_own():
    """With ``shift`` the cut dash is moved aside instead of left out: the same layout (the same draws before the
    label) gives one component more than without it in both classes, and the rule still reads the label."""
    from scipy import ndimage

    def components(image):
        return ndimage.label(image > 0, structure=np.ones((3, 3)))[1]

    moved, plain = PathfinderConfig(length=9, shift=3.5), PathfinderConfig(length=9)
    for seed in range(6):
        for label in (0, 1):
            image, markers = draw(np.random.default_rng(seed), moved, label)
            assert connected(image, *markers) == bool(label)
            assert components(image) == components(draw(np.random.default_rng(seed), plain, label)[0]) + 1
    with pytest.raises(ValueError, match="shift must be a finite number >= 0"):
        PathfinderConfig(shift=-1.0)


def test_curves_bend_each_its_own_way():
    """Each curve draws one bend for all its turns (±``bend`` degrees): the two ends of a path of 9 dashes lie
    closer than those of straight strokes, at every distance from curled to near-straight. (Without the bend,
    Linsley et al.'s law alone, the median path of 9 dashes spans 0.90 of its length: the audit's line between
    the markers then finds the cut 0.59 of the time.)"""
    def spans(config):
        rng = np.random.default_rng(5)
        out = []
        for _ in range(40):
            _, markers = draw(rng, config, 1)
            out.append(np.hypot(*np.subtract(*markers)))
        return np.array(out)

    arc = 8 * (1.5 + 1.25) + 1.5
    bent, straight = spans(PathfinderConfig(length=9)), spans(PathfinderConfig(length=9, bend=0.0, max_turn=0.0))
    assert np.all(straight > 0.9 * arc) and np.median(bent) < 0.75 * arc  # straight strokes vs arcs
    assert bent.min() < 0.5 * arc and bent.max() > 0.85 * arc  # curled and near-straight both occur


def test_version_3_pictures_are_drawn_bitwise_as_they_were():
    """The options added for the audit's variants (``twin_near`` the last) are off by default and draw nothing
    differently: pictures, labels and markers of version 3 at every difficulty hash as they did when it was
    written."""
    import hashlib

    digest = hashlib.sha256()
    for length in LENGTHS:
        images, labels, markers = generate_examples(8, seed=11, config=PathfinderConfig(length=length),
                                                    progress=False)
        for array in (images, labels, markers):
            digest.update(array.tobytes())
    assert digest.hexdigest()[:16] == "e1f5b5c0dc280920"


def test_a_twin_near_the_path_runs_from_one_end_of_it_to_the_other():
    """With ``twin_near`` the second long curve starts near one end of the first and ends near the other (each
    end between the least distance at which caps do not touch and ``twin_near`` pixels), grown by the same law
    otherwise; the rule still reads the label, and a distance at which caps would touch is refused."""
    from tokenmix.data import pathfinder as pf

    config = PathfinderConfig(length=9, twin_near=8.0)
    rng, low = np.random.default_rng(7), pf._apart(config, caps=2)
    layouts = [layout for layout in (pf._layout(rng, config) for _ in range(40)) if layout is not None][:8]
    assert len(layouts) == 8
    for first, twin, *_ in layouts:
        near = pf._distances(twin.ends, first.ends)  # (twin end, first end)
        paired = near.diagonal() if near[0, 0] + near[1, 1] < near[0, 1] + near[1, 0] else near[::-1].diagonal()
        assert np.all((paired >= low) & (paired <= 8.0)), near
        assert len(twin.dashes) == len(first.dashes) == 9
        assert np.hypot(*(twin.ends[0] - twin.ends[1])) >= config.min_distance
    for seed in range(6):
        for label in (0, 1):
            image, markers = draw(np.random.default_rng(seed), config, label)
            assert connected(image, *markers) == bool(label)
    with pytest.raises(ValueError, match="twin_near must be 0 .* or more than 5.42 pixels"):
        PathfinderConfig(twin_near=5.0)


@pytest.fixture(scope="module")
def audits() -> dict[int, list[AuditRow]]:
    """The audit at every difficulty: fitted on seed 0, scored on held-out seed 1."""
    torch.set_num_threads(1)
    return {length: audit_task("pathfinder", {"length": length}, AUDIT_EXAMPLES) for length in LENGTHS}


@pytest.mark.parametrize("length", LENGTHS)
def test_no_cheap_baseline_tells_the_class_on_held_out_seeds(audits, length):
    """Raw pixels, ink, marker positions and distance, patches at the markers (as drawn and turned to the other
    marker), the line between the markers, component statistics at several thresholds and dilations, all of them
    together: none beats chance by what a shortcut would (the old generator's best were 0.87 / 0.77 / 0.60 from
    curve geometry at the markers and 1.00 / 0.99 / 0.97 from component statistics)."""
    rows = {row.baseline: row for row in audits[length]}
    assert {b.name for b in pathfinder_baselines()} <= set(rows)
    shortcuts = [row for row in rows.values() if row.kind == "shortcut"]
    assert len(shortcuts) >= 10 and all(row.n == AUDIT_EXAMPLES for row in shortcuts)
    known = SHORT_PATH_LEAKS.get(length, ())
    for row in shortcuts:
        if row.baseline.startswith(known):
            assert row.accuracy < 0.97, row  # the short path's leak, recorded in docs/audit-notes.md
        else:
            assert row.accuracy < SHORTCUT_CEILING, row
    assert abs(rows["majority class"].accuracy - 0.5) < 0.1


@pytest.mark.parametrize("length", LENGTHS)
def test_the_rule_solves_the_task(audits, length):
    """Both markers in one connected component (any ink, the 8-neighbourhood) is the label: the task is solvable,
    and only by following the curves."""
    rows = {row.baseline: row for row in audits[length]}
    rule = rows["the rule: both markers in one component"]
    assert rule.kind == "rule" and rule.accuracy == 1.0 and rule.low > 0.95


def test_the_task_feeds_grey_levels_as_tokens(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENMIX_DATA", str(tmp_path))
    task = create_task("pathfinder", train_size=20, val_size=10, test_size=10, progress=False)
    train = task.splits["train"]
    assert train.ids.shape == (20, 1024) and int(train.ids.min()) == 1 and int(train.ids.max()) == 256
    assert len(train.ids.unique()) > 20 and task.vocab_size == 257
    assert int(train.labels.sum()) == 10 and bool((train.lengths == 1024).all())
    assert not torch.equal(task.splits["val"].ids[:10], train.ids[:10])  # each split its own draw
    assert list((tmp_path / "pathfinder").glob("*.npz"))  # cached
    again = create_task("pathfinder", train_size=20, val_size=10, test_size=10, progress=False)
    assert torch.equal(again.splits["train"].ids, train.ids)
    shape = planned_task("pathfinder", train_size=20, val_size=10, test_size=10)
    assert shape.split_sizes() == task.split_sizes() and shape.max_len == 1024 and shape.vocab_size == 257
    with pytest.raises(ValueError, match="train_size must be an even int"):
        create_task("pathfinder", train_size=21)


def test_tokenmix_data_pathfinder_show_draws_examples(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from tokenmix.cli import main

    out = tmp_path / "examples.png"
    main(["data", "pathfinder", "--show", str(out)])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {out}" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--show draws the pictures of the task pathfinder only"):
        main(["data", "listops", "--show", str(out)])


def test_tokenmix_data_audit_prints_and_writes_the_table(tmp_path, capsys):
    from tokenmix.cli import main

    out = tmp_path / "audit.csv"
    main(["data", "audit", "recall", "--examples", "200", "--option", "preset=quick", "--csv", str(out)])
    text = capsys.readouterr().out
    assert "recall (preset=quick): held-out accuracy, 95 % Wilson interval" in text and "majority class" in text
    lines = out.read_text().splitlines()
    assert lines[0] == "task,options,baseline,kind,accuracy,low,high,n" and len(lines) == 5
    assert all(line.startswith("recall,preset=quick,") and line.endswith(",200") for line in lines[1:])
    with pytest.raises(SystemExit, match="no audit for task"):
        main(["data", "audit", "glue"])
    with pytest.raises(SystemExit, match="belong to `tokenmix data audit TASK`"):
        main(["data", "listops", "--examples", "10"])
    with pytest.raises(SystemExit, match="held-out seed must differ"):
        main(["data", "audit", "recall", "--seeds", "3", "3"])


def test_the_picture_in_the_markers_frame_follows_the_markers():
    """The audit's "picture in the markers' frame" resamples every picture centred between its markers and turned
    so that the second marker lies to the right: a pixel keeps its cell when the whole picture turns by 90 degrees
    with its markers."""
    from tokenmix.tasks.auditpathfinder import PathfinderData, _frame_picture

    image = np.zeros((1, 32, 32))
    image[0, 7, 18] = 1.0  # 3 pixels along from the midpoint (10, 15) of markers (10, 10) and (10, 20), 3 aside
    turned = np.rot90(image, k=1, axes=(1, 2)).copy()  # (r, c) -> (31 - c, r)
    markers = np.array([[[10, 10], [10, 20]]])
    turned_markers = np.array([[[21, 10], [11, 10]]])  # the same two markers after the turn, in the same order
    cells = [_frame_picture(PathfinderData(img, m, np.zeros(1, dtype=np.int64))).reshape(33, 33)
             for img, m in ((image, markers), (turned, turned_markers))]
    assert cells[0][16 + 3, 16 + 3] == 1.0 and cells[0].sum() == 1.0
    assert np.array_equal(cells[0], cells[1])
