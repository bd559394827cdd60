"""Where the project's own files live (configuration, seed kernels, recordings)."""

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
ROOT = PACKAGE_DIR.parent
CONF_DIR = ROOT / "conf"
BENCH_CONF_DIR = ROOT / "conf-bench"  # evolve-bench's own: outside conf/, so `evolve --help` does not list it
KERNELS_DIR = ROOT / "kernels"
RECORDINGS_DIR = PACKAGE_DIR / "recordings"
