"""Where the project's own files live (configuration, seed kernels, recordings): all inside the
package, so a plain wheel carries them."""

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
ROOT = PACKAGE_DIR.parent  # the checkout (tests, docs, scripts); not part of an installed wheel
CONF_DIR = PACKAGE_DIR / "conf"
# evolve-bench's own: outside conf/, so `evolve --help` does not list it
BENCH_CONF_DIR = PACKAGE_DIR / "bench" / "conf"
KERNELS_DIR = PACKAGE_DIR / "kernels"
RECORDINGS_DIR = PACKAGE_DIR / "recordings"
TEMPLATES_DIR = PACKAGE_DIR / "evolution" / "prompts"  # the prompt templates


def install_command(extra: str) -> str:
    """How to install one of the project's extras from wherever the user stands: the checkout's
    own path where evolve runs from one (``.`` means it only there), the package name otherwise."""
    if (ROOT / "pyproject.toml").is_file():
        return f"pip install -e '{ROOT}[{extra}]'"
    return f"pip install 'cuda-evolve[{extra}]'"
