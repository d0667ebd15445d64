"""Write experiments/002-zoology-mqar-<N>.toml and -64-window.toml, the recall sweep (the plan and its claims live in
tokenmix.training.recallsweep); rewriting gives the same files.

    python scripts/zoology_files.py
"""

from pathlib import Path

from tokenmix.training.recallsweep import write_files

if __name__ == "__main__":
    for path in write_files(Path(__file__).resolve().parents[1] / "experiments"):
        print(path)
