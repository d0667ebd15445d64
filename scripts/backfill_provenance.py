"""One-off migration of result rows written before rows carried provenance and before threads were hashed.

    python scripts/backfill_provenance.py docs/reproduction [--dry-run]

For every ``<name>.csv`` with a ``<name>-configs.json`` in the folder:

* ``config_hash`` is recomputed with the run's torch threads added to its config (``threads`` is now part of
  what identifies a run, :func:`tokenmix.training.results.run_config`); the threads are those the experiment
  file fixed (``[train] threads``, 1 in every committed file since it was first written), and the configs file
  is rewritten under the new hashes;
* the provenance columns (:mod:`tokenmix.training.provenance`) are inferred from git history: ``commit`` is the
  commit that first added the row, ``code`` the package's code version in that commit, ``clean`` is
  ``inferred``; ``torch`` and ``cpu`` were not recorded and stay empty. A row whose inferred code is older than
  what produced it cannot be told from here: ``tokenmix compare --verify`` reruns rows and says which reproduce.

Rows that already carry a ``code`` are left as they are. Idempotent.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
from pathlib import Path

from tokenmix.training.provenance import PROVENANCE_COLUMNS, code_version_at
from tokenmix.training.results import COLUMNS, HASH_COLUMN, config_hash, read_csv, write_csv


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else ""


def _key(row: dict[str, str]) -> tuple[str, ...]:
    return tuple(row.get(c, "") for c in ("label", "seed", "value", "best_val", "wall_s"))


def first_commits(root: Path, path: Path) -> dict[tuple[str, ...], str]:
    """For each row of ``path`` as it ever was: the first commit that held it."""
    relative = path.resolve().relative_to(root.resolve()).as_posix()
    first: dict[tuple[str, ...], str] = {}
    for commit in _git(root, "log", "--reverse", "--format=%H", "--", relative).split():
        text = _git(root, "show", f"{commit}:{relative}")
        for row in csv.DictReader(io.StringIO(text)):
            first.setdefault(_key(row), commit)
    return first


def backfill(folder: Path, threads: int = 1, dry_run: bool = False) -> list[str]:
    root = Path(_git(folder, "rev-parse", "--show-toplevel").strip())
    lines = []
    for configs_path in sorted(folder.glob("*-configs.json")):
        name = configs_path.name[: -len("-configs.json")]
        path = folder / f"{name}.csv"
        if not path.exists():
            continue
        header, rows = read_csv(path)
        configs = json.loads(configs_path.read_text())
        first = first_commits(root, path)
        codes: dict[str, str | None] = {}
        new_configs: dict[str, object] = {}
        changed = 0
        for row in rows:
            if row.get("code"):
                if row[HASH_COLUMN] in configs:
                    new_configs[row[HASH_COLUMN]] = configs[row[HASH_COLUMN]]
                continue
            config = configs.get(row[HASH_COLUMN])
            if config is None:
                raise SystemExit(f"{path}: {row['label']} seed {row['seed']} has config_hash {row[HASH_COLUMN]!r}, "
                                 f"not in {configs_path}")
            config = {**config, "threads": threads}
            row[HASH_COLUMN] = config_hash(config)
            new_configs[row[HASH_COLUMN]] = config
            commit = first.get(_key(row))
            if commit is not None and commit not in codes:
                codes[commit] = code_version_at(root, commit)
            row.update({"code": codes.get(commit) or "" if commit else "", "commit": (commit or "")[:12],
                        "clean": "inferred" if commit else "", "torch": "", "threads": str(threads), "cpu": ""})
            changed += 1
        columns = COLUMNS + [HASH_COLUMN] + PROVENANCE_COLUMNS
        columns += [c for c in header if c not in columns]
        lines.append(f"{path}: {changed} of {len(rows)} rows given provenance, code versions: "
                     + ", ".join(sorted({r['code'] for r in rows})))
        if not dry_run:
            write_csv(path, columns, rows)
            configs_path.write_text(json.dumps(new_configs, indent=1, sort_keys=True) + "\n")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--threads", type=int, default=1, help="the torch threads the rows were made with")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    for line in backfill(args.folder, args.threads, args.dry_run):
        print(line)


if __name__ == "__main__":
    main()
