"""Committing a sweep's result files as each run finishes (``tokenmix compare --commit``): only those paths, a
busy ``index.lock`` waited for, a failure a warning rather than the end of the sweep."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

__all__ = ["git_commit"]


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True)


def git_commit(paths: list[str | Path], message: str, *, attempts: int = 5, pause: float = 1.0) -> bool:
    """Commit ``paths`` (only them: other staged changes stay staged) in the repository that contains them,
    with ``message``; a held ``index.lock`` is waited for ``attempts`` times ``pause`` seconds. True when
    committed or when the paths had nothing new; on failure a warning on stderr and False."""
    paths = [Path(p).resolve() for p in paths]
    where = paths[0].parent
    top = _git(where, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        print(f"warning: not committed: {where} is not in a git repository ({top.stderr.strip()})",
              file=sys.stderr, flush=True)
        return False
    root = Path(top.stdout.strip())
    git_dir = Path(_git(root, "rev-parse", "--absolute-git-dir").stdout.strip())
    names = [str(p.relative_to(root.resolve())) for p in paths]
    error = ""
    for attempt in range(attempts):
        if attempt:
            time.sleep(pause)
        if (git_dir / "index.lock").exists():
            error = f"{git_dir / 'index.lock'} exists (another git command is running)"
            continue
        added = _git(root, "add", "--", *names)
        if added.returncode != 0:
            error = added.stderr.strip()
            if "index.lock" in error:
                continue
            break
        if _git(root, "diff", "--cached", "--quiet", "HEAD", "--", *names).returncode == 0:
            return True  # the files are as committed already
        done = _git(root, "commit", "-q", "-m", message, "--only", "--", *names)
        if done.returncode == 0:
            return True
        error = (done.stderr or done.stdout).strip()
        if "index.lock" not in error:
            break
    print(f"warning: git commit of {', '.join(names)} in {root} failed: {error}; the sweep goes on",
          file=sys.stderr, flush=True)
    return False
