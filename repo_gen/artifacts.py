"""Qualcomm's release-artifacts layout, written from this installation (``qaic-console artifacts export DIR``).

::

    DIR/llm-models/generate_llm_model_repo.py   the seed's generator: a tiny entry script over ...
    DIR/llm-models/repo_gen/                    ... this package's standard-library modules and templates
    DIR/llm-models/backend_model/               the backend modules the generator shares (standard library)
    DIR/llm-models/tests/{stream,batch}-response/client_example_{kv,causal}.py   (+ seed_client.py)
    DIR/qaic_backend_python/                    the backend folder --python_backend_dir points at:
                                                model.py, backend_model/, config.pbtxt.tmpl

Nothing in DIR needs qaic-console installed: the generator and the clients run on Python 3.8, the
generator with the standard library only, the clients with tritonclient and numpy.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from backend_model import shared_files

from .writer import BACKEND_PACKAGE, ENTRY_NAME, SKIPPED, TEMPLATE_NAME, TEMPLATES, RepoError, bundled_backend_package

PACKAGE = Path(__file__).resolve().parent
RELEASE = PACKAGE / "llm-models"  # the entry script and the sample clients (package data)
GENERATOR_MODULES = ("__init__.py", "command.py", "memory.py", "samples.py", "spec.py", "staging.py", "writer.py")
LLM_MODELS, BACKEND_DIR = "llm-models", "qaic_backend_python"


def seed_client_dir(mode: str) -> Path:
    """The packaged ``tests/<mode>-response/`` folder of the sample clients (``mode`` stream or batch)."""
    return RELEASE / "tests" / f"{mode}-response"


def _copy_files(src: Path, names: tuple[str, ...], dst: Path) -> None:
    for name in names:
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / name, dst / name)


def _fill(staged: Path) -> None:
    llm = staged / LLM_MODELS
    shutil.copytree(RELEASE, llm, ignore=shutil.ignore_patterns(*SKIPPED))  # symlinks become files
    _copy_files(PACKAGE, GENERATOR_MODULES, llm / "repo_gen")
    shutil.copytree(TEMPLATES, llm / "repo_gen" / TEMPLATES.name, ignore=shutil.ignore_patterns(*SKIPPED))
    _copy_files(bundled_backend_package(), shared_files(), llm / BACKEND_PACKAGE)
    backend = staged / BACKEND_DIR
    shutil.copytree(bundled_backend_package(), backend / BACKEND_PACKAGE, ignore=shutil.ignore_patterns(*SKIPPED))
    shutil.copy2(TEMPLATES / ENTRY_NAME, backend / ENTRY_NAME)
    shutil.copy2(TEMPLATES / TEMPLATE_NAME, backend / TEMPLATE_NAME)


def export(target: str | Path, force: bool = False) -> list[Path]:
    """Write the layout into ``target`` (created if needed); the two folders written.

    Existing ``llm-models/`` or ``qaic_backend_python/`` folders are replaced only with ``force``;
    the folders are staged beside them and renamed into place.
    """
    root = Path(target).expanduser()
    folders = [root / LLM_MODELS, root / BACKEND_DIR]
    existing = [str(f) for f in folders if f.exists()]
    if existing and not force:
        raise RepoError(f"{existing[0]} already exists (use --force to replace it)")
    root.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=".artifacts.", dir=root))
    try:
        _fill(staged)
        for folder in folders:
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(staged / folder.name, folder)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return folders
